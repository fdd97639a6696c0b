//! Why an OAuth step failed.
//!
//! **Invariant:** no message holds a token, code, verifier or client secret, and none quotes
//! what a server answered beyond its HTTP status and the `error` code of an OAuth error body
//! (a fixed vocabulary of at most 64 printable ASCII characters; descriptions are never quoted).

use std::fmt;

use reqwest::StatusCode;

/// Why an OAuth step failed.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// A server URL, redirect URL or client-id metadata document URL does not parse. Returned
    /// by [`crate::canonical_resource`], [`crate::client_metadata_url`] and discovery; the
    /// caller reports it as bad input.
    #[error("'{url}' is not a URL: {reason}")]
    NotAUrl {
        /// The text given.
        url: String,
        /// What the URL parser said.
        reason: String,
    },
    /// A server URL is not `http` or `https`. Returned by [`crate::canonical_resource`]; the
    /// caller reports it as bad input.
    #[error("'{url}' is not an http(s) URL")]
    NotHttp {
        /// The URL given.
        url: String,
    },
    /// A client-id metadata document URL is not `https` with a path and without a fragment.
    /// Returned by [`crate::client_metadata_url`] before anything is sent; the caller reports it
    /// as bad input.
    #[error(
        "'{url}' cannot be a client-id metadata document URL: it must be https, with a path, without a fragment"
    )]
    NotAClientMetadataUrl {
        /// The URL given.
        url: String,
    },
    /// The HTTP client could not be built (no TLS backend). Returned by
    /// [`crate::OAuthClient::new`]; nothing can be sent, the caller reports it.
    #[error("cannot build the HTTP client: {reason}")]
    HttpClient {
        /// What reqwest said.
        reason: String,
    },
    /// The MCP server did not answer the unauthenticated probe. Returned by
    /// [`crate::OAuthClient::probe`] and discovery; the caller reports the server unreachable.
    #[error("cannot reach {url}: {reason}")]
    Unreachable {
        /// The server URL.
        url: String,
        /// What reqwest said (it names no body).
        reason: String,
    },
    /// The protected resource metadata names another resource than the server (RFC 9728
    /// §3.3): a token asked for it would be for someone else. Returned by discovery before
    /// anything is registered or authorized; the caller stops the login.
    #[error(
        "the protected resource metadata of {server} is for another resource ({resource}): not authorizing"
    )]
    ForeignResource {
        /// The canonical server URL.
        server: String,
        /// The `resource` the metadata names.
        resource: String,
    },
    /// The authorization server the resource metadata names is not a URL. Returned by
    /// discovery; the caller reports it (the server is misconfigured).
    #[error("authorization server '{issuer}': {reason}")]
    BadIssuer {
        /// The issuer given.
        issuer: String,
        /// What the URL parser said.
        reason: String,
    },
    /// The identity provider (`--idp`) publishes no metadata naming its token endpoint.
    /// Returned by enterprise-managed login; the user checks the issuer URL.
    #[error(
        "the identity provider {issuer} publishes no metadata with a token_endpoint (looked for its OpenID and OAuth metadata): check --idp, it is the provider's issuer URL"
    )]
    IdpUnknown {
        /// The issuer given.
        issuer: String,
    },
    /// The authorization server metadata lacks an endpoint it must have. Returned by
    /// discovery; the caller reports it (the server is misconfigured).
    #[error("the authorization server metadata has no {field}")]
    MissingEndpoint {
        /// `authorization_endpoint` or `token_endpoint`.
        field: &'static str,
    },
    /// An endpoint of the metadata is not one tether opens or sends to: only `https`, or
    /// `http` to this machine's loopback (a `file:`, `javascript:` or `vscode:` URL would be
    /// handed to the browser opener; plain http elsewhere carries codes and tokens in clear).
    /// Returned by discovery and [`crate::authorization_request`] before anything is opened or
    /// sent; the caller stops the login.
    #[error(
        "the authorization server's {field} is {what}: only https (or http to this machine's loopback) is opened or sent to; not authorizing"
    )]
    UnsafeEndpoint {
        /// The metadata field.
        field: &'static str,
        /// What the URL is: "a 'SCHEME:' URL" or "plain http to another host".
        what: String,
    },
    /// The authorization server metadata names another issuer than the one it was fetched for
    /// (RFC 8414 §3.3), or none: metadata published for another server. Returned by discovery
    /// before anything is registered or authorized; the caller stops the login.
    #[error(
        "the authorization server metadata fetched for {expected} {}: not authorizing (RFC 8414 requires them to be the same)",
        found.as_deref().map_or_else(|| "names no issuer".to_owned(), |found| format!("names another issuer ({found})"))
    )]
    IssuerMismatch {
        /// The issuer the metadata was fetched for.
        expected: String,
        /// The `issuer` the metadata names, if any.
        found: Option<String>,
    },
    /// The authorization response's `iss` (RFC 9207) is not the issuer discovery recorded,
    /// or is missing where the server said it sends one: the code may be another
    /// authorization server's (a mix-up attack). Returned by
    /// [`crate::code_from_response`] before the code is used; the caller stops the login.
    #[error(
        "the authorization response {} but the authorization server is {expected}: refused, the code is not used (RFC 9207; log in again, and check the server's authorization settings if it repeats)",
        found.as_deref().map_or_else(|| "carries no iss although the server says it sends one".to_owned(), |found| format!("names the issuer {found}"))
    )]
    IssMismatch {
        /// The issuer discovery recorded.
        expected: String,
        /// The response's `iss` (printable ASCII, at most 200 characters), if any.
        found: Option<String>,
    },
    /// The lock file of a server's logins could not be opened or locked.
    #[error("cannot lock {path} (the lock that keeps two logins to one server apart): {reason}")]
    Lock {
        /// The lock file.
        path: String,
        /// Why.
        reason: String,
    },
    /// An endpoint of the metadata is not a URL. Returned by
    /// [`crate::authorization_request`]; the caller reports it.
    #[error("{field}: {reason}")]
    BadEndpoint {
        /// The metadata field.
        field: &'static str,
        /// What the URL parser said.
        reason: String,
    },
    /// The authorization server offers no dynamic client registration and no client id was
    /// given. Returned by [`crate::OAuthClient::register`]; the user passes a pre-registered
    /// client id.
    #[error("the authorization server offers no dynamic client registration; pass --client-id")]
    NoRegistration,
    /// The registration request could not be sent or its answer read. Returned by
    /// [`crate::OAuthClient::register`]; the caller reports it.
    #[error("client registration at {endpoint}: {reason}")]
    RegistrationFailed {
        /// The registration endpoint.
        endpoint: String,
        /// What reqwest said.
        reason: String,
    },
    /// The registration endpoint answered with an error status. Returned by
    /// [`crate::OAuthClient::register`]; the caller reports it.
    #[error("client registration at {endpoint} answered {status}{}", code_suffix(.code))]
    RegistrationRefused {
        /// The registration endpoint.
        endpoint: String,
        /// Its answer's status.
        status: StatusCode,
        /// The OAuth `error` code of its body, when it had one.
        code: Option<String>,
    },
    /// The registration answer names no `client_id`. Returned by
    /// [`crate::OAuthClient::register`]; the caller reports it.
    #[error("the registration answer has no client_id")]
    NoClientId,
    /// The system's random number source failed: no verifier or `state` can be minted.
    /// Returned by [`crate::authorization_request`]; the caller reports it.
    #[error(transparent)]
    NoRandomness(#[from] tether_http::token::NoRandomness),
    /// The loopback redirect listener could not be bound. Returned by
    /// [`crate::RedirectListener::bind`]; the caller reports it.
    #[error("cannot listen on 127.0.0.1: {reason}")]
    Listen {
        /// What the OS said.
        reason: String,
    },
    /// No redirect with this login's `state` came back within the timeout (in seconds).
    /// Returned by [`crate::RedirectListener::code`] and the pasted-redirect wait; the user
    /// tries again.
    #[error("no authorization redirect came back within {0} s")]
    TimedOut(u64),
    /// The pasted redirect could not be read (stdin failed). Returned by
    /// [`crate::Prompt::paste`] implementations; the caller reports it.
    #[error("cannot read the pasted redirect: {reason}")]
    Paste {
        /// What the OS said.
        reason: String,
    },
    /// A redirect is not a URL. Returned by [`crate::code_from_redirect`]; the caller reports
    /// it (a pasted line that is not the redirect).
    #[error("the redirect is not a URL")]
    RedirectNotAUrl,
    /// A redirect's `state` is not this login's: a stale or forged redirect. Returned by
    /// [`crate::code_from_redirect`]; the redirect listener answers it 400 and keeps waiting,
    /// a pasted redirect fails the login.
    #[error("the redirect's state does not match this login (a stale or forged redirect)")]
    StateMismatch,
    /// The authorization server redirected with an `error` (the user declined, or the request
    /// was refused). Returned by [`crate::code_from_redirect`]; the caller reports it.
    #[error("the authorization server refused: {code}")]
    AuthorizationRefused {
        /// The redirect's `error` code (printable ASCII, at most 64 characters).
        code: String,
    },
    /// The redirect holds neither a code nor an error. Returned by
    /// [`crate::code_from_redirect`]; the caller reports it.
    #[error("the redirect holds no code")]
    NoCode,
    /// The token request could not be sent or its answer read. Returned by
    /// [`crate::OAuthClient::exchange`] and [`crate::OAuthClient::refresh`]; the caller reports
    /// it (at run time: a warning that says to log in again).
    #[error("token request to {endpoint}: {reason}")]
    TokenRequestFailed {
        /// The token endpoint.
        endpoint: String,
        /// What reqwest said, without the URL.
        reason: String,
    },
    /// The token endpoint answered with an error status (a revoked refresh token answers 400
    /// `invalid_grant`). Returned by [`crate::OAuthClient::exchange`] and
    /// [`crate::OAuthClient::refresh`]; the user logs in again.
    #[error("the token endpoint {endpoint} answered {status}{}", code_suffix(.code))]
    TokenRefused {
        /// The token endpoint.
        endpoint: String,
        /// Its answer's status.
        status: StatusCode,
        /// The OAuth `error` code of its body, when it had one.
        code: Option<String>,
    },
    /// The token answer holds no `access_token`. Returned by [`crate::OAuthClient::exchange`]
    /// and [`crate::OAuthClient::refresh`]; the caller reports it.
    #[error("the token answer has no access_token")]
    NoAccessToken,
    /// A refresh was asked for tokens that hold no refresh token. Returned by
    /// [`crate::OAuthClient::refresh`]; the user logs in again.
    #[error("no refresh token is stored")]
    NoRefreshToken,
    /// The client credentials grant needs a confidential client: a pre-registered client id
    /// with its secret.
    #[error(
        "the client credentials grant needs the client's secret or key: give --client-id ID with --client-secret SOURCE or --client-key SOURCE"
    )]
    NoClientSecret,
    /// A grant without a browser was asked for without the client id it needs.
    #[error(
        "this login needs the client id the authorization server issued to tether: give --client-id ID"
    )]
    NoPreregisteredClientId,
    /// The client's private key (`--client-key`) cannot sign an assertion.
    #[error("the client key cannot be used: {0}")]
    ClientKey(&'static str),
    /// The DPoP key (RFC 9449) could not be made or could not sign a proof. Returned by
    /// token requests for DPoP-bound tokens; the user logs in again.
    #[error("the DPoP key cannot be used: {0}")]
    DpopKey(&'static str),
    /// The workload's token file (`--workload-token-file`) could not be read, or is empty.
    /// Returned by the JWT bearer grant at login and at each renewal; the caller reports it.
    #[error(
        "cannot read the workload token file {path}: {reason} (it must hold the platform's JWT, e.g. a projected service-account token)"
    )]
    WorkloadToken {
        /// The file.
        path: String,
        /// What the OS said, or that it was empty.
        reason: String,
    },
    /// The stored access token is (about to be) expired and cannot be refreshed. Returned by
    /// [`crate::StoredTokens::current_token`]; the user logs in again.
    #[error("the access token expired and no refresh token is stored")]
    ExpiredWithoutRefresh,
    /// The token store failed (the local store or the secret store could not be opened, read
    /// or written); its message and causes are the store's. Returned by
    /// [`crate::TokenStore`] implementations; the caller reports it.
    #[error(transparent)]
    Store(Box<dyn std::error::Error + Send + Sync>),
    /// A step of a login failed; the source says why. Returned by
    /// [`crate::OAuthClient::login`] and [`crate::OAuthClient::authorize`]; the caller reports
    /// the step and its cause.
    #[error("{step}")]
    During {
        /// What was being done.
        step: Step,
        /// Why it failed.
        #[source]
        source: Box<OAuthError>,
    },
}

