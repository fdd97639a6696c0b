//! Batched resolution: many uids in one operation with one aliased field each,
//! each alias mapped exactly as a single call; refusals split the batch; a failed request is
//! retried whole.
#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failed setup step should panic the test"
)]

mod common;

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Value, json};
use tether_graphql::{
    HttpClientSettings, HttpManagedMcpClient, ManagedMcpClient, ManagedMcpError,
    UserFacingErrorKind,
};
use uuid::Uuid;
use wiremock::{MockServer, Request, Respond, ResponseTemplate};

use common::{command_output, mount, request_count, settings, uid, url_output, user_facing};

const TOKEN_SENTINEL: &str = "pt-BATCH-SENTINEL";

/// The `createManagedMcpClientConfig` result a test server gives for a uid, or `None` for a
/// GraphQL error scoped to that uid's alias.
type Answer = fn(Uuid) -> Option<Value>;

/// Answers single operations and batches alike from `answer`; refuses batches larger than
/// `max_batch` (with `refusal`), and answers the first `fail_first` requests with 503.
struct Server {
    answer: Answer,
    max_batch: usize,
    refusal: ResponseTemplate,
    fail_first: usize,
    /// Per request: how many uids it asked for.
    seen: Mutex<Vec<usize>>,
}

impl Server {
    fn new(answer: Answer) -> Self {
        Self {
            answer,
            max_batch: usize::MAX,
            refusal: ResponseTemplate::new(400),
            fail_first: 0,
            seen: Mutex::new(Vec::new()),
        }
    }
}

impl Respond for &'static Server {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let variables = body["variables"].as_object().unwrap();
        let mut seen = self.seen.lock().unwrap();
        seen.push(variables.len());
        if seen.len() <= self.fail_first {
            return ResponseTemplate::new(503);
        }
        if let Some(input) = variables.get("input") {
            let uid: Uuid = input["uid"].as_str().unwrap().parse().unwrap();
            return match (self.answer)(uid) {
                Some(result) => ResponseTemplate::new(200)
                    .set_body_json(json!({"data": {"createManagedMcpClientConfig": result}})),
                None => ResponseTemplate::new(200).set_body_json(json!({
                    "data": null,
                    "errors": [{"message": "resolver failed", "path": ["createManagedMcpClientConfig"]}],
                })),
            };
        }
        if variables.len() > self.max_batch {
            return self.refusal.clone();
        }
        let query = body["query"].as_str().unwrap();
        let mut data = serde_json::Map::new();
        let mut errors = Vec::new();
        for index in 0..variables.len() {
            assert!(query.contains(&format!(
                "m{index}: createManagedMcpClientConfig(input: $i{index})"
            )));
            let uid: Uuid = variables[&format!("i{index}")]["uid"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            let alias = format!("m{index}");
            match (self.answer)(uid) {
                Some(result) => {
                    data.insert(alias, result);
                }
                None => {
                    data.insert(alias.clone(), Value::Null);
                    errors.push(json!({"message": "resolver failed", "path": [alias]}));
                }
            }
        }
        ResponseTemplate::new(200).set_body_json(json!({"data": data, "errors": errors}))
    }
}

fn leak(server: Server) -> &'static Server {
    Box::leak(Box::new(server))
}

async fn client_for(mock: &MockServer, batch_size: usize) -> HttpManagedMcpClient {
    HttpManagedMcpClient::new(HttpClientSettings {
        batch_size,
        ..settings(mock)
    })
    .unwrap()
}

/// uid(n) answers by `n % 4`: output with a secret, not found, unknown member, scoped error.
fn mixed(uid_value: Uuid) -> Option<Value> {
    let n = uid_value.as_u128() & 0xffff;
    match n % 4 {
        0 => Some(url_output(
            &format!("{{\"n\":{n}}}"),
            TOKEN_SENTINEL,
            &format!("Bearer {TOKEN_SENTINEL}"),
        )),
        1 => Some(user_facing("ManagedMcpNotFoundError", "no such server")),
        2 => Some(json!({"__typename": "ManagedMcpPendingApproval"})),
        _ => None,
    }
}

