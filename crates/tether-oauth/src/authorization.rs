//! The authorization request (code + PKCE S256, RFC 7636, with `state`, `resource` and
//! `scope`) and the redirect that answers it.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use reqwest::Url;
use sha2::{Digest as _, Sha256};
use tether_config::SecretValue;

use crate::discovery::Discovered;
use crate::error::OAuthError;
use crate::registration::ClientRegistration;

/// One authorization request: its URL, and what its redirect and code exchange are checked
/// against.
#[derive(Debug)]
pub struct Pending {
    /// The PKCE code verifier (32 random bytes as 64 hex digits), sent with the code.
    pub verifier: SecretValue,
    /// The `state` (16 random bytes as hex) its redirect must carry.
    pub state: String,
    /// The authorization URL the browser is sent to.
    pub url: String,
    /// The redirect URI it names, sent again with the code.
    pub redirect_uri: String,
    /// What the response's `iss` is held to (RFC 9207).
    pub iss: IssCheck,
}

/// What an authorization response's `iss` (RFC 9207) is held to: the issuer discovery
/// recorded (the authorization server metadata's `issuer`, exactly as written), and whether
/// the server advertised `authorization_response_iss_parameter_supported`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IssCheck {
    /// The recorded issuer; `None` when no metadata named one (the 2025-03-26 default
    /// endpoints), so there is nothing to compare with.
    pub issuer: Option<String>,
    /// Whether the response must carry `iss`.
    pub required: bool,
}

impl IssCheck {
    /// Holds `got` (the response's `iss`, if any) to the recorded issuer: equal as strings,
    /// with no URL normalisation (RFC 9207 §2.4: a trailing slash or a case change is another
    /// issuer); absent only where not advertised. A present `iss` is compared even when
    /// not advertised.
    fn check(&self, got: Option<&str>) -> Result<(), OAuthError> {
        match (got, &self.issuer) {
            (Some(got), Some(expected)) if got == expected => Ok(()),
            (Some(got), Some(expected)) => Err(OAuthError::IssMismatch {
                expected: expected.clone(),
                found: Some(crate::error::printable(got)),
            }),
            (None, Some(expected)) if self.required => Err(OAuthError::IssMismatch {
                expected: expected.clone(),
                found: None,
            }),
            _ => Ok(()),
        }
    }
}

/// The PKCE S256 challenge of `verifier`: base64url (no padding) of its SHA-256.
pub fn code_challenge(verifier: &SecretValue) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.expose().as_bytes()))
}

/// Builds the authorization URL (code + PKCE S256 + `state` + `resource` + `scope`) with a
/// fresh verifier, registered for log masking, and a fresh `state`.
pub fn authorization_request(
    discovered: &Discovered,
    client: &ClientRegistration,
    redirect_uri: &str,
) -> Result<Pending, OAuthError> {
    let verifier = tether_http::token::generate()?;
    tether_log::register([&verifier]);
    let state = tether_http::token::random_hex(16)?;
    // The URL goes to a browser opener: https, or http to loopback, nothing else.
    let mut url = crate::resource::web_endpoint(
        "authorization_endpoint",
        &discovered.authorization_endpoint,
    )?;
    {
        let mut query = url.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", &client.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("code_challenge", &code_challenge(&verifier))
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
        iss: IssCheck {
            issuer: discovered.issuer.clone(),
            required: discovered.iss_parameter_supported,
        },
    })
}

/// The code of a redirect (a whole URL, or its path and query), after checking `state`; the
/// code is registered for log masking. A wrong or missing `state` is
/// [`OAuthError::StateMismatch`], checked before anything else the redirect says.
pub fn code_from_redirect(target: &str, state: &str) -> Result<SecretValue, OAuthError> {
    code_from_response(target, state, &IssCheck::default())
}

