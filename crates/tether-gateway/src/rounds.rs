//! 2026-07-28 clients get no server-to-client requests: a server's `sampling/createMessage`,
//! `elicitation/create` or `roots/list` during a call of theirs becomes an
//! `InputRequiredResult` round trip (SEP-2322), whatever revision the server speaks.
//!
//! - A modern `tools/call`, `prompts/get` or `resources/read` runs detached from its request
//!   ([`Rounds::run`]): its context carries an [`Asker`] instead of a peer to send requests
//!   to, and its own cancellation token (the request that started it ends with the first
//!   `InputRequiredResult`).
//! - When the server asks something (`upstream.rs` finds the call's [`Asker`]), the request is
//!   parked: the client gets `inputRequests` (every request asked so far, keyed `input-N`) and
//!   a `requestState` sealed with an HMAC key drawn at random for this gateway process, bound
//!   to the method and target it was issued for and expiring after the call timeout. The
//!   state names the parked call only; the call itself stays here.
//! - The client's retry carries `inputResponses` and the state: a state that fails its check
//!   (tampered, expired, issued for another tool, or used already) is a JSON-RPC error
//!   (-32602); each response goes to the request it answers, a request left unanswered is
//!   asked again in a new `InputRequiredResult`, keys nobody asked are ignored. Then the
//!   call goes on until it completes or asks again.
//! - A parked call whose client never comes back is cancelled upstream once it is older than
//!   the call timeout (checked whenever another call parks); the server's request times out
//!   within the call timeout anyway.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rmcp::model::{
    InputRequest, InputRequiredResult, InputResponses, ProtocolVersion, RequestStateCodec,
    SealOptions,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{Map, Value};
use tether_driver::RequestRefused;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::{CancellationToken, DropGuard};

/// Whether `context` is a request of a client speaking 2026-07-28 or later (stateless: no
/// server-to-client requests, results carry `resultType` and cache hints).
pub(crate) fn modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28)
}

/// The keys of a 2026-07-28 request's `_meta` that say who the client is: not passed on to a
/// server (one that speaks 2026-07-28 would take the request for a stateless one of its own).
const REQUEST_META_KEYS: [&str; 4] = [
    "io.modelcontextprotocol/protocolVersion",
    "io.modelcontextprotocol/clientInfo",
    "io.modelcontextprotocol/clientCapabilities",
    "io.modelcontextprotocol/logLevel",
];

/// Removes [`REQUEST_META_KEYS`] from a request's `params._meta` (and `_meta` when empty).
pub(crate) fn strip_request_meta(params: &mut Value) {
    let Some(params) = params.as_object_mut() else {
        return;
    };
    let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) else {
        return;
    };
    for key in REQUEST_META_KEYS {
        meta.remove(key);
    }
    if meta.is_empty() {
        params.remove("_meta");
    }
}

/// `{"method": method, "params": params}`, without `params` when it is empty: a request as
/// rmcp's request types read it.
pub(crate) fn request_message(method: &str, params: Value) -> Value {
    let mut message = Map::new();
    message.insert("method".to_owned(), Value::String(method.to_owned()));
    if params.as_object().is_some_and(|p| !p.is_empty()) {
        message.insert("params".to_owned(), params);
    }
    Value::Object(message)
}

/// A server's request asked of a modern client, and where its answer goes.
pub(crate) struct Asked {
    pub(crate) request: InputRequest,
    pub(crate) reply: oneshot::Sender<Result<Value, RequestRefused>>,
}

/// Put in a detached call's context: where the servers' requests during the call go, and
/// the capabilities the client declared in the request's `_meta`.
#[derive(Clone)]
pub(crate) struct Asker {
    sender: mpsc::UnboundedSender<Asked>,
    capabilities: Arc<Value>,
    /// The capabilities a server needed that the client did not declare.
    missing: Arc<Mutex<Vec<String>>>,
}

