//! `tether auth` against a real authorization server on loopback
//! (`tether-test-mcp --http … --oauth`, which also answers `/mcp` only with a token it issued):
//! needs login, login through `$BROWSER` (curl following the redirect to tether's loopback
//! listener), use, refresh before expiry, a revoked refresh token, logout — and no token in any
//! output at -vvv.

use std::io::{BufRead as _, Read as _, Write as _};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{Sandbox, text};

/// Every token the test server issues starts with this.
const SENTINEL: &str = "SENTINEL-";

/// `tether-test-mcp --http 127.0.0.1:0 --oauth --oauth-token-ttl TTL`.
struct AuthorizedServer {
    child: Child,
    origin: String,
}

impl AuthorizedServer {
    fn start(ttl_secs: u64) -> Self {
        Self::start_with(ttl_secs, &[])
    }

    /// [`AuthorizedServer::start`] with more `tether-test-mcp` flags.
    fn start_with(ttl_secs: u64, extra: &[&str]) -> Self {
        let ttl = ttl_secs.to_string();
        let mut args = vec!["--oauth", "--oauth-token-ttl", &ttl];
        args.extend_from_slice(extra);
        Self::spawn(&args)
    }

    /// The test server without OAuth: it answers anyone.
    fn open() -> Self {
        Self::spawn(&[])
    }

