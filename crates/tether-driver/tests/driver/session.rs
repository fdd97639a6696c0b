//! `Session`: one owner from specs to running servers — resolve, start, call by name,
//! re-resolve; names it does not hold are refused before anything starts.

use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tether_config::{Exposure, Secrets};
use tether_driver::{DriverError, McpSpec, ServerStatus, StartOptions};
use uuid::Uuid;

use crate::support::{
    Answer, FakeManaged, inline_session, json_str, session, session_call, test_server_bin,
};

const STEP: Duration = Duration::from_secs(60);

/// `{name: tether-test-mcp ARGS}` with `env` `{"API_TOKEN": "{{TOKEN}}"}`.
fn test_server(name: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| json_str(a)).collect();
    format!(
        r#"{{{}: {{"command": {}, "args": [{}], "env": {{"API_TOKEN": "{{{{TOKEN}}}}"}}}}}}"#,
        json_str(name),
        json_str(&test_server_bin().to_string_lossy()),
        args.join(",")
    )
}

fn managed(args: &[&str]) -> Answer {
    let args: Vec<String> = args.iter().map(|a| json_str(a)).collect();
    Answer::Config {
        json: format!(
            r#"{{"mcpServers":{{"managed":{{"command":{},"args":[{}]}}}}}}"#,
            json_str(&test_server_bin().to_string_lossy()),
            args.join(",")
        ),
        expires_at: None,
    }
}

/// The text of a `CallToolResult`'s first content item.
fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_start_and_call_by_name_with_the_secret_applied_once() {
    let secrets: Secrets = [("TOKEN", "sk-SESSION-SENTINEL")].into_iter().collect();
    let session = inline_session(&test_server("srv", &[]), &secrets).await;
    assert_eq!(session.names(), ["srv"]);
    assert_eq!(
        session.servers()[0].to_json(Exposure::Masked)["env"]["API_TOKEN"],
        "********"
    );
    // The masking set holds the run's secret (a caller registers it with its log layer).
    assert!(
        session
            .sensitive_values()
            .iter()
            .any(|v| v.expose() == "sk-SESSION-SENTINEL")
    );
    assert!(!format!("{session:?}").contains("SENTINEL"));

    let runtime = tokio::time::timeout(STEP, session.start(&StartOptions::default()))
        .await
        .expect("startup within the step bound")
        .expect("starting the session's servers");
    let echoed = session_call(
        &session,
        &runtime,
        "srv",
        "echo",
        json!({"text": "through the session"}),
    )
    .await;
    assert_eq!(first_text(&echoed), "through the session");
    let check = session_call(
        &session,
        &runtime,
        "srv",
        "env_check",
        json!({"name": "API_TOKEN"}),
    )
    .await;
    assert_eq!(
        serde_json::from_str::<Value>(first_text(&check)).ok(),
        Some(json!({"name": "API_TOKEN", "set": true}))
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_the_session_does_not_hold_is_not_in_session() {
    let session = inline_session(&test_server("srv", &[]), &Secrets::new()).await;
    match session.start_server("nope", &StartOptions::default()).await {
        Err(DriverError::NotInSession { name, held }) => {
            assert_eq!(name, "nope");
            assert_eq!(held, ["srv"]);
        }
        other => panic!("expected NotInSession, got {other:?}"),
    }
    let runtime = session
        .start_server("srv", &StartOptions::default())
        .await
        .expect("starting srv alone");
    assert_eq!(runtime.running(), ["srv"]);
    let err = session
        .call(&runtime, "nope", "echo", None, STEP)
        .await
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some("no MCP server named 'nope' in the given specs (they hold: srv)")
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_that_fails_to_start_is_an_error_with_the_masked_reason() {
    let secrets: Secrets = [("TOKEN", "sk-FAILING-SENTINEL")].into_iter().collect();
    let config = test_server("bad", &["--stderr-env", "API_TOKEN", "--exit-early", "4"]);
    let session = inline_session(&config, &secrets).await;
    match session.start_server("bad", &StartOptions::default()).await {
        Err(DriverError::ServerFailedToStart { server, reason }) => {
            assert_eq!(server, "bad");
            assert!(reason.contains("exit status: 4"), "{reason}");
            assert!(reason.contains("API_TOKEN=********"), "{reason}");
            assert!(!reason.contains("SENTINEL"), "{reason}");
        }
        other => panic!("expected ServerFailedToStart, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_resolve_reports_what_changed_and_a_failure_keeps_the_session() {
    let uid = Uuid::new_v4();
    let fake = Arc::new(FakeManaged::new(vec![(uid, managed(&[]))]));
    let inline = McpSpec::parse(&test_server("inline", &[])).expect("parsing the inline spec");
    let mut session = session(
        vec![inline, McpSpec::Uuid(uid)],
        Secrets::new(),
        Some(fake.clone()),
    )
    .await
    .expect("resolving an inline and a managed spec");
    assert_eq!(session.names(), ["inline", "managed"]);
    let first_ids: Vec<Uuid> = session.resolved().ephemeral.iter().map(|e| e.id).collect();

    // Same answer: nothing to restart.
    assert_eq!(
        session.re_resolve().await.expect("re-resolving"),
        Vec::<String>::new()
    );
    assert_eq!(fake.calls(), 2);

    // The managed installation was edited: only its server changed.
    fake.set_answer(uid, managed(&["--tools", "2"]));
    assert_eq!(
        session.re_resolve().await.expect("re-resolving"),
        ["managed"]
    );
    assert_eq!(
        session
            .server("managed")
            .expect("the managed server")
            .to_json(Exposure::Real)["args"],
        json!(["--tools", "2"])
    );
    // Without a task id, ephemeral ids are fresh on each resolution.
    let ids: Vec<Uuid> = session.resolved().ephemeral.iter().map(|e| e.id).collect();
    assert_ne!(ids, first_ids);

    // Now the managed server refuses: the session keeps what it had.
    fake.set_answer(uid, Answer::UserFacing("MCP server is inactive".to_owned()));
    let err = session.re_resolve().await.err().map(|e| e.to_string());
    assert_eq!(
        err,
        Some(format!(
            "Failed to resolve managed MCP server {uid}: MCP server is inactive"
        ))
    );
    assert_eq!(session.names(), ["inline", "managed"]);

    // The re-resolved servers start.
    let runtime = session
        .start(&StartOptions::default())
        .await
        .expect("starting the re-resolved servers");
    match &runtime.reports()[1].status {
        ServerStatus::Ready { tools } => assert_eq!(tools.len(), 5),
        ServerStatus::Failed { reason } => panic!("managed failed: {reason}"),
        ServerStatus::Disabled => panic!("managed server reported disabled"),
    }
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_independent_and_can_be_shared_between_tasks() {
    let a = Arc::new(inline_session(&test_server("a", &[]), &Secrets::new()).await);
    let b = Arc::new(inline_session(&test_server("b", &[]), &Secrets::new()).await);
    let tasks = [a, b].map(|session| {
        tokio::spawn(async move {
            let runtime = session
                .start(&StartOptions::default())
                .await
                .expect("starting a session's server");
            let name = session.names()[0].clone();
            let out = session_call(&session, &runtime, &name, "echo", json!({"text": name})).await;
            runtime.shutdown().await;
            first_text(&out).to_owned()
        })
    });
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("joining a session's task"));
    }
    assert_eq!(answers, ["a", "b"]);
}
