//! `tether setup-mcp` (the setup tools of `tether-setup`, over stdio or `--listen`): the glue —
//! flags, settings, the token file, what is printed, exit codes. A value for one of its pages
//! comes from `tether secrets submit` (`stored.rs`).

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

use super::tokens::OauthTokens;
use crate::cli::SetupMcpArgs;
use crate::exit::{OK, UsageError};
use crate::output::Progress;
use crate::settings;

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
