//! The entry page in a real browser: headless Chromium (Debian's `chromium`) driven through
//! `chromedriver` over the W3C WebDriver protocol (a few JSON requests, sent with reqwest).
//! Skipped with the reason when either is missing, except under CI=true, where it fails.

#![allow(
    dead_code,
    reason = "setup-mcp's tests and the gateway's MCP Apps test each use a part"
)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A running chromedriver; killed when dropped.
pub struct Driver {
    child: Child,
    base: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
    session: String,
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

impl Driver {
    /// chromedriver and one Chromium session; `None` (with the reason printed) when they are
    /// not installed outside CI.
    pub async fn start(host_rules: &str) -> Option<Self> {
        let chromium = ["chromium", "chromium-browser"]
            .into_iter()
            .find(|p| on_path(p));
        let (Some(chromium), true) = (chromium, on_path("chromedriver")) else {
            tether_testkit::missing(
                "chromium or chromedriver",
                "apt-get install chromium chromium-driver",
            );
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = http
                .get(format!("{base}/status"))
                .send()
                .await
                .ok()
                .map(|r| r.status().is_success())
                .unwrap_or(false);
            if ready {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not answer in 20 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().expect("a fresh profile directory");
        let binary = which(chromium);
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": binary,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    format!("--user-data-dir={}", profile.path().display()),
                    format!("--host-resolver-rules={host_rules}"),
                ],
            },
        }}});
        let mut driver = Self {
            child,
            base,
            http,
            _profile: profile,
            session: String::new(),
        };
        let answer = driver.send("POST", "/session", Some(capabilities)).await;
        driver.session = answer["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {answer}"))
            .to_owned();
        Some(driver)
    }

    async fn send(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body.unwrap_or_else(|| json!({}))),
        };
        let response = request.send().await.expect("a WebDriver request");
        let value: Value = response.json().await.expect("a WebDriver answer");
        value["value"].clone()
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    /// Opens `url` (waits for the load).
    pub async fn open(&self, url: &str) {
        self.send(
            "POST",
            &self.session_path("/url"),
            Some(json!({ "url": url })),
        )
        .await;
    }

    /// The page's HTML.
    pub async fn source(&self) -> String {
        self.send("GET", &self.session_path("/source"), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits up to 10 s for the page to contain `text`; the page's HTML.
    pub async fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let source = self.source().await;
            if source.contains(text) || Instant::now() > deadline {
                return source;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn element(&self, css: &str) -> String {
        let found = self
            .send(
                "POST",
                &self.session_path("/element"),
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        // The W3C element reference is the one value of the object.
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned()
    }

    /// Types `text` into the element `css`.
    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.send(
            "POST",
            &self.session_path(&format!("/element/{id}/value")),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// Clicks the element `css`.
    pub async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.send(
            "POST",
            &self.session_path(&format!("/element/{id}/click")),
            None,
        )
        .await;
    }

    /// Runs `script` (the body of a function) in the page: what it returns.
    #[allow(
        dead_code,
        reason = "the gateway's MCP Apps test uses it; setup-mcp's do not"
    )]
    pub async fn execute(&self, script: &str) -> Value {
        self.send(
            "POST",
            &self.session_path("/execute/sync"),
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// Ends the session.
    pub async fn quit(&self) {
        self.send("DELETE", &self.session_path(""), None).await;
    }
}

fn which(program: &str) -> String {
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(program))
                .find(|p| p.is_file())
        })
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| program.to_owned())
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