impl Asker {
    /// An asker for a call the gateway holds as a task (`handler/tasks.rs`): the server's
    /// requests come out of the receiver instead of a round; `capabilities` (the client's, as
    /// JSON) say which may be asked.
    pub(crate) fn for_task(capabilities: Value) -> (Self, mpsc::UnboundedReceiver<Asked>) {
        let (sender, asked) = mpsc::unbounded_channel();
        let asker = Self {
            sender,
            capabilities: Arc::new(capabilities),
            missing: Arc::default(),
        };
        (asker, asked)
    }

    /// Whether the client declared `capability` (`sampling`, `elicitation`, `roots`).
    pub(crate) fn declares(&self, capability: &str) -> bool {
        self.capabilities
            .get(capability)
            .is_some_and(|declared| !declared.is_null())
    }

    /// Asks the client `method` (which needs `capability`) with `params` (masked already)
    /// through the call's next `InputRequiredResult`; the answer, or a refusal: at once when
    /// the client did not declare `capability` (-32021; the call's error of that code then
    /// names the capability in its data), else after `limit`.
    pub(crate) async fn ask(
        &self,
        capability: &str,
        method: &str,
        params: Value,
        limit: Duration,
    ) -> Result<Value, RequestRefused> {
        if !self.declares(capability) {
            lock(&self.missing).push(capability.to_owned());
            return Err(RequestRefused {
                code: MISSING_CAPABILITY.0,
                message: format!(
                    "the client did not declare the '{capability}' capability in its request, so {method} cannot be asked of it"
                ),
            });
        }
        let refused = |message: String| RequestRefused {
            code: rmcp::model::ErrorCode::INTERNAL_ERROR.0,
            message,
        };
        let request: InputRequest = serde_json::from_value(request_message(method, params))
            .map_err(|e| RequestRefused {
                code: rmcp::model::ErrorCode::INVALID_PARAMS.0,
                message: format!("{method}: {e}"),
            })?;
        let (reply, answer) = oneshot::channel();
        self.sender
            .send(Asked { request, reply })
            .map_err(|_| refused(format!("{method}: the client's call has ended")))?;
        match tokio::time::timeout(limit, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(refused(format!(
                "the client did not answer {method}: its call was given up"
            ))),
            Err(_) => Err(refused(format!(
                "the client did not answer {method} within {} s",
                limit.as_secs()
            ))),
        }
    }
}

/// MCP's "missing required client capability" error (2026-07-28).
const MISSING_CAPABILITY: rmcp::model::ErrorCode = rmcp::model::ErrorCode(-32021);

/// How long the requests a server sends at once are gathered into one `InputRequiredResult`:
/// until none came for [`GATHER_QUIET`], at most [`GATHER_LIMIT`] after the first.
const GATHER_QUIET: Duration = Duration::from_millis(20);
const GATHER_LIMIT: Duration = Duration::from_millis(200);

/// A detached call's outcome, of the handler's own result type.
type Outcome = Box<dyn Any + Send>;

/// A call waiting for its client's retry.
struct Parked {
    /// What the state was issued for (method and target): a retry must name the same.
    bind: String,
    done: oneshot::Receiver<Outcome>,
    asked: mpsc::UnboundedReceiver<Asked>,
    /// Asked of the client and not answered yet, by key.
    awaiting: BTreeMap<String, Asked>,
    /// Numbers the keys.
    next_key: u64,
    /// The capabilities the server needed that the client did not declare ([`Asker`]'s).
    missing: Arc<Mutex<Vec<String>>>,
    since: Instant,
    /// Cancels the call upstream when the parked call is dropped unfinished.
    _cancel: DropGuard,
}

/// What a modern call came to: its result, or a question for its client.
pub(crate) enum Round<T> {
    Done(T),
    Input(InputRequiredResult),
}

