//! The token record ([`Tokens`]: what is stored per server), its stored form, and the token
//! endpoint's two grants: the code exchange and the refresh.

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
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
    /// The DPoP key (RFC 9449, a P-256 PKCS#8 PEM) every token request of this record is
    /// proven with; `None` where the authorization server does not take DPoP proofs.
    pub dpop_key: Option<SecretValue>,
    /// Whether the access token is bound to [`Tokens::dpop_key`] (`token_type: DPoP`): it is
    /// then sent as `Authorization: DPoP` with a proof on every request.
    pub dpop_bound: bool,
    /// For [`Grant::JwtBearer`]: the file holding the workload's JWT (a platform token such as
    /// a projected service-account token), read again at each renewal.
    pub assertion_file: Option<String>,
    /// For [`Grant::EnterpriseManaged`]: the identity provider and the person's ID token
    /// there, exchanged again for an ID-JAG at each renewal.
    pub idp: Option<IdentityProvider>,
}

/// An enterprise's identity provider as enterprise-managed authorization uses it (SEP-990):
/// where the person's ID token is exchanged (RFC 8693) for an ID-JAG, the identity assertion
/// authorization grant the MCP server's authorization server takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityProvider {
    /// Its issuer URL.
    pub issuer: String,
    /// Its token endpoint.
    pub token_endpoint: String,
    /// tether's client id there.
    pub client_id: String,
    /// The person's ID token from it (single sign-on).
    pub id_token: SecretValue,
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
    /// A workload's JWT from its platform, as an RFC 7523 §2.1 assertion (workload identity
    /// federation): renewed by asking again with the JWT read anew from its file.
    JwtBearer,
    /// Enterprise-managed authorization (SEP-990): the person's ID token exchanged at the
    /// identity provider for an ID-JAG, sent as an RFC 7523 assertion; renewed by both steps
    /// again while the ID token is good.
    EnterpriseManaged,
}

impl Grant {
    /// Whether tokens of this grant are renewed without a refresh token (by asking again).
    pub fn asks_again(self) -> bool {
        matches!(
            self,
            Self::ClientCredentials | Self::JwtBearer | Self::EnterpriseManaged
        )
    }
}

/// The `grant` field's value in the stored form for [`Grant::ClientCredentials`] (absent for
/// the browser's, as in records from before it was written).
const CLIENT_CREDENTIALS: &str = "client_credentials";

/// The JWT bearer grant's `grant_type` (RFC 7523 §2.1), also its stored `grant`.
pub(crate) const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// The stored `grant` of [`Grant::EnterpriseManaged`].
const ENTERPRISE_MANAGED: &str = "enterprise_managed";

/// RFC 8693's token exchange grant, and the token types of SEP-990's exchange.
const TOKEN_EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ID_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:id_token";
const ID_JAG_TYPE: &str = "urn:ietf:params:oauth:token-type:id-jag";

