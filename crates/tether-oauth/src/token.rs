//! The token record ([`Tokens`]: what is stored per server), its stored form, and the token
//! endpoint's two grants: the code exchange and the refresh.

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use tether_config::SecretValue;

use crate::authorization::Pending;
use crate::client::OAuthClient;
use crate::clock::Clock;
use crate::discovery::Discovered;
use crate::error::{OAuthError, oauth_error_code};
use crate::registration::{AuthMethod, ClientRegistration};
use crate::wire::{MaybeSecret, answer, form_body, form_encode_into};

/// A token this close to its expiry is refreshed before use.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// What is stored per server: the tokens and how to refresh them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokens {
    /// The canonical server URL: the storage key.
    pub server: String,
    /// The `resource` sent with every token request (RFC 8707).
    pub resource: String,
    /// The access token.
    pub access_token: SecretValue,
    /// The refresh token, when the server issued one.
    pub refresh_token: Option<SecretValue>,
    /// When the access token expires, in Unix seconds; `None` when the server gave no
    /// `expires_in`.
    pub expires_at: Option<i64>,
    /// Where the tokens are refreshed.
    pub token_endpoint: String,
    /// The client they were issued to.
    pub client: ClientRegistration,
    /// The scope granted (the token answer's `scope`, else the one asked for); `None` when
    /// none was asked for or given.
    pub scope: Option<String>,
    /// The redirect URI the client used (a step-up listens on the same port when it can:
    /// a registered client's redirect URI is fixed).
    pub redirect_uri: Option<String>,
    /// The authorization server that issued the tokens and registered the client (its
    /// metadata's `issuer`): they are used with it alone. `None` in a record stored before
    /// tether recorded it, until discovery names it (recorded then, once).
    pub issuer: Option<String>,
    /// How they were had, and so how they are renewed.
    pub grant: Grant,
}

/// How tokens were had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Grant {
    /// A person authorized in a browser (`authorization_code`); renewed with the refresh token.
    #[default]
    AuthorizationCode,
    /// The client's own credentials, no person (`client_credentials`, OAuth 2.1 §4.2): renewed
    /// by asking again with them.
    ClientCredentials,
}

/// The `grant` field's value in the stored form for [`Grant::ClientCredentials`] (absent for
/// the browser's, as in records from before it was written).
const CLIENT_CREDENTIALS: &str = "client_credentials";

impl Tokens {
    /// Whether the access token expires within `margin` of `now` (Unix seconds); never when
    /// its expiry is unknown.
    pub fn expires_within(&self, now: i64, margin: Duration) -> bool {
        let margin = i64::try_from(margin.as_secs()).unwrap_or(i64::MAX);
        self.expires_at
            .is_some_and(|at| at.saturating_sub(now) <= margin)
    }

    /// Whether the access token is to be refreshed before use: it expires within
    /// [`REFRESH_MARGIN`] of `clock`'s now.
    pub fn needs_refresh(&self, clock: &dyn Clock) -> bool {
        self.expires_within(crate::clock::now_unix(clock), REFRESH_MARGIN)
    }

    /// Seconds until the access token expires by `clock` (zero or less: expired); `None` when
    /// its expiry is unknown.
    pub fn seconds_left(&self, clock: &dyn Clock) -> Option<i64> {
        self.expires_at
            .map(|at| at.saturating_sub(crate::clock::now_unix(clock)))
    }

