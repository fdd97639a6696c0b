//! A whole login: discovery, the client, the browser step (or the pasted redirect) and the
//! code exchange. The tokens it returns are not stored yet.

use std::time::Duration;

use tether_config::SecretValue;

use crate::authorization::{authorization_request, code_from_response};
use crate::client::OAuthClient;
use crate::discovery::Discovered;
use crate::error::{OAuthError, Step};
use crate::listener::RedirectListener;
use crate::prompt::Prompt;
use crate::registration::ClientRegistration;
use crate::token::{IdentityProvider, Tokens};

/// Who tether is to the authorization server, as the user chose.
#[derive(Debug, Clone, Default)]
pub struct ClientChoice {
    /// A pre-registered client id (no registration).
    pub client_id: Option<String>,
    /// Its secret (a confidential client).
    pub client_secret: Option<SecretValue>,
    /// Its private key (a PKCS#8 PEM), for a client that authenticates with signed JWTs
    /// (`private_key_jwt`) instead of a secret.
    pub client_key: Option<SecretValue>,
    /// A checked client-id metadata document URL ([`crate::client_metadata_url`]): the client
    /// id where the authorization server supports such documents.
    pub client_metadata_url: Option<String>,
    /// Log in as the client itself (`client_credentials`, no browser), even where the
    /// authorization server offers the browser's grant too. Without it, the client's
    /// credentials are used when the server offers `client_credentials` and not
    /// `authorization_code`.
    pub client_credentials: bool,
    /// A file holding the workload's JWT from its platform (workload identity federation):
    /// log in with it as an RFC 7523 assertion (`jwt-bearer`, no browser), the file read
    /// again at each renewal. Needs [`ClientChoice::client_id`].
    pub assertion_file: Option<String>,
    /// Enterprise-managed authorization (SEP-990): the identity provider the person signed in
    /// at, and their ID token there; exchanged for an ID-JAG, then for tokens (no browser).
    /// Needs [`ClientChoice::client_id`] (and its secret or key) at the MCP server's
    /// authorization server.
    pub enterprise: Option<Enterprise>,
}

/// What enterprise-managed authorization starts from.
#[derive(Debug, Clone)]
pub struct Enterprise {
    /// The identity provider's issuer URL (its token endpoint is discovered).
    pub idp_issuer: String,
    /// tether's client id at the identity provider.
    pub idp_client_id: String,
    /// The person's ID token from it.
    pub id_token: SecretValue,
}

/// How the redirect comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirect {
    /// To the loopback listener, after [`Prompt::open`].
    Listen,
    /// Pasted by the person ([`Prompt::paste`]): for a browser on another machine.
    Paste,
}

/// What to log in to, and how.
#[derive(Debug, Clone)]
pub struct Login {
    /// The MCP server's URL.
    pub server: String,
    /// Who tether is to its authorization server.
    pub client: ClientChoice,
    /// How the redirect comes back.
    pub redirect: Redirect,
    /// How long to wait for it.
    pub timeout: Duration,
}

