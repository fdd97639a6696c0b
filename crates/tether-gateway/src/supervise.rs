//! Supervision: every server that was ready at start has a `Slot`; a watcher notices a
//! closed connection (a stdio server that exited or crashed, a remote one that went away) and
//! starts the server again from the session, with exponential backoff.
//!
//! A gateway built with servers still starting (`Supervisor::starting`) has a slot for every
//! server from the first moment, `Pending`: each server starts in a task of its own (at most
//! `StartOptions::concurrency` at once), and a failed or timed-out start is tried again with
//! the same backoff. A server that started is handed to the gateway (`joined`), which admits
//! its tools, prompts and instructions, and only then marks it ready (`Supervisor::ready`):
//! a call waiting for it finds its tools listed when it wakes.
//!
//! Rules (specs/gateway/TECH.md §3a, joining §3g):
//! - while a server is down its tools stay listed, and a call to one fails at once with a tool
//!   error saying it is restarting (never a hang);
//! - the delay before restart attempt `n` is 250 ms × 2ⁿ, at most 30 s; a server that goes
//!   down again within a minute of its last start carries on from the delay it had reached,
//!   so a crash loop slows down instead of spinning;
//! - after [`MAX_FAILED_STARTS`] failed starts in a row the server is left stopped;
//! - every change is reported on stderr (through `tracing`, masked) and in `tether_status`.
//!
//! The delays and "within a minute" are measured on the session's clock (`Session::clock`):
//! the system clock in the binary, one the test moves in tests. The watcher's own polling
//! interval is real time.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_clock::Clock;
use tether_driver::{DriverError, McpRuntime, ServerNotice, Session, StartOptions};
use tokio_util::sync::CancellationToken;

/// How often the watcher looks for closed connections.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// The first restart delay; it doubles per attempt.
pub const FIRST_DELAY: Duration = Duration::from_millis(250);

/// The longest restart delay.
pub const MAX_DELAY: Duration = Duration::from_secs(30);

/// Failed starts in a row after which a server is left stopped.
pub const MAX_FAILED_STARTS: u32 = 10;

/// A server that stays up this long after a start has its backoff reset.
const STABLE_AFTER: Duration = Duration::from_secs(60);

/// Whether the `count`th restart (or failed start) of one server gets a warning line: the
/// first three, then the 4th, 8th, 16th, …, so a server that keeps crashing says so less often
/// as its retries back off, instead of a line every 30 s without end. The others are logged
/// at debug level.
pub fn worth_a_line(count: u32) -> bool {
    count <= 3 || count.is_power_of_two()
}

/// What a warning line about the `count`th restart adds once lines start to be skipped.
fn skipping(count: u32) -> String {
    if count > 3 {
        format!(
            " ({count} so far; the next line at the {}th, lines in between at debug level)",
            count.saturating_mul(2)
        )
    } else {
        String::new()
    }
}

/// The delay before restart attempt `level` (0-based).
pub fn backoff(level: u32) -> Duration {
    FIRST_DELAY
        .saturating_mul(2u32.saturating_pow(level.min(16)))
        .min(MAX_DELAY)
}

/// Where one server stands.
#[derive(Clone)]
pub(crate) enum State {
    /// Not ready yet since the gateway started: its first start is under way, or (after
    /// `failed_starts` failed ones, the last for `reason`) the next is scheduled.
    Pending {
        reason: Option<String>,
        failed_starts: u32,
    },
    /// Serving through `runtime`.
    Ready {
        runtime: Arc<McpRuntime>,
        started: Instant,
        /// The backoff level a crash now continues from.
        level: u32,
    },
    /// Down; the next start is scheduled.
    Restarting { reason: String, failed_starts: u32 },
    /// Given up after too many failed starts.
    Stopped { reason: String },
}

/// One supervised server.
pub(crate) struct Slot {
    /// Its state; a call waiting for a pending server watches it.
    state: tokio::sync::watch::Sender<State>,
    restarts: std::sync::atomic::AtomicU32,
    /// Requests waiting for it to join (shown by `tether_status` while it is pending).
    waiting: std::sync::atomic::AtomicU32,
    /// Lazy (`--lazy`) and not asked for yet: pending, but its first start waits for
    /// [`Supervisor::wake`]; the gateway offers its pinned tools meanwhile.
    dormant: std::sync::atomic::AtomicBool,
}

