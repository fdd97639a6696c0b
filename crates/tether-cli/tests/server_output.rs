//! What servers send, as every command prints it: `tether call`, `tether test` and `tether
//! serve` mask the same way (the driver masks every answer and every tool definition), in every
//! form a hostile server may print a value in; a one-character secret breaks nothing; a
//! server's control characters reach no terminal raw.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use base64::Engine as _;
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use tether_testkit::{Tether, json_str, test_server_bin};

/// Hostile: `$HOME`, `$$`, `${X}`, `%41`, quotes, a backslash, `{{x}}`, HTML specials,
/// non-ASCII that NFD decomposes. `S3cr3t` marks it in every form but base64.
const SECRET: &str = "rf-S3cr3t $HOME $$ ${X} %41 \"q\" \\ {{x}} <a&b> 'sq' é";
const MASK: &str = "********";

fn tether(dir: &Path) -> Tether {
    Tether::new(env!("CARGO_BIN_EXE_tether"), dir.join("home")).current_dir(dir)
}

/// A one-server spec whose server reflects `REFLECTED` (the secret `TOKEN`) and `args`.
fn reflecting_spec(args: &[&str]) -> String {
    let mut all = vec!["--reflect-env", "REFLECTED"];
    all.extend_from_slice(args);
    let args: Vec<String> = all.iter().map(|a| json_str(a)).collect();
    format!(
        r#"{{"srv": {{"command": {}, "args": [{}], "env": {{"REFLECTED": "{{{{TOKEN}}}}"}}}}}}"#,
        json_str(&test_server_bin().to_string_lossy()),
        args.join(", ")
    )
}

fn run(dir: &Path, args: &[&str], secret: &str) -> Output {
    tether(dir)
        .env("REFLECT_SRC", secret)
        .command(args)
        .output()
        .expect("running tether")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether `output` shows the secret in any form: `S3cr3t` in any case, or a base64 string
/// (of at least 16 characters) that decodes to text holding it.
fn shows_secret(output: &str) -> bool {
    if output.to_lowercase().contains("s3cr3t") {
        return true;
    }
    output
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '/' || c == '='))
        .filter(|word| word.len() >= 16)
        .filter_map(|word| base64::engine::general_purpose::STANDARD.decode(word).ok())
        .any(|bytes| text(&bytes).to_lowercase().contains("s3cr3t"))
}

/// `tether call --json` of `reflect` with `arguments` on `spec`'s server, the secret `TOKEN`
/// being [`SECRET`]: the result.
fn reflected(dir: &Path, spec: &str, arguments: &str) -> Value {
    let args = [
        "call",
        "--json",
        "--mcp",
        spec,
        "srv",
        "reflect",
        "--args",
        arguments,
        "--secret",
        "TOKEN=env:REFLECT_SRC",
    ];
    let out = run(dir, &args, SECRET);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    serde_json::from_str(&stdout).expect("the result as JSON")
}

#[test]
fn call_and_test_mask_every_form_a_server_reflects() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let spec = reflecting_spec(&[]);
    let secret = ["--secret", "TOKEN=env:REFLECT_SRC"];
    for args in [
        vec!["call", "--mcp", &spec, "srv", "reflect"],
        vec!["call", "--json", "--mcp", &spec, "srv", "reflect"],
        vec!["-vvv", "call", "--json", "--mcp", &spec, "srv", "reflect"],
        vec!["test", "--mcp", &spec],
        vec!["test", "--json", "--mcp", &spec],
    ] {
        let args: Vec<&str> = args.iter().copied().chain(secret).collect();
        let out = run(dir.path(), &args, SECRET);
        let (stdout, mut stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{args:?}\n{stdout}\n{stderr}");
        if args[0] == "-vvv" {
            // The -vvv protocol dump shows each half of the value that the server split
            // across two blocks (neither half is the value; see specs/driver/TECH.md).
            let middle = SECRET
                .char_indices()
                .nth(SECRET.chars().count() / 2)
                .map_or(SECRET.len(), |(i, _)| i);
            for half in [&SECRET[..middle], &SECRET[middle..]] {
                let debug = format!("{half:?}");
                stderr = stderr.replace(&debug[1..debug.len() - 1], "[half]");
            }
        }
        assert!(!shows_secret(&stdout), "{args:?} stdout:\n{stdout}");
        assert!(!shows_secret(&stderr), "{args:?} stderr:\n{stderr}");
        assert!(stdout.contains(MASK), "{args:?}: nothing masked?\n{stdout}");
    }
    // Each form was there to be masked: the answer's blocks, one by one.
    let result = reflected(dir.path(), &spec, "{}");
    let blocks = result["content"].as_array().expect("content");
    assert_eq!(blocks.len(), 10, "{result}");
    for block in &blocks[..6] {
        assert!(
            block["text"].as_str().is_some_and(|t| t.contains(MASK)),
            "{block}"
        );
    }
    assert_eq!(blocks[6]["text"], json!(format!("first half: {MASK}")));
    assert_eq!(blocks[7]["text"], json!(format!("{MASK} :second half")));
    let decoded = |encoded: &Value| {
        text(
            &base64::engine::general_purpose::STANDARD
                .decode(encoded.as_str().expect("base64 text"))
                .expect("base64"),
        )
    };
    assert_eq!(decoded(&blocks[8]["data"]), format!("REFLECTED={MASK}\n"));
    assert_eq!(
        decoded(&blocks[9]["resource"]["blob"]),
        format!("REFLECTED={MASK}\n")
    );
    assert_eq!(blocks[8]["type"], json!("image"));
    assert_eq!(
        result["structuredContent"],
        json!({"REFLECTED": MASK, MASK: "REFLECTED"})
    );
}

