//! The admin CLI and the store on disk: encryption at rest, file modes, keys, secret sources.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use crate::support::{
    Fixture, ServerProcess, TEST_KEY, add, admin, api_key, run, sentinel, stored_in_clear,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_keys_and_tokens_are_not_stored_in_clear() {
    let fixture = Fixture::start(&[]).await;
    let data = fixture.data();
    let upstream_secret = sentinel("upstream-secret");
    let captured_literal = sentinel("captured-literal");
    let stdin_secret = sentinel("stdin-secret");
    let secret_file = fixture.dir.path().join("secret.txt");
    std::fs::write(&secret_file, format!("{stdin_secret}-file\n"))
        .expect("writing the secret file");
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
        .expect("the URL config has a proxy token")
        .expose()
        .to_owned();

    assert!(stored_in_clear(&data, "remote"), "the store was read");
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
        assert!(
            !stored_in_clear(&data, secret),
            "{secret} is stored in clear"
        );
    }

    // Private files (SQLite; PostgreSQL's files are the cluster's): the directory 0700, every
    // file 0600.
    if !crate::pg::enabled() {
        let mode =
            |path: &Path| std::fs::metadata(path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(&data), 0o700);
        for entry in std::fs::read_dir(&data).expect("listing the data directory") {
            let path = entry.expect("reading the data directory").path();
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
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
    let dir = tempfile::tempdir().expect("creating a temp dir");
    let data = dir.path().join("data");
    let data_arg = data.to_string_lossy().into_owned();
    let serve = ["serve", "--listen", "127.0.0.1:0", "--data-dir", &data_arg];

    // A missing or invalid key is bad input: exit 2, as `tether` exits on bad input.
    let output = run(&serve, &[("TETHER_SERVER_KEY", "")], "").await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("TETHER_SERVER_KEY") && stderr.contains("--insecure-dev-key"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "nothing was served");

    let output = run(&serve, &[("TETHER_SERVER_KEY", "too-short")], "").await;
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a valid key"));

    // The data directory remembers its key: another key is refused.
    let _ = api_key(&data, "default").await;
    ServerProcess::start(&data, &[]).await.kill().await;
    let other_key = "5f0c9e1ab27d4c83e6f1a09b3d5c7e21f4a8b6c0d2e4f6a8b0c2d4e6f8a0b2c4".to_owned();
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
    let dir = tempfile::tempdir().expect("creating a temp dir");
    let data = dir.path().join("data").to_string_lossy().into_owned();
    let refused = |args: Vec<&'static str>| {
        let data = data.clone();
        async move {
            let mut full = vec!["admin", "--data-dir", &data];
            full.extend(args);
            let output = run(&full, &[], "").await;
            // Bad input: exit 2, the code `tether` uses (one table for both binaries).
            assert_eq!(output.status.code(), Some(2), "{full:?}");
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

/// `admin … args` on a fresh data directory under `dir`, with extra environment.
async fn admin_output(data: &Path, args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    let data_arg = data.to_string_lossy();
    let mut full = vec!["admin", "--data-dir", data_arg.as_ref()];
    full.extend_from_slice(args);
    run(&full, envs, "").await
}

/// `admin … --secret T=abc` exits 2 like `tether`, and a name given twice
/// is refused by the same parser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_usage_errors_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let spec = r#"{"command":"x","env":{"T":"{{T}}"}}"#;
    let output = admin_output(
        &data,
        &["add", "x", "--from", spec, "--secret", "T=abc"],
        &[],
    )
    .await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("secret T: a literal value on the command line is refused"),
        "{stderr}"
    );
    assert!(!stderr.contains("abc"), "{stderr}");
    let output = admin_output(
        &data,
        &[
            "add", "x", "--from", spec, "--secret", "T=env:A", "--secret", "T=env:B",
        ],
        &[("A", "a-value"), ("B", "b-value")],
    )
    .await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--secret T is given twice"), "{stderr}");
    // A clap error is 2 as well.
    let output = run(&["admin", "--no-such-flag"], &[], "").await;
    assert_eq!(output.status.code(), Some(2));
}

/// The development key's warning reaches stderr even when the log filter
/// drops warnings, and keys with no entropy are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_key_warning_is_unconditional_and_weak_keys_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let spec = r#"{"command":"x"}"#;
    let quiet = [("TETHER_SERVER_KEY", ""), ("TETHER_SERVER_LOG", "error")];
    let output = admin_output(
        &data,
        &["--insecure-dev-key", "add", "x", "--from", spec],
        &quiet,
    )
    .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("INSECURE DEVELOPMENT KEY"), "{stderr}");

    // `serve` prints it before anything else, also with TETHER_SERVER_LOG=error.
    let data_arg = data.to_string_lossy().into_owned();
    let server = crate::support::ServerProcess::spawn_with_env(
        "127.0.0.1:0",
        &data,
        &["--insecure-dev-key"],
        &quiet,
    )
    .await;
    let stderr = server.logs();
    server.kill().await;
    assert!(stderr.contains("INSECURE DEVELOPMENT KEY"), "{stderr}");

    let serve = ["serve", "--listen", "127.0.0.1:0", "--data-dir", &data_arg];
    for weak in [
        "00".repeat(32),
        "ff".repeat(32),
        "0123".repeat(16),
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_owned(),
    ] {
        let output = run(&serve, &[("TETHER_SERVER_KEY", &weak)], "").await;
        assert_eq!(output.status.code(), Some(2), "{weak}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("no entropy"), "{stderr}");
        assert!(!stderr.contains(&weak), "{stderr}");
        assert!(output.stdout.is_empty(), "nothing was served");
    }
}

/// A data directory or database another user can write (or owns) is refused
/// by `serve` and `admin`, with the fix in the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loose_or_foreign_data_is_refused() {
    if crate::pg::enabled() {
        eprintln!("SQLite files only: on PostgreSQL the cluster's files are not the server's");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let _ = api_key(&data, "default").await;
    let chmod = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    let data_arg = data.to_string_lossy().into_owned();
    let serve = ["serve", "--listen", "127.0.0.1:0", "--data-dir", &data_arg];

    chmod(&data, 0o777);
    for output in [
        admin_output(&data, &["list"], &[]).await,
        run(&serve, &[], "").await,
    ] {
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("chmod 700 {}", data.display())),
            "{stderr}"
        );
        assert!(output.stdout.is_empty());
    }
    chmod(&data, 0o700);

    // A planted 0666 database, owned by another user when the test can chown (root).
    let db = data.join(tether_server::DATABASE_FILE);
    chmod(&db, 0o666);
    let output = admin_output(&data, &["list"], &[]).await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("chmod 600 {}", db.display())),
        "{stderr}"
    );
    if std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&db).expect("stat")) == 0 {
        std::os::unix::fs::chown(&db, Some(54_321), None).expect("chown");
        let output = run(&serve, &[], "").await;
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("owned by uid 54321"), "{stderr}");
        std::os::unix::fs::chown(&db, Some(0), None).expect("chown back");
    } else {
        eprintln!(
            "not root: the foreign-owner case is covered by tether-sqlite's tests only when run as root"
        );
    }
    chmod(&db, 0o600);
    assert!(admin(&data, &["list"], &[]).await.starts_with("UID"));
}