/// The calls of modern clients waiting for an answer, and the key their states are sealed
/// with. One per gateway.
pub(crate) struct Rounds {
    codec: RequestStateCodec,
    parked: Mutex<HashMap<String, Parked>>,
    limit: Duration,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// 32 bytes, 244 of their bits random (two v4 UUIDs, from the OS's random source).
fn random_key() -> Vec<u8> {
    let mut key = uuid::Uuid::new_v4().as_bytes().to_vec();
    key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    key
}

impl Rounds {
    /// `limit`: the call timeout (how long a state is valid, and a parked call kept).
    pub(crate) fn new(limit: Duration) -> Self {
        Self {
            // 32 bytes: the codec's minimum, so it does not refuse the key.
            codec: RequestStateCodec::try_new(random_key())
                .unwrap_or_else(|_| RequestStateCodec::new_unchecked(random_key())),
            parked: Mutex::new(HashMap::new()),
            limit,
        }
    }

    /// Runs `work` for a modern request bound to `bind` (method and target), or resumes the
    /// call `state` names with `responses`: the call's result, or the next question.
    pub(crate) async fn run<T, F, W>(
        &self,
        bind: String,
        state: Option<String>,
        responses: Option<InputResponses>,
        context: &RequestContext<RoleServer>,
        work: W,
    ) -> Result<Round<T>, ErrorData>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, ErrorData>> + Send + 'static,
        W: FnOnce(RequestContext<RoleServer>) -> F,
    {
        let mut parked = match state {
            Some(state) => self.resume(&bind, &state)?,
            None => self.start(bind, context, work),
        };
        // Each answer goes to the request it answers; keys nobody asked are ignored.
        let mut responses = responses.unwrap_or_default();
        let keys: Vec<String> = parked.awaiting.keys().cloned().collect();
        for key in keys {
            if let Some(answer) = responses.remove(&key)
                && let Some(asked) = parked.awaiting.remove(&key)
            {
                let _ = asked.reply.send(Ok(answer));
            }
        }
        if !parked.awaiting.is_empty() {
            return Ok(Round::Input(self.park(parked)));
        }
        tokio::select! {
            done = &mut parked.done => Self::finished(done, &parked.missing),
            Some(asked) = parked.asked.recv() => {
                Self::note(&mut parked, asked);
                Self::gather(&mut parked).await;
                Ok(Round::Input(self.park(parked)))
            }
            // The retry's own cancellation gives the call up (dropping it cancels upstream).
            () = context.ct.cancelled() => Err(ErrorData::internal_error("the call was cancelled", None)),
        }
    }

    /// The call's result; a failure for a capability the client did not declare names it in
    /// `data.requiredCapabilities`, as 2026-07-28 has it.
    fn finished<T: 'static>(
        done: Result<Outcome, oneshot::error::RecvError>,
        missing: &Mutex<Vec<String>>,
    ) -> Result<Round<T>, ErrorData> {
        let outcome =
            done.map_err(|_| ErrorData::internal_error("the call ended without an answer", None))?;
        match outcome.downcast::<Result<T, ErrorData>>() {
            Ok(result) => result.map(Round::Done).map_err(|mut error| {
                let missing = lock(missing);
                if error.code == MISSING_CAPABILITY && error.data.is_none() && !missing.is_empty() {
                    let required: Map<String, Value> = missing
                        .iter()
                        .map(|capability| (capability.clone(), Value::Object(Map::new())))
                        .collect();
                    error.data = Some(serde_json::json!({ "requiredCapabilities": required }));
                }
                error
            }),
            Err(_) => Err(ErrorData::internal_error(
                "a requestState of another kind of request",
                None,
            )),
        }
    }

    /// Adds the requests the server sends right after the first (a server that asks several
    /// things at once sends them one after the other).
    async fn gather(parked: &mut Parked) {
        let limit = tokio::time::Instant::now() + GATHER_LIMIT;
        loop {
            let quiet = (tokio::time::Instant::now() + GATHER_QUIET).min(limit);
            match tokio::time::timeout_at(quiet, parked.asked.recv()).await {
                Ok(Some(asked)) => Self::note(parked, asked),
                Ok(None) | Err(_) => return,
            }
        }
    }

