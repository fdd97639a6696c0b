//! Supervision: a server that crashes fails its calls fast and is restarted; a request to a
//! server that is down names its own method.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_server_fails_fast_then_is_restarted() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    // A name of its own, so that its process can be told from every other test server.
    let program = dir.path().join("crashy-mcp");
    std::os::unix::fs::symlink(test_server_bin(), &program).expect("linking the test server");
    let spec = format!(
        r#"{{"crashy": {{"command": {}}}, "steady": {{"command": {}}}}}"#,
        json_str(&program.to_string_lossy()),
        json_str(&test_server_bin().to_string_lossy())
    );
    let audit = dir.path().join("audit.jsonl");
    let audit_arg = audit.to_string_lossy().into_owned();
    let command = tether_command(
        dir.path(),
        &["serve", "--mcp", &spec, "--audit", &audit_arg],
    );
    let (transport, _stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tether serve");
    let client: Client = ().serve(transport).await.expect("initializing");
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.iter().any(|n| n == "tether_status"), "{names:?}");
    assert_eq!(
        text_of(&call(&client, "crashy__echo", json!({"text": "one"})).await),
        "one"
    );
    assert_eq!(status_of(&client, "crashy").await["state"], "ready");

    let before = pids_running(&program);
    assert_eq!(before.len(), 1, "{before:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(before[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("killing the server");

    // Meanwhile a call fails at once with a tool error that says why; the other server works.
    let started = std::time::Instant::now();
    let down = call(&client, "crashy__echo", json!({"text": "two"})).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(down["isError"], json!(true), "{down}");
    assert!(text_of(&down).contains("'crashy'"), "{down}");
    eprintln!("the call while down: {}", text_of(&down));
    assert_eq!(
        text_of(&call(&client, "steady__echo", json!({"text": "s"})).await),
        "s"
    );

    // Restarted with backoff: ready again, one restart counted, a new process.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let status = status_of(&client, "crashy").await;
        if status["state"] == "ready" && status["restarts"] == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not restarted: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        text_of(&call(&client, "crashy__echo", json!({"text": "three"})).await),
        "three"
    );
    let after = pids_running(&program);
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after, before);
    client.cancel().await.expect("closing the client");
}

/// A request other than a tool call to a server that is down names its own method.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_of_a_down_server_fails_naming_prompts_get() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let program = dir.path().join("down-mcp");
    std::os::unix::fs::symlink(test_server_bin(), &program).expect("linking the test server");
    let spec = format!(
        r#"{{"down": {{"command": {}, "args": ["--extra-prompt", "A prompt."]}}}}"#,
        json_str(&program.to_string_lossy())
    );
    let command = tether_command(dir.path(), &["serve", "--mcp", &spec]);
    let (transport, _stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tether serve");
    let client: Client = ().serve(transport).await.expect("initializing");
    let prompts = client.list_all_prompts().await.expect("prompts/list");
    let name = prompts
        .iter()
        .map(|p| p.name.to_string())
        .find(|n| n.starts_with("down__"))
        .expect("the server's prompt through the gateway");
    let pids = pids_running(&program);
    assert_eq!(pids.len(), 1, "{pids:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pids[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("killing the server");
    let error = client
        .get_prompt(rmcp::model::GetPromptRequestParams::new(name.clone()))
        .await
        .expect_err("prompts/get of a server that is down");
    let error = error.to_string();
    assert!(
        error.contains("prompts/get") && !error.contains("tools/call"),
        "{name}: {error}"
    );
    client.cancel().await.expect("closing the client");
}
