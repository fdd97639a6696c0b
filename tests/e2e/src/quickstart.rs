//! The one-command quick start: `cargo run -p tether-e2e --bin quickstart`.
//!
//! Starts the reference server on loopback with its store in a temp directory, registers a
//! managed installation of our test MCP server (with one server-held value and one placeholder
//! for the client's own secret), resolves its UUID through GraphQL with the `tether` CLI,
//! applies the client secret in memory, launches the server, lists its tools, calls one, and
//! shuts everything down.

use std::process::ExitCode;

use std::path::Path;

use tether_e2e::{Stack, json_str, test_server_bin, workspace_artifact_with_progress};

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("quick start: OK");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("quick start failed: {err}");
            ExitCode::FAILURE
        }
    }
}

fn step(text: &str) {
    println!("==> {text}");
}

fn run() -> Result<(), String> {
    step(
        "building tether, tether-server and the test MCP server when missing (a few minutes the first time; cargo shows its progress on stderr)",
    );
    // One cargo invocation for all three, so shared dependencies build once.
    workspace_artifact_with_progress(
        &[
            "-p",
            "tether-cli",
            "-p",
            "tether-server",
            "-p",
            "tether-test-mcp",
            "--bins",
        ],
        Path::new("tether-server"),
    );
    let server = test_server_bin();
    let stack = Stack::start(&[])?;
    println!(
        "    reference server listening on {} (store in {})",
        stack.base,
        stack.data_dir().display()
    );

    step("registering a managed installation of the test MCP server");
    let spec = format!(
        r#"{{"command": {}, "env": {{"TEAM_REGION": "{{{{REGION}}}}", "API_KEY": "{{{{CLIENT_TOKEN}}}}"}}}}"#,
        json_str(&server.to_string_lossy())
    );
    let uid = stack.add(
        "quickstart-echo",
        &spec,
        &[("REGION", "eu-west-1")],
        "default",
    )?;
    println!("    uid {uid}");

    step(
        "resolving the uid through GraphQL, applying a client secret in memory, launching, listing tools",
    );
    let out = stack.run_tether(
        &[
            "test",
            "--mcp",
            &uid,
            "--secret",
            "CLIENT_TOKEN=env:QUICKSTART_TOKEN",
        ],
        &[("QUICKSTART_TOKEN", "client-secret-123")],
    )?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        return Err(format!(
            "tether test failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }

    step(
        "calling env_check on the managed server (the client secret reached it; its value is never shown)",
    );
    let out = stack.run_tether(
        &[
            "call",
            "--mcp",
            &uid,
            "--secret",
            "CLIENT_TOKEN=env:QUICKSTART_TOKEN",
            "quickstart-echo",
            "env_check",
            "--args",
            r#"{"name":"API_KEY"}"#,
        ],
        &[("QUICKSTART_TOKEN", "client-secret-123")],
    )?;
    let text = String::from_utf8_lossy(&out.stdout);
    print!("    {text}");
    if !out.status.success() || !text.contains("\"set\":true") {
        return Err(format!(
            "the client secret did not reach the server: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }

    step("shutting down");
    drop(stack);
    Ok(())
}
