//! `tether serve`: the run's servers behind one MCP endpoint (the gateway), over stdio or
//! loopback Streamable HTTP.

use std::net::{SocketAddr, ToSocketAddrs as _};
use std::time::Duration;

use anyhow::Context as _;
use tether_gateway::names::ToolFilter;
use tether_gateway::{MCP_PATH, is_loopback};
use tokio_util::sync::CancellationToken;

use super::gateway::{Policy, budget, declared, start_gateway};
use crate::cli::ServeArgs;
use crate::exit::OK;
use crate::output::Progress;
use crate::{secrets, settings};

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
        .ok_or_else(|| tether_gateway::GatewayError::NotLoopback {
            address: text.clone(),
        })?;
    Ok(Transport {
        listen: Some(address),
    })
}

pub async fn serve(args: &ServeArgs) -> anyhow::Result<u8> {
    let transport = transport(args)?;
    let tokens = match (&transport.listen, args.token.is_empty(), args.no_auth) {
        (None, _, _) | (Some(_), _, true) => Vec::new(),
        (Some(_), false, false) => args
            .token
            .iter()
            .map(|source| secrets::read_one("--token", source))
            .collect::<Result<Vec<_>, _>>()?,
        (Some(_), true, false) => vec![tether_http::token::generate()?],
    };
    let budget = budget(args.max_result_tokens)?;
    let wait = settings::wait_for_servers(args.wait_for_servers || args.strict_mcp)?;
    let tool_search = settings::tool_search(&args.tool_search)?;
    let mut options = super::start_options(args.timeout, args.strict_mcp, &args.sandbox)?;
    options.declared = args
        .client_capabilities
        .as_deref()
        .map(declared)
        .transpose()?;
    let progress = Progress::new();
    let session = super::session(&args.specs, &args.secrets, &progress).await?;
    super::require_servers(&session)?;
    super::announce_sandbox("serve", &session, &options);
    // Over stdio, the servers are told what this one client can answer: its initialize is
    // read first (a client sends it at once; it is served again from the buffer).
    let mut stdio = transport.listen.is_none().then(tether_gateway::stdio);
    if let Some(stdio) = &mut stdio
        && options.declared.is_none()
        && !std::io::IsTerminal::is_terminal(&std::io::stdin())
    {
        let reader = std::mem::replace(&mut stdio.reader, Box::new(tokio::io::empty()));
        let first = tether_gateway::read_first_line(reader)
            .await
            .context("reading the client's initialize from stdin")?;
        if first.closed {
            eprintln!(
                "tether serve: the client closed stdin before sending anything; no server was started"
            );
            return Ok(OK);
        }
        tracing::debug!(
            capabilities = ?first.capabilities,
            "declaring to the servers what the client declared"
        );
        options.declared = Some(first.capabilities.clone().unwrap_or_default());
        stdio.reader = Box::new(first.reader);
    }
    let gateway = start_gateway(
        session,
        args.audit.as_deref(),
        &options,
        Policy {
            call_timeout: Duration::from_secs(args.call_timeout.max(1)),
            pins: !args.no_pins,
            scan: args.scan,
            filter: ToolFilter {
                include: args.include_tools.clone(),
                exclude: args.exclude_tools.clone(),
                bare: args.bare_names,
            },
            trust_with: super::policy::trust_with(&args.specs),
            budget,
            tool_search,
            secret_scan: settings::secret_scan(args.tool_search.secret_scan)?,
            task_after: settings::task_after(args.tool_search.task_after)?,
            first_list_grace: None,
        },
        wait,
        &progress,
    )
    .await?;

    let n = gateway.tool_names().len();
    let offered = format!("{n} tool{}", if n == 1 { "" } else { "s" });
    match transport.listen {
        None => {
            eprintln!("tether serve: serving {offered} on stdio");
            // Ends when the client closes stdin, or on SIGINT/SIGTERM: both are a normal end.
            // The pipes' modes are put back when `_restore` goes, after serving.
            let tether_gateway::Stdio {
                reader,
                writer,
                restore: _restore,
            } = stdio.unwrap_or_else(tether_gateway::stdio);
            let serving = gateway.serve_io(reader, writer);
            let served = super::until_signal(serving).await?;
            if let Ok(result) = served {
                result?;
            }
        }
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("binding {address}"))?;
            let bound = listener.local_addr().context("reading the bound address")?;
            for token in &tokens {
                if args.token.is_empty() {
                    // Printed this once; masked in everything printed later.
                    eprintln!("tether serve: bearer token {}", token.expose());
                }
                tether_log::register([token]);
            }
            crate::output::print(&format!("listening on http://{bound}{MCP_PATH}\n"));
            eprintln!("tether serve: serving {offered} on http://{bound}{MCP_PATH}");
            let shutdown = CancellationToken::new();
            let options = tether_gateway::HttpOptions {
                session_idle: Duration::from_secs(args.session_idle),
                max_sessions: args.max_sessions,
            };
            let served = super::until_signal(gateway.serve_http(
                listener,
                tokens,
                options,
                shutdown.clone(),
            ))
            .await?;
            shutdown.cancel();
            if let Ok(result) = served {
                result?;
            }
        }
    }
    gateway.shutdown().await;
    Ok(OK)
}