    /// The stored form: one JSON document, itself a secret.
    pub fn to_secret(&self) -> SecretValue {
        let stored = Stored {
            server: Some(&self.server),
            resource: &self.resource,
            access_token: Exposed(Some(&self.access_token)),
            refresh_token: Exposed(self.refresh_token.as_ref()),
            expires_at: self.expires_at,
            token_endpoint: &self.token_endpoint,
            client_id: &self.client.client_id,
            client_secret: Exposed(self.client.client_secret.as_ref()),
            auth_method: self.client.auth_method.as_str(),
            scope: self.scope.as_deref(),
            redirect_uri: self.redirect_uri.as_deref(),
            issuer: self.issuer.as_deref(),
            grant: (self.grant == Grant::ClientCredentials).then_some(CLIENT_CREDENTIALS),
        };
        // Sized once, so that the buffer holding the tokens is not copied as it grows.
        let secrets = [
            Some(&self.access_token),
            self.refresh_token.as_ref(),
            self.client.client_secret.as_ref(),
        ];
        let capacity = 512
            + self.server.len()
            + self.resource.len()
            + self.token_endpoint.len()
            + self.client.client_id.len()
            + secrets
                .iter()
                .flatten()
                .map(|secret| 6 * secret.expose().len())
                .sum::<usize>();
        let mut buffer = Vec::with_capacity(capacity);
        if serde_json::to_writer(&mut buffer, &stored).is_err() {
            zeroize::Zeroize::zeroize(&mut buffer);
            return SecretValue::new(String::new());
        }
        match String::from_utf8(buffer) {
            Ok(text) => SecretValue::new(text),
            Err(e) => {
                let mut bytes = e.into_bytes();
                zeroize::Zeroize::zeroize(&mut bytes);
                SecretValue::new(String::new())
            }
        }
    }

    /// Reads the stored form; `None` when it is not one. The secrets read are registered for
    /// log masking.
    pub fn from_secret(secret: &SecretValue) -> Option<Self> {
        let stored: Read = serde_json::from_str(secret.expose()).ok()?;
        let text = |value: Option<Value>| value.as_ref().and_then(Value::as_str).map(str::to_owned);
        let resource = text(stored.resource)?;
        let tokens = Self {
            server: text(stored.server).unwrap_or_else(|| resource.clone()),
            resource,
            access_token: stored.access_token.0?,
            refresh_token: stored.refresh_token.0,
            expires_at: stored.expires_at.as_ref().and_then(Value::as_i64),
            token_endpoint: text(stored.token_endpoint)?,
            client: ClientRegistration {
                client_id: text(stored.client_id)?,
                client_secret: stored.client_secret.0,
                auth_method: text(stored.auth_method)
                    .map_or(AuthMethod::None, |name| AuthMethod::from_name(&name)),
            },
            scope: text(stored.scope),
            redirect_uri: text(stored.redirect_uri),
            issuer: text(stored.issuer),
            grant: if text(stored.grant).as_deref() == Some(CLIENT_CREDENTIALS) {
                Grant::ClientCredentials
            } else {
                Grant::AuthorizationCode
            },
        };
        tokens.register();
        Some(tokens)
    }

    /// Registers every secret of the record for log masking.
    fn register(&self) {
        tether_log::register(
            [
                Some(&self.access_token),
                self.refresh_token.as_ref(),
                self.client.client_secret.as_ref(),
            ]
            .into_iter()
            .flatten(),
        );
    }
}

/// The stored form as written (the field names are the format: tokens stored by earlier
/// versions are read by [`Tokens::from_secret`]).
#[derive(Serialize)]
struct Stored<'a> {
    server: Option<&'a str>,
    resource: &'a str,
    access_token: Exposed<'a>,
    refresh_token: Exposed<'a>,
    expires_at: Option<i64>,
    token_endpoint: &'a str,
    client_id: &'a str,
    client_secret: Exposed<'a>,
    auth_method: &'a str,
    scope: Option<&'a str>,
    redirect_uri: Option<&'a str>,
    issuer: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    grant: Option<&'a str>,
}

/// A secret written into the stored form (which is itself a secret).
struct Exposed<'a>(Option<&'a SecretValue>);

impl Serialize for Exposed<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(secret) => serializer.serialize_str(secret.expose()),
            None => serializer.serialize_none(),
        }
    }
}

/// The stored form as read: tolerant of missing or mistyped optional fields.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Read {
    server: Option<Value>,
    resource: Option<Value>,
    access_token: MaybeSecret,
    refresh_token: MaybeSecret,
    expires_at: Option<Value>,
    token_endpoint: Option<Value>,
    client_id: Option<Value>,
    client_secret: MaybeSecret,
    auth_method: Option<Value>,
    scope: Option<Value>,
    redirect_uri: Option<Value>,
    issuer: Option<Value>,
    grant: Option<Value>,
}

