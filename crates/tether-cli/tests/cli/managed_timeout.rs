//! The CLI's bound on managed resolution: `--managed-timeout SECS`, `TETHER_MANAGED_TIMEOUT` and
//! `managed_timeout` in config.toml bound managed resolution against an endpoint that accepts
//! connections and never answers; `--server-url` belongs to the resolving commands only.

use std::net::TcpListener;

use crate::support::{Sandbox, text};

const UID: &str = "6f1d2c3b-4a59-4e68-9f70-8a1b2c3d4e5f";

/// A loopback endpoint that accepts connections and never answers (kept open until the test
/// process ends).
fn hung_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
    let url = format!(
        "http://{}/graphql",
        listener.local_addr().expect("the bound address")
    );
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().take(16) {
            held.push(stream);
        }
        std::thread::park();
    });
    url
}

fn test_managed(sandbox: &Sandbox, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["test", "--mcp", UID];
    args.extend_from_slice(extra);
    sandbox
        .tether(&args)
        .env("TETHER_API_KEY", "tk-TIMEOUT-SENTINEL")
        .output()
        .expect("running tether test")
}

#[test]
fn the_flag_the_variable_and_config_toml_set_the_deadline() {
    let sandbox = Sandbox::new();
    let url = hung_endpoint();

    let out = test_managed(&sandbox, &["--server-url", &url, "--managed-timeout", "1"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("within the resolution deadline of 1 s"),
        "{stderr}"
    );
    assert!(!stderr.contains("SENTINEL"), "{stderr}");

    let out = sandbox
        .tether(&["test", "--mcp", UID, "--server-url", &url])
        .env("TETHER_API_KEY", "tk-TIMEOUT-SENTINEL")
        .env("TETHER_MANAGED_TIMEOUT", "2")
        .output()
        .expect("running tether test");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("within the resolution deadline of 2 s"),
        "{stderr}"
    );

    std::fs::create_dir_all(sandbox.home()).expect("creating TETHER_HOME");
    std::fs::write(
        sandbox.home().join("config.toml"),
        format!("server_url = \"{url}\"\nmanaged_timeout = 1\n"),
    )
    .expect("writing config.toml");
    let out = test_managed(&sandbox, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("within the resolution deadline of 1 s"),
        "{stderr}"
    );
}

#[test]
fn bad_deadlines_and_misplaced_flags_are_usage_errors() {
    let sandbox = Sandbox::new();
    let url = hung_endpoint();
    let out = test_managed(&sandbox, &["--server-url", &url, "--managed-timeout", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    let out = sandbox
        .tether(&["test", "--mcp", UID, "--server-url", &url])
        .env("TETHER_MANAGED_TIMEOUT", "soon")
        .output()
        .expect("running tether test");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("TETHER_MANAGED_TIMEOUT must be a whole number"),
        "{stderr}"
    );

    for command in [&["list"][..], &["remove", UID], &["completions", "bash"]] {
        let mut args = command.to_vec();
        args.extend(["--server-url", url.as_str()]);
        let out = sandbox.tether(&args).output().expect("running tether");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
        assert!(stderr.contains("--server-url"), "{stderr}");
    }
}
