//! The clients connected to a gateway: who they are (list changes and log messages go to all
//! of them), which calls each has running on which server (a server's own request goes to the
//! client whose call it is serving), which resources each subscribed to, and the draining of
//! a Streamable HTTP session's calls before the session closes.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rmcp::{Peer, RoleServer};

use crate::rounds::Asker;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A call running on a server for a client.
struct Call {
    id: u64,
    server: String,
    peer: Peer<RoleServer>,
    /// A 2026-07-28 client's call: the server's requests go back through its result.
    asker: Option<Asker>,
}

/// Who answers a server's request.
pub(crate) enum Answerer {
    /// A client with a session: asked with a request of its own.
    Peer(Peer<RoleServer>),
    /// A 2026-07-28 client's call: asked through an `InputRequiredResult` (`rounds.rs`).
    Call(Asker),
}

/// A resource subscription: the URI, the client connection's id and its peer.
struct Subscription {
    uri: String,
    connection: Arc<str>,
    peer: Peer<RoleServer>,
}

/// Every connected client and what it has running. Shared by all of a gateway's connections.
#[derive(Default)]
pub(crate) struct Clients {
    peers: Mutex<Vec<Peer<RoleServer>>>,
    next_call: AtomicU64,
    calls: Mutex<Vec<Call>>,
    subscriptions: Mutex<Vec<Subscription>>,
    /// Streamable HTTP sessions being closed: their new calls are refused.
    closing: Mutex<HashSet<String>>,
    /// Per Streamable HTTP session: POST requests whose response is still being sent.
    http_requests: Mutex<HashMap<String, usize>>,
    /// Woken whenever such a request ends.
    request_ended: tokio::sync::Notify,
}

/// A running call; it ends when this is dropped.
pub(crate) struct CallGuard<'a> {
    clients: &'a Clients,
    id: u64,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        lock(&self.clients.calls).retain(|call| call.id != self.id);
    }
}

/// A Streamable HTTP request of a session whose response is being sent; it ends when this is
/// dropped (with the response's body, once the whole answer was written).
pub(crate) struct RequestGuard {
    clients: Arc<Clients>,
    session: String,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let clients = &self.clients;
        let mut running = lock(&clients.http_requests);
        if let Some(count) = running.get_mut(&self.session) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                running.remove(&self.session);
            }
        }
        drop(running);
        clients.request_ended.notify_waiters();
    }
}

/// Put in a Streamable HTTP POST's extensions (rmcp passes them on to the handler): cancelled
/// when the client went away before the answer was written (`http.rs`).
#[derive(Clone, Debug)]
pub(crate) struct ClientGone(pub(crate) tokio_util::sync::CancellationToken);

/// The call's Streamable HTTP session is being closed (DELETE): no new call starts in it.
#[derive(Debug)]
pub(crate) struct SessionClosing;

impl Clients {
    /// A client that completed `initialize`.
    pub fn connected(&self, peer: Peer<RoleServer>) {
        lock(&self.peers).push(peer);
    }

    /// Every client still connected (those whose connection closed are forgotten).
    pub fn peers(&self) -> Vec<Peer<RoleServer>> {
        let mut peers = lock(&self.peers);
        peers.retain(|peer| !peer.is_transport_closed());
        peers.clone()
    }

