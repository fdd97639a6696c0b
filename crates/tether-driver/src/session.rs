//! [`Session`]: the one owner of a run's MCP servers, from specs to running servers.
//!
//! A session holds what a run needs from resolution until it ends: the specs, the
//! [`Resolver`] (local installations, the managed client, the task id), the run's
//! [`Secrets`] and the environment `${VAR}` expands from, the resolved installations
//! (ephemeral ids and managed leases included), the servers rendered from them, the masking
//! set and the re-mint bookkeeping. Callers hand secrets in once, at
//! [`Session::resolve`]; from then on they pass names (a server, a tool), never values.
//!
//! **Invariant:** secrets travel one way: caller → session (once) → `tether-config`'s
//! `Installation::render` → rendered servers → launch. Nothing rendered goes back to the
//! caller except through [`Session::servers`] (for a hand-off or an export, which is the
//! caller's job) and the masking set ([`Session::sensitive_values`], for its log layer).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tether_clock::Clock;
use tether_config::{
    EnvLookup, RenderedServer, RenderedText, RenderedTransport, SecretValue, Secrets,
};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::error::DriverError;
use crate::launch::{McpRuntime, ServerStatus, StartOptions};
use crate::refresh::{
    RefreshOutcome, RefreshPolicy, Refresher, RemintOutcome, renders_alike, swap_reminted,
};
use crate::resolve::{ResolvedMcpSpecs, Resolver};
use crate::spec::McpSpec;

/// A run's MCP servers: resolved once, rendered once, then started, called, re-minted or
/// re-resolved by name. `Send + Sync`, and independent of any other session: a long-lived
/// process (a gateway, a setup server) can hold several and re-resolve one without touching
/// the others.
pub struct Session {
    resolver: Resolver,
    specs: Vec<McpSpec>,
    secrets: Secrets,
    env: Arc<dyn EnvLookup + Send + Sync>,
    resolved: ResolvedMcpSpecs,
    servers: Vec<RenderedServer>,
    /// The run's secret values and every sensitive value of every rendering so far. It only
    /// grows: a value a re-mint retired may still sit in a log line or a child's stderr.
    masking: Vec<SecretValue>,
    refresher: Refresher,
    /// What re-mint decisions read the time from ([`Session::with_clock`]; the system clock
    /// by default).
    clock: Arc<dyn Clock>,
    /// Variables of tether's environment every stdio server gets (`--pass-env`), kept so that
    /// every rendering, re-mints included, carries them.
    pass_env: Vec<String>,
}

// A session is shared between tasks of a long-lived process.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Session>();
};

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("servers", &self.names())
            .field("secrets", &self.secrets.len())
            .finish_non_exhaustive()
    }
}

/// Where `tether-oauth` applies stored tokens ([`tether_bearer::BearerTarget`]): the remote
/// servers of the session, by URL.
impl tether_bearer::BearerTarget for Session {
    fn urls_without_authorization(&self) -> Vec<String> {
        self.servers
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
            .collect()
    }

    fn give_bearer_tokens(
        &mut self,
        token_for: &mut dyn FnMut(&str) -> Option<SecretValue>,
    ) -> Vec<String> {
        self.apply_bearer_tokens(token_for)
    }
}

impl Session {
    /// Resolves `specs` with `resolver` (local-first; managed calls go out together), applies
    /// `secrets` and `env` and renders every server, once. Warns (through `tracing`) about a
    /// `${VAR}` left unset and about a secret placed in a stdio server's arguments, where
    /// other users can read it with `ps`.
    ///
    /// Fails as [`Resolver::resolve`] does: a spec that cannot be materialized fails the run.
    pub async fn resolve(
        resolver: Resolver,
        specs: Vec<McpSpec>,
        secrets: Secrets,
        env: impl EnvLookup + Send + Sync + 'static,
    ) -> Result<Self, DriverError> {
        let resolved = resolver.resolve(&specs).await?;
        let env: Arc<dyn EnvLookup + Send + Sync> = Arc::new(env);
        let servers = resolved.render(&secrets, env.as_ref());
        warn_about(&servers);
        let mut session = Self {
            resolver,
            specs,
            secrets,
            env,
            resolved,
            servers,
            masking: Vec::new(),
            refresher: Refresher::default(),
            clock: tether_clock::system(),
            pass_env: Vec::new(),
        };
        session.extend_masking();
        Ok(session)
    }

