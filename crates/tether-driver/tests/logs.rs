//! A run with sentinel secrets, logged at TRACE into a buffer: the secrets reach the servers
//! and the managed config, and appear in no log line and no error.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

#[path = "driver/support.rs"]
#[allow(
    dead_code,
    unused_imports,
    reason = "shared with the driver tests; this binary uses part of it"
)]
mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tether_config::Secrets;
use tether_driver::{McpSpec, StartOptions};
use uuid::Uuid;

use support::{Answer, FakeManaged, json_str, test_server_bin};

const SENTINEL: &str = "sk-LOG-SENTINEL-7f3a";
const MANAGED_SENTINEL: &str = "mg-LOG-SENTINEL-91c2";

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_in_any_log_line_at_trace() {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let server = json_str(&test_server_bin().to_string_lossy());
    let inline = McpSpec::parse(&format!(
        r#"{{"talker":{{"command":{server},"args":["--stderr-env","API_TOKEN"],"env":{{"API_TOKEN":"{{{{TOKEN}}}}"}}}},
            "quitter":{{"command":{server},"args":["--stderr-env","API_TOKEN","--exit-early","2"],"env":{{"API_TOKEN":"{{{{TOKEN}}}}"}}}},
            "argv":{{"command":{server},"args":["--stderr-env","{{{{TOKEN}}}}"]}}}}"#
    ))
    .expect("parsing the test spec");
    let uid = Uuid::new_v4();
    let managed_json = format!(
        r#"{{"mcpServers":{{"managed":{{"command":{server},"args":["--stderr-env","PROXY"],"env":{{"PROXY":{}}}}}}}}}"#,
        json_str(MANAGED_SENTINEL)
    );
    let fake = Arc::new(FakeManaged::new(vec![(
        uid,
        Answer::Config {
            json: managed_json,
            expires_at: None,
        },
    )]));
    let secrets: Secrets = [("TOKEN", SENTINEL)].into_iter().collect();
    let session = support::session(vec![inline, McpSpec::Uuid(uid)], secrets, Some(fake))
        .await
        .expect("resolving the inline and managed specs");
    tracing::debug!(servers = ?session.servers(), resolved = ?session.resolved(), ?session, "rendered");
    let runtime = session
        .start(&StartOptions::default())
        .await
        .expect("starting the servers");
    let check = support::session_call(
        &session,
        &runtime,
        "talker",
        "env_check",
        json!({"name": "API_TOKEN"}),
    )
    .await;
    assert!(
        check.to_string().contains("\\\"set\\\":true"),
        "the secret did not reach the server: {check}"
    );
    let failed = session
        .call(
            &runtime,
            "talker",
            "no_such_tool",
            None,
            Duration::from_secs(30),
        )
        .await
        .err()
        .map(|e| format!("{e} {e:?}"))
        .unwrap_or_default();
    let reports = format!("{:?}", runtime.reports());
    // The stderr readers log what the servers wrote as it comes: wait (bounded) until the
    // lines of both servers that print API_TOKEN are in.
    let logged = || {
        String::from_utf8_lossy(
            &buffer
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .matches("stderr: API_TOKEN=********")
        .count()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while logged() < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    runtime.shutdown().await;

    let logs = String::from_utf8_lossy(
        &buffer
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    )
    .into_owned();
    assert!(
        logs.contains("talker"),
        "the log captured nothing useful:\n{logs}"
    );
    assert_eq!(
        logs.matches("stderr: API_TOKEN=********").count(),
        2,
        "the stderr lines of talker and quitter were not logged masked:\n{logs}"
    );
    // The session warns (naming the position, not the value) about a secret in argv.
    assert!(
        logs.contains("server=argv") && logs.contains("args[1] holds a secret"),
        "no warning about the secret in argv:\n{logs}"
    );
    for text in [&logs, &failed, &reports] {
        assert!(!text.contains(SENTINEL), "a run secret leaked:\n{text}");
        assert!(
            !text.contains(MANAGED_SENTINEL),
            "a managed value leaked:\n{text}"
        );
    }
}
