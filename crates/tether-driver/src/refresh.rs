//! Re-minting managed configs before their proxy tokens expire.
//!
//! A managed URL config carries `expiresAt`. A long-running session asks the managed server
//! for a fresh config about [`RefreshPolicy::ahead`] (5 minutes) before expiry, at most once
//! per [`RefreshPolicy::min_interval`] (1 minute) per installation — or, for a token that
//! lives less than two minutes, once per half its life (at least 5 s apart) — and restarts a server only
//! when its rendered config changed. The task config is never touched: it keeps `warp_id`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tether_config::{EnvLookup, Exposure, RenderedServer, Secrets};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::launch::ServerReport;
use crate::resolve::{EphemeralInstallation, ResolvedMcpSpecs};

/// The least time between two re-mints of one installation, however short its tokens live.
const MIN_REST: Duration = Duration::from_secs(5);

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

/// What one re-mint changed in a session, before any server is restarted
/// ([`crate::Session::remint_due`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemintOutcome {
    /// The new config renders the same.
    Unchanged {
        /// The managed installation that was re-minted.
        uid: Uuid,
    },
    /// The rendered config of these servers changed: the holder restarts them.
    Changed {
        /// The managed installation that was re-minted.
        uid: Uuid,
        /// The servers whose rendering changed, by name.
        servers: Vec<String>,
    },
    /// The re-mint failed; the running servers are kept until their tokens expire.
    Failed {
        /// The managed installation whose re-mint failed (tried again after `min_interval`).
        uid: Uuid,
        /// Why (safe to show).
        message: String,
    },
}

/// What one re-mint did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefreshOutcome {
    /// The new config renders the same: nothing restarted.
    Unchanged {
        /// The managed installation that was re-minted.
        uid: Uuid,
    },
    /// The rendered config changed and these servers were restarted.
    Restarted {
        /// The managed installation that was re-minted.
        uid: Uuid,
        /// The restarted servers' startup results.
        reports: Vec<ServerReport>,
    },
    /// The re-mint failed; the running servers are kept until their tokens expire.
    Failed {
        /// The managed installation whose re-mint failed (tried again after `min_interval`).
        uid: Uuid,
        /// Why (safe to show).
        message: String,
    },
}

/// When each managed installation of a session was last re-minted. Crate-private: a
/// [`crate::Session`] holds one and passes it its resolved specs.
#[derive(Debug, Default)]
pub(crate) struct Refresher {
    policy: RefreshPolicy,
    last_attempt: HashMap<Uuid, Instant>,
}

impl Refresher {
    pub(crate) fn new(policy: RefreshPolicy) -> Self {
        Self {
            policy,
            last_attempt: HashMap::new(),
        }
    }

    /// The managed installations of `resolved` due for a re-mint at `now` (wall clock
    /// `now_utc`): inside the window before expiry, and rested since the last attempt.
    pub(crate) fn due(
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
                let rested = self.last_attempt.get(&lease.uid).is_none_or(|last| {
                    let since = now.duration_since(*last);
                    since >= self.rest(since, remaining)
                });
                near && rested
            })
            .map(|lease| lease.uid)
            .collect()
    }

    /// How long to sleep before the next check: until the earliest lease enters its re-mint
    /// window, but at least a second, capped at `min_interval` so a clock jump is noticed;
    /// `None` when no lease expires.
    pub(crate) fn next_check(
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

    /// The least time between two attempts for a lease with `remaining` life, `since` the
    /// last attempt: half the life the lease had then (`since + remaining`), at least
    /// [`MIN_REST`] (or `min_interval` when less), at most `min_interval`. So a token that lives under two minutes is
    /// re-minted at half its life, not once a minute (a 45 s token had 15 s gaps).
    fn rest(&self, since: Duration, remaining: time::Duration) -> Duration {
        let remaining = Duration::try_from(remaining).unwrap_or(Duration::ZERO);
        let most = self.policy.min_interval;
        ((since + remaining) / 2).clamp(MIN_REST.min(most), most)
    }

    /// Notes an attempt for `uid` at `now`, successful or not.
    pub(crate) fn attempted(&mut self, uid: Uuid, now: Instant) {
        self.last_attempt.insert(uid, now);
    }
}

/// Swaps the installations of the managed `uid` in `resolved` for `fresh` (a re-mint),
/// keeping their position, and returns the fresh servers whose rendering differs from before
/// (or that are new): the ones to restart.
pub(crate) fn swap_reminted(
    resolved: &mut ResolvedMcpSpecs,
    uid: Uuid,
    fresh: Vec<EphemeralInstallation>,
    secrets: &Secrets,
    env: &dyn EnvLookup,
) -> Vec<RenderedServer> {
    let of_uid = |e: &EphemeralInstallation| e.lease.is_some_and(|l| l.uid == uid);
    let old: Vec<RenderedServer> = resolved
        .ephemeral
        .iter()
        .filter(|e| of_uid(e))
        .map(|e| e.installation.render(secrets, env))
        .collect();
    let changed: Vec<RenderedServer> = fresh
        .iter()
        .map(|e| e.installation.render(secrets, env))
        .filter(|server| !old.iter().any(|before| renders_alike(before, server)))
        .collect();
    let position = resolved
        .ephemeral
        .iter()
        .position(of_uid)
        .unwrap_or(resolved.ephemeral.len());
    resolved.ephemeral.retain(|e| !of_uid(e));
    let at = position.min(resolved.ephemeral.len());
    resolved.ephemeral.splice(at..at, fresh);
    changed
}

/// Two renderings of one server name that would launch the same way.
pub(crate) fn renders_alike(a: &RenderedServer, b: &RenderedServer) -> bool {
    a.name == b.name && a.to_json(Exposure::Real) == b.to_json(Exposure::Real)
}