#[tokio::test]
async fn one_request_carries_every_uid_and_each_maps_as_a_single_call_would() {
    let mock = MockServer::start().await;
    let server = leak(Server::new(mixed));
    mount(&mock, server).await;
    let uids: Vec<Uuid> = (1..=8).map(uid).collect();
    let batched = client_for(&mock, 32).await.resolve_many(&uids).await;
    assert_eq!(*server.seen.lock().unwrap(), [8], "one request for 8 uids");

    // The same uids one call each: every outcome must read the same.
    let single = client_for(&mock, 1).await.resolve_many(&uids).await;
    assert_eq!(request_count(&mock).await, 1 + 8);
    for ((uid_value, batch), one) in uids.iter().zip(&batched).zip(&single) {
        match (batch, one) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.mcp_config_json.expose(), b.mcp_config_json.expose());
                assert_eq!(
                    a.proxy_token.as_ref().map(|t| t.expose()),
                    Some(TOKEN_SENTINEL)
                );
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{uid_value}"),
            _ => panic!("{uid_value}: batch {batch:?} vs single {one:?}"),
        }
    }
    assert!(matches!(
        &batched[0],
        Err(ManagedMcpError::UserFacing {
            kind: UserFacingErrorKind::NotFound,
            ..
        })
    ));
    assert!(matches!(
        &batched[1],
        Err(ManagedMcpError::UnknownResult { .. })
    ));
    assert!(matches!(&batched[2], Err(ManagedMcpError::GraphQl { .. })));
    assert!(batched[3].is_ok());
    // Nothing of the batch's secrets in any error or Debug print.
    for result in &batched {
        let shown = match result {
            Ok(config) => format!("{config:?}"),
            Err(error) => format!("{error} {error:?}"),
        };
        assert!(!shown.contains(TOKEN_SENTINEL), "{shown}");
    }
}

#[tokio::test]
async fn a_refused_batch_is_split_and_the_size_that_worked_is_kept() {
    for refusal in [
        ResponseTemplate::new(400),
        ResponseTemplate::new(413),
        ResponseTemplate::new(200)
            .set_body_json(json!({"errors": [{"message": "query is too complex"}]})),
    ] {
        let mock = MockServer::start().await;
        let server = leak(Server {
            max_batch: 4,
            refusal,
            ..Server::new(|_| Some(command_output("{}")))
        });
        mount(&mock, server).await;
        let client = client_for(&mock, 32).await;
        let uids: Vec<Uuid> = (1..=10).map(uid).collect();
        let results = client.resolve_many(&uids).await;
        assert!(results.iter().all(Result::is_ok));
        let seen = server.seen.lock().unwrap().clone();
        let answered: usize = seen.iter().filter(|n| **n <= 4).sum();
        assert_eq!(answered, 10, "every uid answered once: {seen:?}");
        // The next run goes straight to batches the server takes.
        let before = seen.len();
        let results = client.resolve_many(&uids).await;
        assert!(results.iter().all(Result::is_ok));
        let seen = server.seen.lock().unwrap().clone();
        assert!(seen[before..].iter().all(|n| *n <= 4), "{seen:?}");
        assert_eq!(seen[before..].iter().sum::<usize>(), 10, "{seen:?}");
    }
}

#[tokio::test]
async fn a_server_without_aliases_gets_single_operations_from_then_on() {
    let mock = MockServer::start().await;
    let server = leak(Server {
        max_batch: 1,
        ..Server::new(|_| Some(command_output("{}")))
    });
    mount(&mock, server).await;
    let client = client_for(&mock, 32).await;
    let uids: Vec<Uuid> = (1..=6).map(uid).collect();
    assert!(client.resolve_many(&uids).await.iter().all(Result::is_ok));
    let before = server.seen.lock().unwrap().len();
    assert!(client.resolve_many(&uids).await.iter().all(Result::is_ok));
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen[before..], [1, 1, 1, 1, 1, 1], "{seen:?}");
}

#[tokio::test]
async fn a_failed_request_is_retried_whole_and_each_uid_minted_once() {
    let mock = MockServer::start().await;
    let server = leak(Server {
        fail_first: 1,
        ..Server::new(|_| Some(command_output("{}")))
    });
    mount(&mock, server).await;
    let uids: Vec<Uuid> = (1..=5).map(uid).collect();
    let results = client_for(&mock, 32).await.resolve_many(&uids).await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(*server.seen.lock().unwrap(), [5, 5]);

    // A request that keeps failing fails every uid with the single call's error.
    let mock = MockServer::start().await;
    let server = leak(Server {
        fail_first: usize::MAX,
        ..Server::new(|_| Some(command_output("{}")))
    });
    mount(&mock, server).await;
    let results = client_for(&mock, 32).await.resolve_many(&uids).await;
    let statuses: HashMap<u16, usize> = results.iter().fold(HashMap::new(), |mut all, r| {
        if let Err(ManagedMcpError::Http {
            status, attempts, ..
        }) = r
        {
            assert_eq!(*attempts, 3);
            *all.entry(*status).or_default() += 1;
        }
        all
    });
    assert_eq!(statuses, HashMap::from([(503, 5)]));
    assert_eq!(
        server.seen.lock().unwrap().len(),
        3,
        "3 attempts of one batch"
    );
}
