//! Re-minting managed configs before expiry, restarting only what changed.

use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use tether_clock::Clock as _;
use tether_config::Secrets;
use tether_driver::{
    McpRuntime, McpSpec, RefreshOutcome, RefreshPolicy, ServerStatus, StartOptions,
};
use tether_testkit::ManualClock;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::support::{Answer, FakeManaged, json_str, session, test_server_bin};

fn managed(arg: &str, expires_in: Duration) -> Answer {
    let json = format!(
        r#"{{"mcpServers":{{"managed":{{"command":{},"args":["--tools",{}]}}}}}}"#,
        json_str(&test_server_bin().to_string_lossy()),
        json_str(arg)
    );
    Answer::Config {
        json,
        expires_at: Some(OffsetDateTime::now_utc() + expires_in),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_near_expiry_is_reminted_and_restarted_only_when_changed() {
    let uid = Uuid::new_v4();
    let fake = Arc::new(FakeManaged::new(vec![(
        uid,
        managed("1", Duration::from_secs(120)),
    )]));
    let mut session = session(vec![McpSpec::Uuid(uid)], Secrets::new(), Some(fake.clone()))
        .await
        .expect("resolving the managed spec")
        .with_refresh_policy(RefreshPolicy {
            ahead: Duration::from_secs(300),
            min_interval: Duration::ZERO,
        });
    let mut runtime = session
        .start(&StartOptions::default())
        .await
        .expect("starting the managed server");
    let first_group = runtime.process_groups();
    assert_eq!(fake.calls(), 1);

    // A lease 2 minutes from expiry is inside the 5-minute window: due now.
    assert_eq!(
        session.due(OffsetDateTime::now_utc(), std::time::Instant::now()),
        vec![uid]
    );

    // Same config again: re-minted, nothing restarted.
    fake.set_answer(uid, managed("1", Duration::from_secs(120)));
    let outcomes = session.refresh_due(&mut runtime).await;
    assert_eq!(outcomes, vec![RefreshOutcome::Unchanged { uid }]);
    assert_eq!(runtime.process_groups(), first_group);

    // A changed config: the server restarts with it (4 tools now) in a new process group.
    fake.set_answer(uid, managed("2", Duration::from_secs(3600)));
    let outcomes = session.refresh_due(&mut runtime).await;
    match &outcomes[..] {
        [
            RefreshOutcome::Restarted {
                uid: restarted,
                reports,
            },
        ] => {
            assert_eq!(*restarted, uid);
            match &reports[0].status {
                ServerStatus::Ready { tools } => assert_eq!(tools.len(), 5),
                ServerStatus::Failed { reason } => panic!("restart failed: {reason}"),
                ServerStatus::Disabled => panic!("restarted as disabled"),
            }
        }
        other => panic!("expected one restart, got {other:?}"),
    }
    assert_ne!(runtime.process_groups(), first_group);
    assert_eq!(fake.calls(), 3);
    // The new lease is an hour out: not due any more.
    assert!(
        session
            .due(OffsetDateTime::now_utc(), std::time::Instant::now())
            .is_empty()
    );
    runtime.shutdown().await;
    assert!(
        crate::support::wait_group_gone(first_group[0], Duration::from_secs(5))
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn attempts_are_at_most_once_a_minute_and_far_leases_wait() {
    let near = Uuid::new_v4();
    let far = Uuid::new_v4();
    let fake = Arc::new(FakeManaged::new(vec![
        (
            near,
            Answer::Config {
                json: r#"{"mcpServers":{"n":{"url":"http://127.0.0.1:9/mcp"}}}"#.to_owned(),
                expires_at: Some(OffsetDateTime::now_utc() + Duration::from_secs(200)),
            },
        ),
        (
            far,
            Answer::Config {
                json: r#"{"mcpServers":{"f":{"url":"http://127.0.0.1:9/mcp"}}}"#.to_owned(),
                expires_at: Some(OffsetDateTime::now_utc() + Duration::from_secs(3600)),
            },
        ),
    ]));
    let clock = ManualClock::new();
    let mut session = session(
        vec![McpSpec::Uuid(near), McpSpec::Uuid(far)],
        Secrets::new(),
        Some(fake.clone()),
    )
    .await
    .expect("resolving two managed specs")
    .with_clock(clock.clone());
    assert_eq!(session.due(clock.now_utc(), clock.now()), vec![near]);
    let options = StartOptions {
        startup_timeout: Duration::from_secs(2),
        ..StartOptions::default()
    };
    let mut runtime = McpRuntime::start(Vec::new(), &options)
        .await
        .expect("starting no server");
    let minted = fake.calls();
    session.refresh_due(&mut runtime).await;
    assert_eq!(fake.calls(), minted + 1, "one re-mint, of the near lease");
    // Just attempted: not due again within the minute, even though still near expiry.
    clock.advance(Duration::from_secs(59));
    assert!(session.due(clock.now_utc(), clock.now()).is_empty());
    session.refresh_due(&mut runtime).await;
    assert_eq!(fake.calls(), minted + 1, "no attempt within the minute");
    clock.advance(Duration::from_secs(2));
    assert_eq!(session.due(clock.now_utc(), clock.now()), vec![near]);
    // The next check is no later than a minute away.
    let wait = session.next_check(clock.now_utc()).unwrap_or(Duration::MAX);
    assert!(wait <= Duration::from_secs(60), "{wait:?}");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_living_under_a_minute_is_reminted_at_half_its_life() {
    let short = Uuid::new_v4();
    let fake = Arc::new(FakeManaged::new(vec![(
        short,
        Answer::Config {
            json: r#"{"mcpServers":{"s":{"url":"http://127.0.0.1:9/mcp"}}}"#.to_owned(),
            expires_at: Some(OffsetDateTime::now_utc() + Duration::from_secs(45)),
        },
    )]));
    let clock = ManualClock::new();
    let mut session = session(
        vec![McpSpec::Uuid(short)],
        Secrets::new(),
        Some(fake.clone()),
    )
    .await
    .expect("resolving a managed spec")
    .with_clock(clock.clone());
    let options = StartOptions {
        startup_timeout: Duration::from_secs(2),
        ..StartOptions::default()
    };
    let mut runtime = McpRuntime::start(Vec::new(), &options)
        .await
        .expect("starting no server");
    let minted = fake.calls();
    session.refresh_due(&mut runtime).await;
    assert_eq!(fake.calls(), minted + 1, "the short lease is re-minted");
    clock.advance(Duration::from_secs(20));
    assert!(
        session.due(clock.now_utc(), clock.now()).is_empty(),
        "rested"
    );
    // Half the 45 s the token had at the last attempt has gone: due again, long before a
    // minute (the old rule left it expired for 15 s).
    clock.advance(Duration::from_secs(3));
    assert_eq!(session.due(clock.now_utc(), clock.now()), vec![short]);
    runtime.shutdown().await;
}
