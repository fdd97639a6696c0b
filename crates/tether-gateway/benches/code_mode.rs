//! Code mode's figures, run by hand (`bench/code-mode.sh` installs the npm servers, builds the
//! release binaries and runs this); prints them for docs/performance.md.
//!
//! 1. Context: three tasks done by calling the tools one by one (what a client without code
//!    mode does) and by one `tether__run_code` script, through `tether serve` in front of real
//!    servers (`@modelcontextprotocol/server-filesystem` over a generated corpus,
//!    server-everything): the bytes of the requests and results that reach the client each
//!    way. Target: ≥ 90% less in code mode on each.
//! 2. The engine's start per run, in process (`tether_code::run` of `return 1`): p50/p99.
//!    Target p50 ≤ 5 ms. Then a whole `tether__run_code` of `return 1` against a
//!    `tether_status` call through the gateway.
//! 3. A scripted call's cost: a script of 200 sequential `add` calls against one of none, per
//!    call, beside a direct `add` call through the gateway. Target ≤ +0.3 ms.
//! 4. Eight 300 ms calls at once from one script (`Promise.all`). Target ≤ 1.2 s.
//! 5. Memory: the gateway's peak RSS while 8 scripts each hold ~32 MiB and wait on a slow
//!    call, over its RSS before, per run. Target ≤ 70 MiB.
//!
//! `TETHER_BENCH_NPM` is the npm prefix holding the two servers (`node_modules/.bin`).

#![allow(clippy::expect_used, reason = "a bench fails loudly")]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};

type Client = RunningService<RoleClient, ()>;

mod common;

use common::{binary, ms, quantile};

fn main() {
    common::with_home(|home| async move { bench(&home).await });
}

fn npm_bin(name: &str) -> PathBuf {
    let prefix = std::env::var_os("TETHER_BENCH_NPM")
        .map(PathBuf::from)
        .expect("TETHER_BENCH_NPM: the npm prefix bench/code-mode.sh installs into");
    let bin = prefix.join("node_modules/.bin").join(name);
    assert!(bin.is_file(), "{} is not installed", bin.display());
    bin
}

/// `tether serve` over stdio with `spec` and `flags` (no sandbox: the filesystem server reads
/// the bench's corpus, named in its arguments), and its process id.
async fn gateway(home: &Path, spec: &str, flags: &[&str]) -> (Client, u32) {
    let mut args = vec!["serve", "--mcp", spec, "--no-pins", "--sandbox", "none"];
    args.extend_from_slice(flags);
    common::stdio_client(&binary("tether", "tether-cli"), &args, home).await
}

/// Calls `tool` with `arguments`: the result, and the bytes of the request's params and the
/// result as they cross to the client (JSON).
async fn call(client: &Client, tool: &str, arguments: Value) -> (Value, usize) {
    let params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    let sent = serde_json::to_string(&params).expect("JSON").len();
    let result = client.call_tool(params).await.expect("a tools/call answer");
    let result = serde_json::to_value(result).expect("JSON");
    let received = result.to_string().len();
    (result, sent + received)
}

fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn run(client: &Client, code: &str) -> (Value, usize) {
    let (result, bytes) = call(client, "tether__run_code", json!({ "code": code })).await;
    assert_ne!(result["isError"], json!(true), "{result}");
    (result, bytes)
}

/// The filesystem corpus: 20 text files of 2 to 40 KiB under `files/`, and 5 repositories'
/// `issues.json` (60 issues each) under `repos/`.
fn corpus(root: &Path) {
    let files = root.join("files");
    std::fs::create_dir_all(&files).expect("files/");
    for i in 0..20usize {
        let line =
            format!("line of file {i}: lorem ipsum dolor sit amet, consectetur adipiscing\n");
        let size = 2 * 1024 + (i * 7919 % 20) * 2 * 1024;
        std::fs::write(
            files.join(format!("note-{i:02}.txt")),
            line.repeat(size / line.len() + 1),
        )
        .expect("a corpus file");
    }
    for r in 0..5usize {
        let repo = root.join("repos").join(format!("repo-{r}"));
        std::fs::create_dir_all(&repo).expect("a repository");
        let issues: Vec<Value> = (0..60usize)
            .map(|n| {
                let topic = if (n + r) % 9 == 0 { "timeout" } else { "rendering" };
                json!({
                    "number": n + 1,
                    "state": if n % 3 == 0 { "closed" } else { "open" },
                    "title": format!("The {topic} problem number {n} in repo {r}"),
                    "body": format!("Steps to reproduce the {topic} issue: open the app, wait, observe. {}", "Details follow. ".repeat(12)),
                    "labels": ["bug", topic],
                })
            })
            .collect();
        std::fs::write(
            repo.join("issues.json"),
            serde_json::to_vec_pretty(&issues).expect("JSON"),
        )
        .expect("issues.json");
    }
}

