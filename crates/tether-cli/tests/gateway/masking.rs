//! One client, three servers behind namespaced names: a secret a server returns reaches the
//! client masked (in results and in error messages), the audit log holds no argument value, and
//! `tether export --gateway` writes sources, never values.

use super::*;

/// An argument value that must never reach the audit log.
const ARGUMENT_SENTINEL: &str = "audit-sentinel-argument-value";
/// server-everything in Streamable HTTP mode on a free loopback port.
async fn everything_http(bin: &Path) -> (tokio::process::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding a loopback port");
    let child = tokio::process::Command::new(bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawning server-everything");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "server-everything did not listen"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (child, port)
}

fn valid_name(name: &str) -> bool {
    name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_reaches_three_servers_through_namespaced_names() {
    let Some(everything) = server_everything() else {
        return;
    };
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let (_remote, port) = everything_http(&everything).await;
    let config = format!(
        r#"{{"mcpServers": {{
            "local": {{"command": {everything}, "args": ["stdio"], "env": {{"GW_TOKEN": "{{{{TOKEN}}}}"}}}},
            "remote": {{"url": "http://127.0.0.1:{port}/mcp"}},
            "test": {{"command": {test}}}
        }}}}"#,
        everything = json_str(&everything.to_string_lossy()),
        test = json_str(&test_server_bin().to_string_lossy()),
    );
    let spec = dir.path().join("mcp.json");
    std::fs::write(&spec, config).expect("writing the spec");
    let audit = dir.path().join("audit.jsonl");
    let spec_arg = spec.to_string_lossy().into_owned();
    let audit_arg = audit.to_string_lossy().into_owned();
    let command = tether_command(
        dir.path(),
        &[
            "serve",
            "--mcp",
            &spec_arg,
            "--secret",
            "TOKEN=env:GW_SECRET",
            "--audit",
            &audit_arg,
        ],
    );
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tether serve");
    let client: Client = tokio::time::timeout(Duration::from_secs(90), ().serve(transport))
        .await
        .expect("tether serve answered initialize in time")
        .expect("initializing through the gateway");

    let info = client.peer_info().expect("the gateway's initialize answer");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("tether")
    );

    // tools/list: the union, namespaced, every name one clients accept.
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    for expected in [
        "local__echo",
        "local__get-env",
        "remote__echo",
        "test__echo",
        "test__add",
        "test__env_check",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    assert!(names.iter().all(|n| valid_name(n)), "{names:?}");
    // The definition is the server's own, but for the name.
    let add = tools
        .iter()
        .find(|t| t.name == "test__add")
        .expect("test__add is listed");
    assert_eq!(
        add.input_schema.get("required"),
        Some(&json!(["a", "b"])),
        "{add:?}"
    );

    // Calls reach the right server.
    let sum = call(&client, "test__add", json!({"a": 2, "b": 40})).await;
    assert_eq!(text_of(&sum), "42");
    let echoed = call(
        &client,
        "remote__echo",
        json!({"message": ARGUMENT_SENTINEL}),
    )
    .await;
    assert!(text_of(&echoed).contains(ARGUMENT_SENTINEL), "{echoed}");
    let echoed = call(&client, "test__echo", json!({"text": ARGUMENT_SENTINEL})).await;
    assert_eq!(text_of(&echoed), ARGUMENT_SENTINEL);

    // The secret reached the server (its env) and comes back masked.
    let env = call(&client, "local__get-env", json!({})).await;
    let env_text = env.to_string();
    assert!(env_text.contains("GW_TOKEN"), "{env_text}");
    assert!(env_text.contains(MASK), "{env_text}");
    for part in ["gw-s3cr3t", "\\\"q\\\" {{x}}"] {
        assert!(!env_text.contains(part), "{part} left in {env_text}");
    }

    // An unknown name is a tool error the model can read (and act on), not a hang.
    let unknown = call(&client, "nobody__nothing", json!({})).await;
    assert_eq!(unknown["isError"], json!(true), "{unknown}");
    assert!(
        text_of(&unknown).contains("no tool named 'nobody__nothing'"),
        "{unknown}"
    );

    // Prompts and resources.
    let prompts = client.list_all_prompts().await.expect("prompts/list");
    let prompt_names: Vec<String> = prompts.iter().map(|p| p.name.clone()).collect();
    assert!(
        prompt_names.iter().any(|n| n == "local__simple-prompt"),
        "{prompt_names:?}"
    );
    let prompt = client
        .get_prompt(GetPromptRequestParams::new("local__simple-prompt"))
        .await
        .expect("prompts/get through the gateway");
    assert!(!prompt.messages.is_empty());
    let resources = client.list_all_resources().await.expect("resources/list");
    let first = resources
        .first()
        .expect("server-everything lists resources");
    let read = client
        .read_resource(ReadResourceRequestParams::new(first.uri.clone()))
        .await
        .expect("resources/read through the gateway");
    assert!(!read.contents.is_empty());

    client.cancel().await.expect("closing the client");

    // The audit log: one line per forwarded call, private, and no value in it.
    let log = std::fs::read_to_string(&audit).expect("reading the audit log");
    let mode = std::fs::metadata(&audit)
        .expect("stat of the audit log")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).expect("each audit line is JSON"))
        .collect();
    let tool_calls: Vec<&Value> = lines
        .iter()
        .filter(|l| l["method"] == "tools/call")
        .collect();
    assert_eq!(tool_calls.len(), 5, "{log}");
    assert!(tool_calls.iter().any(|l| l["server"] == "test"
        && l["target"] == "add"
        && l["outcome"] == "ok"
        && l["arguments_sha256"].as_str().map(str::len) == Some(64)));
    assert!(
        lines
            .iter()
            .any(|l| l["target"] == "nobody__nothing" && l["outcome"] == "refused"),
        "{log}"
    );
    for needle in [ARGUMENT_SENTINEL, "gw-s3cr3t"] {
        assert!(!log.contains(needle), "{needle} in {log}");
    }

    // Nothing on stderr holds the secret.
    let mut stderr_text = String::new();
    if let Some(stderr) = stderr {
        use tokio::io::AsyncReadExt as _;
        let mut stderr = stderr;
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            stderr.read_to_string(&mut stderr_text),
        )
        .await;
    }
    assert!(!stderr_text.contains("gw-s3cr3t"), "{stderr_text}");
    assert!(
        stderr_text.contains("test: ready, 3 tools"),
        "{stderr_text}"
    );
}