impl OAuthClient {
    /// Logs in: discovery (the redirect listener is bound before registration, whose redirect
    /// URI names it), the client as [`ClientChoice`] says — a client id, else the metadata
    /// document URL where supported, else dynamic registration — then
    /// [`OAuthClient::authorize`]. The tokens are returned, not stored.
    pub async fn login(&self, login: Login, prompt: &dyn Prompt) -> Result<Tokens, OAuthError> {
        let Login {
            server,
            client,
            redirect,
            timeout,
        } = login;
        let discovered = self
            .discover(&server)
            .await
            .map_err(|e| e.during(Step::Discovery { server }))?;
        tracing::debug!(
            resource = %discovered.resource,
            authorization_endpoint = %discovered.authorization_endpoint,
            token_endpoint = %discovered.token_endpoint,
            "OAuth discovery"
        );
        let ClientChoice {
            client_id,
            client_secret,
            client_key,
            client_metadata_url,
            client_credentials,
            assertion_file,
            enterprise,
        } = client;
        // The grants without a browser that need a client the authorization server issued.
        let preregistered = |client_id: Option<String>| {
            let id = client_id.ok_or(OAuthError::NoPreregisteredClientId)?;
            Ok::<_, OAuthError>(match client_key.clone() {
                Some(key) => ClientRegistration::with_key(id, key),
                None => ClientRegistration::preregistered(id, client_secret.clone(), &discovered),
            })
        };
        if let Some(enterprise) = enterprise {
            // The person signed in at the identity provider already: no browser here.
            let client = preregistered(client_id)?;
            tether_log::register([&enterprise.id_token]);
            let idp = IdentityProvider {
                token_endpoint: self
                    .idp_token_endpoint(&enterprise.idp_issuer)
                    .await
                    .map_err(|e| e.during(Step::EnterpriseManaged))?,
                issuer: enterprise.idp_issuer,
                client_id: enterprise.idp_client_id,
                id_token: enterprise.id_token,
            };
            tracing::debug!(idp = %idp.issuer, "OAuth enterprise-managed authorization");
            return self
                .enterprise_managed(&discovered, &client, &idp)
                .await
                .map_err(|e| e.during(Step::EnterpriseManaged));
        }
        if let Some(file) = assertion_file {
            // No person and no browser: the platform's word for who the workload is.
            let client = preregistered(client_id)?;
            tracing::debug!("OAuth JWT bearer grant with the workload's token file");
            return self
                .jwt_bearer(&discovered, &client, &file)
                .await
                .map_err(|e| e.during(Step::JwtBearer));
        }
        let offers = |grant: &str| discovered.grant_types.iter().any(|g| g == grant);
        let machines_only = offers("client_credentials") && !offers("authorization_code");
        if client_credentials || machines_only {
            // No person and no browser: the client's own credentials.
            let client = match (client_id, client_key, client_secret) {
                (Some(id), Some(key), _) => ClientRegistration::with_key(id, key),
                (Some(id), None, Some(secret)) => {
                    ClientRegistration::preregistered(id, Some(secret), &discovered)
                }
                _ => return Err(OAuthError::NoClientSecret),
            };
            tracing::debug!("OAuth client credentials grant");
            return self
                .client_credentials(&discovered, &client)
                .await
                .map_err(|e| e.during(Step::ClientCredentials));
        }
        let listener = RedirectListener::bind().await?;
        let metadata_document =
            client_metadata_url.filter(|_| discovered.client_metadata_documents);
        let client = match (client_id, metadata_document, client_key) {
            (Some(id), _, Some(key)) => ClientRegistration::with_key(id, key),
            (Some(id), _, None) => {
                ClientRegistration::preregistered(id, client_secret, &discovered)
            }
            (None, Some(url), _) => {
                tracing::debug!(%url, "the client-id metadata document URL is the client id");
                ClientRegistration::metadata_document(&url)
            }
            (None, None, _) => self
                .register(&discovered, listener.redirect_uri())
                .await
                .map_err(|e| e.during(Step::Registration))?,
        };
        self.authorize(&discovered, &client, listener, redirect, timeout, prompt)
            .await
    }

    /// The browser step (or the pasted redirect, the listener then closed unused) bounded by
    /// `timeout`, and the code exchange: the tokens for `discovered` with `client`, not yet
    /// stored.
    pub async fn authorize(
        &self,
        discovered: &Discovered,
        client: &ClientRegistration,
        listener: RedirectListener,
        redirect: Redirect,
        timeout: Duration,
        prompt: &dyn Prompt,
    ) -> Result<Tokens, OAuthError> {
        let pending = authorization_request(discovered, client, listener.redirect_uri())?;
        let code = match redirect {
            Redirect::Paste => {
                drop(listener);
                let pasted = tokio::time::timeout(
                    timeout,
                    prompt.paste(&pending.url, &pending.redirect_uri),
                )
                .await
                .map_err(|_| OAuthError::TimedOut(timeout.as_secs()))??;
                code_from_response(pasted.expose().trim(), &pending.state, &pending.iss)?
            }
            Redirect::Listen => {
                prompt.open(&pending.url);
                listener
                    .code_checked(&pending.state, pending.iss.clone(), timeout)
                    .await?
            }
        };
        self.exchange(discovered, client, &pending, &code)
            .await
            .map_err(|e| e.during(Step::CodeExchange))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::extract::{Form, Query, State};
    use axum::http::{StatusCode, header};
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};
    use futures_util::future::BoxFuture;
    use serde_json::json;