async fn context(home: &Path) {
    let root = home.join("corpus");
    corpus(&root);
    let root = root.canonicalize().expect("the corpus");
    let spec = json!({"mcpServers": {
        "fs": {"command": npm_bin("mcp-server-filesystem"), "args": [root]},
        "ev": {"command": npm_bin("mcp-server-everything"), "args": ["stdio"]},
    }})
    .to_string();
    let (direct, _) = gateway(home, &spec, &["--tool-mode", "all"]).await;
    let (code, _) = gateway(home, &spec, &["--tool-mode", "code"]).await;
    let files = root.join("files");
    let file_names: Vec<String> = (0..20).map(|i| format!("note-{i:02}.txt")).collect();

    println!("1. context that reaches the client (requests + results, JSON bytes)");
    // Task 1: the 3 longest of 20 files.
    let mut by_hand = 0;
    let mut sizes = Vec::new();
    for name in &file_names {
        let path = files.join(name).to_string_lossy().into_owned();
        let (result, bytes) = call(&direct, "fs__read_text_file", json!({ "path": path })).await;
        by_hand += bytes;
        sizes.push((text(&result).len(), name.clone()));
    }
    sizes.sort();
    let expected: Vec<String> = sizes.iter().rev().take(3).map(|(_, n)| n.clone()).collect();
    let script = format!(
        r#"const dir = {dir};
const names = {names};
const texts = await Promise.all(names.map(n => tools["fs__read_text_file"]({{path: dir + "/" + n}})));
const sized = names.map((n, i) => [texts[i].content ?? texts[i], n]).map(([t, n]) => [typeof t === "string" ? t.length : JSON.stringify(t).length, n]);
sized.sort((a, b) => b[0] - a[0]);
return sized.slice(0, 3).map(s => s[1]);"#,
        dir = json!(files),
        names = json!(file_names),
    );
    let (result, scripted) = run(&code, &script).await;
    let answered: Vec<String> = serde_json::from_str(&text(&result)).expect("a JSON list");
    assert_eq!(answered, expected, "the script's answer");
    report("the 3 longest of 20 files", by_hand, scripted);

    // Task 2: open issues mentioning "timeout" across 5 repositories.
    let mut by_hand = 0;
    let mut expected = Vec::new();
    for r in 0..5 {
        let path = root
            .join(format!("repos/repo-{r}/issues.json"))
            .to_string_lossy()
            .into_owned();
        let (result, bytes) = call(&direct, "fs__read_text_file", json!({ "path": path })).await;
        by_hand += bytes;
        let issues: Vec<Value> = serde_json::from_str(&text(&result)).expect("issues");
        for issue in issues {
            if issue["state"] == "open"
                && issue["title"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("timeout")
            {
                expected.push(format!("repo-{r}#{}", issue["number"]));
            }
        }
    }
    let script = format!(
        r#"const root = {root};
const found = [];
await Promise.all([0, 1, 2, 3, 4].map(async r => {{
  const read = await tools["fs__read_text_file"]({{path: `${{root}}/repos/repo-${{r}}/issues.json`}});
  const issues = JSON.parse(read.content ?? read);
  for (const i of issues) if (i.state === "open" && i.title.includes("timeout")) found.push(`repo-${{r}}#${{i.number}}`);
}}));
return found.sort((a, b) => a.localeCompare(b, "en", {{numeric: true}}));"#,
        root = json!(root),
    );
    let (result, scripted) = run(&code, &script).await;
    let mut answered: Vec<String> = serde_json::from_str(&text(&result)).expect("a JSON list");
    answered.sort();
    expected.sort();
    assert_eq!(answered, expected, "the script's answer");
    report(
        "open issues mentioning \"timeout\" in 5 repositories",
        by_hand,
        scripted,
    );

    // Task 3: the mean humidity over 200 weather records.
    let cities = ["New York", "Chicago", "Los Angeles"];
    let mut by_hand = 0;
    let mut sum = 0.0;
    for i in 0..200 {
        let location = cities[i % 3];
        let (result, bytes) = call(
            &direct,
            "ev__get-structured-content",
            json!({ "location": location }),
        )
        .await;
        by_hand += bytes;
        sum += result["structuredContent"]["humidity"]
            .as_f64()
            .expect("humidity");
    }
    let script = r#"const cities = ["New York", "Chicago", "Los Angeles"];
const records = await Promise.all(Array.from({length: 200}, (_, i) => tools["ev__get-structured-content"]({location: cities[i % 3]})));
return records.reduce((s, r) => s + r.humidity, 0) / records.length;"#;
    let (result, scripted) = run(&code, script).await;
    let mean: f64 = text(&result).parse().expect("a number");
    assert!(
        (mean - sum / 200.0).abs() < 1e-9,
        "{mean} vs {}",
        sum / 200.0
    );
    report("the mean of a field over 200 records", by_hand, scripted);
    let _ = direct.cancel().await;
    let _ = code.cancel().await;
}

fn report(task: &str, by_hand: usize, scripted: usize) {
    println!(
        "   {task}: {by_hand} bytes calling the tools, {scripted} in code mode: {:.1}% less",
        100.0 * (1.0 - scripted as f64 / by_hand as f64)
    );
}

async fn costs(home: &Path) {
    println!("2. the engine's start per run");
    let names = Vec::new();
    let limits = tether_code::Limits::default();
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut starts = Vec::new();
    for index in 0..550 {
        let started = Instant::now();
        let outcome = tether_code::run("return 1;", &names, &limits, &cancel, |_, _, _| async {
            Ok::<Value, String>(Value::Null)
        })
        .await;
        let took = started.elapsed();
        assert_eq!(outcome.answer.as_deref(), Ok("1"));
        if index >= 50 {
            starts.push(took);
        }
    }
    starts.sort();
    println!(
        "   in process (tether_code::run of `return 1`, 500 runs): p50 {}, p99 {}",
        ms(quantile(&starts, 0.5)),
        ms(quantile(&starts, 0.99))
    );

    let program = binary("tether-test-mcp", "tether-test-mcp");
    let spec = json!({"mcpServers": {
        "t": {"command": program},
        "slow": {"command": program, "args": ["--slow-echo", "300"]},
    }})
    .to_string();
    let (client, pid) = gateway(home, &spec, &["--tool-mode", "code"]).await;
    let mut runs = Vec::new();
    let mut status = Vec::new();
    for index in 0..550 {
        let started = Instant::now();
        run(&client, "return 1;").await;
        let a = started.elapsed();
        let started = Instant::now();
        call(&client, "tether_status", json!({})).await;
        let b = started.elapsed();
        if index >= 50 {
            runs.push(a);
            status.push(b);
        }
    }
    runs.sort();
    status.sort();
    println!(
        "   through tether serve: tether__run_code of `return 1` p50 {} vs tether_status p50 {} (+{})",
        ms(quantile(&runs, 0.5)),
        ms(quantile(&status, 0.5)),
        ms(quantile(&runs, 0.5).saturating_sub(quantile(&status, 0.5)))
    );

    println!("3. a scripted call's cost");
    let sequential = "let s = 0; for (let i = 0; i < 200; i++) s += Number(await tools.t__add({a: i, b: 1})); return s;";
    let mut per_call = Vec::new();
    let mut direct = Vec::new();
    for index in 0..55 {
        let started = Instant::now();
        run(&client, "return 0;").await;
        let none = started.elapsed();
        let started = Instant::now();
        let (result, _) = run(&client, sequential).await;
        let many = started.elapsed();
        assert_eq!(text(&result), "20100");
        for _ in 0..20 {
            let started = Instant::now();
            call(&client, "t__add", json!({"a": 1, "b": 2})).await;
            if index >= 5 {
                direct.push(started.elapsed());
            }
        }
        if index >= 5 {
            per_call.push(many.saturating_sub(none) / 200);
        }
    }
    per_call.sort();
    direct.sort();
    println!(
        "   a script's call (200 in a row, per call) p50 {} vs a direct call through the gateway p50 {}: {}",
        ms(quantile(&per_call, 0.5)),
        ms(quantile(&direct, 0.5)),
        signed(quantile(&per_call, 0.5), quantile(&direct, 0.5))
    );

    println!("4. eight 300 ms calls at once");
    let mut together = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        run(&client, "await Promise.all(Array.from({length: 8}, (_, i) => tools.slow__echo({text: String(i)}))); return 'done';").await;
        together.push(started.elapsed());
    }
    together.sort();
    println!(
        "   10 runs: p50 {}, max {}",
        ms(quantile(&together, 0.5)),
        ms(quantile(&together, 1.0))
    );

    println!("5. memory per concurrent run");
    let before = rss_kib(pid, "VmRSS");
    let holding = "const held = []; for (let i = 0; i < 32; i++) held.push('x'.repeat(1 << 20)); await tools.slow__echo({text: 'wait'}); return held.length;";
    let runs = (0..8).map(|_| run(&client, holding));
    let answers = futures_util::future::join_all(runs).await;
    assert!(answers.iter().all(|(result, _)| text(result) == "32"));
    let peak = rss_kib(pid, "VmHWM");
    println!(
        "   RSS before {} MiB, peak with 8 runs holding 32 MiB each {} MiB: {:.1} MiB per run",
        before / 1024,
        peak / 1024,
        (peak.saturating_sub(before)) as f64 / 1024.0 / 8.0
    );
    let _ = client.cancel().await;
}

fn signed(a: Duration, b: Duration) -> String {
    if a >= b {
        format!("+{}", ms(a - b))
    } else {
        format!("-{}", ms(b - a))
    }
}

/// A field of /proc/PID/status, in KiB.
fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("the field")
}

async fn bench(home: &Path) {
    context(home).await;
    costs(home).await;
}
