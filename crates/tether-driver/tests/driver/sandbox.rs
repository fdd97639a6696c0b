//! The sandbox on the library path (no supervisor: the driver prepares it in-process and
//! applies it in the server's child): the same probe is allowed unsandboxed and denied under
//! `default`, and the private home is gone after shutdown.

use std::time::Duration;

use serde_json::json;
use tether_config::Secrets;
use tether_driver::StartOptions;

use crate::support::{call, inline_session, json_str, test_server_bin};

const STEP: Duration = Duration::from_secs(60);

/// The text of the probe's answer, and whether it was an error.
async fn probe(
    sandbox: Option<tether_sandbox::Policy>,
    arguments: serde_json::Value,
) -> (String, bool) {
    let config = format!(
        r#"{{"srv": {{"command": {}, "args": ["--probe-tool"]}}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    );
    let session = inline_session(&config, &Secrets::new()).await;
    let options = StartOptions {
        sandbox,
        ..StartOptions::default()
    };
    let runtime = tokio::time::timeout(STEP, session.start(&options))
        .await
        .expect("started in time")
        .expect("started");
    let result = call(&runtime, "srv", "probe", arguments).await;
    runtime.shutdown().await;
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (text, result["isError"].as_bool().unwrap_or(false))
}

fn default() -> Option<tether_sandbox::Policy> {
    tether_sandbox::Mode::Default
        .policy()
        .expect("the built-in policy")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_file_is_read_unsandboxed_and_denied_under_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("id_rsa");
    std::fs::write(&key, "PLANTED").expect("plant");
    let read = json!({"action": "read", "path": key.to_string_lossy()});
    let (text, error) = probe(None, read.clone()).await;
    assert!(!error && text.starts_with("done: "), "{text}");
    let (text, error) = probe(default(), read).await;
    assert!(error && text.contains("Permission denied"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_private_home_is_removed_after_shutdown() {
    let (text, error) = probe(
        default(),
        json!({"action": "append", "path": "~/made-here"}),
    )
    .await;
    assert!(!error, "{text}");
    let path = text
        .strip_prefix("done: appended to ")
        .expect("the probe's answer names the file");
    let home = std::path::Path::new(path).parent().expect("a parent");
    assert!(
        home.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("tether-sandbox-")),
        "{text}"
    );
    assert!(!home.exists(), "{} is still there", home.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_allow_list_goes_through_the_in_process_egress_proxy() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    // Answers one request (the allowed fetch): the test ends with it.
    let served = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accepted");
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let mut byte = [0u8; 1];
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
            head.push(byte[0]);
        }
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    });
    let profile = tether_sandbox::Profile::from_json(&format!(
        r#"{{"network": {{"outbound": {{"allow_host": ["localhost"], "allow_port": [{port}]}}}}}}"#
    ))
    .expect("profile");
    let policy = tether_sandbox::Policy {
        label: "hosts.json".to_owned(),
        profile,
        strict: false,
        assume_no_netns: false,
    };
    if !tether_sandbox::assess(&policy).missing.is_empty() {
        eprintln!("NOTICE: no network namespace here");
        return;
    }
    let fetch = |host: &str| json!({"action": "fetch", "url": format!("http://{host}:{port}/")});
    let (text, error) = probe(Some(policy.clone()), fetch("localhost")).await;
    assert!(!error && text.contains("200 OK: ok"), "{text}");
    served.join().expect("served");
    let (text, error) = probe(Some(policy), fetch("127.0.0.1")).await;
    assert!(error && text.contains("403"), "{text}");
    assert!(text.contains("add \"127.0.0.1\""), "{text}");
}
