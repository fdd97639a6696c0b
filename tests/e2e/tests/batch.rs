//! Batched resolution end to end: `tether export` of 40 managed uids against the reference server sends
//! two GraphQL requests (a batch of 32 and one of 8), counted by a loopback proxy in front of
//! the server that also delays each request by 50 ms, as a far-away server would.

#![allow(clippy::expect_used, reason = "test helpers fail loudly")]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;
use tether_e2e::Stack;

const UIDS: usize = 40;
const LATENCY: Duration = Duration::from_millis(50);

/// A loopback TCP proxy to `upstream` that counts the HTTP requests (`POST ` at the start of
/// what a client sends after a response) and holds each for [`LATENCY`] before passing it on.
/// Returns its address and the counter; it serves until the test process ends.
fn delaying_proxy(upstream: String) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding the proxy");
    let address = listener
        .local_addr()
        .expect("the proxy's address")
        .to_string();
    let requests = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&requests);
    std::thread::spawn(move || {
        for client in listener.incoming().take(64) {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(&upstream) else {
                continue;
            };
            let counter = Arc::clone(&counter);
            let (mut client_in, mut server_out) = (
                client.try_clone().expect("cloning the client socket"),
                server.try_clone().expect("cloning the server socket"),
            );
            std::thread::spawn(move || {
                let mut buffer = vec![0_u8; 64 * 1024];
                while let Ok(read) = client_in.read(&mut buffer) {
                    if read == 0 {
                        break;
                    }
                    let chunk = &buffer[..read];
                    if chunk.starts_with(b"POST ") {
                        counter.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(LATENCY);
                    }
                    if server_out.write_all(chunk).is_err() {
                        break;
                    }
                }
                let _ = server_out.shutdown(Shutdown::Write);
            });
            let (mut server_in, mut client_out) = (server, client);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut server_in, &mut client_out);
                let _ = client_out.shutdown(Shutdown::Write);
            });
        }
    });
    (address, requests)
}

#[test]
fn forty_managed_uids_resolve_in_two_requests() {
    let stack = Stack::start(&[]).expect("starting the tether-server stack");
    let spec = r#"{"command": "true"}"#;
    let uids: Vec<String> = (0..UIDS)
        .map(|index| {
            stack
                .add(&format!("batch-{index}"), spec, &[], "default")
                .expect("adding an installation to tether-server")
        })
        .collect();
    let upstream = stack
        .graphql_url()
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("the server's host and port")
        .to_owned();
    let (proxy, requests) = delaying_proxy(upstream);
    let before = stack.mint_count().expect("reading the mint count");

    let mut args = vec!["export", "--format", "json"];
    for uid in &uids {
        args.extend(["--mcp", uid.as_str()]);
    }
    let out = stack
        .tether(&args)
        .env("TETHER_SERVER_URL", format!("http://{proxy}/graphql"))
        .output()
        .expect("running tether export");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let exported: Value = serde_json::from_slice(&out.stdout).expect("parsing the export");
    let servers = exported["mcpServers"]
        .as_object()
        .expect("an mcpServers object");
    assert_eq!(servers.len(), UIDS, "{exported}");
    assert_eq!(
        requests.load(Ordering::SeqCst),
        2,
        "a batch of 32 and one of 8"
    );
    assert_eq!(
        stack.mint_count().expect("reading the mint count") - before,
        u64::try_from(UIDS).expect("a small count"),
        "each uid minted once"
    );
}