/// Counts a request waiting for a slot until dropped.
struct Waiting<'a>(&'a std::sync::atomic::AtomicU32);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Slot {
    fn new(state: State) -> Self {
        Self {
            state: tokio::sync::watch::Sender::new(state),
            restarts: std::sync::atomic::AtomicU32::new(0),
            waiting: std::sync::atomic::AtomicU32::new(0),
            dormant: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn dormant(&self) -> bool {
        self.dormant.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn read(&self) -> State {
        self.state.borrow().clone()
    }

    fn set(&self, state: State) {
        self.state.send_replace(state);
    }

    fn pending(&self) -> bool {
        matches!(*self.state.borrow(), State::Pending { .. })
    }
}

/// What [`Supervisor::replace`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replaced {
    /// It was started again with the new config.
    Restarted,
    /// It has not started yet (pending, or lazy): its first start uses the new config.
    NotStarted,
    /// It is not behind this gateway (disabled, or failed for good at start).
    Absent,
}

/// A server that started after the gateway was built, for the gateway to admit.
pub(crate) type Joined = (String, Arc<McpRuntime>);

/// The supervised servers of a gateway and what restarting them needs.
pub(crate) struct Supervisor {
    /// Written only by a re-mint (`remint.rs`); every start reads it.
    session: tokio::sync::RwLock<Session>,
    options: StartOptions,
    slots: HashMap<String, Slot>,
    /// Servers that never started, with why (masked): reported by `tether_status`.
    failed_at_start: Vec<(String, String)>,
    /// Servers in spec order, for reports.
    order: Vec<String>,
    /// The session's clock: restart delays and uptimes are measured on it.
    clock: Arc<dyn Clock>,
    /// Where a server that started after the gateway was built goes ([`Supervisor::starting`]).
    joined: Option<tokio::sync::mpsc::UnboundedSender<Joined>>,
    /// Cancelled when the gateway shuts down: starts under way give up.
    stop: CancellationToken,
    /// Bounds the first starts under way at once (`StartOptions::concurrency`).
    first_starts: Arc<tokio::sync::Semaphore>,
}

impl Supervisor {
    /// Slots for every running server of `runtime`.
    pub(crate) fn new(
        session: Session,
        options: StartOptions,
        runtime: Arc<McpRuntime>,
        failed_at_start: Vec<(String, String)>,
    ) -> Self {
        let clock = session.clock();
        let now = clock.now();
        let slots = runtime
            .running()
            .into_iter()
            .map(|name| {
                let slot = Slot::new(State::Ready {
                    runtime: Arc::clone(&runtime),
                    started: now,
                    level: 0,
                });
                (name, slot)
            })
            .collect();
        let order = session.names();
        let first_starts = Arc::new(tokio::sync::Semaphore::new(options.concurrency.max(1)));
        Self {
            session: tokio::sync::RwLock::new(session),
            options,
            slots,
            failed_at_start,
            order,
            clock,
            joined: None,
            stop: CancellationToken::new(),
            first_starts,
        }
    }

    /// Slots for every server of `session` but the disabled ones, all pending; nothing is
    /// started until [`Supervisor::start_all`] (the `lazy` ones: until [`Supervisor::wake`]).
    /// Each server that starts is sent to the returned receiver.
    pub(crate) fn starting(
        session: Session,
        options: StartOptions,
        lazy: &HashSet<String>,
    ) -> (Self, tokio::sync::mpsc::UnboundedReceiver<Joined>) {
        let clock = session.clock();
        let order: Vec<String> = session
            .servers()
            .iter()
            .filter(|server| !server.options.disabled)
            .map(|server| server.name.clone())
            .collect();
        let slots = order
            .iter()
            .map(|name| {
                let slot = Slot::new(State::Pending {
                    reason: None,
                    failed_starts: 0,
                });
                slot.dormant
                    .store(lazy.contains(name), std::sync::atomic::Ordering::SeqCst);
                (name.clone(), slot)
            })
            .collect();
        let (joined, receiver) = tokio::sync::mpsc::unbounded_channel();
        let first_starts = Arc::new(tokio::sync::Semaphore::new(options.concurrency.max(1)));
        let supervisor = Self {
            session: tokio::sync::RwLock::new(session),
            options,
            slots,
            failed_at_start: Vec::new(),
            order,
            clock,
            joined: Some(joined),
            stop: CancellationToken::new(),
            first_starts,
        };
        (supervisor, receiver)
    }

    /// Starts every pending server but the dormant (lazy) ones, each in a task of its own,
    /// at most `StartOptions::concurrency` first starts at once; a failed one is tried again
    /// with the backoff until it starts or [`MAX_FAILED_STARTS`] starts failed.
    pub(crate) fn start_all(self: &Arc<Self>) {
        for name in &self.order {
            let slot = self.slots.get(name);
            if slot.is_some_and(|slot| slot.pending() && !slot.dormant()) {
                tracing::info!(server = %name, "MCP server pending: starting");
                self.first_start(name);
            }
        }
    }

    fn first_start(self: &Arc<Self>, server: &str) {
        tokio::spawn(restart(
            Arc::downgrade(self),
            Arc::clone(&self.clock),
            server.to_owned(),
            Start::First(Arc::clone(&self.first_starts)),
        ));
    }

    /// Starts `server` if it is dormant (lazy, not asked for yet): one of its tools was found
    /// or called. Returns whether this started it.
    pub(crate) fn wake(self: &Arc<Self>, server: &str, why: &str) -> bool {
        let Some(slot) = self.slots.get(server) else {
            return false;
        };
        if !slot
            .dormant
            .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            return false;
        }
        tracing::info!(server = %server, "MCP server pending: starting ({why})");
        self.first_start(server);
        true
    }

    /// Marks `server`, which started after the gateway was built, ready (the gateway admitted
    /// its tools first): calls waiting for it go on.
    pub(crate) fn ready(&self, server: &str, runtime: Arc<McpRuntime>, tools: usize) {
        if let Some(slot) = self.slots.get(server) {
            slot.set(State::Ready {
                runtime,
                started: self.clock.now(),
                level: 0,
            });
            tracing::info!(server = %server, "MCP server ready, {tools} tools");
        }
    }

    /// Whether `server` has not been ready yet since the gateway started.
    pub(crate) fn pending(&self, server: &str) -> bool {
        self.slots.get(server).is_some_and(Slot::pending)
    }

    /// Whether some server has not been ready yet since the gateway started (a dormant one
    /// is not waited for: nobody asked for it).
    pub(crate) fn any_pending(&self) -> bool {
        self.slots
            .values()
            .any(|slot| slot.pending() && !slot.dormant())
    }

    /// The pending server a namespaced name `SERVER__NAME` names by its prefix, if any.
    pub(crate) fn pending_named(&self, namespaced: &str) -> Option<String> {
        self.order
            .iter()
            .filter(|name| self.slots.get(*name).is_some_and(Slot::pending))
            .find(|name| {
                namespaced
                    .strip_prefix(&crate::names::sanitize(name))
                    .is_some_and(|rest| rest.starts_with(crate::names::SEPARATOR))
            })
            .cloned()
    }

    /// Waits, at most `limit`, until `server` is no longer pending (it is ready, or was
    /// given up), starting it first if it is dormant. Returns whether it is no longer pending.
    pub(crate) async fn joined(self: &Arc<Self>, server: &str, limit: Duration) -> bool {
        let Some(slot) = self.slots.get(server) else {
            return true;
        };
        self.wake(server, "a request for it is waiting");
        let mut state = slot.state.subscribe();
        if !matches!(*state.borrow(), State::Pending { .. }) {
            return true;
        }
        slot.waiting
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _waiting = Waiting(&slot.waiting);
        let settled = state.wait_for(|state| !matches!(state, State::Pending { .. }));
        tokio::time::timeout(limit, settled).await.is_ok()
    }

    /// Waits, at most `limit`, until no server is pending but the dormant ones (which it
    /// leaves dormant). Returns whether none is.
    pub(crate) async fn all_joined(self: &Arc<Self>, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        for name in &self.order {
            if self.slots.get(name).is_some_and(Slot::dormant) {
                continue;
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if !self.joined(name, left).await {
                return false;
            }
        }
        true
    }

    /// Waits, at most `limit`, until no server is on its first start still (pending, not
    /// dormant, no start failed yet): what a search asked right after the gateway started
    /// waits for, so it searches every tool it will ever find. A server whose start failed
    /// already is retried with the backoff and not waited for (a broken server must not
    /// hold every search for the whole timeout); it stays among [`Supervisor::not_ready_yet`].
    pub(crate) async fn first_starts(&self, limit: Duration) {
        let first = |state: &State| {
            matches!(
                state,
                State::Pending {
                    failed_starts: 0,
                    ..
                }
            )
        };
        let deadline = tokio::time::Instant::now() + limit;
        for name in &self.order {
            let Some(slot) = self.slots.get(name).filter(|slot| !slot.dormant()) else {
                continue;
            };
            let mut state = slot.state.subscribe();
            if !first(&state.borrow()) {
                continue;
            }
            // Shown by tether_status as a request waiting for it.
            slot.waiting
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let _waiting = Waiting(&slot.waiting);
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let settled = state.wait_for(|state| !first(state));
            if tokio::time::timeout(left, settled).await.is_err() {
                return;
            }
        }
    }

    /// The servers not ready yet that are starting or being retried (not the dormant ones).
    pub(crate) fn not_ready_yet(&self) -> Vec<String> {
        self.order
            .iter()
            .filter(|name| {
                self.slots
                    .get(*name)
                    .is_some_and(|slot| slot.pending() && !slot.dormant())
            })
            .cloned()
            .collect()
    }

    /// Ends the starts under way and stops scheduling new ones.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    /// The servers in spec order.
    pub(crate) fn order(&self) -> &[String] {
        &self.order
    }

    /// The session's clock (what the Streamable HTTP sessions' idle expiry is measured on).
    pub(crate) fn clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.clock)
    }

