//! The URL-server bridge of a hand-off, which keeps a URL server's secrets from the harness: a fake harness (a Python script named
//! `claude`) reads the config tether handed it and speaks Streamable HTTP to the URL it finds
//! there, as a real harness would. The upstream is our test server, which answers 401 unless
//! `Authorization` is exactly `Bearer <secret>`, the secret holding every character a harness
//! could expand or mangle. The real harness CLIs are in `tests/harnesses.rs`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use crate::support::{Sandbox, json_str, test_server_bin, text};

/// Hostile to every expansion a harness does, and not ASCII.
const SECRET: &str = "p@$$w0rd $HOME ${X} $$ \\$ \"q\" 'q' \\ {{x}} {env:X} é✓秘";

/// The test server on a free port, requiring `Authorization: Bearer SECRET`; its URL.
fn upstream() -> (Child, String) {
    let mut child = Command::new(test_server_bin())
        .args(["--http", "127.0.0.1:0", "--require-bearer-env", "UPSTREAM"])
        .env("UPSTREAM", SECRET)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the test server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("the server's stdout"))
        .read_line(&mut line)
        .expect("reading the test server's address");
    let url = line.trim().trim_start_matches("listening on ").to_owned();
    (child, url)
}

/// A fake `claude` that takes `--mcp-config=FILE`, talks MCP to the server `remote` in it
/// and writes what happened to `record.json`: the statuses and bodies of initialize (with the
/// handed-over header), of the same without the header, and of a wrong path; then
/// notifications/initialized, tools/list and DELETE within the session.
const FAKE_HARNESS: &str = r#"#!/usr/bin/env python3
import json, os, sys, urllib.request, urllib.error
config_path = [a for a in sys.argv[1:] if a.startswith("--mcp-config=")][0].split("=", 1)[1]
config_text = open(config_path).read()
server = json.loads(config_text)["mcpServers"]["remote"]
url, headers = server["url"], server.get("headers", {})
def call(method, url, headers, body=None):
    h = dict(headers)
    h["Accept"] = "application/json, text/event-stream"
    if body is not None:
        h["Content-Type"] = "application/json"
        body = json.dumps(body).encode()
    request = urllib.request.Request(url, data=body, headers=h, method=method)
    try:
        with urllib.request.urlopen(request, timeout=20) as r:
            return r.status, r.read().decode("utf-8", "replace"), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace"), dict(e.headers)
init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fake", "version": "0"}}}
record = {"config": config_text, "env": "\n".join(f"{k}={v}" for k, v in os.environ.items()), "argv": sys.argv, "url": url}
status, body, got = call("POST", url, headers, init)
record["initialize"] = [status, body]
session = {k: v for k, v in got.items() if k.lower() == "mcp-session-id"}
sh = dict(headers); sh.update(session); sh["Mcp-Protocol-Version"] = "2025-06-18"
record["initialized"] = call("POST", url, sh, {"jsonrpc": "2.0", "method": "notifications/initialized"})[:2]
record["tools"] = call("POST", url, sh, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})[:2]
record["delete"] = call("DELETE", url, sh)[:2]
record["no_token"] = call("POST", url, {}, init)[:2]
record["wrong_path"] = call("POST", url + "x", headers, init)[:2]
json.dump(record, open(os.environ["RECORD"], "w"))
"#;

/// Runs `tether run --mcp {remote: upstream + Authorization: Bearer {{TOKEN}}} --secret
/// TOKEN=file:… -- claude` with `script` as the fake `claude` and `secret` as TOKEN's value;
/// returns tether's output, what the script recorded, and the upstream's real URL.
fn hand_off(script: &str, secret: &str) -> (std::process::Output, serde_json::Value, String) {
    let sandbox = Sandbox::new();
    let (mut server, url) = upstream();
    let harness = sandbox.fake_program("claude", script);
    let secret_file = sandbox.write("secret", secret);
    let spec = format!(
        r#"{{"remote": {{"url": {}, "headers": {{"Authorization": "Bearer {{{{TOKEN}}}}"}}}}}}"#,
        json_str(&url)
    );
    let record = sandbox.path("record.json");
    let out = sandbox
        .tether(&[
            "run",
            "--mcp",
            &spec,
            "--secret",
            &format!("TOKEN=file:{secret_file}"),
            "--",
            &harness.to_string_lossy(),
        ])
        .env("RECORD", &record)
        .output()
        .expect("running tether");
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.success(),
        "tether run failed: {}",
        text(&out.stderr)
    );
    let record = serde_json::from_str(
        &std::fs::read_to_string(&record).expect("reading what the fake harness recorded"),
    )
    .expect("parsing the record");
    (out, record, url)
}