    /// `tether-test-mcp --http 127.0.0.1:0 ARGS`.
    fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(tether_testkit::test_server_bin())
            .args(["--http", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting tether-test-mcp --http");
        let stdout = child.stdout.take().expect("its stdout");
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("reading the listening line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .expect("the listening line");
        let origin = url.strip_suffix("/mcp").expect("a /mcp URL").to_owned();
        Self { child, origin }
    }

    fn url(&self) -> String {
        format!("{}/mcp", self.origin)
    }

    /// A raw HTTP/1.1 request to the server; the response body.
    fn request(&self, method: &str, path: &str) -> String {
        let address = self.origin.strip_prefix("http://").expect("an http origin");
        let mut stream = std::net::TcpStream::connect(address).expect("connecting to the server");
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nhost: {address}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
        .expect("sending the request");
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .expect("reading the response");
        response
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or_default()
    }

    fn stats(&self) -> Value {
        serde_json::from_str(&self.request("GET", "/stats")).expect("stats are JSON")
    }
}

impl Drop for AuthorizedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server as an inline spec called `remote`.
fn spec(server: &AuthorizedServer) -> String {
    format!(
        r#"{{"mcpServers":{{"remote":{{"type":"http","url":"{}"}}}}}}"#,
        server.url()
    )
}

/// Runs tether at -vvv with the file secret store and `$BROWSER` set to curl following
/// redirects; asserts no issued token shows in what it printed.
fn tether(sandbox: &Sandbox, args: &[&str]) -> Output {
    tether_in(sandbox, "file", args)
}

/// [`tether`] with `TETHER_SECRET_STORE=store`.
fn tether_in(sandbox: &Sandbox, store: &str, args: &[&str]) -> Output {
    let mut all = vec!["-vvv"];
    all.extend_from_slice(args);
    let output = sandbox
        .tether(&all)
        .env("TETHER_SECRET_STORE", store)
        .env("BROWSER", "curl -s -L -o /dev/null")
        .timeout(Duration::from_secs(60))
        .output()
        .expect("running tether");
    for stream in [&output.stdout, &output.stderr] {
        assert!(
            !tether_testkit::holds(stream, SENTINEL),
            "a token shows in the output of tether {args:?}:\n{}",
            text(stream)
        );
    }
    output
}

/// `tether auth login SERVER` (through `$BROWSER`), which must succeed.
fn log_in(sandbox: &Sandbox, server: &str) -> Output {
    let login = tether(sandbox, &["auth", "login", server]);
    assert_eq!(login.status.code(), Some(0), "{}", text(&login.stderr));
    login
}

fn stored_file(sandbox: &Sandbox) -> String {
    std::fs::read_to_string(sandbox.home().join("secrets.json")).unwrap_or_default()
}

#[test]
fn login_use_logout() {
    let server = AuthorizedServer::start(3600);
    let sandbox = Sandbox::new();
    let url = server.url();
    let spec = spec(&server);

    // No token: `tether test` says what to do, not a generic failure.
    let before = tether(&sandbox, &["test", "--mcp", &spec]);
    assert_eq!(before.status.code(), Some(1));
    let stdout = text(&before.stdout);
    assert!(
        stdout.contains(&format!(
            "needs login: {url} requires OAuth and no token is stored; run `tether auth login {url}`"
        )),
        "{stdout}"
    );
    let status = tether(&sandbox, &["auth", "status", &url]);
    assert_eq!(
        text(&status.stdout),
        format!("{url}: needs OAuth; not logged in (run `tether auth login {url}`)\n")
    );

    // Login: discovery, registration, the browser step through $BROWSER, the code exchange.
    let login = log_in(&sandbox, &url);
    assert!(
        text(&login.stderr).contains(&format!("logged in to {url} (access token expires in ")),
        "{}",
        text(&login.stderr)
    );
    assert_eq!(
        server.stats(),
        serde_json::json!({"codes": 1, "refreshes": 0, "registrations": 1})
    );
    let stored = stored_file(&sandbox);
    assert!(
        stored.contains("SENTINEL-AT-"),
        "the token is in the 0600 file"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(sandbox.home().join("secrets.json"))
            .expect("the secrets file")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);

    // Use: the token goes out as a bearer header; an hour from expiry it is not refreshed.
    let used = tether(&sandbox, &["test", "--mcp", &spec]);
    assert_eq!(used.status.code(), Some(0), "{}", text(&used.stderr));
    assert!(text(&used.stdout).starts_with("ready   remote  3 tools"));
    let called = tether(
        &sandbox,
        &[
            "call",
            "--mcp",
            &spec,
            "remote",
            "echo",
            "--args",
            r#"{"text":"hi"}"#,
        ],
    );
    assert_eq!(called.status.code(), Some(0), "{}", text(&called.stderr));
    assert!(text(&called.stdout).contains("hi"));
    assert_eq!(server.stats()["refreshes"], 0);
    assert_eq!(stored_file(&sandbox), stored, "nothing was stored again");

    // Logout deletes the tokens; a second logout finds none.
    let logout = tether(&sandbox, &["auth", "logout", &url]);
    assert_eq!(logout.status.code(), Some(0), "{}", text(&logout.stderr));
    assert!(!stored_file(&sandbox).contains(SENTINEL));
    let again = tether(&sandbox, &["auth", "logout", &url]);
    assert_eq!(again.status.code(), Some(1));
    let status = tether(&sandbox, &["auth", "status", &url]);
    assert!(text(&status.stdout).contains("not logged in"));
}

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

#[test]
fn no_browser_reads_the_pasted_redirect() {
    let server = AuthorizedServer::start(3600);
    let sandbox = Sandbox::new();
    let url = server.url();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("tether"))
        .args(["-vvv", "auth", "login", &url, "--no-browser"])
        .env("TETHER_HOME", sandbox.home())
        .env("TETHER_SECRET_STORE", "file")
        .env("NO_COLOR", "1")
        .env_remove("BROWSER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tether auth login --no-browser");
    // The authorization URL is the stderr line that starts with the authorize endpoint.
    let stderr = child.stderr.take().expect("its stderr");
    let mut lines = std::io::BufReader::new(stderr).lines();
    let authorize = format!("{}/authorize?", server.origin);
    let mut seen = Vec::new();
    let address = loop {
        let line = lines
            .next()
            .expect("the authorization URL before stderr ends")
            .expect("reading stderr");
        if line.starts_with(&authorize) {
            break line;
        }
        seen.push(line);
    };
    // Follow the authorization URL by hand: the Location is the redirect to paste.
    let path = address
        .strip_prefix(&server.origin)
        .expect("the authorize path");
    let origin_host = server.origin.strip_prefix("http://").expect("http");
    let mut stream = std::net::TcpStream::connect(origin_host).expect("connecting");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {origin_host}\r\nconnection: close\r\n\r\n"
    )
    .expect("sending");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("reading");
    let location = response
        .lines()
        .find_map(|line| line.strip_prefix("location: "))
        .expect("a redirect")
        .to_owned();
    let mut stdin = child.stdin.take().expect("its stdin");
    writeln!(stdin, "{location}").expect("pasting the redirect URL");
    drop(stdin);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().expect("waiting for tether");
    let all = format!("{}\n{}", seen.join("\n"), rest.join("\n"));
    assert!(status.success(), "{all}");
    assert!(!all.contains(SENTINEL), "{all}");
    assert!(all.contains(&format!("logged in to {url}")), "{all}");
    assert_eq!(server.stats()["codes"], 1);
    // A pasted redirect with a wrong state is refused.
    let wrong = crate::support::Sandbox::new();
    let output = wrong
        .tether(&["auth", "login", &url, "--no-browser"])
        .env("TETHER_SECRET_STORE", "file")
        .write_stdin("http://127.0.0.1:1/callback?code=x&state=forged\n")
        .timeout(Duration::from_secs(30))
        .output()
        .expect("running tether");
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("state does not match"));
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