    /// The session the servers are started from.
    pub(crate) fn session(&self) -> &tokio::sync::RwLock<Session> {
        &self.session
    }

    /// Starts `server` afresh from the session (a re-minted config) and serves it from the
    /// new runtime; the old connection and process end. When the start fails the old one
    /// keeps serving (its token is still valid for a while) and the reason is returned. A
    /// server not started yet has nothing to replace: its next start reads the session, which
    /// holds the new config already.
    pub(crate) async fn replace(&self, server: &str) -> Result<Replaced, String> {
        let Some(slot) = self.slots.get(server) else {
            return Ok(Replaced::Absent);
        };
        if slot.pending() {
            return Ok(Replaced::NotStarted);
        }
        let started = self
            .session
            .read()
            .await
            .start_server(server, &self.options)
            .await
            .map_err(|error| error.to_string())?;
        let old = slot.read();
        slot.set(State::Ready {
            runtime: Arc::new(started),
            started: self.clock.now(),
            level: 0,
        });
        if let State::Ready { runtime, .. } = old {
            runtime.stop_server(server);
        }
        self.relist(server);
        Ok(Replaced::Restarted)
    }

    /// Has the gateway list `server`'s tools and prompts again (a new process may offer
    /// others).
    fn relist(&self, server: &str) {
        if let Some(notices) = &self.options.notices {
            for notice in [ServerNotice::ToolsChanged, ServerNotice::PromptsChanged] {
                let _ = notices.send((server.to_owned(), notice));
            }
        }
    }