/// The `token_type` of a DPoP-bound access token (RFC 9449 §5), also its stored form.
const DPOP_TOKEN_TYPE: &str = "DPoP";

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
            grant: match self.grant {
                Grant::AuthorizationCode => None,
                Grant::ClientCredentials => Some(CLIENT_CREDENTIALS),
                Grant::JwtBearer => Some(JWT_BEARER_GRANT),
                Grant::EnterpriseManaged => Some(ENTERPRISE_MANAGED),
            },
            idp_issuer: self.idp.as_ref().map(|idp| idp.issuer.as_str()),
            idp_token_endpoint: self.idp.as_ref().map(|idp| idp.token_endpoint.as_str()),
            idp_client_id: self.idp.as_ref().map(|idp| idp.client_id.as_str()),
            idp_id_token: Exposed(self.idp.as_ref().map(|idp| &idp.id_token)),
            dpop_key: Exposed(self.dpop_key.as_ref()),
            token_type: self.dpop_bound.then_some(DPOP_TOKEN_TYPE),
            assertion_file: self.assertion_file.as_deref(),
        };
        // Sized once, so that the buffer holding the tokens is not copied as it grows.
        let secrets = [
            Some(&self.access_token),
            self.refresh_token.as_ref(),
            self.client.client_secret.as_ref(),
            self.dpop_key.as_ref(),
            self.idp.as_ref().map(|idp| &idp.id_token),
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
            grant: match text(stored.grant).as_deref() {
                Some(CLIENT_CREDENTIALS) => Grant::ClientCredentials,
                Some(JWT_BEARER_GRANT) => Grant::JwtBearer,
                Some(ENTERPRISE_MANAGED) => Grant::EnterpriseManaged,
                _ => Grant::AuthorizationCode,
            },
            idp: match (
                text(stored.idp_issuer),
                text(stored.idp_token_endpoint),
                text(stored.idp_client_id),
                stored.idp_id_token.0,
            ) {
                (Some(issuer), Some(token_endpoint), Some(client_id), Some(id_token)) => {
                    Some(IdentityProvider {
                        issuer,
                        token_endpoint,
                        client_id,
                        id_token,
                    })
                }
                _ => None,
            },
            dpop_key: stored.dpop_key.0,
            dpop_bound: text(stored.token_type).as_deref() == Some(DPOP_TOKEN_TYPE),
            assertion_file: text(stored.assertion_file),
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
                self.dpop_key.as_ref(),
                self.idp.as_ref().map(|idp| &idp.id_token),
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
    #[serde(skip_serializing_if = "Exposed::is_none")]
    dpop_key: Exposed<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    assertion_file: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    idp_issuer: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    idp_token_endpoint: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    idp_client_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Exposed::is_none")]
    idp_id_token: Exposed<'a>,
}

/// A secret written into the stored form (which is itself a secret).
struct Exposed<'a>(Option<&'a SecretValue>);

impl Exposed<'_> {
    fn is_none(&self) -> bool {
        self.0.is_none()
    }
}

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
    dpop_key: MaybeSecret,
    token_type: Option<Value>,
    assertion_file: Option<Value>,
    idp_issuer: Option<Value>,
    idp_token_endpoint: Option<Value>,
    idp_client_id: Option<Value>,
    idp_id_token: MaybeSecret,
}

/// A token endpoint's answer (RFC 6749 §5.1), or its error body (§5.2).
#[derive(Default, Deserialize)]
#[serde(default)]
struct TokenAnswer {
    access_token: MaybeSecret,
    refresh_token: MaybeSecret,
    expires_in: Option<Value>,
    scope: Option<Value>,
    token_type: Option<Value>,
    error: Option<Value>,
}

/// What a token answer may leave out and is then kept from before.
struct Previous {
    refresh_token: Option<SecretValue>,
    scope: Option<String>,
    redirect_uri: Option<String>,
}

/// One token request: where, for what, by which client, with which grant.
struct TokenRequest<'a> {
    endpoint: &'a str,
    resource: &'a str,
    client: &'a ClientRegistration,
    grant: &'a [(&'a str, &'a str)],
    previous: Previous,
    /// The authorization server's issuer (a client assertion's audience).
    issuer: Option<&'a str>,
    /// The DPoP key the request is proven with (RFC 9449 §5), when there is one.
    dpop_key: Option<&'a SecretValue>,
}

/// A renewal's or a grant's target: where tokens are asked for, and for what.
struct Target<'a> {
    endpoint: &'a str,
    resource: &'a str,
    scope: Option<&'a str>,
    issuer: Option<&'a str>,
    dpop_key: Option<&'a SecretValue>,
}

impl Discovered {
    /// A new DPoP key when the authorization server takes tether's proofs, else `None`.
    fn new_dpop_key(&self) -> Result<Option<SecretValue>, OAuthError> {
        if crate::dpop::offered(&self.dpop_algs) {
            tracing::debug!(
                "the authorization server takes DPoP proofs: tokens are bound to a key"
            );
            crate::dpop::new_key().map(Some)
        } else {
            Ok(None)
        }
    }

