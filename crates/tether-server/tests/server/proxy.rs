//! `/mcp-proxy/{uid}`: a real MCP session through the proxy with the driver's runtime, token
//! checks, header allowlists, and streaming.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tether_config::Secrets;
use tether_graphql::{ManagedMcpClientConfig, TransportKind};
use uuid::Uuid;

use crate::config::raw_graphql;
use tether_server::rate::RateSettings;

use crate::support::{
    ClockedFixture, Fixture, STEP, Upstream, add, admin, call, launch, ready_tools, sentinel,
};

/// Adds a URL installation for `url` whose `Authorization` header carries `token` as the
/// server-held secret UPSTREAM_TOKEN; returns the uid.
pub(crate) async fn add_url(fixture: &Fixture, name: &str, url: &str, token: &str) -> Uuid {
    add_url_to(&fixture.data(), name, url, token).await
}

/// [`add_url`] on the data directory `data`.
pub(crate) async fn add_url_to(data: &Path, name: &str, url: &str, token: &str) -> Uuid {
    let spec = format!(
        r#"{{"url": "{url}", "headers": {{"Authorization": "Bearer {{{{UPSTREAM_TOKEN}}}}"}}}}"#
    );
    add(
        data,
        name,
        &spec,
        &["UPSTREAM_TOKEN=env:UPSTREAM_SECRET"],
        "default",
        &[("UPSTREAM_SECRET", token)],
    )
    .await
}

pub(crate) fn token_of(config: &ManagedMcpClientConfig) -> String {
    config
        .proxy_token
        .as_ref()
        .expect("the URL config has a proxy token")
        .expose()
        .to_owned()
}

