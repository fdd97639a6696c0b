//! `tether setup-mcp` driven by a real MCP client (rmcp) over stdio, against the loopback
//! fixture registry. The entry `io.github.example/web-search` launches (through an `npx`
//! shim) tether-test-mcp with `--expect-env-file SEARCH_API_KEY=…`, which refuses to start
//! unless its environment holds the exact secret: `ok: true` proves the value went from the
//! page (a real HTTP POST) through tether to the server, without the client.

#![allow(
    clippy::expect_used,
    reason = "test helpers outside #[test] fns say what they were doing when they fail"
)]

mod bound;
mod browser;
mod harnesses;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, ElicitationCapability, Implementation, ProtocolVersion,
    UrlElicitationCapability,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tether_testkit::{FixtureRegistry, holds, test_server_bin};

/// The secret the test server insists on; it must appear nowhere but the secret store.
const SENTINEL: &str = "sentinel-Zq8-setup-secret-value";
/// A wrong value (the server refuses to start with it); also a sentinel.
const WRONG: &str = "sentinel-wrong-value-Kp3";

struct Sandbox {
    dir: tempfile::TempDir,
    registry: FixtureRegistry,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        // npx -y web-search-mcp@1.0.0 → the test server, which checks SEARCH_API_KEY. The
        // server and the value it expects sit beside the shim: setup-mcp's installations run
        // sandboxed (`default`), which grants the program's directory and nothing else here.
        let shim = dir.path().join("shim");
        std::fs::create_dir_all(&shim).expect("the shim directory");
        let expected = shim.join("expected-secret");
        std::fs::write(&expected, SENTINEL).expect("writing the expected secret");
        let server = shim.join("tether-test-mcp");
        std::fs::hard_link(test_server_bin(), &server)
            .or_else(|_| std::fs::copy(test_server_bin(), &server).map(|_| ()))
            .expect("the server beside the shim");
        let npx = shim.join("npx");
        std::fs::write(
            &npx,
            format!(
                "#!/bin/sh\n[ \"$1\" = -y ] && [ \"$2\" = web-search-mcp@1.0.0 ] || {{ echo \"unexpected npx $*\" >&2; exit 64; }}\nexec {} --expect-env-file SEARCH_API_KEY={}\n",
                server.display(),
                expected.display()
            ),
        )
        .expect("writing the npx shim");
        std::fs::set_permissions(&npx, std::fs::Permissions::from_mode(0o755))
            .expect("making the shim executable");
        Self {
            dir,
            registry: FixtureRegistry::start(&[]),
        }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("tether-home")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("setup-mcp.log")
    }

    fn path_var(&self) -> String {
        format!(
            "{}:{}",
            self.dir.path().join("shim").display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    fn command(&self, program: &Path, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("TETHER_HOME", self.home())
            .env("TETHER_REGISTRY_URL", &self.registry.url)
            .env("TETHER_SECRET_STORE", "file")
            .env("PATH", self.path_var())
            .env("NO_COLOR", "1")
            .env_remove("SMITHERY_API_KEY")
            .env_remove("TETHER_SERVER_URL")
            .env_remove("RUST_LOG");
        command
    }

    /// `tether setup-mcp -vvv` served to `client`, its stderr in [`Sandbox::log`].
    async fn connect<C: ClientHandler>(&self, client: C) -> RunningService<RoleClient, C> {
        self.connect_with(client, &[]).await
    }

    /// [`Sandbox::connect`] for a 2026-07-28 client (`server/discover`, no `initialize`).
    async fn connect_modern<C: ClientHandler>(&self, client: C) -> RunningService<RoleClient, C> {
        use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
        let transport = self.setup_mcp(&[]);
        let discover = ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        };
        client
            .serve_with_lifecycle(transport, discover)
            .await
            .expect("server/discover")
    }

    /// [`Sandbox::connect`] with more `setup-mcp` flags.
    async fn connect_with<C: ClientHandler>(
        &self,
        client: C,
        flags: &[&str],
    ) -> RunningService<RoleClient, C> {
        client
            .serve(self.setup_mcp(flags))
            .await
            .expect("initialize")
    }

    /// `tether -vvv setup-mcp --timeout 30 FLAGS…` over stdio, its stderr in the log file.
    fn setup_mcp(&self, flags: &[&str]) -> TokioChildProcess {
        let mut args = vec!["-vvv", "setup-mcp", "--timeout", "30"];
        args.extend_from_slice(flags);
        let command = self.command(tether(), &args);
        let log = std::fs::File::create(self.log()).expect("creating the log file");
        let (transport, _) = TokioChildProcess::builder(command)
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting tether setup-mcp");
        transport
    }

    /// What tether wrote under TETHER_HOME, except the secret store's own file.
    fn files_outside_the_secret_store(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut stack = vec![self.home()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.file_name().is_some_and(|n| n != "secrets.json") {
                    bytes.extend(std::fs::read(&path).unwrap_or_default());
                }
            }
        }
        bytes
    }
}

