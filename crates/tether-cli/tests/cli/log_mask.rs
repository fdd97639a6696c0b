//! A secret inside a remote server's URL must not reach stderr in clear (from rmcp's
//! and reqwest's own log lines) or the report in percent-encoded form: every line tether
//! prints, at the most verbose level, must hold no form of it.

use crate::support::{Sandbox, text};

/// Hostile on purpose: space, quote, angle brackets, `$`, `%`, backslash, braces, non-ASCII.
const SENTINEL: &str = "SENT inel\"<x>$HOME%41\\{{y}}é";

/// The forms a library may print the sentinel in (its distinctive part is enough).
const FORMS: [&str; 6] = [
    "SENT inel",
    "SENT%20inel",
    "SENT+inel",
    "sent inel",
    "inel%22",
    "inel\\\"",
];

#[test]
fn a_secret_in_an_unreachable_url_never_reaches_stdout_or_stderr() {
    let sandbox = Sandbox::new();
    let spec = r#"{"x":{"url":"http://127.0.0.1:9/mcp?key={{TOK}}","type":"http"},
                   "y":{"url":"http://127.0.0.1:9/sse/{{TOK}}","type":"sse"}}"#;
    let out = sandbox
        .tether(&[
            "test",
            "-vvv",
            "--timeout",
            "5",
            "--mcp",
            spec,
            "--secret",
            "TOK=env:TETHER_TEST_TOK",
        ])
        .env("TETHER_TEST_TOK", SENTINEL)
        .output()
        .expect("running tether test");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("failed"), "{stdout}");
    assert!(
        stderr.contains("TRACE") || stderr.contains("DEBUG"),
        "-vvv logs: {stderr}"
    );
    for form in FORMS {
        assert!(!stdout.contains(form), "{form:?} on stdout:\n{stdout}");
        assert!(!stderr.contains(form), "{form:?} on stderr:\n{stderr}");
    }
}
