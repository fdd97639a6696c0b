//! `tether auth login|status|logout`, and the stored OAuth tokens a run applies (refreshed
//! first when they are about to expire). See specs/oauth/TECH.md.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::future::BoxFuture;
use serde_json::json;
use tether_config::{RenderedTransport, SecretValue};
use tether_driver::{ServerReport, ServerStatus, Session};
use uuid::Uuid;

use crate::cli::{AuthArgs, AuthCommand};
use crate::exit::{FAILED, OK, Reported};
use crate::oauth::{self, OAuthError, Tokens};
use crate::output::{print, print_json};
use crate::settings;

/// The namespace of the UUIDs tokens are stored under: `uuid v5(NAMESPACE, resource)`, so a
/// resource's tokens never share a key with an installation's secrets (v4 UUIDs).
const NAMESPACE: Uuid = Uuid::from_u128(0x6f1c_5d3e_8a2b_4c7d_9e0f_1a2b_3c4d_5e6f);

fn key(resource: &str) -> Uuid {
    Uuid::new_v5(&NAMESPACE, resource.as_bytes())
}

/// The tokens stored for `resource`. (The local store is opened for each read and write: it
/// is not `Sync`, and these run inside the driver's `Send` futures.)
fn load(resource: &str) -> anyhow::Result<Option<Tokens>> {
    let value = settings::open_store()?.get_oauth(key(resource))?;
    Ok(value.as_ref().and_then(Tokens::from_secret))
}

/// Stores `tokens` (where new values go; the local store records where and for which server).
fn save(tokens: &Tokens) -> anyhow::Result<()> {
    let store = settings::open_store()?;
    store.set_oauth(key(&tokens.server), &tokens.server, &tokens.to_secret())?;
    settings::announce(&store);
    Ok(())
}

/// The URL `server` names: itself when it is an http(s) URL, else the one remote server of the
/// MCP spec it is (an installation's name, a `--mcp NAME:` shorthand, inline JSON), resolved
/// and rendered as a run would.
async fn server_url(server: &str) -> anyhow::Result<String> {
    if server.starts_with("http://") || server.starts_with("https://") {
        return Ok(server.to_owned());
    }
    let specs = crate::cli::SpecArgs {
        mcp: vec![server.to_owned()],
        task: None,
        server_url: None,
        managed_timeout: None,
        pass_env: Vec::new(),
    };
    let secrets = crate::cli::SecretArgs {
        secret: Vec::new(),
        secrets_file: Vec::new(),
    };
    let progress = crate::output::Progress::new();
    let session = super::session(&specs, &secrets, &progress).await?;
    progress.finish();
    let urls: Vec<String> = session
        .servers()
        .iter()
        .filter_map(|s| match &s.transport {
            RenderedTransport::Remote { url, .. } => Some(url.expose()),
            RenderedTransport::Stdio { .. } => None,
        })
        .collect();
    match urls.as_slice() {
        [url] => Ok(url.clone()),
        [] => Err(crate::exit::UsageError::new(format!(
            "'{server}' has no remote (URL) server: OAuth is for servers reached over HTTP"
        ))
        .into()),
        _ => Err(crate::exit::UsageError::new(format!(
            "'{server}' holds {} remote servers: name one by its URL",
            urls.len()
        ))
        .into()),
    }
}

pub async fn auth(args: &AuthArgs) -> anyhow::Result<u8> {
    match &args.command {
        AuthCommand::Login {
            server,
            no_browser,
            client_id,
            client_secret,
            client_metadata_url,
            timeout,
        } => {
            let client_secret = client_secret
                .as_deref()
                .map(|source| crate::secrets::read_one("the client secret", source))
                .transpose()?;
            let client_metadata_url =
                settings::client_metadata_url(client_metadata_url.as_deref())?
                    .map(|url| oauth::client_metadata_url(&url))
                    .transpose()
                    .map_err(|e| crate::exit::UsageError::new(e.to_string()))?;
            let url = server_url(server).await?;
            let client = ClientChoice {
                client_id: client_id.clone(),
                client_secret,
                client_metadata_url,
            };
            login(&url, *no_browser, client, *timeout).await
        }
        AuthCommand::Status {
            server: Some(server),
            json,
        } => status(&server_url(server).await?, *json).await,
        AuthCommand::Status { server: None, json } => status_all(*json).await,
        AuthCommand::Logout { server } => logout(&server_url(server).await?),
    }
}

/// Who tether is to the authorization server, as the flags and settings say.
struct ClientChoice {
    /// `--client-id`: pre-registered.
    client_id: Option<String>,
    client_secret: Option<SecretValue>,
    /// `--client-metadata-url` or `oauth_client_metadata_url`: used when the server supports
    /// client-id metadata documents.
    client_metadata_url: Option<String>,
}