    /// Where a grant without a person asks for tokens, for `scope`, proven with `dpop_key`.
    fn target<'a>(
        &'a self,
        scope: Option<&'a str>,
        dpop_key: Option<&'a SecretValue>,
    ) -> Target<'a> {
        Target {
            endpoint: &self.token_endpoint,
            resource: &self.resource,
            scope,
            issuer: self.issuer.as_deref(),
            dpop_key,
        }
    }

    /// `tokens` as this server's and its authorization server's.
    fn named(&self, mut tokens: Tokens) -> Tokens {
        tokens.server.clone_from(&self.server);
        tokens.issuer.clone_from(&self.issuer);
        tokens
    }

    /// The scope a grant without a person asks for: no `offline_access` (no refresh token
    /// comes of it).
    fn machine_scope(&self) -> Option<String> {
        let scope = self.scope.as_deref().map(|scope| {
            scope
                .split_whitespace()
                .filter(|s| *s != crate::discovery::OFFLINE_ACCESS)
                .collect::<Vec<_>>()
                .join(" ")
        });
        scope.filter(|scope| !scope.is_empty())
    }
}

impl OAuthClient {
    /// Exchanges an authorization code for tokens (`grant_type=authorization_code` with the
    /// verifier, the redirect URI and `resource`), proven with a new DPoP key where the
    /// authorization server takes DPoP proofs.
    pub async fn exchange(
        &self,
        discovered: &Discovered,
        client: &ClientRegistration,
        pending: &Pending,
        code: &SecretValue,
    ) -> Result<Tokens, OAuthError> {
        let dpop_key = discovered.new_dpop_key()?;
        let mut tokens = self
            .token_request(TokenRequest {
                endpoint: &discovered.token_endpoint,
                resource: &discovered.resource,
                client,
                grant: &[
                    ("grant_type", "authorization_code"),
                    ("code", code.expose()),
                    ("redirect_uri", &pending.redirect_uri),
                    ("code_verifier", pending.verifier.expose()),
                ],
                previous: Previous {
                    refresh_token: None,
                    scope: discovered.scope.clone(),
                    redirect_uri: Some(pending.redirect_uri.clone()),
                },
                issuer: discovered.issuer.as_deref(),
                dpop_key: dpop_key.as_ref(),
            })
            .await?;
        tokens.server.clone_from(&discovered.server);
        tokens.issuer.clone_from(&discovered.issuer);
        Ok(tokens)
    }

    /// Renews `tokens`: with their refresh token (`grant_type=refresh_token` with `resource`;
    /// an answer without a new refresh token keeps the old one), or, for a grant without a
    /// person, by asking again (the client's credentials; the workload's JWT read anew from
    /// its file). Proven with the record's DPoP key when it has one.
    pub async fn refresh(&self, tokens: &Tokens) -> Result<Tokens, OAuthError> {
        let target = Target {
            endpoint: &tokens.token_endpoint,
            resource: &tokens.resource,
            scope: tokens.scope.as_deref(),
            issuer: tokens.issuer.as_deref(),
            dpop_key: tokens.dpop_key.as_ref(),
        };
        let mut fresh = match tokens.grant {
            // Nothing to refresh with: the client asks again.
            Grant::ClientCredentials => self.client_credentials_at(&target, &tokens.client).await?,
            Grant::JwtBearer => {
                let file = tokens
                    .assertion_file
                    .as_deref()
                    .ok_or(OAuthError::NoRefreshToken)?;
                self.jwt_bearer_at(&target, &tokens.client, file).await?
            }
            Grant::EnterpriseManaged => {
                let idp = tokens.idp.as_ref().ok_or(OAuthError::NoRefreshToken)?;
                self.enterprise_at(&target, &tokens.client, idp).await?
            }
            Grant::AuthorizationCode => {
                let refresh_token = tokens
                    .refresh_token
                    .clone()
                    .ok_or(OAuthError::NoRefreshToken)?;
                self.token_request(TokenRequest {
                    endpoint: target.endpoint,
                    resource: target.resource,
                    client: &tokens.client,
                    grant: &[
                        ("grant_type", "refresh_token"),
                        ("refresh_token", refresh_token.expose()),
                    ],
                    previous: Previous {
                        refresh_token: Some(refresh_token.clone()),
                        scope: tokens.scope.clone(),
                        redirect_uri: tokens.redirect_uri.clone(),
                    },
                    issuer: target.issuer,
                    dpop_key: target.dpop_key,
                })
                .await?
            }
        };
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
        let (scope, dpop_key) = (discovered.machine_scope(), discovered.new_dpop_key()?);
        let target = discovered.target(scope.as_deref(), dpop_key.as_ref());
        let tokens = self.client_credentials_at(&target, client).await?;
        Ok(discovered.named(tokens))
    }

