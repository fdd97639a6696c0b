//! HTTP-port packages: a registry package whose transport is `streamable-http` on a local
//! port. The fixture registry publishes it as an npm package with a `--port` argument; the
//! `npx` shim runs the real test server in Streamable HTTP mode on that port. `add` starts it,
//! waits for the port, test-connects and stores it; `call` of the installation starts it
//! again and stops it with the run; a package that exits before it listens fails with its
//! stderr; a plain hand-off refuses it.

use std::os::unix::fs::PermissionsExt;

use tether_testkit::FixtureRegistry;

use crate::support::{Sandbox, text};

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    listener.local_addr().expect("its address").port()
}

/// An official entry: npm package `package` serving Streamable HTTP at
/// `http://localhost:{--port}/mcp`, `--port` an input defaulting to `port`.
fn entry(sandbox: &Sandbox, name: &str, package: &str, port: u16) -> String {
    let entry = serde_json::json!({
        "server": {
            "name": format!("io.github.example/{name}"),
            "description": "Serves Streamable HTTP on a port you choose",
            "version": "1.0.0",
            "packages": [{
                "registryType": "npm", "identifier": package, "version": "1.0.0",
                "transport": {"type": "streamable-http", "url": "http://localhost:{--port}/mcp"},
                "packageArguments": [{
                    "type": "named", "name": "--port", "description": "Port to serve on",
                    "isRequired": true, "format": "number", "default": port.to_string()
                }]
            }]
        },
        "_meta": {"io.modelcontextprotocol.registry/official": {
            "status": "active", "publishedAt": "2026-11-01T10:00:00Z",
            "updatedAt": "2026-11-01T10:00:00Z", "isLatest": true
        }}
    });
    sandbox.write(&format!("{name}.json"), &entry.to_string())
}

/// `npx -y PACKAGE@1.0.0 --port PORT`: `http-mcp` runs the test server at that port,
/// `broken-mcp` says why on stderr and exits 3.
fn npx_shim(sandbox: &Sandbox) -> String {
    let dir = sandbox.path("shim");
    std::fs::create_dir_all(&dir).expect("creating the shim directory");
    let npx = dir.join("npx");
    std::fs::write(
        &npx,
        format!(
            "#!/bin/sh\ncase \"$2\" in\n  http-mcp@1.0.0) exec {} --http \"127.0.0.1:$4\" ;;\n  *) echo \"cannot open the data file\" >&2; exit 3 ;;\nesac\n",
            tether_testkit::test_server_bin().display()
        ),
    )
    .expect("writing the npx shim");
    std::fs::set_permissions(&npx, std::fs::Permissions::from_mode(0o755))
        .expect("making the shim executable");
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[test]
fn an_http_port_package_is_added_started_connected_and_stopped_with_the_run() {
    let sandbox = Sandbox::new();
    let port = free_port();
    let good = entry(&sandbox, "http-pkg", "http-mcp", port);
    let broken = entry(&sandbox, "broken-pkg", "broken-mcp", free_port());
    let registry = FixtureRegistry::start(&["--entry", &good, "--entry", &broken]);
    let path = npx_shim(&sandbox);
    let tether = |args: &[&str]| {
        sandbox
            .tether(args)
            .env("TETHER_REGISTRY_URL", &registry.url)
            .env("TETHER_SECRET_STORE", "file")
            .env("PATH", &path)
            .env_remove("SMITHERY_API_KEY")
            .output()
            .expect("running tether")
    };

    let show = tether(&["show", "io.github.example/http-pkg"]);
    assert!(
        text(&show.stdout).contains("url: http://localhost:{--port}/mcp"),
        "{}",
        text(&show.stdout)
    );

    let added = tether(&[
        "add",
        "io.github.example/http-pkg",
        "--yes",
        "--sandbox",
        "none",
    ]);
    assert_eq!(added.status.code(), Some(0), "{}", text(&added.stderr));
    assert!(
        text(&added.stderr).contains("test-connect: ready"),
        "{}",
        text(&added.stderr)
    );
    let uid = text(&added.stdout).trim().to_owned();
    assert!(
        !listening(port),
        "the test-connect left the package running"
    );

    let called = tether(&[
        "call",
        "--mcp",
        &uid,
        "http-pkg",
        "add",
        "--args",
        r#"{"a":1,"b":2}"#,
        "--json",
    ]);
    assert_eq!(called.status.code(), Some(0), "{}", text(&called.stderr));
    let result: serde_json::Value = serde_json::from_slice(&called.stdout).expect("JSON");
    assert_eq!(result["content"][0]["text"], "3");
    assert!(!listening(port), "the run left the package running");

    // No harness format can say "start it, then connect to its port": export refuses it.
    let exported = tether(&["export", "--mcp", &uid, "--format", "claude"]);
    assert_eq!(
        exported.status.code(),
        Some(2),
        "{}",
        text(&exported.stderr)
    );
    assert!(
        text(&exported.stderr).contains("MCP server 'http-pkg': ")
            && text(&exported.stderr).contains("export with --gateway"),
        "{}",
        text(&exported.stderr)
    );

    // A plain hand-off: tether starts the package for the run and hands the harness the URL
    // it serves on; the (fake) harness initializes over it; the package stops with the run.
    let harness = sandbox.fake_program(
        "claude",
        r#"#!/bin/sh
for a in "$@"; do case "$a" in --mcp-config=*) f="${a#--mcp-config=}";; esac; done
exec python3 - "$f" "$0.out" <<'PY'
import json, sys, urllib.request
server = json.load(open(sys.argv[1]))["mcpServers"]["http-pkg"]
hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fake", "version": "1"}}}
request = urllib.request.Request(server["url"], data=json.dumps(hello).encode(), headers={"content-type": "application/json", "accept": "application/json, text/event-stream"})
answer = urllib.request.urlopen(request, timeout=30).read().decode()
open(sys.argv[2], "w").write(json.dumps({"server": server, "answer": answer}))
PY
"#,
    );
    let run = tether(&["run", "--mcp", &uid, "--", &harness.to_string_lossy()]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let seen: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(sandbox.path("bin/claude.out")).expect("the harness's record"),
    )
    .expect("JSON");
    assert_eq!(
        seen["server"]["url"],
        format!("http://127.0.0.1:{port}/mcp"),
        "{seen}"
    );
    assert!(
        seen["answer"]
            .as_str()
            .is_some_and(|a| a.contains("serverInfo")),
        "{seen}"
    );
    assert!(!listening(port), "the run left the package running");

    // A package that exits before it listens: its stderr, and nothing stored.
    let failed = tether(&[
        "add",
        "io.github.example/broken-pkg",
        "--yes",
        "--sandbox",
        "none",
    ]);
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed.stderr));
    let stderr = text(&failed.stderr);
    assert!(stderr.contains("cannot open the data file"), "{stderr}");
    assert!(stderr.contains("nothing was stored"), "{stderr}");
}