async fn login(
    server: &str,
    no_browser: bool,
    choice: ClientChoice,
    timeout: u64,
) -> anyhow::Result<u8> {
    let ClientChoice {
        client_id,
        client_secret,
        client_metadata_url,
    } = choice;
    // A store that cannot be opened fails now, not after the browser step.
    settings::open_store()?;
    let http = oauth::http_client()?;
    let discovered = oauth::discover(&http, server)
        .await
        .with_context(|| format!("discovering how {server} is authorized"))?;
    tracing::debug!(
        resource = %discovered.resource,
        authorization_endpoint = %discovered.authorization_endpoint,
        token_endpoint = %discovered.token_endpoint,
        "OAuth discovery"
    );
    let listener = oauth::Listener::bind().await?;
    let metadata_document = client_metadata_url.filter(|_| discovered.client_metadata_documents);
    let client = match (client_id, metadata_document) {
        (Some(id), _) => oauth::Client {
            client_id: id.to_owned(),
            auth_method: match &client_secret {
                None => "none",
                // Basic unless the server lists only post (RFC 8414's default is basic).
                Some(_)
                    if !discovered.auth_methods.is_empty()
                        && !discovered
                            .auth_methods
                            .iter()
                            .any(|m| m == "client_secret_basic")
                        && discovered
                            .auth_methods
                            .iter()
                            .any(|m| m == "client_secret_post") =>
                {
                    "client_secret_post"
                }
                Some(_) => "client_secret_basic",
            }
            .to_owned(),
            client_secret,
        },
        (None, Some(url)) => {
            tracing::debug!(%url, "the client-id metadata document URL is the client id");
            oauth::metadata_document_client(&url)
        }
        (None, None) => oauth::register(&http, &discovered, &listener.redirect_uri)
            .await
            .context("registering tether as an OAuth client")?,
    };
    let wait = Duration::from_secs(timeout.max(1));
    let tokens = authorize(&http, &discovered, &client, listener, no_browser, wait).await?;
    save(&tokens)?;
    eprintln!(
        "logged in to {}{}",
        tokens.server,
        expiry_text(tokens.expires_at)
    );
    Ok(OK)
}

/// How long a step-up waits for the browser's redirect.
const STEP_UP_TIMEOUT: Duration = Duration::from_secs(300);

