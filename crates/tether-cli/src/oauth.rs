//! The OAuth 2.1 client for remote MCP servers (the MCP authorization flow): discovery,
//! dynamic client registration, authorization code + PKCE S256 with `resource`, the loopback
//! redirect listener, token exchange and refresh. See specs/oauth/TECH.md.
//!
//! **Invariant:** a token or client secret is only ever a [`SecretValue`] here; no error, log
//! line or `Debug` print holds one. Errors quote what a server said only by status and the
//! `error` code of an OAuth error body.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use reqwest::Url;
use reqwest::header::{ACCEPT, CONTENT_TYPE, WWW_AUTHENTICATE};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tether_config::SecretValue;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

/// The scope that asks for a refresh token (SEP-2207), where the authorization server lists it.
const OFFLINE_ACCESS: &str = "offline_access";

/// A token this close to its expiry is refreshed before use.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// Why an OAuth step failed. Messages hold no token, code or client secret.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// A request failed or a server answered something unusable; the caller reports it.
    #[error("{0}")]
    Protocol(String),
    /// No redirect came back within the timeout; the caller asks the user to try again.
    #[error("no authorization redirect came back within {0} s")]
    TimedOut(u64),
}

fn protocol(text: impl Into<String>) -> OAuthError {
    OAuthError::Protocol(text.into())
}

/// What discovery found for a protected resource.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The canonical URL of the MCP server logged in to: the key tokens are stored under.
    pub server: String,
    /// The resource URI sent as `resource` (RFC 8707): the protected resource metadata's
    /// `resource`, else the server's URL.
    pub resource: String,
    /// The scope to ask for: `WWW-Authenticate`'s `scope`, else the resource's
    /// `scopes_supported` joined, else none; plus `offline_access` when there is one and the
    /// authorization server lists it.
    pub scope: Option<String>,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub registration_endpoint: Option<String>,
    /// `token_endpoint_auth_methods_supported` (empty when the server lists none).
    pub auth_methods: Vec<String>,
    /// `client_id_metadata_document_supported`: a client-id metadata document URL may be the
    /// client id.
    pub client_metadata_documents: bool,
}

/// A client registration: dynamic (RFC 7591) or configured.
#[derive(Debug, Clone)]
pub struct Client {
    pub client_id: String,
    pub client_secret: Option<SecretValue>,
    /// `none`, `client_secret_basic` or `client_secret_post`.
    pub auth_method: String,
}

/// What is stored per resource: the tokens and how to refresh them.
#[derive(Debug, Clone)]
pub struct Tokens {
    /// The canonical server URL: the storage key.
    pub server: String,
    pub resource: String,
    pub access_token: SecretValue,
    pub refresh_token: Option<SecretValue>,
    /// Unix seconds; `None` when the server gave no `expires_in`.
    pub expires_at: Option<i64>,
    pub token_endpoint: String,
    pub client: Client,
    /// The scope granted (the token answer's `scope`, else the one asked for); `None` when
    /// none was asked for or given.
    pub scope: Option<String>,
    /// The redirect URI the client used (a step-up listens on the same port when it can:
    /// a registered client's redirect URI is fixed).
    pub redirect_uri: Option<String>,
}

impl Tokens {
    /// Whether the access token expires within `margin` of `now` (unix seconds).
    pub fn expires_within(&self, now: i64, margin: Duration) -> bool {
        let margin = i64::try_from(margin.as_secs()).unwrap_or(i64::MAX);
        self.expires_at
            .is_some_and(|at| at.saturating_sub(now) <= margin)
    }

    /// The stored form: one JSON document, itself a secret.
    pub fn to_secret(&self) -> SecretValue {
        let value = json!({
            "server": self.server,
            "resource": self.resource,
            "access_token": self.access_token.expose(),
            "refresh_token": self.refresh_token.as_ref().map(SecretValue::expose),
            "expires_at": self.expires_at,
            "token_endpoint": self.token_endpoint,
            "client_id": self.client.client_id,
            "client_secret": self.client.client_secret.as_ref().map(SecretValue::expose),
            "auth_method": self.client.auth_method,
            "scope": self.scope,
            "redirect_uri": self.redirect_uri,
        });
        SecretValue::new(value.to_string())
    }

