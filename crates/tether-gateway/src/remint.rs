//! Managed configs re-minted while the gateway serves: before a managed server's proxy token
//! expires, the session asks the managed server for a fresh config (`Session::remint_due`,
//! under the session's refresh policy: 5 minutes ahead, at most once a minute per
//! installation); each server whose rendering changed is started afresh from it and replaces
//! the old one (`Supervisor::replace`), then is listed again. The new values join the
//! gateway's masking set (and the caller's, through [`MaskingHook`]) before anything the new
//! servers send is passed on. The loop tells time and waits by the session's clock
//! (`Session::clock`), so a test that moves that clock moves the schedule with it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tether_config::SecretValue;
use tether_driver::RemintOutcome;

use crate::shared::Shared;
use crate::supervise::Replaced;

/// Told the session's whole masking set after a re-mint added values (the caller's log layer
/// registers them).
#[derive(Clone)]
pub struct MaskingHook(pub Arc<RegisterValues>);

/// What a [`MaskingHook`] calls with the masking set.
pub type RegisterValues = dyn Fn(&[SecretValue]) + Send + Sync;

impl std::fmt::Debug for MaskingHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MaskingHook")
    }
}

/// The least time between two looks (the session's own schedule is at least a second too).
const MIN_WAIT: Duration = Duration::from_secs(1);

/// Re-mints due managed configs until the gateway is gone or no lease expires.
pub(crate) async fn remint(shared: Weak<Shared>, hook: Option<MaskingHook>) {
    loop {
        let (wait, clock) = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let session = shared.supervisor.session().read().await;
            let clock = session.clock();
            (session.next_check(clock.now_utc()), clock)
        };
        let Some(wait) = wait else {
            return;
        };
        clock.sleep(wait.max(MIN_WAIT)).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let (outcomes, values) = {
            let mut session = shared.supervisor.session().write().await;
            let outcomes = session.remint_due().await;
            (outcomes, session.sensitive_values().to_vec())
        };
        if outcomes.is_empty() {
            continue;
        }
        shared.set_masking(&values);
        if let Some(MaskingHook(hook)) = &hook {
            hook(&values);
        }
        for outcome in outcomes {
            match outcome {
                RemintOutcome::Unchanged { uid } => {
                    tracing::info!(%uid, "re-minted the managed config: unchanged");
                }
                RemintOutcome::Changed { uid, servers } => {
                    for server in servers {
                        match shared.supervisor.replace(&server).await {
                            Ok(Replaced::Restarted) => tracing::warn!(
                                %uid,
                                server = %server,
                                "re-minted the managed config: the server was restarted with it"
                            ),
                            Ok(Replaced::NotStarted) => tracing::info!(
                                %uid,
                                server = %server,
                                "re-minted the managed config: the server has not started yet; it starts with the new one"
                            ),
                            Ok(Replaced::Absent) => tracing::info!(
                                %uid,
                                server = %server,
                                "re-minted the managed config of a server not running behind this gateway"
                            ),
                            Err(reason) => tracing::warn!(
                                %uid,
                                server = %server,
                                "re-minted the managed config, but the server did not start with it; the old one keeps serving: {}",
                                shared.mask(&reason)
                            ),
                        }
                    }
                }
                RemintOutcome::Failed { uid, message } => tracing::warn!(
                    %uid,
                    "re-minting the managed config failed; the running servers are kept: {}",
                    shared.mask(&message)
                ),
            }
        }
    }
}
