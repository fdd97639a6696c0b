//! `/metrics` in the Prometheus text format, scraped by Debian's real `prometheus`.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::support::{Fixture, STEP, add, json_str, resolutions, test_mcp_bin};

/// Resolutions the test makes.
const RESOLUTIONS: u64 = 7;

/// Whether Debian's `prometheus` is on PATH; CI installs it, so there its absence fails.
fn prometheus_installed() -> bool {
    let found = std::process::Command::new("prometheus")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found {
        tether_testkit::missing("prometheus", "apt-get install prometheus");
    }
    found
}

/// A free loopback port for prometheus's own web listener (it does not report a bound port 0).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// `prometheus` scraping `target` (HOST:PORT) every second, its data in `dir`.
fn start_prometheus(dir: &Path, target: &str, port: u16) -> Child {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: tether-server\n    metrics_path: /metrics\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .expect("writing prometheus.yml");
    Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("starting prometheus")
}

/// The value of an instant `query` through prometheus's HTTP API, once it has one.
async fn query(port: u16, query: &str) -> Option<f64> {
    let url = reqwest::Url::parse_with_params(
        &format!("http://127.0.0.1:{port}/api/v1/query"),
        [("query", query)],
    )
    .ok()?;
    let body: serde_json::Value = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    body["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// Prometheus scrapes the separate metrics listener, and the resolutions it reports are
/// the ones the test made (every outcome summed: found and not found alike).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_resolutions_the_test_made() {
    if !prometheus_installed() {
        return;
    }
    let mut fixture = Fixture::start(&["--metrics-listen", "127.0.0.1:0"]).await;
    let metrics_url = fixture.server.metrics_url().await;
    let bin = test_mcp_bin().to_string_lossy().into_owned();
    let spec = format!(r#"{{"command": {}}}"#, json_str(&bin));
    let uid = add(&fixture.data(), "scraped", &spec, &[], "default", &[]).await;
    let client = fixture.server.client(&fixture.api_key);
    for _ in 0..RESOLUTIONS - 1 {
        fixture.mint(uid).await;
    }
    use tether_graphql::ManagedMcpClient as _;
    let missing = client
        .create_managed_mcp_client_config(uuid::Uuid::new_v4())
        .await;
    assert!(missing.is_err(), "an unknown uid resolves to an error");

    // The separate listener serves the same page as the loopback /metrics.
    let page = reqwest::get(&metrics_url)
        .await
        .expect("GET the metrics listener")
        .text()
        .await
        .expect("the metrics page");
    assert_eq!(resolutions(&page), RESOLUTIONS, "{page}");
    assert_eq!(
        fixture.server.config_requests(&fixture.api_key).await,
        RESOLUTIONS
    );

    let target = metrics_url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .expect("http://HOST:PORT/metrics");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let _prometheus = start_prometheus(dir.path(), target, port);
    let deadline = Instant::now() + STEP;
    let mut seen = None;
    while Instant::now() < deadline {
        seen = query(port, "sum(tether_server_resolutions_total)").await;
        if seen == Some(RESOLUTIONS as f64) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        seen,
        Some(RESOLUTIONS as f64),
        "prometheus's sum(tether_server_resolutions_total) within {STEP:?}"
    );
    let not_found = query(
        port,
        "tether_server_resolutions_total{outcome=\"not_found\"}",
    )
    .await;
    assert_eq!(not_found, Some(1.0));
    let build = query(port, "tether_server_build_info").await;
    assert_eq!(build, Some(1.0));
    let up = query(port, "up{job=\"tether-server\"}").await;
    assert_eq!(up, Some(1.0));
}

/// With an OTLP endpoint, a GraphQL request is a span that continues the caller's
/// `traceparent` header, with its resolution as a child; the installation's secret, which
/// the resolution returns in its config, is in no exported byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolution_exports_its_spans_in_the_callers_trace() {
    const SECRET: &str = "server-otel-sentinel-9c2e71";
    const CLIENT_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const CLIENT_SPAN: &str = "b7ad6b7169203331";
    let receiver = tether_testkit::otlp::OtlpReceiver::start()
        .await
        .expect("starting the OTLP receiver");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let api_key = crate::support::api_key(&data, "default").await;
    let bin = test_mcp_bin().to_string_lossy().into_owned();
    let spec = format!(
        r#"{{"command": {}, "env": {{"TOKEN": "{{{{T}}}}"}}}}"#,
        json_str(&bin)
    );
    let uid = add(
        &data,
        "traced",
        &spec,
        &["T=env:T_VALUE"],
        "default",
        &[("T_VALUE", SECRET)],
    )
    .await;
    let server = crate::support::ServerProcess::spawn_with_env(
        "127.0.0.1:0",
        &data,
        &[],
        &[
            ("TETHER_SERVER_LOG", "trace"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint),
            ("OTEL_SERVICE_NAME", "tether-server-under-test"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
    .await;
    let answer = reqwest::Client::new()
        .post(server.graphql_url())
        .header("authorization", format!("Bearer {api_key}"))
        .header("traceparent", format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"))
        .json(&serde_json::json!({
            "query": format!("mutation {{ createManagedMcpClientConfig(input: {{uid: \"{uid}\"}}) {{ ... on CreateManagedMcpClientConfigOutput {{ mcpConfigJson }} }} }}"),
        }))
        .send()
        .await
        .expect("asking the server")
        .text()
        .await
        .expect("its answer");
    assert!(
        answer.contains(SECRET),
        "the resolution returns the secret: {answer}"
    );
    let deadline = Instant::now() + STEP;
    let (request, resolution) = loop {
        let spans = receiver.spans();
        let request = spans.iter().find(|s| s.name == "graphql").cloned();
        let resolution = spans
            .iter()
            .find(|s| s.name == "tether.resolution")
            .cloned();
        if let (Some(request), Some(resolution)) = (request, resolution) {
            break (request, resolution);
        }
        assert!(
            Instant::now() < deadline,
            "no spans within {STEP:?}: {spans:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(request.service_name, "tether-server-under-test");
    assert_eq!(
        (request.trace_id.as_str(), request.parent_span_id.as_str()),
        (CLIENT_TRACE, CLIENT_SPAN)
    );
    assert_eq!(
        request
            .attributes
            .get("http.response.status_code")
            .map(String::as_str),
        Some("200")
    );
    assert_eq!(resolution.trace_id, CLIENT_TRACE);
    assert_eq!(resolution.parent_span_id, request.span_id);
    assert_eq!(
        resolution
            .attributes
            .get("tether.outcome")
            .map(String::as_str),
        Some("config")
    );
    let raw = receiver.raw();
    assert!(
        !raw.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
        "the secret was exported"
    );
    // The spans are exported, not logged, even at the most verbose level.
    assert!(
        !server.logs().contains("tether.resolution"),
        "{}",
        server.logs()
    );
}

/// The main listener's `/metrics` needs an API key from a loopback peer too:
/// a reverse proxy on the same host, the setup the docs recommend, makes every peer a loopback
/// one, and the page was public through it. Without a key the scraper is told in one line
/// what to do; `--metrics-public` restores the open loopback page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_main_listeners_metrics_need_an_api_key_unless_metrics_public() {
    let get = |base: &str, key: Option<&str>| {
        let mut request = reqwest::Client::new().get(format!("{base}/metrics"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        async move {
            let response = request.send().await.expect("GET /metrics");
            let status = response.status().as_u16();
            (status, response.text().await.expect("a body"))
        }
    };
    let fixture = Fixture::start(&[]).await;
    let base = fixture.server.base.clone();
    let (status, body) = get(&base, None).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body.starts_with(
            "GET /metrics on the main listener needs an API key (Authorization: Bearer <api key>)"
        ) && body.contains("--metrics-listen ADDRESS")
            && body.contains("--metrics-public"),
        "{body}"
    );
    assert_eq!(body.lines().count(), 1, "{body}");
    let (status, body) = get(&base, Some("not-a-key")).await;
    assert_eq!((status, body.trim()), (401, "unknown API key"));
    let (status, body) = get(&base, Some(&fixture.api_key)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("tether_server_"), "{body}");

    let public = Fixture::start(&["--metrics-public"]).await;
    let (status, body) = get(&public.server.base, None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("tether_server_"), "{body}");
}