    /// Reads the stored form; `None` when it is not one.
    pub fn from_secret(secret: &SecretValue) -> Option<Self> {
        let value: Value = serde_json::from_str(secret.expose()).ok()?;
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
        let secret = |key: &str| {
            value
                .get(key)
                .and_then(Value::as_str)
                .map(|s| SecretValue::new(s.to_owned()))
        };
        let resource = text("resource")?;
        Some(Self {
            server: text("server").unwrap_or_else(|| resource.clone()),
            resource,
            access_token: secret("access_token")?,
            refresh_token: secret("refresh_token"),
            expires_at: value.get("expires_at").and_then(Value::as_i64),
            token_endpoint: text("token_endpoint")?,
            client: Client {
                client_id: text("client_id")?,
                client_secret: secret("client_secret"),
                auth_method: text("auth_method").unwrap_or_else(|| "none".to_owned()),
            },
            scope: text("scope"),
            redirect_uri: text("redirect_uri"),
        })
    }
}

/// The HTTP client OAuth requests use: no redirects followed (a token endpoint that
/// redirects is not followed with a code in hand), bounded time.
pub fn http_client() -> Result<reqwest::Client, OAuthError> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .user_agent(concat!("tether/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| protocol(format!("cannot build the HTTP client: {e}")))
}

/// The canonical form of an MCP server URL used as `resource` and as the storage key:
/// lower-case scheme and host, no fragment, no trailing `/` on a bare origin.
pub fn canonical_resource(url: &str) -> Result<String, OAuthError> {
    let mut parsed = Url::parse(url).map_err(|e| protocol(format!("'{url}' is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(protocol(format!("'{url}' is not an http(s) URL")));
    }
    parsed.set_fragment(None);
    let text = parsed.to_string();
    Ok(match text.strip_suffix('/') {
        Some(stripped) if parsed.path() == "/" && parsed.query().is_none() => stripped.to_owned(),
        _ => text,
    })
}

/// The parameters of a `WWW-Authenticate: Bearer …` challenge (lower-cased names).
fn challenge_params(header: &str) -> Vec<(String, String)> {
    let rest = header
        .trim()
        .strip_prefix("Bearer")
        .or_else(|| header.trim().strip_prefix("bearer"))
        .unwrap_or("");
    let mut params = Vec::new();
    let mut chars = rest.trim_start().chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let name: String = chars
            .by_ref()
            .take_while(|c| *c != '=')
            .collect::<String>()
            .trim()
            .to_ascii_lowercase();
        if name.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.peek() {
                if *c == ',' {
                    break;
                }
                value.push(*c);
                chars.next();
            }
            value = value.trim().to_owned();
        }
        params.push((name, value));
    }
    params
}

async fn get_json(http: &reqwest::Client, url: &str) -> Option<Value> {
    let response = http
        .get(url)
        .header(ACCEPT, "application/json")
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        tracing::debug!(%url, status = %response.status(), "no metadata here");
        return None;
    }
    let bytes = response.bytes().await.ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// How an unauthenticated request to the server went.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    /// It answered 401.
    pub unauthorized: bool,
    /// `resource_metadata` from its challenge.
    pub resource_metadata: Option<String>,
    /// `scope` from its challenge.
    pub scope: Option<String>,
}

/// Sends an unauthenticated MCP `initialize` to `url` and reads the challenge.
pub async fn probe(http: &reqwest::Client, url: &str) -> Result<Probe, OAuthError> {
    let body = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},
        "clientInfo":{"name":"tether","version":env!("CARGO_PKG_VERSION")}}});
    let response = http
        .post(url)
        .header(ACCEPT, "application/json, text/event-stream")
        .header(CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| protocol(format!("cannot reach {url}: {e}")))?;
    let mut probe = Probe {
        unauthorized: response.status() == reqwest::StatusCode::UNAUTHORIZED,
        ..Probe::default()
    };
    for header in response.headers().get_all(WWW_AUTHENTICATE) {
        let Ok(header) = header.to_str() else {
            continue;
        };
        for (name, value) in challenge_params(header) {
            match name.as_str() {
                "resource_metadata" => probe.resource_metadata = Some(value),
                "scope" => probe.scope = Some(value),
                _ => {}
            }
        }
    }
    Ok(probe)
}

