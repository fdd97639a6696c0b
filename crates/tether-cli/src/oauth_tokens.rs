//! The OAuth tokens of remote servers as runs use them: stored in the secret store through
//! the local store (`uuid v5(URL)` / `OAUTH`), applied to a session's servers, refreshed
//! before expiry, and renewed for the driver and the hand-off bridge ([`bearer_auth`]: a
//! refresh on 401, a step-up authorization on 403 `insufficient_scope`); and the browser step
//! login and step-up share. The protocol is `oauth.rs`; the commands are `commands/auth.rs`.
//! See specs/oauth/TECH.md.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use tether_config::{RenderedTransport, SecretValue};
use tether_driver::Session;
use uuid::Uuid;

use crate::oauth::{self, OAuthError, Tokens};
use crate::settings;

/// The namespace of the UUIDs tokens are stored under: `uuid v5(NAMESPACE, resource)`, so a
/// resource's tokens never share a key with an installation's secrets (v4 UUIDs).
const NAMESPACE: Uuid = Uuid::from_u128(0x6f1c_5d3e_8a2b_4c7d_9e0f_1a2b_3c4d_5e6f);

pub(crate) fn key(resource: &str) -> Uuid {
    Uuid::new_v5(&NAMESPACE, resource.as_bytes())
}

/// The tokens stored for `resource`. (The local store is opened for each read and write: it
/// is not `Sync`, and these run inside the driver's `Send` futures.) Without a local store
/// nothing is recorded, so nothing is read: a run of inline specs creates no database.
pub(crate) fn load(resource: &str) -> anyhow::Result<Option<Tokens>> {
    let Some(store) = settings::open_existing_store()? else {
        return Ok(None);
    };
    let value = store.get_oauth(key(resource))?;
    Ok(value.as_ref().and_then(Tokens::from_secret))
}

/// Stores `tokens` (where new values go; the local store records where and for which server).
pub(crate) fn save(tokens: &Tokens) -> anyhow::Result<()> {
    let store = settings::open_store()?;
    // The URL is recorded masked: a secret in its query (a rendered config's value) never
    // reaches the database; the key is derived from the real one.
    let shown = tether_log::mask(&tokens.server);
    store.set_oauth(key(&tokens.server), &shown, &tokens.to_secret())?;
    settings::announce(&store);
    Ok(())
}

/// How long a step-up waits for the browser's redirect.
const STEP_UP_TIMEOUT: Duration = Duration::from_secs(300);

/// The browser step (or the pasted redirect with `no_browser`) and the code exchange: the
/// tokens for `discovered` with `client`, not yet stored.
pub(crate) async fn authorize(
    http: &reqwest::Client,
    discovered: &oauth::Discovered,
    client: &oauth::Client,
    listener: oauth::Listener,
    no_browser: bool,
    wait: Duration,
) -> anyhow::Result<Tokens> {
    let pending = oauth::authorization_request(discovered, client, &listener.redirect_uri)?;
    let code = if no_browser {
        eprintln!(
            "Open this URL in a browser, log in, then paste the URL the browser was sent to (it starts with {}):\n{}",
            pending.redirect_uri, pending.url
        );
        drop(listener);
        tokio::time::timeout(wait, oauth::pasted_code(&pending.state))
            .await
            .map_err(|_| OAuthError::TimedOut(wait.as_secs()))??
    } else {
        open_browser(&pending.url);
        listener.code(&pending.state, wait).await?
    };
    oauth::exchange(http, discovered, client, &pending, &code)
        .await
        .context("exchanging the authorization code")
}

/// A new authorization of the stored client for `scope` (more than `tokens` hold): the
/// browser step again, the new tokens stored.
async fn step_up(url: &str, tokens: &Tokens, scope: String) -> anyhow::Result<Tokens> {
    let http = oauth::http_client()?;
    let mut discovered = oauth::discover(&http, url).await?;
    eprintln!(
        "{} asks for more access (scope {scope}): authorize it in the browser",
        discovered.server
    );
    discovered.scope = Some(scope);
    let listener = oauth::Listener::bind_like(tokens.redirect_uri.as_deref()).await?;
    let fresh = authorize(
        &http,
        &discovered,
        &tokens.client,
        listener,
        false,
        STEP_UP_TIMEOUT,
    )
    .await?;
    save(&fresh)?;
    Ok(fresh)
}

/// The platform's opener of URLs in the default browser, run when `$BROWSER` is unset.
const PLATFORM_OPENER: Option<&str> = if cfg!(target_os = "macos") {
    Some("open")
} else if cfg!(any(
    target_os = "linux",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd"
)) {
    Some("xdg-open")
} else {
    None
};

/// `$BROWSER URL` when `$BROWSER` is set, else the platform opener (`xdg-open`, `open`) with
/// the URL also on stderr (the opener may find no browser), else the URL on stderr.
fn open_browser(url: &str) {
    let quiet = |command: &mut std::process::Command| {
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
    };
    match std::env::var(tether_env::EnvVars::BROWSER) {
        Ok(browser) if !browser.trim().is_empty() => {
            eprintln!("opening the authorization page with $BROWSER…");
            let spawned = quiet(
                std::process::Command::new("sh")
                    .arg("-c")
                    .arg(format!("{browser} \"$1\""))
                    .arg("sh")
                    .arg(url),
            );
            if let Err(e) = spawned {
                eprintln!("cannot run $BROWSER ({e}); open this URL yourself:\n{url}");
            }
        }
        _ => match PLATFORM_OPENER
            .map(|opener| (opener, quiet(std::process::Command::new(opener).arg(url))))
        {
            Some((opener, Ok(_))) => eprintln!(
                "opening the authorization page with {opener}; if no browser opens, open this URL:\n{url}"
            ),
            Some((opener, Err(e))) => {
                tracing::debug!("cannot run {opener}: {e}");
                eprintln!("Open this URL in a browser to log in:\n{url}");
            }
            None => eprintln!("Open this URL in a browser to log in:\n{url}"),
        },
    }
}

