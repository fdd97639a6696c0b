//! Supervision: every server that was ready at start has a [`Slot`]; a watcher notices a
//! closed connection (a stdio server that exited or crashed, a remote one that went away) and
//! starts the server again from the session, with exponential backoff.
//!
//! Rules (specs/gateway/TECH.md §3a):
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

use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_clock::Clock;
use tether_driver::{DriverError, McpRuntime, ServerNotice, Session, StartOptions};

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

/// The delay before restart attempt `level` (0-based).
pub fn backoff(level: u32) -> Duration {
    FIRST_DELAY
        .saturating_mul(2u32.saturating_pow(level.min(16)))
        .min(MAX_DELAY)
}

/// Where one server stands.
#[derive(Clone)]
pub(crate) enum State {
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
    state: RwLock<State>,
    restarts: std::sync::atomic::AtomicU32,
}

impl Slot {
    fn read(&self) -> State {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, state: State) {
        *self
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = state;
    }
}

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
                let slot = Slot {
                    state: RwLock::new(State::Ready {
                        runtime: Arc::clone(&runtime),
                        started: now,
                        level: 0,
                    }),
                    restarts: std::sync::atomic::AtomicU32::new(0),
                };
                (name, slot)
            })
            .collect();
        let order = session.names();
        Self {
            session: tokio::sync::RwLock::new(session),
            options,
            slots,
            failed_at_start,
            order,
            clock,
        }
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
    /// keeps serving (its token is still valid for a while) and the reason is returned.
    pub(crate) async fn replace(&self, server: &str) -> Result<(), String> {
        let Some(slot) = self.slots.get(server) else {
            return Err("it is not running behind this gateway".to_owned());
        };
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
        Ok(())
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
        tracing::warn!(
            server,
            "MCP server stopped: {reason}; restarting in {:.2} s",
            backoff(level).as_secs_f64()
        );
        slot.set(State::Restarting {
            reason: reason.to_owned(),
            failed_starts: 0,
        });
        tokio::spawn(restart(
            Arc::downgrade(self),
            Arc::clone(&self.clock),
            server.to_owned(),
            level,
        ));
    }
}

/// Starts `server` again until it runs or [`MAX_FAILED_STARTS`] starts failed.
/// The delays are waited on `clock` (the supervisor's), held apart so the wait does not keep
/// the supervisor alive.
async fn restart(
    supervisor: Weak<Supervisor>,
    clock: Arc<dyn Clock>,
    server: String,
    mut level: u32,
) {
    let mut failed_starts = 0;
    loop {
        clock.sleep(backoff(level)).await;
        let Some(supervisor) = supervisor.upgrade() else {
            return;
        };
        let Some(slot) = supervisor.slots.get(&server) else {
            return;
        };
        let started = supervisor
            .session
            .read()
            .await
            .start_server(&server, &supervisor.options)
            .await;
        level = level.saturating_add(1);
        match started {
            Ok(runtime) => {
                let count = slot
                    .restarts
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                tracing::warn!(server = %server, "MCP server restarted (restart {count})");
                slot.set(State::Ready {
                    runtime: Arc::new(runtime),
                    started: supervisor.clock.now(),
                    level,
                });
                supervisor.relist(&server);
                return;
            }
            Err(error) => {
                failed_starts += 1;
                // The session masks its own values in start errors.
                let reason = error.to_string();
                if failed_starts >= MAX_FAILED_STARTS {
                    tracing::warn!(server = %server, "MCP server not restarted after {failed_starts} failed starts; leaving it stopped: {reason}");
                    slot.set(State::Stopped { reason });
                    return;
                }
                tracing::warn!(
                    server = %server,
                    "restarting the MCP server failed ({reason}); next try in {:.2} s",
                    backoff(level).as_secs_f64()
                );
                slot.set(State::Restarting {
                    reason,
                    failed_starts,
                });
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
    fn backoff_doubles_and_is_bounded() {
        assert_eq!(backoff(0), Duration::from_millis(250));
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(4), Duration::from_secs(4));
        assert_eq!(backoff(7), MAX_DELAY);
        assert_eq!(backoff(u32::MAX), MAX_DELAY);
    }
}
