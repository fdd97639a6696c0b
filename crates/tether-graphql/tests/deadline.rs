//! The resolution deadline (retries and backoff included) and the missing-API-key hint:
//! a hung endpoint must not hold a resolution past its deadline (it once held `tether test`
//! for 3 min 1 s), and a 401 without a configured key says how to configure one instead of only
//! relaying the server's text.

mod common;

use std::time::{Duration, Instant};

use common::{GRAPHQL_PATH, resolve_one, settings, uid};
use tether_graphql::{
    HttpClientSettings, HttpManagedMcpClient, ManagedMcpClient, ManagedMcpError, RetryPolicy,
};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Settings whose attempts each time out after 400 ms, with 6 attempts and a 1 s deadline.
fn hung_endpoint_settings(server: &MockServer) -> HttpClientSettings {
    HttpClientSettings {
        timeout: Duration::from_millis(400),
        retry: RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
            max_retry_after: Duration::from_secs(5),
        },
        deadline: Duration::from_secs(1),
        ..settings(server)
    }
}

async fn hung_endpoint() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(GRAPHQL_PATH))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(30)))
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn a_hung_endpoint_fails_at_the_deadline_not_after_every_attempt() {
    let server = hung_endpoint().await;
    let started = Instant::now();
    let error = resolve_one(hung_endpoint_settings(&server))
        .await
        .expect_err("a hung endpoint cannot resolve");
    let elapsed = started.elapsed();
    // Six attempts of 400 ms would take 2.4 s; the deadline stops it at 1 s.
    assert!(elapsed < Duration::from_millis(2000), "took {elapsed:?}");
    match &error {
        ManagedMcpError::Deadline {
            uid: u,
            deadline,
            attempts,
        } => {
            assert_eq!(*u, uid(1));
            assert_eq!(*deadline, Duration::from_secs(1));
            assert!((2..=3).contains(attempts), "attempts {attempts}");
        }
        other => panic!("expected a deadline error, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains("within the resolution deadline of 1 s"),
        "{message}"
    );
}

#[tokio::test]
async fn resolve_many_shares_one_deadline_across_waves() {
    let server = hung_endpoint().await;
    let client = HttpManagedMcpClient::new(HttpClientSettings {
        concurrency: 2,
        ..hung_endpoint_settings(&server)
    })
    .expect("building the client");
    let uids: Vec<_> = (0..6).map(uid).collect();
    let started = Instant::now();
    let results = client.resolve_many(&uids).await;
    let elapsed = started.elapsed();
    // Three waves of two would each take up to the deadline if it were per uid.
    assert!(elapsed < Duration::from_millis(2000), "took {elapsed:?}");
    assert_eq!(results.len(), 6);
    for result in results {
        assert!(
            matches!(result, Err(ManagedMcpError::Deadline { .. })),
            "{result:?}"
        );
    }
}

#[tokio::test]
async fn no_retry_starts_that_would_end_after_the_deadline() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(GRAPHQL_PATH))
        .respond_with(ResponseTemplate::new(503).insert_header("Retry-After", "5"))
        .mount(&server)
        .await;
    let started = Instant::now();
    let error = resolve_one(HttpClientSettings {
        deadline: Duration::from_secs(2),
        ..settings(&server)
    })
    .await
    .expect_err("503 cannot resolve");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    // The last real failure is reported, not a deadline: the server said 503.
    match error {
        ManagedMcpError::Http {
            status, attempts, ..
        } => {
            assert_eq!(status, 503);
            assert_eq!(attempts, 1);
        }
        other => panic!("expected the 503, got {other:?}"),
    }
    assert_eq!(server.received_requests().await.map(|r| r.len()), Some(1));
}

#[tokio::test]
async fn a_zero_deadline_is_a_configuration_error() {
    let server = MockServer::start().await;
    let error = HttpManagedMcpClient::new(HttpClientSettings {
        deadline: Duration::ZERO,
        ..settings(&server)
    })
    .expect_err("a zero deadline is refused");
    assert!(matches!(error, ManagedMcpError::Config { .. }), "{error:?}");
}

#[tokio::test]
async fn http_401_without_an_api_key_says_which_variables_to_set() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(GRAPHQL_PATH))
        .respond_with(ResponseTemplate::new(401).set_body_string("missing API key"))
        .mount(&server)
        .await;
    let error = resolve_one(settings(&server))
        .await
        .expect_err("401 cannot resolve");
    assert!(
        matches!(
            error,
            ManagedMcpError::Http {
                status: 401,
                missing_api_key: true,
                ..
            }
        ),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("no API key is configured: set TETHER_API_KEY or TETHER_API_KEY_FILE"),
        "{message}"
    );

    // With a key, a 401 is the server's refusal of that key: relayed as before.
    let with_key = HttpClientSettings {
        api_key: Some(tether_secret::SecretValue::new("wrong-key".to_owned())),
        ..settings(&server)
    };
    let error = resolve_one(with_key).await.expect_err("401 cannot resolve");
    assert!(
        matches!(
            error,
            ManagedMcpError::Http {
                status: 401,
                missing_api_key: false,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(!error.to_string().contains("wrong-key"));
    assert!(!error.to_string().contains("no API key is configured"));
}