fn tether() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tether"))
}

/// Every tool result's JSON, kept for the sentinel search.
#[derive(Default, Clone)]
struct Transcript(Arc<Mutex<String>>);

impl Transcript {
    fn push(&self, text: &str) {
        self.0.lock().expect("the transcript").push_str(text);
    }
    fn text(&self) -> String {
        self.0.lock().expect("the transcript").clone()
    }
}

async fn call<S: rmcp::service::Service<RoleClient>>(
    client: &RunningService<RoleClient, S>,
    transcript: &Transcript,
    name: &'static str,
    arguments: Value,
) -> CallToolResult {
    let arguments = arguments.as_object().cloned().expect("an object");
    let arguments_shown = arguments.clone();
    let result = client
        .call_tool(CallToolRequestParams::new(name).with_arguments(arguments))
        .await
        .expect("tools/call");
    // What the agent sent and saw, as README's transcript shows it (`--nocapture` prints it).
    transcript.push(&format!(
        "→ {name} {}\n← {}{}\n",
        Value::Object(arguments_shown),
        if result.is_error == Some(true) {
            "error: "
        } else {
            ""
        },
        serde_json::to_string(&result.structured_content.clone().unwrap_or_else(|| {
            serde_json::to_value(&result.content).expect("content as JSON")
        }))
        .expect("a result as JSON")
    ));
    result
}

/// `tool` for the entry with one ref for `key`.
async fn with_ref<S: rmcp::service::Service<RoleClient>>(
    client: &RunningService<RoleClient, S>,
    transcript: &Transcript,
    tool: &'static str,
    key: &str,
    reference: &str,
) -> CallToolResult {
    call(
        client,
        transcript,
        tool,
        json!({"qualified_name": ENTRY, "env_refs": {key: reference}}),
    )
    .await
}

/// `mcp_setup_request_secret` for SEARCH_API_KEY.
async fn request<S: rmcp::service::Service<RoleClient>>(
    client: &RunningService<RoleClient, S>,
    transcript: &Transcript,
    prompt: &str,
) -> CallToolResult {
    call(
        client,
        transcript,
        "mcp_setup_request_secret",
        json!({"qualified_name": ENTRY, "key_name": "SEARCH_API_KEY", "prompt": prompt}),
    )
    .await
}

fn structured(result: &CallToolResult) -> Value {
    assert_ne!(result.is_error, Some(true), "{result:?}");
    result
        .structured_content
        .clone()
        .expect("structured content")
}

fn error_text(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    serde_json::to_string(&result.content).expect("content as JSON")
}

