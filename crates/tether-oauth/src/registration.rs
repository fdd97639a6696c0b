//! Who tether is to an authorization server: a pre-registered client (`--client-id`), a
//! client-id metadata document URL (draft-ietf-oauth-client-id-metadata-document), or a
//! dynamic registration (RFC 7591).

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde::Deserialize;
use serde_json::{Value, json};
use tether_config::SecretValue;

use crate::client::OAuthClient;
use crate::discovery::Discovered;
use crate::error::{OAuthError, oauth_error_code};
use crate::resource::parse;
use crate::wire::{MaybeSecret, answer};

/// How a client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// A public client: its id in the form, no secret.
    None,
    /// The id and secret as HTTP Basic credentials (RFC 6749 §2.3.1).
    ClientSecretBasic,
    /// The id and secret in the form.
    ClientSecretPost,
    /// A JWT signed by the client's private key, in the form (RFC 7523 §2.2): the
    /// registration's `client_secret` holds that key (a PKCS#8 PEM).
    PrivateKeyJwt,
}

impl AuthMethod {
    /// The name metadata and registrations use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::ClientSecretBasic => "client_secret_basic",
            Self::ClientSecretPost => "client_secret_post",
            Self::PrivateKeyJwt => "private_key_jwt",
        }
    }

    /// The method `name` stands for; a method tether does not implement is sent as a public
    /// client's (its id in the form).
    pub fn from_name(name: &str) -> Self {
        match name {
            "client_secret_basic" => Self::ClientSecretBasic,
            "client_secret_post" => Self::ClientSecretPost,
            "private_key_jwt" => Self::PrivateKeyJwt,
            _ => Self::None,
        }
    }
}

/// A client registration: dynamic, a metadata document, or configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRegistration {
    /// The client id.
    pub client_id: String,
    /// The client secret of a confidential client.
    pub client_secret: Option<SecretValue>,
    /// How it authenticates at the token endpoint.
    pub auth_method: AuthMethod,
}

impl ClientRegistration {
    /// A pre-registered client `client_id` that authenticates with a JWT signed by `key` (a
    /// PKCS#8 PEM private key), registered for log masking.
    pub fn with_key(client_id: String, key: SecretValue) -> Self {
        tether_log::register([&key]);
        Self {
            client_id,
            client_secret: Some(key),
            auth_method: AuthMethod::PrivateKeyJwt,
        }
    }

    /// A pre-registered client `client_id`: public without a secret; with one, Basic unless
    /// the server lists only post (RFC 8414's default is Basic). The secret is registered for
    /// log masking.
    pub fn preregistered(
        client_id: String,
        client_secret: Option<SecretValue>,
        discovered: &Discovered,
    ) -> Self {
        let methods = &discovered.auth_methods;
        let auth_method = match &client_secret {
            None => AuthMethod::None,
            Some(_)
                if !methods.is_empty()
                    && !methods.iter().any(|m| m == "client_secret_basic")
                    && methods.iter().any(|m| m == "client_secret_post") =>
            {
                AuthMethod::ClientSecretPost
            }
            Some(_) => AuthMethod::ClientSecretBasic,
        };
        tether_log::register(client_secret.as_ref());
        Self {
            client_id,
            client_secret,
            auth_method,
        }
    }

    /// The client a client-id metadata document URL stands for: the URL is the client id, a
    /// public client (the document says `none`).
    pub fn metadata_document(url: &str) -> Self {
        Self {
            client_id: url.to_owned(),
            client_secret: None,
            auth_method: AuthMethod::None,
        }
    }
}

/// Checks a client-id metadata document URL: `https` with a path beyond `/` and no fragment.
pub fn client_metadata_url(url: &str) -> Result<String, OAuthError> {
    let parsed = parse(url)?;
    if parsed.scheme() != "https" || parsed.path().len() <= 1 || parsed.fragment().is_some() {
        return Err(OAuthError::NotAClientMetadataUrl {
            url: url.to_owned(),
        });
    }
    Ok(url.to_owned())
}

/// A registration endpoint's answer (RFC 7591 §3.2), or its error body.
#[derive(Default, Deserialize)]
#[serde(default)]
struct RegistrationAnswer {
    client_id: Option<Value>,
    client_secret: MaybeSecret,
    token_endpoint_auth_method: Option<Value>,
    error: Option<Value>,
}

