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

/// Renewal of tokens.
mod renewal;

/// How a login goes.
mod login_flow;