    /// [`Supervisor::runtime`], after waiting at most `limit` for a pending `server`.
    pub(crate) async fn runtime_waiting(
        self: &Arc<Self>,
        server: &str,
        method: &str,
        limit: Duration,
    ) -> Result<Arc<McpRuntime>, DriverError> {
        if self.slots.get(server).is_some_and(Slot::pending) {
            self.joined(server, limit).await;
        }
        self.runtime(server, method)
    }

    /// The runtime `server` is served by now, or why there is none; the error names `method`,
    /// the request that could not be sent (`prompts/get`, `resources/read`, …).
    pub(crate) fn runtime(
        &self,
        server: &str,
        method: &str,
    ) -> Result<Arc<McpRuntime>, DriverError> {
        let unavailable = |message: String| DriverError::RequestFailed {
            server: server.to_owned(),
            method: method.to_owned(),
            code: None,
            message,
        };
        let Some(slot) = self.slots.get(server) else {
            return Err(unavailable("the server is not running".to_owned()));
        };
        match slot.read() {
            State::Ready { runtime, .. } => Ok(runtime),
            State::Pending {
                reason,
                failed_starts,
            } => Err(unavailable(match reason {
                None => "the server is still starting".to_owned(),
                Some(reason) => format!(
                    "the server has not started yet: {failed_starts} failed starts so far, the last: {reason}; it is being tried again"
                ),
            })),
            State::Restarting {
                reason,
                failed_starts,
            } => Err(unavailable(format!(
                "the server is unavailable: it stopped ({reason}) and is being restarted ({failed_starts} failed starts so far); try again shortly"
            ))),
            State::Stopped { reason } => Err(unavailable(format!(
                "the server is stopped: it could not be restarted ({reason})"
            ))),
        }
    }

