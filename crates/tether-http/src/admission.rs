//! Who may talk to a listener of tether's on this machine.
//!
//! Checks, in this order, each with its own refusal:
//! 1. `Host` names this listener: its address as bound (`127.0.0.1:PORT`, `[::1]:PORT`) or
//!    `localhost:PORT`, the port included. A page a browser loaded from another name that
//!    resolves to 127.0.0.1 (DNS rebinding) sends its own name and is refused with 421.
//! 2. `Origin`, by the route's [`OriginRule`]: a browser sends one on every cross-origin
//!    request and on every POST; it must be `http://` + one of the hosts above. Refused with 403.
//! 3. The bearer token, when the listener has one: `Authorization: Bearer TOKEN`, compared in
//!    constant time. Refused with 401 and a `WWW-Authenticate: Bearer` challenge.
//!
//! Nothing of the request is logged here; a refusal names the check, never a header's value.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tether_secret::SecretValue;

use crate::token::constant_time_eq;

/// What a route requires of the `Origin` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OriginRule {
    /// Absent is fine (a CLI, an MCP client); present, it must be this listener.
    IfPresent,
    /// Required and this listener: a state change a browser form makes (the secret entry page's
    /// POST). An absent or `null` Origin is refused.
    Required,
}

/// Why a request was refused; [`Refusal::status`] and the [`IntoResponse`] impl answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The `Host` header is missing or names another listener.
    Host,
    /// The `Origin` header is another site's, `null`, or missing where required.
    Origin,
    /// The bearer token is missing or wrong.
    Bearer,
}

impl Refusal {
    /// The status code a refusal is answered with.
    pub fn status(self) -> StatusCode {
        match self {
            Self::Host => StatusCode::MISDIRECTED_REQUEST,
            Self::Origin => StatusCode::FORBIDDEN,
            Self::Bearer => StatusCode::UNAUTHORIZED,
        }
    }

    /// One line for the response body.
    pub fn message(self) -> &'static str {
        match self {
            Self::Host => "unexpected Host header\n",
            Self::Origin => "foreign or missing Origin\n",
            Self::Bearer => "missing or wrong bearer token\n",
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut response = (self.status(), self.message()).into_response();
        if self == Self::Bearer {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"tether\""),
            );
        }
        response
    }
}

/// Which accepted bearer token a request carried ([`Admission::caller`]; put in the request's
/// extensions by [`admit`]): its index among the tokens, never the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller(pub usize);

/// The admission of one listener: the hosts and origins that name it, and its bearer token.
#[derive(Clone)]
pub struct Admission {
    hosts: Vec<String>,
    origins: Vec<String>,
    /// `Bearer TOKEN` for each accepted token, the whole expected header value.
    bearers: Vec<SecretValue>,
    origin_rule: OriginRule,
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("hosts", &self.hosts)
            .field("bearers", &self.bearers.len())
            .field("origin_rule", &self.origin_rule)
            .finish()
    }
}

impl Admission {
    /// For a listener bound to `address` (a loopback address), without a bearer token, and
    /// [`OriginRule::IfPresent`] for [`admit`].
    pub fn for_address(address: SocketAddr) -> Self {
        // The bound address as a client writes it (`127.0.0.1:PORT`, `[::1]:PORT`), and the
        // name every loopback client may use.
        let hosts = vec![address.to_string(), format!("localhost:{}", address.port())];
        let origins = hosts.iter().map(|h| format!("http://{h}")).collect();
        Self {
            hosts,
            origins,
            bearers: Vec::new(),
            origin_rule: OriginRule::IfPresent,
        }
    }

    /// Requires `Authorization: Bearer TOKEN`; called again, accepts each token given (a
    /// request's [`Caller`] says which).
    pub fn with_bearer(mut self, token: SecretValue) -> Self {
        self.bearers
            .push(SecretValue::new(format!("Bearer {}", token.expose())));
        self
    }

