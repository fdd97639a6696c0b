//! How a login goes: without a browser (the pasted redirect, the platform opener), the client id
//! (a metadata document URL where supported), a secret in the server URL masked, no browser
//! opened for a hostile authorization server, and one flow for concurrent logins.

use super::*;

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