/// Sends `method` to the proxy URL of `uid` with an optional bearer token.
pub(crate) async fn proxy_request(
    base: &str,
    uid: &str,
    method: Method,
    token: Option<&str>,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .request(method, format!("{base}/mcp-proxy/{uid}"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("proxy request")
}

async fn text(response: reqwest::Response) -> String {
    response.text().await.expect("body")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_installation_is_reached_through_the_proxy_without_its_credentials() {
    let fixture = Fixture::start(&[]).await;
    let upstream_token = sentinel("upstream-token");
    let upstream = Upstream::start(&upstream_token).await;
    let uid = add_url(&fixture, "remote", &upstream.url, &upstream_token).await;

    let config = fixture.mint(uid).await;
    let token = token_of(&config);
    let proxy_url = format!("{}/mcp-proxy/{uid}", fixture.server.base);
    assert_eq!(config.transport_kind, TransportKind::Url);
    assert_eq!(
        config.proxy_url.as_ref().map(reqwest::Url::as_str),
        Some(proxy_url.as_str())
    );
    assert_eq!(token.len(), 43, "256 bits, base64url");
    let header = config
        .authorization_header
        .as_ref()
        .expect("the URL config has an authorization header");
    assert_eq!(header.name, "Authorization");
    assert_eq!(header.value.expose(), format!("Bearer {token}"));
    let expires_at = config.expires_at.expect("the URL config has an expiry");
    let lifetime = expires_at - time::OffsetDateTime::now_utc();
    assert!(
        lifetime > time::Duration::minutes(59) && lifetime <= time::Duration::hours(1),
        "{lifetime}"
    );
    let returned: Value =
        serde_json::from_str(config.mcp_config_json.expose()).expect("mcpConfigJson is JSON");
    assert_eq!(
        returned,
        json!({"mcpServers": {"remote": {
            "url": proxy_url,
            "headers": {"Authorization": format!("Bearer {token}")},
            "type": "http",
        }}})
    );

    // The same request raw: nothing of the upstream in the whole response.
    let raw = text(
        raw_graphql(
            &fixture.server.graphql_url(),
            Some(&format!("Bearer {}", fixture.api_key)),
            &json!({
                "query": "mutation { createManagedMcpClientConfig(input: {uid: \"UID\"}) { ... on CreateManagedMcpClientConfigOutput { transportKind mcpConfigJson proxyUrl proxyToken authorizationHeaderName authorizationHeaderValue expiresAt } } }".replace("UID", &uid.to_string()),
            }),
        )
        .await,
    )
    .await;
    let upstream_port = upstream
        .url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/mcp");
    assert!(raw.contains("proxyToken"), "{raw}");
    for leak in [
        upstream_token.as_str(),
        upstream.url.as_str(),
        upstream_port,
    ] {
        assert!(!raw.contains(leak), "the response holds {leak:?}: {raw}");
        assert!(!config.mcp_config_json.expose().contains(leak));
    }

    // The client renders the returned config and runs an MCP session through the proxy.
    let runtime = launch(config.mcp_config_json.expose(), &Secrets::new()).await;
    assert_eq!(ready_tools(&runtime), ["add", "echo", "env_check"]);
    let echoed = call(
        &runtime,
        "remote",
        "echo",
        json!({"text": "through the proxy"}),
    )
    .await;
    assert!(echoed.contains("through the proxy"), "{echoed}");
    let sum = call(&runtime, "remote", "add", json!({"a": 2, "b": 40})).await;
    assert!(sum.contains("42"), "{sum}");
    runtime.shutdown().await;

    let logs = fixture.server.logs();
    assert!(
        logs.contains("proxy: upstream answered"),
        "debug logs were captured"
    );
    for secret in [
        upstream_token.as_str(),
        token.as_str(),
        fixture.api_key.as_str(),
    ] {
        assert!(!logs.contains(secret), "the server logged a secret");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_refuses_missing_wrong_foreign_and_inactive() {
    let fixture = Fixture::start(&[]).await;
    let base = fixture.server.base.clone();
    let upstream_token = sentinel("upstream-token");
    let upstream = Upstream::start(&upstream_token).await;
    let first = add_url(&fixture, "first", &upstream.url, &upstream_token).await;
    let second = add_url(&fixture, "second", &upstream.url, &upstream_token).await;
    let wrong_credentials = add_url(&fixture, "wrong", &upstream.url, "not-the-token").await;
    let unreachable = add_url(&fixture, "gone", "http://127.0.0.1:9/mcp", "x").await;
    let token = token_of(&fixture.mint(first).await);
    let (first, second) = (first.to_string(), second.to_string());

    let missing = proxy_request(&base, &first, Method::POST, None).await;
    assert_eq!(missing.status(), 401);
    assert!(text(missing).await.contains("missing proxy token"));
    for (uid, bad_token) in [
        (&first, "unknown-token"),
        (&second, token.as_str()),
        (&"not-a-uuid".to_owned(), token.as_str()),
    ] {
        let response = proxy_request(&base, uid, Method::POST, Some(bad_token)).await;
        assert_eq!(response.status(), 401, "{uid}");
        assert!(response.headers().contains_key("www-authenticate"));
        assert_eq!(text(response).await, "invalid proxy token\n");
    }
    let put = proxy_request(&base, &first, Method::PUT, Some(&token)).await;
    assert_eq!(put.status(), 405);

    // Upstream refusals and failures are the gateway's, and name nothing upstream.
    let refused = proxy_request(
        &base,
        &wrong_credentials.to_string(),
        Method::POST,
        Some(&token_of(&fixture.mint(wrong_credentials).await)),
    )
    .await;
    assert_eq!(refused.status(), 502);
    assert_eq!(refused.headers()["x-upstream-status"], "401");
    assert!(text(refused).await.contains("refused the proxied request"));
    let gone = proxy_request(
        &base,
        &unreachable.to_string(),
        Method::POST,
        Some(&token_of(&fixture.mint(unreachable).await)),
    )
    .await;
    assert_eq!(gone.status(), 502);
    let body = text(gone).await;
    assert!(
        body.contains("could not be reached") && !body.contains("127.0.0.1"),
        "{body}"
    );

    // The token works until the installation is deactivated.
    let ok = proxy_request(&base, &first, Method::POST, Some(&token)).await;
    assert_ne!(ok.status(), 401);
    assert_ne!(ok.status(), 502);
    admin(&fixture.data(), &["deactivate", &first], &[]).await;
    let inactive = proxy_request(&base, &first, Method::POST, Some(&token)).await;
    assert_eq!(inactive.status(), 403);
    assert!(text(inactive).await.contains("deactivated"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_token_is_accepted_until_its_lifetime_passes_then_refused_saying_so() {
    let ttl = Duration::from_secs(3600);
    let fixture = ClockedFixture::start(ttl, RateSettings::default()).await;
    let upstream_token = sentinel("upstream-token");
    let upstream = Upstream::start(&upstream_token).await;
    let uid = add_url_to(&fixture.data(), "short", &upstream.url, &upstream_token).await;
    let config = fixture.mint(uid).await;
    let lifetime = config.expires_at.expect("the URL config has an expiry")
        - tether_clock::Clock::now_utc(fixture.clock.as_ref());
    // The expiry is kept in whole milliseconds.
    let ttl_left = time::Duration::try_from(ttl).expect("an hour");
    assert!(
        ttl_left - time::Duration::milliseconds(1) < lifetime && lifetime <= ttl_left,
        "{lifetime}"
    );
    let ask = async || {
        proxy_request(
            &fixture.base,
            &uid.to_string(),
            Method::POST,
            Some(&token_of(&config)),
        )
        .await
    };
    // A millisecond before its expiry the token is still taken to the upstream.
    fixture.clock.advance(ttl - Duration::from_millis(1));
    let accepted = ask().await;
    assert_ne!(accepted.status(), 401, "{}", text(accepted).await);
    fixture.clock.advance(Duration::from_millis(1));
    let response = ask().await;
    assert_eq!(response.status(), 401);
    let body = text(response).await;
    assert!(body.contains("expired"), "{body}");
    // /metrics counted the mint, the forwarded request and the refusal.
    let metrics = reqwest::Client::new()
        .get(format!("{}/metrics", fixture.base))
        .bearer_auth(&fixture.api_key)
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("the metrics page");
    for line in [
        "tether_server_proxy_tokens_minted_total 1",
        "tether_server_proxy_tokens_expired_total 1",
        "tether_server_proxy_requests_total{outcome=\"forwarded\"} 1",
        "tether_server_proxy_requests_total{outcome=\"expired\"} 1",
        "tether_server_proxy_request_duration_seconds_count{outcome=\"forwarded\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
}

/// What the recording upstream saw: method and headers of each request.
type Seen = Arc<Mutex<Vec<(Method, HeaderMap)>>>;

/// A loopback HTTP server standing in for an MCP upstream: records each request and answers
/// with an event stream whose second event waits for `release`.
pub(crate) async fn recording_upstream(
    release: Arc<tokio::sync::Notify>,
) -> (String, Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let record = Arc::clone(&seen);
    let handler = move |method: Method, headers: HeaderMap| {
        let record = Arc::clone(&record);
        let release = Arc::clone(&release);
        async move {
            record
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((method, headers));
            let events = futures_util::stream::unfold(0, move |step| {
                let release = Arc::clone(&release);
                async move {
                    match step {
                        0 => Some((
                            Ok::<_, std::io::Error>(Bytes::from_static(b"data: first\n\n")),
                            1,
                        )),
                        1 => {
                            release.notified().await;
                            Some((Ok(Bytes::from_static(b"data: second\n\n")), 2))
                        }
                        _ => None,
                    }
                }
            });
            axum::response::Response::builder()
                .header("content-type", "text/event-stream")
                .header("mcp-session-id", "session-1")
                .header("x-upstream-internal", "must-not-reach-the-client")
                .header("set-cookie", "upstream=1")
                .body(Body::from_stream(events))
                .expect("building the event-stream response")
        }
    };
    let router = axum::Router::new().route("/mcp", axum::routing::any(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding the upstream");
    let address = listener.local_addr().expect("the upstream's address");
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (format!("http://{address}/mcp"), seen, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_forwards_allowlisted_headers_and_streams_without_buffering() {
    let fixture = Fixture::start(&[]).await;
    let release = Arc::new(tokio::sync::Notify::new());
    let (url, seen, upstream) = recording_upstream(Arc::clone(&release)).await;
    let upstream_secret = sentinel("upstream-secret");
    let uid = add_url(&fixture, "recorded", &url, &upstream_secret).await;
    let token = token_of(&fixture.mint(uid).await);
    let client = reqwest::Client::new();
    let proxy_url = format!("{}/mcp-proxy/{uid}", fixture.server.base);

    let mut response = client
        .post(&proxy_url)
        .bearer_auth(&token)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("Mcp-Session-Id", "session-1")
        .header("Mcp-Protocol-Version", "2025-06-18")
        .header("Last-Event-ID", "7")
        .header("Cookie", "client=1")
        .header("X-Forwarded-For", "10.0.0.1")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .expect("posting through the proxy");
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "text/event-stream");
    assert_eq!(headers["mcp-session-id"], "session-1");
    assert!(!headers.contains_key("x-upstream-internal") && !headers.contains_key("set-cookie"));
    // The first event arrives while the upstream still holds the second: nothing is buffered.
    let first = tokio::time::timeout(Duration::from_secs(10), response.chunk())
        .await
        .unwrap_or_else(|_| panic!("the first event did not arrive while the stream was open"))
        .expect("reading the first event");
    assert_eq!(first.as_deref(), Some(&b"data: first\n\n"[..]));
    release.notify_one();
    let rest = tokio::time::timeout(STEP, response.text())
        .await
        .unwrap_or_else(|_| panic!("the stream did not end"))
        .expect("reading the rest of the stream");
    assert_eq!(rest, "data: second\n\n");

    for method in [Method::GET, Method::DELETE] {
        release.notify_one();
        let response = client
            .request(method.clone(), &proxy_url)
            .bearer_auth(&token)
            .header("Mcp-Session-Id", "session-1")
            .send()
            .await
            .expect("opening the event stream through the proxy");
        assert_eq!(response.status(), 200, "{method}");
        release.notify_one();
        let _ = tokio::time::timeout(STEP, response.bytes()).await;
    }

    let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let methods: Vec<&Method> = seen.iter().map(|(method, _)| method).collect();
    assert_eq!(methods, [&Method::POST, &Method::GET, &Method::DELETE]);
    let (_, forwarded) = &seen[0];
    assert_eq!(
        forwarded["authorization"],
        format!("Bearer {upstream_secret}")
    );
    assert_eq!(forwarded["mcp-session-id"], "session-1");
    assert_eq!(forwarded["mcp-protocol-version"], "2025-06-18");
    assert_eq!(forwarded["last-event-id"], "7");
    assert_eq!(forwarded["content-type"], "application/json");
    assert_eq!(forwarded["accept"], "application/json, text/event-stream");
    assert!(!forwarded.contains_key("cookie") && !forwarded.contains_key("x-forwarded-for"));
    for (_, headers) in &seen {
        let all = format!("{headers:?}");
        assert!(
            !all.contains(&token),
            "the client's proxy token went upstream"
        );
    }
    upstream.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_an_open_event_stream_is_bounded() {
    let _heavy = crate::support::HEAVY.lock().await;
    let fixture = Fixture::start(&[]).await;
    let release = Arc::new(tokio::sync::Notify::new());
    let (url, _seen, upstream) = recording_upstream(Arc::clone(&release)).await;
    let uid = add_url(&fixture, "stream", &url, "secret").await;
    let token = token_of(&fixture.mint(uid).await);
    let mut stream = proxy_request(
        &fixture.server.base,
        &uid.to_string(),
        Method::GET,
        Some(&token),
    )
    .await;
    let first = tokio::time::timeout(Duration::from_secs(10), stream.chunk())
        .await
        .unwrap_or_else(|_| panic!("no first event"))
        .expect("reading the first event");
    assert!(first.is_some());
    // The upstream never ends the stream; SIGTERM still stops the server after the grace.
    let Fixture { server, dir, .. } = fixture;
    let started = std::time::Instant::now();
    let status = server.terminate().await;
    let took = started.elapsed();
    assert!(status.success(), "{status:?}");
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(9),
        "{took:?}"
    );
    drop(stream);
    drop(dir);
    upstream.abort();
}
