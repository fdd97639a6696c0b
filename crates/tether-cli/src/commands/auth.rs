//! `tether auth login|status|logout`. The stored tokens as runs, hand-offs and `tether test` use
//! them are in `tokens.rs`; the OAuth client, the token records and their renewal are
//! `tether-oauth`'s. See specs/oauth/TECH.md.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tether_config::RenderedTransport;
use tether_oauth::{ClientChoice, LocalTokens, Login, Redirect, SystemClock, Terminal, Tokens};

use super::tokens::{SettingsStore, load, oauth_client};
use crate::cli::{AuthArgs, AuthCommand, LoginArgs};
use crate::exit::{FAILED, OK, Reported};
use crate::output::{print, print_json};
use crate::settings;

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
    // Only the URL is wanted: no stored token is applied (nor refreshed on the way).
    let session = super::resolve_only(&specs, &secrets, &progress).await?;
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
        AuthCommand::Login(args) => {
            let LoginArgs {
                server,
                no_browser,
                client_id,
                client_secret,
                client_key,
                client_metadata_url,
                client_credentials,
                workload_token_file,
                idp,
                idp_client_id,
                idp_id_token,
                timeout,
            } = args.as_ref();
            let client_secret = client_secret
                .as_deref()
                .map(|source| crate::secrets::read_one("the client secret", source))
                .transpose()?;
            let client_key = client_key
                .as_deref()
                .map(|source| crate::secrets::read_one("the client key", source))
                .transpose()?;
            let client_metadata_url =
                settings::client_metadata_url(client_metadata_url.as_deref())?
                    .map(|url| tether_oauth::client_metadata_url(&url))
                    .transpose()
                    .map_err(|e| crate::exit::UsageError::new(e.to_string()))?;
            // Renewals run from anywhere: the path is kept whole.
            let assertion_file = workload_token_file
                .as_deref()
                .map(|path| {
                    std::path::absolute(path)
                        .ok()
                        .and_then(|path| path.to_str().map(str::to_owned))
                        .ok_or_else(|| {
                            crate::exit::UsageError::new(format!(
                                "--workload-token-file {}: not a usable path (give the file's path in UTF-8)",
                                path.display()
                            ))
                        })
                })
                .transpose()?;
            let enterprise = match (idp, idp_client_id, idp_id_token) {
                (Some(issuer), Some(idp_client_id), Some(source)) => {
                    Some(tether_oauth::Enterprise {
                        idp_issuer: issuer.clone(),
                        idp_client_id: idp_client_id.clone(),
                        id_token: crate::secrets::read_one("the ID token", source)?,
                    })
                }
                _ => None,
            };
            let url = server_url(server).await?;
            let client = ClientChoice {
                client_id: client_id.clone(),
                client_secret,
                client_key,
                client_metadata_url,
                client_credentials: *client_credentials,
                assertion_file,
                enterprise,
            };
            let redirect = if *no_browser {
                Redirect::Paste
            } else {
                Redirect::Listen
            };
            login(&url, client, redirect, *timeout).await
        }
        AuthCommand::Status {
            server: Some(server),
            json,
        } => status(&server_url(server).await?, *json).await,
        AuthCommand::Status { server: None, json } => status_all(*json).await,
        AuthCommand::Logout { server } => logout(&server_url(server).await?),
    }
}

async fn login(
    server: &str,
    client: ClientChoice,
    redirect: Redirect,
    timeout: u64,
) -> anyhow::Result<u8> {
    let login = Login {
        server: server.to_owned(),
        client,
        redirect,
        timeout: Duration::from_secs(timeout.max(1)),
    };
    // The store is opened (and so can fail) before the browser step.
    let stored = LocalTokens::new(Arc::new(SettingsStore));
    let (tokens, by) = oauth_client()?
        .login_once(login, &Terminal, &stored)
        .await?;
    tether_log::eprintln_masked!("{by} to {}{}", tokens.server, expiry_text(&tokens));
    Ok(OK)
}