    /// Which of the accepted tokens `headers` carry (its index, in the order given), compared
    /// in constant time with every one; `None` without a match or without tokens.
    pub fn caller(&self, headers: &HeaderMap) -> Option<Caller> {
        let given = headers
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes)
            .unwrap_or_default();
        let mut matched = None;
        for (index, expected) in self.bearers.iter().enumerate() {
            if constant_time_eq(given, expected.expose().as_bytes()) && matched.is_none() {
                matched = Some(Caller(index));
            }
        }
        matched
    }

    /// The Origin rule [`admit`] applies (checks made with [`Admission::check`] name their own).
    pub fn with_origin_rule(mut self, rule: OriginRule) -> Self {
        self.origin_rule = rule;
        self
    }

    /// Whether the request's headers pass every check, in the order of the module docs.
    pub fn check(&self, headers: &HeaderMap, origin: OriginRule) -> Result<(), Refusal> {
        if !self.host_ok(headers) {
            return Err(Refusal::Host);
        }
        let has_origin = headers.contains_key(header::ORIGIN);
        if (origin == OriginRule::Required || has_origin) && !self.origin_ok(headers) {
            return Err(Refusal::Origin);
        }
        if !self.bearers.is_empty() && self.caller(headers).is_none() {
            return Err(Refusal::Bearer);
        }
        Ok(())
    }

    /// Whether `headers` name this listener as their `Host` (port included).
    fn host_ok(&self, headers: &HeaderMap) -> bool {
        headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|host| self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)))
    }

    /// Whether `headers` carry an `Origin` of this listener.
    fn origin_ok(&self, headers: &HeaderMap) -> bool {
        headers
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|origin| self.origins.iter().any(|o| o.eq_ignore_ascii_case(origin)))
    }
}

