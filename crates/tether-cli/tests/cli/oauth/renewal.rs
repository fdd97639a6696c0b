//! Tokens renewed: refreshed before expiry until revoked, once at connect after a refusal, mid-run
//! with the call retried, stepped up on a 403 `insufficient_scope`; a bridged harness's renewed
//! tokens, an old record's issuer learned at the next refusal, and a workload's token file read
//! again at each renewal.

use super::*;

/// A token within the 60 s refresh margin (the server issues 30 s tokens, so every stored
/// token is near its expiry from the start; no test waits for one to age) is refreshed
/// before use and the new tokens are stored; once the refresh token is revoked, the refresh
/// fails and tether says to log in again. (The margin itself, decided by an injected clock,
/// is tested in `tether-oauth`.)
#[test]
fn a_token_near_expiry_is_refreshed_before_use_until_revoked() {
    let server = AuthorizedServer::start(30);
    let sandbox = Sandbox::new();
    let url = server.url();
    let spec = spec(&server);
    log_in(&sandbox, &url);
    let stored = stored_file(&sandbox);
    assert_eq!(server.stats()["refreshes"], 0);

    // The access token is still good at the server: only its expiry makes tether refresh it.
    let refreshed = tether(&sandbox, &["test", "--mcp", &spec]);
    assert_eq!(
        refreshed.status.code(),
        Some(0),
        "{}",
        text(&refreshed.stderr)
    );
    assert!(text(&refreshed.stdout).starts_with("ready   remote  3 tools"));
    assert_eq!(server.stats()["refreshes"], 1);
    assert_ne!(
        stored_file(&sandbox),
        stored,
        "the refreshed tokens are stored"
    );

    // Revoked: the refresh fails and tether says to log in again.
    server.request("POST", "/revoke");
    let revoked = tether(&sandbox, &["test", "--mcp", &spec]);
    assert_eq!(revoked.status.code(), Some(1));
    let stderr = text(&revoked.stderr);
    assert!(
        stderr.contains(&format!(
            "the stored OAuth token for {url} could not be refreshed"
        )) && stderr.contains(&format!("run `tether auth login {url}`")),
        "{stderr}"
    );
    assert_eq!(server.stats()["refreshes"], 1);
}

/// A token tether still thinks fresh but the server refuses (401) is refreshed once at connect
/// and the connection retried; a refresh the server refuses too leaves `needs login`.
#[test]
fn a_refused_token_is_refreshed_once_at_connect() {
    let server = AuthorizedServer::start(3600);
    let sandbox = Sandbox::new();
    let url = server.url();
    let spec = spec(&server);
    log_in(&sandbox, &url);

    server.request("POST", "/expire");
    let retried = tether(&sandbox, &["test", "--mcp", &spec]);
    assert_eq!(retried.status.code(), Some(0), "{}", text(&retried.stderr));
    assert!(text(&retried.stdout).starts_with("ready   remote  3 tools"));
    assert_eq!(server.stats()["refreshes"], 1);
    // The refreshed token was stored: the next run uses it without refreshing.
    let again = tether(&sandbox, &["test", "--mcp", &spec]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(server.stats()["refreshes"], 1);

    server.request("POST", "/revoke");
    let refused = tether(&sandbox, &["test", "--mcp", &spec]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains(&format!(
            "{url} refused the stored OAuth token and it could not be refreshed"
        )),
        "{}",
        text(&refused.stderr)
    );
    assert!(
        text(&refused.stdout).contains(&format!(
            "needs login: {url} refused the stored OAuth token; run `tether auth login {url}`"
        )),
        "{}",
        text(&refused.stdout)
    );
    assert_eq!(server.stats()["refreshes"], 1);
}

/// `tether serve` over stdio, driven line by line (newline-delimited JSON-RPC), every answer
/// awaited at most 30 s.
struct StdioGateway {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: std::thread::JoinHandle<Vec<u8>>,
}

impl StdioGateway {
    fn start(sandbox: &Sandbox, spec: &str) -> Self {
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("tether"))
            .args(["-vvv", "serve", "--mcp", spec])
            .current_dir(sandbox.dir.path())
            .env("TETHER_HOME", sandbox.home())
            .env("TETHER_SECRET_STORE", "file")
            .env("BROWSER", "curl -s -L -o /dev/null")
            .env("NO_COLOR", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting tether serve");
        let stdout = child.stdout.take().expect("its stdout");
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr = child.stderr.take().expect("its stderr");
        let stderr = std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = stderr.read_to_end(&mut all);
            all
        });
        let mut gateway = Self {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
        };
        gateway.request(
            1,
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"}}),
        );
        gateway.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        gateway
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}").expect("writing to tether serve");
        stdin.flush().expect("flushing");
    }

    /// Sends a request and returns the answer with its id (notifications in between skipped).
    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .expect("an answer from tether serve within 30 s");
            let message: Value = serde_json::from_str(&line).expect("a JSON-RPC line");
            if message["id"] == id {
                return message;
            }
        }
    }

    /// Closes stdin (the client leaves) and returns what tether printed on stderr; a tether
    /// that has not exited 10 s later is killed.
    fn finish(mut self) -> String {
        drop(self.stdin.take());
        let pid =
            nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("a pid fits an i32"));
        let (exited, waited) = std::sync::mpsc::channel();
        let mut child = self.child;
        let waiter = std::thread::spawn(move || {
            let status = child.wait();
            let _ = exited.send(());
            status
        });
        if waited.recv_timeout(Duration::from_secs(10)).is_err() {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        let _ = waiter.join();
        text(&self.stderr.join().expect("the stderr reader"))
    }
}