/// A token endpoint's answer (RFC 6749 §5.1), or its error body (§5.2).
#[derive(Default, Deserialize)]
#[serde(default)]
struct TokenAnswer {
    access_token: MaybeSecret,
    refresh_token: MaybeSecret,
    expires_in: Option<Value>,
    scope: Option<Value>,
    error: Option<Value>,
}

/// What a token answer may leave out and is then kept from before.
struct Previous {
    refresh_token: Option<SecretValue>,
    scope: Option<String>,
    redirect_uri: Option<String>,
}

impl OAuthClient {
    /// Exchanges an authorization code for tokens (`grant_type=authorization_code` with the
    /// verifier, the redirect URI and `resource`).
    pub async fn exchange(
        &self,
        discovered: &Discovered,
        client: &ClientRegistration,
        pending: &Pending,
        code: &SecretValue,
    ) -> Result<Tokens, OAuthError> {
        let mut tokens = self
            .token_request(
                &discovered.token_endpoint,
                &discovered.resource,
                client,
                &[
                    ("grant_type", "authorization_code"),
                    ("code", code.expose()),
                    ("redirect_uri", &pending.redirect_uri),
                    ("code_verifier", pending.verifier.expose()),
                ],
                Previous {
                    refresh_token: None,
                    scope: discovered.scope.clone(),
                    redirect_uri: Some(pending.redirect_uri.clone()),
                },
                discovered.issuer.as_deref(),
            )
            .await?;
        tokens.server.clone_from(&discovered.server);
        tokens.issuer.clone_from(&discovered.issuer);
        Ok(tokens)
    }

    /// Refreshes `tokens` with their refresh token (`grant_type=refresh_token` with
    /// `resource`); an answer without a new refresh token keeps the old one.
    pub async fn refresh(&self, tokens: &Tokens) -> Result<Tokens, OAuthError> {
        if tokens.grant == Grant::ClientCredentials {
            // Nothing to refresh with: the client asks again.
            let mut fresh = self
                .client_credentials_at(
                    &tokens.token_endpoint,
                    &tokens.resource,
                    tokens.scope.as_deref(),
                    &tokens.client,
                    tokens.issuer.as_deref(),
                )
                .await?;
            fresh.server.clone_from(&tokens.server);
            fresh.issuer.clone_from(&tokens.issuer);
            return Ok(fresh);
        }
        let refresh_token = tokens
            .refresh_token
            .clone()
            .ok_or(OAuthError::NoRefreshToken)?;
        let mut fresh = self
            .token_request(
                &tokens.token_endpoint,
                &tokens.resource,
                &tokens.client,
                &[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", refresh_token.expose()),
                ],
                Previous {
                    refresh_token: Some(refresh_token.clone()),
                    scope: tokens.scope.clone(),
                    redirect_uri: tokens.redirect_uri.clone(),
                },
                tokens.issuer.as_deref(),
            )
            .await?;
        fresh.server.clone_from(&tokens.server);
        fresh.issuer.clone_from(&tokens.issuer);
        Ok(fresh)
    }

    /// Tokens for `discovered` by the client's own credentials (`grant_type=client_credentials`,
    /// no person, no browser): `client` must be confidential (a secret).
    pub async fn client_credentials(
        &self,
        discovered: &Discovered,
        client: &ClientRegistration,
    ) -> Result<Tokens, OAuthError> {
        // No refresh token comes of this grant: `offline_access` is not asked for.
        let scope = discovered.scope.as_deref().map(|scope| {
            scope
                .split_whitespace()
                .filter(|s| *s != crate::discovery::OFFLINE_ACCESS)
                .collect::<Vec<_>>()
                .join(" ")
        });
        let scope = scope.filter(|scope| !scope.is_empty());
        let mut tokens = self
            .client_credentials_at(
                &discovered.token_endpoint,
                &discovered.resource,
                scope.as_deref(),
                client,
                discovered.issuer.as_deref(),
            )
            .await?;
        tokens.server.clone_from(&discovered.server);
        tokens.issuer.clone_from(&discovered.issuer);
        Ok(tokens)
    }

