//! The admin CLI and the store on disk: encryption at rest, file modes, keys, secret sources.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use crate::support::{Fixture, ServerProcess, TEST_KEY, add, admin, api_key, run, sentinel};

/// Every byte of every file in `dir` (the database and its `-wal`/`-shm` files).
fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{e}")) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        bytes.extend(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    }
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_keys_and_tokens_are_not_stored_in_clear() {
    let fixture = Fixture::start(&[]).await;
    let data = fixture.data();
    let upstream_secret = sentinel("upstream-secret");
    let captured_literal = sentinel("captured-literal");
    let stdin_secret = sentinel("stdin-secret");
    let secret_file = fixture.dir.path().join("secret.txt");
    std::fs::write(&secret_file, format!("{stdin_secret}-file\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    let host = sentinel("upstream-host");
    let spec = format!(
        r#"{{"url": "https://{host}.example/mcp", "headers": {{"Authorization": "Bearer {{{{UPSTREAM}}}}", "X-Literal": "{captured_literal}", "X-File": "{{{{FROM_FILE}}}}"}}}}"#
    );
    let file_source = format!("FROM_FILE=file:{}", secret_file.display());
    let uid = add(
        &data,
        "remote",
        &spec,
        &["UPSTREAM=env:UP", &file_source],
        "default",
        &[("UP", &upstream_secret)],
    )
    .await;

    // A secret from stdin ('-').
    let command = sentinel("command");
    let stdin_spec = format!(r#"{{"command": "{command}", "env": {{"TOKEN": "{{{{TOKEN}}}}"}}}}"#);
    let args = [
        "admin",
        "--data-dir",
        &data.to_string_lossy(),
        "add",
        "stdin",
        "--from",
        &stdin_spec,
        "--secret",
        "TOKEN=-",
    ];
    let output = run(&args, &[], &format!("{stdin_secret}\n")).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // A minted proxy token is stored hashed too.
    let config = fixture.mint(uid).await;
    let proxy_token = config
        .proxy_token
        .unwrap_or_else(|| panic!("no token"))
        .expose()
        .to_owned();

    let stored = all_bytes(&data);
    assert!(contains(&stored, "remote"), "the store was read");
    // Templates (URL, command) and values are sealed; keys and tokens are hashed.
    for secret in [
        &upstream_secret,
        &captured_literal,
        &stdin_secret,
        &host,
        &command,
        &fixture.api_key,
        &proxy_token,
    ] {
        assert!(!contains(&stored, secret), "{secret} is stored in clear");
    }

    // Private files: the directory 0700, every file 0600.
    let mode = |path: &Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{e}"))
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&data), 0o700);
    for entry in std::fs::read_dir(&data).unwrap_or_else(|e| panic!("{e}")) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }

    // `list` shows names and kinds, never values.
    let list = admin(&data, &["list"], &[]).await;
    assert!(list.starts_with("UID"), "{list}");
    assert!(list.contains(&format!("{uid}  remote  URL")), "{list}");
    assert!(list.contains("stdin") && list.contains("COMMAND"), "{list}");
    for secret in [&upstream_secret, &captured_literal, &stdin_secret] {
        assert!(!list.contains(secret.as_str()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_to_start_without_the_right_key() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let data = dir.path().join("data");
    let data_arg = data.to_string_lossy().into_owned();
    let serve = ["serve", "--listen", "127.0.0.1:0", "--data-dir", &data_arg];

    let output = run(&serve, &[("TETHER_SERVER_KEY", "")], "").await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("TETHER_SERVER_KEY") && stderr.contains("--insecure-dev-key"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "nothing was served");

    let output = run(&serve, &[("TETHER_SERVER_KEY", "too-short")], "").await;
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a valid key"));

    // The data directory remembers its key: another key is refused.
    let _ = api_key(&data, "default").await;
    ServerProcess::start(&data, &[]).await.kill().await;
    let other_key = "ab".repeat(32);
    let output = run(&serve, &[("TETHER_SERVER_KEY", &other_key)], "").await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("does not match"), "{stderr}");
    assert!(!stderr.contains(&other_key) && !stderr.contains(TEST_KEY));
    // The insecure development key is a different key too, and both at once is refused.
    let mut dev = serve.to_vec();
    dev.push("--insecure-dev-key");
    let output = run(&dev, &[("TETHER_SERVER_KEY", "")], "").await;
    assert!(String::from_utf8_lossy(&output.stderr).contains("INSECURE DEVELOPMENT KEY"));
    assert!(String::from_utf8_lossy(&output.stderr).contains("does not match"));
    let output = run(&dev, &[], "").await;
    assert!(String::from_utf8_lossy(&output.stderr).contains("both"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_refuses_literal_secrets_and_bad_specs() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let data = dir.path().join("data").to_string_lossy().into_owned();
    let refused = |args: Vec<&'static str>| {
        let data = data.clone();
        async move {
            let mut full = vec!["admin", "--data-dir", &data];
            full.extend(args);
            let output = run(&full, &[], "").await;
            assert_eq!(output.status.code(), Some(1), "{full:?}");
            assert!(output.stdout.is_empty());
            String::from_utf8_lossy(&output.stderr).into_owned()
        }
    };
    let spec = r#"{"command": "x", "env": {"TOKEN": "{{TOKEN}}"}}"#;
    let literal = refused(vec![
        "add",
        "n",
        "--from",
        spec,
        "--secret",
        "TOKEN=hunter2-literal",
    ])
    .await;
    assert!(
        literal.contains("visible") && literal.contains("ps"),
        "{literal}"
    );
    assert!(!literal.contains("hunter2-literal"), "{literal}");
    let unused = refused(vec![
        "add",
        "n",
        "--from",
        spec,
        "--secret",
        "TOKNE=env:HOME",
    ])
    .await;
    assert!(unused.contains("'TOKNE' is not used"), "{unused}");
    let two = refused(vec![
        "add",
        "n",
        "--from",
        r#"{"a": {"command": "a"}, "b": {"command": "b"}}"#,
    ])
    .await;
    assert!(two.contains("exactly one MCP server"), "{two}");
    let url = refused(vec![
        "add",
        "n",
        "--from",
        r#"{"url": "https://h/mcp", "headers": {"Authorization": "Bearer {{T}}"}}"#,
    ])
    .await;
    assert!(url.contains("missing: T"), "{url}");
    let missing = refused(vec!["add", "n", "--from", "no-such-file.json"]).await;
    assert!(missing.contains("not a file"), "{missing}");
    let team = refused(vec!["add", "n", "--from", spec, "--team", "bad team"]).await;
    assert!(team.contains("invalid team"), "{team}");
    let unknown = refused(vec!["deactivate", "9b2f1a64-3c1e-4d4b-8a49-3e0c2d1f5a77"]).await;
    assert!(unknown.contains("no installation"), "{unknown}");
    // Nothing was added by the refused commands.
    let data_path = Path::new(&data);
    assert_eq!(
        admin(data_path, &["list"], &[]).await,
        "UID  NAME  KIND  TEAM  ACTIVE"
    );
}