/// With the OS credential store (a Secret Service; `.ci/with-secret-service`): the tokens go
/// there, no file is written, and a run finds them.
#[test]
fn login_use_logout_in_the_secret_service() {
    if !crate::stored::secret_service_or_skip() {
        return;
    }
    let server = AuthorizedServer::start(3600);
    let sandbox = Sandbox::new();
    let url = server.url();
    let spec = spec(&server);
    let login = tether_in(&sandbox, "keyring", &["auth", "login", &url]);
    assert_eq!(login.status.code(), Some(0), "{}", text(&login.stderr));
    assert!(!sandbox.home().join("secrets.json").exists());
    let used = tether_in(&sandbox, "keyring", &["test", "--mcp", &spec]);
    assert_eq!(used.status.code(), Some(0), "{}", text(&used.stderr));
    let status = tether_in(&sandbox, "keyring", &["auth", "status", &url]);
    assert!(
        text(&status.stdout).contains("; logged in (access token expires in "),
        "{}",
        text(&status.stdout)
    );

    // `secrets move` moves the tokens too; runs find them where they went.
    let listed = tether_in(&sandbox, "keyring", &["secrets", "list"]);
    assert!(
        text(&listed.stdout).contains(&format!("{url}  ")),
        "{}",
        text(&listed.stdout)
    );
    assert!(text(&listed.stdout).contains("OAUTH  keyring (OS credential store)"));
    let moved = tether_in(&sandbox, "keyring", &["secrets", "move", "file"]);
    assert_eq!(moved.status.code(), Some(0), "{}", text(&moved.stderr));
    assert!(
        text(&moved.stderr).contains("moved 1 value into the file"),
        "{}",
        text(&moved.stderr)
    );
    assert!(stored_file(&sandbox).contains("SENTINEL-AT-"));
    let used = tether_in(&sandbox, "keyring", &["test", "--mcp", &spec]);
    assert_eq!(used.status.code(), Some(0), "{}", text(&used.stderr));
    let moved = tether_in(&sandbox, "keyring", &["secrets", "move", "keyring"]);
    assert!(
        text(&moved.stderr).contains("moved 1 value into the keyring"),
        "{}",
        text(&moved.stderr)
    );
    assert!(!stored_file(&sandbox).contains(SENTINEL));

    let logout = tether_in(&sandbox, "keyring", &["auth", "logout", &url]);
    assert_eq!(logout.status.code(), Some(0), "{}", text(&logout.stderr));
    let after = tether_in(&sandbox, "keyring", &["test", "--mcp", &spec]);
    assert_eq!(after.status.code(), Some(1));
    assert!(text(&after.stdout).contains("needs login"));
}

