//! Starting one server: a stdio child spawned (or an HTTP-port package's), or a remote server
//! connected over Streamable HTTP or SSE; `initialize` and `tools/list` within its startup
//! timeout; and the reason, masked, when it does not start.

use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::model::Tool;
use rmcp::service::{ClientServiceExt as _, RoleClient};
use rmcp::transport::IntoTransport;
use serde_json::Value;
use tether_config::{
    Exposure, Masker, RemoteTransport, RenderedServer, RenderedText, RenderedTransport,
    SecretValue, ServedUrl, ServerOptions, mask_json, mask_known_values,
};
use tokio::process::{ChildStdin, ChildStdout};

use super::client::TetherClient;
use super::process::{ChildProcess, StdioLaunch};
use super::remote::{RemoteTarget, remote_handshake};
use super::{Client, StderrTail};
use super::{
    HeadersHelper, StartOptions, Started, ToolInfo, failure, lifecycle, served,
    server_package_runner,
};

/// The variables a server's `passEnv` names that are set in tether's environment, with their
/// values (for a stdio server, after the allowlist and before its own `env`).
pub(super) fn passed_env(server: &RenderedServer) -> Vec<(String, String)> {
    server
        .options
        .pass_env
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
        .collect()
}

/// Starts `server` and keeps only the tools its config allows (`includeTools`,
/// `excludeTools`); returns its options too, for the calls that follow.
pub(super) async fn start_filtered(
    server: RenderedServer,
    start: &StartOptions,
    masking: &Arc<Vec<SecretValue>>,
) -> (ServerOptions, Result<Started, String>) {
    let options = server.options.clone();
    // The server's own startup timeout (Codex `startup_timeout_sec`/`_ms`), if its config set
    // one, replaces the run's; a server launched through a package runner gets a multiple of
    // the run's, for its first start's download.
    let runner_timeout = || match server_package_runner(&server) {
        Some(_) => start
            .startup_timeout
            .saturating_mul(start.package_runner_factor.max(1)),
        None => start.startup_timeout,
    };
    let timeout = options
        .startup_timeout_ms
        .map_or_else(runner_timeout, Duration::from_millis);
    let outcome = start_one(server, start, timeout, masking)
        .await
        .map(|mut started| {
            started.tools.retain(|tool| options.allows_tool(&tool.name));
            started
        });
    (options, outcome)
}

/// Starts `server` within `timeout` (the run's, or the server's own).
async fn start_one(
    server: RenderedServer,
    start: &StartOptions,
    timeout: Duration,
    masking: &Arc<Vec<SecretValue>>,
) -> Result<Started, String> {
    let starting = Starting {
        server: &server,
        start,
        timeout,
        masking,
        masker: Masker::new(masking.iter()),
    };
    match &server.transport {
        RenderedTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => starting.stdio(command, args, env, cwd.as_ref()).await,
        RenderedTransport::Remote {
            url,
            headers,
            transport,
        } => starting.remote(url, headers, *transport).await,
    }
}

/// One server being started: what every step of its start reads.
struct Starting<'a> {
    server: &'a RenderedServer,
    start: &'a StartOptions,
    timeout: Duration,
    masking: &'a Arc<Vec<SecretValue>>,
    masker: Masker,
}

