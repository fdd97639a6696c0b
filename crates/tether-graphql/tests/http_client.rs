//! The HTTP client against a wiremock endpoint: results, error mapping, retries, timeouts and
//! what goes on the wire.

#![allow(
    clippy::expect_used,
    reason = "test helpers outside #[test] fns say what they were doing when they fail"
)]

mod common;

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use tether_graphql::{
    DecodeReason, HttpClientSettings, HttpManagedMcpClient, ManagedMcpClient, ManagedMcpError,
    RetryPolicy, TransportErrorKind, TransportKind, UserFacingErrorKind,
};
use wiremock::{MockServer, ResponseTemplate};

use common::{
    Sequence, client, command_output, graphql_result, mount, request_count, resolve_one, settings,
    uid, url_output, user_facing, with_attempts,
};

/// The exact document the client sends (also validated against the SDL in
/// `operation_document.rs`).
const EXPECTED_DOCUMENT: &str = include_str!("data/create_managed_mcp_client_config.graphql");

async fn resolve_with(
    server: &MockServer,
    response: ResponseTemplate,
) -> Result<tether_graphql::ManagedMcpClientConfig, ManagedMcpError> {
    mount(server, response).await;
    resolve_one(settings(server)).await
}

/// A fresh endpoint answering `response`, and the error resolving `uid(1)` against it gives.
async fn failure_for(response: ResponseTemplate) -> (MockServer, ManagedMcpError) {
    let server = MockServer::start().await;
    let error = resolve_with(&server, response)
        .await
        .expect_err("the resolution should fail");
    (server, error)
}

#[tokio::test]
async fn command_config_is_returned() {
    let server = MockServer::start().await;
    let json = r#"{"mcpServers":{"GitHub MCP":{"command":"npx","args":["-y","gh-mcp"]}}}"#;
    let config = resolve_with(&server, graphql_result(command_output(json)))
        .await
        .unwrap();

    assert_eq!(config.uid, uid(1));
    assert_eq!(config.transport_kind, TransportKind::Command);
    assert_eq!(config.mcp_config_json.expose(), json);
    assert!(config.proxy_url.is_none());
    assert!(config.proxy_token.is_none());
    assert!(config.authorization_header.is_none());
    assert!(config.expires_at.is_none());
}

#[tokio::test]
async fn url_config_carries_proxy_fields_and_expiry() {
    let server = MockServer::start().await;
    let json = r#"{"mcpServers":{"Linear":{"url":"https://proxy.tether.example/mcp/abc"}}}"#;
    let config = resolve_with(
        &server,
        graphql_result(url_output(json, "proxy-token-1", "Bearer minted-1")),
    )
    .await
    .unwrap();

    assert_eq!(config.transport_kind, TransportKind::Url);
    assert_eq!(config.mcp_config_json.expose(), json);
    assert_eq!(
        config.proxy_url.as_ref().map(|url| url.as_str()),
        Some("https://proxy.tether.example/mcp/abc")
    );
    assert_eq!(
        config.proxy_token.as_ref().map(|token| token.expose()),
        Some("proxy-token-1")
    );
    let header = config.authorization_header.unwrap();
    assert_eq!(header.name, "Authorization");
    assert_eq!(header.value.expose(), "Bearer minted-1");
    let expires_at = config.expires_at.unwrap();
    assert_eq!(expires_at.unix_timestamp(), 1_796_113_800);
    assert_eq!(expires_at.offset().whole_hours(), 2);
}

#[tokio::test]
async fn each_user_facing_error_member_maps_to_user_facing() {
    let cases = [
        ("GenericUserFacingError", UserFacingErrorKind::Generic),
        ("ManagedMcpNotFoundError", UserFacingErrorKind::NotFound),
        ("ManagedMcpInactiveError", UserFacingErrorKind::Inactive),
        // A member added to the interface later still yields its message.
        ("ManagedMcpQuotaError", UserFacingErrorKind::Unrecognised),
    ];
    for (typename, expected_kind) in cases {
        let server = MockServer::start().await;
        let message = format!("{typename}: ask your admin");
        let error = resolve_with(&server, graphql_result(user_facing(typename, &message)))
            .await
            .unwrap_err();

        let ManagedMcpError::UserFacing {
            uid: error_uid,
            kind,
            message: error_message,
            attempts,
        } = &error
        else {
            panic!("{typename}: expected UserFacing, got {error:?}");
        };
        assert_eq!(
            (*error_uid, *kind, error_message.as_str(), *attempts),
            (uid(1), expected_kind, message.as_str(), 1)
        );
        assert_eq!(
            error.to_string(),
            format!("failed to resolve managed MCP server {}: {message}", uid(1))
        );
        assert_eq!(
            request_count(&server).await,
            1,
            "{typename} must not be retried"
        );
    }
}