/// A form POST to the page, as a browser on it would send it: the status and the body.
async fn post(url: &str, value: &str, host: Option<&str>, origin: Option<&str>) -> (u16, String) {
    let parsed = reqwest::Url::parse(url).expect("a page URL");
    let own = format!(
        "{}:{}",
        parsed.host_str().expect("a host"),
        parsed.port().expect("a port")
    );
    let mut body = String::from("value=");
    for byte in value.bytes() {
        body.push_str(&format!("%{byte:02X}"));
    }
    let mut request = reqwest::Client::new()
        .post(url)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Host", host.unwrap_or(&own))
        .body(body);
    let origin = origin.map_or_else(|| format!("http://{own}"), str::to_owned);
    if !origin.is_empty() {
        request = request.header("Origin", origin);
    }
    let response = request.send().await.expect("posting the form");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

async fn tool_names<S: rmcp::service::Service<RoleClient>>(
    client: &RunningService<RoleClient, S>,
) -> Vec<String> {
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    names
}

const TOOLS: [&str; 5] = [
    "mcp_setup_get",
    "mcp_setup_install_and_connect",
    "mcp_setup_request_secret",
    "mcp_setup_search",
    "mcp_setup_test_connection",
];

const ENTRY: &str = "io.github.example/web-search";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_url_elicitation_the_agent_passes_the_page_on_and_installs_with_refs_only() {
    let sandbox = Sandbox::new();
    let transcript = Transcript::default();
    let client = sandbox.connect(ClientConfig::default()).await;
    assert_eq!(tool_names(&client).await, TOOLS);

    let found = structured(
        &call(
            &client,
            &transcript,
            "mcp_setup_search",
            json!({"query": "web-search"}),
        )
        .await,
    );
    assert_eq!(found["servers"][0]["name"], ENTRY, "{found}");
    assert_eq!(found["total_pages"], 1, "{found}");

    let got = structured(
        &call(
            &client,
            &transcript,
            "mcp_setup_get",
            json!({"qualified_name": ENTRY}),
        )
        .await,
    );
    // SEARCH_MAX is declared but optional: only the key the server cannot start without.
    assert_eq!(got["required_env_keys"], json!(["SEARCH_API_KEY"]), "{got}");
    assert_eq!(got["detail"]["name"], ENTRY, "{got}");

    // A wrong value first: the test fails, the ref survives the failure.
    let asked = structured(&request(&client, &transcript, "Your search API key").await);
    assert_eq!(asked["status"], "pending", "{asked}");
    let wrong_ref = asked["ref"].as_str().expect("a ref").to_owned();
    let url = asked["url"].as_str().expect("a url").to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert!(
        asked["message"].as_str().expect("a message").contains(&url),
        "{asked}"
    );
    let hex = wrong_ref
        .strip_prefix("secret://")
        .expect("a secret:// ref");
    assert!(
        hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "{wrong_ref}"
    );

    // Still pending: a clear error naming the key and the URL.
    let pending = error_text(
        &with_ref(
            &client,
            &transcript,
            "mcp_setup_test_connection",
            "SEARCH_API_KEY",
            &wrong_ref,
        )
        .await,
    );
    assert!(
        pending.contains("SEARCH_API_KEY") && pending.contains(&url),
        "{pending}"
    );

    // The page: its key, prompt, server and one password field.
    let page = reqwest::get(&url).await.expect("GET the page");
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.expect("the page");
    for part in [
        "SEARCH_API_KEY",
        "Your search API key",
        ENTRY,
        "type=\"password\"",
        "method=\"post\"",
    ] {
        assert!(html.contains(part), "{part} missing from {html}");
    }
    assert!(!html.contains("http"), "no external resource: {html}");

    // Wrong Host, foreign Origin, no Origin: refused, and the nonce stays alive.
    assert_eq!(post(&url, WRONG, Some("evil.example"), None).await.0, 421);
    assert_eq!(
        post(&url, WRONG, None, Some("http://evil.example")).await.0,
        403
    );
    assert_eq!(post(&url, WRONG, None, Some("")).await.0, 403);
    let (status, body) = post(&url, WRONG, None, None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("close this page"), "{body}");
    assert!(!body.contains(WRONG));
    // The nonce is dead.
    assert_eq!(post(&url, WRONG, None, None).await.0, 404);
    assert_eq!(
        reqwest::get(&url).await.expect("GET").status().as_u16(),
        404
    );

    for _ in 0..2 {
        let failed = structured(
            &with_ref(
                &client,
                &transcript,
                "mcp_setup_test_connection",
                "SEARCH_API_KEY",
                &wrong_ref,
            )
            .await,
        );
        assert_eq!(failed["ok"], false, "{failed}");
        assert!(failed["error"].is_string(), "{failed}");
    }
    // A ref is for its key only.
    let wrong_key = error_text(
        &with_ref(
            &client,
            &transcript,
            "mcp_setup_test_connection",
            "SEARCH_MAX",
            &wrong_ref,
        )
        .await,
    );
    assert!(
        wrong_key.contains("SEARCH_MAX") && wrong_key.contains("requested for SEARCH_API_KEY"),
        "{wrong_key}"
    );

    // The right value, entered on the page.
    let asked = structured(&request(&client, &transcript, "Your search API key").await);
    let good_ref = asked["ref"].as_str().expect("a ref").to_owned();
    assert_ne!(good_ref, wrong_ref);
    let url = asked["url"].as_str().expect("a url").to_owned();
    assert_eq!(post(&url, SENTINEL, None, None).await.0, 200);
    let ok = structured(
        &with_ref(
            &client,
            &transcript,
            "mcp_setup_test_connection",
            "SEARCH_API_KEY",
            &good_ref,
        )
        .await,
    );
    assert_eq!(ok["ok"], true, "{ok}");
    // The test-connect ran under the sandbox the installation will be stored with.
    assert_eq!(ok["sandbox"], "default", "{ok}");
    let tools: Vec<&str> = ok["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(tools, ["add", "echo", "env_check"]);

    let installed = structured(
        &with_ref(
            &client,
            &transcript,
            "mcp_setup_install_and_connect",
            "SEARCH_API_KEY",
            &good_ref,
        )
        .await,
    );
    assert_eq!(installed["status"], "installed", "{installed}");
    assert_eq!(installed["sandbox"], "default", "{installed}");
    let uid = installed["server_id"]
        .as_str()
        .expect("a server id")
        .to_owned();
    assert_eq!(uid.len(), 36, "{uid}");
    // Consumed: the ref is gone, and the error says so.
    let consumed = error_text(
        &with_ref(
            &client,
            &transcript,
            "mcp_setup_test_connection",
            "SEARCH_API_KEY",
            &good_ref,
        )
        .await,
    );
    assert!(
        consumed.contains("SEARCH_API_KEY") && consumed.contains("consumed"),
        "{consumed}"
    );
    client.cancel().await.expect("closing the session");

    // The installation runs from the store, with the secret the person typed.
    let out = sandbox
        .command(tether(), &["test", "--mcp", &uid])
        .output()
        .await
        .expect("tether test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let log = std::fs::read_to_string(sandbox.log()).expect("the log");
    assert!(log.contains("mcp_setup_install_and_connect"), "{log}");
    for sentinel in [SENTINEL, WRONG] {
        assert!(
            !transcript.text().contains(sentinel),
            "a tool result holds a secret"
        );
        assert!(!log.contains(sentinel), "the -vvv log holds a secret");
        assert!(!holds(&sandbox.files_outside_the_secret_store(), sentinel));
    }
    assert!(!log.contains(&good_ref), "a whole ref in the log");
    eprintln!("{}", transcript.text());
    let store = std::fs::read_to_string(sandbox.home().join("secrets.json")).expect("the store");
    assert!(store.contains(SENTINEL), "the secret is in the store");
}

/// Lists the tools, gets the entry and requests its key's secret through `client`, whose
/// handler is `person` (who enters the value on the page once asked): the ref, the only field
/// of the answer; the person was asked once, and the page's nonce is dead once the value is in.
async fn entered_by_the_person(
    client: &RunningService<RoleClient, Person>,
    transcript: &Transcript,
    person: &Person,
) -> String {
    assert_eq!(tool_names(client).await, TOOLS);
    structured(
        &call(
            client,
            transcript,
            "mcp_setup_get",
            json!({"qualified_name": ENTRY}),
        )
        .await,
    );
    let asked = structured(&request(client, transcript, "Your search API key").await);
    assert_eq!(
        asked.as_object().map(|o| o.len()),
        Some(1),
        "only the ref: {asked}"
    );
    let urls = person.urls.lock().expect("urls").clone();
    assert_eq!(urls.len(), 1);
    assert_eq!(post(&urls[0], "again", None, None).await.0, 404);
    asked["ref"].as_str().expect("a ref").to_owned()
}

/// A client that declares URL elicitation and, when asked, plays the person: opens the
/// page and submits `value` (or declines; or, with `walks_away`, accepts and never submits).
#[derive(Clone)]
struct Person {
    value: Option<&'static str>,
    urls: Arc<Mutex<Vec<String>>>,
    walks_away: bool,
}

impl Person {
    /// A person who enters `value` when asked.
    fn entering(value: &'static str) -> Self {
        Self {
            value: Some(value),
            urls: Arc::default(),
            walks_away: false,
        }
    }
}

impl ClientHandler for Person {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::UrlElicitationParams { url, message, .. } = request else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        assert!(
            message.contains("SEARCH_API_KEY") && message.contains(&url),
            "{message}"
        );
        self.urls.lock().expect("urls").push(url.clone());
        if self.walks_away {
            return Ok(ElicitResult::new(ElicitationAction::Accept));
        }
        let Some(value) = self.value else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        // The page filled in, then the consent reported: the server finds the value in when
        // the consent reaches it. (A value that comes while the server waits is refs.rs's
        // `wait_submitted` test; here no order is left to timing.)
        let (status, _) = post(&url, value, None, None).await;
        assert_eq!(status, 200);
        Ok(ElicitResult::new(ElicitationAction::Accept))
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation =
            Some(ElicitationCapability::new().with_url(UrlElicitationCapability::new()));
        ClientConfig::new(capabilities, Implementation::new("person", "1.0"))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_url_elicitation_request_secret_returns_once_the_value_is_in() {
    let sandbox = Sandbox::new();
    let transcript = Transcript::default();
    let person = Person::entering(SENTINEL);
    let client = sandbox.connect(person.clone()).await;
    let reference = entered_by_the_person(&client, &transcript, &person).await;

    let installed = structured(
        &with_ref(
            &client,
            &transcript,
            "mcp_setup_install_and_connect",
            "SEARCH_API_KEY",
            &reference,
        )
        .await,
    );
    assert_eq!(installed["status"], "installed", "{installed}");
    client.cancel().await.expect("closing the session");

    let log = std::fs::read_to_string(sandbox.log()).expect("the log");
    assert!(!transcript.text().contains(SENTINEL));
    assert!(!log.contains(SENTINEL));
    assert!(!holds(&sandbox.files_outside_the_secret_store(), SENTINEL));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_elicitation_is_a_clear_error_and_a_failed_install_consumes_the_refs() {
    let sandbox = Sandbox::new();
    let transcript = Transcript::default();
    let client = sandbox
        .connect(Person {
            value: None,
            urls: Arc::default(),
            walks_away: false,
        })
        .await;
    let declined = error_text(&request(&client, &transcript, "Your search API key").await);
    assert!(
        declined.contains("SEARCH_API_KEY") && declined.contains("declined"),
        "{declined}"
    );
    client.cancel().await.expect("closing the session");

    // Without elicitation: a wrong value, install fails, nothing stored, ref consumed.
    let client = sandbox.connect(ClientConfig::default()).await;
    let asked = structured(&request(&client, &transcript, "key").await);
    let reference = asked["ref"].as_str().expect("a ref").to_owned();
    // `tether secrets submit NONCE` does what the page does (value from stdin here).
    let nonce = asked["url"]
        .as_str()
        .and_then(|u| u.rsplit('/').next())
        .expect("a nonce")
        .to_owned();
    let mut submit = sandbox.command(tether(), &["secrets", "submit", &nonce]);
    submit
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = submit.spawn().expect("tether secrets submit");
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(WRONG.as_bytes())
            .await
            .expect("writing the value");
    }
    let out = child
        .wait_with_output()
        .await
        .expect("tether secrets submit");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let failed = error_text(
        &with_ref(
            &client,
            &transcript,
            "mcp_setup_install_and_connect",
            "SEARCH_API_KEY",
            &reference,
        )
        .await,
    );
    assert!(failed.contains("nothing was stored"), "{failed}");
    let again = error_text(
        &with_ref(
            &client,
            &transcript,
            "mcp_setup_test_connection",
            "SEARCH_API_KEY",
            &reference,
        )
        .await,
    );
    assert!(again.contains("consumed"), "{again}");
    client.cancel().await.expect("closing the session");
    let list = sandbox
        .command(tether(), &["list", "--json"])
        .output()
        .await
        .expect("tether list");
    let list: Value = serde_json::from_slice(&list.stdout).unwrap_or(Value::Null);
    assert_eq!(
        list["installations"].as_array().map(Vec::len).unwrap_or(0),
        0,
        "{list}"
    );
    assert!(!transcript.text().contains(WRONG));
    assert!(!holds(&sandbox.files_outside_the_secret_store(), WRONG));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_browser_the_page_takes_the_secret_once_and_refuses_foreign_hosts_and_origins() {
    // `rebound.test` resolves to 127.0.0.1 in this browser only: a DNS-rebinding stand-in.
    let Some(driver) = browser::Driver::start("MAP rebound.test 127.0.0.1").await else {
        return;
    };
    let sandbox = Sandbox::new();
    let transcript = Transcript::default();
    let client = sandbox.connect(ClientConfig::default()).await;
    structured(
        &call(
            &client,
            &transcript,
            "mcp_setup_get",
            json!({"qualified_name": ENTRY}),
        )
        .await,
    );
    let asked = structured(&request(&client, &transcript, "Your search API key").await);
    let reference = asked["ref"].as_str().expect("a ref").to_owned();
    let url = asked["url"].as_str().expect("a url").to_owned();

    // Wrong Host: the same listener reached under another name.
    driver.open(&url.replace("127.0.0.1", "rebound.test")).await;
    let refused = driver.wait_for("Unexpected Host").await;
    assert!(refused.contains("Unexpected Host"), "{refused}");
    assert!(!refused.contains("type=\"password\""), "{refused}");

    // A foreign origin's form posting to the page (a data: page: Origin null).
    let attacker = format!(
        "data:text/html,<form id=f method=post action=\"{url}\"><input name=value value=\"{WRONG}\"></form><script>document.getElementById('f').submit()</script>"
    );
    driver.open(&attacker).await;
    let refused = driver.wait_for("own page").await;
    assert!(
        refused.contains("only accepts submissions from its own page"),
        "{refused}"
    );

    // The person: opens the page, types, submits.
    driver.open(&url).await;
    let page = driver.source().await;
    assert!(
        page.contains("SEARCH_API_KEY") && page.contains(ENTRY),
        "{page}"
    );
    driver.type_into("input[type=password]", SENTINEL).await;
    driver.click("button[type=submit]").await;
    let done = driver.wait_for("close this page").await;
    assert!(done.contains("close this page"), "{done}");
    assert!(!done.contains(SENTINEL), "the answer echoes the value");

    // A second submission: the page is gone.
    driver.open(&url).await;
    let gone = driver.wait_for("no longer valid").await;
    assert!(gone.contains("no longer valid"), "{gone}");
    driver.quit().await;

    // The value the browser sent is the one the server insists on.
    let ok = structured(
        &with_ref(
            &client,
            &transcript,
            "mcp_setup_test_connection",
            "SEARCH_API_KEY",
            &reference,
        )
        .await,
    );
    assert_eq!(ok["ok"], true, "{ok}");
    client.cancel().await.expect("closing the session");
    let log = std::fs::read_to_string(sandbox.log()).expect("the log");
    assert!(!log.contains(SENTINEL) && !transcript.text().contains(SENTINEL));
}

/// `tether setup-mcp --listen 127.0.0.1:0 --token-file …`: its `/mcp` URL, the process, and
/// its stderr (collected in the background).
async fn listen(
    sandbox: &Sandbox,
    token: &str,
) -> (String, tokio::process::Child, Arc<Mutex<String>>) {
    use tokio::io::AsyncBufReadExt;
    let token_file = sandbox.dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).expect("writing the token file");
    let mut command = sandbox.command(
        tether(),
        &[
            "-vvv",
            "setup-mcp",
            "--timeout",
            "30",
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            &token_file.to_string_lossy(),
        ],
    );
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("starting tether setup-mcp --listen");
    let mut lines = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let log = Arc::new(Mutex::new(String::new()));
    let url = loop {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .expect("the listening line within 30 s")
            .expect("reading stderr")
            .expect("tether setup-mcp exited before listening");
        log.lock().expect("the log").push_str(&format!("{line}\n"));
        if let Some(rest) = line.split("MCP on ").nth(1) {
            break rest.split(',').next().expect("a URL").to_owned();
        }
    };
    let collected = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            collected
                .lock()
                .expect("the log")
                .push_str(&format!("{line}\n"));
        }
    });
    (url, child, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_streamable_http_with_a_bearer_token_and_url_elicitation() {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    const TOKEN: &str = "sentinel-bearer-token-0123456789abcdef";
    let sandbox = Sandbox::new();
    let (url, _child, log) = listen(&sandbox, TOKEN).await;
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    let authority = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();

    // Admission: a token, this listener's Host, no foreign Origin.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let http = reqwest::Client::new();
    let send = |headers: Vec<(&'static str, String)>| {
        let mut request = http
            .post(&url)
            .header("Accept", "application/json, text/event-stream")
            .json(&initialize);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        async move { request.send().await.expect("a POST").status().as_u16() }
    };
    let bearer = format!("Bearer {TOKEN}");
    assert_eq!(send(vec![]).await, 401);
    assert_eq!(
        send(vec![(
            "Authorization",
            "Bearer wrong-token-0123456789".into()
        )])
        .await,
        401
    );
    assert_eq!(
        send(vec![
            ("Authorization", bearer.clone()),
            ("Host", "rebound.test".into())
        ])
        .await,
        421
    );
    assert_eq!(
        send(vec![
            ("Authorization", bearer.clone()),
            ("Origin", "http://evil.example".into())
        ])
        .await,
        403
    );
    assert_eq!(send(vec![("Authorization", bearer.clone())]).await, 200);
    // Admitted, but a body that is not one JSON-RPC message: 400 with a JSON-RPC error.
    let malformed = http
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("Authorization", &bearer)
        .body("{\"jsonrpc\": \"2.0\", \"id\": 1,")
        .send()
        .await
        .expect("a POST");
    assert_eq!(malformed.status().as_u16(), 400);
    let error: serde_json::Value = malformed.json().await.expect("a JSON-RPC error");
    assert_eq!(error["error"]["code"], -32700, "{error}");

    let person = Person::entering(SENTINEL);
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.clone()).auth_header(TOKEN),
    );
    let client = person
        .clone()
        .serve(transport)
        .await
        .expect("initialize over HTTP");
    assert_eq!(tool_names(&client).await, TOOLS);
    let transcript = Transcript::default();
    structured(
        &call(
            &client,
            &transcript,
            "mcp_setup_get",
            json!({"qualified_name": ENTRY}),
        )
        .await,
    );
    let asked = structured(&request(&client, &transcript, "Your search API key").await);
    let reference = asked["ref"].as_str().expect("a ref").to_owned();
    // The page shares the MCP port.
    let urls = person.urls.lock().expect("urls").clone();
    assert!(
        urls[0].starts_with(&format!("http://{authority}/secret/")),
        "{urls:?}"
    );
    let ok = structured(
        &with_ref(
            &client,
            &transcript,
            "mcp_setup_test_connection",
            "SEARCH_API_KEY",
            &reference,
        )
        .await,
    );
    assert_eq!(ok["ok"], true, "{ok}");
    let installed = structured(
        &with_ref(
            &client,
            &transcript,
            "mcp_setup_install_and_connect",
            "SEARCH_API_KEY",
            &reference,
        )
        .await,
    );
    assert_eq!(installed["status"], "installed", "{installed}");
    client.cancel().await.expect("closing the session");

    let log = log.lock().expect("the log").clone();
    assert!(log.contains("mcp_setup_install_and_connect"), "{log}");
    for sentinel in [SENTINEL, TOKEN] {
        assert!(!log.contains(sentinel), "the -vvv log holds {sentinel}");
        assert!(!transcript.text().contains(sentinel));
    }
    assert!(!holds(&sandbox.files_outside_the_secret_store(), SENTINEL));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_submit_says_when_no_page_takes_the_value() {
    let sandbox = Sandbox::new();
    let submit = |target: &str| {
        let mut command = sandbox.command(
            tether(),
            &["secrets", "submit", target, "--from", "env:VALUE"],
        );
        command.env("VALUE", WRONG).stdin(Stdio::null());
        command.output()
    };
    let out = submit("not-a-nonce").await.expect("tether secrets submit");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = submit("0123456789abcdef0123456789abcdef")
        .await
        .expect("tether secrets submit");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no tether setup-mcp is running"),
        "{stderr}"
    );

    // A running server, a nonce it never issued.
    let client = sandbox.connect(ClientConfig::default()).await;
    let out = submit("0123456789abcdef0123456789abcdef")
        .await
        .expect("tether secrets submit");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no running tether setup-mcp has a page for that nonce"),
        "{stderr}"
    );
    assert!(!stderr.contains(WRONG));
    client.cancel().await.expect("closing the session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_elicitation_with_no_submission_times_out_naming_the_key() {
    let sandbox = Sandbox::new();
    let transcript = Transcript::default();
    let person = Person {
        value: None,
        urls: Arc::default(),
        walks_away: true,
    };
    let client = sandbox
        .connect_with(person.clone(), &["--elicitation-timeout", "1"])
        .await;
    let started = std::time::Instant::now();
    let timed_out = error_text(&request(&client, &transcript, "key").await);
    assert!(
        timed_out.contains("SEARCH_API_KEY")
            && timed_out.contains("nothing was submitted within 1 s"),
        "{timed_out}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // The page died with the ref.
    let urls = person.urls.lock().expect("urls").clone();
    assert_eq!(post(&urls[0], WRONG, None, None).await.0, 404);
    client.cancel().await.expect("closing the session");
}

/// A 2026-07-28 client that declares URL elicitation in its requests is asked through an
/// `InputRequiredResult` (rmcp's driver hands the URL elicitation to the person and retries
/// with the answer and the sealed state): the ref comes back once the value is in, as over a
/// 2025-11-25 session, and the value is nowhere but the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_client_is_asked_for_the_secret_through_an_input_required_result() {
    let sandbox = Sandbox::new();
    let transcript = Transcript::default();
    let person = Person::entering(SENTINEL);
    let client = sandbox.connect_modern(person.clone()).await;
    let reference = entered_by_the_person(&client, &transcript, &person).await;
    assert!(reference.starts_with("secret://"), "{reference}");
    let tested = with_ref(
        &client,
        &transcript,
        "mcp_setup_test_connection",
        "SEARCH_API_KEY",
        &reference,
    );
    assert_eq!(structured(&tested.await)["ok"], true);
    client.cancel().await.expect("closing the client");
    let log = std::fs::read_to_string(sandbox.log()).expect("the log");
    assert!(!transcript.text().contains(SENTINEL));
    assert!(!log.contains(SENTINEL));
}