/// Mid-run: a gateway whose upstream token is refused between two calls
/// refreshes it once and retries the call, which succeeds; the next call uses the new token.
#[test]
fn a_token_refused_mid_run_is_refreshed_and_the_call_retried() {
    let server = AuthorizedServer::start(3600);
    let sandbox = Sandbox::new();
    log_in(&sandbox, &server.url());

    let mut gateway = StdioGateway::start(&sandbox, &spec(&server));
    let echo = |gateway: &mut StdioGateway, id: u64, word: &str| {
        gateway.request(
            id,
            "tools/call",
            serde_json::json!({"name": "remote__echo", "arguments": {"text": word}}),
        )
    };
    let first = echo(&mut gateway, 2, "first");
    assert!(first["result"].to_string().contains("first"), "{first}");
    assert_eq!(server.stats()["refreshes"], 0);

    server.request("POST", "/expire");
    let second = echo(&mut gateway, 3, "second");
    assert!(second["result"].to_string().contains("second"), "{second}");
    assert_ne!(second["result"]["isError"], true, "{second}");
    assert_eq!(server.stats()["refreshes"], 1);
    let third = echo(&mut gateway, 4, "third");
    assert!(third["result"].to_string().contains("third"), "{third}");
    assert_eq!(
        server.stats()["refreshes"],
        1,
        "the refreshed token is kept"
    );

    // Revoked: one refresh is tried, it fails, the call fails and the log says what to do.
    server.request("POST", "/revoke");
    let refused = echo(&mut gateway, 5, "fourth");
    assert!(
        refused.get("error").is_some() || refused["result"]["isError"] == true,
        "{refused}"
    );
    assert!(!refused.to_string().contains(SENTINEL), "{refused}");
    let stderr = gateway.finish();
    assert!(
        stderr.contains(&format!(
            "{} refused the stored OAuth token and it could not be refreshed",
            server.url()
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains(SENTINEL),
        "a token shows on stderr:\n{stderr}"
    );
    assert_eq!(server.stats()["refreshes"], 1);
}

/// Step-up: `add` needs the scope `mcp:write`, which the login did not ask
/// for; the 403 `insufficient_scope` leads to a second authorization (through `$BROWSER`) for
/// `mcp mcp:write`, the call is retried and succeeds, and the wider token is stored.
#[test]
fn a_403_insufficient_scope_steps_up_once_and_retries() {
    let server = AuthorizedServer::start(3600);
    let sandbox = Sandbox::new();
    let url = server.url();
    let spec = spec(&server);
    log_in(&sandbox, &url);
    assert_eq!(server.stats()["codes"], 1);

    let add = |sandbox: &Sandbox| {
        tether(
            sandbox,
            &[
                "call",
                "--mcp",
                &spec,
                "remote",
                "add",
                "--args",
                r#"{"a":2,"b":40}"#,
            ],
        )
    };
    let stepped = add(&sandbox);
    assert_eq!(stepped.status.code(), Some(0), "{}", text(&stepped.stderr));
    assert_eq!(text(&stepped.stdout).trim(), "42");
    assert!(
        text(&stepped.stderr)
            .contains(&format!("{url} asks for more access (scope mcp mcp:write)")),
        "{}",
        text(&stepped.stderr)
    );
    assert_eq!(server.stats()["codes"], 2);
    assert_eq!(server.stats()["registrations"], 1, "the same client");

    // The wider token was stored: no third authorization.
    let again = add(&sandbox);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(server.stats()["codes"], 2);
}

/// A step-up whose login nobody completes (a `$BROWSER` that opens nothing) ends the call at
/// its timeout saying so, and how to finish it, instead of blaming the server's silence.
///
/// The timeout is 20 s: the step-up has to begin (the 403 come back) before it runs out, and
/// under the whole suite on a loaded 2-core machine that once took more than 3 s, and once
/// more than 10 (the call then gave up first, and the step-up began after it).
#[test]
fn a_step_up_login_not_completed_is_named_when_the_call_times_out() {
    let server = AuthorizedServer::start(3600);
    let sandbox = Sandbox::new();
    let url = server.url();
    let spec = spec(&server);
    log_in(&sandbox, &url);
    let out = sandbox
        .tether(&[
            "call",
            "--mcp",
            &spec,
            "--timeout",
            "20",
            "remote",
            "add",
            "--args",
            r#"{"a":2,"b":40}"#,
        ])
        .env("TETHER_SECRET_STORE", "file")
        .env("BROWSER", "true")
        .timeout(Duration::from_secs(60))
        .output()
        .expect("running tether");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("asked for more access and the login for it was not completed in time")
            && stderr.contains(&format!("run `tether auth login {url}` first")),
        "{stderr}"
    );
    assert!(!tether_testkit::holds(&out.stderr, SENTINEL), "{stderr}");
    assert_eq!(
        server.stats()["codes"],
        1,
        "no second authorization completed"
    );
}

/// A fake `claude` for [`a_harness_behind_the_bridge_gets_renewed_tokens`]: it initializes the
/// server `remote` of the config it was handed, calls `echo`, has the upstream end every access
/// token (`POST $EXPIRE_URL`), calls `echo` again, then `add` (which needs `mcp:write`), and
/// writes the statuses and bodies to `$RECORD`.
const RENEWING_HARNESS: &str = r#"#!/usr/bin/env python3
import json, os, sys, urllib.request, urllib.error
config_path = [a for a in sys.argv[1:] if a.startswith("--mcp-config=")][0].split("=", 1)[1]
server = json.load(open(config_path))["mcpServers"]["remote"]
url, headers = server["url"], server.get("headers", {})
def call(headers, body):
    h = dict(headers)
    h["Accept"] = "application/json, text/event-stream"
    h["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=h, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, r.read().decode("utf-8", "replace"), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace"), dict(e.headers)
def tool(id, name, arguments):
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fake", "version": "0"}}}
status, body, got = call(headers, init)
session = {k: v for k, v in got.items() if k.lower() == "mcp-session-id"}
sh = dict(headers); sh.update(session); sh["Mcp-Protocol-Version"] = "2025-06-18"
call(sh, {"jsonrpc": "2.0", "method": "notifications/initialized"})
record = {"initialize": status, "first": call(sh, tool(2, "echo", {"text": "first"}))[:2]}
urllib.request.urlopen(urllib.request.Request(os.environ["EXPIRE_URL"], data=b"", method="POST"), timeout=10).read()
record["second"] = call(sh, tool(3, "echo", {"text": "second"}))[:2]
record["add"] = call(sh, tool(4, "add", {"a": 2, "b": 40}))[:2]
json.dump(record, open(os.environ["RECORD"], "w"))
"#;

/// A harness hand-off (`tether run -- claude`): the remote's OAuth token goes through the
/// loopback bridge, which renews it like the driver does — a token refused mid-run (401) is
/// refreshed once and the request retried, a 403 `insufficient_scope` steps up — so the
/// harness never sees a refusal, nor a token.
#[test]
fn a_harness_behind_the_bridge_gets_renewed_tokens() {
    let server = AuthorizedServer::start(3600);
    let sandbox = Sandbox::new();
    log_in(&sandbox, &server.url());
    let harness = sandbox.fake_program("claude", RENEWING_HARNESS);
    let record = sandbox.path("record.json");
    let output = sandbox
        .tether(&[
            "-vvv",
            "run",
            "--mcp",
            &spec(&server),
            "--",
            &harness.to_string_lossy(),
        ])
        .env("TETHER_SECRET_STORE", "file")
        .env("BROWSER", "curl -s -L -o /dev/null")
        .env("RECORD", &record)
        .env("EXPIRE_URL", format!("{}/expire", server.origin))
        .timeout(Duration::from_secs(90))
        .output()
        .expect("running tether");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains(SENTINEL), "{stderr}");
    let recorded = std::fs::read_to_string(&record).expect("reading what the harness recorded");
    assert!(
        !recorded.contains(SENTINEL),
        "the harness saw a token: {recorded}"
    );
    let record: Value = serde_json::from_str(&recorded).expect("parsing the record");
    assert_eq!(record["initialize"], 200, "{record}");
    for (call, word) in [("first", "first"), ("second", "second"), ("add", "42")] {
        assert_eq!(record[call][0], 200, "{call}: {record}");
        assert!(
            record[call][1].as_str().unwrap_or_default().contains(word),
            "{call}: {record}"
        );
    }
    assert_eq!(
        server.stats(),
        serde_json::json!({"codes": 2, "refreshes": 1, "registrations": 1})
    );
}