/// A server's JSON-RPC error reaches the client as the gateway's error (`Shared::error_for`):
/// the run's secret in its message masked, also with a zero-width space inside it, and a
/// credential of a known shape masked by the results' scan (an error cannot be withheld, so
/// `block` masks); the gateway says on stderr that it found one, naming the rule only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_error_message_reaches_the_client_masked_and_scanned() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let spec = format!(
        r#"{{"test": {{"command": {}, "args": ["--reflect-env", "GW_REFLECTED"], "env": {{"GW_REFLECTED": "{{{{TOKEN}}}}"}}}}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    );
    for mode in ["mask", "block"] {
        let (client, stderr) = serve_client(
            dir.path(),
            &spec,
            &["--secret", "TOKEN=env:GW_SECRET", "--secret-scan", mode],
        )
        .await;
        let mut params = CallToolRequestParams::new("test__reflect");
        params = params.with_arguments(
            json!({"as": "error"})
                .as_object()
                .expect("an object")
                .clone(),
        );
        let error = client
            .call_tool(params)
            .await
            .expect_err("the server fails the call")
            .to_string();
        assert!(
            error.contains(&format!(
                "lookup failed for GW_REFLECTED={MASK} (spelt {MASK}) with key [secret: aws-access-key-id]"
            )),
            "{mode}: {error}"
        );
        assert!(
            !error.contains("s3cr3t") && !error.contains("AKIA"),
            "{error}"
        );
        let stderr = stderr_of(client, stderr).await;
        assert!(
            stderr.contains(
                "an error a server sent holds what looks like a secret (aws-access-key-id)"
            ),
            "{mode}: {stderr}"
        );
        assert!(!stderr.contains("AKIAQWERTY"), "{stderr}");
    }
}

#[test]
fn export_gateway_writes_sources_never_values_and_refuses_what_would_leak_or_hang() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let spec = dir.path().join("mcp.json");
    std::fs::write(&spec, r#"{"a": {"command": "x"}}"#).expect("writing the spec");
    let export = |extra: &[&str]| {
        let mut args = vec!["export", "--gateway", "--format", "json"];
        args.extend_from_slice(extra);
        tether_in(dir.path())
            .env("GW_SECRET", SECRET)
            .command(&args)
            .output()
            .expect("running tether export --gateway")
    };
    let spec_arg = spec.to_string_lossy().into_owned();
    let out = export(&["--mcp", &spec_arg, "--secret", "TOKEN=env:GW_SECRET"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config: Value = serde_json::from_slice(&out.stdout).expect("the export is JSON");
    let entry = &config["mcpServers"]["tether"];
    assert_eq!(
        entry["args"],
        json!([
            "serve",
            "--mcp",
            spec_arg,
            "--secret",
            "TOKEN=env:GW_SECRET"
        ])
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("gw-s3cr3t"));

    for (extra, why) in [
        (vec!["--mcp", r#"{"a":{"command":"x"}}"#], "inline JSON"),
        (
            vec!["--mcp", &spec_arg, "--secret", "TOKEN=prompt"],
            "without a terminal",
        ),
        (
            vec!["--mcp", &spec_arg, "--secret", "TOKEN=-"],
            "without a terminal",
        ),
    ] {
        let out = export(&extra);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(why), "{stderr}");
    }
}