    async fn client_credentials_at(
        &self,
        token_endpoint: &str,
        resource: &str,
        scope: Option<&str>,
        client: &ClientRegistration,
        issuer: Option<&str>,
    ) -> Result<Tokens, OAuthError> {
        if client.client_secret.is_none() {
            return Err(OAuthError::NoClientSecret);
        }
        let mut grant = vec![("grant_type", CLIENT_CREDENTIALS)];
        if let Some(scope) = scope {
            grant.push(("scope", scope));
        }
        let mut tokens = self
            .token_request(
                token_endpoint,
                resource,
                client,
                &grant,
                Previous {
                    refresh_token: None,
                    scope: scope.map(str::to_owned),
                    redirect_uri: None,
                },
                issuer,
            )
            .await?;
        tokens.grant = Grant::ClientCredentials;
        Ok(tokens)
    }

    /// Sends a token request and reads the answer into [`Tokens`] (`server` = `resource`; the
    /// caller sets it). The new secrets are registered for log masking.
    async fn token_request(
        &self,
        token_endpoint: &str,
        resource: &str,
        client: &ClientRegistration,
        grant: &[(&str, &str)],
        previous: Previous,
        issuer: Option<&str>,
    ) -> Result<Tokens, OAuthError> {
        let mut form: Vec<(&str, &str)> = grant.to_vec();
        form.push(("resource", resource));
        // A signed assertion names the authorization server: its issuer, else the endpoint.
        let assertion = match (client.auth_method, &client.client_secret) {
            (AuthMethod::PrivateKeyJwt, Some(key)) => Some(crate::assertion::client_assertion(
                key,
                &client.client_id,
                issuer.unwrap_or(token_endpoint),
                self.now(),
            )?),
            _ => None,
        };
        let mut request = self
            .http
            .post(token_endpoint)
            .header(ACCEPT, "application/json");
        match (client.auth_method, &client.client_secret) {
            (AuthMethod::ClientSecretBasic, Some(secret)) => {
                // RFC 6749 §2.3.1: both are form-encoded before Basic encoding.
                let mut id = String::new();
                form_encode_into(&mut id, &client.client_id);
                let mut encoded = String::with_capacity(3 * secret.expose().len());
                form_encode_into(&mut encoded, secret.expose());
                let encoded = SecretValue::new(encoded);
                request = request.basic_auth(id, Some(encoded.expose()));
            }
            (AuthMethod::ClientSecretPost, Some(secret)) => {
                form.push(("client_id", &client.client_id));
                form.push(("client_secret", secret.expose()));
            }
            (AuthMethod::PrivateKeyJwt, Some(_)) => {
                form.push(("client_id", &client.client_id));
                form.push(("client_assertion_type", crate::assertion::JWT_BEARER));
                if let Some(assertion) = &assertion {
                    form.push(("client_assertion", assertion.expose()));
                }
            }
            _ => form.push(("client_id", &client.client_id)),
        }
        let body = form_body(&form);
        let response = request
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body.expose().to_owned())
            .send()
            .await
            .map_err(|e| OAuthError::TokenRequestFailed {
                endpoint: token_endpoint.to_owned(),
                reason: e.without_url().to_string(),
            })?;
        let (status, answer): (_, TokenAnswer) = answer(response).await;
        if !status.is_success() {
            return Err(OAuthError::TokenRefused {
                endpoint: token_endpoint.to_owned(),
                status,
                code: oauth_error_code(answer.error.as_ref().and_then(Value::as_str)),
            });
        }
        let access_token = answer.access_token.0.ok_or(OAuthError::NoAccessToken)?;
        let now = self.now();
        let tokens = Tokens {
            server: resource.to_owned(),
            resource: resource.to_owned(),
            access_token,
            refresh_token: answer.refresh_token.0.or(previous.refresh_token),
            expires_at: answer
                .expires_in
                .as_ref()
                .and_then(Value::as_i64)
                .map(|seconds| now.saturating_add(seconds)),
            token_endpoint: token_endpoint.to_owned(),
            client: client.clone(),
            scope: answer
                .scope
                .as_ref()
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or(previous.scope),
            redirect_uri: previous.redirect_uri,
            issuer: None,
            grant: Grant::AuthorizationCode,
        };
        tokens.register();
        Ok(tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn tokens() -> Tokens {
        Tokens {
            server: "http://127.0.0.1:1/mcp".to_owned(),
            resource: "http://127.0.0.1:1/mcp".to_owned(),
            access_token: r#"a"\$HOME"#.into(),
            refresh_token: Some("r".into()),
            expires_at: Some(100),
            token_endpoint: "http://127.0.0.1:1/token".to_owned(),
            client: ClientRegistration {
                client_id: "c".to_owned(),
                client_secret: Some("s".into()),
                auth_method: AuthMethod::ClientSecretPost,
            },
            scope: Some("mcp".to_owned()),
            redirect_uri: Some("http://127.0.0.1:2/callback".to_owned()),
            issuer: Some("http://127.0.0.1:1".to_owned()),
            grant: Grant::AuthorizationCode,
        }
    }

    #[test]
    fn stored_form_round_trips() {
        let tokens = tokens();
        let back = Tokens::from_secret(&tokens.to_secret()).expect("reading the stored form");
        assert_eq!(back, tokens);
        // The browser's grant is written as before (no field); the client's is named.
        assert!(!tokens.to_secret().expose().contains("\"grant\""));
        let machine = Tokens {
            grant: Grant::ClientCredentials,
            ..tokens.clone()
        };
        let back = Tokens::from_secret(&machine.to_secret()).expect("reading the stored form");
        assert_eq!(back.grant, Grant::ClientCredentials);
        let none = Tokens {
            refresh_token: None,
            expires_at: None,
            scope: None,
            redirect_uri: None,
            issuer: None,
            client: ClientRegistration {
                client_secret: None,
                auth_method: AuthMethod::None,
                ..tokens.client.clone()
            },
            ..tokens
        };
        assert_eq!(Tokens::from_secret(&none.to_secret()), Some(none));
    }

    #[test]
    fn the_stored_form_of_earlier_versions_is_read() {
        let stored = SecretValue::from(
            r#"{"server":null,"resource":"http://127.0.0.1:1/mcp","access_token":"a","refresh_token":null,"expires_at":7,"token_endpoint":"http://127.0.0.1:1/token","client_id":"c","client_secret":null,"auth_method":"client_secret_basic","scope":null,"redirect_uri":null}"#,
        );
        let tokens = Tokens::from_secret(&stored).expect("an earlier stored form");
        assert_eq!(
            tokens.server, "http://127.0.0.1:1/mcp",
            "server defaults to resource"
        );
        assert_eq!(tokens.access_token.expose(), "a");
        assert_eq!(tokens.expires_at, Some(7));
        assert_eq!(tokens.client.auth_method, AuthMethod::ClientSecretBasic);
        assert_eq!(tokens.issuer, None, "recorded once discovery names it");
        for broken in [
            "not json",
            r#"{"resource":"r","token_endpoint":"t","client_id":"c"}"#,
            r#"{"resource":"r","access_token":"a","client_id":"c"}"#,
            r#"{"resource":"r","access_token":5,"token_endpoint":"t","client_id":"c"}"#,
        ] {
            assert_eq!(Tokens::from_secret(&broken.into()), None, "{broken}");
        }
    }

    #[test]
    fn expiry_is_decided_by_the_clock_given() {
        let tokens = Tokens {
            expires_at: Some(1_000),
            ..tokens()
        };
        let clock = ManualClock::at(900);
        assert!(!tokens.needs_refresh(&clock), "100 s left");
        assert_eq!(tokens.seconds_left(&clock), Some(100));
        clock.set(940);
        assert!(tokens.needs_refresh(&clock), "60 s left: within the margin");
        clock.set(2_000);
        assert!(tokens.needs_refresh(&clock), "expired");
        assert_eq!(tokens.seconds_left(&clock), Some(-1_000));
        let unknown = Tokens {
            expires_at: None,
            ..tokens
        };
        assert!(!unknown.needs_refresh(&clock), "no expiry: used as it is");
        assert_eq!(unknown.seconds_left(&clock), None);
    }
}
