//! The stored tokens as runs use them ([`StoredTokens`]): applied to a session's remote
//! servers, refreshed before expiry (by the clock given), and renewed for the driver and the
//! hand-off bridge as [`tether_bearer::BearerAuth`] — a refresh on 401, a step-up
//! authorization on 403 `insufficient_scope`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tether_bearer::BearerTarget;
use tether_config::SecretValue;

use crate::challenge::step_up_scope;
use crate::client::OAuthClient;
use crate::clock::Clock;
use crate::error::OAuthError;
use crate::listener::RedirectListener;
use crate::login::Redirect;
use crate::prompt::Prompt;
use crate::resource::canonical_resource;
use crate::store::TokenStore;
use crate::token::Tokens;

/// How long a renewal waits for another process's login or renewal of the same server.
const RENEWAL_WAIT: Duration = Duration::from_secs(30);

/// How long a step-up waits for the browser's redirect, unless told otherwise.
pub const STEP_UP_TIMEOUT: Duration = Duration::from_secs(300);

/// The tokens of a [`TokenStore`], renewed there: what a run's servers are given, and the
/// source of fresh tokens when one refuses them. Cheap to clone.
#[derive(Clone)]
pub struct StoredTokens {
    store: Arc<dyn TokenStore>,
    prompt: Arc<dyn Prompt>,
    clock: Arc<dyn Clock>,
    step_up_timeout: Duration,
    /// The DPoP key of each server's access token in use (`None`: a bearer token), read once.
    dpop_keys: Arc<std::sync::Mutex<DpopKeys>>,
}

/// Per server: the access token last asked about and its DPoP key.
type DpopKeys = HashMap<String, (SecretValue, Option<SecretValue>)>;

impl std::fmt::Debug for StoredTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredTokens")
            .field("step_up_timeout", &self.step_up_timeout)
            .finish_non_exhaustive()
    }
}

impl StoredTokens {
    /// Tokens from `store`; a step-up's browser step goes through `prompt`; expiry is read
    /// from `clock`.
    pub fn new(store: Arc<dyn TokenStore>, prompt: Arc<dyn Prompt>, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            prompt,
            clock,
            step_up_timeout: STEP_UP_TIMEOUT,
            dpop_keys: Arc::default(),
        }
    }

    /// How long a step-up waits for the browser's redirect (default [`STEP_UP_TIMEOUT`]).
    pub fn with_step_up_timeout(mut self, timeout: Duration) -> Self {
        self.step_up_timeout = timeout;
        self
    }

    /// Self as the driver's source of fresh bearer tokens.
    pub fn bearer_auth(&self) -> Arc<dyn tether_bearer::BearerAuth> {
        Arc::new(self.clone())
    }

    fn client(&self) -> Result<OAuthClient, OAuthError> {
        OAuthClient::new(Arc::clone(&self.clock))
    }

    /// The access token stored for `server` (a canonical URL), refreshed (and stored again)
    /// when it expires within [`crate::REFRESH_MARGIN`]. `Ok(None)` when none is stored.
    pub async fn current_token(&self, server: &str) -> Result<Option<SecretValue>, OAuthError> {
        let Some(tokens) = self.store.load(server)? else {
            return Ok(None);
        };
        if !tokens.needs_refresh(self.clock.as_ref()) {
            return Ok(Some(tokens.access_token));
        }
        if tokens.refresh_token.is_none() && !tokens.grant.asks_again() {
            return Err(OAuthError::ExpiredWithoutRefresh);
        }
        // One renewal at a time across tether processes; another may have renewed the token
        // while this one waited: then its token, and no second use of the refresh token.
        let _lock = match self.store.lock_dir()? {
            Some(dir) => Some(crate::shared::lock_waiting(&dir, server, RENEWAL_WAIT).await?),
            None => None,
        };
        let Some(tokens) = self.store.load(server)? else {
            return Ok(None);
        };
        if !tokens.needs_refresh(self.clock.as_ref()) {
            return Ok(Some(tokens.access_token));
        }
        let fresh = self.client()?.refresh(&tokens).await?;
        self.store.save(&fresh)?;
        tracing::debug!(%server, "OAuth access token refreshed");
        Ok(Some(fresh.access_token))
    }

    /// Gives each remote server of `session` (the driver's `Session`) with a stored token, and
    /// no `Authorization` header of its own, its `Authorization: Bearer` header
    /// ([`BearerTarget::give_bearer_tokens`]), refreshing a token near expiry first. A token
    /// that cannot be refreshed is left out with a warning that says to log in again (the
    /// server then answers 401 as it would without one).
    pub async fn apply<S: BearerTarget>(&self, mut session: S) -> S {
        let urls = session.urls_without_authorization();
        if urls.is_empty() {
            return session;
        }
        let mut tokens: HashMap<String, SecretValue> = HashMap::new();
        for url in urls {
            let Ok(server) = canonical_resource(&url) else {
                continue;
            };
            match self.current_token(&server).await {
                Ok(Some(token)) => {
                    tokens.insert(url, token);
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(
                    "the stored OAuth token for {server} could not be refreshed ({}): run `tether auth login {server}`",
                    tether_log::error_chain(&e)
                ),
            }
        }
        let applied = session.give_bearer_tokens(&mut |url| tokens.get(url).cloned());
        for name in applied {
            tracing::debug!(server = %name, "OAuth bearer token applied");
        }
        session
    }

    /// A refused token's replacement: the stored tokens for `url` refreshed once (and stored)
    /// at the authorization server that issued them — unless the resource now names another
    /// one (discovery again): then a new login there, with a new registration, and nothing of
    /// the old server's is sent to it (SEP-2352).
    async fn refreshed_token(&self, url: &str) -> Option<SecretValue> {
        let server = canonical_resource(url).ok()?;
        let mut tokens = self.store.load(&server).ok().flatten()?;
        let discovered = match self.client() {
            Ok(client) => client.discover(url).await.ok(),
            Err(_) => None,
        };
        match discovered.as_ref().map(|found| moved(&tokens, found)) {
            Some(Moved::To(issuer)) => {
                self.prompt.tell(&format!(
                    "{server} is now authorized by another authorization server ({issuer}): log in there in the browser (nothing of the previous one is sent to it)"
                ));
                return hand_over(
                    &server,
                    self.log_in_again(url).await,
                    "moved to another authorization server and the login there failed",
                );
            }
            Some(Moved::Recorded(issuer)) => {
                // A record from before issuers were recorded: its issuer, once.
                tokens.issuer = Some(issuer);
                if let Err(e) = self.store.save(&tokens) {
                    tracing::debug!(error = %e, "could not record the issuer of the stored tokens");
                }
            }
            Some(Moved::No) | None => {}
        }
        let refreshed = async {
            let fresh = self.client()?.refresh(&tokens).await?;
            self.store.save(&fresh)?;
            Ok(fresh)
        }
        .await;
        hand_over(
            &server,
            refreshed,
            "refused the stored OAuth token and it could not be refreshed",
        )
    }

    /// A 403's replacement: the stored client authorized again for the scope `challenge`
    /// asks for joined to the one held.
    async fn stepped_up_token(&self, url: &str, challenge: &str) -> Option<SecretValue> {
        let server = canonical_resource(url).ok()?;
        let tokens = self.store.load(&server).ok().flatten()?;
        let Some(scope) = step_up_scope(challenge, tokens.scope.as_deref()) else {
            tracing::warn!(
                "{server} refused the stored OAuth token (403) without asking for a scope it lacks: not authorizing again"
            );
            return None;
        };
        hand_over(
            &server,
            self.authorize_again(url, &tokens, scope).await,
            "asks for more access and it could not be had",
        )
    }

    /// A new authorization of the stored client for `scope` (more than `tokens` hold): the
    /// browser step again, on the login's redirect port when it is free; the new tokens
    /// stored.
    async fn authorize_again(
        &self,
        url: &str,
        tokens: &Tokens,
        scope: String,
    ) -> Result<Tokens, OAuthError> {
        let client = self.client()?;
        let mut discovered = client.discover(url).await?;
        if let Moved::To(_) = moved(tokens, &discovered) {
            // The stored client is the previous authorization server's: never shown to this one.
            return self.log_in_again(url).await;
        }
        self.prompt.tell(&format!(
            "{} asks for more access (scope {scope}): authorize it in the browser",
            discovered.server
        ));
        discovered.scope = Some(scope);
        let listener = RedirectListener::bind_like(tokens.redirect_uri.as_deref()).await?;
        let fresh = client
            .authorize(
                &discovered,
                &tokens.client,
                listener,
                Redirect::Listen,
                self.step_up_timeout,
                self.prompt.as_ref(),
            )
            .await?;
        self.store.save(&fresh)?;
        Ok(fresh)
    }
}

