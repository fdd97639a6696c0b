//! Two replicas on one PostgreSQL database: what one mints the other accepts, and
//! what an admin revokes through the shared database reaches both within a second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Method;
use tether_graphql::ManagedMcpClient as _;

use crate::hostile::{ends_within, open_stream_at};
use crate::proxy::{add_url, proxy_request, recording_upstream, token_of};
use crate::support::{Fixture, ServerProcess, admin};

/// How long a revocation may take to reach another replica (specs/server-postgres §2).
const REVOCATION_BOUND: Duration = Duration::from_secs(1);

/// Polls `check` until it holds; how long that took (`None`: not within 10 s).
async fn holds_within(mut check: impl AsyncFnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if check().await {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Replica A (the fixture's server) and B on one database, and a URL installation on a
/// recording upstream; `None` when PostgreSQL is not installed (outside CI).
async fn two_replicas() -> Option<(
    Fixture,
    ServerProcess,
    uuid::Uuid,
    tokio::task::JoinHandle<()>,
)> {
    let fixture = Fixture::start_on_postgres(&[]).await?;
    let replica_b = ServerProcess::start(&fixture.data(), &[]).await;
    let (url, _seen, upstream) = recording_upstream(Arc::new(tokio::sync::Notify::new())).await;
    let uid = add_url(&fixture, "shared", &url, "upstream-secret").await;
    Some((fixture, replica_b, uid, upstream))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_minted_on_one_replica_works_on_another_until_deactivated_through_either() {
    let Some((fixture, replica_b, uid, upstream)) = two_replicas().await else {
        return;
    };

    // Minted on A, used on B: a request, and an event stream left open.
    let token = token_of(&fixture.mint(uid).await);
    let on_b = proxy_request(
        &replica_b.base,
        &uid.to_string(),
        Method::POST,
        Some(&token),
    )
    .await;
    assert_eq!(on_b.status(), 200, "B accepts A's token");
    let stream = open_stream_at(&replica_b.base, uid, &token).await;

    // Deactivated through the shared database: B refuses the next request, and the open stream
    // ends within the recheck interval.
    admin(&fixture.data(), &["deactivate", &uid.to_string()], &[]).await;
    let refused = holds_within(async || {
        proxy_request(
            &replica_b.base,
            &uid.to_string(),
            Method::POST,
            Some(&token),
        )
        .await
        .status()
            == 403
    })
    .await
    .expect("B refuses the deactivated installation");
    let stream_took = ends_within(stream, Duration::from_secs(10))
        .await
        .expect("the stream through B outlived the deactivation by 10 s");
    println!(
        "after `admin deactivate`: B refused in {refused:?}, its open stream ended in {stream_took:?}"
    );
    assert!(refused < REVOCATION_BOUND, "{refused:?}");
    // The stream's recheck runs every second; the query and the close take a little more.
    assert!(
        stream_took < REVOCATION_BOUND + Duration::from_millis(500),
        "{stream_took:?}"
    );
    upstream.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_tokens_and_api_keys_are_refused_by_every_replica() {
    let Some((fixture, replica_b, uid, upstream)) = two_replicas().await else {
        return;
    };
    let token = token_of(&fixture.mint(uid).await);
    let status = async |base: &str| {
        proxy_request(base, &uid.to_string(), Method::POST, Some(&token))
            .await
            .status()
    };
    assert_eq!(status(&replica_b.base).await, 200);
    let revoked = admin(
        &fixture.data(),
        &["token", "revoke", "--installation", &uid.to_string()],
        &[],
    )
    .await;
    assert_eq!(revoked, format!("revoked 1 proxy tokens ({uid})"));
    assert_eq!(status(&replica_b.base).await, 401);
    assert_eq!(status(&fixture.server.base).await, 401);

    // An API key revoked through the database stops working on B at the next request.
    let client_b = replica_b.client(&fixture.api_key);
    assert!(client_b.create_managed_mcp_client_config(uid).await.is_ok());
    let list = admin(&fixture.data(), &["api-key", "list"], &[]).await;
    let id = list
        .lines()
        .nth(1)
        .and_then(|line| line.split_whitespace().next())
        .expect("one key listed")
        .to_owned();
    admin(&fixture.data(), &["api-key", "revoke", &id], &[]).await;
    let error = client_b
        .create_managed_mcp_client_config(uid)
        .await
        .expect_err("a revoked key is refused");
    assert!(error.to_string().contains("401"), "{error}");
    upstream.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_reports_whether_the_database_answers() {
    if !crate::support::postgres_installed() {
        return;
    }
    // A cluster of its own, to stop it under the running server.
    let cluster = crate::pg::PgCluster::start();
    let url = cluster.database("health");
    let server = ServerProcess::serve(&["--database-url", &url]).await;
    let health = async || {
        reqwest::get(format!("{}/healthz", server.base))
            .await
            .map(|response| response.status().as_u16())
            .unwrap_or(0)
    };
    assert_eq!(health().await, 200);
    drop(cluster);
    let started = Instant::now();
    assert_eq!(health().await, 503);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "/healthz answered in {took:?}"
    );
    assert!(server.logged("health check").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_password_is_never_shown_and_refused_on_the_command_line() {
    if !crate::support::postgres_installed() {
        return;
    }
    // Hostile characters, percent-encoded as a URL needs them.
    let password = "pw $HOME $$ % ' \" \\ {{x}} é";
    let encoded: String = password
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    let shown = |output: &std::process::Output| {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        text.contains(password) || text.contains(&encoded) || text.contains("$HOME $$")
    };

    // On the command line: refused (exit 2) without repeating it.
    let cluster = crate::pg::shared();
    let plain = cluster.database("password_test");
    let with_password = plain.replacen("postgres@", &format!("postgres:{encoded}@"), 1);
    let output = crate::support::run(
        &["admin", "--database-url", &with_password, "list"],
        &[],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("TETHER_SERVER_DATABASE_URL"));
    assert!(!shown(&output));

    // In the environment: used (trust authentication ignores it), and absent from debug logs.
    let env = [("TETHER_SERVER_DATABASE_URL", with_password.as_str())];
    let output = crate::support::run(&["admin", "api-key", "create"], &env, "").await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!shown(&output));
    let server = ServerProcess::from_command({
        let mut command = tokio::process::Command::new(crate::support::server_bin());
        command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("TETHER_SERVER_KEY", crate::support::TEST_KEY)
            .env("TETHER_SERVER_LOG", "debug")
            .envs(env);
        command
    })
    .await;
    assert!(server.logged("serving").await);
    let logs = server.logs();
    assert!(
        !logs.contains(password) && !logs.contains(&encoded),
        "{logs}"
    );
    server.kill().await;

    // A database that cannot be reached: the error names it without the password.
    let unreachable = format!("postgres://postgres:{encoded}@127.0.0.1:1/db");
    let output = crate::support::run(
        &["admin", "list"],
        &[("TETHER_SERVER_DATABASE_URL", &unreachable)],
        "",
    )
    .await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("postgres://postgres@127.0.0.1:1/db"),
        "{stderr}"
    );
    assert!(!shown(&output), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_on_a_new_database_migrate_it_once() {
    if !crate::support::postgres_installed() {
        return;
    }
    let cluster = crate::pg::shared();
    let name = format!("fresh_{}", uuid::Uuid::new_v4().simple());
    let url = cluster.database(&name);
    let args = ["--database-url", url.as_str()];
    let (a, b, c) = tokio::join!(
        ServerProcess::serve(&args),
        ServerProcess::serve(&args),
        ServerProcess::serve(&args)
    );
    assert_eq!(
        cluster.sql(&name, "SELECT count(*) FROM schema_migrations"),
        "1"
    );
    assert_eq!(
        cluster.sql(&name, "SELECT count(*) FROM meta WHERE key = 'key_check'"),
        "1"
    );
    for server in [a, b, c] {
        let health = reqwest::get(format!("{}/healthz", server.base))
            .await
            .expect("healthz");
        assert_eq!(health.status(), 200);
        server.kill().await;
    }
}
