//! The lifecycle a team needs: revoking tokens and API keys, rate limits, the audit
//! log, and key rotation with a kill in the middle. On both backends, like the whole suite.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use tether_graphql::ManagedMcpClient as _;
use tether_server::rate::RateSettings;
use tokio::io::{AsyncBufReadExt as _, BufReader};

use crate::config::raw_graphql;
use crate::proxy::{add_url, proxy_request, recording_upstream, token_of};
use crate::support::{
    ClockedFixture, Fixture, STEP, ServerProcess, TEST_KEY, add, admin, backend_args, run,
    sentinel, server_bin, stored_in_clear,
};

/// The key a rotation moves to.
const NEW_KEY: &str = "9a8b7c6d5e4f30211203f4e5d6c7b8a99a8b7c6d5e4f30211203f4e5d6c7b8a9";

/// The environment of a rotation from the test key to [`NEW_KEY`].
const BOTH_KEYS: [(&str, &str); 2] = [
    ("TETHER_SERVER_KEY", NEW_KEY),
    ("TETHER_SERVER_PREVIOUS_KEY", TEST_KEY),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_revoke_by_installation_or_all() {
    let fixture = Fixture::start(&[]).await;
    let (url, _seen, upstream) = recording_upstream(Arc::new(tokio::sync::Notify::new())).await;
    let first = add_url(&fixture, "first", &url, "s").await;
    let second = add_url(&fixture, "second", &url, "s").await;
    let token_first = token_of(&fixture.mint(first).await);
    let token_second = token_of(&fixture.mint(second).await);
    let status = async |uid: uuid::Uuid, token: &str| {
        proxy_request(
            &fixture.server.base,
            &uid.to_string(),
            Method::POST,
            Some(token),
        )
        .await
        .status()
        .as_u16()
    };
    assert_eq!(status(first, &token_first).await, 200);

    let out = admin(
        &fixture.data(),
        &["token", "revoke", "--installation", &first.to_string()],
        &[],
    )
    .await;
    assert_eq!(out, format!("revoked 1 proxy tokens ({first})"));
    assert_eq!(status(first, &token_first).await, 401);
    assert_eq!(
        status(second, &token_second).await,
        200,
        "another installation's token stays"
    );

    let _again = fixture.mint(first).await;
    let out = admin(&fixture.data(), &["token", "revoke", "--all"], &[]).await;
    assert_eq!(out, "revoked 2 proxy tokens (all)");
    assert_eq!(status(second, &token_second).await, 401);

    // Neither or both of --installation/--all is a usage error.
    let data = fixture.data();
    let data_arg = data.to_string_lossy();
    let output = run(
        &["admin", "--data-dir", &data_arg, "token", "revoke"],
        &[],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(2));
    upstream.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_are_listed_without_the_key_and_revoked_by_id() {
    let fixture = Fixture::start(&[]).await;
    let other = admin(
        &fixture.data(),
        &["api-key", "create", "--team", "blue"],
        &[],
    )
    .await;
    let uid = add(
        &fixture.data(),
        "cmd",
        r#"{"command": "echo"}"#,
        &[],
        "default",
        &[],
    )
    .await;
    fixture.mint(uid).await;

    let list = admin(&fixture.data(), &["api-key", "list"], &[]).await;
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 3, "{list}");
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["ID", "TEAM", "CREATED", "LAST-USED"]
    );
    let row = |line: &str| {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let (used, unused) = (row(lines[1]), row(lines[2]));
    assert_eq!(used[1], "default");
    assert_ne!(used[3], "never", "the default key was just used: {list}");
    assert_eq!(
        unused[1..],
        ["blue".to_owned(), unused[2].clone(), "never".to_owned()]
    );
    assert_eq!(used[0].len(), 16, "ids are 16 hex digits: {list}");
    for key in [&fixture.api_key, &other] {
        assert!(!list.contains(key.as_str()));
        assert!(!list.contains(&key[4..12]), "no part of a key is shown");
    }

    admin(&fixture.data(), &["api-key", "revoke", &used[0]], &[]).await;
    let response = raw_graphql(
        &fixture.server.graphql_url(),
        Some(&format!("Bearer {}", fixture.api_key)),
        &json!({"query": "{ managedMcpServerUids }"}),
    )
    .await;
    assert_eq!(response.status(), 401);
    let data = fixture.data();
    let data_arg = data.to_string_lossy();
    let output = run(
        &[
            "admin",
            "--data-dir",
            &data_arg,
            "api-key",
            "revoke",
            &used[0],
        ],
        &[],
        "",
    )
    .await;
    assert_eq!(
        output.status.code(),
        Some(2),
        "an unknown id is a usage error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_past_its_rate_gets_429_with_retry_after_and_others_are_not_slowed() {
    let fixture = Fixture::start(&["--rate-limit", "1", "--rate-burst", "3"]).await;
    let other = admin(&fixture.data(), &["api-key", "create"], &[]).await;
    let query = json!({"query": "{ managedMcpServerUids }"});
    let ask = async |key: &str| {
        raw_graphql(
            &fixture.server.graphql_url(),
            Some(&format!("Bearer {key}")),
            &query,
        )
        .await
    };
    for _ in 0..3 {
        assert_eq!(ask(&fixture.api_key).await.status(), 200);
    }
    let refused = ask(&fixture.api_key).await;
    assert_eq!(refused.status(), 429);
    let retry_after: u64 = refused
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
        .expect("a Retry-After in seconds");
    assert_eq!(retry_after, 1);
    assert_eq!(
        ask(&other).await.status(),
        200,
        "another key has its own bucket"
    );
    assert!(fixture.server.logged("rate-limit").await);
}

/// One mutation with `count` aliased createManagedMcpClientConfig fields for `uid`, half of
/// them behind a fragment spread (counting must see through it).
fn aliased_mints(uid: uuid::Uuid, count: usize) -> serde_json::Value {
    let field = |index: usize| {
        format!(
            "m{index}: createManagedMcpClientConfig(input: {{uid: \"{uid}\"}}) {{ __typename }}"
        )
    };
    let direct: Vec<String> = (0..count / 2).map(field).collect();
    let spread: Vec<String> = (count / 2..count).map(field).collect();
    json!({"query": format!(
        "mutation {{ {} ...More }} fragment More on Mutation {{ {} }}",
        direct.join(" "),
        spread.join(" ")
    )})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_aliased_mint_is_charged_and_a_flood_of_aliases_is_refused_whole() {
    let fixture = Fixture::start(&["--rate-limit", "1", "--rate-burst", "40"]).await;
    let uid = add_url(&fixture, "aliased", "http://127.0.0.1:9/mcp", "s").await;
    let url = fixture.server.graphql_url();
    let authorization = format!("Bearer {}", fixture.api_key);
    let send = async |count: usize| {
        raw_graphql(&url, Some(&authorization), &aliased_mints(uid, count)).await
    };

    // More fields than one request may select: a GraphQL error, nothing minted.
    let flood = send(2047).await;
    assert_eq!(flood.status(), 200);
    let body: serde_json::Value = flood.json().await.expect("a GraphQL answer");
    assert!(body["data"].is_null(), "{body}");
    assert_eq!(
        body["errors"][0]["extensions"]["code"],
        json!("TOO_MANY_FIELDS"),
        "{body}"
    );
    let message = body["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("2047") && message.contains("at most 40"),
        "{message}"
    );
    assert_eq!(fixture.server.config_requests(&fixture.api_key).await, 0);

    // 30 aliases are 30 resolutions: they fit the bucket (40, one spent on the flood) once.
    let first = send(30).await;
    assert_eq!(first.status(), 200);
    let body: serde_json::Value = first.json().await.expect("a GraphQL answer");
    assert_eq!(
        body["data"].as_object().map(serde_json::Map::len),
        Some(30),
        "{body}"
    );
    assert_eq!(fixture.server.config_requests(&fixture.api_key).await, 30);
    let second = send(30).await;
    assert_eq!(
        second.status(),
        429,
        "30 more do not fit in the 9 tokens left"
    );
    assert!(second.headers().get("retry-after").is_some());
    assert_eq!(
        fixture.server.config_requests(&fixture.api_key).await,
        30,
        "nothing of it was minted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_key_is_served_again_once_retry_after_has_passed() {
    let fixture = ClockedFixture::start(
        tether_server::DEFAULT_PROXY_TOKEN_TTL,
        RateSettings {
            per_sec: 1,
            burst: 3,
        },
    )
    .await;
    let query = json!({"query": "{ managedMcpServerUids }"});
    let ask = async || {
        raw_graphql(
            &fixture.graphql_url(),
            Some(&format!("Bearer {}", fixture.api_key)),
            &query,
        )
        .await
        .status()
    };
    for _ in 0..3 {
        assert_eq!(ask().await, 200);
    }
    assert_eq!(ask().await, 429);
    // A token is back after a second of the server's clock, not before.
    fixture.clock.advance(Duration::from_millis(999));
    assert_eq!(ask().await, 429);
    fixture.clock.advance(Duration::from_millis(1));
    assert_eq!(ask().await, 200);
    assert_eq!(ask().await, 429, "one token came back, not more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_records_admin_actions_and_mints_without_values() {
    let fixture = Fixture::start(&[]).await;
    let secret = sentinel("audited-secret");
    let uid = add(
        &fixture.data(),
        "cmd",
        r#"{"command": "echo", "env": {"T": "{{T}}"}}"#,
        &["T=env:T_VALUE"],
        "default",
        &[("T_VALUE", &secret)],
    )
    .await;
    fixture.mint(uid).await;
    admin(&fixture.data(), &["deactivate", &uid.to_string()], &[]).await;
    let log = admin(&fixture.data(), &["audit"], &[]).await;
    let actions: Vec<String> = log
        .lines()
        .skip(1)
        .map(|line| {
            line.split("  ")
                .filter(|c| !c.is_empty())
                .nth(2)
                .unwrap_or("")
                .trim()
                .to_owned()
        })
        .collect();
    assert_eq!(
        actions,
        ["deactivate", "mint", "add", "api-key create"],
        "{log}"
    );
    assert!(
        log.contains(&format!("mint    {uid}")) || log.contains(&uid.to_string()),
        "{log}"
    );
    assert!(log.contains("api-key:"), "mints name the key id: {log}");
    assert!(
        log.contains("admin:"),
        "admin actions name the OS user: {log}"
    );
    assert!(
        !log.contains(&secret) && !log.contains(&fixture.api_key),
        "{log}"
    );
    let limited = admin(&fixture.data(), &["audit", "--limit", "1"], &[]).await;
    assert_eq!(limited.lines().count(), 2, "{limited}");
}

/// A server on `data` with `envs`; mints `uid` and returns its config's JSON.
async fn minted_json(server: &ServerProcess, api_key: &str, uid: uuid::Uuid) -> String {
    server
        .client(api_key)
        .create_managed_mcp_client_config(uid)
        .await
        .unwrap_or_else(|e| panic!("minting {uid}: {e}"))
        .mcp_config_json
        .expose()
        .to_owned()
}

/// A server on `data` with the keys of `envs`, which mints every one of `installed` (uid and
/// its secret) with the secret in it.
async fn every_value_reads(
    data: &std::path::Path,
    envs: &[(&str, &str)],
    api_key: &str,
    installed: &[(uuid::Uuid, String)],
) -> ServerProcess {
    let server = ServerProcess::spawn_with_env("127.0.0.1:0", data, &[], envs).await;
    for (uid, secret) in installed {
        assert!(
            minted_json(&server, api_key, *uid)
                .await
                .contains(secret.as_str())
        );
    }
    server
}

/// `admin add` of a COMMAND installation whose secret T is `secret`; returns the uid.
async fn add_with_secret(data: &std::path::Path, name: &str, secret: &str) -> uuid::Uuid {
    add(
        data,
        name,
        r#"{"command": "echo", "env": {"T": "{{T}}"}}"#,
        &["T=env:T_VALUE"],
        "default",
        &[("T_VALUE", secret)],
    )
    .await
}

/// `admin rotate-key --pause-ms PAUSE` to NEW_KEY from TEST_KEY, started; its stderr lines.
fn start_rotation(
    data_arg: &str,
    pause_ms: &str,
) -> (
    tokio::process::Child,
    tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
) {
    let mut rotation = tokio::process::Command::new(server_bin());
    rotation
        .args(backend_args(&[
            "admin",
            "--data-dir",
            data_arg,
            "rotate-key",
            "--pause-ms",
            pause_ms,
        ]))
        .envs(BOTH_KEYS)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = rotation.spawn().expect("starting rotate-key");
    let lines = BufReader::new(child.stderr.take().expect("stderr is piped")).lines();
    (child, lines)
}

/// The next stderr line of a rotation, within [`STEP`].
async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStderr>>) -> String {
    tokio::time::timeout(STEP, lines.next_line())
        .await
        .expect("rotate-key wrote a line in time")
        .expect("reading rotate-key's stderr")
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_key_also_reseals_what_an_admin_added_with_the_old_key_meanwhile() {
    let Fixture {
        dir,
        server: first_server,
        api_key,
    } = Fixture::start(&[]).await;
    first_server.kill().await;
    let data = dir.path().join("data");
    let data_arg = data.to_string_lossy().into_owned();
    let mut installed = Vec::new();
    for index in 0..2 {
        let secret = sentinel(&format!("before-{index}"));
        installed.push((
            add_with_secret(&data, &format!("cmd{index}"), &secret).await,
            secret,
        ));
    }
    let (child, mut lines) = start_rotation(&data_arg, "1500");
    assert!(next_line(&mut lines).await.starts_with("re-sealed 1/2"));
    // An admin still on the old key adds one while the rotation runs.
    let late = sentinel("added-meanwhile");
    installed.push((add_with_secret(&data, "late", &late).await, late));
    let output = tokio::time::timeout(STEP, child.wait_with_output())
        .await
        .expect("rotate-key finished in time")
        .expect("waiting for rotate-key");
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("re-sealed 3 installations"), "{stdout}");
    every_value_reads(
        &data,
        &[("TETHER_SERVER_KEY", NEW_KEY)],
        &api_key,
        &installed,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_key_killed_midway_leaves_every_value_readable_and_finishes_when_run_again() {
    let Fixture {
        dir,
        server: first_server,
        api_key,
    } = Fixture::start(&[]).await;
    let data = dir.path().join("data");
    let mut installed = Vec::new();
    for index in 0..3 {
        let secret = sentinel(&format!("rotated-{index}"));
        installed.push((
            add_with_secret(&data, &format!("cmd{index}"), &secret).await,
            secret,
        ));
    }
    let both = BOTH_KEYS;

    // Without the previous key, rotate-key refuses (exit 2).
    let data_arg = data.to_string_lossy().into_owned();
    let output = run(
        &["admin", "--data-dir", &data_arg, "rotate-key"],
        &[("TETHER_SERVER_KEY", NEW_KEY)],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(2));

    // Killed after the first of three installations.
    let (mut child, mut lines) = start_rotation(&data_arg, "60000");
    let first = next_line(&mut lines).await;
    assert!(first.starts_with("re-sealed 1/3"), "{first}");
    child.kill().await.expect("killing rotate-key");
    first_server.kill().await;

    // The new key alone is refused until the rotation completes (the key check is the old one).
    let serve = ["serve", "--listen", "127.0.0.1:0", "--data-dir", &data_arg];
    let output = run(&serve, &[("TETHER_SERVER_KEY", NEW_KEY)], "").await;
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("does not match"));

    // With both keys every value opens: the re-sealed one and the two not yet re-sealed.
    let server = every_value_reads(&data, &both, &api_key, &installed).await;
    server.kill().await;

    // Run again, to the end; then the new key alone reads everything and the old one is refused.
    let done = admin(&data, &["rotate-key"], &both).await;
    assert!(done.starts_with("re-sealed 3 installations"), "{done}");
    let server = every_value_reads(
        &data,
        &[("TETHER_SERVER_KEY", NEW_KEY)],
        &api_key,
        &installed,
    )
    .await;
    for (_, secret) in &installed {
        assert!(!stored_in_clear(&data, secret));
    }
    server.kill().await;
    let output = run(&serve, &[], "").await;
    assert_eq!(
        output.status.code(),
        Some(1),
        "the old key is refused after the rotation"
    );
    let log = admin(&data, &["audit"], &[("TETHER_SERVER_KEY", NEW_KEY)]).await;
    assert!(log.contains("rotate-key"), "{log}");
}

/// Whether a private tmpfs can be mounted here (root, and `unshare` allowed): the full-disk
/// test needs one.
fn can_mount_a_private_tmpfs() -> bool {
    nix::unistd::geteuid().is_root()
        && std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg("mount -t tmpfs -o size=64k tmpfs /mnt")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
}

/// Writes zeros to `path` until its filesystem is full.
fn fill(path: &std::path::Path) {
    use std::io::Write as _;
    let mut file = std::fs::File::create(path).expect("creating the filler");
    let chunk = vec![0_u8; 64 * 1024];
    // A bound, so a filesystem that never fills cannot make the test run forever.
    for _ in 0..1024 {
        match file.write_all(&chunk).and_then(|()| file.sync_all()) {
            Ok(()) => {}
            Err(error) if error.raw_os_error() == Some(nix::libc::ENOSPC) => return,
            Err(error) => panic!("filling the disk: {error}"),
        }
    }
    panic!("the 8 MiB filesystem did not fill with 64 MiB");
}

/// `GET /healthz`: the status and body.
async fn health(server: &ServerProcess) -> (u16, String) {
    let answer = reqwest::get(format!("{}/healthz", server.base))
        .await
        .expect("GET /healthz");
    let status = answer.status().as_u16();
    (status, answer.text().await.expect("the body"))
}

/// The store on a filesystem that fills up: `/healthz` says so (503) while it is full, not
/// `ok`, and `ok` again once there is room. A real full filesystem: an 8 MiB tmpfs mounted in
/// a mount namespace of the server's own (`unshare`, as root), filled from outside through
/// `/proc/PID/root`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_503_while_the_stores_disk_is_full() {
    if crate::pg::enabled() || !can_mount_a_private_tmpfs() {
        tether_testkit::skipped("needs SQLite, root and unshare for a private tmpfs");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let seed = dir.path().join("seed");
    let api_key = crate::support::api_key(&seed, "default").await;
    let uid = add_with_secret(&seed, "filled", "s3cret-$HOME-é").await;
    let mount = dir.path().join("mnt");
    std::fs::create_dir(&mount).expect("the mount point");
    // The tmpfs holds a copy of the seeded store; the server then runs on it.
    let mut command = tokio::process::Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            r#"mount -t tmpfs -o size=8m,mode=0700 tmpfs "$1" && cp -a "$2"/. "$1"/ && exec "$0" serve --listen 127.0.0.1:0 --data-dir "$1""#,
        )
        .arg(server_bin())
        .arg(&mount)
        .arg(&seed)
        .env("TETHER_SERVER_KEY", TEST_KEY)
        .env("TETHER_SERVER_LOG", "info");
    let server = ServerProcess::from_command(command).await;
    assert_eq!(health(&server).await, (200, "ok\n".to_owned()));
    assert!(
        minted_json(&server, &api_key, uid)
            .await
            .contains("s3cret-$HOME-é")
    );

    // The server's view of the tmpfs, from outside its mount namespace.
    let pid = server.pid();
    let inside = std::path::PathBuf::from(format!("/proc/{pid}/root"))
        .join(mount.strip_prefix("/").expect("an absolute mount point"));
    let filler = inside.join("filler");
    fill(&filler);
    // The store still answers a read; health says what is wrong.
    let (status, body) = health(&server).await;
    assert_eq!((status, body.as_str()), (503, "the store's disk is full\n"));
    assert!(server.logged("health check: the filesystem holding").await);

    std::fs::remove_file(&filler).expect("freeing the disk");
    assert_eq!(health(&server).await, (200, "ok\n".to_owned()));
    assert!(
        minted_json(&server, &api_key, uid)
            .await
            .contains("s3cret-$HOME-é")
    );
}