impl OAuthError {
    /// A failure of the token store.
    pub fn store(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Store(error.into())
    }

    /// `self` as the cause of a failed `step`.
    pub fn during(self, step: Step) -> Self {
        Self::During {
            step,
            source: Box::new(self),
        }
    }
}

/// A step of a login, named in [`OAuthError::During`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Discovery for the server URL given.
    Discovery {
        /// The URL as given.
        server: String,
    },
    /// Dynamic client registration.
    Registration,
    /// The exchange of the authorization code for tokens.
    CodeExchange,
    /// Asking for tokens with the client's own credentials.
    ClientCredentials,
    /// Asking for tokens with a JWT assertion (RFC 7523 §2.1).
    JwtBearer,
    /// Enterprise-managed authorization: the identity provider's ID-JAG, then the JWT bearer
    /// grant.
    EnterpriseManaged,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Discovery { server } => write!(f, "discovering how {server} is authorized"),
            Self::Registration => f.write_str("registering tether as an OAuth client"),
            Self::CodeExchange => f.write_str("exchanging the authorization code"),
            Self::ClientCredentials => {
                f.write_str("asking for tokens with the client's credentials")
            }
            Self::JwtBearer => f.write_str("asking for tokens with the workload's JWT"),
            Self::EnterpriseManaged => f.write_str(
                "asking for tokens with the identity provider's grant (enterprise-managed authorization)",
            ),
        }
    }
}

/// ` (error: CODE)` or nothing.
fn code_suffix(code: &Option<String>) -> String {
    code.as_deref()
        .map(|code| format!(" (error: {code})"))
        .unwrap_or_default()
}

/// The `error` code of an OAuth error body, when it is one: at most 64 printable ASCII
/// characters (a fixed vocabulary, not a secret).
pub(crate) fn oauth_error_code(code: Option<&str>) -> Option<String> {
    code.filter(|code| code.len() <= 64 && code.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
}

/// `text` as an error line may show what a server sent: printable ASCII only, at most 200
/// characters.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(200)
        .collect()
}