/// A config of the test server serving Streamable HTTP on `port` (`"serves"`).
fn serving_test_server(port: u16) -> String {
    serde_json::json!({"srv": {
        "command": tether_testkit::test_server_bin(),
        "args": ["--http", format!("127.0.0.1:{port}")],
        "serves": {"url": format!("http://127.0.0.1:{port}/mcp")}
    }})
    .to_string()
}

/// Under the default sandbox (which lets a server listen nowhere) a `"serves"` server may
/// listen on its own port, and the report says so.
#[test]
fn a_sandboxed_http_port_server_may_listen_on_its_port_only() {
    let sandbox = Sandbox::new();
    let port = free_port();
    let spec = serving_test_server(port);
    let out = sandbox.run(&[
        "call",
        "--mcp",
        &spec,
        "srv",
        "add",
        "--args",
        r#"{"a":2,"b":2}"#,
        "--sandbox",
        "default",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "4");
    assert!(
        text(&out.stderr).contains(&format!("listening on ports [{port}] only")),
        "{}",
        text(&out.stderr)
    );
    assert!(!listening(port), "the run left the server running");
}

/// A host allow-list would put the server in a network namespace of its own, where its port
/// is out of tether's reach: refused in one line before anything starts, not a timeout.
#[test]
fn an_http_port_server_with_a_host_allow_list_is_refused_in_words() {
    let sandbox = Sandbox::new();
    let port = free_port();
    let profile = sandbox.dir.path().join("hosts.json");
    std::fs::write(
        &profile,
        r#"{"network": {"outbound": {"allow_host": ["api.example.com"], "allow_port": [443]}}}"#,
    )
    .expect("writing the profile");
    let spec = serving_test_server(port);
    let profile = profile.to_string_lossy().into_owned();
    let out = sandbox.run(&["test", "--mcp", &spec, "--sandbox", &profile]);
    let report = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("failed  srv  it serves HTTP on a port tether must reach, and its sandbox profile's allow_host would put it in a network namespace of its own"),
        "{report}"
    );
    assert!(!listening(port), "the server was started");
}

/// Another process (another user's, in the attack) listening on the package's published port
/// first would get the handshake and the calls: the start is refused before the package runs,
/// and the squatter never gets a byte.
#[test]
fn a_port_another_process_already_listens_on_is_refused() {
    let sandbox = Sandbox::new();
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").expect("binding the squatter");
    let port = squatter.local_addr().expect("its address").port();
    squatter.set_nonblocking(true).expect("nonblocking");
    let spec = serving_test_server(port);
    let out = sandbox.run(&[
        "call",
        "--mcp",
        &spec,
        "srv",
        "add",
        "--args",
        r#"{"a":2,"b":2}"#,
    ]);
    assert_ne!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("already accepts connections before the package started"),
        "{}",
        text(&out.stderr)
    );
    // tether's one dial to check, with nothing sent on it.
    assert_nothing_received(&squatter);
}