    async fn client_credentials_at(
        &self,
        target: &Target<'_>,
        client: &ClientRegistration,
    ) -> Result<Tokens, OAuthError> {
        if client.client_secret.is_none() {
            return Err(OAuthError::NoClientSecret);
        }
        self.grant_at(
            target,
            client,
            CLIENT_CREDENTIALS,
            None,
            Grant::ClientCredentials,
        )
        .await
    }

    /// Tokens of `grant_type` (with its `assertion`, when it takes one) for `target`'s scope,
    /// recorded as `grant`.
    async fn grant_at(
        &self,
        target: &Target<'_>,
        client: &ClientRegistration,
        grant_type: &str,
        assertion: Option<&SecretValue>,
        grant: Grant,
    ) -> Result<Tokens, OAuthError> {
        let mut form = vec![("grant_type", grant_type)];
        if let Some(assertion) = assertion {
            form.push(("assertion", assertion.expose()));
        }
        if let Some(scope) = target.scope {
            form.push(("scope", scope));
        }
        let mut tokens = self.token_request(target.request(client, &form)).await?;
        tokens.grant = grant;
        Ok(tokens)
    }

    /// Tokens for `discovered` by the workload's JWT in `assertion_file` (RFC 7523 §2.1,
    /// `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`; workload identity
    /// federation), no person, no browser. The file is read again at each renewal: the
    /// platform rotates what it holds.
    pub async fn jwt_bearer(
        &self,
        discovered: &Discovered,
        client: &ClientRegistration,
        assertion_file: &str,
    ) -> Result<Tokens, OAuthError> {
        let (scope, dpop_key) = (discovered.machine_scope(), discovered.new_dpop_key()?);
        let target = discovered.target(scope.as_deref(), dpop_key.as_ref());
        let tokens = self.jwt_bearer_at(&target, client, assertion_file).await?;
        Ok(discovered.named(tokens))
    }

    async fn jwt_bearer_at(
        &self,
        target: &Target<'_>,
        client: &ClientRegistration,
        assertion_file: &str,
    ) -> Result<Tokens, OAuthError> {
        let assertion = read_assertion(assertion_file)?;
        let mut tokens = self
            .grant_at(
                target,
                client,
                JWT_BEARER_GRANT,
                Some(&assertion),
                Grant::JwtBearer,
            )
            .await?;
        tokens.assertion_file = Some(assertion_file.to_owned());
        Ok(tokens)
    }

    /// Tokens for `discovered` by enterprise-managed authorization (SEP-990): the person's ID
    /// token at `idp` exchanged (RFC 8693) for an ID-JAG naming this authorization server and
    /// resource, then the ID-JAG as the assertion of the JWT bearer grant here, `client`
    /// authenticating as registered. No browser: the person signed in at the identity
    /// provider already.
    pub async fn enterprise_managed(
        &self,
        discovered: &Discovered,
        client: &ClientRegistration,
        idp: &IdentityProvider,
    ) -> Result<Tokens, OAuthError> {
        let (scope, dpop_key) = (discovered.machine_scope(), discovered.new_dpop_key()?);
        let target = discovered.target(scope.as_deref(), dpop_key.as_ref());
        let tokens = self.enterprise_at(&target, client, idp).await?;
        Ok(discovered.named(tokens))
    }