/// Whether the protected resource `resource` covers the MCP server at `server`: the same
/// origin, and the server's path is the resource's or below it (a resource may be the bare
/// origin or a parent path of the endpoint, as the MCP authorization rules allow).
fn resource_covers(resource: &str, server: &str) -> bool {
    let (Ok(resource), Ok(server)) = (Url::parse(resource), Url::parse(server)) else {
        return false;
    };
    if resource.origin() != server.origin() {
        return false;
    }
    let parent = resource.path().trim_end_matches('/');
    let path = server.path().trim_end_matches('/');
    parent.is_empty()
        || path == parent
        || path
            .strip_prefix(parent)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// `origin` + `/.well-known/<name>` + `path` (RFC 8414/9728 path insertion), and without the
/// path.
fn well_known(url: &Url, name: &str) -> Vec<String> {
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    let mut candidates = Vec::new();
    if !path.is_empty() {
        candidates.push(format!("{origin}/.well-known/{name}{path}"));
    }
    candidates.push(format!("{origin}/.well-known/{name}"));
    candidates
}

/// Discovery for `server_url` (see the module docs and specs/oauth/TECH.md for the order).
pub async fn discover(http: &reqwest::Client, server_url: &str) -> Result<Discovered, OAuthError> {
    let server = canonical_resource(server_url)?;
    let url = Url::parse(&server).map_err(|e| protocol(e.to_string()))?;
    let probe = probe(http, server_url).await?;
    let mut candidates: Vec<String> = probe.resource_metadata.clone().into_iter().collect();
    candidates.extend(well_known(&url, "oauth-protected-resource"));
    let mut resource_metadata = None;
    for candidate in &candidates {
        if let Some(found) = get_json(http, candidate).await {
            tracing::debug!(url = %candidate, "protected resource metadata");
            resource_metadata = Some(found);
            break;
        }
    }
    // 2025-03-26 servers publish no resource metadata: the server's origin is the
    // authorization server.
    let issuer = resource_metadata
        .as_ref()
        .and_then(|m| m.get("authorization_servers"))
        .and_then(Value::as_array)
        .and_then(|servers| servers.first())
        .and_then(Value::as_str)
        .map_or_else(|| url.origin().ascii_serialization(), str::to_owned);
    let resource = resource_metadata
        .as_ref()
        .and_then(|m| m.get("resource"))
        .and_then(Value::as_str)
        .map_or_else(|| server.clone(), str::to_owned);
    // RFC 9728 §3.3: metadata for another resource is not this server's; a token asked for
    // it would be for someone else.
    if !resource_covers(&resource, &server) {
        return Err(protocol(format!(
            "the protected resource metadata of {server} is for another resource ({resource}): not authorizing"
        )));
    }
    let scope = probe.scope.clone().or_else(|| {
        let scopes: Vec<&str> = resource_metadata
            .as_ref()?
            .get("scopes_supported")?
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        (!scopes.is_empty()).then(|| scopes.join(" "))
    });
    let issuer_url = Url::parse(&issuer)
        .map_err(|e| protocol(format!("authorization server '{issuer}': {e}")))?;
    // RFC 8414 §3.1 and OIDC discovery: an issuer with a path is never looked up at the root.
    let issuer_origin = issuer_url.origin().ascii_serialization();
    let issuer_path = issuer_url.path().trim_end_matches('/');
    let as_candidates = if issuer_path.is_empty() {
        vec![
            format!("{issuer_origin}/.well-known/oauth-authorization-server"),
            format!("{issuer_origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{issuer_origin}/.well-known/oauth-authorization-server{issuer_path}"),
            format!("{issuer_origin}/.well-known/openid-configuration{issuer_path}"),
            format!("{issuer_origin}{issuer_path}/.well-known/openid-configuration"),
        ]
    };
    let mut metadata = None;
    for candidate in &as_candidates {
        if let Some(found) = get_json(http, candidate).await {
            tracing::debug!(url = %candidate, "authorization server metadata");
            metadata = Some(found);
            break;
        }
    }
    let origin = issuer_url.origin().ascii_serialization();
    let field = |name: &str| {
        metadata
            .as_ref()
            .and_then(|m| m.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let (authorization_endpoint, token_endpoint, registration_endpoint) = match &metadata {
        Some(_) => (
            field("authorization_endpoint").ok_or_else(|| {
                protocol("the authorization server metadata has no authorization_endpoint")
            })?,
            field("token_endpoint").ok_or_else(|| {
                protocol("the authorization server metadata has no token_endpoint")
            })?,
            field("registration_endpoint"),
        ),
        // The 2025-03-26 default endpoints.
        None => (
            format!("{origin}/authorize"),
            format!("{origin}/token"),
            Some(format!("{origin}/register")),
        ),
    };
    let client_metadata_documents = metadata
        .as_ref()
        .and_then(|m| m.get("client_id_metadata_document_supported"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let auth_methods = metadata
        .as_ref()
        .and_then(|m| m.get("token_endpoint_auth_methods_supported"))
        .and_then(Value::as_array)
        .map(|methods| {
            methods
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    // SEP-2207: tether wants a refresh token; where the authorization server lists
    // `offline_access`, it is asked for too (never where it is not listed).
    let offline = metadata
        .as_ref()
        .and_then(|m| m.get("scopes_supported"))
        .and_then(Value::as_array)
        .is_some_and(|scopes| scopes.iter().any(|s| s.as_str() == Some(OFFLINE_ACCESS)));
    let scope = match scope {
        Some(scope) if offline && !scope.split_whitespace().any(|s| s == OFFLINE_ACCESS) => {
            Some(format!("{scope} {OFFLINE_ACCESS}"))
        }
        scope => scope,
    };
    Ok(Discovered {
        server,
        resource,
        scope,
        authorization_endpoint,
        token_endpoint,
        registration_endpoint,
        auth_methods,
        client_metadata_documents,
    })
}

/// Checks a client-id metadata document URL (draft-ietf-oauth-client-id-metadata-document):
/// `https` with a path beyond `/` and no fragment.
pub fn client_metadata_url(url: &str) -> Result<String, OAuthError> {
    let parsed = Url::parse(url).map_err(|e| protocol(format!("'{url}' is not a URL: {e}")))?;
    if parsed.scheme() != "https" || parsed.path().len() <= 1 || parsed.fragment().is_some() {
        return Err(protocol(format!(
            "'{url}' cannot be a client-id metadata document URL: it must be https, with a path, without a fragment"
        )));
    }
    Ok(url.to_owned())
}

/// The client a client-id metadata document URL stands for: the URL is the client id, a
/// public client (the document says `none`).
pub fn metadata_document_client(url: &str) -> Client {
    Client {
        client_id: url.to_owned(),
        client_secret: None,
        auth_method: "none".to_owned(),
    }
}

/// Dynamic client registration (RFC 7591) for `redirect_uri`.
pub async fn register(
    http: &reqwest::Client,
    discovered: &Discovered,
    redirect_uri: &str,
) -> Result<Client, OAuthError> {
    let endpoint = discovered.registration_endpoint.as_deref().ok_or_else(|| {
        protocol("the authorization server offers no dynamic client registration; pass --client-id")
    })?;
    // A public client (no secret) unless the server only takes the secret-based methods.
    let method = if discovered.auth_methods.is_empty()
        || discovered.auth_methods.iter().any(|m| m == "none")
    {
        "none"
    } else if discovered
        .auth_methods
        .iter()
        .any(|m| m == "client_secret_basic")
    {
        "client_secret_basic"
    } else {
        "client_secret_post"
    };
    let mut body = json!({
        "client_name": "tether",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method,
    });
    if let Some(scope) = &discovered.scope {
        body["scope"] = json!(scope);
    }
    let response = http
        .post(endpoint)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| protocol(format!("client registration at {endpoint}: {e}")))?;
    let (status, answer) = json_answer(response).await;
    if !status.is_success() {
        return Err(protocol(format!(
            "client registration at {endpoint} answered {status}{}",
            oauth_error_code(&answer)
        )));
    }
    let client_id = answer
        .get("client_id")
        .and_then(Value::as_str)
        .ok_or_else(|| protocol("the registration answer has no client_id"))?
        .to_owned();
    let client_secret = answer
        .get("client_secret")
        .and_then(Value::as_str)
        .map(|s| SecretValue::new(s.to_owned()));
    let auth_method = answer
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str)
        .map_or_else(
            || {
                if client_secret.is_some() && method == "none" {
                    "client_secret_basic".to_owned()
                } else {
                    method.to_owned()
                }
            },
            str::to_owned,
        );
    Ok(Client {
        client_id,
        client_secret,
        auth_method,
    })
}

/// An authorization server's answer: its status and its body as JSON (`Null` when it is not
/// JSON); the raw body, which may hold tokens or a client secret, is zeroed once parsed.
async fn json_answer(response: reqwest::Response) -> (reqwest::StatusCode, Value) {
    let status = response.status();
    let bytes = zeroize::Zeroizing::new(
        response
            .bytes()
            .await
            .map(|b| b.to_vec())
            .unwrap_or_default(),
    );
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// ` (error: CODE)` from an OAuth error body, or nothing. The code is a fixed vocabulary, not
/// a secret; descriptions are not quoted.
fn oauth_error_code(answer: &Value) -> String {
    answer
        .get("error")
        .and_then(Value::as_str)
        .filter(|code| code.len() <= 64 && code.bytes().all(|b| b.is_ascii_graphic()))
        .map(|code| format!(" (error: {code})"))
        .unwrap_or_default()
}

fn random_token(bytes: usize) -> Result<String, OAuthError> {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).map_err(|e| protocol(format!("no randomness: {e}")))?;
    Ok(URL_SAFE_NO_PAD.encode(buffer))
}

/// A PKCE pair and `state` for one authorization request.
pub struct Pending {
    pub verifier: SecretValue,
    pub state: String,
    pub url: String,
    pub redirect_uri: String,
}

/// Builds the authorization URL (code + PKCE S256 + `state` + `resource` + `scope`).
pub fn authorization_request(
    discovered: &Discovered,
    client: &Client,
    redirect_uri: &str,
) -> Result<Pending, OAuthError> {
    let verifier = SecretValue::new(random_token(32)?);
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.expose().as_bytes()));
    let state = random_token(16)?;
    let mut url = Url::parse(&discovered.authorization_endpoint)
        .map_err(|e| protocol(format!("authorization_endpoint: {e}")))?;
    {
        let mut query = url.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", &client.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", &state)
            .append_pair("resource", &discovered.resource);
        if let Some(scope) = &discovered.scope {
            query.append_pair("scope", scope);
        }
    }
    Ok(Pending {
        verifier,
        state,
        url: url.to_string(),
        redirect_uri: redirect_uri.to_owned(),
    })
}

/// The code from a redirect URL (or its path and query), after checking `state`.
pub fn code_from_redirect(target: &str, state: &str) -> Result<SecretValue, OAuthError> {
    let url = Url::parse(target)
        .or_else(|_| Url::parse(&format!("http://127.0.0.1{target}")))
        .map_err(|_| protocol("the redirect is not a URL"))?;
    let mut code = None;
    let mut got_state = None;
    let mut error = None;
    for (name, value) in url.query_pairs() {
        match &*name {
            "code" => code = Some(SecretValue::new(value.into_owned())),
            "state" => got_state = Some(value.into_owned()),
            "error" => error = Some(value.into_owned()),
            _ => {}
        }
    }
    if got_state.as_deref() != Some(state) {
        return Err(protocol(
            "the redirect's state does not match this login (a stale or forged redirect)",
        ));
    }
    if let Some(error) = error {
        let error: String = error
            .chars()
            .filter(char::is_ascii_graphic)
            .take(64)
            .collect();
        return Err(protocol(format!(
            "the authorization server refused: {error}"
        )));
    }
    code.ok_or_else(|| protocol("the redirect holds no code"))
}

/// The scope to ask for in a step-up after a 403 whose `WWW-Authenticate` is `challenge`:
/// the challenge's `scope` joined to `held` (what the token has), in that order, without
/// repeats. `None` when the challenge is not `insufficient_scope`, names no scope, or names
/// only scopes already held (asking again would not change the answer).
pub fn step_up_scope(challenge: &str, held: Option<&str>) -> Option<String> {
    let params = challenge_params(challenge);
    let param = |name: &str| {
        params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    if param("error") != Some("insufficient_scope") {
        return None;
    }
    let held: Vec<&str> = held.unwrap_or("").split_whitespace().collect();
    let wanted: Vec<&str> = param("scope")?.split_whitespace().collect();
    if wanted.iter().all(|scope| held.contains(scope)) {
        return None;
    }
    let mut scopes = held;
    for scope in wanted {
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    Some(scopes.join(" "))
}

/// The loopback listener the authorization server redirects to.
pub struct Listener {
    listener: tokio::net::TcpListener,
    pub redirect_uri: String,
}

impl Listener {
    /// Binds 127.0.0.1 on a random port.
    pub async fn bind() -> Result<Self, OAuthError> {
        Self::bind_on(0).await
    }

    /// Binds 127.0.0.1 on the port of `redirect_uri` (a registered client's), else a random
    /// one.
    pub async fn bind_like(redirect_uri: Option<&str>) -> Result<Self, OAuthError> {
        let port = redirect_uri
            .and_then(|uri| Url::parse(uri).ok())
            .and_then(|url| url.port());
        if let Some(port) = port
            && let Ok(listener) = Self::bind_on(port).await
        {
            return Ok(listener);
        }
        Self::bind().await
    }

    async fn bind_on(port: u16) -> Result<Self, OAuthError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|e| protocol(format!("cannot listen on 127.0.0.1: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| protocol(e.to_string()))?
            .port();
        Ok(Self {
            listener,
            redirect_uri: format!("http://127.0.0.1:{port}/callback"),
        })
    }

    /// Waits for the one redirect carrying `state`; other requests get 400 and the wait goes
    /// on. The listener closes after the first matching redirect.
    pub async fn code(self, state: &str, timeout: Duration) -> Result<SecretValue, OAuthError> {
        let wait = async {
            loop {
                let Ok((stream, _)) = self.listener.accept().await else {
                    continue;
                };
                match serve_one(stream, state).await {
                    Some(outcome) => return outcome,
                    None => continue,
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| OAuthError::TimedOut(timeout.as_secs()))?
    }
}

/// One request on the listener: `Some` when it was the redirect (with a code or an error).
async fn serve_one(
    stream: tokio::net::TcpStream,
    state: &str,
) -> Option<Result<SecretValue, OAuthError>> {
    let mut reader = tokio::io::BufReader::new(stream);
    let mut line = String::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        reader.read_line(&mut line).await?;
        // Drain the headers.
        let mut header = String::new();
        loop {
            header.clear();
            if reader.read_line(&mut header).await? <= 2 {
                break;
            }
            if header.len() > 8192 {
                break;
            }
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
    if !matches!(read, Ok(Ok(()))) {
        return None;
    }
    let target = line.split_whitespace().nth(1).unwrap_or("").to_owned();
    let is_callback = target.starts_with("/callback?") && line.starts_with("GET ");
    let outcome = is_callback.then(|| code_from_redirect(&target, state));
    let (status, text) = match &outcome {
        Some(Ok(_)) => ("200 OK", "tether: login complete. You can close this page."),
        Some(Err(_)) => ("400 Bad Request", "tether: this redirect was not accepted."),
        None => ("404 Not Found", "not found"),
    };
    let mut stream = reader.into_inner();
    let _ = stream
        .write_all(
            format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncache-control: no-store\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            )
            .as_bytes(),
        )
        .await;
    let _ = stream.shutdown().await;
    // A wrong state is not this login's redirect: keep waiting for the right one.
    match outcome {
        Some(Err(OAuthError::Protocol(ref why))) if why.contains("state") => None,
        other => other,
    }
}

/// Reads one pasted redirect URL from stdin (`--no-browser`).
pub async fn pasted_code(state: &str) -> Result<SecretValue, OAuthError> {
    let mut line = String::new();
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let mut byte = [0u8; 1];
    while stdin
        .read(&mut byte)
        .await
        .map_err(|e| protocol(e.to_string()))?
        == 1
    {
        if byte[0] == b'\n' {
            break;
        }
        line.push(char::from(byte[0]));
    }
    code_from_redirect(line.trim(), state)
}

/// Sends a token request and reads the answer into [`Tokens`]; `previous_refresh` is kept
/// when the answer holds no new refresh token.
async fn token_request(
    http: &reqwest::Client,
    token_endpoint: &str,
    resource: &str,
    client: &Client,
    mut form: Vec<(&str, String)>,
    previous: Previous,
) -> Result<Tokens, OAuthError> {
    form.push(("resource", resource.to_owned()));
    let mut request = http.post(token_endpoint).header(ACCEPT, "application/json");
    match (client.auth_method.as_str(), &client.client_secret) {
        ("client_secret_basic", Some(secret)) => {
            request = request.basic_auth(
                url_encode(&client.client_id),
                Some(url_encode(secret.expose())),
            );
        }
        ("client_secret_post", Some(secret)) => {
            form.push(("client_id", client.client_id.clone()));
            form.push(("client_secret", secret.expose().to_owned()));
        }
        _ => form.push(("client_id", client.client_id.clone())),
    }
    let body = form_body(&form);
    // The form held the code, verifier or refresh token: zero it.
    for (_, value) in &mut form {
        zeroize::Zeroize::zeroize(value);
    }
    let response = request
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(body.expose().to_owned())
        .send()
        .await
        .map_err(|e| {
            protocol(format!(
                "token request to {token_endpoint}: {}",
                e.without_url()
            ))
        })?;
    let (status, answer) = json_answer(response).await;
    if !status.is_success() {
        return Err(protocol(format!(
            "the token endpoint {token_endpoint} answered {status}{}",
            oauth_error_code(&answer)
        )));
    }
    let access_token = answer
        .get("access_token")
        .and_then(Value::as_str)
        .ok_or_else(|| protocol("the token answer has no access_token"))?;
    let now = now_unix();
    Ok(Tokens {
        server: resource.to_owned(),
        resource: resource.to_owned(),
        access_token: SecretValue::new(access_token.to_owned()),
        refresh_token: answer
            .get("refresh_token")
            .and_then(Value::as_str)
            .map(|s| SecretValue::new(s.to_owned()))
            .or(previous.refresh_token),
        expires_at: answer
            .get("expires_in")
            .and_then(Value::as_i64)
            .map(|seconds| now.saturating_add(seconds)),
        token_endpoint: token_endpoint.to_owned(),
        client: client.clone(),
        scope: answer
            .get("scope")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or(previous.scope),
        redirect_uri: previous.redirect_uri,
    })
}

/// What a token answer may leave out and is then kept from before.
struct Previous {
    refresh_token: Option<SecretValue>,
    scope: Option<String>,
    redirect_uri: Option<String>,
}

fn url_encode(text: &str) -> String {
    let mut url = Url::parse("http://x/").unwrap_or_else(|_| unreachable!("a constant URL"));
    url.query_pairs_mut().append_pair("v", text);
    url.query()
        .unwrap_or("")
        .trim_start_matches("v=")
        .to_owned()
}

fn form_body(form: &[(&str, String)]) -> SecretValue {
    let mut url = Url::parse("http://x/").unwrap_or_else(|_| unreachable!("a constant URL"));
    {
        let mut query = url.query_pairs_mut();
        for (name, value) in form {
            query.append_pair(name, value);
        }
    }
    SecretValue::new(url.query().unwrap_or("").to_owned())
}

/// Exchanges an authorization code for tokens.
pub async fn exchange(
    http: &reqwest::Client,
    discovered: &Discovered,
    client: &Client,
    pending: &Pending,
    code: &SecretValue,
) -> Result<Tokens, OAuthError> {
    let mut tokens = token_request(
        http,
        &discovered.token_endpoint,
        &discovered.resource,
        client,
        vec![
            ("grant_type", "authorization_code".to_owned()),
            ("code", code.expose().to_owned()),
            ("redirect_uri", pending.redirect_uri.clone()),
            ("code_verifier", pending.verifier.expose().to_owned()),
        ],
        Previous {
            refresh_token: None,
            scope: discovered.scope.clone(),
            redirect_uri: Some(pending.redirect_uri.clone()),
        },
    )
    .await?;
    tokens.server.clone_from(&discovered.server);
    Ok(tokens)
}

/// Refreshes `tokens` with their refresh token.
pub async fn refresh(http: &reqwest::Client, tokens: &Tokens) -> Result<Tokens, OAuthError> {
    let refresh_token = tokens
        .refresh_token
        .clone()
        .ok_or_else(|| protocol("no refresh token is stored"))?;
    let mut fresh = token_request(
        http,
        &tokens.token_endpoint,
        &tokens.resource,
        &tokens.client,
        vec![
            ("grant_type", "refresh_token".to_owned()),
            ("refresh_token", refresh_token.expose().to_owned()),
        ],
        Previous {
            refresh_token: Some(refresh_token),
            scope: tokens.scope.clone(),
            redirect_uri: tokens.redirect_uri.clone(),
        },
    )
    .await?;
    fresh.server.clone_from(&tokens.server);
    Ok(fresh)
}

/// Seconds since the Unix epoch.
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenge_parameters_quoted_and_bare() {
        let params = challenge_params(
            r#"Bearer error="invalid_token", resource_metadata="http://a/.well-known/oauth-protected-resource/mcp", scope=read"#,
        );
        assert_eq!(
            params,
            vec![
                ("error".to_owned(), "invalid_token".to_owned()),
                (
                    "resource_metadata".to_owned(),
                    "http://a/.well-known/oauth-protected-resource/mcp".to_owned()
                ),
                ("scope".to_owned(), "read".to_owned()),
            ]
        );
    }

    #[test]
    fn step_up_asks_for_what_is_missing_only() {
        let challenge = |scope: &str| {
            format!(
                r#"Bearer error="insufficient_scope", scope="{scope}", resource_metadata="http://a/x""#
            )
        };
        assert_eq!(
            step_up_scope(&challenge("mcp mcp:write"), Some("mcp")).as_deref(),
            Some("mcp mcp:write")
        );
        assert_eq!(
            step_up_scope(&challenge("b"), Some("a c")).as_deref(),
            Some("a c b")
        );
        assert_eq!(
            step_up_scope(&challenge("write"), None).as_deref(),
            Some("write")
        );
        assert_eq!(step_up_scope(&challenge("a"), Some("a b")), None);
        assert_eq!(
            step_up_scope(r#"Bearer error="invalid_token", scope="x""#, None),
            None
        );
        assert_eq!(
            step_up_scope(r#"Bearer error="insufficient_scope""#, None),
            None
        );
    }

    #[test]
    fn client_metadata_urls_are_https_with_a_path() {
        assert!(client_metadata_url("https://example.com/tether.json").is_ok());
        for bad in [
            "http://example.com/tether.json",
            "https://example.com/",
            "https://example.com",
            "https://example.com/c.json#x",
            "not a url",
        ] {
            assert!(client_metadata_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_resource_covers_its_own_url_and_what_is_below_it() {
        let server = "http://127.0.0.1:8/tenant/mcp";
        for resource in [
            "http://127.0.0.1:8",
            "http://127.0.0.1:8/",
            "http://127.0.0.1:8/tenant",
            "http://127.0.0.1:8/tenant/mcp",
            "http://127.0.0.1:8/tenant/mcp/",
        ] {
            assert!(resource_covers(resource, server), "{resource}");
        }
        for resource in [
            "https://evil.example.com/mcp",
            "http://127.0.0.1:9/tenant/mcp",
            "https://127.0.0.1:8/tenant/mcp",
            "http://127.0.0.1:8/ten",
            "http://127.0.0.1:8/tenant/mcp/deeper",
            "not a url",
        ] {
            assert!(!resource_covers(resource, server), "{resource}");
        }
    }

    #[test]
    fn canonical_resource_forms() {
        assert_eq!(
            canonical_resource("HTTP://Example.COM/").expect("parsing a URL"),
            "http://example.com"
        );
        assert_eq!(
            canonical_resource("https://a.example/mcp#x").expect("parsing a URL"),
            "https://a.example/mcp"
        );
    }

    #[test]
    fn redirect_state_is_checked() {
        let code =
            code_from_redirect("/callback?code=abc&state=s1", "s1").expect("a good redirect");
        assert_eq!(code.expose(), "abc");
        assert!(code_from_redirect("/callback?code=abc&state=s2", "s1").is_err());
        assert!(code_from_redirect("/callback?code=abc", "s1").is_err());
        assert!(code_from_redirect("/callback?error=access_denied&state=s1", "s1").is_err());
    }

    #[test]
    fn stored_form_round_trips() {
        let tokens = Tokens {
            server: "http://127.0.0.1:1/mcp".to_owned(),
            resource: "http://127.0.0.1:1/mcp".to_owned(),
            access_token: "a".into(),
            refresh_token: Some("r".into()),
            expires_at: Some(100),
            token_endpoint: "http://127.0.0.1:1/token".to_owned(),
            client: Client {
                client_id: "c".to_owned(),
                client_secret: None,
                auth_method: "none".to_owned(),
            },
            scope: Some("mcp".to_owned()),
            redirect_uri: Some("http://127.0.0.1:2/callback".to_owned()),
        };
        let back = Tokens::from_secret(&tokens.to_secret()).expect("reading the stored form");
        assert_eq!(back.access_token.expose(), "a");
        assert_eq!(back.server, "http://127.0.0.1:1/mcp");
        assert_eq!(
            back.refresh_token.as_ref().map(SecretValue::expose),
            Some("r")
        );
        assert_eq!(back.expires_at, Some(100));
        assert_eq!(back.scope.as_deref(), Some("mcp"));
        assert_eq!(
            back.redirect_uri.as_deref(),
            Some("http://127.0.0.1:2/callback")
        );
        assert!(back.expires_within(50, Duration::from_secs(60)));
        assert!(!back.expires_within(0, Duration::from_secs(60)));
    }
}