/// Whether `output` shows the secret in a form made to slip past a masker: with invisible
/// characters inside it or in full-width letters (seen once folded as a reader sees it), in
/// hex, percent-encoded byte by byte, or in URL-safe base64.
fn shows_evasive_secret(output: &str) -> bool {
    let folded: String = output
        .chars()
        .filter(|c| !tether_config::is_invisible(*c))
        .map(|c| match c {
            '\u{ff01}'..='\u{ff5e}' => char::from_u32(u32::from(c) - 0xFEE0).unwrap_or(c),
            other => other,
        })
        .collect();
    let marker = "S3cr3t";
    let hex: String = marker.bytes().map(|b| format!("{b:02x}")).collect();
    let percent: String = marker.bytes().map(|b| format!("%{b:02x}")).collect();
    let lower = folded.to_lowercase();
    shows_secret(&folded)
        || lower.contains(&hex)
        || lower.contains(&percent)
        || folded
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .filter(|word| word.len() >= 16)
            .filter_map(|word| {
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(word)
                    .ok()
            })
            .any(|bytes| text(&bytes).to_lowercase().contains("s3cr3t"))
}

/// What a server does to slip a value past the masking — invisible characters inside it,
/// full-width letters, hex, every byte percent-encoded, base64 at each alignment — is masked
/// too, block by block.
#[test]
fn call_masks_the_forms_a_server_hides_a_value_in() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let result = reflected(dir.path(), &reflecting_spec(&[]), r#"{"as": "evasions"}"#);
    let blocks = result["content"].as_array().expect("content");
    assert_eq!(blocks.len(), 9, "{result}");
    for block in blocks {
        let shown = block["text"].as_str().expect("a text block");
        assert!(shown.contains(MASK), "nothing masked: {shown:?}");
        assert!(!shows_evasive_secret(shown), "{shown:?}");
    }
}

/// A stored secret (in the secret store, referenced by an installation) is masked in what
/// `tether call` prints, as a `--secret` one is.
#[test]
fn call_masks_a_stored_secret_a_server_reflects() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let runner = tether(dir.path()).secret_store("file");
    let spec = reflecting_spec(&[]);
    let value_file = dir.path().join("value");
    std::fs::write(&value_file, SECRET).expect("writing the value");
    let secret = format!("TOKEN=file:{}", value_file.to_string_lossy());
    let install = runner
        .command(&["install", "srv", "--from", &spec, "--secret", &secret])
        .output()
        .expect("running tether install");
    assert_eq!(
        install.status.code(),
        Some(0),
        "{}\n{}",
        text(&install.stdout),
        text(&install.stderr)
    );
    let out = runner
        .command(&["call", "--json", "--mcp", "srv", "srv", "reflect"])
        .output()
        .expect("running tether call");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains(MASK), "{stdout}");
    assert!(!shows_secret(&stdout), "{stdout}");
    assert!(!shows_secret(&stderr), "{stderr}");
}

type Client = RunningService<RoleClient, ()>;

async fn call(client: &Client, name: &str, arguments: Value) -> Value {
    let mut params = CallToolRequestParams::new(name.to_owned());
    if let Value::Object(map) = arguments {
        params = params.with_arguments(map);
    }
    let result = client
        .call_tool(params)
        .await
        .unwrap_or_else(|e| panic!("calling {name} through the gateway: {e}"));
    serde_json::to_value(result).expect("serializing a result")
}

