//! Secret sources, and no secret in any output at -vv.

use crate::support::{Sandbox, config, server_json, text};

const SENTINEL: &str = "sk-CLI-SENTINEL-\"q\\{{x}}";

/// `tether export --format json --mcp SPEC --secret SECRET`.
fn export_with(sandbox: &Sandbox, spec: &str, secret: &str) -> assert_cmd::Command {
    sandbox.tether(&[
        "export", "--format", "json", "--mcp", spec, "--secret", secret,
    ])
}

#[test]
fn literal_secrets_are_refused_with_the_reason() {
    let sandbox = Sandbox::new();
    let spec = config(&[server_json("s", &[], &[])]);
    let out = export_with(&sandbox, &spec, "TOKEN=hunter2-SENTINEL")
        .output()
        .expect("running tether");
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("`ps`") && stderr.contains("TOKEN=env:VAR"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
    let out = export_with(&sandbox, &spec, "TOKEN=prompt")
        .write_stdin("")
        .output()
        .expect("running tether");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("`prompt` needs a terminal"));
    let out = export_with(&sandbox, &spec, "TOKEN=env:TETHER_TEST_UNSET_VAR")
        .output()
        .expect("running tether");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("TETHER_TEST_UNSET_VAR is not set"));
    // An empty value is refused, naming the secret and where it came from.
    for (secret, stdin, from) in [
        (
            "TOKEN=env:TETHER_TEST_EMPTY_VAR",
            "",
            "env:TETHER_TEST_EMPTY_VAR",
        ),
        ("TOKEN=-", "\n", "stdin"),
    ] {
        let out = export_with(&sandbox, &spec, secret)
            .env("TETHER_TEST_EMPTY_VAR", "")
            .write_stdin(stdin)
            .output()
            .expect("running tether");
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            text(&out.stderr).trim_end(),
            format!(
                "error: secret TOKEN: the value from {from} is empty; an empty secret is refused"
            )
        );
    }
}

#[test]
fn every_source_delivers_its_value_exactly() {
    let sandbox = Sandbox::new();
    let spec = config(&[server_json(
        "s",
        &["--a={{A}}", "--b={{B}}", "--c={{C}}", "--d={{D}}"],
        &[],
    )]);
    let file = sandbox.write("b.secret", "from-file \"x\"\n");
    let dotenv = sandbox.write(".env", "D=\"dot\\\\env\"\n");
    let out = sandbox
        .tether(&[
            "export",
            "--format",
            "json",
            "--show-secrets",
            "--mcp",
            &spec,
            "--secret",
            "A=env:SRC_A",
            "--secret",
            &format!("B=file:{file}"),
            "--secret",
            "C=-",
            "--secrets-file",
            &dotenv,
        ])
        .env("SRC_A", "from env {{A}}")
        .write_stdin("from stdin\n")
        .output()
        .expect("running tether");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let value: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("parsing the JSON output");
    assert_eq!(
        value["mcpServers"]["s"]["args"],
        serde_json::json!([
            "--a=from env {{A}}",
            "--b=from-file \"x\"",
            "--c=from stdin",
            "--d=dot\\env"
        ])
    );
}

#[test]
fn no_secret_on_stdout_or_stderr_at_debug_level() {
    let sandbox = Sandbox::new();
    let spec = config(&[
        server_json(
            "talker",
            &["--stderr-env", "API_KEY"],
            &[("API_KEY", "{{TOKEN}}")],
        ),
        server_json(
            "quitter",
            &["--stderr-env", "API_KEY", "--exit-early", "2"],
            &[("API_KEY", "{{TOKEN}}")],
        ),
    ]);
    for args in [
        vec![
            "-vv",
            "test",
            "--mcp",
            spec.as_str(),
            "--secret",
            "TOKEN=env:SENTINEL_SRC",
        ],
        vec![
            "-vvv",
            "run",
            "--mcp",
            spec.as_str(),
            "--secret",
            "TOKEN=env:SENTINEL_SRC",
            "--json",
        ],
        vec![
            "-vv",
            "export",
            "--format",
            "claude",
            "--mcp",
            spec.as_str(),
            "--secret",
            "TOKEN=env:SENTINEL_SRC",
        ],
        vec![
            "-vv",
            "call",
            "--mcp",
            spec.as_str(),
            "--secret",
            "TOKEN=env:SENTINEL_SRC",
            "talker",
            "env_check",
            "--args",
            r#"{"name":"API_KEY"}"#,
        ],
    ] {
        let out = sandbox
            .tether(&args)
            .env("SENTINEL_SRC", SENTINEL)
            .output()
            .expect("running tether");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            !stdout.contains("sk-CLI-SENTINEL") && !stderr.contains("sk-CLI-SENTINEL"),
            "{args:?} leaked:\n{stdout}\n{stderr}"
        );
        assert!(
            stderr.contains("DEBUG") || stderr.contains("TRACE"),
            "{args:?}: no debug logging:\n{stderr}"
        );
    }
    // The secret did reach the server.
    let out = sandbox
        .tether(&[
            "call",
            "--mcp",
            &spec,
            "--secret",
            "TOKEN=env:SENTINEL_SRC",
            "talker",
            "env_check",
            "--args",
            r#"{"name":"API_KEY"}"#,
        ])
        .env("SENTINEL_SRC", SENTINEL)
        .output()
        .expect("running tether");
    assert!(
        text(&out.stdout).contains("\"set\":true"),
        "{}",
        text(&out.stdout)
    );
}

