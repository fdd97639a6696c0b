//! Where the progress notifications of forwarded requests go, and the signal that all of a
//! request's progress has been passed on before its answer is.
//!
//! rmcp hands each notification to a task of its own but a response straight to its waiter,
//! so a server's last progress, sent just before its answer, can be handled after it. The
//! connection's transport wrapper (`lifecycle::Probing`) sees every message in stream order:
//! it counts each progress notification it passes to rmcp ([`Routes::read`]) before the
//! answer that follows it can be read, and [`Routes::pass`] counts each one handled. A
//! forwarder that has its answer waits until the two counts meet ([`Route::settle`]) and only
//! then closes its route: no progress is lost, and none is waited for that never came.
//! [`LATE_PROGRESS`] only bounds that wait (a handler task that never runs), and is the fixed
//! grace of a transport that does not count (the legacy SSE transport).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedSender;

/// The most a forwarder waits for progress read before its answer to be handled; without a
/// counting transport, how long a route outlives its request's answer.
pub(super) const LATE_PROGRESS: Duration = Duration::from_millis(50);

/// One connection's progress routes, by the progress token rmcp gave the request.
#[derive(Default)]
pub(super) struct Routes {
    routes: Mutex<HashMap<ProgressToken, Counted>>,
    /// Woken when a notification was handled.
    handled: Notify,
    /// Whether the connection's transport counts what it reads ([`Routes::read`]).
    counting: AtomicBool,
}

/// A route and how many of its token's notifications were read and handled.
struct Counted {
    sender: UnboundedSender<Value>,
    read: u64,
    handled: u64,
}

/// The routes of a connection, shared by its client handler, its transport and its forwarders.
pub(super) type ProgressRoutes = Arc<Routes>;

impl Routes {
    fn lock(&self) -> MutexGuard<'_, HashMap<ProgressToken, Counted>> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The transport counts the progress it reads: forwarders wait for the counts, not a grace.
    pub(super) fn counted_by_transport(&self) {
        self.counting.store(true, Ordering::SeqCst);
    }

    /// Opens the route of `token` to `sender`: closed by [`Route::settle`] once the answer
    /// came, or (an ended or dropped forward) [`LATE_PROGRESS`] after the [`Route`] is dropped.
    pub(super) fn open(
        self: &Arc<Self>,
        token: ProgressToken,
        sender: UnboundedSender<Value>,
    ) -> Route {
        self.lock().insert(
            token.clone(),
            Counted {
                sender,
                read: 0,
                handled: 0,
            },
        );
        Route {
            routes: Arc::clone(self),
            token: Some(token),
        }
    }

    /// The transport read a progress notification for `token` (in stream order, before the
    /// answer that follows it).
    pub(super) fn read(&self, token: &ProgressToken) {
        if let Some(route) = self.lock().get_mut(token) {
            route.read += 1;
        }
    }

    /// The client handler's part: `params` to its route, if one is open, and counted handled.
    pub(super) fn pass(&self, params: &ProgressNotificationParam) {
        let mut routes = self.lock();
        let Some(route) = routes.get_mut(&params.progress_token) else {
            return;
        };
        if let Ok(value) = serde_json::to_value(params) {
            // The forwarder may have finished; a late notification has nowhere to go.
            let _ = route.sender.send(value);
        }
        route.handled += 1;
        drop(routes);
        self.handled.notify_waiters();
    }

    /// Whether every notification read for `token` has been handled.
    fn caught_up(&self, token: &ProgressToken) -> bool {
        self.lock()
            .get(token)
            .is_none_or(|route| route.handled >= route.read)
    }

    fn close(&self, token: &ProgressToken) {
        self.lock().remove(token);
    }
}

/// An open progress route of one forwarded request.
pub(super) struct Route {
    routes: ProgressRoutes,
    /// `None` once settled.
    token: Option<ProgressToken>,
}

impl Route {
    /// The request was answered: waits until the progress read before the answer has been
    /// passed on (at most [`LATE_PROGRESS`]), then closes the route.
    pub(super) async fn settle(mut self) {
        let Some(token) = self.token.take() else {
            return;
        };
        let routes = Arc::clone(&self.routes);
        if routes.counting.load(Ordering::SeqCst) {
            let caught_up = async {
                loop {
                    let handled = routes.handled.notified();
                    tokio::pin!(handled);
                    handled.as_mut().enable();
                    if routes.caught_up(&token) {
                        return;
                    }
                    handled.await;
                }
            };
            if tokio::time::timeout(LATE_PROGRESS, caught_up)
                .await
                .is_err()
            {
                tracing::debug!("progress read before an answer was not handled in time");
            }
        } else {
            tokio::time::sleep(LATE_PROGRESS).await;
        }
        routes.close(&token);
    }
}

impl Drop for Route {
    /// Not settled (a cancellation, an error, a dropped forward): closed [`LATE_PROGRESS`]
    /// later, so progress already sent still reaches the client.
    fn drop(&mut self) {
        let Some(token) = self.token.take() else {
            return;
        };
        let routes = Arc::clone(&self.routes);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    tokio::time::sleep(LATE_PROGRESS).await;
                    routes.close(&token);
                });
            }
            Err(_) => routes.close(&token),
        }
    }
}