/// Accepts what `squatter` (non-blocking) has queued and asserts nothing was sent on any of it.
fn assert_nothing_received(squatter: &std::net::TcpListener) {
    use std::io::Read as _;
    let mut received = Vec::new();
    while let Ok((mut stream, _)) = squatter.accept() {
        stream.set_nonblocking(false).expect("blocking");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .expect("timeout");
        let _ = stream.read_to_end(&mut received);
    }
    assert!(
        received.is_empty(),
        "{}",
        String::from_utf8_lossy(&received)
    );
}

/// A package that listens on every interface (`0.0.0.0`) serves its tools to the network (the
/// sandbox's bind rule is by port only): its start is refused in one line, unless its
/// `"serves"` says `"anyInterface": true`, and then the run names it.
#[test]
fn a_package_listening_on_every_interface_is_refused_unless_allowed() {
    let sandbox = Sandbox::new();
    let spec = |port: u16, allowed: bool| {
        let mut serves = serde_json::json!({"url": format!("http://127.0.0.1:{port}/mcp")});
        if allowed {
            serves["anyInterface"] = serde_json::json!(true);
        }
        serde_json::json!({"srv": {
            "command": tether_testkit::test_server_bin(),
            "args": ["--http", format!("0.0.0.0:{port}")],
            "serves": serves
        }})
        .to_string()
    };
    let call = |spec: &str| {
        sandbox.run(&[
            "call",
            "--mcp",
            spec,
            "srv",
            "add",
            "--args",
            r#"{"a":2,"b":2}"#,
        ])
    };
    let port = free_port();
    let refused = call(&spec(port, false));
    assert_ne!(refused.status.code(), Some(0), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains(&format!(
            "it listens on 0.0.0.0:{port}, every interface: its tools would be reachable from your network"
        )) && text(&refused.stderr).contains(r#""anyInterface": true"#),
        "{}",
        text(&refused.stderr)
    );
    assert!(!listening(port), "the refused package was left running");
    let port = free_port();
    let allowed = call(&spec(port, true));
    assert_eq!(allowed.status.code(), Some(0), "{}", text(&allowed.stderr));
    assert!(
        text(&allowed.stderr).contains(&format!("listens on 0.0.0.0:{port}, every interface")),
        "{}",
        text(&allowed.stderr)
    );
    let loopback = call(&serving_test_server(free_port()));
    assert_eq!(
        loopback.status.code(),
        Some(0),
        "{}",
        text(&loopback.stderr)
    );
    assert!(
        !text(&loopback.stderr).contains("every interface"),
        "{}",
        text(&loopback.stderr)
    );
}

/// A process that takes the package's port *after* tether looked (before the spawn) gets the
/// dial that waits for the package, but not the handshake: tether checks that the listening
/// socket is one the package's processes hold, and refuses in one line. The
/// package (a shell that tells the test it started, then never listens) and the squatter (this
/// test, bound once the package says it runs) are ordered by a FIFO, not by time.
#[test]
fn a_port_taken_after_the_check_is_refused_and_the_squatter_gets_no_handshake() {
    use std::io::Read as _;
    let sandbox = Sandbox::new();
    let port = free_port();
    let fifo = sandbox.dir.path().join("started");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("running mkfifo");
    assert!(made.success(), "mkfifo");
    let spec = serde_json::json!({"srv": {
        "command": "/bin/sh",
        "args": ["-c", format!("echo up > '{}'; exec sleep 60", fifo.display())],
        "serves": {"url": format!("http://127.0.0.1:{port}/mcp")}
    }})
    .to_string();
    let run = sandbox
        .runner()
        .command(&["test", "--mcp", &spec, "--timeout", "20"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting tether");
    // Blocks until the package writes: tether has checked the port and spawned it.
    let mut started = String::new();
    std::fs::File::open(&fifo)
        .and_then(|mut f| f.read_to_string(&mut started))
        .expect("reading the FIFO");
    assert_eq!(started.trim(), "up");
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).expect("squatting the port");
    let out = run.wait_with_output().expect("waiting for tether");
    let report = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_ne!(out.status.code(), Some(0), "{report}");
    assert!(
        report.contains(&format!(
            "127.0.0.1:{port} (its \"serves\" url) is listened on by a process that is not the package"
        )),
        "{report}"
    );
    // What reached the squatter: tether's dials, with nothing sent on them.
    squatter.set_nonblocking(true).expect("nonblocking");
    assert_nothing_received(&squatter);
}
