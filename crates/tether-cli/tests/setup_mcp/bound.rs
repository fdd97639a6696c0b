//! What a hostile agent or a listener on a reused port can no longer do with a typed value: a
//! ref is bound to the entry, launch option and key it was
//! requested for; no ref is asked for a command-line argument; `tether secrets submit` sends a
//! value only to a live page of this user that proves its announcement's key.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use rmcp::model::ClientConfig;
use serde_json::json;
use tether_testkit::holds;

use super::{
    ENTRY, SENTINEL, Sandbox, Transcript, call, error_text, post, request, structured, tether,
    with_ref,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ref_serves_only_the_entry_and_key_it_was_requested_for() {
    let sandbox = Sandbox::new();
    // nuget-tools runs through `dnx`: a runner on PATH that is never started here.
    let dnx = sandbox.dir.path().join("shim").join("dnx");
    std::fs::write(&dnx, "#!/bin/sh\nexit 64\n").expect("writing the dnx shim");
    std::fs::set_permissions(&dnx, std::fs::Permissions::from_mode(0o755))
        .expect("making it executable");
    let transcript = Transcript::default();
    let client = sandbox.connect(ClientConfig::default()).await;

    // The person types the value on the page shown for web-search's SEARCH_API_KEY.
    let asked = structured(&request(&client, &transcript, "Your search API key").await);
    let reference = asked["ref"].as_str().expect("a ref").to_owned();
    let url = asked["url"].as_str().expect("a url").to_owned();
    let page = reqwest::get(&url)
        .await
        .expect("GET the page")
        .text()
        .await
        .expect("the page");
    assert!(page.contains(ENTRY), "the page names the entry: {page}");
    assert_eq!(post(&url, SENTINEL, None, None).await.0, 200);

    // Another entry (one with a remote taking an X-Api-Key header) cannot use it, under its
    // own header name nor under the key it was requested for.
    for key in ["X-Api-Key", "SEARCH_API_KEY"] {
        let refused = error_text(
            &call(
                &client,
                &transcript,
                "mcp_setup_test_connection",
                json!({"qualified_name": "io.github.example/everything", "env_refs": {key: reference}}),
            )
            .await,
        );
        // Under another key name the key check refuses it first; under its own key name the
        // entry it was bound to is named.
        let named = if key == "SEARCH_API_KEY" {
            refused.contains(ENTRY) && refused.contains("mcp_setup_request_secret")
        } else {
            refused.contains("was requested for SEARCH_API_KEY, not X-Api-Key")
        };
        assert!(named, "{key}: {refused}");
    }
    // Nor install with it: and an install refused for another entry does not spend it.
    let refused = error_text(
        &call(
            &client,
            &transcript,
            "mcp_setup_install_and_connect",
            json!({"qualified_name": "io.github.example/everything", "env_refs": {"X-Api-Key": reference}}),
        )
        .await,
    );
    assert!(
        refused.contains("was requested for SEARCH_API_KEY"),
        "{refused}"
    );

    // A key the entry does not declare gets no page at all.
    let undeclared = error_text(
        &call(
            &client,
            &transcript,
            "mcp_setup_request_secret",
            json!({"qualified_name": ENTRY, "key_name": "AWS_SECRET_ACCESS_KEY", "prompt": "x"}),
        )
        .await,
    );
    assert!(
        undeclared.contains("AWS_SECRET_ACCESS_KEY")
            && undeclared.contains("declares no input of that name")
            && undeclared.contains("SEARCH_API_KEY"),
        "{undeclared}"
    );
    // Nor does an input that goes on the command line (nuget-tools' `--allow {dir}`).
    let argv = error_text(
        &call(
            &client,
            &transcript,
            "mcp_setup_request_secret",
            json!({"qualified_name": "io.github.example/nuget-tools", "key_name": "dir", "prompt": "x"}),
        )
        .await,
    );
    assert!(
        argv.contains("dir is a command-line argument") && argv.contains("/proc/PID/cmdline"),
        "{argv}"
    );

    // Its own entry still gets the value: the server starts only with the exact secret.
    let ok = structured(
        &with_ref(
            &client,
            &transcript,
            "mcp_setup_test_connection",
            "SEARCH_API_KEY",
            &reference,
        )
        .await,
    );
    assert_eq!(ok["ok"], true, "{ok}");
    client.cancel().await.expect("closing the session");

    let log = std::fs::read_to_string(sandbox.log()).expect("the log");
    assert!(
        !transcript.text().contains(SENTINEL),
        "a tool result holds the secret"
    );
    assert!(!log.contains(SENTINEL), "the -vvv log holds the secret");
    assert!(!holds(&sandbox.files_outside_the_secret_store(), SENTINEL));
}

/// A loopback listener that answers every request with 200 and a proof-shaped body, and keeps
/// every byte it was sent: a program of another user on a port a setup page once had.
struct Impostor {
    port: u16,
    received: Arc<Mutex<Vec<u8>>>,
}

impl Impostor {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the impostor");
        let port = listener.local_addr().expect("its address").port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&received);
        std::thread::spawn(move || {
            // Ends with the test process; each connection is read until the client is done
            // sending (a short read timeout: the client waits for the answer).
            for stream in listener.incoming().flatten() {
                let mut stream = stream;
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_millis(300)));
                let mut buffer = [0_u8; 4096];
                while let Ok(n) = stream.read(&mut buffer) {
                    if n == 0 {
                        break;
                    }
                    kept.lock()
                        .expect("the bytes")
                        .extend_from_slice(&buffer[..n]);
                }
                let body = "0".repeat(64);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Self { port, received }
    }

    fn received(&self) -> String {
        String::from_utf8_lossy(&self.received.lock().expect("the bytes")).into_owned()
    }
}