impl StoredTokens {
    /// A whole new login to `url` (discovery, a new registration, the browser step), stored.
    async fn log_in_again(&self, url: &str) -> Result<Tokens, OAuthError> {
        let login = crate::login::Login {
            server: url.to_owned(),
            client: crate::login::ClientChoice::default(),
            redirect: Redirect::Listen,
            timeout: self.step_up_timeout,
        };
        let fresh = self.client()?.login(login, self.prompt.as_ref()).await?;
        self.store.save(&fresh)?;
        Ok(fresh)
    }
}

/// Whether stored tokens still belong to the authorization server discovery names now.
#[derive(Debug, PartialEq, Eq)]
enum Moved {
    /// The same server (or nothing to tell by).
    No,
    /// Another server, this issuer: a new login there.
    To(String),
    /// A record without its issuer, from the same server (its token endpoint): this issuer
    /// is to be recorded.
    Recorded(String),
}

fn moved(tokens: &Tokens, discovered: &crate::discovery::Discovered) -> Moved {
    let Some(now) = &discovered.issuer else {
        return Moved::No;
    };
    match &tokens.issuer {
        Some(issuer) if issuer == now => Moved::No,
        Some(_) => Moved::To(now.clone()),
        None if tokens.token_endpoint == discovered.token_endpoint => Moved::Recorded(now.clone()),
        None => Moved::To(now.clone()),
    }
}

impl tether_bearer::BearerAuth for StoredTokens {
    /// Refreshes the stored tokens for the URL once (storing the new ones) and hands back the
    /// new access token, registered for log masking. `None` (with a warning that says to log
    /// in again) when nothing is stored for the URL or the refresh fails.
    fn refresh(&self, url: String) -> BoxFuture<'static, Option<SecretValue>> {
        let this = self.clone();
        Box::pin(async move { this.refreshed_token(&url).await })
    }

    /// A 403 `insufficient_scope` whose scope the stored token lacks: the stored client is
    /// authorized again for that scope joined to the one held (the browser step), the new
    /// tokens are stored, and the new access token is handed back, registered for log
    /// masking. `None` (with a warning) for any other 403, a scope already held, or a failed
    /// authorization.
    fn step_up(&self, url: String, challenge: String) -> BoxFuture<'static, Option<SecretValue>> {
        let this = self.clone();
        Box::pin(async move { this.stepped_up_token(&url, &challenge).await })
    }

    /// A DPoP proof (RFC 9449 §7) when the stored tokens for `url` are bound to their key and
    /// `token` is theirs; `None` for a bearer token (or when nothing is stored).
    fn proof(
        &self,
        url: &str,
        method: &str,
        token: &SecretValue,
        nonce: Option<&str>,
    ) -> Option<SecretValue> {
        let server = canonical_resource(url).ok()?;
        let key = self.dpop_key(&server, token)?;
        let now = crate::clock::now_unix(self.clock.as_ref());
        match crate::dpop::proof(&key, method, url, now, nonce, Some(token)) {
            Ok(proof) => Some(proof),
            Err(e) => {
                tracing::warn!(
                    "no DPoP proof for {server} ({}): run `tether auth login {server}`",
                    tether_log::error_chain(&e)
                );
                None
            }
        }
    }
}

