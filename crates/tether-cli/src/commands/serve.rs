//! `tether serve`: the run's servers behind one MCP endpoint (the gateway), over stdio or
//! loopback Streamable HTTP.

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use tether_driver::ServerStatus;
use tether_gateway::{AuditLog, Gateway, GatewayOptions, MCP_PATH, generate_token, is_loopback};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::cli::ServeArgs;
use crate::exit::{OK, UsageError};
use crate::output::Progress;
use crate::{log_mask, secrets, settings};

/// The flags, checked before anything is resolved or started.
struct Transport {
    /// `None`: stdio.
    listen: Option<SocketAddr>,
}

fn transport(args: &ServeArgs) -> anyhow::Result<Transport> {
    let Some(text) = &args.listen else {
        return Ok(Transport { listen: None });
    };
    let address = text
        .to_socket_addrs()
        .ok()
        .and_then(|mut addresses| addresses.find(is_loopback))
        .ok_or_else(|| {
            UsageError::new(format!(
                "--listen {text}: not a loopback address with a port (e.g. 127.0.0.1:8765); tether serve has no TLS, so it listens on loopback only"
            ))
        })?;
    Ok(Transport {
        listen: Some(address),
    })
}

/// The default audit log: `$TETHER_HOME/audit/serve-TIME-PID.jsonl`.
fn default_audit_path() -> anyhow::Result<PathBuf> {
    let now = OffsetDateTime::now_utc();
    let name = format!(
        "serve-{:04}{:02}{:02}T{:02}{:02}{:02}Z-{}.jsonl",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        std::process::id()
    );
    Ok(settings::data_dir()?.join("audit").join(name))
}

pub async fn serve(args: &ServeArgs) -> anyhow::Result<u8> {
    let transport = transport(args)?;
    let token = match (&transport.listen, &args.token, args.no_auth) {
        (None, _, _) | (Some(_), _, true) => None,
        (Some(_), Some(source), false) => Some(secrets::read_one("--token", source)?),
        (Some(_), None, false) => Some(generate_token()?),
    };
    let audit_path = match &args.audit {
        Some(path) => path.clone(),
        None => default_audit_path()?,
    };
    let audit = AuditLog::create(&audit_path)?;

    let progress = Progress::new();
    let session = super::session(&args.specs, &args.secrets, &progress).await?;
    let options = super::start_options(args.timeout, false);
    let runtime = super::start(&session, &options, &progress).await?;
    progress.finish();
    for report in runtime.reports() {
        match &report.status {
            ServerStatus::Ready { tools } => {
                eprintln!(
                    "tether serve: {}: ready, {} tools",
                    report.name,
                    tools.len()
                );
            }
            ServerStatus::Failed { reason } => log_mask::eprintln_masked!(
                "tether serve: {}: failed to start, its tools are not offered: {reason}",
                report.name
            ),
            ServerStatus::Disabled => {
                eprintln!("tether serve: {}: disabled in its config", report.name);
            }
        }
    }
    eprintln!("tether serve: audit log {}", audit.path().display());
    let gateway = Gateway::new(
        runtime,
        session.sensitive_values(),
        GatewayOptions {
            call_timeout: Duration::from_secs(args.call_timeout.max(1)),
            audit: Some(audit),
        },
    )
    .await;

    let offered = gateway.tool_names().len();
    match transport.listen {
        None => {
            eprintln!("tether serve: serving {offered} tools on stdio");
            // Ends when the client closes stdin, or on SIGINT/SIGTERM: both are a normal end.
            let served = super::until_signal(gateway.serve_stdio()).await?;
            if let Ok(result) = served {
                result?;
            }
        }
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("binding {address}"))?;
            let bound = listener.local_addr().context("reading the bound address")?;
            if let Some(token) = &token {
                if args.token.is_none() {
                    // Printed this once; masked in everything printed later.
                    eprintln!("tether serve: bearer token {}", token.expose());
                }
                log_mask::register([token]);
            }
            crate::output::print(&format!("listening on http://{bound}{MCP_PATH}\n"));
            eprintln!("tether serve: serving {offered} tools on http://{bound}{MCP_PATH}");
            let shutdown = CancellationToken::new();
            let served =
                super::until_signal(gateway.serve_http(listener, token, shutdown.clone())).await?;
            shutdown.cancel();
            if let Ok(result) = served {
                result?;
            }
        }
    }
    gateway.shutdown().await;
    Ok(OK)
}