/// A stored record names the authorization server that issued it; a record stored before
/// issuers were recorded (made here by taking the issuer out of the stored file) gets it once,
/// at the next 401, when discovery finds the same authorization server behind its token
/// endpoint: refreshed there, not logged in again.
#[test]
fn an_earlier_record_gets_its_issuer_once_at_the_next_refusal() {
    let server = AuthorizedServer::start(3600);
    let sandbox = Sandbox::new();
    let spec = spec(&server);
    log_in(&sandbox, &server.url());
    let recorded = format!(r#"\"issuer\":\"{}\""#, server.origin);
    let stored = stored_file(&sandbox);
    assert!(
        stored.contains(&recorded),
        "the issuer is recorded: {stored}"
    );
    std::fs::write(
        sandbox.home().join("secrets.json"),
        stored.replace(&recorded, r#"\"issuer\":null"#),
    )
    .expect("writing the earlier form");

    server.request("POST", "/expire");
    let retried = tether(&sandbox, &["test", "--mcp", &spec]);
    assert_eq!(retried.status.code(), Some(0), "{}", text(&retried.stderr));
    assert_eq!(
        server.stats(),
        serde_json::json!({"codes": 1, "refreshes": 1, "registrations": 1}),
        "refreshed at the same server, no new login"
    );
    assert!(
        stored_file(&sandbox).contains(&recorded),
        "the issuer is recorded again"
    );
}

/// A workload logs in with the JWT its platform puts in a file (`--workload-token-file`,
/// the RFC 7523 JWT bearer grant; no browser): its 30 s tokens are renewed at each use with
/// the file read again (the platform rotates it), and neither the JWT (hostile text) nor a
/// token shows in any output at -vvv or is stored (the path is).
#[test]
fn a_workload_logs_in_with_its_token_file_read_again_at_each_renewal() {
    let server = AuthorizedServer::start(30);
    let sandbox = Sandbox::new();
    let url = server.url();
    let spec = spec(&server);
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(sandbox.home())
        .expect("the sandbox home");
    let file = sandbox.home().join("workload.jwt");
    std::fs::write(&file, "SENTINEL-WL-1 $HOME {{x}} \"q\"\n").expect("writing the token file");
    let file_arg = file.to_string_lossy().into_owned();
    let login = tether(
        &sandbox,
        &[
            "auth",
            "login",
            &url,
            "--client-id",
            "workload",
            "--workload-token-file",
            &file_arg,
        ],
    );
    assert_eq!(login.status.code(), Some(0), "{}", text(&login.stderr));
    assert_eq!(server.stats()["codes"], 0, "no browser step");
    let stored = stored_file(&sandbox);
    assert!(stored.contains("workload.jwt"), "the path is stored");
    assert!(!stored.contains("SENTINEL-WL-"), "never the JWT");
    let status = tether(&sandbox, &["auth", "status", &url]);
    assert!(
        text(&status.stdout).contains("logged in as workload workload (its token file"),
        "{}",
        text(&status.stdout)
    );

    // The platform rotates the JWT; the next use renews the 30 s token with the new one.
    std::fs::write(&file, "SENTINEL-WL-2 %41 \\").expect("rotating the token file");
    let used = tether(&sandbox, &["test", "--mcp", &spec]);
    assert_eq!(used.status.code(), Some(0), "{}", text(&used.stderr));
    assert!(text(&used.stdout).starts_with("ready   remote  3 tools"));
    assert!(!stored_file(&sandbox).contains("SENTINEL-WL-"));

    // A JWT the authorization server refuses: the renewal fails and says what to do.
    std::fs::write(&file, "not-a-workload-jwt").expect("rewriting the token file");
    let refused = tether(&sandbox, &["test", "--mcp", &spec]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains(&format!("run `tether auth login {url}`")),
        "{}",
        text(&refused.stderr)
    );

    // Without --client-id the flag is refused before anything is sent.
    let bare = tether(
        &sandbox,
        &["auth", "login", &url, "--workload-token-file", &file_arg],
    );
    assert_eq!(bare.status.code(), Some(2), "{}", text(&bare.stderr));
    assert!(
        text(&bare.stderr).contains("--client-id"),
        "{}",
        text(&bare.stderr)
    );
}
