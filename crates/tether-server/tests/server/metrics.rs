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
        assert!(
            std::env::var_os(tether_env::EnvVars::CI).is_none(),
            "prometheus is not installed; .ci/run installs Debian's prometheus package"
        );
        eprintln!("NOTICE: skipped: prometheus is not installed (apt-get install prometheus)");
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
    assert_eq!(fixture.server.config_requests().await, RESOLUTIONS);

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