    /// Every distinct runtime (for shutdown).
    pub(crate) fn runtimes(&self) -> Vec<Arc<McpRuntime>> {
        let mut all: Vec<Arc<McpRuntime>> = Vec::new();
        for slot in self.slots.values() {
            if let State::Ready { runtime, .. } = slot.read()
                && !all.iter().any(|known| Arc::ptr_eq(known, &runtime))
            {
                all.push(runtime);
            }
        }
        all
    }

    /// Per-server status, in spec order, for `tether_status`.
    pub(crate) fn status(&self, tools_of: impl Fn(&str) -> usize) -> Value {
        let servers: Vec<Value> = self
            .order
            .iter()
            .filter_map(|name| {
                if let Some(slot) = self.slots.get(name) {
                    let restarts = slot.restarts.load(std::sync::atomic::Ordering::Relaxed);
                    let (state, error) = match slot.read() {
                        State::Pending {
                            reason,
                            failed_starts,
                        } => {
                            let waiting = slot.waiting.load(std::sync::atomic::Ordering::Relaxed);
                            let state = match reason {
                                Some(_) => "retrying",
                                None if slot.dormant() => "lazy",
                                None => "pending",
                            };
                            // A lazy server's pinned tools are offered already.
                            let tools = if slot.dormant() { tools_of(name) } else { 0 };
                            return Some(json!({
                                "name": name, "state": state, "tools": tools, "restarts": 0,
                                "error": reason, "failed_starts": failed_starts,
                                "waiting_calls": waiting,
                            }));
                        }
                        State::Ready { .. } => ("ready", None),
                        State::Restarting { reason, .. } => ("restarting", Some(reason)),
                        State::Stopped { reason } => ("stopped", Some(reason)),
                    };
                    return Some(json!({
                        "name": name, "state": state, "tools": tools_of(name),
                        "restarts": restarts, "error": error,
                    }));
                }
                self.failed_at_start
                    .iter()
                    .find(|(failed, _)| failed == name)
                    .map(|(_, reason)| {
                        json!({"name": name, "state": "failed", "tools": 0, "restarts": 0, "error": reason})
                    })
            })
            .collect();
        json!({ "servers": servers })
    }

    /// Marks `server` down and schedules its restart, unless it is down already.
    pub(crate) fn went_down(self: &Arc<Self>, server: &str) {
        let Some(slot) = self.slots.get(server) else {
            return;
        };
        let State::Ready { started, level, .. } = slot.read() else {
            return;
        };
        let level = if self.clock.now().saturating_duration_since(started) >= STABLE_AFTER {
            0
        } else {
            level
        };
        let reason = "its connection closed: the process exited or the server went away";
        let next = slot.restarts.load(std::sync::atomic::Ordering::Relaxed) + 1;
        let delay = backoff(level).as_secs_f64();
        if worth_a_line(next) {
            tracing::warn!(
                server,
                "MCP server stopped: {reason}; restarting in {delay:.2} s"
            );
        } else {
            tracing::debug!(
                server,
                "MCP server stopped: {reason}; restarting in {delay:.2} s"
            );
        }
        slot.set(State::Restarting {
            reason: reason.to_owned(),
            failed_starts: 0,
        });
        tokio::spawn(restart(
            Arc::downgrade(self),
            Arc::clone(&self.clock),
            server.to_owned(),
            Start::Again { level },
        ));
    }
}

/// How [`restart`] begins.
enum Start {
    /// A pending server's first start: at once, under one of the permits; once started it
    /// joins the gateway.
    First(Arc<tokio::sync::Semaphore>),
    /// A server that was ready and went down: after the backoff of `level`.
    Again { level: u32 },
}

