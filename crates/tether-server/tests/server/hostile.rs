//! tether-server under hostile clients and upstreams: slow and
//! never-finished bodies, idle and half-sent connections, a connection flood, a hanging
//! upstream, event streams outliving their token, forged log lines. Real processes, real
//! sockets on loopback, every wait bounded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::Method;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::config::{create_body, raw_graphql};
use crate::proxy::{add_url, proxy_request, recording_upstream, token_of};
use crate::support::{Fixture, HEAVY, STEP, ServerProcess, TEST_KEY, admin, server_bin};

const MIB: u64 = 1024 * 1024;

/// The `host:port` of a server base URL.
fn authority(base: &str) -> &str {
    base.trim_start_matches("http://")
}

/// `GET /healthz` with a bound; the status, or `None` when it did not answer.
async fn healthz(base: &str) -> Option<u16> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("building a client");
    let response = client.get(format!("{base}/healthz")).send().await.ok()?;
    Some(response.status().as_u16())
}

/// Connects and sends `head` (request line and headers, maybe unfinished), then up to
/// `body_bytes` of body in 64 KiB writes, giving up on the first failed or stalled write (the
/// server may close the connection). Returns the stream, still open, if it is.
async fn slow_sender(address: String, head: String, body_bytes: usize) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(&address).await.ok()?;
    stream.write_all(head.as_bytes()).await.ok()?;
    let chunk = vec![b'x'; 64 * 1024];
    let mut sent = 0;
    while sent < body_bytes {
        let n = chunk.len().min(body_bytes - sent);
        match tokio::time::timeout(Duration::from_secs(2), stream.write_all(&chunk[..n])).await {
            Ok(Ok(())) => sent += n,
            _ => break,
        }
    }
    Some(stream)
}

