//! Sentinel secrets placed in `mcpConfigJson`, `proxyToken`, `authorizationHeaderValue` and
//! the API key must appear in no error message, no `Debug` output and no log line (captured
//! at TRACE), on success and failure paths alike. Its own test binary, so its thread-local
//! subscriber sees every event.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::json;
use tether_graphql::{HttpClientSettings, HttpManagedMcpClient, ManagedMcpClient};
use tracing_subscriber::fmt::MakeWriter;
use wiremock::{MockServer, ResponseTemplate};

use common::{Sequence, graphql_result, route, settings, uid, url_output};

const CONFIG_SENTINEL: &str = "SENTINEL-mcp-config-4f1d";
const PROXY_TOKEN_SENTINEL: &str = "SENTINEL-proxy-token-8c2a";
const HEADER_SENTINEL: &str = "SENTINEL-header-value-17e9";
const API_KEY_SENTINEL: &str = "SENTINEL-api-key-b03c";
const SENTINELS: [&str; 4] = [
    CONFIG_SENTINEL,
    PROXY_TOKEN_SENTINEL,
    HEADER_SENTINEL,
    API_KEY_SENTINEL,
];

/// A `MakeWriter` into a shared buffer.
#[derive(Clone, Default)]
struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl Write for CapturedLogs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("log buffer poisoned"))?
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for CapturedLogs {
    type Writer = Self;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn secret_output() -> serde_json::Value {
    let mcp_config_json = format!(
        r#"{{"mcpServers":{{"a":{{"url":"https://p.example","headers":{{"X-Key":"{CONFIG_SENTINEL}"}}}}}}}}"#
    );
    url_output(&mcp_config_json, PROXY_TOKEN_SENTINEL, HEADER_SENTINEL)
}

#[tokio::test]
async fn no_secret_reaches_errors_debug_or_logs() {
    let logs = CapturedLogs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = MockServer::start().await;
    // 1: success after a retried 503 whose body echoes the API key.
    let (flaky, _) = Sequence::new(vec![
        ResponseTemplate::new(503).set_body_string(format!("busy {API_KEY_SENTINEL}")),
        graphql_result(secret_output()),
    ]);
    route(&server, 1, flaky).await;
    // 2: a shape mismatch (unknown enum value) in a body full of secrets.
    let mut bad_kind = secret_output();
    bad_kind["transportKind"] = json!(CONFIG_SENTINEL);
    route(&server, 2, graphql_result(bad_kind)).await;
    // 3: malformed JSON right after a secret.
    route(
        &server,
        3,
        ResponseTemplate::new(200).set_body_string(format!(
            r#"{{"data":{{"createManagedMcpClientConfig":{{"mcpConfigJson":"{CONFIG_SENTINEL}" oops"#
        )),
    )
    .await;
    // 4: 403 echoing the API key.
    route(
        &server,
        4,
        ResponseTemplate::new(403).set_body_string(format!("bad key {API_KEY_SENTINEL}")),
    )
    .await;
    // 5: GraphQL errors echoing the API key.
    route(
        &server,
        5,
        ResponseTemplate::new(200).set_body_json(json!({
            "data": null,
            "errors": [{ "message": format!("token {API_KEY_SENTINEL} rejected") }],
        })),
    )
    .await;
    // 6: a user-facing error echoing the API key.
    route(
        &server,
        6,
        graphql_result(json!({
            "__typename": "UserFacingError",
            "error": { "__typename": "GenericUserFacingError", "message": format!("key {API_KEY_SENTINEL}") },
        })),
    )
    .await;
    // 7: a wrong timestamp next to secrets.
    let mut bad_time = secret_output();
    bad_time["expiresAt"] = json!(PROXY_TOKEN_SENTINEL);
    route(&server, 7, graphql_result(bad_time)).await;

    let settings = HttpClientSettings {
        api_key: Some(API_KEY_SENTINEL.to_owned().into()),
        ..settings(&server)
    };
    let mut observed = format!("{settings:?}\n");
    let client = HttpManagedMcpClient::new(settings).unwrap();
    observed.push_str(&format!("{client:?}\n"));

    let uids: Vec<_> = (1..=7).map(uid).collect();
    let results = client.resolve_many(&uids).await;

    let config = results[0].as_ref().unwrap();
    // The secrets did arrive, so their absence below means something.
    assert!(config.mcp_config_json.expose().contains(CONFIG_SENTINEL));
    assert_eq!(
        config.proxy_token.as_ref().map(|token| token.expose()),
        Some(PROXY_TOKEN_SENTINEL)
    );
    observed.push_str(&format!("{config:?}\n{config:#?}\n"));
    for error in results.iter().skip(1) {
        let error = error.as_ref().unwrap_err();
        observed.push_str(&format!("{error}\n{error:?}\n"));
    }
    assert_eq!(results.iter().filter(|result| result.is_err()).count(), 6);

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(!logs.is_empty(), "no log line was captured");
    assert!(
        logs.contains(&uid(1).to_string()),
        "log lines must name the uid:\n{logs}"
    );
    assert!(
        logs.contains("retrying"),
        "the retry must be logged:\n{logs}"
    );
    for sentinel in SENTINELS {
        assert!(
            !observed.contains(sentinel),
            "{sentinel} leaked into:\n{observed}"
        );
        assert!(
            !logs.contains(sentinel),
            "{sentinel} leaked into the logs:\n{logs}"
        );
    }
}
