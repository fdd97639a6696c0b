//! `tether add` of a Smithery-hosted server: the fixture registry's Smithery API describes
//! `@example/hosted`, whose deployment URL is the real test server in Streamable HTTP mode,
//! answering only with `Authorization: Bearer <the Smithery key>`. The key comes from
//! tether's Smithery key (here `SMITHERY_API_KEY`), goes to the secret store with the
//! installation and never into the stored config; an entry whose URL is on another host
//! never gets the key.

use std::process::{Child, Command, Stdio};

use tether_testkit::{FIXTURE_SMITHERY_KEY, FixtureRegistry};

use crate::support::{Sandbox, text};

/// The test server at a free port, requiring the fixture's Smithery key as its bearer token.
fn hosted_server() -> (Child, u16) {
    let mut child = Command::new(tether_testkit::test_server_bin())
        .args([
            "--http",
            "127.0.0.1:0",
            "--require-bearer-env",
            "HOSTED_KEY",
        ])
        .env("HOSTED_KEY", FIXTURE_SMITHERY_KEY)
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the test server");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("its stdout")),
        &mut line,
    )
    .expect("reading its address");
    let port = line
        .trim()
        .trim_end_matches("/mcp")
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    (child, port)
}

fn detail(sandbox: &Sandbox, file: &str, name: &str, url: &str) -> String {
    let detail = serde_json::json!({
        "qualifiedName": name, "displayName": "Hosted", "description": "A hosted server",
        "remote": true,
        "connections": [{"type": "http", "deploymentUrl": url, "configSchema": {
            "type": "object", "required": ["region"], "properties": {
                "region": {"type": "string", "description": "Data region", "default": "eu", "enum": ["eu", "us"]},
                "units": {"type": "string", "description": "Units"}
            }}}]
    });
    sandbox.write(file, &detail.to_string())
}

#[test]
fn a_smithery_hosted_server_is_added_as_a_remote_with_the_stored_key_as_its_bearer() {
    let sandbox = Sandbox::new();
    let (mut server, port) = hosted_server();
    let hosted = detail(
        &sandbox,
        "hosted.json",
        "@example/hosted",
        &format!("http://127.0.0.1:{port}/mcp"),
    );
    let elsewhere = detail(
        &sandbox,
        "elsewhere.json",
        "@example/elsewhere",
        &format!("http://localhost:{port}/mcp"),
    );
    let registry = FixtureRegistry::start(&[
        "--smithery-detail",
        &hosted,
        "--smithery-detail",
        &elsewhere,
    ]);
    let tether = |args: &[&str]| {
        sandbox
            .tether(args)
            .env("TETHER_REGISTRY_URL", &registry.url)
            .env("TETHER_SMITHERY_URL", &registry.url)
            .env("SMITHERY_API_KEY", FIXTURE_SMITHERY_KEY)
            .env("TETHER_SECRET_STORE", "file")
            .output()
            .expect("running tether")
    };

    let added = tether(&["add", "@example/hosted", "--yes"]);
    assert_eq!(added.status.code(), Some(0), "{}", text(&added.stderr));
    let stderr = text(&added.stderr);
    assert!(
        stderr.contains(&format!(
            "using the remote http://127.0.0.1:{port}/mcp?region={{region}}&units={{units}} (streamable-http) of @example/hosted hosted"
        )) && stderr.contains("test-connect: ready"),
        "{stderr}"
    );
    let uid = text(&added.stdout).trim().to_owned();

    // Stored with the registry, and runnable: the key comes from the secret store.
    let list: serde_json::Value =
        serde_json::from_slice(&sandbox.run(&["list", "--json"]).stdout).expect("list --json");
    let source = &list["installations"][0]["source"];
    assert_eq!(
        (&source["registry"], &source["name"]),
        (&"smithery".into(), &"@example/hosted".into())
    );
    let called = sandbox
        .tether(&[
            "call",
            "--mcp",
            &uid,
            "hosted",
            "add",
            "--args",
            r#"{"a":2,"b":3}"#,
        ])
        .env_remove("SMITHERY_API_KEY")
        .output()
        .expect("running tether call");
    assert_eq!(called.status.code(), Some(0), "{}", text(&called.stderr));
    assert_eq!(text(&called.stdout).trim(), "5");

    // The key is in the secret store's file and in no other file of the data directory.
    let mut holders = Vec::new();
    let mut dirs = vec![sandbox.home()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("reading the data directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if std::fs::read(&path)
                .expect("reading a file")
                .windows(FIXTURE_SMITHERY_KEY.len())
                .any(|w| w == FIXTURE_SMITHERY_KEY.as_bytes())
            {
                holders.push(
                    path.file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    assert_eq!(holders, ["secrets.json"]);

    // An entry whose URL is on a host other than Smithery's gets no key (and no such input).
    let refused = tether(&["add", "@example/elsewhere", "--yes", "--name", "elsewhere"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused.stderr));
    let stderr = text(&refused.stderr);
    assert!(stderr.contains("nothing was stored"), "{stderr}");
    assert!(!stderr.contains(FIXTURE_SMITHERY_KEY), "{stderr}");

    // A Smithery server without a hosted connection is refused, saying why.
    let local = tether(&["add", "@example/filesystem-plus", "--yes"]);
    assert_eq!(local.status.code(), Some(2), "{}", text(&local.stderr));
    assert!(
        text(&local.stderr).contains("no hosted (http) connection"),
        "{}",
        text(&local.stderr)
    );
    let _ = server.kill();
    let _ = server.wait();
}