impl Starting<'_> {
    /// `text` with every value of the run masked.
    fn mask(&self, text: String) -> String {
        mask_known_values(&text, self.masking.iter())
    }

    fn client(&self) -> TetherClient {
        TetherClient::for_server(&self.server.name, self.start)
    }

    fn started(&self, client: Client, child: Option<ChildProcess>, tools: Vec<Tool>) -> Started {
        Started {
            bearer: None,
            client,
            child,
            tools: tool_infos(&self.server.name, tools, &self.masker),
        }
    }

    /// A stdio server: its child spawned (sandboxed when asked), then the handshake over its
    /// pipes — or, for an HTTP-port package, over the port it prints ([`Starting::served`]).
    async fn stdio(
        &self,
        command: &RenderedText,
        args: &[RenderedText],
        env: &IndexMap<String, RenderedText>,
        cwd: Option<&RenderedText>,
    ) -> Result<Started, String> {
        let server = self.server;
        let sandbox = self.start.sandbox_for(server)?;
        let launch = StdioLaunch {
            command: SecretValue::new(command.expose()),
            args: args.iter().map(|a| SecretValue::new(a.expose())).collect(),
            env: passed_env(server)
                .into_iter()
                .filter(|(name, _)| !env.contains_key(name))
                .map(|(k, v)| (k, SecretValue::new(v)))
                .chain(
                    env.iter()
                        .map(|(k, v)| (k.clone(), SecretValue::new(v.expose()))),
                )
                .collect(),
            cwd: cwd.map(|c| SecretValue::new(c.expose())),
        };
        if let Some(served) = &server.options.serves {
            served::port_free(served).await.map_err(|e| self.mask(e))?;
        }
        let (mut child, stdout, stdin) = ChildProcess::spawn(
            &server.name,
            &launch,
            self.masking.to_vec(),
            sandbox.as_ref(),
        )
        .map_err(|e| self.mask(cannot_start(command, &launch, &e)))?;
        let client = self.client();
        if let Some(served) = &server.options.serves {
            return self
                .served(served, child, (stdout, stdin), client, sandbox.as_ref())
                .await;
        }
        let handshake = tokio::time::timeout(self.timeout, async {
            let pipes =
                IntoTransport::<RoleClient, std::io::Error, _>::into_transport((stdout, stdin));
            let prefer_legacy = client.notices.is_some();
            let routes = Arc::clone(&client.progress);
            let client = client
                .serve_with_lifecycle(
                    lifecycle::Probing::new(pipes, true, prefer_legacy).counting(routes),
                    lifecycle::auto(),
                )
                .await?;
            let tools = client.list_all_tools().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((client, tools))
        });
        tokio::pin!(handshake);
        let outcome = tokio::select! {
            outcome = &mut handshake => outcome,
            status = child.wait() => {
                let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                child.stderr.wait_closed(Duration::from_millis(300)).await;
                return Err(exited_early(&status, &child.stderr, sandbox.as_ref()));
            }
        };
        match outcome {
            Ok(Ok((client, tools))) => Ok(self.started(client, Some(child), tools)),
            Ok(Err(err)) => {
                // The child may be exiting right now: its status explains more than the
                // closed pipe does.
                let status = tokio::time::timeout(Duration::from_millis(500), child.wait()).await;
                let reason = match status {
                    Ok(Ok(status)) => {
                        child.stderr.wait_closed(Duration::from_millis(300)).await;
                        exited_early(&status.to_string(), &child.stderr, sandbox.as_ref())
                    }
                    _ => self.mask(format!(
                        "MCP handshake failed: {err}{}",
                        stderr_suffix(&child.stderr, sandbox.as_ref())
                    )),
                };
                child.terminate().await;
                Err(reason)
            }
            Err(_) => {
                let reason = self.no_answer(&child.stderr, sandbox.as_ref());
                child.terminate().await;
                Err(reason)
            }
        }
    }

    /// An HTTP-port package's start: the port it prints, then the handshake there.
    async fn served(
        &self,
        served: &ServedUrl,
        mut child: ChildProcess,
        pipes: (ChildStdout, ChildStdin),
        client: TetherClient,
        sandbox: Option<&tether_sandbox::Policy>,
    ) -> Result<Started, String> {
        let started = served::connect(
            served,
            &mut child,
            pipes,
            client,
            self.timeout,
            self.start.bearer_auth.clone(),
        )
        .await;
        match started {
            Ok((client, tools)) => Ok(self.started(client, Some(child), tools)),
            Err(served::Failure::Exited(status)) => {
                child.stderr.wait_closed(Duration::from_millis(300)).await;
                Err(exited_early(&status, &child.stderr, sandbox))
            }
            Err(served::Failure::Other(reason)) => {
                let reason =
                    self.mask(format!("{reason}{}", stderr_suffix(&child.stderr, sandbox)));
                child.terminate().await;
                Err(reason)
            }
        }
    }

    /// Why a stdio server that gave no answer within the timeout failed: a package runner's
    /// first start downloads the package, so it says so, and how to give it longer.
    fn no_answer(&self, stderr: &StderrTail, sandbox: Option<&tether_sandbox::Policy>) -> String {
        let start = self.start;
        let downloading = server_package_runner(self.server).map_or_else(String::new, |runner| {
            let factor = match start.package_runner_factor {
                0 | 1 => String::new(),
                n => format!(" (a package runner gets {n}× that)"),
            };
            format!(
                "; it is launched through {runner}, which is probably still downloading its package on a first start: run it again once the download is done, or give it more time with --timeout SECS{factor} or startup_timeout_sec in its config"
            )
        });
        format!(
            "no answer to initialize/tools/list within {} s{downloading}{}",
            self.timeout.as_secs_f64(),
            stderr_suffix(stderr, sandbox)
        )
    }

    /// A remote server: the handshake over its transport, or — for a URL without a `type` —
    /// over the legacy SSE transport when Streamable HTTP fails.
    async fn remote(
        &self,
        url: &RenderedText,
        headers: &IndexMap<String, RenderedText>,
        kind: RemoteTransport,
    ) -> Result<Started, String> {
        let client = self.client();
        let helper = HeadersHelper::of(self.server);
        let url = url.expose();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err("the url must start with http:// or https://".to_owned());
        }
        let headers = header_map(headers)?;
        let http = reqwest::Client::builder()
            .connect_timeout(self.timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("tether/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| self.mask(format!("cannot build the HTTP client: {e}")))?;
        let target = RemoteTarget {
            url: &url,
            headers: &headers,
            timeout: self.timeout,
            bearer_auth: self.start.bearer_auth.clone(),
            helper,
        };
        let handshake = tokio::time::timeout(self.timeout, async {
            let outcome =
                remote_handshake(client.clone(), kind, http.clone(), &target)
                    .await;
            match outcome {
                // A URL without a `type`: the MCP specification's backwards-compatibility
                // rule is to fall back to the legacy SSE transport.
                Err(http_err)
                    if kind == RemoteTransport::StreamableHttp
                        && self.server.options.transport_guessed =>
                {
                    match remote_handshake(client.clone(), RemoteTransport::Sse, http, &target)
                        .await
                    {
                        Ok(connected) => {
                            tracing::warn!(
                                server = %self.server.name,
                                "no Streamable HTTP at its url ({}); connected over the legacy SSE transport (add \"type\": \"sse\" to say so)",
                                self.mask(failure::cause(RemoteTransport::StreamableHttp, &*http_err))
                            );
                            Ok(connected)
                        }
                        Err(sse_err) => Err(format!(
                            "{}; the url has no \"type\", so the legacy SSE transport was tried too: {}",
                            failure::cause(RemoteTransport::StreamableHttp, &*http_err),
                            failure::cause(RemoteTransport::Sse, &*sse_err),
                        )
                        .into()),
                    }
                }
                other => other,
            }
        })
        .await;
        match handshake {
            Ok(Ok((client, tools, bearer))) => Ok(Started {
                bearer,
                ..self.started(client, None, tools)
            }),
            Ok(Err(err)) => Err(self.mask(failure::describe(&url, kind, &*err))),
            Err(_) => Err(self.mask(format!(
                "no answer from {url} to initialize/tools/list within {} s",
                self.timeout.as_secs_f64()
            ))),
        }
    }
}

