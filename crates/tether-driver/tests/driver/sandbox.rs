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
        cache_home: None,
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
    // The proxy ran in this process: once the servers are gone, so is its socket (and with it
    // the last hold on their namespace). Aborting a task is not synchronous: a bounded wait.
    let deadline = std::time::Instant::now() + STEP;
    while foreign_sockets() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        foreign_sockets(),
        0,
        "a socket of a server's namespace is still open"
    );
}

/// How many of this process's sockets belong to another network namespace than its own
/// (`SIOCGSKNS` gives a socket's namespace).
#[expect(unsafe_code, reason = "SIOCGSKNS is an ioctl")]
fn foreign_sockets() -> usize {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::MetadataExt;
    let own = std::fs::metadata("/proc/self/ns/net")
        .expect("own netns")
        .ino();
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    fds.flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
        })
        .filter_map(|fd| fd.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&fd| {
            // SAFETY: SIOCGSKNS takes no argument and returns a new descriptor (owned here) or
            // fails; `fd` is this process's (it may have closed meanwhile: then it fails).
            let ns = unsafe { nix::libc::ioctl(fd, nix::libc::SIOCGSKNS) };
            if ns < 0 {
                return false;
            }
            // SAFETY: a descriptor the ioctl just opened for this process.
            let ns = unsafe { OwnedFd::from_raw_fd(ns) };
            let path = format!("/proc/self/fd/{}", ns.as_raw_fd());
            std::fs::metadata(path).is_ok_and(|m| m.ino() != own)
        })
        .count()
}