#[test]
fn a_url_server_is_reached_through_the_bridge_with_its_header_byte_exact() {
    let (out, record, url) = hand_off(FAKE_HARNESS, SECRET);
    let bridged = record["url"].as_str().unwrap_or_default();
    assert!(
        bridged.starts_with("http://127.0.0.1:") && !bridged.contains(&url),
        "the harness got {bridged}"
    );
    // The upstream accepted the header: it was delivered byte for byte.
    assert_eq!(record["initialize"][0], 200, "{record}");
    assert!(
        record["initialize"][1]
            .as_str()
            .is_some_and(|b| b.contains("serverInfo")),
        "{record}"
    );
    assert_eq!(record["initialized"][0], 202, "{record}");
    assert!(
        record["tools"][1]
            .as_str()
            .is_some_and(|b| b.contains("\"echo\"")),
        "{record}"
    );
    assert!(
        record["delete"][0].as_u64().is_some_and(|s| s < 300),
        "{record}"
    );
    // Without the run's token, or at a path the bridge did not hand out: refused.
    assert_eq!(record["no_token"][0], 401, "{record}");
    assert_eq!(record["wrong_path"][0], 404, "{record}");
    // No part of the secret in the harness's config, environment or command line.
    for what in ["config", "env", "argv"] {
        let seen = record[what].to_string();
        assert!(
            !seen.contains("p@$$w0rd") && !seen.contains("w0rd"),
            "the secret is in the harness's {what}: {seen}"
        );
    }
    assert!(!text(&out.stderr).contains("w0rd"), "{}", text(&out.stderr));
}

/// A fake `claude` that posts to the server `remote` of its config a normal initialize and one
/// with a body over the bridge's limit, and records both statuses and bodies.
const LIMITS_HARNESS: &str = r#"#!/usr/bin/env python3
import json, os, sys, urllib.request, urllib.error
config_path = [a for a in sys.argv[1:] if a.startswith("--mcp-config=")][0].split("=", 1)[1]
server = json.load(open(config_path))["mcpServers"]["remote"]
def post(body):
    h = dict(server["headers"]); h["Accept"] = "application/json, text/event-stream"; h["Content-Type"] = "application/json"
    try:
        with urllib.request.urlopen(urllib.request.Request(server["url"], data=body, headers=h, method="POST"), timeout=20) as r:
            return [r.status, r.read().decode("utf-8", "replace")]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode("utf-8", "replace")]
    except Exception as e:
        return [0, str(e)]
init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fake", "version": "0"}}}).encode()
json.dump({"initialize": post(init), "huge": post(b" " * (17 * 1024 * 1024))}, open(os.environ["RECORD"], "w"))
"#;

/// The upstream refuses the header tether adds (the secret given is wrong): the harness gets a
/// 502 that says so, not a 401 that would start its OAuth flow against the bridge, and tether's
/// stderr names the server, never the value. A body over 16 MiB is refused before it is
/// forwarded.
#[test]
fn a_refused_credential_is_a_502_and_a_huge_body_a_413() {
    let (out, record, _) = hand_off(LIMITS_HARNESS, "wrong-SENTINEL-value");
    let stderr = text(&out.stderr);
    assert_eq!(record["initialize"][0], 502, "{record}");
    assert!(
        record["initialize"][1]
            .as_str()
            .is_some_and(|b| b.contains("refused the credentials tether added")),
        "{record}"
    );
    assert_eq!(record["huge"][0], 413, "{record}");
    assert!(
        stderr.contains("server=remote") && stderr.contains("refused the credentials"),
        "{stderr}"
    );
    assert!(!stderr.contains("wrong-SENTINEL"), "{stderr}");
}