    /// Passes the variables `names` of tether's environment to every stdio server (as each
    /// server's own `passEnv` does for it), in this rendering and every later one.
    #[must_use]
    pub fn with_pass_env(mut self, names: &[String]) -> Self {
        for name in names {
            if !self.pass_env.contains(name) {
                self.pass_env.push(name.clone());
            }
        }
        let mut servers = std::mem::take(&mut self.servers);
        self.apply_pass_env(&mut servers);
        self.servers = servers;
        self
    }

    fn apply_pass_env(&self, servers: &mut [RenderedServer]) {
        for server in servers {
            for name in &self.pass_env {
                if !server.options.pass_env.contains(name) {
                    server.options.pass_env.push(name.clone());
                }
            }
        }
    }

    /// Re-mints under `policy` instead of [`RefreshPolicy::default`].
    #[must_use]
    pub fn with_refresh_policy(mut self, policy: RefreshPolicy) -> Self {
        self.refresher = Refresher::new(policy);
        self
    }

    /// Reads the time from `clock` instead of the system clock: whether a lease is near
    /// expiry, how long since the last attempt, and (for holders that wait through
    /// [`Session::clock`]) when to look again. Tests pass a clock they move themselves.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The clock this session decides re-mints by; a holder that schedules them (a gateway)
    /// waits on it too, so one clock moves both.
    pub fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock)
    }

    /// Gives every remote server whose config sends no `Authorization` header the bearer
    /// token `token_for` returns for its URL (an OAuth access token from `tether auth login`),
    /// as a sensitive header that is masked wherever it is shown; each token joins the masking
    /// set. Returns the names of the servers that got one. A later re-mint or re-resolve
    /// renders afresh, without these headers.
    pub fn apply_bearer_tokens(
        &mut self,
        mut token_for: impl FnMut(&str) -> Option<SecretValue>,
    ) -> Vec<String> {
        let mut applied = Vec::new();
        for server in &mut self.servers {
            let RenderedTransport::Remote { url, headers, .. } = &mut server.transport else {
                continue;
            };
            if headers
                .keys()
                .any(|name| name.eq_ignore_ascii_case("authorization"))
            {
                continue;
            }
            let Some(token) = token_for(&url.expose()) else {
                continue;
            };
            if !self.masking.contains(&token) {
                self.masking.push(token.clone());
            }
            headers.insert(
                "Authorization".to_owned(),
                RenderedText::plain_then_sensitive("Bearer ", token),
            );
            applied.push(server.name.clone());
        }
        applied
    }

    /// The rendered servers, real values in memory, in spec order: what a harness hand-off
    /// or an export writes out. Print them only through `tether_config::Exposure::Masked`.
    pub fn servers(&self) -> &[RenderedServer] {
        &self.servers
    }

    /// The server called `name`, or [`DriverError::NotInSession`].
    pub fn server(&self, name: &str) -> Result<&RenderedServer, DriverError> {
        self.servers
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| DriverError::NotInSession {
                name: name.to_owned(),
                held: self.names(),
            })
    }

    /// The servers' names, in spec order.
    pub fn names(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.name.clone()).collect()
    }

    /// The specs the session resolves (and re-resolves).
    pub fn specs(&self) -> &[McpSpec] {
        &self.specs
    }

    /// What resolution produced: local installations and ephemeral ones, with their ids and
    /// managed leases.
    pub fn resolved(&self) -> &ResolvedMcpSpecs {
        &self.resolved
    }

    /// Every value to mask wherever the caller prints: the run's secrets and each sensitive
    /// part of each rendering so far (values from secrets, the environment, managed configs).
    /// It grows after a re-mint or a re-resolve; register it again then.
    pub fn sensitive_values(&self) -> &[SecretValue] {
        &self.masking
    }

    /// Starts every server (see [`McpRuntime::start`]); the session's whole masking set is
    /// masked in what they print and in every error about them.
    pub async fn start(&self, options: &StartOptions) -> Result<McpRuntime, DriverError> {
        McpRuntime::start_masking(self.servers.clone(), options, self.masking.clone()).await
    }

    /// Starts only the server called `name`: [`DriverError::NotInSession`] when the session
    /// holds none, [`DriverError::ServerFailedToStart`] (nothing left running) when it does
    /// not start.
    pub async fn start_server(
        &self,
        name: &str,
        options: &StartOptions,
    ) -> Result<McpRuntime, DriverError> {
        let server = self.server(name)?.clone();
        let runtime =
            McpRuntime::start_masking(vec![server], options, self.masking.clone()).await?;
        let failure = runtime.reports().iter().find_map(|r| match &r.status {
            ServerStatus::Failed { reason } => Some(reason.clone()),
            ServerStatus::Disabled => {
                Some("it is disabled in its config (\"disabled\": true): not started".to_owned())
            }
            ServerStatus::Ready { .. } => None,
        });
        if let Some(reason) = failure {
            runtime.shutdown().await;
            return Err(DriverError::ServerFailedToStart {
                server: name.to_owned(),
                reason,
            });
        }
        Ok(runtime)
    }

    /// Calls `tool` on the server called `server` in `runtime`, within `timeout`: the MCP
    /// `CallToolResult` as JSON (a tool's own failure is `isError: true`, not an `Err`).
    /// [`DriverError::NotInSession`] for a name the session does not hold,
    /// [`DriverError::UnknownServer`] for one it holds that is not running.
    pub async fn call(
        &self,
        runtime: &McpRuntime,
        server: &str,
        tool: &str,
        arguments: Option<Map<String, Value>>,
        timeout: Duration,
    ) -> Result<Value, DriverError> {
        self.server(server)?;
        runtime.call_tool(server, tool, arguments, timeout).await
    }

    /// [`Session::call`], declaring the Tasks extension when `declare_tasks`
    /// ([`McpRuntime::call_tool_declaring`]).
    pub async fn call_declaring(
        &self,
        runtime: &McpRuntime,
        server: &str,
        tool: &str,
        arguments: Option<Map<String, Value>>,
        timeout: Duration,
        declare_tasks: bool,
    ) -> Result<Value, DriverError> {
        self.server(server)?;
        runtime
            .call_tool_declaring(server, tool, arguments, timeout, declare_tasks)
            .await
    }

    /// The managed installations due for a re-mint at `now` (wall clock `now_utc`).
    pub fn due(&self, now_utc: OffsetDateTime, now: Instant) -> Vec<Uuid> {
        self.refresher.due(&self.resolved, now_utc, now)
    }

    /// How long a holder may sleep before calling [`Session::refresh_due`]; `None` when no
    /// lease expires.
    pub fn next_check(&self, now_utc: OffsetDateTime) -> Option<Duration> {
        self.refresher.next_check(&self.resolved, now_utc)
    }

    /// Re-mints every due managed installation, swaps its servers in the session, and
    /// restarts in `runtime` those whose rendered config changed. A failed re-mint keeps the
    /// running servers (their tokens are still valid for a while) and is reported, not
    /// returned as an error.
    pub async fn refresh_due(&mut self, runtime: &mut McpRuntime) -> Vec<RefreshOutcome> {
        let mut outcomes = Vec::new();
        for outcome in self.remint_due().await {
            outcomes.push(match outcome {
                RemintOutcome::Unchanged { uid } => RefreshOutcome::Unchanged { uid },
                RemintOutcome::Failed { uid, message } => RefreshOutcome::Failed { uid, message },
                RemintOutcome::Changed { uid, servers } => {
                    let mut reports = Vec::new();
                    for name in servers {
                        let Ok(server) = self.server(&name).cloned() else {
                            continue;
                        };
                        tracing::info!(%uid, server = %name, "managed MCP config changed; restarting the server");
                        reports.push(runtime.restart(server).await);
                    }
                    RefreshOutcome::Restarted { uid, reports }
                }
            });
        }
        outcomes
    }

    /// Re-mints every due managed installation and swaps its servers in the session (the
    /// masking set grows by the new values), without restarting anything: the holder restarts
    /// the servers each [`RemintOutcome::Changed`] names, from the session (a gateway, whose
    /// servers live in runtimes of their own). A failed re-mint is reported, not an error.
    pub async fn remint_due(&mut self) -> Vec<RemintOutcome> {
        let now = self.clock.now();
        let due = self.due(self.clock.now_utc(), now);
        let mut outcomes = Vec::new();
        for uid in due {
            self.refresher.attempted(uid, now);
            let fresh = match self.resolver.remint(uid).await {
                Ok(fresh) => fresh,
                Err(err) => {
                    tracing::warn!(%uid, "re-minting the managed MCP config failed");
                    outcomes.push(RemintOutcome::Failed {
                        uid,
                        message: err.to_string(),
                    });
                    continue;
                }
            };
            let mut changed = swap_reminted(
                &mut self.resolved,
                uid,
                fresh,
                &self.secrets,
                self.env.as_ref(),
            );
            self.apply_pass_env(&mut changed);
            let mut servers = self.resolved.render(&self.secrets, self.env.as_ref());
            self.apply_pass_env(&mut servers);
            self.servers = servers;
            self.extend_masking();
            if changed.is_empty() {
                tracing::debug!(%uid, "re-minted managed MCP config renders the same; nothing restarted");
                outcomes.push(RemintOutcome::Unchanged { uid });
                continue;
            }
            outcomes.push(RemintOutcome::Changed {
                uid,
                servers: changed.into_iter().map(|server| server.name).collect(),
            });
        }
        outcomes
    }

    /// Resolves the session's specs again (a managed installation edited, a local one
    /// reinstalled) and renders them with the same secrets and environment. On success the
    /// session holds the new servers and returns the names of those that are new or render
    /// differently (the ones a holder restarts); a server that is gone is simply absent
    /// from [`Session::servers`]. On failure the session is unchanged. Ephemeral ids stay
    /// the same when the resolver has a task id, and are new otherwise.
    pub async fn re_resolve(&mut self) -> Result<Vec<String>, DriverError> {
        let resolved = self.resolver.resolve(&self.specs).await?;
        let mut servers = resolved.render(&self.secrets, self.env.as_ref());
        self.apply_pass_env(&mut servers);
        warn_about(&servers);
        let changed = servers
            .iter()
            .filter(|server| !self.servers.iter().any(|old| renders_alike(old, server)))
            .map(|server| server.name.clone())
            .collect();
        self.resolved = resolved;
        self.servers = servers;
        self.extend_masking();
        Ok(changed)
    }

    /// Adds the secrets' values and the current servers' sensitive values to the masking
    /// set, once each.
    fn extend_masking(&mut self) {
        let values = self
            .secrets
            .values()
            .chain(self.resolved.stored_values())
            .chain(
                self.servers
                    .iter()
                    .flat_map(RenderedServer::sensitive_values)
                    .cloned(),
            );
        for value in values {
            if !value.is_empty() && !self.masking.contains(&value) {
                self.masking.push(value);
            }
        }
    }
}

/// What a user should know about rendered servers before they start: a `{{NAME}}` no secret
/// filled, a `${VAR}` left as written, and a secret in a stdio server's arguments.
fn warn_about(servers: &[RenderedServer]) {
    for server in servers {
        for (field, name) in server.unresolved_fields() {
            tracing::warn!(
                server = %server.name,
                "{field} holds {{{{{name}}}}}, which no secret fills, so it is passed as written; give it with --secret {name}=SOURCE (--strict-mcp refuses to start instead)"
            );
        }
        for name in server.unset_env_vars() {
            tracing::warn!(server = %server.name, "environment variable {name} is not set; its reference stays as written");
        }
        if let RenderedTransport::Stdio { args, .. } = &server.transport {
            for (index, _) in args
                .iter()
                .enumerate()
                .filter(|(_, arg)| arg.is_sensitive())
            {
                tracing::warn!(
                    server = %server.name,
                    "args[{index}] holds a secret (or an environment value): a process's arguments are visible to other users through `ps`; pass it through the server's env instead if the server allows"
                );
            }
        }
    }
}
