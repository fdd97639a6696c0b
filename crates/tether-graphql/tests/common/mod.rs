//! Shared helpers for the integration tests: a wiremock endpoint, fast client settings,
//! response fixtures and a responder that records arrival times.
#![allow(
    dead_code,
    reason = "each test binary includes this module and uses a subset of it"
)]
#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failed setup step should panic the test"
)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tether_graphql::{
    HttpClientSettings, HttpManagedMcpClient, ManagedMcpClient, ManagedMcpClientConfig,
    ManagedMcpError, RetryPolicy,
};
use uuid::Uuid;
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The path the tests serve GraphQL on.
pub const GRAPHQL_PATH: &str = "/graphql";

/// A fixed uid, so failures are easy to read.
pub fn uid(n: u128) -> Uuid {
    Uuid::from_u128(0x9b2f_1a64_3c1e_4d4b_8a49_0000_0000_0000 + n)
}

/// Settings against `server` with fast retries (1–5 ms backoff) and 3 attempts.
pub fn settings(server: &MockServer) -> HttpClientSettings {
    let endpoint = format!("{}{GRAPHQL_PATH}", server.uri()).parse().unwrap();
    HttpClientSettings {
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
            max_retry_after: Duration::from_secs(5),
        },
        timeout: Duration::from_secs(10),
        // One operation per uid: these tests route answers by the single operation's
        // variables. Batches are tested in `batch.rs`.
        batch_size: 1,
        ..HttpClientSettings::new(endpoint)
    }
}

/// A client with [`settings`].
pub fn client(server: &MockServer) -> HttpManagedMcpClient {
    HttpManagedMcpClient::new(settings(server)).unwrap()
}

/// `settings` allowing `max_attempts` attempts.
pub fn with_attempts(settings: HttpClientSettings, max_attempts: u32) -> HttpClientSettings {
    HttpClientSettings {
        retry: RetryPolicy {
            max_attempts,
            ..settings.retry
        },
        ..settings
    }
}

/// Resolves `uid(1)` with a client built from `settings`.
pub async fn resolve_one(
    settings: HttpClientSettings,
) -> Result<ManagedMcpClientConfig, ManagedMcpError> {
    HttpManagedMcpClient::new(settings)
        .unwrap()
        .create_managed_mcp_client_config(uid(1))
        .await
}

/// A 200 response whose `createManagedMcpClientConfig` is `result`.
pub fn graphql_result(result: Value) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .set_body_json(json!({ "data": { "createManagedMcpClientConfig": result } }))
}

/// A `CreateManagedMcpClientConfigOutput` for a command server.
pub fn command_output(mcp_config_json: &str) -> Value {
    json!({
        "__typename": "CreateManagedMcpClientConfigOutput",
        "transportKind": "COMMAND",
        "mcpConfigJson": mcp_config_json,
        "proxyUrl": null,
        "proxyToken": null,
        "authorizationHeaderName": null,
        "authorizationHeaderValue": null,
        "expiresAt": null,
    })
}

/// A `CreateManagedMcpClientConfigOutput` for a URL server behind the proxy.
pub fn url_output(mcp_config_json: &str, proxy_token: &str, header_value: &str) -> Value {
    json!({
        "__typename": "CreateManagedMcpClientConfigOutput",
        "transportKind": "URL",
        "mcpConfigJson": mcp_config_json,
        "proxyUrl": "https://proxy.tether.example/mcp/abc",
        "proxyToken": proxy_token,
        "authorizationHeaderName": "Authorization",
        "authorizationHeaderValue": header_value,
        "expiresAt": "2026-12-01T10:30:00+02:00",
    })
}

/// A `UserFacingError` whose `error` is of `typename`.
pub fn user_facing(typename: &str, message: &str) -> Value {
    json!({
        "__typename": "UserFacingError",
        "error": { "__typename": typename, "message": message },
    })
}

/// Mounts `responder` for every POST to [`GRAPHQL_PATH`].
pub async fn mount(server: &MockServer, responder: impl Respond + 'static) {
    Mock::given(method("POST"))
        .and(path(GRAPHQL_PATH))
        .respond_with(responder)
        .mount(server)
        .await;
}

/// Mounts `responder` for the requests that ask for `uid(n)`.
pub async fn route(server: &MockServer, n: u128, responder: impl Respond + 'static) {
    Mock::given(method("POST"))
        .and(body_partial_json(
            json!({ "variables": { "input": { "uid": uid(n).to_string() } } }),
        ))
        .respond_with(responder)
        .mount(server)
        .await;
}

/// How many requests `server` received.
pub async fn request_count(server: &MockServer) -> usize {
    server.received_requests().await.unwrap().len()
}

/// Answers with `responses` in turn (the last one repeats) and records when each request
/// arrived.
pub struct Sequence {
    responses: Vec<ResponseTemplate>,
    calls: AtomicUsize,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl Sequence {
    /// A sequence and a handle on its arrival times.
    pub fn new(responses: Vec<ResponseTemplate>) -> (Self, Arc<Mutex<Vec<Instant>>>) {
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let sequence = Self {
            responses,
            calls: AtomicUsize::new(0),
            arrivals: Arc::clone(&arrivals),
        };
        (sequence, arrivals)
    }
}

impl Respond for Sequence {
    fn respond(&self, _request: &Request) -> ResponseTemplate {
        self.arrivals.lock().unwrap().push(Instant::now());
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        self.responses[call.min(self.responses.len() - 1)].clone()
    }
}