/// axum middleware: `router.layer(axum::middleware::from_fn_with_state(Arc::new(admission), admit))`.
/// A refused request gets the refusal's answer and never reaches the routes.
pub async fn admit(
    State(admission): State<Arc<Admission>>,
    request: Request,
    next: Next,
) -> Response {
    match admission.check(request.headers(), admission.origin_rule) {
        Ok(()) => {
            let mut request = request;
            if let Some(caller) = admission.caller(request.headers()) {
                request.extensions_mut().insert(caller);
            }
            next.run(request).await
        }
        Err(refusal) => refusal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.clone(), HeaderValue::from_static(value));
        }
        map
    }

    fn listener() -> Admission {
        Admission::for_address("127.0.0.1:4242".parse().expect("an address"))
    }

    #[test]
    fn host_must_name_this_listener_with_its_port() {
        let a = listener();
        let ok = OriginRule::IfPresent;
        assert_eq!(
            a.check(&headers(&[(header::HOST, "127.0.0.1:4242")]), ok),
            Ok(())
        );
        assert_eq!(
            a.check(&headers(&[(header::HOST, "LOCALHOST:4242")]), ok),
            Ok(())
        );
        for host in [
            "127.0.0.1",
            "127.0.0.1:4243",
            "evil.example:4242",
            "[::1]:4242",
        ] {
            let refused = a.check(&headers(&[(header::HOST, host)]), ok);
            assert_eq!(refused, Err(Refusal::Host), "{host}");
        }
        assert_eq!(a.check(&HeaderMap::new(), ok), Err(Refusal::Host));
        let v6 = Admission::for_address("[::1]:4242".parse().expect("an address"));
        assert_eq!(
            v6.check(&headers(&[(header::HOST, "[::1]:4242")]), ok),
            Ok(())
        );
        let other = Admission::for_address("127.0.0.2:4242".parse().expect("an address"));
        assert_eq!(
            other.check(&headers(&[(header::HOST, "127.0.0.2:4242")]), ok),
            Ok(())
        );
        let refused = other.check(&headers(&[(header::HOST, "127.0.0.1:4242")]), ok);
        assert_eq!(refused, Err(Refusal::Host));
    }

    #[test]
    fn origin_follows_the_rule() {
        let a = listener();
        let host = (header::HOST, "localhost:4242");
        let same = (header::ORIGIN, "http://127.0.0.1:4242");
        let foreign = (header::ORIGIN, "http://evil.example");
        let null = (header::ORIGIN, "null");
        let if_present = OriginRule::IfPresent;
        let required = OriginRule::Required;
        assert_eq!(
            a.check(&headers(std::slice::from_ref(&host)), if_present),
            Ok(())
        );
        assert_eq!(
            a.check(&headers(std::slice::from_ref(&host)), required),
            Err(Refusal::Origin)
        );
        assert_eq!(
            a.check(&headers(&[host.clone(), same.clone()]), required),
            Ok(())
        );
        for origin in [foreign, null, (header::ORIGIN, "https://127.0.0.1:4242")] {
            for rule in [if_present, required] {
                let refused = a.check(&headers(&[host.clone(), origin.clone()]), rule);
                assert_eq!(refused, Err(Refusal::Origin), "{origin:?} {rule:?}");
            }
        }
    }

    #[test]
    fn each_accepted_token_admits_and_says_which_it_was() {
        let a = listener()
            .with_bearer(SecretValue::new("first".to_owned()))
            .with_bearer(SecretValue::new("second".to_owned()));
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:4242"));
            headers.insert(
                header::AUTHORIZATION,
                HeaderValue::from_str(value).expect("a value"),
            );
            headers
        };
        assert_eq!(a.caller(&with("Bearer first")), Some(Caller(0)));
        assert_eq!(a.caller(&with("Bearer second")), Some(Caller(1)));
        assert_eq!(a.caller(&with("Bearer third")), None);
        assert!(
            a.check(&with("Bearer second"), OriginRule::IfPresent)
                .is_ok()
        );
        assert!(
            a.check(&with("Bearer third"), OriginRule::IfPresent)
                .is_err()
        );
        assert_eq!(listener().caller(&with("Bearer first")), None);
    }

    #[test]
    fn bearer_is_the_whole_header_value() {
        let a = listener().with_bearer(SecretValue::new("s3cret".to_owned()));
        let host = (header::HOST, "127.0.0.1:4242");
        let rule = OriginRule::IfPresent;
        let ok = headers(&[host.clone(), (header::AUTHORIZATION, "Bearer s3cret")]);
        assert_eq!(a.check(&ok, rule), Ok(()));
        for given in [
            "Bearer s3cre",
            "Bearer s3cret ",
            "bearer s3cret",
            "s3cret",
            "Basic s3cret",
        ] {
            let refused = a.check(
                &headers(&[host.clone(), (header::AUTHORIZATION, given)]),
                rule,
            );
            assert_eq!(refused, Err(Refusal::Bearer), "{given}");
        }
        assert_eq!(
            a.check(&headers(std::slice::from_ref(&host)), rule),
            Err(Refusal::Bearer)
        );
        // The Host check comes first: a wrong host is told so even without a token.
        let wrong_host = headers(&[(header::HOST, "evil:4242")]);
        assert_eq!(a.check(&wrong_host, rule), Err(Refusal::Host));
        assert!(!format!("{a:?}").contains("s3cret"));
    }

    #[test]
    fn refusals_answer_with_their_status() {
        assert_eq!(
            Refusal::Host.into_response().status(),
            StatusCode::MISDIRECTED_REQUEST
        );
        assert_eq!(
            Refusal::Origin.into_response().status(),
            StatusCode::FORBIDDEN
        );
        let bearer = Refusal::Bearer.into_response();
        assert_eq!(bearer.status(), StatusCode::UNAUTHORIZED);
        assert!(bearer.headers().contains_key(header::WWW_AUTHENTICATE));
    }
}