/// `native` for a redirect to loopback (tether's listener, or a pasted redirect to it), `web`
/// for any other.
fn application_type(redirect_uri: &str) -> &'static str {
    let loopback = reqwest::Url::parse(redirect_uri).is_ok_and(|url| {
        let host = url.host_str().unwrap_or_default();
        host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    if loopback { "native" } else { "web" }
}

impl OAuthClient {
    /// Dynamic client registration (RFC 7591) for `redirect_uri`: a public client (`none`)
    /// when the server lists that method or none at all, else `client_secret_basic`, else
    /// `client_secret_post`; the answer's method decides. A client secret it issues is
    /// registered for log masking.
    pub async fn register(
        &self,
        discovered: &Discovered,
        redirect_uri: &str,
    ) -> Result<ClientRegistration, OAuthError> {
        let endpoint = discovered
            .registration_endpoint
            .as_deref()
            .ok_or(OAuthError::NoRegistration)?;
        let methods = &discovered.auth_methods;
        let method = if methods.is_empty() || methods.iter().any(|m| m == "none") {
            AuthMethod::None
        } else if methods.iter().any(|m| m == "client_secret_basic") {
            AuthMethod::ClientSecretBasic
        } else {
            AuthMethod::ClientSecretPost
        };
        let mut body = json!({
            "client_name": "tether",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": method.as_str(),
            // OpenID Dynamic Client Registration §2, asked for by MCP 2026-07-28: a program
            // on the person's machine whose redirect is a loopback URL.
            "application_type": application_type(redirect_uri),
        });
        if let Some(scope) = &discovered.scope {
            body["scope"] = json!(scope);
        }
        let response = self
            .http
            .post(endpoint)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| OAuthError::RegistrationFailed {
                endpoint: endpoint.to_owned(),
                reason: e.to_string(),
            })?;
        let (status, answer): (_, RegistrationAnswer) = answer(response).await;
        if !status.is_success() {
            return Err(OAuthError::RegistrationRefused {
                endpoint: endpoint.to_owned(),
                status,
                code: oauth_error_code(answer.error.as_ref().and_then(Value::as_str)),
            });
        }
        let client_id = answer
            .client_id
            .as_ref()
            .and_then(Value::as_str)
            .ok_or(OAuthError::NoClientId)?
            .to_owned();
        let client_secret = answer.client_secret.0;
        tether_log::register(client_secret.as_ref());
        let auth_method = match answer
            .token_endpoint_auth_method
            .as_ref()
            .and_then(Value::as_str)
        {
            Some(name) => AuthMethod::from_name(name),
            // A secret issued to a client that asked for none is sent the default way.
            None if client_secret.is_some() && method == AuthMethod::None => {
                AuthMethod::ClientSecretBasic
            }
            None => method,
        };
        Ok(ClientRegistration {
            client_id,
            client_secret,
            auth_method,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discovered(methods: &[&str]) -> Discovered {
        Discovered {
            issuer: None,
            iss_parameter_supported: false,
            dpop_algs: Vec::new(),
            server: "http://127.0.0.1:1/mcp".to_owned(),
            resource: "http://127.0.0.1:1/mcp".to_owned(),
            scope: None,
            authorization_endpoint: "http://127.0.0.1:1/authorize".to_owned(),
            token_endpoint: "http://127.0.0.1:1/token".to_owned(),
            registration_endpoint: None,
            auth_methods: methods.iter().map(|m| (*m).to_owned()).collect(),
            grant_types: Vec::new(),
            client_metadata_documents: false,
        }
    }

    #[test]
    fn client_metadata_urls_are_https_with_a_path() {
        assert!(client_metadata_url("https://example.com/tether.json").is_ok());
        for bad in [
            "http://example.com/tether.json",
            "https://example.com/",
            "https://example.com",
            "https://example.com/c.json#x",
        ] {
            assert!(
                matches!(
                    client_metadata_url(bad),
                    Err(OAuthError::NotAClientMetadataUrl { .. })
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            client_metadata_url("not a url"),
            Err(OAuthError::NotAUrl { .. })
        ));
    }

    #[test]
    fn a_preregistered_secret_goes_basic_unless_only_post_is_listed() {
        let method = |secret: Option<&str>, methods: &[&str]| {
            ClientRegistration::preregistered(
                "id".to_owned(),
                secret.map(SecretValue::from),
                &discovered(methods),
            )
            .auth_method
        };
        assert_eq!(method(None, &["client_secret_post"]), AuthMethod::None);
        assert_eq!(method(Some("s"), &[]), AuthMethod::ClientSecretBasic);
        assert_eq!(
            method(Some("s"), &["client_secret_basic", "client_secret_post"]),
            AuthMethod::ClientSecretBasic
        );
        assert_eq!(
            method(Some("s"), &["client_secret_post"]),
            AuthMethod::ClientSecretPost
        );
    }

    #[test]
    fn method_names_round_trip() {
        for method in [
            AuthMethod::None,
            AuthMethod::ClientSecretBasic,
            AuthMethod::ClientSecretPost,
            AuthMethod::PrivateKeyJwt,
        ] {
            assert_eq!(AuthMethod::from_name(method.as_str()), method);
        }
        assert_eq!(AuthMethod::from_name("tls_client_auth"), AuthMethod::None);
    }

    #[test]
    fn a_loopback_redirect_registers_a_native_application() {
        for native in [
            "http://127.0.0.1:43210/callback",
            "http://[::1]:43210/callback",
            "http://localhost:1/callback",
        ] {
            assert_eq!(application_type(native), "native", "{native}");
        }
        for web in ["https://app.example/callback", "not a url"] {
            assert_eq!(application_type(web), "web", "{web}");
        }
    }
}