    async fn enterprise_at(
        &self,
        target: &Target<'_>,
        client: &ClientRegistration,
        idp: &IdentityProvider,
    ) -> Result<Tokens, OAuthError> {
        let id_jag = self.id_jag(target, idp).await?;
        let grant = Grant::EnterpriseManaged;
        let mut tokens = self
            .grant_at(target, client, JWT_BEARER_GRANT, Some(&id_jag), grant)
            .await?;
        tokens.idp = Some(idp.clone());
        Ok(tokens)
    }

    /// The ID-JAG for `target` from `idp` (RFC 8693 token exchange of the person's ID token,
    /// `audience` the authorization server's issuer, `resource` the MCP server's), registered
    /// for log masking.
    async fn id_jag(
        &self,
        target: &Target<'_>,
        idp: &IdentityProvider,
    ) -> Result<SecretValue, OAuthError> {
        let mut form = vec![
            ("grant_type", TOKEN_EXCHANGE_GRANT),
            ("requested_token_type", ID_JAG_TYPE),
            ("subject_token", idp.id_token.expose()),
            ("subject_token_type", ID_TOKEN_TYPE),
            ("audience", target.issuer.unwrap_or(target.endpoint)),
            ("resource", target.resource),
            ("client_id", &idp.client_id),
        ];
        if let Some(scope) = target.scope {
            form.push(("scope", scope));
        }
        let body = form_body(&form);
        let response = self
            .http
            .post(&idp.token_endpoint)
            .header(ACCEPT, "application/json")
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body.expose().to_owned())
            .send()
            .await
            .map_err(|e| OAuthError::TokenRequestFailed {
                endpoint: idp.token_endpoint.clone(),
                reason: e.without_url().to_string(),
            })?;
        let (status, answer): (_, TokenAnswer) = answer(response).await;
        if !status.is_success() {
            return Err(OAuthError::TokenRefused {
                endpoint: idp.token_endpoint.clone(),
                status,
                code: oauth_error_code(answer.error.as_ref().and_then(Value::as_str)),
            });
        }
        let id_jag = answer.access_token.0.ok_or(OAuthError::NoAccessToken)?;
        tether_log::register([&id_jag]);
        Ok(id_jag)
    }

    /// Sends a token request — again once with the authorization server's nonce when it
    /// answers `use_dpop_nonce` (RFC 9449 §8) — and reads the answer into [`Tokens`]
    /// (`server` = `resource`; the caller sets it). The new secrets are registered for log
    /// masking.
    async fn token_request(&self, request: TokenRequest<'_>) -> Result<Tokens, OAuthError> {
        let (mut status, mut answer, nonce) = self.send_token_request(&request, None).await?;
        let code = oauth_error_code(answer.error.as_ref().and_then(Value::as_str));
        if let (Some(_), Some(nonce), false) = (request.dpop_key, nonce, status.is_success())
            && code.as_deref().is_some_and(crate::dpop::asks_for_nonce)
        {
            tracing::debug!("the token endpoint asks for a DPoP nonce: asking again with it");
            (status, answer, _) = self.send_token_request(&request, Some(&nonce)).await?;
        }
        if !status.is_success() {
            return Err(OAuthError::TokenRefused {
                endpoint: request.endpoint.to_owned(),
                status,
                code: oauth_error_code(answer.error.as_ref().and_then(Value::as_str)),
            });
        }
        let access_token = answer.access_token.0.ok_or(OAuthError::NoAccessToken)?;
        let now = self.now();
        let previous = request.previous;
        let dpop_bound = request.dpop_key.is_some()
            && answer
                .token_type
                .as_ref()
                .and_then(Value::as_str)
                .is_some_and(|t| t.eq_ignore_ascii_case(DPOP_TOKEN_TYPE));
        let tokens = Tokens {
            server: request.resource.to_owned(),
            resource: request.resource.to_owned(),
            access_token,
            refresh_token: answer.refresh_token.0.or(previous.refresh_token),
            expires_at: answer
                .expires_in
                .as_ref()
                .and_then(Value::as_i64)
                .map(|seconds| now.saturating_add(seconds)),
            token_endpoint: request.endpoint.to_owned(),
            client: request.client.clone(),
            scope: answer
                .scope
                .as_ref()
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or(previous.scope),
            redirect_uri: previous.redirect_uri,
            issuer: None,
            grant: Grant::AuthorizationCode,
            dpop_key: request.dpop_key.cloned(),
            dpop_bound,
            assertion_file: None,
            idp: None,
        };
        tokens.register();
        Ok(tokens)
    }

    /// Sends `request` once (a fresh client assertion and DPoP proof, with `nonce` when the
    /// server gave one): its status, its body, and the `DPoP-Nonce` it answered with.
    async fn send_token_request(
        &self,
        request: &TokenRequest<'_>,
        nonce: Option<&str>,
    ) -> Result<(reqwest::StatusCode, TokenAnswer, Option<String>), OAuthError> {
        let TokenRequest {
            endpoint,
            resource,
            client,
            grant,
            issuer,
            dpop_key,
            ..
        } = *request;
        let mut form: Vec<(&str, &str)> = grant.to_vec();
        form.push(("resource", resource));
        // A signed assertion names the authorization server: its issuer, else the endpoint.
        let assertion = match (client.auth_method, &client.client_secret) {
            (AuthMethod::PrivateKeyJwt, Some(key)) => Some(crate::assertion::client_assertion(
                key,
                &client.client_id,
                issuer.unwrap_or(endpoint),
                self.now(),
            )?),
            _ => None,
        };
        let mut http = self.http.post(endpoint).header(ACCEPT, "application/json");
        if let Some(key) = dpop_key {
            let proof = crate::dpop::proof(key, "POST", endpoint, self.now(), nonce, None)?;
            tether_log::register([&proof]);
            let mut value = HeaderValue::from_str(proof.expose())
                .map_err(|_| OAuthError::DpopKey("its proof is not a header value"))?;
            value.set_sensitive(true);
            http = http.header(crate::dpop::DPOP, value);
        }
        match (client.auth_method, &client.client_secret) {
            (AuthMethod::ClientSecretBasic, Some(secret)) => {
                // RFC 6749 §2.3.1: both are form-encoded before Basic encoding.
                let mut id = String::new();
                form_encode_into(&mut id, &client.client_id);
                let mut encoded = String::with_capacity(3 * secret.expose().len());
                form_encode_into(&mut encoded, secret.expose());
                let encoded = SecretValue::new(encoded);
                http = http.basic_auth(id, Some(encoded.expose()));
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
        let response = http
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body.expose().to_owned())
            .send()
            .await
            .map_err(|e| OAuthError::TokenRequestFailed {
                endpoint: endpoint.to_owned(),
                reason: e.without_url().to_string(),
            })?;
        let nonce = response
            .headers()
            .get(crate::dpop::DPOP_NONCE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let (status, answer): (_, TokenAnswer) = answer(response).await;
        Ok((status, answer, nonce))
    }
}

impl Target<'_> {
    /// The token request of `grant` by `client` here.
    fn request<'a>(
        &'a self,
        client: &'a ClientRegistration,
        grant: &'a [(&'a str, &'a str)],
    ) -> TokenRequest<'a> {
        TokenRequest {
            endpoint: self.endpoint,
            resource: self.resource,
            client,
            grant,
            previous: Previous {
                refresh_token: None,
                scope: self.scope.map(str::to_owned),
                redirect_uri: None,
            },
            issuer: self.issuer,
            dpop_key: self.dpop_key,
        }
    }
}

/// The workload's JWT, read from `path` (surrounding white space dropped) and registered
/// for log masking.
fn read_assertion(path: &str) -> Result<SecretValue, OAuthError> {
    let failed = |reason: String| OAuthError::WorkloadToken {
        path: path.to_owned(),
        reason,
    };
    let text = SecretValue::new(std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?);
    let jwt = SecretValue::from(text.expose().trim());
    if jwt.is_empty() {
        return Err(failed("it is empty".to_owned()));
    }
    tether_log::register([&jwt]);
    Ok(jwt)
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
            dpop_key: None,
            dpop_bound: false,
            assertion_file: None,
            idp: None,
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
