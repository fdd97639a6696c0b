//! The request path every MCP request of a client connection takes, in order:
//!
//! 1. **receive**: the request's telemetry span opens, continuing the client's trace
//!    ([`GatewayHandler::receive`], `telemetry::request`); a request that counts against the call
//!    timeout notes when it arrived ([`mark_received`]).
//! 2. **rounds**: a 2026-07-28 client's request a server may ask something during runs detached,
//!    in rounds (`in_rounds!`, `rounds.rs`); other clients' run at once.
//! 3. **admit → route → forward → shape**: the method's handler (`tools.rs`, `prompts.rs`,
//!    `resources.rs`): the caller's policy (withheld tools, secret scan), the route (namespaced
//!    name, URI, a server still starting), the forward to the server, the answer masked, scanned,
//!    cut to the output budget. `tools/call` has each as a method of its own
//!    (`gateway_tool`, `admit_call`, `forward_call` — where the task layer, `tasks.rs`, sits
//!    — and `shape_call`).
//! 4. **record**: the audit record (by the handler, which knows the outcome), then the span's
//!    outcome and the request metrics ([`InFlight::answer`], `telemetry::traced`).
//!
//! A layer every request needs is added here, once: in [`GatewayHandler::receive`] or
//! [`InFlight::answer`].

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{
    CallToolResponse, GetPromptResponse, InputRequiredResult, InputResponses, ReadResourceResponse,
    ResultType,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use super::GatewayHandler;
use crate::rounds::Round;
use crate::telemetry::Answer;

/// The owner of the results kept for 2026-07-28 clients, and their audit records' session:
/// with the bearer token's number after it over HTTP when the gateway accepts several tokens
/// (each a caller of its own).
const STATELESS_OWNER: &str = "2026-07-28";

/// Who a 2026-07-28 request is, for what is kept for it (cut results, tasks): the caller its
/// bearer token names (`tether_http::Caller`), else every such client alike.
pub(super) fn stateless_owner(context: &RequestContext<RoleServer>) -> Arc<str> {
    let caller = context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<tether_http::Caller>());
    match caller {
        Some(tether_http::Caller(number)) => Arc::from(format!("{STATELESS_OWNER}#{number}")),
        None => Arc::from(STATELESS_OWNER),
    }
}

/// Serves a request a server may ask its client something during: at once for a session's
/// client, in rounds (`rounds.rs`) for a 2026-07-28 one — the state it echoes and its answers
/// taken out of the request, which is bound to `$bind` (method and target).
macro_rules! in_rounds {
    ($handler:ident, $now:ident, $request:ident, $context:ident, $bind:expr) => {{
        if !modern(&$context) {
            return $handler.$now($request, $context).await;
        }
        let mut $request = $request;
        let bind = $bind;
        let state = $request.request_state.take();
        let responses = $request.input_responses.take();
        $handler
            .in_rounds(
                bind,
                state,
                responses,
                &$context,
                |handler, context| async move {
                    handler
                        .$now($request, context)
                        .await
                        .map($crate::handler::pipeline::Completed::completed)
                },
            )
            .await
    }};
}

/// A result read back from a server has no `resultType`; 2026-07-28 requires one.
pub(super) trait Completed {
    fn completed(self) -> Self;
}

macro_rules! completed {
    ($($response:ident),*) => {$(
        impl Completed for $response {
            fn completed(self) -> Self {
                match self {
                    $response::Complete(mut result) => {
                        result.result_type = Some(ResultType::COMPLETE);
                        result.into()
                    }
                    other => other,
                }
            }
        }
    )*};
}

completed!(CallToolResponse, GetPromptResponse, ReadResourceResponse);

/// A request on its path ([`GatewayHandler::receive`]): what the last stage records.
pub(super) struct InFlight {
    span: crate::telemetry::Request,
}

impl InFlight {
    /// The rest of the path: `handle` — the method's handler, in rounds where they apply — in
    /// the request's span; then the record of how it ended (the span's outcome, the metrics).
    pub(super) async fn answer<T: Answer>(
        self,
        handle: impl Future<Output = Result<T, ErrorData>>,
    ) -> Result<T, ErrorData> {
        crate::telemetry::traced(self.span, handle).await
    }
}

/// The path's stages on the handler: receive, and rounds for the three requests a server may ask
/// its client something during, served in full (a 2026-07-28 client's run detached by
/// `rounds.rs`).
impl GatewayHandler {
    /// The request path's first stage (module docs): the request received, its span open.
    /// Every traced MCP method starts here and ends in [`InFlight::answer`].
    pub(super) fn receive(
        &self,
        method: &'static str,
        target: Option<&str>,
        context: &RequestContext<RoleServer>,
    ) -> InFlight {
        // The name is labelled at the end, when the servers that were starting may have
        // joined: a name no server offers is recorded as `unknown`.
        let shared = Arc::clone(&self.shared);
        let knows = move |name: &str| shared.catalogue().knows(method, name);
        InFlight {
            span: crate::telemetry::request(method, target, context, Box::new(knows)),
        }
    }

    /// Runs a 2026-07-28 client's request in rounds (`rounds.rs`): its result, or what the
    /// client must answer first.
    pub(super) async fn in_rounds<T, F>(
        &self,
        bind: String,
        state: Option<String>,
        responses: Option<InputResponses>,
        context: &RequestContext<RoleServer>,
        work: impl FnOnce(Self, RequestContext<RoleServer>) -> F,
    ) -> Result<T, ErrorData>
    where
        T: From<InputRequiredResult> + Send + 'static,
        F: Future<Output = Result<T, ErrorData>> + Send + 'static,
    {
        // Results cut to the budget are kept for every 2026-07-28 client alike: they have no
        // session to keep them in.
        let mut handler = self.clone();
        handler.session = stateless_owner(context);
        let round = self
            .shared
            .rounds
            .run(bind, state, responses, context, |context| {
                work(handler, context)
            });
        Ok(match round.await? {
            Round::Done(result) => result,
            Round::Input(input) => input.into(),
        })
    }
}

/// When the gateway received a request ([`mark_received`]): one call timeout covers the whole
/// request, however many waits it has.
#[derive(Clone, Copy)]
struct Received(Instant);

/// Notes the arrival of a request in its context, unless noted already.
pub(super) fn mark_received(context: &mut RequestContext<RoleServer>) {
    if context.extensions.get::<Received>().is_none() {
        context.extensions.insert(Received(Instant::now()));
    }
}

/// When the request of `context` arrived: now, for one [`mark_received`] did not mark.
pub(super) fn received_at(context: &RequestContext<RoleServer>) -> Instant {
    context
        .extensions
        .get::<Received>()
        .map_or_else(Instant::now, |received| received.0)
}

/// Notes a request's arrival now, over any earlier note: a script's tool call is a request of
/// its own, with the call timeout from its start.
pub(super) fn mark_received_now(context: &mut RequestContext<RoleServer>) {
    context.extensions.insert(Received(Instant::now()));
}