    use super::*;
    use crate::authorization::code_challenge;
    use crate::clock::ManualClock;

    /// A small authorization server in front of `/mcp`, on loopback.
    #[derive(Default)]
    struct Server {
        base: String,
        /// code → (code challenge, redirect URI).
        codes: Mutex<HashMap<String, (String, String)>>,
    }

    type Shared = Arc<Server>;

    async fn mcp(State(server): State<Shared>) -> Response {
        let challenge = format!(
            "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
            server.base
        );
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, challenge)],
        )
            .into_response()
    }

    async fn resource(State(server): State<Shared>) -> Response {
        let base = &server.base;
        axum::Json(
            json!({"resource": format!("{base}/mcp"), "authorization_servers": [base],
            "scopes_supported": ["mcp"]}),
        )
        .into_response()
    }

    async fn metadata(State(server): State<Shared>) -> Response {
        let base = &server.base;
        axum::Json(json!({"issuer": base, "authorization_endpoint": format!("{base}/authorize"),
            "token_endpoint": format!("{base}/token"), "registration_endpoint": format!("{base}/register"),
            "token_endpoint_auth_methods_supported": ["none"], "scopes_supported": ["mcp", "offline_access"]}))
        .into_response()
    }

    async fn register(body: String) -> Response {
        assert!(
            body.contains("\"redirect_uris\":[\"http://127.0.0.1:"),
            "{body}"
        );
        // A loopback redirect: a native application (MCP 2026-07-28).
        assert!(body.contains("\"application_type\":\"native\""), "{body}");
        (
            StatusCode::CREATED,
            axum::Json(json!({"client_id": "client-1"})),
        )
            .into_response()
    }

    async fn authorize(
        State(server): State<Shared>,
        Query(query): Query<HashMap<String, String>>,
    ) -> Response {
        let field = |name: &str| query.get(name).cloned().unwrap_or_default();
        assert_eq!(field("client_id"), "client-1");
        assert_eq!(field("resource"), format!("{}/mcp", server.base));
        assert_eq!(field("scope"), "mcp offline_access");
        assert_eq!(field("code_challenge_method"), "S256");
        server.codes.lock().expect("the codes").insert(
            "CODE-1".to_owned(),
            (field("code_challenge"), field("redirect_uri")),
        );
        let location = format!(
            "{}?code=CODE-1&state={}",
            field("redirect_uri"),
            field("state")
        );
        (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
    }

    async fn token(
        State(server): State<Shared>,
        Form(form): Form<HashMap<String, String>>,
    ) -> Response {
        let field = |name: &str| form.get(name).cloned().unwrap_or_default();
        let pending = server
            .codes
            .lock()
            .expect("the codes")
            .remove(&field("code"));
        let verifier = SecretValue::new(field("code_verifier"));
        let good = pending.is_some_and(|(challenge, redirect)| {
            challenge == code_challenge(&verifier) && redirect == field("redirect_uri")
        }) && field("resource") == format!("{}/mcp", server.base)
            && field("client_id") == "client-1";
        if !good {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": "invalid_grant"})),
            )
                .into_response();
        }
        axum::Json(
            json!({"access_token": "LOGIN-SENTINEL-AT", "refresh_token": "LOGIN-SENTINEL-RT",
            "expires_in": 3600, "scope": "mcp offline_access"}),
        )
        .into_response()
    }

    async fn start() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding loopback");
        let base = format!("http://{}", listener.local_addr().expect("its address"));
        let server = Arc::new(Server {
            base: base.clone(),
            ..Server::default()
        });
        let router = Router::new()
            .route("/mcp", post(mcp))
            .route("/.well-known/oauth-protected-resource/mcp", get(resource))
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .route("/register", post(register))
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .with_state(server);
        tokio::spawn(async move { axum::serve(listener, router).await });
        base
    }

    /// A browser: follows the authorization URL to the redirect (`open`), or hands back the
    /// redirect's URL with its `state` replaced by `forged_state` (`paste`).
    struct Browser {
        forged_state: Option<&'static str>,
    }

    impl Prompt for Browser {
        fn open(&self, url: &str) {
            let url = url.to_owned();
            tokio::spawn(async move {
                let page = reqwest::get(&url).await.expect("following the redirect");
                assert_eq!(page.status(), reqwest::StatusCode::OK);
                let text = page.text().await.expect("the page");
                assert_eq!(text, crate::listener::ACCEPTED_PAGE);
            });
        }

        fn paste<'a>(
            &'a self,
            url: &'a str,
            _redirect_uri: &'a str,
        ) -> BoxFuture<'a, Result<SecretValue, OAuthError>> {
            Box::pin(async move {
                let client = reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .expect("a client");
                let answer = client.get(url).send().await.expect("authorizing");
                let location = answer.headers()[header::LOCATION]
                    .to_str()
                    .expect("a location")
                    .to_owned();
                let pasted = match self.forged_state {
                    Some(state) => {
                        let (head, _) = location.split_once("&state=").expect("a state");
                        format!("{head}&state={state}")
                    }
                    None => location,
                };
                Ok(SecretValue::new(pasted))
            })
        }

        fn tell(&self, _: &str) {}
    }

    fn login(base: &str, redirect: Redirect) -> Login {
        Login {
            server: format!("{base}/mcp"),
            client: ClientChoice::default(),
            redirect,
            timeout: Duration::from_secs(30),
        }
    }

    #[tokio::test]
    async fn a_login_through_the_listener_registers_authorizes_and_exchanges() {
        let base = start().await;
        let clock = Arc::new(ManualClock::at(1_000_000));
        let client = OAuthClient::new(clock).expect("a client");
        let browser = Browser { forged_state: None };
        let tokens = client
            .login(login(&base, Redirect::Listen), &browser)
            .await
            .expect("a login");
        assert_eq!(tokens.server, format!("{base}/mcp"));
        assert_eq!(tokens.resource, format!("{base}/mcp"));
        assert_eq!(tokens.token_endpoint, format!("{base}/token"));
        assert_eq!(tokens.client.client_id, "client-1");
        assert_eq!(tokens.expires_at, Some(1_000_000 + 3600));
        assert_eq!(tokens.scope.as_deref(), Some("mcp offline_access"));
        assert!(
            tokens.redirect_uri.as_deref().is_some_and(
                |uri| uri.starts_with("http://127.0.0.1:") && uri.ends_with("/callback")
            )
        );
        // Every token it read is masked in what tether prints from now on.
        let shown = tether_log::mask("LOGIN-SENTINEL-AT LOGIN-SENTINEL-RT CODE-1");
        assert!(
            !shown.contains("SENTINEL") && !shown.contains("CODE-1"),
            "{shown}"
        );
    }

    #[tokio::test]
    async fn a_pasted_redirect_is_checked_for_this_logins_state() {
        let base = start().await;
        let client = OAuthClient::new(Arc::new(ManualClock::at(0))).expect("a client");
        let pasted = client
            .login(
                login(&base, Redirect::Paste),
                &Browser { forged_state: None },
            )
            .await
            .expect("a login with the pasted redirect");
        assert_eq!(pasted.access_token.expose(), "LOGIN-SENTINEL-AT");
        let forged = client
            .login(
                login(&base, Redirect::Paste),
                &Browser {
                    forged_state: Some("forged"),
                },
            )
            .await;
        assert!(
            matches!(forged, Err(OAuthError::StateMismatch)),
            "{forged:?}"
        );
    }

    #[tokio::test]
    async fn a_failed_step_is_named_with_its_cause() {
        // Nothing listens on port 9 of loopback.
        let client = OAuthClient::new(Arc::new(ManualClock::at(0))).expect("a client");
        let failed = client
            .login(
                login("http://127.0.0.1:9", Redirect::Listen),
                &Browser { forged_state: None },
            )
            .await;
        let Err(error) = failed else {
            panic!("logged in to nothing");
        };
        assert_eq!(
            error.to_string(),
            "discovering how http://127.0.0.1:9/mcp is authorized"
        );
        let cause = std::error::Error::source(&error).expect("a cause");
        assert!(
            cause
                .to_string()
                .starts_with("cannot reach http://127.0.0.1:9/mcp: "),
            "{cause}"
        );
    }
}
