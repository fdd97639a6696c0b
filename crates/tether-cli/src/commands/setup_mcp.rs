//! `tether setup-mcp` (the setup tools of `tether-setup`, over stdio or `--listen`) and
//! `tether secrets submit` (a value for one of its pages, typed on a terminal): the glue —
//! flags, settings, the token file, what is printed, exit codes.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tether_config::SecretValue;
use tether_registry::Registries;
use tether_setup::refs::{IDLE_TTL, Refs};
use tether_setup::submit::{Announcement, AnnouncementKey};
use tether_setup::{Host, MCP_PATH, Settings, SetupServer, page};

use super::auth::OauthTokens;
use crate::cli::SetupMcpArgs;
use crate::exit::{FAILED, OK, UsageError};
use crate::output::Progress;
use crate::{secrets, settings};

/// What the setup server borrows from the CLI: its store settings, its spinner, its OAuth
/// tokens.
struct CliHost;

impl Host for CliHost {
    fn open_store(&self) -> Result<tether_store::Store, String> {
        settings::open_store().map_err(|error| format!("{error:#}"))
    }

    fn installed(&self, store: &tether_store::Store) {
        settings::announce(store);
    }

    fn progress(&self) -> Box<dyn tether_install::Progress> {
        Box::new(Progress::new())
    }

    fn tokens(&self) -> Option<Arc<dyn tether_install::StoredTokens>> {
        Some(Arc::new(OauthTokens))
    }
}

/// `tether setup-mcp`.
pub async fn setup_mcp(args: &SetupMcpArgs) -> anyhow::Result<u8> {
    let registries = Registries::new(settings::registry_settings(false, &args.registries)?)?;
    let refs = Arc::new(Refs::new(IDLE_TTL));
    let key = AnnouncementKey::generate()?;
    let settings = |address: SocketAddr| Settings {
        registries,
        test_timeout: Duration::from_secs(args.timeout.max(1)),
        elicitation_timeout: Duration::from_secs(args.elicitation_timeout.max(1)),
        page_base: format!("http://{address}"),
        host: Arc::new(CliHost),
    };
    if let (Some(listen), Some(token_file)) = (args.listen, &args.token_file) {
        return serve_http(listen, token_file, refs, key, settings).await;
    }
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .context("opening the secret entry page on 127.0.0.1")?;
    let address = page::serve(listener, refs.clone(), key.clone())?;
    let _announcement = Announcement::write(&settings::data_dir()?, address, &key)?;
    tracing::info!("secret entry page on http://{address}");
    let server = SetupServer::new(settings(address), refs);
    match super::until_signal(tether_setup::serve_stdio(server)).await? {
        Ok(served) => {
            served?;
            Ok(OK)
        }
        Err(signal) => Err(signal.into()),
    }
}

fn read_token(path: &Path) -> anyhow::Result<SecretValue> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError::new(format!(
            "cannot read the token file {}: {e}",
            path.display()
        ))
    })?;
    let token = SecretValue::new(text.trim().to_owned());
    if token.expose().len() < 16 {
        return Err(UsageError::new(format!(
            "the token in {} is shorter than 16 characters; use a long random one (e.g. openssl rand -hex 32)",
            path.display()
        ))
        .into());
    }
    Ok(token)
}

/// `--listen`: Streamable HTTP at `/mcp` behind a bearer token, the entry pages beside it,
/// until SIGINT/SIGTERM.
async fn serve_http(
    listen: SocketAddr,
    token_file: &Path,
    refs: Arc<Refs>,
    key: AnnouncementKey,
    settings: impl FnOnce(SocketAddr) -> Settings,
) -> anyhow::Result<u8> {
    if !listen.ip().is_loopback() {
        return Err(UsageError::new(format!(
            "--listen {listen}: tether setup-mcp listens on a loopback address only (127.0.0.1 or ::1)"
        ))
        .into());
    }
    let token = read_token(token_file)?;
    tether_log::register([&token]);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let address = listener.local_addr().context("reading the bound address")?;
    let _announcement = Announcement::write(&settings::data_dir()?, address, &key)?;
    let server = SetupServer::new(settings(address), refs.clone());
    eprintln!(
        "tether setup-mcp: MCP on http://{address}{MCP_PATH}, entry pages on http://{address}/secret/…"
    );
    let served = tether_setup::serve_http(listener, token, server, refs, key);
    match super::until_signal(served).await? {
        Ok(served) => {
            served?;
            Ok(OK)
        }
        Err(signal) => Err(signal.into()),
    }
}

/// `tether secrets submit NONCE|URL`: the value goes only to a page a running `tether
/// setup-mcp` of this user announces under this TETHER_HOME, and only once that page proved
/// it holds its announcement's key (`tether_setup::submit`). A URL only picks one of those
/// pages; any other address is refused before the value is read.
pub fn submit(target: &str, from: Option<&str>) -> anyhow::Result<u8> {
    let target = target.trim();
    let pages = tether_setup::submit::announced(&settings::data_dir()?);
    let (pages, nonce) = match target.split_once("://") {
        Some((scheme, rest)) => {
            let (address, path) = rest.split_once('/').unwrap_or((rest, ""));
            let nonce = path.strip_prefix("secret/").unwrap_or_default();
            let chosen: Vec<_> = pages
                .into_iter()
                .filter(|page| scheme == "http" && page_named(&page.address, address))
                .collect();
            if chosen.is_empty() {
                return Err(UsageError::new(format!(
                    "{scheme}://{address} is not the page of a tether setup-mcp running for this user and TETHER_HOME; tether secrets submit sends a value to such a page only (give the nonce, the last part of the URL the agent passed on)"
                ))
                .into());
            }
            (chosen, nonce.to_owned())
        }
        None => (pages, target.to_owned()),
    };
    if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(UsageError::new(format!(
            "{target:?} is neither a page nonce (hex digits) nor a page URL http://127.0.0.1:PORT/secret/NONCE"
        ))
        .into());
    }
    if pages.is_empty() {
        eprintln!(
            "no tether setup-mcp is running for this user and TETHER_HOME; nothing was submitted"
        );
        return Ok(FAILED);
    }
    let name = "the value";
    let value = match from {
        Some(source) => secrets::read_one("value", source)?,
        None if std::io::stdin().is_terminal() => secrets::ask("value", Some(name), true)?,
        None => secrets::read_stdin_all("value")?,
    };
    if value.is_empty() {
        return Err(UsageError::new("the value is empty; nothing was submitted").into());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the HTTP client")?;
    for page in &pages {
        match runtime.block_on(tether_setup::submit::post(page, &nonce, &value)) {
            Ok(200) => {
                eprintln!("submitted; the agent can go on");
                return Ok(OK);
            }
            Ok(status) => tracing::debug!("{} answered {status} for the nonce", page.address),
            Err(error @ tether_setup::SetupError::Unproven { .. }) => {
                tracing::warn!("{error}; nothing was sent to it");
            }
            Err(error) => tracing::debug!("{}: {:#}", page.address, anyhow::Error::from(error)),
        }
    }
    eprintln!(
        "no running tether setup-mcp has a page for that nonce (already used, expired, or never issued); ask the agent to request the value again"
    );
    Ok(FAILED)
}

/// Whether the URL's `host:port` names the page at `address` (`localhost` names loopback).
fn page_named(address: &SocketAddr, authority: &str) -> bool {
    let Some((host, port)) = authority.rsplit_once(':') else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    port.parse::<u16>().ok() == Some(address.port())
        && (host == "localhost" || host.parse::<std::net::IpAddr>().ok() == Some(address.ip()))
}