/// Starts `server` (again) until it runs or [`MAX_FAILED_STARTS`] starts failed.
/// The delays are waited on `clock` (the supervisor's), held apart so the wait does not keep
/// the supervisor alive.
async fn restart(
    supervisor: Weak<Supervisor>,
    clock: Arc<dyn Clock>,
    server: String,
    start: Start,
) {
    let (mut level, mut permits, joining) = match start {
        Start::First(permits) => (0, Some(permits), true),
        Start::Again { level } => (level, None, false),
    };
    let mut failed_starts = 0;
    loop {
        if permits.is_none() {
            clock.sleep(backoff(level)).await;
        }
        let Some(supervisor) = supervisor.upgrade() else {
            return;
        };
        let Some(slot) = supervisor.slots.get(&server) else {
            return;
        };
        // A first start waits for a permit, so at most `concurrency` servers start at once.
        let permit = match permits.take() {
            Some(permits) => Some(permits.acquire_owned().await),
            None => None,
        };
        let started = tokio::select! {
            () = supervisor.stop.cancelled() => return,
            started = async {
                supervisor
                    .session
                    .read()
                    .await
                    .start_server(&server, &supervisor.options)
                    .await
            } => started,
        };
        drop(permit);
        match started {
            Ok(runtime) if joining => {
                match &supervisor.joined {
                    // The gateway admits its tools, then marks it ready.
                    Some(joined) => {
                        let _ = joined.send((server.clone(), Arc::new(runtime)));
                    }
                    None => supervisor.ready(&server, Arc::new(runtime), 0),
                }
                return;
            }
            Ok(runtime) => {
                level = level.saturating_add(1);
                let count = slot
                    .restarts
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                if worth_a_line(count) {
                    tracing::warn!(server = %server, "MCP server restarted (restart {count}){}", skipping(count));
                } else {
                    tracing::debug!(server = %server, "MCP server restarted (restart {count})");
                }
                crate::telemetry::restarted(&server);
                slot.set(State::Ready {
                    runtime: Arc::new(runtime),
                    started: supervisor.clock.now(),
                    level,
                });
                supervisor.relist(&server);
                return;
            }
            Err(error) => {
                if !joining || failed_starts > 0 {
                    level = level.saturating_add(1);
                }
                failed_starts += 1;
                // The session masks its own values in start errors.
                let reason = error.to_string();
                if failed_starts >= MAX_FAILED_STARTS {
                    tracing::warn!(server = %server, "MCP server not restarted after {failed_starts} failed starts; leaving it stopped: {reason}");
                    slot.set(State::Stopped { reason });
                    return;
                }
                let next = backoff(level).as_secs_f64();
                let line = worth_a_line(failed_starts);
                if joining {
                    if line {
                        tracing::warn!(
                            server = %server,
                            "starting the MCP server failed ({reason}); it stays pending, next try in {next:.2} s{}",
                            skipping(failed_starts)
                        );
                    } else {
                        tracing::debug!(
                            server = %server,
                            "starting the MCP server failed ({reason}); it stays pending, next try in {next:.2} s"
                        );
                    }
                    slot.set(State::Pending {
                        reason: Some(reason),
                        failed_starts,
                    });
                } else {
                    if line {
                        tracing::warn!(
                            server = %server,
                            "restarting the MCP server failed ({reason}); next try in {next:.2} s{}",
                            skipping(failed_starts)
                        );
                    } else {
                        tracing::debug!(
                            server = %server,
                            "restarting the MCP server failed ({reason}); next try in {next:.2} s"
                        );
                    }
                    slot.set(State::Restarting {
                        reason,
                        failed_starts,
                    });
                }
            }
        }
    }
}

/// Watches every ready server's connection until the supervisor is gone.
pub(crate) async fn watch(supervisor: Weak<Supervisor>) {
    loop {
        tokio::time::sleep(WATCH_INTERVAL).await;
        let Some(supervisor) = supervisor.upgrade() else {
            return;
        };
        let mut closed = Vec::new();
        for runtime in supervisor.runtimes() {
            for name in runtime.closed() {
                // Only a server this runtime serves now (a replaced one stays listed in the
                // runtime it crashed in).
                if let Some(slot) = supervisor.slots.get(&name)
                    && let State::Ready {
                        runtime: current, ..
                    } = slot.read()
                    && Arc::ptr_eq(&current, &runtime)
                {
                    closed.push(name);
                }
            }
        }
        for name in closed {
            supervisor.went_down(&name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_lines_back_off_with_the_retries() {
        let lines: Vec<u32> = (1..=100).filter(|&n| worth_a_line(n)).collect();
        assert_eq!(lines, [1, 2, 3, 4, 8, 16, 32, 64]);
        assert_eq!(skipping(3), "");
        assert_eq!(
            skipping(8),
            " (8 so far; the next line at the 16th, lines in between at debug level)"
        );
    }

    #[test]
    fn backoff_doubles_and_is_bounded() {
        assert_eq!(backoff(0), Duration::from_millis(250));
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(4), Duration::from_secs(4));
        assert_eq!(backoff(7), MAX_DELAY);
        assert_eq!(backoff(u32::MAX), MAX_DELAY);
    }
}