fn expiry_text(tokens: &Tokens) -> String {
    match tokens.seconds_left(&SystemClock) {
        Some(left) if left <= 0 => {
            " (access token expired; it is refreshed at the next use)".to_owned()
        }
        Some(left) => format!(" (access token expires in {left} s)"),
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
        let server = tether_oauth::canonical_resource(url)?;
        let tokens = load(&server)?;
        let client = oauth_client()?;
        let needs_auth = tokio::time::timeout(PROBE_TIMEOUT, client.probe(url))
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
            "server": tether_log::mask(&self.server),
            "installations": self.installations,
            "needs_auth": self.needs_auth,
            "logged_in": self.tokens.is_some(),
            "expires_at": self.tokens.as_ref().and_then(|t| t.expires_at),
            "refreshable": self.tokens.as_ref().is_some_and(|t| {
                t.refresh_token.is_some() || t.grant.asks_again()
            }),
            "grant": self.tokens.as_ref().map(|t| match t.grant {
                tether_oauth::Grant::AuthorizationCode => "authorization_code",
                tether_oauth::Grant::ClientCredentials => "client_credentials",
                tether_oauth::Grant::JwtBearer => "jwt_bearer",
                tether_oauth::Grant::EnterpriseManaged => "enterprise_managed",
            }),
            "dpop": self.tokens.as_ref().map(|t| t.dpop_bound),
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
            Some(tokens) if tokens.grant == tether_oauth::Grant::ClientCredentials => format!(
                "logged in as client {} (client credentials, renewed without a browser){}",
                tokens.client.client_id,
                expiry_text(tokens)
            ),
            Some(tokens) if tokens.grant == tether_oauth::Grant::JwtBearer => format!(
                "logged in as workload {} (its token file, read again at each renewal){}",
                tokens.client.client_id,
                expiry_text(tokens)
            ),
            Some(tokens) if tokens.grant == tether_oauth::Grant::EnterpriseManaged => format!(
                "logged in through {} (enterprise-managed, renewed while the ID token is good){}",
                tokens
                    .idp
                    .as_ref()
                    .map_or("the identity provider", |idp| idp.issuer.as_str()),
                expiry_text(tokens)
            ),
            Some(tokens) => format!("logged in{}", expiry_text(tokens)),
            None => format!("not logged in (run `tether auth login {}`)", self.server),
        };
        let state = match &self.tokens {
            Some(tokens) if tokens.dpop_bound => {
                format!("{state}; DPoP-bound to a key tether holds")
            }
            _ => state,
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
        print(&tether_log::mask(&format!("{}\n", found.line())));
    }
    Ok(OK)
}

/// `auth status` without a server: every installed remote server (by name) and every server
/// with stored tokens, probed at once; those that neither need OAuth nor hold tokens are left
/// out.
async fn status_all(json: bool) -> anyhow::Result<u8> {
    let store = settings::open_store()?;
    let mut installed: Vec<(String, String)> = store
        .list()?
        .into_iter()
        .filter(|summary| summary.transport != "stdio")
        .map(|summary| (summary.uid.to_string(), summary.name))
        .collect();
    // By name: the store lists by creation time, and two installations made in the same
    // second would otherwise come in an order that depends on the clock.
    installed.sort_by(|a, b| a.1.cmp(&b.1));
    let entries = store.oauth_entries()?;
    drop(store);
    // URL → installation names, in the order found.
    let mut servers: indexmap::IndexMap<String, (String, Vec<String>)> = indexmap::IndexMap::new();
    for (uid, name) in installed {
        match server_url(&uid).await {
            Ok(url) => {
                let canonical = tether_oauth::canonical_resource(&url)?;
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
        print(&tether_log::mask(&lines));
    }
    Ok(OK)
}

fn logout(server: &str) -> anyhow::Result<u8> {
    let store = settings::open_store()?;
    let resource = tether_oauth::canonical_resource(server)?;
    if tether_oauth::store::remove(&store, &resource)? {
        tether_log::eprintln_masked!("logged out of {resource}: its tokens are deleted");
        Ok(OK)
    } else {
        tether_log::eprintln_masked!("no tokens are stored for {resource}");
        Err(Reported(FAILED).into())
    }
}