/// Why a stdio server's program could not be started. "No such file or directory" says neither
/// what was missing nor where it was looked for.
fn cannot_start(command: &RenderedText, launch: &StdioLaunch, e: &std::io::Error) -> String {
    let shown = command.show(Exposure::Masked);
    let why = match (&launch.cwd, e.kind()) {
        (Some(dir), std::io::ErrorKind::NotFound)
            if !std::path::Path::new(dir.expose()).is_dir() =>
        {
            "its working directory (cwd) does not exist".to_owned()
        }
        (_, std::io::ErrorKind::NotFound) if !launch.command.expose().contains('/') => {
            "not found on PATH (install it, or give its full path)".to_owned()
        }
        (_, std::io::ErrorKind::NotFound) => "no such file".to_owned(),
        _ => e.to_string(),
    };
    format!("cannot start '{shown}': {why}")
}

/// The config's headers as HTTP headers; a name or value HTTP forbids is an error naming the
/// header (never its value).
pub(super) fn header_map(headers: &IndexMap<String, RenderedText>) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let value = value.expose();
        if value.contains(['\r', '\n']) {
            return Err(format!(
                "header '{name}' holds a line break (CR or LF), which HTTP forbids; fix the value"
            ));
        }
        let header_name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header name '{name}' is not a valid HTTP header name"))?;
        let mut header_value = HeaderValue::from_str(&value)
            .map_err(|_| format!("header '{name}' holds characters HTTP does not allow"))?;
        header_value.set_sensitive(true);
        map.insert(header_name, header_value);
    }
    Ok(map)
}

/// `tools` as [`ToolInfo`]s, masked with `masker`; a tool whose name holds a value is left out
/// (said in a warning that shows its name masked).
pub(super) fn tool_infos(
    server: &str,
    tools: Vec<rmcp::model::Tool>,
    masker: &Masker,
) -> Vec<ToolInfo> {
    tools
        .into_iter()
        .filter_map(|tool| {
            let name = tool.name.to_string();
            let shown = masker.mask(&name);
            if shown != name {
                tracing::warn!(
                    server,
                    "the tool '{}' is not offered: its name holds a secret value",
                    tether_config::escape_controls(&shown)
                );
                return None;
            }
            // A `Tool` is plain data; serializing it cannot fail.
            let mut definition = serde_json::to_value(&tool).unwrap_or(Value::Null);
            mask_json(masker, &mut definition);
            let description = definition
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned);
            Some(ToolInfo {
                name,
                description,
                definition,
            })
        })
        .collect()
}

fn exited_early(
    status: &str,
    stderr: &StderrTail,
    sandbox: Option<&tether_sandbox::Policy>,
) -> String {
    format!(
        "the server exited ({status}) before answering initialize{}",
        stderr_suffix(stderr, sandbox)
    )
}

/// The last lines of stderr, and, for a sandboxed server whose stderr shows a denial, what the
/// sandbox probably denied and the profile line that would allow it.
fn stderr_suffix(stderr: &StderrTail, sandbox: Option<&tether_sandbox::Policy>) -> String {
    let tail = stderr.last_lines(5);
    let denial = sandbox
        .and_then(|policy| tether_sandbox::explain_policy(&stderr.text(), policy))
        .map_or_else(String::new, |why| format!("\n{why}"));
    if tail.is_empty() {
        denial
    } else {
        format!("; stderr:\n{tail}{denial}")
    }
}