/// A 64 KiB secret full of what every printed form of a value changes (JSON specials, `{{X}}`,
/// `$HOME`, `%41`, quotes, backslashes, non-ASCII, line breaks) is exported whole, byte for
/// byte, and masked in the `-vv` log — in seconds: rendering it took minutes when the masker
/// built a DFA over its forms (16 KiB: over 5 minutes).
#[test]
fn a_64_kib_hostile_secret_is_exported_whole_and_quickly() {
    let sandbox = Sandbox::new();
    let unit =
        "{\"a\":\"$HOME\",\"b\":\"{{X}}\",\"c\":\"%41\",\"d\":\"\\\\ \\\"q\\\" ünï ${X} $$\"}\n";
    let secret = unit.repeat(64 * 1024 / unit.len()).trim_end().to_owned();
    let file = sandbox.write("secret", &secret);
    let spec = config(&[server_json(
        "s",
        &["--key", "{{TOKEN}}"],
        &[("TOKEN", "{{TOKEN}}")],
    )]);
    let started = std::time::Instant::now();
    let out = sandbox
        .tether(&[
            "export",
            "--format",
            "json",
            "--show-secrets",
            "-vv",
            "--mcp",
            &spec,
            "--secret",
            &format!("TOKEN=file:{file}"),
        ])
        .output()
        .expect("running tether");
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // A debug build on a loaded 2-core machine; the release figure is in docs/performance.md.
    assert!(took < std::time::Duration::from_secs(60), "took {took:?}");
    let exported: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let server = &exported["mcpServers"]["s"];
    assert_eq!(server["args"][1].as_str(), Some(secret.as_str()));
    assert_eq!(server["env"]["TOKEN"].as_str(), Some(secret.as_str()));
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("ünï"), "the -vv log shows the secret");
}

/// Every character a shell, a template or a harness could expand or mangle, a newline inside
/// and non-ASCII: what a password manager may hand back.
const HOSTILE: &str = "sk-CMD-SENTINEL $HOME $$ ${X} %41 \"q\" 'q' \\ {{x}}\nline two é✓秘";

/// `--secret NAME=cmd:PROGRAM ARGS…` runs a real program (`cat`, no shell) and delivers its
/// stdout, one trailing newline dropped, byte for byte to the server's environment, at the
/// most verbose log level without the value reaching stdout or stderr.
#[test]
fn a_cmd_secret_is_a_programs_output_byte_exact_and_never_shown() {
    let sandbox = Sandbox::new();
    let source = sandbox.write("password-store", &format!("{HOSTILE}\n"));
    let expected = sandbox.write("expected", HOSTILE);
    let spec = config(&[server_json(
        "s",
        &["--expect-env-file", &format!("API_KEY={expected}")],
        &[("API_KEY", "{{TOKEN}}")],
    )]);
    // The path quoted as a shell would need it (the sandbox path has no quote of its own).
    let command = format!("TOKEN=cmd:cat '{source}'");
    let out = sandbox
        .tether(&["test", "--mcp", &spec, "--secret", &command])
        .env("RUST_LOG", "trace")
        .output()
        .expect("running tether");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for stream in [text(&out.stdout), text(&out.stderr)] {
        assert!(
            !stream.contains("sk-CMD-SENTINEL"),
            "the value was shown:\n{stream}"
        );
    }
}

/// A program that fails is one clear line naming the secret, the program and its exit status;
/// what it printed to stdout (perhaps half a secret) is not shown.
#[test]
fn a_failing_cmd_secret_says_why_without_its_output() {
    let sandbox = Sandbox::new();
    let spec = config(&[server_json("s", &[], &[("API_KEY", "{{TOKEN}}")])]);
    let cases = [
        (
            "TOKEN=cmd:sh -c 'printf sk-FAIL-SENTINEL; exit 3'",
            "secret TOKEN: sh exited with exit status: 3",
        ),
        (
            "TOKEN=cmd:tether-no-such-program x",
            "secret TOKEN: cannot run tether-no-such-program:",
        ),
        (
            "TOKEN=cmd:true",
            "secret TOKEN: the value from cmd:true is empty",
        ),
        (
            "TOKEN=cmd:op read 'unclosed",
            "secret TOKEN: cmd: cannot be split",
        ),
    ];
    for (secret, said) in cases {
        let out = sandbox.run(&["test", "--mcp", &spec, "--secret", secret]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{secret}: {stderr}");
        assert!(stderr.contains(said), "{secret}: {stderr}");
        assert!(!stderr.contains("sk-FAIL-SENTINEL"), "{secret}: {stderr}");
    }
}
