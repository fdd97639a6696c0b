//! A remote server's `headersHelper`: a real program (a shell script the test writes) whose
//! JSON output becomes the headers of every request to a real Streamable HTTP test server,
//! run again on a 401 and when the headers are due (a clock the test moves).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::json;
use tether_config::Secrets;
use tether_driver::{HeadersHelper, StartOptions};

use crate::launch::{failure, http_server, start, tools};
use crate::support::call;

/// The token the server wants: hostile to shells, templates and percent-decoding alike.
const FRESH: &str = "fresh-SENTINEL-$HOME-$$-${X}-%41-'\"-\\-{{x}}-ü";

/// Writes a helper script into `dir` that prints `stale.json` on its first run and
/// `fresh.json` after, counting its runs in `runs` and recording the server name and URL it
/// was given in `env.txt`. Returns the config's `headersHelper` words.
fn helper(dir: &Path, stale: &serde_json::Value, fresh: &serde_json::Value) -> Vec<String> {
    std::fs::write(dir.join("stale.json"), stale.to_string()).expect("stale.json");
    std::fs::write(dir.join("fresh.json"), fresh.to_string()).expect("fresh.json");
    let script = dir.join("helper.sh");
    std::fs::write(
        &script,
        r#"cd "$(dirname "$0")"
echo run >> runs
printf '%s %s\n' "$TETHER_MCP_SERVER_NAME" "$CLAUDE_CODE_MCP_SERVER_URL" > env.txt
if [ "$(wc -l < runs)" -ge 2 ]; then cat fresh.json; else cat stale.json; fi
"#,
    )
    .expect("helper.sh");
    vec!["sh".to_owned(), script.display().to_string()]
}

fn runs(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("runs"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// The helper's headers go with every request; the first ones are refused (401), so the
/// helper runs again and the same request is sent once more; later calls reuse the fresh
/// headers without running it. Nothing of the token shows in a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headers_helper_authenticates_and_runs_again_when_refused() {
    let (mut child, url) = http_server(
        &["--require-bearer-env", "UPSTREAM_TOKEN"],
        &[("UPSTREAM_TOKEN", FRESH)],
    )
    .await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let words = helper(
        dir.path(),
        &json!({"Authorization": "Bearer stale-SENTINEL"}),
        &json!({"Authorization": format!("Bearer {FRESH}"), "X-Extra": "1"}),
    );
    let config = json!({"remote": {"type": "http", "url": url, "headersHelper": words}});
    let runtime = start(config.to_string(), StartOptions::default(), &Secrets::new())
        .await
        .expect("starting the servers");
    assert_eq!(
        tools(&runtime.reports()[0].status),
        ["add", "echo", "env_check"]
    );
    assert_eq!(runs(dir.path()), 2, "refused once, then run again");
    for _ in 0..3 {
        let out = call(&runtime, "remote", "add", json!({"a": 2, "b": 40})).await;
        assert_eq!(out["content"][0]["text"], "42");
    }
    assert_eq!(runs(dir.path()), 2, "fresh headers are reused");
    let env = std::fs::read_to_string(dir.path().join("env.txt")).expect("env.txt");
    assert_eq!(env, format!("remote {url}\n"));
    runtime.shutdown().await;
    let _ = child.kill().await;
}

/// A helper that fails, writes no JSON object, or gives a header HTTP forbids fails the
/// server's start with one line naming the helper and the problem, never what it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_headers_helper_fails_the_server_in_words() {
    let (mut child, url) = http_server(
        &["--require-bearer-env", "UPSTREAM_TOKEN"],
        &[("UPSTREAM_TOKEN", FRESH)],
    )
    .await;
    let cases: [(&[&str], &str); 4] = [
        (
            &["sh", "-c", "echo oops-SENTINEL >&2; exit 3"],
            "exited with exit status: 3",
        ),
        (
            &["printf", "not-json-SENTINEL"],
            "did not write a JSON object of headers",
        ),
        (
            &["printf", r#"{"A": 7}"#],
            "gave header 'A' a value that is not a string",
        ),
        (
            &["printf", r#"{"A": "x\\nSENTINEL"}"#],
            "gave header 'A' a value with a character HTTP does not allow",
        ),
    ];
    for (words, expected) in cases {
        let config = json!({"remote": {"type": "http", "url": url, "headersHelper": words}});
        let runtime = start(config.to_string(), StartOptions::default(), &Secrets::new())
            .await
            .expect("starting the servers");
        let reason = failure(&runtime.reports()[0].status);
        assert!(
            reason.contains("the headersHelper of server 'remote'"),
            "{reason}"
        );
        assert!(reason.contains(expected), "{words:?}: {reason}");
        assert!(!reason.contains("SENTINEL"), "{reason}");
    }
    let _ = child.kill().await;
}

fn jwt(exp: i64) -> String {
    let part = |json: String| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
    format!(
        "{}.{}.sig",
        part(r#"{"alg":"none"}"#.to_owned()),
        part(format!(r#"{{"exp":{exp}}}"#))
    )
}

/// Headers are due a minute before their JWT expires (else after five minutes): the helper
/// runs again on the first request after that, on a clock the test moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headers_helper_runs_again_before_its_token_expires() {
    let clock = tether_testkit::ManualClock::new();
    let now = tether_clock::Clock::now_utc(&*clock).unix_timestamp();
    let dir = tempfile::tempdir().expect("a temp dir");
    let token = json!({"Authorization": format!("Bearer {}", jwt(now + 600))});
    let words = helper(dir.path(), &token, &json!({"X-Opaque": "no-expiry"}));
    let helper = HeadersHelper::new("s", None, words, clock.clone());
    let (first, headers) = helper.current().await.expect("headers");
    assert_eq!(headers[0].0, "authorization");
    assert!(headers[0].1.is_sensitive());
    clock.advance(Duration::from_secs(530));
    assert_eq!(helper.current().await.expect("headers").0, first);
    assert_eq!(helper.runs(), 1, "540 s of a 600 s token are used");
    clock.advance(Duration::from_secs(11));
    let (second, headers) = helper.current().await.expect("headers");
    assert_ne!(second, first);
    assert_eq!(headers[0].0, "x-opaque");
    // No expiry to read: five minutes.
    clock.advance(Duration::from_secs(299));
    assert_eq!(helper.current().await.expect("headers").0, second);
    clock.advance(Duration::from_secs(2));
    helper.current().await.expect("headers");
    assert_eq!((helper.runs(), runs(dir.path())), (3, 3));
    // A renewal asked for by two requests refused with the same headers runs it once.
    let (generation, _) = helper.current().await.expect("headers");
    let shared = Arc::new(helper);
    let (a, b) = tokio::join!(shared.renew(generation), shared.renew(generation));
    a.and(b).expect("renewed");
    assert_eq!(shared.runs(), 4);
}