/// With a one-character secret `x`, the gateway still speaks MCP (masking raw JSON once made
/// every answer unreadable: `unknown variant te********t`) and its status reads as written;
/// the `x` a server sends back alone is masked, and the short secret is warned about.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_character_secret_breaks_neither_the_gateway_nor_its_status() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let bin = json_str(&test_server_bin().to_string_lossy());
    let spec = format!(
        r#"{{"srv": {{"command": {bin}, "args": ["--reflect-env", "REFLECTED"], "env": {{"REFLECTED": "{{{{TOKEN}}}}"}}}},
            "quitter": {{"command": {bin}, "args": ["--exit-early", "1"], "env": {{"REFLECTED": "{{{{TOKEN}}}}"}}}}}}"#
    );
    let command = tether(dir.path()).env("REFLECT_SRC", "x").command(&[
        "serve",
        "--wait-for-servers",
        "--mcp",
        &spec,
        "--secret",
        "TOKEN=env:REFLECT_SRC",
    ]);
    let (transport, stderr) = TokioChildProcess::builder(tokio::process::Command::from(command))
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tether serve");
    let client: Client = ().serve(transport).await.expect("initializing");
    let tools = client.list_all_tools().await.expect("tools/list");
    let reflect = tools
        .iter()
        .find(|t| t.name == "srv__reflect")
        .unwrap_or_else(|| panic!("no srv__reflect in {tools:?}"));
    assert_eq!(
        reflect.description.as_deref(),
        Some("Reflects the environment: REFLECTED=******** (every form of it, when called).")
    );
    let echoed = call(&client, "srv__echo", json!({"text": "x marks the text: x"})).await;
    assert_eq!(echoed["isError"], json!(false), "{echoed}");
    assert_eq!(
        echoed["content"],
        json!([{"type": "text", "text": format!("{MASK} marks the text: {MASK}")}])
    );
    let reflected = call(&client, "srv__reflect", json!({})).await;
    assert_eq!(
        reflected["content"][0]["type"],
        json!("text"),
        "{reflected}"
    );
    assert_eq!(
        reflected["content"][0]["text"],
        json!(format!("REFLECTED={MASK}"))
    );
    let status = call(&client, "tether_status", json!({})).await;
    let status_text = status.to_string();
    assert!(
        status_text.contains("exited") && !status_text.contains("e********"),
        "{status}"
    );
    client.cancel().await.expect("closing the client");
    let mut stderr = stderr.expect("piped stderr");
    let mut log = String::new();
    use tokio::io::AsyncReadExt as _;
    let _ = tokio::time::timeout(Duration::from_secs(10), stderr.read_to_string(&mut log)).await;
    assert!(log.contains("shorter than 4 characters"), "{log}");
}

/// Control characters a server writes (to stderr, into a tool description) are shown escaped
/// in `tether test`'s report and in the `-vv` log: none reaches the terminal raw. So are the
/// bidirectional format characters, which reorder what the terminal shows.
#[test]
fn a_servers_control_characters_reach_no_terminal_raw() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let hostile =
        "\u{1b}]0;pwned\u{7}\u{1b}[31mred\rover\u{9b}2J\u{202e}rtl\u{2066}\u{200f}\u{61c}";
    let bin = json_str(&test_server_bin().to_string_lossy());
    let spec = format!(
        r#"{{"talker": {{"command": {bin}, "args": ["--reflect-env", "HOSTILE", "--stderr-env", "HOSTILE"], "env": {{"HOSTILE": {h}}}}},
            "quitter": {{"command": {bin}, "args": ["--stderr-env", "HOSTILE", "--exit-early", "1"], "env": {{"HOSTILE": {h}}}}}}}"#,
        h = json_str(hostile)
    );
    let out = tether(dir.path())
        .command(&["-vv", "test", "--mcp", &spec])
        .output()
        .expect("running tether test");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    for (what, output) in [("report", &stdout), ("log", &stderr)] {
        assert!(
            !output.contains([
                '\u{1b}', '\u{7}', '\r', '\u{9b}', '\u{202e}', '\u{2066}', '\u{200f}', '\u{61c}'
            ]),
            "{what}: {output:?}"
        );
    }
    // The report shows them escaped: the failure's stderr tail and the tool's description.
    let escaped = "HOSTILE=\\x1b]0;pwned\\x07\\x1b[31mred\\rover\\u{9b}2J\\u{202e}rtl\\u{2066}\\u{200f}\\u{61c}";
    assert!(stdout.contains(escaped), "{stdout}");
    assert!(
        stdout.contains("Reflects the environment: HOSTILE=\\x1b]0;pwned"),
        "{stdout}"
    );
    assert!(stderr.contains(escaped), "{stderr}");
}