/// Gives each remote server of `session` with a stored token its `Authorization: Bearer`
/// header, refreshing a token that expires within [`oauth::REFRESH_MARGIN`] first. A token
/// that cannot be refreshed is left out with a warning that says to log in again (the server
/// then answers 401 as it would without one).
pub async fn apply_stored_tokens(mut session: Session) -> Session {
    let urls: Vec<String> = session
        .servers()
        .iter()
        .filter_map(|server| match &server.transport {
            RenderedTransport::Remote { url, headers, .. }
                if !headers
                    .keys()
                    .any(|name| name.eq_ignore_ascii_case("authorization")) =>
            {
                Some(url.expose())
            }
            _ => None,
        })
        .collect();
    if urls.is_empty() {
        return session;
    }
    let mut tokens: HashMap<String, SecretValue> = HashMap::new();
    for url in urls {
        let Ok(resource) = oauth::canonical_resource(&url) else {
            continue;
        };
        match current_token(&resource).await {
            Ok(Some(token)) => {
                tokens.insert(url, token);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(
                "the stored OAuth token for {resource} could not be refreshed ({e:#}): run `tether auth login {resource}`"
            ),
        }
    }
    let applied = session.apply_bearer_tokens(|url| tokens.get(url).cloned());
    for name in applied {
        tracing::debug!(server = %name, "OAuth bearer token applied");
    }
    session
}

/// The access token stored for `resource`, refreshed (and stored again) when it is about to
/// expire. `Ok(None)` when none is stored.
async fn current_token(resource: &str) -> anyhow::Result<Option<SecretValue>> {
    let Some(tokens) = load(resource)? else {
        return Ok(None);
    };
    if !tokens.expires_within(oauth::now_unix(), oauth::REFRESH_MARGIN) {
        return Ok(Some(tokens.access_token));
    }
    if tokens.refresh_token.is_none() {
        anyhow::bail!("the access token expired and no refresh token is stored");
    }
    let http = oauth::http_client()?;
    let fresh = oauth::refresh(&http, &tokens).await?;
    save(&fresh)?;
    tracing::debug!(%resource, "OAuth access token refreshed");
    Ok(Some(fresh.access_token))
}

/// The driver's source of fresh bearer tokens ([`tether_driver::BearerAuth`]): asked at any
/// request of a run whose Streamable HTTP server refused the stored token.
pub fn bearer_auth() -> std::sync::Arc<dyn tether_driver::BearerAuth> {
    std::sync::Arc::new(StoredTokens)
}

/// Tokens from the secret store, renewed there.
struct StoredTokens;

impl tether_driver::BearerAuth for StoredTokens {
    /// Refreshes the stored tokens for the URL once (storing the new ones) and hands back the
    /// new access token, registered for log masking first. `None` (with a warning that says to
    /// log in again) when nothing is stored for the URL or the refresh fails.
    fn refresh(&self, url: String) -> BoxFuture<'static, Option<SecretValue>> {
        Box::pin(async move {
            let resource = oauth::canonical_resource(&url).ok()?;
            let tokens = load(&resource).ok().flatten()?;
            let refreshed = async {
                let http = oauth::http_client()?;
                let fresh = oauth::refresh(&http, &tokens).await?;
                save(&fresh)?;
                anyhow::Ok(fresh)
            }
            .await;
            hand_over(
                &resource,
                refreshed,
                "refused the stored OAuth token and it could not be refreshed",
            )
        })
    }

    /// A 403 `insufficient_scope` whose scope the stored token lacks: the stored client is
    /// authorized again for that scope joined to the one held (the browser step), the new
    /// tokens are stored, and the new access token is handed back, registered for log masking
    /// first. `None` (with a warning) for any other 403, a scope already held, or a failed
    /// authorization.
    fn step_up(&self, url: String, challenge: String) -> BoxFuture<'static, Option<SecretValue>> {
        Box::pin(async move {
            let resource = oauth::canonical_resource(&url).ok()?;
            let tokens = load(&resource).ok().flatten()?;
            let Some(scope) = oauth::step_up_scope(&challenge, tokens.scope.as_deref()) else {
                tracing::warn!(
                    "{resource} refused the stored OAuth token (403) without asking for a scope it lacks: not authorizing again"
                );
                return None;
            };
            hand_over(
                &resource,
                step_up(&url, &tokens, scope).await,
                "asks for more access and it could not be had",
            )
        })
    }
}

/// The new access token of `renewed`, registered for log masking first; `None` with a warning
/// "RESOURCE FAILED (why): run `tether auth login RESOURCE`".
fn hand_over(resource: &str, renewed: anyhow::Result<Tokens>, failed: &str) -> Option<SecretValue> {
    match renewed {
        Ok(fresh) => {
            tether_log::register(std::slice::from_ref(&fresh.access_token));
            tracing::debug!(%resource, "OAuth access token renewed");
            Some(fresh.access_token)
        }
        Err(e) => {
            tracing::warn!("{resource} {failed} ({e:#}): run `tether auth login {resource}`");
            None
        }
    }
}