    /// Starts `work` detached from the request: its own cancellation, an [`Asker`].
    fn start<T, F, W>(&self, bind: String, context: &RequestContext<RoleServer>, work: W) -> Parked
    where
        T: Send + 'static,
        F: Future<Output = Result<T, ErrorData>> + Send + 'static,
        W: FnOnce(RequestContext<RoleServer>) -> F,
    {
        let (sender, asked) = mpsc::unbounded_channel();
        let capabilities = context
            .client_capabilities()
            .and_then(|caps| serde_json::to_value(caps).ok())
            .unwrap_or(Value::Null);
        let cancel = CancellationToken::new();
        let mut detached = context.clone();
        detached.ct = cancel.clone();
        let missing = Arc::new(Mutex::new(Vec::new()));
        detached.extensions.insert(Asker {
            sender,
            capabilities: Arc::new(capabilities),
            missing: Arc::clone(&missing),
        });
        let (finish, done) = oneshot::channel::<Outcome>();
        let running = work(detached);
        // In the request's span: the exported upstream spans are its children.
        let span = tracing::Span::current();
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let outcome: Result<T, ErrorData> = running.await;
                let _ = finish.send(Box::new(outcome));
            },
            span,
        ));
        Parked {
            bind,
            done,
            asked,
            awaiting: BTreeMap::new(),
            next_key: 1,
            missing,
            since: Instant::now(),
            _cancel: cancel.drop_guard(),
        }
    }

    /// The parked call `state` names, taken out (a state is good for one retry).
    fn resume(&self, bind: &str, state: &str) -> Result<Parked, ErrorData> {
        let refused = |why: &str| {
            ErrorData::invalid_params(
                format!(
                    "requestState {why}: send the request again without requestState and inputResponses"
                ),
                None,
            )
        };
        let id = self
            .codec
            .open_with(state, bind.as_bytes())
            .map_err(|_| refused("failed its integrity check (tampered with, expired, or issued for another request)"))?;
        let id = String::from_utf8(id).map_err(|_| refused("is not one this gateway issued"))?;
        let parked = lock(&self.parked).remove(&id);
        parked.filter(|parked| parked.bind == bind).ok_or_else(|| {
            refused("names no call waiting for an answer (used already, or given up)")
        })
    }

    /// Records a request the server asked, and any others already waiting behind it.
    fn note(parked: &mut Parked, first: Asked) {
        let mut next = Some(first);
        while let Some(asked) = next {
            let key = format!("input-{}", parked.next_key);
            parked.next_key += 1;
            parked.awaiting.insert(key, asked);
            next = parked.asked.try_recv().ok();
        }
    }

    /// Parks the call and says what its client must answer.
    fn park(&self, mut parked: Parked) -> InputRequiredResult {
        // Requests that came in after the ones being asked are asked too.
        if let Ok(asked) = parked.asked.try_recv() {
            Self::note(&mut parked, asked);
        }
        let requests = parked
            .awaiting
            .iter()
            .map(|(key, asked)| (key.clone(), asked.request.clone()))
            .collect();
        let id = uuid::Uuid::new_v4().simple().to_string();
        let options = SealOptions::new()
            .associated_data(parked.bind.as_bytes())
            .ttl(self.limit);
        let state = self.codec.seal_with(id.as_bytes(), &options);
        parked.since = Instant::now();
        let mut all = lock(&self.parked);
        // Calls whose client did not come back within the limit are given up (cancelled).
        let limit = self.limit;
        all.retain(|_, other| other.since.elapsed() < limit);
        all.insert(id, parked);
        InputRequiredResult::new(Some(requests), Some(state))
    }
}