impl StoredTokens {
    /// The DPoP key of the stored tokens for `server` when `token` is their access token and
    /// is bound to it. Read from the store once per token (a run sends many requests).
    fn dpop_key(&self, server: &str, token: &SecretValue) -> Option<SecretValue> {
        let mut keys = self
            .dpop_keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((known, key)) = keys.get(server)
            && known == token
        {
            return key.clone();
        }
        let tokens = self.store.load(server).ok().flatten()?;
        if tokens.access_token != *token {
            return None;
        }
        let key = tokens.dpop_key.filter(|_| tokens.dpop_bound);
        keys.insert(server.to_owned(), (token.clone(), key.clone()));
        key
    }
}

/// The new access token of `renewed`, registered for log masking; `None` with a warning
/// "SERVER FAILED (why): run `tether auth login SERVER`".
fn hand_over(
    server: &str,
    renewed: Result<Tokens, OAuthError>,
    failed: &str,
) -> Option<SecretValue> {
    match renewed {
        Ok(fresh) => {
            tether_log::register([&fresh.access_token]);
            tracing::debug!(%server, "OAuth access token renewed");
            Some(fresh.access_token)
        }
        Err(e) => {
            tracing::warn!(
                "{server} {failed} ({}): run `tether auth login {server}`",
                tether_log::error_chain(&e)
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    use axum::Router;
    use axum::extract::State;
    use axum::http::StatusCode;
    use axum::routing::post;
    use serde_json::{Value, json};
    use tether_bearer::BearerAuth as _;

    use super::*;
    use crate::clock::ManualClock;
    use crate::registration::{AuthMethod, ClientRegistration};

    /// Tokens in memory.
    #[derive(Default)]
    struct Memory(Mutex<HashMap<String, Tokens>>);

    impl Memory {
        fn get(&self, server: &str) -> Option<Tokens> {
            self.0.lock().expect("the map").get(server).cloned()
        }
    }

    impl TokenStore for Memory {
        fn load(&self, server: &str) -> Result<Option<Tokens>, OAuthError> {
            Ok(self.get(server))
        }

        fn save(&self, tokens: &Tokens) -> Result<(), OAuthError> {
            self.0
                .lock()
                .expect("the map")
                .insert(tokens.server.clone(), tokens.clone());
            Ok(())
        }
    }

    /// A prompt no test of renewal reaches.
    struct Nobody;

    impl Prompt for Nobody {
        fn open(&self, _: &str) {}

        fn paste<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<SecretValue, OAuthError>> {
            Box::pin(async { Err(OAuthError::NoCode) })
        }

        fn tell(&self, _: &str) {}
    }

    /// What the test token endpoint answers its `n`th request (from 1).
    type Answer = fn(u64) -> (StatusCode, Value);

    /// A token endpoint on loopback: its URL and how many requests it has had.
    async fn token_endpoint(answer: Answer) -> (String, Arc<AtomicU64>) {
        let count = Arc::new(AtomicU64::new(0));
        let router = Router::new()
            .route(
                "/token",
                post(
                    |State((count, answer)): State<(Arc<AtomicU64>, Answer)>, body: String| async move {
                        assert!(body.contains("grant_type=refresh_token"), "{body}");
                        assert!(body.contains("resource="), "{body}");
                        let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                        let (status, value) = answer(n);
                        (status, value.to_string())
                    },
                ),
            )
            .with_state((Arc::clone(&count), answer));
        let address = serve(router).await;
        (format!("http://{address}/token"), count)
    }

    /// Serves `router` on loopback: its address.
    async fn serve(router: Router) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding loopback");
        let address = listener.local_addr().expect("its address");
        tokio::spawn(async move { axum::serve(listener, router).await });
        address
    }

    const SERVER: &str = "http://127.0.0.1:1/mcp";
    const NOW: i64 = 1_700_000_000;

    fn stored(token_endpoint: &str, expires_at: Option<i64>, refresh: bool) -> Tokens {
        Tokens {
            server: SERVER.to_owned(),
            resource: SERVER.to_owned(),
            access_token: "AT-0".into(),
            refresh_token: refresh.then(|| SecretValue::from("RT-0")),
            expires_at,
            token_endpoint: token_endpoint.to_owned(),
            client: ClientRegistration {
                client_id: "client".to_owned(),
                client_secret: None,
                auth_method: AuthMethod::None,
            },
            scope: Some("mcp".to_owned()),
            redirect_uri: None,
            issuer: None,
            grant: crate::token::Grant::AuthorizationCode,
            dpop_key: None,
            dpop_bound: false,
            assertion_file: None,
            idp: None,
        }
    }

    fn source(store: &Arc<Memory>, clock: &Arc<ManualClock>) -> StoredTokens {
        let store: Arc<dyn TokenStore> = Arc::clone(store) as Arc<dyn TokenStore>;
        let clock: Arc<dyn Clock> = Arc::clone(clock) as Arc<dyn Clock>;
        StoredTokens::new(store, Arc::new(Nobody), clock)
    }

    fn fresh(n: u64) -> (StatusCode, Value) {
        (
            StatusCode::OK,
            json!({"access_token": format!("AT-{n}"), "refresh_token": format!("RT-{n}"),
                "expires_in": 3600, "token_type": "Bearer"}),
        )
    }

    /// Tokens had with the client's own credentials are renewed by asking again with them:
    /// `grant_type=client_credentials`, the secret in HTTP Basic, never in the form.
    #[tokio::test]
    async fn client_credentials_tokens_are_renewed_by_asking_again() {
        let count = Arc::new(AtomicU64::new(0));
        let router = Router::new()
            .route(
                "/token",
                post(
                    |State(count): State<Arc<AtomicU64>>,
                     headers: axum::http::HeaderMap,
                     body: String| async move {
                        assert!(body.contains("grant_type=client_credentials"), "{body}");
                        assert!(body.contains("scope=mcp"), "{body}");
                        assert!(!body.contains("s3cret"), "the secret in the form: {body}");
                        let basic = headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        // base64("machine:s3cret")
                        assert_eq!(basic, "Basic bWFjaGluZTpzM2NyZXQ=");
                        let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                        json!({"access_token": format!("CC-{n}"), "expires_in": 600, "token_type": "Bearer"})
                            .to_string()
                    },
                ),
            )
            .with_state(Arc::clone(&count));
        let address = serve(router).await;
        let endpoint = format!("http://{address}/token");

        let clock = Arc::new(ManualClock::at(NOW));
        let store = Arc::new(Memory::default());
        let mut machine = stored(&endpoint, Some(NOW + 30), false);
        machine.grant = crate::token::Grant::ClientCredentials;
        machine.client = ClientRegistration {
            client_id: "machine".to_owned(),
            client_secret: Some("s3cret".into()),
            auth_method: AuthMethod::ClientSecretBasic,
        };
        store.save(&machine).expect("saving");
        let tokens = source(&store, &clock);
        // 30 s from expiry, no refresh token: asked for again, and stored.
        let token = tokens.current_token(SERVER).await.expect("a token");
        assert_eq!(token.as_ref().map(SecretValue::expose), Some("CC-1"));
        assert_eq!(count.load(Ordering::SeqCst), 1);
        let kept = store.get(SERVER).expect("stored tokens");
        assert_eq!(kept.grant, crate::token::Grant::ClientCredentials);
        assert_eq!(kept.expires_at, Some(NOW + 600));
        assert!(kept.refresh_token.is_none());
    }

    /// Tokens had with a workload's JWT are renewed by asking again with the JWT read anew
    /// from its file (the platform rotates it); a file gone says so in one line, without
    /// what it held.
    #[tokio::test]
    async fn jwt_bearer_tokens_are_renewed_with_the_token_file_read_again() {
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let router = Router::new()
            .route(
                "/token",
                post(
                    |State(seen): State<Arc<Mutex<Vec<String>>>>, body: String| async move {
                        assert!(
                            body.contains("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"),
                            "{body}"
                        );
                        assert!(body.contains("client_id=workload"), "{body}");
                        let mut seen = seen.lock().expect("the list");
                        seen.push(body);
                        json!({"access_token": format!("WT-{}", seen.len()), "expires_in": 300, "token_type": "Bearer"})
                            .to_string()
                    },
                ),
            )
            .with_state(Arc::clone(&seen));
        let endpoint = format!("http://{}/token", serve(router).await);
        let dir = tempfile::tempdir().expect("a directory");
        let file = dir.path().join("token");
        std::fs::write(&file, "SENTINEL-jwt-1\n").expect("writing the token file");

        let clock = Arc::new(ManualClock::at(NOW));
        let store = Arc::new(Memory::default());
        let mut workload = stored(&endpoint, Some(NOW + 30), false);
        workload.grant = crate::token::Grant::JwtBearer;
        workload.assertion_file = Some(file.to_string_lossy().into_owned());
        workload.client.client_id = "workload".to_owned();
        store.save(&workload).expect("saving");
        let tokens = source(&store, &clock);

        let token = tokens.current_token(SERVER).await.expect("a token");
        assert_eq!(token.as_ref().map(SecretValue::expose), Some("WT-1"));
        // The platform rotates the token: the next renewal sends the new one.
        std::fs::write(&file, "SENTINEL-jwt-2").expect("rotating the token file");
        clock.advance(Duration::from_secs(300));
        let token = tokens.current_token(SERVER).await.expect("a token");
        assert_eq!(token.as_ref().map(SecretValue::expose), Some("WT-2"));
        {
            let seen = seen.lock().expect("the list");
            assert!(seen[0].contains("assertion=SENTINEL-jwt-1&"), "{}", seen[0]);
            assert!(seen[1].contains("assertion=SENTINEL-jwt-2&"), "{}", seen[1]);
        }
        let kept = store.get(SERVER).expect("stored tokens");
        assert_eq!(kept.grant, crate::token::Grant::JwtBearer);
        assert_eq!(
            kept.assertion_file, workload.assertion_file,
            "the path, kept"
        );
        assert!(
            !kept.to_secret().expose().contains("SENTINEL-jwt"),
            "never its contents"
        );

        // The file gone: one line naming it, nothing it held, nothing sent.
        std::fs::remove_file(&file).expect("removing the token file");
        clock.advance(Duration::from_secs(300));
        let error = tokens
            .current_token(SERVER)
            .await
            .expect_err("no token file");
        let text = format!("{error} {error:?}");
        assert!(
            text.contains("workload token file") && text.contains("token"),
            "{text}"
        );
        assert!(!text.contains("SENTINEL"), "{text}");
        assert_eq!(seen.lock().expect("the list").len(), 2);
    }

    /// Enterprise-managed authorization: the person's ID token goes to the identity provider
    /// (found by its metadata) in an RFC 8693 exchange for an ID-JAG naming the authorization
    /// server and the resource; the ID-JAG goes to the authorization server as a JWT bearer
    /// assertion, the client authenticated by Basic; a renewal does both again. An ID token
    /// the provider refuses says which endpoint refused and never what was sent.
    #[tokio::test]
    async fn enterprise_managed_tokens_come_of_an_id_jag_and_are_renewed_the_same_way() {
        type Forms = Arc<Mutex<Vec<(String, HashMap<String, String>, String)>>>;
        let forms: Forms = Arc::default();
        let record = |forms: &Forms, at: &str, form: HashMap<String, String>, basic: String| {
            forms
                .lock()
                .expect("the list")
                .push((at.to_owned(), form, basic));
        };
        let router = Router::new()
            .route(
                "/.well-known/openid-configuration",
                axum::routing::get(|headers: axum::http::HeaderMap| async move {
                    let host = headers
                        .get("host")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    json!({"issuer": format!("http://{host}"), "token_endpoint": format!("http://{host}/idp/token")})
                        .to_string()
                }),
            )
            .route(
                "/idp/token",
                post(
                    move |State(forms): State<Forms>,
                          axum::extract::Form(form): axum::extract::Form<HashMap<String, String>>| async move {
                        let refused = form.get("subject_token").map(String::as_str) == Some("expired");
                        let n = forms.lock().expect("the list").len();
                        record(&forms, "idp", form, String::new());
                        if refused {
                            return (
                                StatusCode::BAD_REQUEST,
                                json!({"error": "invalid_grant", "error_description": "SENTINEL-BODY"}).to_string(),
                            );
                        }
                        (
                            StatusCode::OK,
                            json!({"access_token": format!("SENTINEL-JAG-{n}"),
                                "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag", "token_type": "N_A"})
                            .to_string(),
                        )
                    },
                ),
            )
            .route(
                "/token",
                post(
                    move |State(forms): State<Forms>,
                          headers: axum::http::HeaderMap,
                          axum::extract::Form(form): axum::extract::Form<HashMap<String, String>>| async move {
                        let basic = headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        let n = forms.lock().expect("the list").len();
                        record(&forms, "as", form, basic);
                        json!({"access_token": format!("EM-{n}"), "expires_in": 600, "token_type": "Bearer"})
                            .to_string()
                    },
                ),
            )
            .with_state(Arc::clone(&forms));
        let address = serve(router).await;
        let issuer = format!("http://{address}");
        let clock = Arc::new(ManualClock::at(NOW));
        let oauth = OAuthClient::new(Arc::clone(&clock) as Arc<dyn Clock>).expect("a client");
        let idp = crate::token::IdentityProvider {
            token_endpoint: oauth
                .idp_token_endpoint(&issuer)
                .await
                .expect("the IdP's metadata"),
            issuer: issuer.clone(),
            client_id: "tether-at-idp".to_owned(),
            id_token: SecretValue::from("SENTINEL-ID-TOKEN $HOME"),
        };
        assert_eq!(idp.token_endpoint, format!("{issuer}/idp/token"));
        let discovered = crate::discovery::Discovered {
            server: SERVER.to_owned(),
            resource: SERVER.to_owned(),
            scope: None,
            authorization_endpoint: String::new(),
            token_endpoint: format!("{issuer}/token"),
            registration_endpoint: None,
            auth_methods: vec!["client_secret_basic".to_owned()],
            grant_types: vec![crate::token::JWT_BEARER_GRANT.to_owned()],
            client_metadata_documents: false,
            issuer: Some("https://as.example".to_owned()),
            iss_parameter_supported: false,
            dpop_algs: Vec::new(),
        };
        let client = ClientRegistration::preregistered(
            "mcp-client".to_owned(),
            Some("s3cret".into()),
            &discovered,
        );
        let tokens = oauth
            .enterprise_managed(&discovered, &client, &idp)
            .await
            .expect("tokens");
        assert_eq!(tokens.access_token.expose(), "EM-1");
        assert_eq!(tokens.grant, crate::token::Grant::EnterpriseManaged);
        {
            let forms = forms.lock().expect("the list");
            let (at, exchange, _) = &forms[0];
            assert_eq!(at, "idp");
            for (name, value) in [
                (
                    "grant_type",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                ),
                (
                    "requested_token_type",
                    "urn:ietf:params:oauth:token-type:id-jag",
                ),
                ("subject_token", "SENTINEL-ID-TOKEN $HOME"),
                (
                    "subject_token_type",
                    "urn:ietf:params:oauth:token-type:id_token",
                ),
                ("audience", "https://as.example"),
                ("resource", SERVER),
                ("client_id", "tether-at-idp"),
            ] {
                assert_eq!(
                    exchange.get(name).map(String::as_str),
                    Some(value),
                    "{name}"
                );
            }
            let (at, grant, basic) = &forms[1];
            assert_eq!(at, "as");
            assert_eq!(
                grant.get("grant_type").map(String::as_str),
                Some(crate::token::JWT_BEARER_GRANT)
            );
            assert_eq!(
                grant.get("assertion").map(String::as_str),
                Some("SENTINEL-JAG-0")
            );
            // base64("mcp-client:s3cret")
            assert_eq!(basic, "Basic bWNwLWNsaWVudDpzM2NyZXQ=");
        }
        // The stored form keeps the provider and the ID token (a secret like the others).
        assert_eq!(
            Tokens::from_secret(&tokens.to_secret()),
            Some(tokens.clone())
        );

        // Near expiry: both steps again, with the stored ID token.
        let store = Arc::new(Memory::default());
        store.save(&tokens).expect("saving");
        let run = source(&store, &clock);
        clock.advance(Duration::from_secs(590));
        let renewed = run.current_token(SERVER).await.expect("a renewed token");
        assert_eq!(renewed.as_ref().map(SecretValue::expose), Some("EM-3"));
        assert_eq!(forms.lock().expect("the list").len(), 4);

        // An ID token the provider refuses: which endpoint, its status and code; nothing sent.
        let expired = crate::token::IdentityProvider {
            id_token: SecretValue::from("expired"),
            ..idp
        };
        let error = oauth
            .enterprise_managed(&discovered, &client, &expired)
            .await
            .expect_err("refused");
        let text = format!("{error} {error:?}");
        assert!(
            text.contains("/idp/token") && text.contains("invalid_grant"),
            "{text}"
        );
        assert!(!text.contains("SENTINEL"), "{text}");
        assert_eq!(
            forms.lock().expect("the list").len(),
            5,
            "no grant without an ID-JAG"
        );
    }

    /// The claims and header of a JWT, unverified (the signature is checked in dpop.rs).
    fn jwt_parts(jwt: &str) -> (Value, Value) {
        use base64::Engine as _;
        let part = |n: usize| -> Value {
            let text = jwt.split('.').nth(n).expect("a part");
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(text)
                .expect("base64url");
            serde_json::from_slice(&bytes).expect("JSON")
        };
        (part(0), part(1))
    }

    /// What the DPoP token endpoint saw: each request's proof (header, claims) and grant.
    type Seen = Arc<Mutex<Vec<(Value, Value, String)>>>;

    /// An authorization server that takes DPoP proofs and wants its nonce: the code exchange
    /// and each refresh are answered `use_dpop_nonce` until their proof carries it; the
    /// tokens are `token_type: DPoP`, bound to the proof's key, and a refresh proven with
    /// another key is refused.
    #[tokio::test]
    async fn dpop_tokens_are_bound_to_one_key_the_nonce_is_honoured_and_runs_prove_each_request() {
        let seen: Seen = Arc::default();
        let router = Router::new()
            .route(
                "/token",
                post(
                    |State(seen): State<Seen>, headers: axum::http::HeaderMap, body: String| async move {
                        let Some(proof) = headers.get("dpop").and_then(|v| v.to_str().ok()) else {
                            return (StatusCode::BAD_REQUEST, axum::http::HeaderMap::new(), json!({"error": "invalid_dpop_proof"}).to_string());
                        };
                        let (header, claims) = jwt_parts(proof);
                        let grant = if body.contains("grant_type=refresh_token") { "refresh" } else { "code" };
                        let mut seen = seen.lock().expect("the list");
                        let first_key = seen.first().map(|(header, _, _)| header["jwk"].clone());
                        seen.push((header.clone(), claims.clone(), grant.to_owned()));
                        if first_key.is_some_and(|key| key != header["jwk"]) {
                            return (StatusCode::BAD_REQUEST, axum::http::HeaderMap::new(), json!({"error": "invalid_dpop_proof"}).to_string());
                        }
                        if claims["nonce"] != "as-nonce" {
                            let mut nonce = axum::http::HeaderMap::new();
                            nonce.insert("dpop-nonce", axum::http::HeaderValue::from_static("as-nonce"));
                            return (StatusCode::BAD_REQUEST, nonce, json!({"error": "use_dpop_nonce"}).to_string());
                        }
                        let n = seen.len();
                        (
                            StatusCode::OK,
                            axum::http::HeaderMap::new(),
                            json!({"access_token": format!("DP-{n}"), "refresh_token": format!("DR-{n}"),
                                "token_type": "DPoP", "expires_in": 600}).to_string(),
                        )
                    },
                ),
            )
            .with_state(Arc::clone(&seen));
        let address = serve(router).await;
        let endpoint = format!("http://{address}/token");

        let clock = Arc::new(ManualClock::at(NOW));
        let discovered = crate::discovery::Discovered {
            server: SERVER.to_owned(),
            resource: SERVER.to_owned(),
            scope: Some("mcp".to_owned()),
            authorization_endpoint: format!("http://{address}/authorize"),
            token_endpoint: endpoint.clone(),
            registration_endpoint: None,
            auth_methods: Vec::new(),
            grant_types: Vec::new(),
            client_metadata_documents: false,
            issuer: None,
            iss_parameter_supported: false,
            dpop_algs: vec!["RS256".to_owned(), "ES256".to_owned()],
        };
        let client = ClientRegistration {
            client_id: "client".to_owned(),
            client_secret: None,
            auth_method: AuthMethod::None,
        };
        let pending = crate::authorization::authorization_request(
            &discovered,
            &client,
            "http://127.0.0.1:9/callback",
        )
        .expect("an authorization request");
        let oauth = OAuthClient::new(Arc::clone(&clock) as Arc<dyn Clock>).expect("a client");
        let tokens = oauth
            .exchange(
                &discovered,
                &client,
                &pending,
                &SecretValue::from("the-code"),
            )
            .await
            .expect("DPoP-bound tokens");
        assert!(tokens.dpop_bound, "token_type DPoP");
        assert!(tokens.dpop_key.is_some(), "the key is kept with the tokens");
        assert_eq!(tokens.access_token.expose(), "DP-2");
        {
            let seen = seen.lock().expect("the list");
            assert_eq!(seen.len(), 2, "once without the nonce, once with it");
            let (header, claims, _) = &seen[1];
            assert_eq!(header["typ"], "dpop+jwt");
            assert!(header["jwk"].get("d").is_none(), "public key only");
            assert_eq!(claims["htm"], "POST");
            assert_eq!(claims["htu"], endpoint.as_str());
            assert_eq!(claims["iat"], NOW);
            assert!(
                claims.get("ath").is_none(),
                "no token goes with a token request"
            );
            assert_ne!(
                seen[0].1["jti"], claims["jti"],
                "a fresh proof for the retry"
            );
        }
        // The stored form keeps the key and the binding.
        let back = Tokens::from_secret(&tokens.to_secret()).expect("the stored form");
        assert_eq!(back, tokens);

        // A run: every request to the server carries a proof naming it and the token.
        let store = Arc::new(Memory::default());
        store.save(&tokens).expect("saving");
        let run = source(&store, &clock);
        let auth = run.bearer_auth();
        let token = tokens.access_token.clone();
        let proof = auth
            .proof(&format!("{SERVER}#f"), "POST", &token, Some("rs-nonce"))
            .expect("a proof for a bound token");
        let (header, claims) = jwt_parts(proof.expose());
        assert_eq!(
            header["jwk"],
            seen.lock().expect("the list")[1].0["jwk"],
            "the same key"
        );
        assert_eq!(claims["htu"], SERVER);
        assert_eq!(claims["nonce"], "rs-nonce");
        use base64::Engine as _;
        let ath = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
            aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, b"DP-2"),
        );
        assert_eq!(claims["ath"], ath.as_str());
        assert!(
            auth.proof(SERVER, "POST", &SecretValue::from("another"), None)
                .is_none(),
            "a token that is not the stored one gets no proof"
        );

        // Near expiry the refresh is proven with the same key (and the nonce again).
        clock.advance(Duration::from_secs(590));
        let renewed = run.current_token(SERVER).await.expect("a renewed token");
        assert_eq!(renewed.as_ref().map(SecretValue::expose), Some("DP-4"));
        let seen = seen.lock().expect("the list");
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[3].2, "refresh");
        assert_eq!(seen[3].0["jwk"], seen[1].0["jwk"], "one key per server");
        let kept = store.get(SERVER).expect("stored tokens");
        assert!(kept.dpop_bound && kept.dpop_key == tokens.dpop_key);
        // A bearer token (the old kind of record) gets no proof.
        let bearer = stored(&endpoint, None, true);
        store.save(&bearer).expect("saving");
        assert!(
            auth.proof(SERVER, "POST", &SecretValue::from("AT-0"), None)
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_token_is_refreshed_once_it_is_within_the_margin_by_the_clock() {
        let (endpoint, requests) = token_endpoint(fresh).await;
        let clock = Arc::new(ManualClock::at(NOW));
        let store = Arc::new(Memory::default());
        store
            .save(&stored(&endpoint, Some(NOW + 3600), true))
            .expect("saving");
        let tokens = source(&store, &clock);

        // An hour from expiry: used as it is.
        let token = tokens.current_token(SERVER).await.expect("a token");
        assert_eq!(token.as_ref().map(SecretValue::expose), Some("AT-0"));
        assert_eq!(requests.load(Ordering::SeqCst), 0);

        // 59 minutes on, 60 s are left: refreshed before use, and stored.
        clock.advance(Duration::from_secs(3540));
        let token = tokens.current_token(SERVER).await.expect("a token");
        assert_eq!(token.as_ref().map(SecretValue::expose), Some("AT-1"));
        assert_eq!(requests.load(Ordering::SeqCst), 1);
        let kept = store.get(SERVER).expect("stored tokens");
        assert_eq!(kept.access_token.expose(), "AT-1");
        assert_eq!(
            kept.refresh_token.as_ref().map(SecretValue::expose),
            Some("RT-1")
        );
        assert_eq!(kept.expires_at, Some(NOW + 3540 + 3600), "by the clock");
        assert_eq!(kept.scope.as_deref(), Some("mcp"), "the scope held is kept");

        // The refreshed token is an hour from expiry again.
        let token = tokens.current_token(SERVER).await.expect("a token");
        assert_eq!(token.as_ref().map(SecretValue::expose), Some("AT-1"));
        assert_eq!(requests.load(Ordering::SeqCst), 1);
    }

    /// [`Memory`] with a lock directory, as the local store has: renewals are shared.
    struct Locked(Memory, tempfile::TempDir);

    impl TokenStore for Locked {
        fn load(&self, server: &str) -> Result<Option<Tokens>, OAuthError> {
            self.0.load(server)
        }

        fn save(&self, tokens: &Tokens) -> Result<(), OAuthError> {
            self.0.save(tokens)
        }

        fn lock_dir(&self) -> Result<Option<std::path::PathBuf>, OAuthError> {
            Ok(Some(self.1.path().to_owned()))
        }
    }

    #[tokio::test]
    async fn concurrent_renewals_of_one_token_spend_its_refresh_token_once() {
        // The authorization server rotates refresh tokens: the first refresh with RT-0 wins,
        // a second use of RT-0 is refused (reuse).
        let (endpoint, requests) = token_endpoint(|n| {
            if n == 1 {
                fresh(1)
            } else {
                (StatusCode::BAD_REQUEST, json!({"error": "invalid_grant"}))
            }
        })
        .await;
        let clock = Arc::new(ManualClock::at(NOW));
        let store = Arc::new(Locked(
            Memory::default(),
            tempfile::tempdir().expect("a lock directory"),
        ));
        store
            .save(&stored(&endpoint, Some(NOW - 1), true))
            .expect("saving");
        let clock_dyn: Arc<dyn Clock> = Arc::clone(&clock) as Arc<dyn Clock>;
        let runs: Vec<StoredTokens> = (0..4)
            .map(|_| {
                let store: Arc<dyn TokenStore> = Arc::clone(&store) as Arc<dyn TokenStore>;
                StoredTokens::new(store, Arc::new(Nobody), Arc::clone(&clock_dyn))
            })
            .collect();
        let tokens =
            futures_util::future::join_all(runs.iter().map(|run| run.current_token(SERVER))).await;
        for token in tokens {
            let token = token.expect("a renewed token, not invalid_grant");
            assert_eq!(token.as_ref().map(SecretValue::expose), Some("AT-1"));
        }
        assert_eq!(requests.load(Ordering::SeqCst), 1, "one refresh");
    }

    #[tokio::test]
    async fn a_refused_refresh_is_typed_and_never_quotes_the_body() {
        let (endpoint, requests) = token_endpoint(|_| {
            (
                StatusCode::BAD_REQUEST,
                json!({"error": "invalid_grant", "error_description": "SENTINEL-BODY RT-0"}),
            )
        })
        .await;
        let clock = Arc::new(ManualClock::at(NOW));
        let store = Arc::new(Memory::default());
        store
            .save(&stored(&endpoint, Some(NOW - 1), true))
            .expect("saving");
        let tokens = source(&store, &clock);
        let refused = tokens.current_token(SERVER).await;
        let Err(error) = refused else {
            panic!("refreshed against a refusing endpoint: {refused:?}");
        };
        assert!(
            matches!(
                &error,
                OAuthError::TokenRefused { status, code: Some(code), .. }
                    if *status == StatusCode::BAD_REQUEST && code == "invalid_grant"
            ),
            "{error:?}"
        );
        let text = format!("{error} {error:?}");
        assert!(
            !text.contains("SENTINEL") && !text.contains("RT-0"),
            "{text}"
        );
        assert_eq!(requests.load(Ordering::SeqCst), 1);
        assert_eq!(
            store.get(SERVER).map(|t| t.access_token),
            Some(SecretValue::from("AT-0")),
            "nothing stored"
        );
        // The driver's renewal: no token, and the same refusal again.
        assert_eq!(tokens.refresh(SERVER.to_owned()).await, None);
        assert_eq!(requests.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_expired_token_without_a_refresh_token_is_not_sent() {
        let (endpoint, requests) = token_endpoint(fresh).await;
        let clock = Arc::new(ManualClock::at(NOW));
        let store = Arc::new(Memory::default());
        store
            .save(&stored(&endpoint, Some(NOW + 30), false))
            .expect("saving");
        let tokens = source(&store, &clock);
        assert!(matches!(
            tokens.current_token(SERVER).await,
            Err(OAuthError::ExpiredWithoutRefresh)
        ));
        assert_eq!(requests.load(Ordering::SeqCst), 0);
        assert_eq!(
            tokens.current_token("http://127.0.0.1:1/other").await.ok(),
            Some(None),
            "nothing stored: no token"
        );
    }

    #[tokio::test]
    async fn a_refused_token_is_renewed_whatever_its_expiry() {
        // The answer leaves out the refresh token and the expiry: the old refresh token stays.
        let (endpoint, requests) = token_endpoint(|_| {
            (
                StatusCode::OK,
                json!({"access_token": "AT-new", "scope": "mcp mcp:write"}),
            )
        })
        .await;
        let clock = Arc::new(ManualClock::at(NOW));
        let store = Arc::new(Memory::default());
        store
            .save(&stored(&endpoint, Some(NOW + 3600), true))
            .expect("saving");
        let tokens = source(&store, &clock).bearer_auth();
        let renewed = tokens.refresh(format!("{SERVER}#fragment")).await;
        assert_eq!(renewed, Some(SecretValue::from("AT-new")));
        assert_eq!(requests.load(Ordering::SeqCst), 1);
        let kept = store.get(SERVER).expect("stored tokens");
        assert_eq!(kept.refresh_token, Some(SecretValue::from("RT-0")));
        assert_eq!(kept.expires_at, None);
        assert_eq!(kept.scope.as_deref(), Some("mcp mcp:write"));
        // Nothing stored for another server: nothing to renew with.
        assert_eq!(
            tokens.refresh("http://127.0.0.1:1/other".to_owned()).await,
            None
        );
        // A 403 that asks for no scope the token lacks: no new authorization.
        let challenge = r#"Bearer error="insufficient_scope", scope="mcp""#.to_owned();
        assert_eq!(tokens.step_up(SERVER.to_owned(), challenge).await, None);
        assert_eq!(requests.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn tokens_stay_with_their_authorization_server_and_old_records_learn_theirs_once() {
        let found = |issuer: Option<&str>, token_endpoint: &str| crate::discovery::Discovered {
            server: SERVER.to_owned(),
            resource: SERVER.to_owned(),
            scope: None,
            authorization_endpoint: "http://127.0.0.1:1/authorize".to_owned(),
            token_endpoint: token_endpoint.to_owned(),
            registration_endpoint: None,
            auth_methods: Vec::new(),
            grant_types: Vec::new(),
            client_metadata_documents: false,
            issuer: issuer.map(str::to_owned),
            iss_parameter_supported: false,
            dpop_algs: Vec::new(),
        };
        let old_endpoint = "http://127.0.0.1:1/token";
        let recorded = Tokens {
            issuer: Some("http://127.0.0.1:1".to_owned()),
            ..stored(old_endpoint, None, true)
        };
        assert_eq!(
            moved(&recorded, &found(Some("http://127.0.0.1:1"), old_endpoint)),
            Moved::No
        );
        assert_eq!(
            moved(
                &recorded,
                &found(Some("http://127.0.0.1:2"), "http://127.0.0.1:2/token")
            ),
            Moved::To("http://127.0.0.1:2".to_owned()),
            "the resource names a new authorization server: a new login there"
        );
        // A record stored before issuers were: the same token endpoint is the same server,
        // whose issuer is recorded; another one is a move.
        let old = stored(old_endpoint, None, true);
        assert_eq!(
            moved(&old, &found(Some("http://127.0.0.1:1"), old_endpoint)),
            Moved::Recorded("http://127.0.0.1:1".to_owned())
        );
        assert_eq!(
            moved(
                &old,
                &found(Some("http://127.0.0.1:2"), "http://127.0.0.1:2/token")
            ),
            Moved::To("http://127.0.0.1:2".to_owned())
        );
        // Nothing named (no metadata): nothing to tell by.
        assert_eq!(
            moved(&old, &found(None, "http://127.0.0.1:2/token")),
            Moved::No
        );
        // Once recorded, the record keeps its issuer in the stored form.
        let migrated = Tokens {
            issuer: Some("http://127.0.0.1:1".to_owned()),
            ..old
        };
        assert_eq!(Tokens::from_secret(&migrated.to_secret()), Some(migrated));
    }
}