/// `tether auth login NAME`: a local installation's name stands for its URL.
#[test]
fn login_by_installation_name() {
    let server = AuthorizedServer::start(3600);
    let sandbox = Sandbox::new();
    let url = server.url();
    let from = format!(r#"{{"type":"http","url":"{url}"}}"#);
    let install = tether(&sandbox, &["install", "remote", "--from", &from]);
    assert_eq!(install.status.code(), Some(0), "{}", text(&install.stderr));
    let login = tether(&sandbox, &["auth", "login", "remote"]);
    assert_eq!(login.status.code(), Some(0), "{}", text(&login.stderr));
    assert!(text(&login.stderr).contains(&format!("logged in to {url}")));
    let used = tether(&sandbox, &["test", "--mcp", "remote"]);
    assert_eq!(used.status.code(), Some(0), "{}", text(&used.stderr));
    let logout = tether(&sandbox, &["auth", "logout", "remote"]);
    assert_eq!(logout.status.code(), Some(0), "{}", text(&logout.stderr));
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
/// The timeout is 10 s, not less: the step-up has to begin (the 403 come back) before it
/// runs out, and a loaded 2-core CI machine once took more than 3 s to get there.
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
            "10",
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

/// Client-id metadata documents: with a document URL configured (flag or
/// config.toml) and a server that supports them, the URL is the client id and nothing is
/// registered; a server without support gets dynamic registration; a URL that cannot be one
/// is refused before anything is sent.
#[test]
fn a_client_metadata_document_url_is_the_client_id_where_supported() {
    const DOCUMENT: &str = "https://tether.example/oauth/client.json";
    let server = AuthorizedServer::start_with(3600, &["--oauth-cimd"]);
    let url = server.url();
    let sandbox = Sandbox::new();
    let login = tether(
        &sandbox,
        &["auth", "login", &url, "--client-metadata-url", DOCUMENT],
    );
    assert_eq!(login.status.code(), Some(0), "{}", text(&login.stderr));
    assert_eq!(
        server.stats(),
        serde_json::json!({"codes": 1, "refreshes": 0, "registrations": 0})
    );
    let used = tether(&sandbox, &["test", "--mcp", &spec(&server)]);
    assert_eq!(used.status.code(), Some(0), "{}", text(&used.stderr));

    // From config.toml.
    let configured = Sandbox::new();
    std::fs::create_dir_all(configured.home()).expect("creating TETHER_HOME");
    std::fs::write(
        configured.home().join("config.toml"),
        format!("oauth_client_metadata_url = \"{DOCUMENT}\"\n"),
    )
    .expect("writing config.toml");
    let login = tether(&configured, &["auth", "login", &url]);
    assert_eq!(login.status.code(), Some(0), "{}", text(&login.stderr));
    assert_eq!(server.stats()["registrations"], 0);
    assert_eq!(server.stats()["codes"], 2);

    // A server without support: dynamic registration.
    let plain = AuthorizedServer::start(3600);
    let login = tether(
        &sandbox,
        &[
            "auth",
            "login",
            &plain.url(),
            "--client-metadata-url",
            DOCUMENT,
        ],
    );
    assert_eq!(login.status.code(), Some(0), "{}", text(&login.stderr));
    assert_eq!(plain.stats()["registrations"], 1);

    let refused = tether(
        &sandbox,
        &[
            "auth",
            "login",
            &url,
            "--client-metadata-url",
            "http://tether.example/c.json",
        ],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("must be https, with a path, without a fragment"),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(server.stats()["codes"], 2);
}

/// `tether auth status` without a server: every installed remote server (by
/// name) and every other server with stored tokens, logged in or not, with expiry; a server that needs no
/// token and has none is left out; `secrets list` shows the stored tokens (never a value).
#[test]
fn status_without_a_server_lists_every_server_with_auth() {
    // 30 s: within the refresh margin from the start, so a run would refresh it; a status
    // must not.
    let installed = AuthorizedServer::start(30);
    let inline = AuthorizedServer::start(3600);
    let pending = AuthorizedServer::start(3600);
    let plain = AuthorizedServer::open();
    let sandbox = Sandbox::new();
    for (name, url) in [
        ("remote", installed.url()),
        ("pending", pending.url()),
        ("open", plain.url()),
    ] {
        let from = format!(r#"{{"type":"http","url":"{url}"}}"#);
        let install = tether(&sandbox, &["install", name, "--from", &from]);
        assert_eq!(install.status.code(), Some(0), "{}", text(&install.stderr));
    }
    for server in ["remote", &inline.url()] {
        let login = tether(&sandbox, &["auth", "login", server]);
        assert_eq!(login.status.code(), Some(0), "{}", text(&login.stderr));
    }

    let status = tether(&sandbox, &["auth", "status"]);
    assert_eq!(status.status.code(), Some(0), "{}", text(&status.stderr));
    let stdout = text(&status.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    let (remote, pending_url, inline_url) = (installed.url(), pending.url(), inline.url());
    // Installed servers by name, then servers with tokens only.
    assert_eq!(
        lines[0],
        format!(
            "{pending_url} (installed as pending): needs OAuth; not logged in (run `tether auth login {pending_url}`)"
        )
    );
    assert!(
        lines[1].starts_with(&format!(
            "{remote} (installed as remote): needs OAuth; logged in (access token expires in "
        )),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with(&format!(
            "{inline_url}: needs OAuth; logged in (access token expires in "
        )),
        "{stdout}"
    );

    let json = tether(&sandbox, &["auth", "status", "--json"]);
    let value: Value = serde_json::from_slice(&json.stdout).expect("status --json is JSON");
    let servers = value["servers"].as_array().expect("a servers array");
    assert_eq!(servers.len(), 3);
    assert_eq!(servers[1]["installations"], serde_json::json!(["remote"]));
    assert_eq!(servers[0]["logged_in"], false);
    assert_eq!(servers[2]["refreshable"], true);
    assert_eq!(
        installed.stats()["refreshes"],
        0,
        "auth status refreshed a stored token"
    );

    let listed = tether(&sandbox, &["secrets", "list"]);
    let stdout = text(&listed.stdout);
    for url in [&remote, &inline_url] {
        let row = stdout
            .lines()
            .find(|line| line.starts_with(url.as_str()))
            .unwrap_or_else(|| panic!("no row for {url}:\n{stdout}"));
        assert!(row.contains("  OAUTH  file "), "{row}");
    }
}

/// The platform opener: with `$BROWSER` unset, `xdg-open URL` opens the
/// authorization page (here an `xdg-open` of ours on PATH that follows it with curl) and the
/// URL is printed too; without any opener the URL is printed and the wait times out.
#[cfg(target_os = "linux")]
#[test]
fn without_browser_the_platform_opener_opens_the_page() {
    use std::os::unix::fs::PermissionsExt as _;
    let server = AuthorizedServer::start(3600);
    let url = server.url();
    let sandbox = Sandbox::new();
    let bin = sandbox.path("bin");
    std::fs::create_dir_all(&bin).expect("creating the bin directory");
    let opener = bin.join("xdg-open");
    std::fs::write(&opener, "#!/bin/sh\nexec curl -s -L -o /dev/null \"$1\"\n")
        .expect("writing xdg-open");
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755))
        .expect("making it executable");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // `tether -vvv auth login URL --timeout SECS` without $BROWSER, with PATH.
    let log_in = |timeout: &str, path: &str| {
        sandbox
            .tether(&["-vvv", "auth", "login", &url, "--timeout", timeout])
            .env("TETHER_SECRET_STORE", "file")
            .env_remove("BROWSER")
            .env("PATH", path)
            .timeout(Duration::from_secs(60))
            .output()
            .expect("running tether")
    };
    let login = log_in("20", &path);
    let stderr = text(&login.stderr);
    assert_eq!(login.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "opening the authorization page with xdg-open; if no browser opens, open this URL:"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{}/authorize?", server.origin)),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("logged in to {url}")), "{stderr}");
    assert!(!stderr.contains(SENTINEL), "{stderr}");

    // No opener on PATH: the URL is printed, and nothing comes back within the timeout.
    let empty = sandbox.path("empty");
    std::fs::create_dir_all(&empty).expect("creating an empty directory");
    let alone = log_in("1", &empty.to_string_lossy());
    let stderr = text(&alone.stderr);
    assert_eq!(alone.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("Open this URL in a browser to log in:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("no authorization redirect came back within 1 s"),
        "{stderr}"
    );
    assert_eq!(server.stats()["codes"], 1);
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

/// A secret in a remote server's URL (a stored `{{KEY}}` in its query) is masked wherever the
/// OAuth paths show that URL: the `needs login` reason of `tether test` and `auth status`.
#[test]
fn a_secret_in_the_server_url_is_masked_in_oauth_messages() {
    let server = AuthorizedServer::start(3600);
    let sandbox = Sandbox::new();
    let secret = "url-sentinel-$HOME-\"q\"";
    let from = format!(
        r#"{{"type":"http","url":"{}?k={{{{KEY}}}}"}}"#,
        server.url()
    );
    let install = sandbox
        .tether(&[
            "install",
            "keyed",
            "--from",
            &from,
            "--secret",
            "KEY=env:URL_KEY",
        ])
        .env("TETHER_SECRET_STORE", "file")
        .env("URL_KEY", secret)
        .output()
        .expect("running tether install");
    assert_eq!(install.status.code(), Some(0), "{}", text(&install.stderr));
    let encoded = "url-sentinel-%24HOME-%22q%22";
    for args in [
        vec!["test", "--mcp", "keyed"],
        vec!["auth", "status", "keyed"],
        vec!["auth", "status"],
        vec!["auth", "status", "--json"],
    ] {
        let out = tether(&sandbox, &args);
        for stream in [text(&out.stdout), text(&out.stderr)] {
            assert!(
                !stream.contains("url-sentinel") && !stream.contains(encoded),
                "tether {args:?} showed the URL's secret:\n{stream}"
            );
        }
    }
    let out = tether(&sandbox, &["test", "--mcp", "keyed"]);
    assert!(
        text(&out.stdout).contains("needs login:"),
        "{}",
        text(&out.stdout)
    );
}

/// A hostile authorization server on loopback: a resource at `/mcp` that asks for a token, its
/// protected resource metadata naming this origin, and authorization server metadata holding
/// `issuer` and `authorization_endpoint` as given. Each request is logged (`METHOD PATH`).
struct HostileAuthorizationServer {
    origin: String,
    requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl HostileAuthorizationServer {
    fn start(issuer: Option<&str>, authorization_endpoint: &str) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding the server");
        let origin = format!("http://{}", listener.local_addr().expect("its address"));
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = std::sync::Arc::clone(&requests);
        let mut metadata = serde_json::json!({
            "authorization_endpoint": authorization_endpoint,
            "token_endpoint": format!("{origin}/token"),
            "registration_endpoint": format!("{origin}/register"),
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
        });
        metadata["issuer"] = issuer.map_or_else(|| Value::String(origin.clone()), Value::from);
        let resource = serde_json::json!({
            "resource": format!("{origin}/mcp"),
            "authorization_servers": [origin],
        });
        let own = origin.clone();
        // The thread ends with the test process; every connection gets one answer and closes.
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut reader = std::io::BufReader::new(stream);
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let mut length = 0_usize;
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0_u8; length.min(1 << 20)];
                let _ = reader.read_exact(&mut body);
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap_or_default().to_owned();
                let path = parts.next().unwrap_or_default().to_owned();
                log.lock()
                    .expect("the log")
                    .push(format!("{method} {path}"));
                let (status, extra, text) = if path.starts_with("/mcp") {
                    (
                        "401 Unauthorized",
                        format!(
                            "WWW-Authenticate: Bearer resource_metadata=\"{own}/.well-known/oauth-protected-resource/mcp\"\r\n"
                        ),
                        String::new(),
                    )
                } else if path.starts_with("/.well-known/oauth-protected-resource") {
                    ("200 OK", String::new(), resource.to_string())
                } else if path.starts_with("/.well-known/oauth-authorization-server")
                    || path.starts_with("/.well-known/openid-configuration")
                {
                    ("200 OK", String::new(), metadata.to_string())
                } else if path.starts_with("/register") {
                    (
                        "201 Created",
                        String::new(),
                        serde_json::json!({"client_id": "hostile-client", "redirect_uris": []})
                            .to_string(),
                    )
                } else {
                    ("404 Not Found", String::new(), String::new())
                };
                let mut stream = reader.into_inner();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        Self { origin, requests }
    }

    fn url(&self) -> String {
        format!("{}/mcp", self.origin)
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("the log").clone()
    }
}

/// `auth login` hands the browser only an https URL or an http one on loopback, and only from
/// metadata that names the issuer it was fetched for: a `file:`,
/// `javascript:` or `vscode:` authorization endpoint, or metadata of another issuer, stops the
/// login before any browser opens or any client is registered.
#[test]
fn login_opens_no_browser_for_a_hostile_authorization_server() {
    use std::os::unix::fs::PermissionsExt as _;
    let sandbox = Sandbox::new();
    let opened = sandbox.path("browser-opened");
    let browser = sandbox.path("browser");
    std::fs::write(
        &browser,
        format!("#!/bin/sh\necho \"$@\" >> '{}'\n", opened.display()),
    )
    .expect("writing the browser");
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755))
        .expect("making it executable");
    let cases: [(Option<&str>, &str, &str); 4] = [
        (None, "file:///etc/passwd", "authorization_endpoint"),
        (
            None,
            "javascript:alert(document.cookie)",
            "authorization_endpoint",
        ),
        (None, "vscode://evil/authorize", "authorization_endpoint"),
        (
            Some("http://127.0.0.1:9/other-issuer"),
            "http://127.0.0.1:9/authorize",
            "names another issuer (http://127.0.0.1:9/other-issuer)",
        ),
    ];
    for (issuer, endpoint, expected) in cases {
        let server = HostileAuthorizationServer::start(issuer, endpoint);
        let out = sandbox
            .tether(&["-vvv", "auth", "login", &server.url(), "--timeout", "20"])
            .env("TETHER_SECRET_STORE", "file")
            .env("BROWSER", &browser)
            .timeout(Duration::from_secs(60))
            .output()
            .expect("running tether auth login");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{endpoint}: {stderr}");
        assert!(stderr.contains(expected), "{endpoint}: {stderr}");
        assert!(
            !opened.exists(),
            "{endpoint}: a browser was opened with {:?}",
            std::fs::read_to_string(&opened)
        );
        let requests = server.requests();
        assert!(
            requests
                .iter()
                .any(|r| r.contains("/.well-known/oauth-authorization-server")),
            "{endpoint}: the metadata was read: {requests:?}"
        );
        assert!(
            !requests.iter().any(|r| r.starts_with("POST /register")),
            "{endpoint}: a client was registered with a hostile server: {requests:?}"
        );
    }
}

/// Two `tether auth login`s to one server at the same time share one flow (the store's login
/// lock): the first holds its browser step until the second says it is waiting; one
/// registration and one code in all, both succeed, and the second uses the first's tokens.
#[test]
fn two_concurrent_logins_share_one_flow() {
    let server = AuthorizedServer::start(3600);
    let sandbox = Sandbox::new();
    let url = server.url();
    let opened = sandbox.home().join("browser-opened");
    let go = sandbox.home().join("browser-go");
    // The first login's browser: says it was opened, then waits (bounded) for the test's go.
    let held_browser = format!(
        "touch '{}'; for i in $(seq 1200); do [ -e '{}' ] && break; sleep 0.05; done; curl -s -L -o /dev/null",
        opened.display(),
        go.display()
    );
    let spawn = |browser: &str| {
        sandbox
            .runner()
            .command(&["auth", "login", &url, "--timeout", "60"])
            .env("TETHER_SECRET_STORE", "file")
            .env("BROWSER", browser)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting tether auth login")
    };
    let first = spawn(&held_browser);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !opened.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the first login never opened its browser"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut second = spawn("curl -s -L -o /dev/null");
    // Its stderr, line by line, until it says it waits for the other login.
    let stderr = second.stderr.take().expect("its stderr");
    let (read, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if read.send(line).is_err() {
                break;
            }
        }
    });
    let mut said = Vec::new();
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("the second login never said it waits: {said:?}"));
        let waiting = line.contains(&format!(
            "another tether process is logging in to {url}: waiting for it to finish"
        ));
        said.push(line);
        if waiting {
            break;
        }
    }
    std::fs::write(&go, "").expect("releasing the first browser");
    let first = first.wait_with_output().expect("the first login");
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert!(
        text(&first.stderr).contains(&format!("logged in to {url}")),
        "{}",
        text(&first.stderr)
    );
    let status = second.wait().expect("the second login");
    reader.join().expect("the stderr reader");
    said.extend(lines.try_iter());
    assert_eq!(status.code(), Some(0), "{said:?}");
    assert!(
        said.iter()
            .any(|line| line.contains(&format!("logged in by the other tether process to {url}"))),
        "{said:?}"
    );
    assert_eq!(
        server.stats(),
        serde_json::json!({"codes": 1, "refreshes": 0, "registrations": 1}),
        "one flow in all"
    );
    // The stored token works.
    let used = tether(&sandbox, &["test", "--mcp", &spec(&server)]);
    assert_eq!(used.status.code(), Some(0), "{}", text(&used.stderr));
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