#[tokio::test]
async fn unknown_union_member_is_an_explicit_error() {
    let (server, error) = failure_for(graphql_result(
        json!({ "__typename": "ManagedMcpPendingApproval", "since": "now" }),
    ))
    .await;

    assert!(
        matches!(&error, ManagedMcpError::UnknownResult { uid: u, typename, attempts: 1 }
            if *u == uid(1) && typename == "ManagedMcpPendingApproval"),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("unrecognised result type `ManagedMcpPendingApproval`"));
    assert!(message.contains("upgrade tether"));
    assert!(!message.contains("not found"), "{message}");
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn top_level_errors_map_to_graphql_and_are_not_retried() {
    let server = MockServer::start().await;
    let body = json!({
        "data": null,
        "errors": [
            { "message": "Cannot query field \"proxyTokn\"", "locations": [{ "line": 1, "column": 2 }] },
            { "message": "internal error" },
        ],
    });
    let error = resolve_with(&server, ResponseTemplate::new(200).set_body_json(body))
        .await
        .unwrap_err();

    let ManagedMcpError::GraphQl {
        uid: u,
        messages,
        attempts,
    } = &error
    else {
        panic!("expected GraphQl, got {error:?}");
    };
    assert_eq!(*u, uid(1));
    assert_eq!(
        messages,
        &["Cannot query field \"proxyTokn\"", "internal error"]
    );
    assert_eq!(*attempts, 1);
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn service_unavailable_is_retried_once_then_succeeds() {
    let server = MockServer::start().await;
    let (sequence, _) = Sequence::new(vec![
        ResponseTemplate::new(503),
        graphql_result(command_output("{}")),
    ]);
    mount(&server, sequence).await;

    let config = resolve_one(settings(&server)).await.unwrap();
    assert_eq!(config.mcp_config_json.expose(), "{}");
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn each_transient_status_is_retried() {
    for status in [429, 502, 503, 504] {
        let server = MockServer::start().await;
        let (sequence, _) = Sequence::new(vec![
            ResponseTemplate::new(status),
            graphql_result(command_output("{}")),
        ]);
        mount(&server, sequence).await;
        let result = resolve_one(settings(&server)).await;
        assert!(result.is_ok(), "{status}: {result:?}");
        assert_eq!(request_count(&server).await, 2, "{status}");
    }
}

#[tokio::test]
async fn forbidden_is_not_retried() {
    let (server, error) =
        failure_for(ResponseTemplate::new(403).set_body_string("{\"error\":\"invalid API key\"}"))
            .await;

    assert!(
        matches!(&error, ManagedMcpError::Http { status: 403, attempts: 1, body_excerpt, .. }
            if body_excerpt == "{\"error\":\"invalid API key\"}"),
        "{error:?}"
    );
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn other_client_and_server_errors_are_not_retried() {
    for status in [400, 401, 404, 500, 501] {
        let (server, error) = failure_for(ResponseTemplate::new(status)).await;
        assert!(
            matches!(&error, ManagedMcpError::Http { status: s, attempts: 1, .. } if *s == status),
            "{error:?}"
        );
        assert_eq!(request_count(&server).await, 1, "{status}");
    }
}

#[tokio::test]
async fn retry_budget_is_exactly_max_attempts() {
    let server = MockServer::start().await;
    mount(
        &server,
        ResponseTemplate::new(503).set_body_string("overloaded"),
    )
    .await;
    let error = resolve_one(with_attempts(settings(&server), 4))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            ManagedMcpError::Http {
                status: 503,
                attempts: 4,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        format!(
            "managed MCP server {}: the managed MCP endpoint answered HTTP 503 (after 4 attempts): overloaded",
            uid(1)
        )
    );
    assert_eq!(request_count(&server).await, 4);
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let server = MockServer::start().await;
    let (sequence, arrivals) = Sequence::new(vec![
        ResponseTemplate::new(429).insert_header("Retry-After", "1"),
        graphql_result(command_output("{}")),
    ]);
    mount(&server, sequence).await;

    resolve_one(settings(&server)).await.unwrap();
    let arrivals = arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 2);
    let gap = arrivals[1] - arrivals[0];
    // The backoff alone would be at most 5 ms here.
    assert!(
        gap >= Duration::from_millis(950),
        "second request after {gap:?}"
    );
}

#[tokio::test]
async fn slow_response_is_a_retried_timeout() {
    let server = MockServer::start().await;
    mount(
        &server,
        graphql_result(command_output("{}")).set_delay(Duration::from_secs(3)),
    )
    .await;
    let error = resolve_one(HttpClientSettings {
        timeout: Duration::from_millis(200),
        ..with_attempts(settings(&server), 2)
    })
    .await
    .unwrap_err();
    assert!(
        matches!(
            &error,
            ManagedMcpError::Transport {
                kind: TransportErrorKind::Timeout,
                attempts: 2,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("did not answer in time (after 2 attempts)")
    );
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn refused_connection_is_a_retried_connect_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let error = resolve_one(HttpClientSettings {
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
            max_retry_after: Duration::from_secs(1),
        },
        ..HttpClientSettings::new(format!("http://127.0.0.1:{port}/graphql").parse().unwrap())
    })
    .await
    .unwrap_err();
    assert!(
        matches!(
            &error,
            ManagedMcpError::Transport {
                kind: TransportErrorKind::Connect,
                attempts: 3,
                ..
            }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn tls_handshake_failure_is_not_retried() {
    // A plain-HTTP server behind an https:// URL: the handshake cannot succeed.
    let server = MockServer::start().await;
    mount(&server, graphql_result(command_output("{}"))).await;
    let endpoint = format!("https://{}/graphql", server.address());
    let error = resolve_one(HttpClientSettings {
        endpoint: endpoint.parse().unwrap(),
        ..settings(&server)
    })
    .await
    .unwrap_err();
    assert!(
        matches!(
            &error,
            ManagedMcpError::Transport {
                kind: TransportErrorKind::Tls,
                attempts: 1,
                ..
            }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn malformed_json_is_a_decode_error() {
    let (_server, error) = failure_for(
        ResponseTemplate::new(200)
            .set_body_string("{\"data\": {\"createManagedMcpClientConfig\": "),
    )
    .await;
    assert!(
        matches!(
            &error,
            ManagedMcpError::Decode {
                reason: DecodeReason::Truncated,
                attempts: 1,
                ..
            }
        ),
        "{error:?}"
    );

    let (server, error) =
        failure_for(ResponseTemplate::new(200).set_body_string("<html>oops</html>")).await;
    assert!(
        matches!(
            &error,
            ManagedMcpError::Decode {
                reason: DecodeReason::Syntax { line: 1, column: 1 },
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn mismatched_shape_is_a_decode_error() {
    let shapes = [
        json!({ "__typename": "CreateManagedMcpClientConfigOutput", "transportKind": "CARRIER_PIGEON", "mcpConfigJson": "{}" }),
        json!({ "__typename": "CreateManagedMcpClientConfigOutput", "transportKind": "URL", "mcpConfigJson": 42 }),
        json!({ "__typename": "CreateManagedMcpClientConfigOutput", "transportKind": "URL" }),
        json!({ "__typename": "UserFacingError", "error": { "__typename": "GenericUserFacingError" } }),
        json!([1, 2, 3]),
    ];
    for shape in shapes {
        let (_server, error) = failure_for(graphql_result(shape.clone())).await;
        assert!(
            matches!(
                &error,
                ManagedMcpError::Decode {
                    reason: DecodeReason::Shape { .. },
                    attempts: 1,
                    ..
                }
            ),
            "{shape}: {error:?}"
        );
    }
}

#[tokio::test]
async fn invalid_field_values_are_decode_errors() {
    let mut bad_time = url_output("{}", "t", "v");
    bad_time["expiresAt"] = json!("next tuesday");
    let mut unpaired = url_output("{}", "t", "v");
    unpaired["authorizationHeaderValue"] = json!(null);
    let mut bad_url = url_output("{}", "t", "v");
    bad_url["proxyUrl"] = json!("not a url");
    let cases = [
        (
            graphql_result(bad_time),
            DecodeReason::InvalidTimestamp { field: "expiresAt" },
        ),
        (
            graphql_result(unpaired),
            DecodeReason::UnpairedAuthorizationHeader,
        ),
        (
            graphql_result(bad_url),
            DecodeReason::InvalidUrl { field: "proxyUrl" },
        ),
        (
            ResponseTemplate::new(200).set_body_json(json!({ "data": null })),
            DecodeReason::MissingData,
        ),
    ];
    for (response, expected) in cases {
        let (_server, error) = failure_for(response).await;
        assert!(
            matches!(&error, ManagedMcpError::Decode { reason, .. } if *reason == expected),
            "expected {expected:?}, got {error:?}"
        );
    }
}

#[tokio::test]
async fn request_carries_the_exact_operation_and_variables() {
    let server = MockServer::start().await;
    mount(&server, graphql_result(command_output("{}"))).await;
    client(&server)
        .create_managed_mcp_client_config(uid(7))
        .await
        .unwrap();

    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.method.as_str(), "POST");
    let body: serde_json::Value = request.body_json().unwrap();
    assert_eq!(
        body,
        json!({
            "query": EXPECTED_DOCUMENT,
            "variables": { "input": { "uid": uid(7).to_string() } },
            "operationName": "CreateManagedMcpClientConfig",
        })
    );
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .map(|value| value.to_str().unwrap().to_owned())
    };
    assert_eq!(header("content-type").as_deref(), Some("application/json"));
    assert_eq!(
        header("user-agent"),
        Some(format!("tether/{}", env!("CARGO_PKG_VERSION")))
    );
}

#[tokio::test]
async fn bearer_header_is_sent_only_when_configured() {
    let server = MockServer::start().await;
    mount(&server, graphql_result(command_output("{}"))).await;

    let with_key = HttpManagedMcpClient::new(HttpClientSettings {
        api_key: Some("test-api-key".to_owned().into()),
        ..settings(&server)
    })
    .unwrap();
    with_key
        .create_managed_mcp_client_config(uid(1))
        .await
        .unwrap();
    client(&server)
        .create_managed_mcp_client_config(uid(2))
        .await
        .unwrap();

    let requests = server.received_requests().await.unwrap();
    let authorization: Vec<Option<&str>> = requests
        .iter()
        .map(|request| {
            request
                .headers
                .get("authorization")
                .map(|value| value.to_str().unwrap())
        })
        .collect();
    assert_eq!(authorization, [Some("Bearer test-api-key"), None]);
}

#[tokio::test]
async fn http_error_excerpt_is_truncated_and_masks_the_api_key() {
    let server = MockServer::start().await;
    let body = format!("rejected key test-api-key: {}", "x".repeat(1000));
    mount(&server, ResponseTemplate::new(500).set_body_string(body)).await;
    let error = resolve_one(HttpClientSettings {
        api_key: Some("test-api-key".to_owned().into()),
        ..settings(&server)
    })
    .await
    .unwrap_err();
    let ManagedMcpError::Http { body_excerpt, .. } = &error else {
        panic!("expected Http, got {error:?}");
    };
    assert!(
        body_excerpt.starts_with(&format!("rejected key {}: xxx", tether_secret::MASK)),
        "{body_excerpt}"
    );
    assert_eq!(body_excerpt.chars().count(), 201);
    assert!(!format!("{error} {error:?}").contains("test-api-key"));
}

#[tokio::test]
async fn invalid_settings_are_config_errors() {
    let server = MockServer::start().await;
    let invalid = [
        HttpClientSettings {
            endpoint: "ftp://127.0.0.1/graphql".parse().unwrap(),
            ..settings(&server)
        },
        HttpClientSettings {
            endpoint: "http://user:break-secret@127.0.0.1/graphql"
                .parse()
                .unwrap(),
            ..settings(&server)
        },
        HttpClientSettings {
            retry: RetryPolicy {
                max_attempts: 0,
                ..RetryPolicy::default()
            },
            ..settings(&server)
        },
        HttpClientSettings {
            concurrency: 0,
            ..settings(&server)
        },
        HttpClientSettings {
            timeout: Duration::ZERO,
            ..settings(&server)
        },
        HttpClientSettings {
            api_key: Some("line\nbreak-secret".to_owned().into()),
            ..settings(&server)
        },
    ];
    for settings in invalid {
        let error = HttpManagedMcpClient::new(settings).unwrap_err();
        assert!(matches!(error, ManagedMcpError::Config { .. }), "{error:?}");
        assert_eq!(error.uid(), None);
        assert!(!format!("{error} {error:?}").contains("break-secret"));
    }
}

#[test]
fn debug_hides_endpoint_credentials_query_and_api_key() {
    let settings = HttpClientSettings {
        api_key: Some("debug-key-secret".to_owned().into()),
        ..HttpClientSettings::new(
            "https://tether.example/graphql?token=query-secret"
                .parse()
                .unwrap(),
        )
    };
    let debug = format!("{settings:?}");
    assert!(
        debug.contains("\"https://tether.example/graphql\""),
        "{debug}"
    );
    assert!(!debug.contains("secret"), "{debug}");
    let client = HttpManagedMcpClient::new(settings).unwrap();
    let debug = format!("{client:?}");
    assert!(
        debug.contains("\"https://tether.example/graphql\""),
        "{debug}"
    );
    assert!(!debug.contains("secret"), "{debug}");
}

#[test]
fn defaults_match_the_documented_policy() {
    let settings = HttpClientSettings::new("https://tether.example/graphql".parse().unwrap());
    assert_eq!(settings.connect_timeout, Duration::from_secs(5));
    assert_eq!(settings.timeout, Duration::from_secs(30));
    assert_eq!(settings.retry.max_attempts, 6);
    assert_eq!(settings.concurrency, 16);
    assert_eq!(
        settings.user_agent,
        format!("tether/{}", env!("CARGO_PKG_VERSION"))
    );
    assert!(settings.api_key.is_none());
}
