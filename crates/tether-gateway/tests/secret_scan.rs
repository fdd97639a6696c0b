//! The scan for credential shapes (`--secret-scan`) on a real gateway in front of the test
//! server: a key a client puts in an argument reaches the server under `warn` (the default for
//! arguments) and is refused under `block`; the same key in a result (the test server's `echo`
//! sends its text back) is masked by default and replaced by an error under `block`; the audit
//! line names the rule, never the key.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

mod support;

use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use tether_driver::StartOptions;
use tether_gateway::secret_scan::{SecretScan, SecretScanPolicy};
use tether_gateway::{AuditLog, Gateway};
use tether_testkit::{ManualClock, test_server_bin};

/// Made up here, in the shape of an AWS access key id.
const KEY: &str = "AKIAQ3EXAMPLE7ZZ2WXY";

/// `echo {"text": "…KEY…"}` through a gateway scanning with `policy`: the text the client got
/// (or the error), whether it was one, and the audit line.
async fn echo_through(policy: SecretScanPolicy) -> (String, bool, Value) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let audit_path = dir.path().join("audit.jsonl");
    let program = test_server_bin().to_string_lossy().into_owned();
    let session = support::session_of("t", &program, ManualClock::new()).await;
    let mut options = support::gateway_options(StartOptions::default(), None);
    options.audit = Some(AuditLog::create(&audit_path).expect("the audit log"));
    options.secret_scan = policy;
    let gateway = Gateway::start(session, options);
    assert!(gateway.ready_within(Duration::from_secs(30)).await);
    let (client, serving) = support::serve_client(&gateway, ()).await;
    let arguments = json!({"text": format!("the key is {KEY}, keep it")});
    let result = client
        .call_tool(
            CallToolRequestParams::new("t__echo")
                .with_arguments(arguments.as_object().cloned().unwrap_or_default()),
        )
        .await
        .expect("an answer");
    let text = format!("{:?}", result.content);
    client.cancel().await.expect("closing the client");
    let _ = serving.await;
    gateway.shutdown().await;
    let audit = std::fs::read_to_string(&audit_path).expect("reading the audit log");
    assert!(!audit.contains(KEY), "the audit log holds the key: {audit}");
    // One line for the call: forwarded (`echo` on server `t`) or refused (`t__echo`).
    let lines: Vec<Value> = audit
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["target"] == "echo" || line["target"] == "t__echo")
        .collect();
    let [line] = lines.as_slice() else {
        panic!("not one audit line for the call: {audit}");
    };
    let line = line.clone();
    (text, result.is_error == Some(true), line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_key_in_an_argument_passes_and_the_same_key_in_the_result_is_masked() {
    let (text, error, audit) = echo_through(SecretScanPolicy::default()).await;
    assert!(!error, "{text}");
    // The server got the key (warn) and echoed it; the client gets it masked.
    assert!(
        text.contains("the key is [secret: aws-access-key-id], keep it"),
        "{text}"
    );
    assert!(!text.contains(KEY), "{text}");
    assert_eq!(
        audit["secret_findings"],
        json!(["aws-access-key-id"]),
        "{audit}"
    );
    assert_eq!(audit["outcome"], "ok", "{audit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_refuses_the_call_before_the_server_sees_the_key() {
    let (text, error, audit) = echo_through(SecretScanPolicy::both(SecretScan::Block)).await;
    assert!(error, "{text}");
    assert!(
        text.contains("hold what looks like a secret (aws-access-key-id)"),
        "{text}"
    );
    assert!(!text.contains(KEY), "{text}");
    assert_eq!(audit["outcome"], "refused", "{audit}");
    assert_eq!(
        audit["secret_findings"],
        json!(["aws-access-key-id"]),
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_on_results_replaces_a_result_holding_a_key_with_an_error() {
    let policy = SecretScanPolicy {
        arguments: SecretScan::Off,
        results: SecretScan::Block,
    };
    let (text, error, audit) = echo_through(policy).await;
    assert!(error, "{text}");
    assert!(
        text.contains("the result of this call held what looks like a secret"),
        "{text}"
    );
    assert!(!text.contains(KEY), "{text}");
    assert_eq!(
        audit["secret_findings"],
        json!(["aws-access-key-id"]),
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_passes_the_key_both_ways() {
    let (text, error, audit) = echo_through(SecretScanPolicy::both(SecretScan::Off)).await;
    assert!(!error && text.contains(KEY), "{text}");
    assert!(audit.get("secret_findings").is_none(), "{audit}");
}

/// `resources/read` of a URI holding the key (the test server's reads answer with the URI):
/// what the client gets under `policy`, or the error's message.
async fn read_through(policy: SecretScanPolicy) -> Result<String, String> {
    let program = test_server_bin().to_string_lossy().into_owned();
    let session = support::session_of_servers(
        &[("t", &program, &["--resource-template", "notes:///{path}"])],
        ManualClock::new(),
    )
    .await;
    let mut options = support::gateway_options(StartOptions::default(), None);
    options.secret_scan = policy;
    let gateway = Gateway::start(session, options);
    assert!(gateway.ready_within(Duration::from_secs(30)).await);
    let (client, serving) = support::serve_client(&gateway, ()).await;
    client
        .list_all_resource_templates()
        .await
        .expect("resources/templates/list");
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
            "notes:///{KEY}"
        )))
        .await;
    client.cancel().await.expect("closing the client");
    let _ = serving.await;
    gateway.shutdown().await;
    match read {
        Ok(result) => Ok(serde_json::to_string(&result).expect("serializing a read")),
        Err(error) => Err(error.to_string()),
    }
}

/// The scan of results covers what a read gives too, not only tool results: masked by
/// default, refused under `block`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_a_resource_read_is_masked_and_blocked_like_a_result() {
    let masked = read_through(SecretScanPolicy::default())
        .await
        .expect("a read");
    assert!(!masked.contains(KEY), "{masked}");
    assert!(masked.contains("[secret: aws-access-key-id]"), "{masked}");
    let blocked = SecretScanPolicy {
        arguments: SecretScan::Off,
        results: SecretScan::Block,
    };
    let refused = read_through(blocked).await.expect_err("a refusal");
    assert!(!refused.contains(KEY), "{refused}");
    assert!(
        refused.contains("the answer held what looks like a secret (aws-access-key-id)"),
        "{refused}"
    );
}