/// Writes an announcement of the page at `port` for the process `pid`, as a setup server
/// would (directory 0700, file 0600, the address and a 64-digit key).
fn announce(sandbox: &Sandbox, pid: u32, port: u16) -> std::path::PathBuf {
    let dir = sandbox.home().join("setup-mcp");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .expect("the announcement directory");
    let path = dir.join(pid.to_string());
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("the announcement file");
    write!(file, "127.0.0.1:{port}\n{}\n", "ab".repeat(32)).expect("writing the announcement");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_submit_sends_nothing_to_a_listener_that_is_not_a_live_page() {
    let sandbox = Sandbox::new();
    let impostor = Impostor::start();
    // A hostile value: it must reach no one here.
    let value = format!("{SENTINEL}-$HOME-%41-\"q\"-{{{{x}}}}-é");
    let submit = |target: String| {
        let mut command = sandbox.command(
            tether(),
            &["-vvv", "secrets", "submit", &target, "--from", "env:VALUE"],
        );
        command.env("VALUE", &value).stdin(Stdio::null());
        command.output()
    };
    let nonce = "0123456789abcdef0123456789abcdef";

    // An address typed by hand: refused before the value is read.
    let out = submit(format!("http://127.0.0.1:{}/secret/{nonce}", impostor.port))
        .await
        .expect("tether secrets submit");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is not the page of a tether setup-mcp running for this user"),
        "{stderr}"
    );

    // A stale announcement of a process that is gone: removed, nothing sent.
    let mut gone = std::process::Command::new("true")
        .spawn()
        .expect("starting a process that ends");
    let gone_pid = gone.id();
    gone.wait().expect("its end");
    let stale = announce(&sandbox, gone_pid, impostor.port);
    let out = submit(nonce.to_owned())
        .await
        .expect("tether secrets submit");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stale.exists(), "the stale announcement is removed");

    // An announcement naming a live process (this test) and the impostor's port: the
    // listener cannot prove the key, so it gets a challenge and never the value.
    announce(&sandbox, std::process::id(), impostor.port);
    let out = submit(nonce.to_owned())
        .await
        .expect("tether secrets submit");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("nothing was sent to it"), "{stderr}");

    let received = impostor.received();
    assert!(
        received.contains("/announce/proof"),
        "the proof was asked: {received}"
    );
    assert!(!received.contains("POST"), "a value was posted: {received}");
    assert!(!received.contains(SENTINEL), "the impostor got the value");
    assert!(!stderr.contains(SENTINEL), "stderr holds the value");
}