    /// Records a call of `peer` running on `server` until the guard is dropped; refused when
    /// its HTTP session is being closed.
    pub fn begin(
        &self,
        server: &str,
        peer: &Peer<RoleServer>,
        http_session: Option<String>,
        asker: Option<Asker>,
    ) -> Result<CallGuard<'_>, SessionClosing> {
        if let Some(session) = &http_session
            && lock(&self.closing).contains(session)
        {
            return Err(SessionClosing);
        }
        let id = self.next_call.fetch_add(1, Ordering::Relaxed);
        lock(&self.calls).push(Call {
            id,
            server: server.to_owned(),
            peer: peer.clone(),
            asker,
        });
        Ok(CallGuard { clients: self, id })
    }

    /// Who answers `server`'s request that needs `capability` (`sampling`, `elicitation`,
    /// `roots`): the client with the latest call running on `server` that is a 2026-07-28
    /// client's or whose session declared it, else the latest connected client that declared
    /// it.
    pub fn answerer(&self, server: &str, capability: &str) -> Option<Answerer> {
        let declares = |peer: &Peer<RoleServer>| {
            !peer.is_transport_closed()
                && peer.peer_info().is_some_and(|info| {
                    serde_json::to_value(&info.capabilities)
                        .ok()
                        .and_then(|caps| caps.get(capability).cloned())
                        .is_some_and(|declared| !declared.is_null())
                })
        };
        let calling = lock(&self.calls)
            .iter()
            .rev()
            .filter(|call| call.server == server)
            .find_map(|call| match &call.asker {
                // Its own client, even one that did not declare it (the call then fails
                // saying which capability it needed).
                Some(asker) => Some(Answerer::Call(asker.clone())),
                None => declares(&call.peer).then(|| Answerer::Peer(call.peer.clone())),
            });
        calling.or_else(|| {
            self.peers()
                .into_iter()
                .rev()
                .find(|peer| declares(peer))
                .map(Answerer::Peer)
        })
    }

    /// `peer` (connection `connection`) subscribed to `uri`.
    pub fn subscribe(&self, uri: &str, connection: &Arc<str>, peer: &Peer<RoleServer>) {
        let mut subscriptions = lock(&self.subscriptions);
        if !subscriptions
            .iter()
            .any(|s| s.uri == uri && s.connection == *connection)
        {
            subscriptions.push(Subscription {
                uri: uri.to_owned(),
                connection: Arc::clone(connection),
                peer: peer.clone(),
            });
        }
    }

    /// Connection `connection` unsubscribed from `uri`.
    pub fn unsubscribe(&self, uri: &str, connection: &Arc<str>) {
        lock(&self.subscriptions).retain(|s| !(s.uri == uri && s.connection == *connection));
    }

    /// The clients subscribed to `uri` (closed ones are forgotten).
    pub fn subscribers(&self, uri: &str) -> Vec<Peer<RoleServer>> {
        let mut subscriptions = lock(&self.subscriptions);
        subscriptions.retain(|s| !s.peer.is_transport_closed());
        subscriptions
            .iter()
            .filter(|s| s.uri == uri)
            .map(|s| s.peer.clone())
            .collect()
    }

    /// Counts a POST of `http_session` until the returned guard is dropped.
    pub fn http_request(self: &Arc<Self>, http_session: &str) -> RequestGuard {
        *lock(&self.http_requests)
            .entry(http_session.to_owned())
            .or_default() += 1;
        RequestGuard {
            clients: Arc::clone(self),
            session: http_session.to_owned(),
        }
    }

    /// How many POSTs of `http_session` are being answered.
    pub fn running_in(&self, http_session: &str) -> usize {
        lock(&self.http_requests)
            .get(http_session)
            .copied()
            .unwrap_or(0)
    }

    /// Refuses new calls in `http_session` and waits, at most `limit`, for the responses it
    /// is being sent (running calls) to end. Returns how many were still running at the
    /// limit (0: drained).
    pub async fn drain(&self, http_session: &str, limit: Duration) -> usize {
        lock(&self.closing).insert(http_session.to_owned());
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let ended = self.request_ended.notified();
            tokio::pin!(ended);
            // Registered before counting, so an end between the count and the wait wakes us.
            ended.as_mut().enable();
            let running = self.running_in(http_session);
            if running == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return self.running_in(http_session);
            }
        }
    }

    /// `http_session` is closed: forget it.
    pub fn closed(&self, http_session: &str) {
        lock(&self.closing).remove(http_session);
    }
}
