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
mod tests;
