//! `ManagedMcpClient::resolve_many`: order, isolation of failures, and the concurrency bound,
//! through the HTTP client and through a fake behind `Arc<dyn ManagedMcpClient>`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tether_graphql::{
    HttpClientSettings, HttpManagedMcpClient, ManagedMcpClient, ManagedMcpClientConfig,
    ManagedMcpError, SecretValue, TransportErrorKind, TransportKind, UserFacingErrorKind,
};
use uuid::Uuid;
use wiremock::{MockServer, ResponseTemplate};

use common::{command_output, graphql_result, route, settings, uid, user_facing};

#[tokio::test]
async fn one_failing_uid_does_not_hide_the_others_and_order_is_kept() {
    let server = MockServer::start().await;
    // Later uids answer sooner, so completion order differs from input order.
    for n in 1..=5 {
        let delay = Duration::from_millis(u64::try_from(60 - n * 10).unwrap());
        let response = match n {
            2 => graphql_result(user_facing("ManagedMcpNotFoundError", "no such server")),
            4 => ResponseTemplate::new(403),
            _ => graphql_result(command_output(&format!("{{\"n\":{n}}}"))),
        };
        route(&server, n, response.set_delay(delay)).await;
    }
    let client: Arc<dyn ManagedMcpClient> =
        Arc::new(HttpManagedMcpClient::new(settings(&server)).unwrap());

    let uids: Vec<Uuid> = (1..=5).map(uid).collect();
    let results = client.resolve_many(&uids).await;

    assert_eq!(results.len(), 5);
    for (n, result) in (1..=5).zip(&results) {
        match (n, result) {
            (2, Err(ManagedMcpError::UserFacing { uid: u, kind, .. })) => {
                assert_eq!((*u, *kind), (uid(2), UserFacingErrorKind::NotFound));
            }
            (4, Err(ManagedMcpError::Http { uid: u, status, .. })) => {
                assert_eq!((*u, *status), (uid(4), 403));
            }
            (1 | 3 | 5, Ok(config)) => {
                assert_eq!(config.uid, uid(n));
                assert_eq!(config.mcp_config_json.expose(), format!("{{\"n\":{n}}}"));
            }
            _ => panic!("uid {n}: unexpected {result:?}"),
        }
    }
}

#[tokio::test]
async fn an_empty_list_makes_no_request() {
    let server = MockServer::start().await;
    let client = HttpManagedMcpClient::new(settings(&server)).unwrap();
    assert!(client.resolve_many(&[]).await.is_empty());
    assert_eq!(common::request_count(&server).await, 0);
}

#[test]
fn http_client_reports_its_configured_concurrency() {
    let endpoint = "http://127.0.0.1:9/graphql".parse().unwrap();
    let default = HttpManagedMcpClient::new(HttpClientSettings::new(endpoint)).unwrap();
    assert_eq!(default.max_concurrency(), 16);
    let endpoint = "http://127.0.0.1:9/graphql".parse().unwrap();
    let bounded = HttpManagedMcpClient::new(HttpClientSettings {
        concurrency: 3,
        ..HttpClientSettings::new(endpoint)
    })
    .unwrap();
    // `resolve_many` (tested with the fake below) uses this bound.
    assert_eq!(bounded.max_concurrency(), 3);
}

/// Counts calls in flight and the most seen at once.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl InFlight {
    fn enter(&self) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }

    fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
}

/// A fake client: sleeps (longer for earlier uids), fails uid 3, tracks concurrency.
struct FakeClient {
    in_flight: InFlight,
    bound: usize,
}

#[async_trait::async_trait]
impl ManagedMcpClient for FakeClient {
    async fn create_managed_mcp_client_config(
        &self,
        uid: Uuid,
    ) -> Result<ManagedMcpClientConfig, ManagedMcpError> {
        self.in_flight.enter();
        let n = uid.as_u64_pair().1 & 0xff;
        tokio::time::sleep(Duration::from_millis(5 * (10 - n.min(10)))).await;
        self.in_flight.leave();
        if n == 3 {
            return Err(ManagedMcpError::Transport {
                uid,
                kind: TransportErrorKind::Timeout,
                attempts: 6,
            });
        }
        Ok(ManagedMcpClientConfig {
            uid,
            transport_kind: TransportKind::Command,
            mcp_config_json: SecretValue::new("{}".to_owned()),
            proxy_url: None,
            proxy_token: None,
            authorization_header: None,
            expires_at: None,
        })
    }

    fn max_concurrency(&self) -> usize {
        self.bound
    }
}

#[tokio::test]
async fn provided_resolve_many_is_bounded_ordered_and_isolates_failures() {
    let fake = Arc::new(FakeClient {
        in_flight: InFlight::default(),
        bound: 4,
    });
    let client: Arc<dyn ManagedMcpClient> = fake.clone();
    let uids: Vec<Uuid> = (0..10).map(Uuid::from_u128).collect();

    let results = client.resolve_many(&uids).await;

    let outcome: Vec<Result<Uuid, Uuid>> = results
        .iter()
        .map(|result| match result {
            Ok(config) => Ok(config.uid),
            Err(error) => Err(error.uid().unwrap()),
        })
        .collect();
    let expected: Vec<Result<Uuid, Uuid>> = uids
        .iter()
        .map(|&u| if u.as_u128() == 3 { Err(u) } else { Ok(u) })
        .collect();
    assert_eq!(outcome, expected);
    assert_eq!(
        fake.in_flight.max(),
        4,
        "calls must run concurrently, up to the bound"
    );
}

#[tokio::test]
async fn a_bound_of_zero_still_makes_progress() {
    let fake = FakeClient {
        in_flight: InFlight::default(),
        bound: 0,
    };
    let uids: Vec<Uuid> = (5..8).map(Uuid::from_u128).collect();
    let results = fake.resolve_many(&uids).await;
    assert_eq!(results.len(), 3);
    assert_eq!(fake.in_flight.max(), 1);
}