/// [`code_from_redirect`], with the response's `iss` held to `iss` after `state` is checked
/// and before its `error` or code is believed: a mismatch (or a missing `iss` the server
/// said it sends) is [`OAuthError::IssMismatch`], a possible mix-up attack.
pub fn code_from_response(
    target: &str,
    state: &str,
    iss: &IssCheck,
) -> Result<SecretValue, OAuthError> {
    // The text holds the code: it is zeroed when done.
    let absolute = zeroize::Zeroizing::new(format!("http://127.0.0.1{target}"));
    let url = Url::parse(target)
        .or_else(|_| Url::parse(&absolute))
        .map_err(|_| OAuthError::RedirectNotAUrl)?;
    let mut code = None;
    let mut got_state = None;
    let mut error = None;
    let mut got_iss = None;
    for (name, value) in url.query_pairs() {
        match &*name {
            "iss" => got_iss = Some(value.into_owned()),
            "code" => code = Some(SecretValue::new(value.into_owned())),
            "state" => got_state = Some(value.into_owned()),
            "error" => error = Some(value.into_owned()),
            _ => {}
        }
    }
    if got_state.as_deref() != Some(state) {
        return Err(OAuthError::StateMismatch);
    }
    iss.check(got_iss.as_deref())?;
    if let Some(error) = error {
        return Err(OAuthError::AuthorizationRefused {
            code: error
                .chars()
                .filter(char::is_ascii_graphic)
                .take(64)
                .collect(),
        });
    }
    let code = code.ok_or(OAuthError::NoCode)?;
    tether_log::register([&code]);
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registration::AuthMethod;

    fn discovered(scope: Option<&str>) -> Discovered {
        Discovered {
            issuer: Some("http://127.0.0.1:1".to_owned()),
            iss_parameter_supported: false,
            dpop_algs: Vec::new(),
            server: "http://127.0.0.1:1/mcp".to_owned(),
            resource: "http://127.0.0.1:1".to_owned(),
            scope: scope.map(str::to_owned),
            authorization_endpoint: "http://127.0.0.1:1/authorize?tenant=a".to_owned(),
            token_endpoint: "http://127.0.0.1:1/token".to_owned(),
            registration_endpoint: None,
            auth_methods: Vec::new(),
            grant_types: Vec::new(),
            client_metadata_documents: false,
        }
    }

    fn client() -> ClientRegistration {
        ClientRegistration {
            client_id: "client 1".to_owned(),
            client_secret: None,
            auth_method: AuthMethod::None,
        }
    }

    #[test]
    fn the_request_carries_an_s256_challenge_of_its_verifier() {
        let redirect = "http://127.0.0.1:2/callback";
        let pending =
            authorization_request(&discovered(Some("mcp offline_access")), &client(), redirect)
                .expect("an authorization request");
        let verifier = pending.verifier.expose();
        assert_eq!(verifier.len(), 64);
        assert!(verifier.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(pending.state.len(), 32);
        let url = Url::parse(&pending.url).expect("a URL");
        let query: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        let param = |name: &str| {
            query
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.as_str())
        };
        assert_eq!(
            param("tenant"),
            Some("a"),
            "the endpoint's own query is kept"
        );
        assert_eq!(param("response_type"), Some("code"));
        assert_eq!(param("client_id"), Some("client 1"));
        assert_eq!(param("redirect_uri"), Some(redirect));
        assert_eq!(param("code_challenge_method"), Some("S256"));
        assert_eq!(
            param("code_challenge"),
            Some(code_challenge(&pending.verifier).as_str())
        );
        assert_eq!(param("state"), Some(pending.state.as_str()));
        assert_eq!(param("resource"), Some("http://127.0.0.1:1"));
        assert_eq!(param("scope"), Some("mcp offline_access"));
        assert!(!pending.url.contains(verifier), "the verifier never leaves");

        let other = authorization_request(&discovered(None), &client(), redirect)
            .expect("an authorization request");
        assert_ne!(other.verifier, pending.verifier);
        assert_ne!(other.state, pending.state);
        assert!(!other.url.contains("scope="));
    }

    #[test]
    fn the_challenge_is_the_unpadded_base64url_of_the_sha256() {
        // SHA-256("abc") is ba7816bf…f20015ad (FIPS 180-2's first example).
        let verifier = SecretValue::from("abc");
        assert_eq!(
            code_challenge(&verifier),
            "ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0"
        );
    }

    #[test]
    fn a_redirect_with_another_state_is_a_state_mismatch() {
        let code =
            code_from_redirect("/callback?code=abc&state=s1", "s1").expect("a good redirect");
        assert_eq!(code.expose(), "abc");
        let full = code_from_redirect("http://127.0.0.1:9/callback?state=s1&code=a%20b", "s1")
            .expect("a whole URL");
        assert_eq!(full.expose(), "a b");
        for forged in [
            "/callback?code=abc&state=s2",
            "/callback?code=abc",
            // The state is checked before the error is believed.
            "/callback?error=access_denied&state=s2",
        ] {
            assert!(
                matches!(
                    code_from_redirect(forged, "s1"),
                    Err(OAuthError::StateMismatch)
                ),
                "{forged}"
            );
        }
    }

    #[test]
    fn a_refusal_or_a_missing_code_is_its_own_error() {
        match code_from_redirect("/callback?error=access_denied%0Aforged&state=s1", "s1") {
            Err(OAuthError::AuthorizationRefused { code }) => {
                assert_eq!(code, "access_deniedforged")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            code_from_redirect("/callback?state=s1", "s1"),
            Err(OAuthError::NoCode)
        ));
    }

    #[test]
    fn the_iss_of_a_response_must_be_the_recorded_issuer_exactly() {
        let issuer = "http://127.0.0.1:1";
        let advertised = IssCheck {
            issuer: Some(issuer.to_owned()),
            required: true,
        };
        let unadvertised = IssCheck {
            required: false,
            ..advertised.clone()
        };
        let with_iss = |iss: &str| {
            let mut url =
                Url::parse("http://127.0.0.1/callback?code=c0de&state=s1").expect("a URL");
            url.query_pairs_mut().append_pair("iss", iss);
            format!("/callback?{}", url.query().unwrap_or_default())
        };
        for check in [&advertised, &unadvertised] {
            let code = code_from_response(&with_iss(issuer), "s1", check).expect("the same iss");
            assert_eq!(code.expose(), "c0de");
            // No normalisation: a trailing slash, another case or an explicit port is another
            // issuer.
            for other in [
                "http://127.0.0.1:1/",
                "HTTP://127.0.0.1:1",
                "http://127.0.0.1:01",
                "https://evil.example",
            ] {
                match code_from_response(&with_iss(other), "s1", check) {
                    Err(error @ OAuthError::IssMismatch { .. }) => {
                        let line = error.to_string();
                        assert!(line.contains(other) && line.contains(issuer), "{line}");
                        assert!(!line.contains('\n') && !line.contains("c0de"), "{line}");
                    }
                    got => panic!("{other}: {got:?}"),
                }
            }
            // The iss is checked before the error is believed, after the state.
            let refused = format!("{}&error=access_denied", with_iss("https://evil.example"));
            assert!(matches!(
                code_from_response(&refused, "s1", check),
                Err(OAuthError::IssMismatch { .. })
            ));
            assert!(matches!(
                code_from_response(&with_iss("https://evil.example"), "s2", check),
                Err(OAuthError::StateMismatch)
            ));
        }
        // Missing: refused where advertised, accepted where not.
        let bare = "/callback?code=c0de&state=s1";
        match code_from_response(bare, "s1", &advertised) {
            Err(error @ OAuthError::IssMismatch { found: None, .. }) => {
                assert!(error.to_string().contains("carries no iss"), "{error}");
            }
            got => panic!("{got:?}"),
        }
        assert!(code_from_response(bare, "s1", &unadvertised).is_ok());
        // Nothing recorded (no metadata): nothing to compare with.
        assert!(
            code_from_response(&with_iss("https://any.example"), "s1", &IssCheck::default())
                .is_ok()
        );
        // A hostile iss is shown printable and short.
        let hostile = format!("https://x.example/{}", "\u{1b}[31m".repeat(100));
        match code_from_response(&with_iss(&hostile), "s1", &advertised) {
            Err(OAuthError::IssMismatch {
                found: Some(found), ..
            }) => {
                assert!(found.len() <= 200 && !found.contains('\u{1b}'), "{found}");
            }
            got => panic!("{got:?}"),
        }
    }

    #[test]
    fn the_request_records_what_the_iss_is_held_to() {
        let mut found = discovered(None);
        found.iss_parameter_supported = true;
        let pending = authorization_request(&found, &client(), "http://127.0.0.1:2/callback")
            .expect("an authorization request");
        assert_eq!(
            pending.iss,
            IssCheck {
                issuer: Some("http://127.0.0.1:1".to_owned()),
                required: true
            }
        );
    }
}