/// Waits (bounded) for the peer to close `stream`: true when it did (EOF or reset).
async fn closed_within(mut stream: TcpStream, limit: Duration) -> bool {
    let mut buffer = [0_u8; 1024];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            // A response (408, 401…) may come before the close.
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_finished_bodies_are_not_read_before_the_key_and_memory_stays_bounded() {
    let _heavy = HEAVY.lock().await;
    let fixture = Fixture::start(&["--body-timeout", "20"]).await;
    let (url, _seen, upstream) = recording_upstream(Arc::new(tokio::sync::Notify::new())).await;
    let uid = add_url(&fixture, "remote", &url, "upstream-secret").await;
    let token = token_of(&fixture.mint(uid).await);
    let address = authority(&fixture.server.base).to_owned();
    let before = fixture.server.memory_bytes("VmRSS");

    // The token is checked from the headers: a 401 comes back while the body is unfinished.
    let head = format!(
        "POST /mcp-proxy/{uid} HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer wrong\r\nContent-Type: application/json\r\nContent-Length: 1900000\r\n\r\n"
    );
    let mut one = slow_sender(address.clone(), head, 1000)
        .await
        .expect("connecting");
    let mut answer = vec![0_u8; 12];
    tokio::time::timeout(Duration::from_secs(5), one.read_exact(&mut answer))
        .await
        .expect("the 401 came before the body was finished")
        .expect("reading the answer");
    assert_eq!(&answer, b"HTTP/1.1 401");

    // 1,000 unauthenticated connections (GraphQL without a key, the proxy with a wrong
    // token), each sending most of a 1.9 MB body and never finishing it…
    let started = Instant::now();
    let mut senders = Vec::new();
    for i in 0..1000 {
        let head = if i % 2 == 0 {
            "POST /graphql HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 1900000\r\n\r\n".to_owned()
        } else {
            format!(
                "POST /mcp-proxy/{uid} HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer wrong-{i}\r\nContent-Length: 1900000\r\n\r\n"
            )
        };
        senders.push(tokio::spawn(slow_sender(address.clone(), head, 1_800_000)));
    }
    // …and 100 with a valid proxy token, each sending most of a 15 MB body.
    for _ in 0..100 {
        let head = format!(
            "POST /mcp-proxy/{uid} HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer {token}\r\nContent-Length: 15000000\r\n\r\n"
        );
        senders.push(tokio::spawn(slow_sender(address.clone(), head, 14_000_000)));
    }
    let mut open = Vec::new();
    for sender in senders {
        if let Some(stream) = tokio::time::timeout(STEP, sender)
            .await
            .expect("a sender finished within the step")
            .expect("the sender task")
        {
            open.push(stream);
        }
    }
    let took = started.elapsed();
    let rss = fixture.server.memory_bytes("VmRSS");
    let peak = fixture.server.memory_bytes("VmHWM");
    println!(
        "1,000 unauthenticated 1.9 MB never-finished bodies + 100 authenticated 15 MB ones: \
         RSS before {} MiB, after {} MiB, peak {} MiB ({} connections still open, sent in {took:?})",
        before / MIB,
        rss / MIB,
        peak / MIB,
        open.len()
    );
    assert!(peak <= 150 * MIB, "peak RSS {} MiB", peak / MIB);
    assert_eq!(healthz(&fixture.server.base).await, Some(200));
    assert!(
        fixture.server.logged("max-body-bytes-in-flight").await,
        "the spent byte budget is logged: {}",
        fixture.server.logs()
    );
    drop(open);
    upstream.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_beside_5000_idle_connections_which_are_shed_after_the_header_timeout() {
    let _heavy = HEAVY.lock().await;
    let fixture = Fixture::start(&["--header-timeout", "10"]).await;
    let address = authority(&fixture.server.base).to_owned();
    let mut idle = Vec::new();
    for _ in 0..5000 {
        idle.push(
            tokio::time::timeout(STEP, TcpStream::connect(&address))
                .await
                .expect("connecting within the step")
                .expect("connecting"),
        );
    }
    let mut half_sent = Vec::new();
    for _ in 0..50 {
        let mut stream = TcpStream::connect(&address).await.expect("connecting");
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: h\r\nX-Slow: ")
            .await
            .expect("writing half the headers");
        half_sent.push(stream);
    }
    let opened = Instant::now();
    assert_eq!(healthz(&fixture.server.base).await, Some(200));
    println!(
        "/healthz answered {:?} after 5,050 idle or half-sent connections were opened",
        opened.elapsed()
    );
    let waits: Vec<_> = idle
        .into_iter()
        .chain(half_sent)
        .map(|stream| tokio::spawn(closed_within(stream, Duration::from_secs(25))))
        .collect();
    let mut still_open = 0;
    for wait in waits {
        if !wait.await.expect("the wait task") {
            still_open += 1;
        }
    }
    println!("all shed after {:?}", opened.elapsed());
    assert_eq!(
        still_open, 0,
        "connections left open past the header timeout"
    );
    assert!(fixture.server.logged("header-timeout").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_bound_are_closed_at_once_and_logged() {
    let fixture = Fixture::start(&["--max-connections", "20", "--header-timeout", "5"]).await;
    let address = authority(&fixture.server.base).to_owned();
    let before = fixture.server.open_sockets();
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(TcpStream::connect(&address).await.expect("connecting"));
    }
    // The server has accepted them all (each is a socket of its own) before the extra one.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fixture.server.open_sockets() < before + 20 {
        assert!(
            Instant::now() < deadline,
            "the server did not accept 20 connections"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let extra = TcpStream::connect(&address).await.expect("connecting");
    // Closed at once, not after the 5 s header timeout.
    assert!(closed_within(extra, Duration::from_secs(3)).await);
    assert!(fixture.server.logged("max-connections").await);
    // The held ones are shed after the header timeout; then the server answers again.
    let mut answered = None;
    for _ in 0..20 {
        answered = healthz(&fixture.server.base).await;
        if answered.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(answered, Some(200));
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_open_file_limit_lowers_the_connection_bound_instead_of_stopping_the_server() {
    let _heavy = HEAVY.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // `ulimit -n 1024`, soft and hard, for the server alone.
    let mut command = tokio::process::Command::new("sh");
    command
        .args([
            "-c",
            r#"ulimit -Sn 1024 && ulimit -Hn 1024 && exec "$0" serve --listen 127.0.0.1:0 --data-dir "$1" --header-timeout 3"#,
        ])
        .arg(server_bin())
        .arg(dir.path().join("data"))
        .env("TETHER_SERVER_KEY", TEST_KEY)
        .env("TETHER_SERVER_LOG", "info");
    let server = ServerProcess::from_command(command).await;
    assert!(
        server.logged("max_connections=896").await,
        "{}",
        server.logs()
    );
    let address = authority(&server.base).to_owned();
    let mut idle = Vec::new();
    for _ in 0..1100 {
        idle.push(TcpStream::connect(&address).await.expect("connecting"));
    }
    assert!(server.logged("max-connections").await);
    // The held ones are shed after the header timeout; the server answers again.
    let opened = Instant::now();
    let mut answered = None;
    while answered.is_none() && opened.elapsed() < Duration::from_secs(15) {
        answered = healthz(&server.base).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(answered, Some(200));
    println!(
        "ulimit -n 1024, 1,100 idle connections: /healthz answers again {:?} after they were opened",
        opened.elapsed()
    );
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_upstream_does_not_hold_a_proxied_request() {
    let fixture = Fixture::start(&["--upstream-timeout", "1"]).await;
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding the hanging upstream");
    let hanging = format!("http://{}/mcp", listener.local_addr().expect("address"));
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let uid = add_url(&fixture, "hanging", &hanging, "secret").await;
    let token = token_of(&fixture.mint(uid).await);
    let started = Instant::now();
    let response = tokio::time::timeout(
        Duration::from_secs(10),
        proxy_request(
            &fixture.server.base,
            &uid.to_string(),
            Method::POST,
            Some(&token),
        ),
    )
    .await
    .expect("the proxied request ended within 10 s");
    assert_eq!(response.status(), 504);
    assert!(started.elapsed() < Duration::from_secs(5));

    // An upstream that answers, sends one event and falls silent: the POST's body is cut.
    let (url, _seen, upstream) = recording_upstream(Arc::new(tokio::sync::Notify::new())).await;
    let uid = add_url(&fixture, "silent", &url, "secret").await;
    let token = token_of(&fixture.mint(uid).await);
    let response = proxy_request(
        &fixture.server.base,
        &uid.to_string(),
        Method::POST,
        Some(&token),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body = tokio::time::timeout(Duration::from_secs(10), response.bytes())
        .await
        .expect("the silent response ended within 10 s");
    assert!(
        body.is_err(),
        "the cut stream reads as an error, not a complete answer"
    );
    assert!(fixture.server.logged("upstream-timeout").await);
    holder.abort();
    upstream.abort();
}

/// Opens a GET event stream through the proxy and reads its first event.
async fn open_stream(fixture: &Fixture, uid: uuid::Uuid, token: &str) -> reqwest::Response {
    open_stream_at(&fixture.server.base, uid, token).await
}

/// Opens a GET event stream through the proxy of the server at `base` and reads its first
/// event.
pub(crate) async fn open_stream_at(base: &str, uid: uuid::Uuid, token: &str) -> reqwest::Response {
    let mut stream = proxy_request(base, &uid.to_string(), Method::GET, Some(token)).await;
    assert_eq!(stream.status(), 200);
    let first = tokio::time::timeout(Duration::from_secs(10), stream.chunk())
        .await
        .expect("the first event within 10 s")
        .expect("reading the first event");
    assert!(first.is_some());
    stream
}

/// Reads `stream` until it ends; how long that took (`None`: not within `limit`).
pub(crate) async fn ends_within(
    mut stream: reqwest::Response,
    limit: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    tokio::time::timeout(limit, async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await
    .ok()
    .map(|()| started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_event_streams_close_when_their_token_expires() {
    let fixture = Fixture::start(&["--proxy-token-ttl", "3"]).await;
    let (url, _seen, upstream) = recording_upstream(Arc::new(tokio::sync::Notify::new())).await;
    let uid = add_url(&fixture, "stream", &url, "secret").await;
    let minted = Instant::now();
    let token = token_of(&fixture.mint(uid).await);
    let stream = open_stream(&fixture, uid, &token).await;
    let ended = ends_within(stream, Duration::from_secs(10)).await;
    assert!(ended.is_some(), "the stream outlived its token by 10 s");
    let lived = minted.elapsed();
    assert!(lived < Duration::from_secs(6), "{lived:?}");
    assert!(fixture.server.logged("the proxy token expired").await);
    upstream.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_event_streams_close_when_the_installation_is_deactivated() {
    let fixture = Fixture::start(&[]).await;
    let (url, _seen, upstream) = recording_upstream(Arc::new(tokio::sync::Notify::new())).await;
    let uid = add_url(&fixture, "stream", &url, "secret").await;
    let token = token_of(&fixture.mint(uid).await);
    let stream = open_stream(&fixture, uid, &token).await;
    admin(&fixture.data(), &["deactivate", &uid.to_string()], &[]).await;
    let ended = ends_within(stream, Duration::from_secs(10)).await;
    let took = ended.expect("the stream outlived the deactivation by 10 s");
    println!("the stream closed {took:?} after `admin deactivate` returned");
    assert!(fixture.server.logged("no longer accepted").await);
    upstream.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_values_cannot_forge_log_lines() {
    let fixture = Fixture::start(&[]).await;
    let forged = "x%0AFORGED-PROXY%1B[31m";
    let response = proxy_request(&fixture.server.base, forged, Method::POST, Some("nope")).await;
    assert_eq!(response.status(), 401);
    let response = raw_graphql(
        &fixture.server.graphql_url(),
        Some(&format!("Bearer {}", fixture.api_key)),
        &create_body("y\nFORGED-GRAPHQL\u{1b}[31m"),
    )
    .await;
    assert_eq!(response.status(), 200);
    assert!(fixture.server.logged("FORGED-GRAPHQL").await);
    let logs = fixture.server.logs();
    assert!(
        logs.contains(r"x\nFORGED-PROXY\u{1b}[31m"),
        "the proxy's uid is logged escaped: {logs}"
    );
    assert!(
        logs.contains(r"y\nFORGED-GRAPHQL\u{1b}[31m"),
        "the GraphQL uid is logged escaped: {logs}"
    );
    assert!(!logs.contains('\u{1b}'), "a raw escape byte in the log");
    for line in logs.lines() {
        assert!(!line.starts_with("FORGED"), "a forged line: {line:?}");
    }
}
