//! Re-minting managed configs before their proxy tokens expire.
//!
//! A managed URL config carries `expiresAt`. A long-running session asks the managed server
//! for a fresh config about [`RefreshPolicy::ahead`] (5 minutes) before expiry, at most once
//! per [`RefreshPolicy::min_interval`] (1 minute) per installation, and restarts a server only
//! when its rendered config changed. The task config is never touched: it keeps `warp_id`.

use std::collections::HashMap;
use std::time::Duration;

use tether_config::{EnvLookup, Exposure, Secrets};
use time::OffsetDateTime;
use tokio::time::Instant;
use uuid::Uuid;

use crate::error::DriverError;
use crate::launch::{McpRuntime, ServerReport, StartOptions};
use crate::resolve::{ResolvedMcpSpecs, Resolver};

/// When to re-mint.
#[derive(Debug, Clone, Copy)]
pub struct RefreshPolicy {
    /// How long before expiry to re-mint (default 5 minutes).
    pub ahead: Duration,
    /// The least time between two attempts for one installation (default 1 minute).
    pub min_interval: Duration,
}

impl Default for RefreshPolicy {
    fn default() -> Self {
        Self {
            ahead: Duration::from_secs(5 * 60),
            min_interval: Duration::from_secs(60),
        }
    }
}

/// What one re-mint did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefreshOutcome {
    /// The new config renders the same: nothing restarted.
    Unchanged {
        /// The managed installation.
        uid: Uuid,
    },
    /// The rendered config changed and these servers were restarted.
    Restarted {
        /// The managed installation.
        uid: Uuid,
        /// The restarted servers' startup results.
        reports: Vec<ServerReport>,
    },
    /// The re-mint failed; the running servers are kept until their tokens expire.
    Failed {
        /// The managed installation.
        uid: Uuid,
        /// Why (safe to show).
        message: String,
    },
}

/// Tracks re-mint attempts for a session.
#[derive(Debug, Default)]
pub struct Refresher {
    policy: RefreshPolicy,
    last_attempt: HashMap<Uuid, Instant>,
}

impl Refresher {
    /// A refresher with `policy`.
    pub fn new(policy: RefreshPolicy) -> Self {
        Self {
            policy,
            last_attempt: HashMap::new(),
        }
    }

    /// The managed installations due for a re-mint at `now` (wall clock `now_utc`).
    pub fn due(
        &self,
        resolved: &ResolvedMcpSpecs,
        now_utc: OffsetDateTime,
        now: Instant,
    ) -> Vec<Uuid> {
        resolved
            .leases()
            .into_iter()
            .filter(|lease| {
                let Some(expires_at) = lease.expires_at else {
                    return false;
                };
                let remaining = expires_at - now_utc;
                let near = remaining
                    <= time::Duration::try_from(self.policy.ahead).unwrap_or(time::Duration::MAX);
                let rested = self
                    .last_attempt
                    .get(&lease.uid)
                    .is_none_or(|last| now.duration_since(*last) >= self.policy.min_interval);
                near && rested
            })
            .map(|lease| lease.uid)
            .collect()
    }

    /// How long to sleep before the next check: until the earliest lease enters its re-mint
    /// window, but at least `min_interval` after an attempt, capped at `min_interval` so a
    /// clock jump is noticed; `None` when no lease expires.
    pub fn next_check(
        &self,
        resolved: &ResolvedMcpSpecs,
        now_utc: OffsetDateTime,
    ) -> Option<Duration> {
        resolved
            .leases()
            .iter()
            .filter_map(|lease| lease.expires_at)
            .map(|expires_at| {
                let until_window = expires_at
                    - now_utc
                    - time::Duration::try_from(self.policy.ahead).unwrap_or(time::Duration::ZERO);
                Duration::try_from(until_window).unwrap_or(Duration::ZERO)
            })
            .min()
            .map(|wait| wait.clamp(Duration::from_secs(1), self.policy.min_interval))
    }

    /// Re-mints every due installation, swaps its servers in `resolved`, and restarts those
    /// whose rendered config changed.
    pub async fn refresh_due(
        &mut self,
        resolver: &Resolver,
        resolved: &mut ResolvedMcpSpecs,
        secrets: &Secrets,
        env: &dyn EnvLookup,
        runtime: &mut McpRuntime,
        options: &StartOptions,
    ) -> Vec<RefreshOutcome> {
        let due = self.due(resolved, OffsetDateTime::now_utc(), Instant::now());
        let mut outcomes = Vec::new();
        for uid in due {
            self.last_attempt.insert(uid, Instant::now());
            outcomes.push(
                match refresh_one(resolver, resolved, uid, secrets, env, runtime, options).await {
                    Ok(outcome) => outcome,
                    Err(err) => {
                        tracing::warn!(%uid, "re-minting the managed MCP config failed");
                        RefreshOutcome::Failed {
                            uid,
                            message: err.to_string(),
                        }
                    }
                },
            );
        }
        outcomes
    }
}

async fn refresh_one(
    resolver: &Resolver,
    resolved: &mut ResolvedMcpSpecs,
    uid: Uuid,
    secrets: &Secrets,
    env: &dyn EnvLookup,
    runtime: &mut McpRuntime,
    options: &StartOptions,
) -> Result<RefreshOutcome, DriverError> {
    let fresh = resolver.remint(uid).await?;
    let rendered_of = |installations: &mut dyn Iterator<Item = &tether_config::Installation>| {
        installations
            .map(|i| i.render(secrets, env))
            .collect::<Vec<_>>()
    };
    let old: Vec<_> = rendered_of(
        &mut resolved
            .ephemeral
            .iter()
            .filter(|e| e.lease.is_some_and(|l| l.uid == uid))
            .map(|e| &e.installation),
    );
    let new: Vec<_> = rendered_of(&mut fresh.iter().map(|e| &e.installation));
    // Only servers whose rendered config differs (or that are new) are restarted.
    let changed: Vec<_> = new
        .into_iter()
        .filter(|server| {
            !old.iter().any(|before| {
                before.name == server.name
                    && before.to_json(Exposure::Real) == server.to_json(Exposure::Real)
            })
        })
        .collect();

    // Swap the installations in place, keeping their position.
    let position = resolved
        .ephemeral
        .iter()
        .position(|e| e.lease.is_some_and(|l| l.uid == uid))
        .unwrap_or(resolved.ephemeral.len());
    resolved
        .ephemeral
        .retain(|e| e.lease.is_none_or(|l| l.uid != uid));
    let at = position.min(resolved.ephemeral.len());
    resolved.ephemeral.splice(at..at, fresh);

    if changed.is_empty() {
        tracing::debug!(%uid, "re-minted managed MCP config renders the same; nothing restarted");
        return Ok(RefreshOutcome::Unchanged { uid });
    }
    let mut reports = Vec::new();
    for server in changed {
        tracing::info!(%uid, server = %server.name, "managed MCP config changed; restarting the server");
        reports.push(runtime.restart(server, options).await);
    }
    Ok(RefreshOutcome::Restarted { uid, reports })
}