/// The browser step (or the pasted redirect with `no_browser`) and the code exchange: the
/// tokens for `discovered` with `client`, not yet stored.
async fn authorize(
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

fn expiry_text(expires_at: Option<i64>) -> String {
    match expires_at {
        Some(at) => {
            let left = at.saturating_sub(oauth::now_unix());
            if left <= 0 {
                " (access token expired; it is refreshed at the next use)".to_owned()
            } else {
                format!(" (access token expires in {left} s)")
            }
        }
        None => String::new(),
    }
}

/// What `auth status` says of one server.
struct ServerAuth {
    /// The canonical URL.
    server: String,
    /// The local installations that use it.
    installations: Vec<String>,
    /// Whether it answered an unauthenticated request with 401 (`None`: unreachable).
    needs_auth: Option<bool>,
    tokens: Option<Tokens>,
}

impl ServerAuth {
    /// Probes `url` (bounded by [`PROBE_TIMEOUT`]) and reads its stored tokens.
    async fn of(url: &str, installations: Vec<String>) -> anyhow::Result<Self> {
        let server = oauth::canonical_resource(url)?;
        let tokens = load(&server)?;
        let http = oauth::http_client()?;
        let needs_auth = tokio::time::timeout(PROBE_TIMEOUT, oauth::probe(&http, url))
            .await
            .ok()
            .and_then(Result::ok)
            .map(|probe| probe.unauthorized);
        Ok(Self {
            server,
            installations,
            needs_auth,
            tokens,
        })
    }

    fn to_json(&self) -> serde_json::Value {
        json!({
            "server": self.server,
            "installations": self.installations,
            "needs_auth": self.needs_auth,
            "logged_in": self.tokens.is_some(),
            "expires_at": self.tokens.as_ref().and_then(|t| t.expires_at),
            "refreshable": self.tokens.as_ref().is_some_and(|t| t.refresh_token.is_some()),
        })
    }

    /// `URL (installed as NAME): needs OAuth; logged in (…)`.
    fn line(&self) -> String {
        let needs = match self.needs_auth {
            Some(true) => "needs OAuth",
            Some(false) => "answers without a token",
            None => "unreachable",
        };
        let state = match &self.tokens {
            Some(tokens) => format!("logged in{}", expiry_text(tokens.expires_at)),
            None => format!("not logged in (run `tether auth login {}`)", self.server),
        };
        let installed = match self.installations.as_slice() {
            [] => String::new(),
            names => format!(" (installed as {})", names.join(", ")),
        };
        format!("{}{installed}: {needs}; {state}", self.server)
    }
}

/// How long `auth status` waits for a server's answer to its probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

async fn status(server: &str, json: bool) -> anyhow::Result<u8> {
    let found = ServerAuth::of(server, Vec::new()).await?;
    if json {
        print_json(&found.to_json());
    } else {
        print(&format!("{}\n", found.line()));
    }
    Ok(OK)
}

/// `auth status` without a server: every installed remote server and every server with
/// stored tokens, probed at once; those that neither need OAuth nor hold tokens are left out.
async fn status_all(json: bool) -> anyhow::Result<u8> {
    let store = settings::open_store()?;
    let installed: Vec<(String, String)> = store
        .list()?
        .into_iter()
        .filter(|summary| summary.transport != "stdio")
        .map(|summary| (summary.uid.to_string(), summary.name))
        .collect();
    let entries = store.oauth_entries()?;
    drop(store);
    // URL → installation names, in the order found.
    let mut servers: indexmap::IndexMap<String, (String, Vec<String>)> = indexmap::IndexMap::new();
    for (uid, name) in installed {
        match server_url(&uid).await {
            Ok(url) => {
                let canonical = oauth::canonical_resource(&url)?;
                servers
                    .entry(canonical)
                    .or_insert((url, Vec::new()))
                    .1
                    .push(name);
            }
            Err(e) => tracing::debug!(installation = %name, "its URL cannot be rendered: {e:#}"),
        }
    }
    for entry in entries {
        servers
            .entry(entry.server.clone())
            .or_insert((entry.server, Vec::new()));
    }
    let found = futures_util::future::join_all(
        servers
            .into_values()
            .map(|(url, names)| async move { ServerAuth::of(&url, names).await }),
    )
    .await;
    let mut shown = Vec::new();
    for server in found {
        let server = server?;
        if server.needs_auth == Some(false) && server.tokens.is_none() {
            continue;
        }
        shown.push(server);
    }
    if json {
        print_json(&json!({
            "servers": shown.iter().map(ServerAuth::to_json).collect::<Vec<_>>(),
        }));
    } else if shown.is_empty() {
        eprintln!(
            "no server needs OAuth or has tokens stored (log in with `tether auth login URL`)"
        );
    } else {
        let lines: String = shown
            .iter()
            .map(|server| format!("{}\n", server.line()))
            .collect();
        print(&lines);
    }
    Ok(OK)
}

fn logout(server: &str) -> anyhow::Result<u8> {
    let store = settings::open_store()?;
    let resource = oauth::canonical_resource(server)?;
    if store.remove_oauth(key(&resource))? {
        eprintln!("logged out of {resource}: its tokens are deleted");
        Ok(OK)
    } else {
        eprintln!("no tokens are stored for {resource}");
        Err(Reported(FAILED).into())
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

/// Rewrites the failure of a remote server that answered 401 into what to do about it:
/// `needs login` when it publishes OAuth metadata and no token was sent, and the same when
/// the stored token was refused (revoked, or issued for something else).
pub async fn explain_unauthorized(session: &Session, reports: &mut [ServerReport]) {
    for report in reports {
        let ServerStatus::Failed { reason } = &mut report.status else {
            continue;
        };
        if !(reason.contains("authorization required") || reason.contains("HTTP 401")) {
            continue;
        }
        let Ok(server) = session.server(&report.name) else {
            continue;
        };
        let RenderedTransport::Remote { url, headers, .. } = &server.transport else {
            continue;
        };
        let url = url.expose();
        let Ok(resource) = oauth::canonical_resource(&url) else {
            continue;
        };
        if headers
            .keys()
            .any(|name| name.eq_ignore_ascii_case("authorization"))
            && !stored_tokens(&resource)
        {
            // The config's own credentials were refused: not an OAuth matter.
            continue;
        }
        if stored_tokens(&resource) {
            *reason = format!(
                "needs login: {resource} refused the stored OAuth token; run `tether auth login {resource}`"
            );
            continue;
        }
        let Ok(http) = oauth::http_client() else {
            continue;
        };
        if oauth::discover(&http, &url).await.is_ok() {
            *reason = format!(
                "needs login: {resource} requires OAuth and no token is stored; run `tether auth login {resource}`"
            );
        }
    }
}

/// Whether tokens are stored for `resource` (an unreadable store counts as none).
fn stored_tokens(resource: &str) -> bool {
    load(resource).ok().flatten().is_some()
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
            crate::log_mask::register(std::slice::from_ref(&fresh.access_token));
            tracing::debug!(%resource, "OAuth access token renewed");
            Some(fresh.access_token)
        }
        Err(e) => {
            tracing::warn!("{resource} {failed} ({e:#}): run `tether auth login {resource}`");
            None
        }
    }
}
