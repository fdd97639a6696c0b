//! `--sandbox`: a hostile server (the test server's `probe` tool) is denied each thing the
//! issue lists under `default` — and allowed each under `none`, so the test proves the sandbox,
//! not the probe; real servers still work sandboxed; a ToolHive-format profile is honoured.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Output;

use crate::support::{Sandbox, json_str, test_server_bin, text};

/// What makes a strict policy treat network namespaces as unavailable.
const ASSUME_NO_NETNS: &str = "TETHER_SANDBOX_ASSUME_NO_NETNS";

/// A loopback HTTP server answering every request `200` with `body`, on its own thread for the
/// rest of the test process (each connection read to the end of its head, 10 s at most).
fn http_server(body: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// Whether a run said this system cannot give a server a network namespace.
fn nothing_here(out: &Output) -> bool {
    text(&out.stderr).contains("no network namespace for the server")
}

/// The probe's `fetch` of `url` `via` (`connect`, `forward`, `direct`).
fn fetch(url: &str, via: &str) -> String {
    format!(
        r#"{{"action": "fetch", "url": {}, "via": "{via}"}}"#,
        json_str(url)
    )
}

#[test]
fn a_host_allow_list_lets_through_its_hosts_and_ports_only() {
    let world = planted();
    let (a, b) = (http_server("served by A"), http_server("served by B"));
    // Unsandboxed, both are reached directly.
    for (port, body) in [(a, "served by A"), (b, "served by B")] {
        let out = world.probe(
            "none",
            &fetch(&format!("http://127.0.0.1:{port}/"), "direct"),
        );
        assert!(
            done(&out) && text(&out.stdout).contains(body),
            "{}",
            both(&out)
        );
    }
    let profile = world.sandbox.write(
        "hosts.json",
        &format!(
            r#"{{"network": {{"outbound": {{"allow_host": ["localhost"], "allow_port": [{a}]}}}}}}"#
        ),
    );
    let first = world.probe(
        &profile,
        &fetch(&format!("http://localhost:{a}/x"), "connect"),
    );
    if nothing_here(&first) {
        eprintln!("NOTICE: no network namespace here: {}", text(&first.stderr));
        return;
    }
    // Through the proxy (CONNECT for HTTPS_PROXY, absolute-form for HTTP_PROXY): allowed.
    let forwarded = world.probe(
        &profile,
        &fetch(&format!("http://localhost:{a}/y"), "forward"),
    );
    for out in [&first, &forwarded] {
        assert!(
            done(out) && text(&out.stdout).contains("served by A"),
            "{}",
            both(out)
        );
        assert!(
            text(&out.stderr).contains(&format!(
                "TCP connections to hosts [\"localhost\"] on ports [{a}] only (egress proxy"
            )),
            "{}",
            both(out)
        );
    }
    // A host not listed, a port not listed: 403, and the run names them and the line to add.
    for (url, names, add) in [
        (
            format!("http://127.0.0.1:{a}/"),
            format!("127.0.0.1:{a}"),
            "add \"127.0.0.1\" to \"network\".\"outbound\".\"allow_host\"".to_owned(),
        ),
        (
            format!("http://localhost:{b}/"),
            format!("localhost:{b}"),
            format!("add {b} to \"network\".\"outbound\".\"allow_port\""),
        ),
    ] {
        for via in ["connect", "forward"] {
            let out = world.probe(&profile, &fetch(&url, via));
            assert!(denied(&out), "{via} {url}: {}", both(&out));
            assert!(text(&out.stdout).contains("403"), "{}", both(&out));
            assert!(
                text(&out.stderr).contains(&format!("a connection to {names}"))
                    && text(&out.stderr).contains(&add),
                "{via} {url}: {}",
                both(&out)
            );
        }
    }
    // Without the proxy there is no way out: the namespace has nothing but it.
    let direct = world.probe(
        &profile,
        &fetch(&format!("http://127.0.0.1:{a}/"), "direct"),
    );
    assert!(denied(&direct), "{}", both(&direct));
    assert!(
        text(&direct.stderr).contains(&format!("a direct TCP connection to port {a}"))
            && text(&direct.stderr).contains("a client that ignores them has no network"),
        "{}",
        both(&direct)
    );
    // And nothing of the run is left: no private home, no process of it.
    assert_eq!(world.left_in_tmp(), Vec::<String>::new(), "left in TMPDIR");
}

/// A user home with planted credentials, and a TMPDIR to see the private homes in.
struct Planted {
    sandbox: Sandbox,
    home: PathBuf,
    tmp: PathBuf,
}

fn planted() -> Planted {
    let sandbox = Sandbox::new();
    let home = sandbox.path("home");
    for (file, body) in [
        (".ssh/id_rsa", "PLANTED SSH KEY"),
        (
            ".aws/credentials",
            "[default]\naws_secret_access_key = PLANTED",
        ),
        (".bashrc", "# planted\n"),
        ("project/notes.txt", "notes"),
    ] {
        let path = home.join(file);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, body).expect("plant");
    }
    let tmp = sandbox.path("tmp");
    std::fs::create_dir_all(&tmp).expect("mkdir tmp");
    Planted { sandbox, home, tmp }
}

impl Planted {
    /// `tether ARGS` with HOME and TMPDIR of the planted world.
    fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, &[])
    }

    /// `tether ARGS` with HOME and TMPDIR of the planted world, and `envs`.
    fn run_with(&self, args: &[&str], envs: &[(&str, &str)]) -> Output {
        let mut runner = self
            .sandbox
            .runner()
            .user_home(&self.home)
            .env("TMPDIR", &self.tmp);
        for (name, value) in envs {
            runner = runner.env(name, value);
        }
        let command = runner.command(args);
        assert_cmd::Command::from_std(command)
            .output()
            .expect("running tether")
    }

    /// `tether call` of the probe tool with `arguments` under `mode`.
    fn probe(&self, mode: &str, arguments: &str) -> Output {
        self.probe_with(mode, arguments, &[])
    }

    /// [`Planted::probe`] with `envs` for tether.
    fn probe_with(&self, mode: &str, arguments: &str, envs: &[(&str, &str)]) -> Output {
        let spec = test_server(&["--probe-tool"]);
        let args = [
            "call",
            "--mcp",
            &spec,
            "srv",
            "probe",
            "--args",
            arguments,
            "--sandbox",
            mode,
        ];
        self.run_with(&args, envs)
    }

    /// What is in the planted TMPDIR (where private homes are made).
    fn left_in_tmp(&self) -> Vec<String> {
        std::fs::read_dir(&self.tmp)
            .expect("read TMPDIR")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    fn path(&self, relative: &str) -> String {
        self.home.join(relative).to_string_lossy().into_owned()
    }
}

fn test_server(args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| json_str(a)).collect();
    format!(
        r#"{{"mcpServers": {{"srv": {{"command": {}, "args": [{}]}}}}}}"#,
        json_str(&test_server_bin().to_string_lossy()),
        args.join(", ")
    )
}

fn done(out: &Output) -> bool {
    out.status.success() && text(&out.stdout).starts_with("done: ")
}

fn denied(out: &Output) -> bool {
    out.status.code() == Some(1) && text(&out.stdout).starts_with("denied: ")
}

/// Asserts the probe's stdout holds `words`, showing both streams when it does not.
fn assert_says(out: &Output, words: &str) {
    assert!(text(&out.stdout).contains(words), "{words}: {}", both(out));
}

fn both(out: &Output) -> String {
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

#[test]
fn a_hostile_server_is_denied_each_access_under_default_and_allowed_under_none() {
    let world = planted();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let at = |action: &str, relative: &str| {
        format!(
            r#"{{"action": "{action}", "path": {}}}"#,
            json_str(&world.path(relative))
        )
    };
    let probes = [
        at("read", ".ssh/id_rsa"),
        at("read", ".aws/credentials"),
        at("list", ""),
        at("append", ".bashrc"),
        format!(r#"{{"action": "connect", "port": {port}}}"#),
        // Past default's 256 processes.
        r#"{"action": "spawn", "count": 300}"#.to_owned(),
        // Past default's 4096 MiB (reserved, never touched).
        r#"{"action": "allocate", "mb": 6144}"#.to_owned(),
    ];
    for probe in &probes {
        let open = world.probe("none", probe);
        assert!(done(&open), "none: {probe}: {}", both(&open));
        let closed = world.probe("default", probe);
        if probe.contains("spawn") && text(&closed.stderr).contains("NOT enforced: the limit of") {
            // Root without a writable pids cgroup: the run said so, which is what it can do.
            eprintln!("NOTICE: no process limit here: {}", text(&closed.stderr));
            continue;
        }
        assert!(denied(&closed), "default: {probe}: {}", both(&closed));
        if probe.contains("home") {
            // A denied path is explained with the line to add.
            assert!(
                text(&closed.stderr).contains("to \"read\" of a permission profile")
                    || text(&closed.stderr).contains("to \"write\" of a permission profile"),
                "{}",
                both(&closed)
            );
        }
        if probe.contains("connect") {
            assert!(
                text(&closed.stderr).contains(&format!("a TCP connection to port {port}")),
                "{}",
                both(&closed)
            );
        }
        assert!(
            text(&closed.stderr)
                .contains("stdio servers run under sandbox default: files (Landlock"),
            "{}",
            both(&closed)
        );
    }
    // One line appended: the unsandboxed run's.
    let bashrc = std::fs::read_to_string(world.home.join(".bashrc")).expect("read .bashrc");
    assert_eq!(bashrc.matches("# probe").count(), 1, "{bashrc}");
}

#[test]
fn the_private_home_is_writable_and_removed_after_the_run() {
    let world = planted();
    let out = world.probe("default", r#"{"action": "append", "path": "~/made-here"}"#);
    assert!(done(&out), "{}", both(&out));
    assert!(
        text(&out.stdout).contains("tether-sandbox-"),
        "HOME was not the private home: {}",
        both(&out)
    );
    assert!(!world.home.join("made-here").exists());
    assert_eq!(world.left_in_tmp(), Vec::<String>::new(), "left in TMPDIR");
}

#[test]
fn a_toolhive_profile_file_is_honoured() {
    let world = planted();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let profile = world.sandbox.write(
        "profile.json",
        &format!(
            r#"{{"name": "project", "read": [{}], "write": [],
                "network": {{"outbound": {{"insecure_allow_all": false, "allow_host": [], "allow_port": [{port}]}}}}}}"#,
            json_str(&world.path("project"))
        ),
    );
    let read = |path: &str| format!(r#"{{"action": "read", "path": {}}}"#, json_str(path));
    let out = world.probe(&profile, &read(&world.path("project/notes.txt")));
    assert!(done(&out), "{}", both(&out));
    let out = world.probe(&profile, &read(&world.path(".ssh/id_rsa")));
    assert!(denied(&out), "{}", both(&out));
    let out = world.probe(
        &profile,
        &format!(r#"{{"action": "connect", "port": {port}}}"#),
    );
    assert!(done(&out), "{}", both(&out));
    // Without the profile's line, default denies the same read and connection.
    let out = world.probe("default", &read(&world.path("project/notes.txt")));
    assert!(denied(&out), "{}", both(&out));
}

#[test]
fn a_profile_with_an_unknown_key_or_strict_with_hosts_is_refused_in_one_line() {
    let world = planted();
    let typo = world
        .sandbox
        .write("typo.json", r#"{"read": [], "wirte": ["/x"]}"#);
    let out = world.probe(&typo, r#"{"action": "list", "path": "/"}"#);
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert!(
        text(&out.stderr).contains("unknown field `wirte`"),
        "{}",
        both(&out)
    );
    let hosts = world.sandbox.write(
        "hosts.json",
        r#"{"network": {"outbound": {"allow_host": ["api.example.com"], "allow_port": [443]}},
            "tether": {"strict": true}}"#,
    );
    // Host allow-lists are enforced here (a network namespace): strict refuses them only where
    // namespaces are unavailable, which the variable makes it assume.
    let list = r#"{"action": "list", "path": "/"}"#;
    let enforced = world.probe(&hosts, list);
    assert!(
        !text(&enforced.stderr).contains("refuses to start") || nothing_here(&enforced),
        "{}",
        both(&enforced)
    );
    let out = world.probe_with(&hosts, list, &[(ASSUME_NO_NETNS, "1")]);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    assert!(
        text(&out.stderr).contains("refuses to start the server")
            && text(&out.stderr).contains("host allow-list"),
        "{}",
        both(&out)
    );
}

#[test]
fn a_startup_denial_names_the_path_and_the_profile_line() {
    let world = planted();
    let credentials = world.path(".aws/credentials");
    let expect = format!("SECRET={credentials}");
    let spec = test_server(&["--expect-env-file", &expect]);
    let hint = format!("add \"{credentials}\" to \"read\"");
    let out = world.run(&["test", "--mcp", &spec, "--sandbox", "default"]);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    assert!(both(&out).contains(&hint), "{}", both(&out));
    // Unsandboxed it fails too (SECRET is unset), without blaming a sandbox.
    let out = world.run(&["test", "--mcp", &spec, "--sandbox", "none"]);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    assert!(!both(&out).contains(&hint), "{}", both(&out));
}

#[test]
fn server_everything_works_sandboxed() {
    let Some(everything) = tether_testkit::server_everything() else {
        return;
    };
    let world = planted();
    let spec = format!(
        r#"{{"mcpServers": {{"e": {{"command": {}, "args": ["stdio"]}}}}}}"#,
        json_str(&everything.to_string_lossy())
    );
    let out = world.run(&[
        "call",
        "--mcp",
        &spec,
        "e",
        "echo",
        "--args",
        r#"{"message": "sandboxed"}"#,
        "--sandbox",
        "default",
    ]);
    assert!(out.status.success(), "{}", both(&out));
    assert!(text(&out.stdout).contains("sandboxed"), "{}", both(&out));
}

impl Planted {
    /// `tether run --mcp SPEC --sandbox MODE -- claude` where `claude` is a fake harness that
    /// does what a real one does with its servers: starts `srv` as its config says (tether's
    /// exec shim) and calls the probe tool with `probe` — through an unsandboxed `tether call`
    /// of the config it was handed, a real MCP client.
    fn hand_off_probe(&self, mode: &str, probe: &str) -> Output {
        self.hand_off_probe_with(mode, probe, &[])
    }

    /// [`Planted::hand_off_probe`] with `envs` for tether.
    fn hand_off_probe_with(&self, mode: &str, probe: &str, envs: &[(&str, &str)]) -> Output {
        self.hand_off(mode, probe, envs, false)
    }

    /// [`Planted::hand_off_probe`], through the run's gateway (`--gateway`) with `gateway`:
    /// the harness then calls `srv__probe` of its one server.
    fn hand_off(&self, mode: &str, probe: &str, envs: &[(&str, &str)], gateway: bool) -> Output {
        let bin = self.sandbox.path("bin");
        std::fs::create_dir_all(&bin).expect("mkdir bin");
        let claude = bin.join("claude");
        // The gateway's relay starts through the exec shim too.
        let (server, tool) = if gateway {
            ("tether", "srv__probe")
        } else {
            ("srv", "probe")
        };
        std::fs::write(
            &claude,
            format!(
                r#"#!/bin/sh
: > "$(dirname "$0")/ran"
for a in "$@"; do case "$a" in --mcp-config=*) f="${{a#--mcp-config=}}";; esac; done
grep -q __exec "$f" || {{ echo "the config does not start its server through the shim" >&2; exit 9; }}
exec '{}' call --mcp "$f" {server} {tool} --args "$PROBE" --sandbox none
"#,
                env!("CARGO_BIN_EXE_tether")
            ),
        )
        .expect("write the fake harness");
        let mut permissions = std::fs::metadata(&claude).expect("stat").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&claude, permissions).expect("chmod");
        let mut runner = self
            .sandbox
            .runner()
            .user_home(&self.home)
            .env("TMPDIR", &self.tmp)
            .env("PROBE", probe);
        for (name, value) in envs {
            runner = runner.env(name, value);
        }
        let spec = test_server(&["--probe-tool"]);
        let claude = claude.to_string_lossy();
        let mut args = vec!["run", "--mcp", &spec, "--sandbox", mode];
        if gateway {
            args.extend(["--gateway", "--wait-for-servers"]);
        } else {
            args.push("--no-gateway");
        }
        args.extend(["--", &claude]);
        let command = runner.command(&args);
        assert_cmd::Command::from_std(command)
            .output()
            .expect("running tether")
    }
}

#[test]
fn a_hand_off_harness_starts_its_servers_sandboxed_through_the_exec_shim() {
    let world = planted();
    let read_key = format!(
        r#"{{"action": "read", "path": {}}}"#,
        json_str(&world.path(".ssh/id_rsa"))
    );
    let open = world.hand_off_probe("none", &read_key);
    assert!(done(&open), "none: {}", both(&open));
    assert!(text(&open.stdout).contains("id_rsa"), "{}", both(&open));
    for probe in [
        read_key.clone(),
        format!(
            r#"{{"action": "append", "path": {}}}"#,
            json_str(&world.path(".bashrc"))
        ),
    ] {
        let closed = world.hand_off_probe("default", &probe);
        assert!(denied(&closed), "default: {probe}: {}", both(&closed));
        assert!(
            text(&closed.stderr).contains("tether run: stdio servers run under sandbox default"),
            "{}",
            both(&closed)
        );
    }
    // The private home is the server's HOME, and the shim removed it after the server ended.
    let home = world.hand_off_probe("default", r#"{"action": "append", "path": "~/made-here"}"#);
    assert!(done(&home), "{}", both(&home));
    let private = format!("{}/tether-sandbox-", world.tmp.display());
    assert!(text(&home.stdout).contains(&private), "{}", both(&home));
    assert_eq!(world.left_in_tmp(), Vec::<String>::new(), "left in TMPDIR");
    let bashrc = std::fs::read_to_string(world.home.join(".bashrc")).expect("read .bashrc");
    assert!(!bashrc.contains("# probe"), "{bashrc}");
    // A strict profile this system cannot enforce (a host allow-list where namespaces are
    // assumed unavailable) is refused before the harness starts, not by the shim inside it.
    let strict = world.sandbox.write(
        "strict.json",
        r#"{"network": {"outbound": {"allow_host": ["example.com"], "allow_port": [443]}},
            "tether": {"strict": true}}"#,
    );
    let ran = world.sandbox.path("bin/ran");
    std::fs::remove_file(&ran).expect("the harness ran before");
    let refused = world.hand_off_probe_with(&strict, &read_key, &[(ASSUME_NO_NETNS, "1")]);
    assert!(!ran.exists(), "the harness started: {}", both(&refused));
    assert!(!refused.status.success(), "{}", both(&refused));
    assert!(
        text(&refused.stderr).contains("refuses to start the server"),
        "{}",
        both(&refused)
    );
    assert!(
        !text(&refused.stdout).contains("done: "),
        "{}",
        both(&refused)
    );
}

#[test]
fn a_servers_own_sandbox_key_applies_unless_the_flag_says_otherwise() {
    let world = planted();
    let spec = format!(
        r#"{{"mcpServers": {{"srv": {{"command": {}, "args": ["--probe-tool"], "sandbox": "default"}},
             "open": {{"command": {}}}}}}}"#,
        json_str(&test_server_bin().to_string_lossy()),
        json_str(&test_server_bin().to_string_lossy())
    );
    let read = format!(
        r#"{{"action": "read", "path": {}}}"#,
        json_str(&world.path(".ssh/id_rsa"))
    );
    let call = |extra: &[&str]| {
        let mut args = vec!["call", "--mcp", &spec, "srv", "probe", "--args", &read];
        args.extend_from_slice(extra);
        world.run(&args)
    };
    let keyed = call(&[]);
    assert!(denied(&keyed), "{}", both(&keyed));
    let flagged = call(&["--sandbox", "none"]);
    assert!(done(&flagged), "{}", both(&flagged));
    // `tether test` says which server runs under what.
    let out = world.run(&["test", "--mcp", &spec]);
    assert!(out.status.success(), "{}", both(&out));
    assert!(
        text(&out.stderr).contains("tether test: srv runs under sandbox default: files"),
        "{}",
        both(&out)
    );
    assert!(
        !text(&out.stderr).contains("open runs under"),
        "{}",
        both(&out)
    );
    // A bad key fails that server's start, naming the key.
    let bad = spec.replace(
        r#""sandbox": "default""#,
        r#""sandbox": "/nonexistent/p.json""#,
    );
    let out = world.run(&["test", "--mcp", &bad]);
    assert_eq!(out.status.code(), Some(1), "{}", both(&out));
    assert!(
        both(&out).contains(
            r#"its "sandbox" key: cannot read the permission profile /nonexistent/p.json"#
        ),
        "{}",
        both(&out)
    );
}

#[test]
fn an_mcpb_bundle_layout_runs_sandboxed_with_its_whole_directory_readable() {
    // An unpacked bundle as `tether add` leaves it: manifest.json at the root, the server and
    // its launcher inside (a copy: a link out of the bundle would point outside the grant).
    let world = planted();
    let bundle = world.sandbox.path("bundles/abc123");
    std::fs::create_dir_all(bundle.join("server")).expect("mkdir");
    std::fs::write(bundle.join("manifest.json"), r#"{"name": "demo"}"#).expect("manifest");
    std::fs::copy(test_server_bin(), bundle.join("server/tether-test-mcp")).expect("copy");
    let launcher = bundle.join("server/run.sh");
    std::fs::write(
        &launcher,
        "#!/bin/sh\nexec \"$(dirname \"$0\")/tether-test-mcp\" \"$@\"\n",
    )
    .expect("launcher");
    let mut permissions = std::fs::metadata(&launcher).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&launcher, permissions).expect("chmod");
    let spec = format!(
        r#"{{"mcpServers": {{"demo": {{"command": {}, "args": ["--probe-tool"]}}}}}}"#,
        json_str(&launcher.to_string_lossy())
    );
    let read = |path: &str| {
        world.run(&[
            "call",
            "--mcp",
            &spec,
            "demo",
            "probe",
            "--args",
            &format!(r#"{{"action": "read", "path": {}}}"#, json_str(path)),
            "--sandbox",
            "default",
        ])
    };
    let manifest = read(&bundle.join("manifest.json").to_string_lossy());
    assert!(done(&manifest), "{}", both(&manifest));
    let key = read(&world.path(".ssh/id_rsa"));
    assert!(denied(&key), "{}", both(&key));
}

#[test]
fn a_sandboxed_server_gets_no_launch_from_the_exec_socket_it_finds_in_proc() {
    // The probe reads `tether __exec SOCKET ID` off a command line in /proc, and asks SOCKET
    // for ID's launch (its own here; a sibling's is the same request).
    let world = planted();
    let steal = r#"{"action": "steal", "marker": "__exec", "send": "{id}\n"}"#;
    let open = world.hand_off_probe("none", steal);
    assert!(done(&open), "none: {}", both(&open));
    assert!(
        text(&open.stdout).contains(r#""command""#),
        "{}",
        both(&open)
    );
    let closed = world.hand_off_probe("default", steal);
    assert!(denied(&closed), "default: {}", both(&closed));
    assert!(
        !text(&closed.stdout).contains(r#""command""#),
        "{}",
        both(&closed)
    );
}

#[test]
fn a_sandboxed_server_cannot_call_tools_through_the_runs_gateway_socket() {
    let world = planted();
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"thief","version":"1"}}}"#;
    let steal = format!(
        r#"{{"action": "steal", "marker": "__gateway", "send": {}}}"#,
        json_str(&format!("{initialize}\n"))
    );
    let open = world.hand_off("none", &steal, &[], true);
    assert!(done(&open), "none: {}", both(&open));
    assert!(text(&open.stdout).contains("serverInfo"), "{}", both(&open));
    let closed = world.hand_off("default", &steal, &[], true);
    assert!(denied(&closed), "default: {}", both(&closed));
    assert!(
        !text(&closed.stdout).contains("serverInfo"),
        "{}",
        both(&closed)
    );
}

/// The probe's `syscall` of `call`.
fn syscall(call: &str) -> String {
    format!(r#"{{"action": "syscall", "call": "{call}"}}"#)
}

#[test]
fn a_sandboxed_server_has_its_own_session_and_cannot_type_into_a_terminal() {
    let world = planted();
    let status = r#"{"action": "status"}"#;
    let open = world.probe("none", status);
    assert_says(&open, "session leader: false");
    let closed = world.probe("default", status);
    assert_says(&closed, "session leader: true");
    // The server's stdin is a pipe: TIOCSTI fails there with ENOTTY, unless seccomp answers
    // first.
    let open = world.probe("none", &syscall("tiocsti"));
    assert_says(&open, "Inappropriate ioctl");
    let closed = world.probe("default", &syscall("tiocsti"));
    assert!(denied(&closed), "{}", both(&closed));
    assert_says(&closed, "Operation not permitted");
    let tty = r#"{"action": "read", "path": "/dev/tty"}"#;
    let closed = world.probe("default", tty);
    assert_says(&closed, "Permission denied");
}

#[test]
fn a_sandboxed_server_has_no_capabilities_namespaces_or_raw_sockets() {
    let world = planted();
    let root = nix::unistd::geteuid().is_root();
    let closed = world.probe("default", r#"{"action": "status"}"#);
    let status = text(&closed.stdout);
    for line in [
        "CapEff:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "NoNewPrivs:\t1",
    ] {
        assert!(status.contains(line), "{line}: {}", both(&closed));
    }
    if root {
        assert!(
            status.contains("CapBnd:\t0000000000000000"),
            "{}",
            both(&closed)
        );
        // Root kept CAP_SYS_PTRACE: its parent's (the supervisor's) environment was readable.
        let environ = r#"{"action": "read", "path": "/proc/{ppid}/environ"}"#;
        let open = world.probe("none", environ);
        assert!(done(&open), "{}", both(&open));
        let closed = world.probe("default", environ);
        assert!(denied(&closed), "{}", both(&closed));
    }
    for call in ["clone_newuser", "packet_socket", "raw_socket"] {
        if root {
            let open = world.probe("none", &syscall(call));
            assert!(done(&open), "none: {call}: {}", both(&open));
        }
        let closed = world.probe("default", &syscall(call));
        assert!(denied(&closed), "default: {call}: {}", both(&closed));
        assert!(
            text(&closed.stdout).contains("Operation not permitted"),
            "{call}: {}",
            both(&closed)
        );
    }
    let closed = world.probe("default", &syscall("clone3"));
    assert_says(&closed, "Function not implemented");
}

#[test]
fn a_sandboxed_server_cannot_connect_to_a_named_unix_socket_unless_its_profile_allows() {
    // A socket as an ssh-agent's, in a directory the profiles grant read and write to (a path
    // short enough for sockaddr_un): Landlock does not restrict connect on it; seccomp
    // refuses the socket.
    let world = planted();
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("agent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let granted = json_str(&dir.path().to_string_lossy());
    let profile = |name: &str, rest: &str| {
        world.sandbox.write(
            name,
            &format!(r#"{{"read": [], "write": [{granted}]{rest}}}"#),
        )
    };
    let ports = r#", "network": {"outbound": {"allow_port": [53, 80, 443]}}"#;
    let with_ports = profile("ports.json", ports);
    let no_network = profile("none.json", "");
    let opted_in = profile(
        "unix.json",
        &format!(r#"{ports}, "tether": {{"unix_sockets": true}}"#),
    );
    let connect = format!(
        r#"{{"action": "unix", "path": {}}}"#,
        json_str(&socket.to_string_lossy())
    );
    let open = world.probe("none", &connect);
    assert!(done(&open), "none: {}", both(&open));
    for mode in ["default", &with_ports, &no_network] {
        let closed = world.probe(mode, &connect);
        assert!(denied(&closed), "{mode}: {}", both(&closed));
        assert_says(&closed, "Permission denied");
    }
    let allowed = world.probe(&opted_in, &connect);
    assert!(done(&allowed), "unix_sockets: {}", both(&allowed));
    // Runtimes' pipes stay: a socket pair has no name to connect to.
    let pair = world.probe("default", &syscall("socketpair"));
    assert!(done(&pair), "socketpair: {}", both(&pair));
}

#[test]
fn arguments_naming_files_grant_nothing_but_an_interpreters_script() {
    // A launcher in a directory of its own, which ignores its arguments: they only name files,
    // as a registry entry's or a bundle's arguments can (`~/.bashrc`, a project's
    // `package.json`, `${__dirname}/../..`).
    let world = planted();
    std::fs::write(world.home.join("project/package.json"), "{}").expect("package.json");
    let dir = world.sandbox.path("launcher");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::copy(test_server_bin(), dir.join("tether-test-mcp")).expect("copy");
    let launcher = dir.join("run.sh");
    std::fs::write(
        &launcher,
        "#!/bin/sh\nexec \"$(dirname \"$0\")/tether-test-mcp\" --probe-tool\n",
    )
    .expect("launcher");
    let mut permissions = std::fs::metadata(&launcher).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&launcher, permissions).expect("chmod");
    let climb = format!("{}/../home/.ssh/id_rsa", dir.display());
    let named = [
        world.path(".bashrc"),
        world.path("project/package.json"),
        climb,
    ];
    let spec = |command: &str, args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| json_str(a)).collect();
        format!(
            r#"{{"mcpServers": {{"s": {{"command": {}, "args": [{}]}}}}}}"#,
            json_str(command),
            args.join(", ")
        )
    };
    let named: Vec<&str> = named.iter().map(String::as_str).collect();
    let launcher = launcher.to_string_lossy();
    let direct = spec(&launcher, &named);
    let mut interpreted = vec![launcher.as_ref()];
    interpreted.extend_from_slice(&named);
    // `sh run.sh …`: the script is the program, its directory is granted; the rest is not.
    let through_sh = spec("sh", &interpreted);
    for spec in [&direct, &through_sh] {
        for (path, what) in [
            (world.path(".bashrc"), "a file named by an argument"),
            (
                world.path("project/notes.txt"),
                "the project of a package.json",
            ),
            (world.path(".ssh/id_rsa"), "a file reached through .."),
        ] {
            let read = format!(r#"{{"action": "read", "path": {}}}"#, json_str(&path));
            let args = [
                "call",
                "--mcp",
                spec,
                "s",
                "probe",
                "--args",
                &read,
                "--sandbox",
                "default",
            ];
            let out = world.run(&args);
            assert!(denied(&out), "{what}: {spec}: {}", both(&out));
            let open = world.run(&args[..args.len() - 2]);
            assert!(done(&open), "unsandboxed: {what}: {}", both(&open));
        }
    }
}

#[test]
fn a_configs_none_does_not_lower_the_configured_default_and_every_mode_is_named() {
    let world = planted();
    std::fs::create_dir_all(world.sandbox.home()).expect("mkdir TETHER_HOME");
    std::fs::write(
        world.sandbox.home().join("config.toml"),
        "sandbox = \"default\"\n",
    )
    .expect("config.toml");
    let bin = json_str(&test_server_bin().to_string_lossy());
    let spec = format!(
        r#"{{"mcpServers": {{"srv": {{"command": {bin}, "args": ["--probe-tool"], "sandbox": "none"}}}}}}"#
    );
    let read = format!(
        r#"{{"action": "read", "path": {}}}"#,
        json_str(&world.path(".ssh/id_rsa"))
    );
    let call = |extra: &[&str]| {
        let mut args = vec!["call", "--mcp", &spec, "srv", "probe", "--args", &read];
        args.extend_from_slice(extra);
        world.run(&args)
    };
    let keyed = call(&[]);
    assert!(denied(&keyed), "{}", both(&keyed));
    assert!(
        text(&keyed.stderr).contains("stdio servers run under sandbox default"),
        "{}",
        both(&keyed)
    );
    // The user says so on the command line.
    let flagged = call(&["--sandbox", "none"]);
    assert!(done(&flagged), "{}", both(&flagged));
    // Without a configured default, a server without a sandbox is named beside a sandboxed one.
    std::fs::remove_file(world.sandbox.home().join("config.toml")).expect("rm config.toml");
    let mixed = format!(
        r#"{{"mcpServers": {{"srv": {{"command": {bin}, "sandbox": "default"}}, "open": {{"command": {bin}}}}}}}"#
    );
    let out = world.run(&["test", "--mcp", &mixed]);
    assert!(out.status.success(), "{}", both(&out));
    assert!(
        text(&out.stderr).contains("tether test: open runs with NO sandbox"),
        "{}",
        both(&out)
    );
}

/// A stdio MCP server in Python with one tool, `read {path}`: `done: read N bytes` or an error
/// `denied: …` (the probe's words), for interpreters other than the test server's.
pub(crate) const PY_SERVER: &str = r#"import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, result = msg.get("method"), {}
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "py", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "read", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        path = msg["params"]["arguments"]["path"]
        try:
            text, error = "done: read %d bytes" % len(open(path).read()), False
        except OSError as e:
            text, error = "denied: %s" % e, True
        result = {"content": [{"type": "text", "text": text}], "isError": error}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"#;

/// The same server in JavaScript.
const JS_SERVER: &str = r#"const fs = require("fs");
let buffer = "";
process.stdin.on("data", (chunk) => {
  buffer += chunk;
  let at;
  while ((at = buffer.indexOf("\n")) >= 0) {
    const msg = JSON.parse(buffer.slice(0, at));
    buffer = buffer.slice(at + 1);
    if (msg.id === undefined) continue;
    let result = {};
    if (msg.method === "initialize") {
      result = {protocolVersion: msg.params.protocolVersion, capabilities: {tools: {}}, serverInfo: {name: "js", version: "1"}};
    } else if (msg.method === "tools/list") {
      result = {tools: [{name: "read", inputSchema: {type: "object"}}]};
    } else if (msg.method === "tools/call") {
      try {
        result = {content: [{type: "text", text: "done: read " + fs.readFileSync(msg.params.arguments.path).length + " bytes"}]};
      } catch (e) {
        result = {content: [{type: "text", text: "denied: " + e.message}], isError: true};
      }
    }
    process.stdout.write(JSON.stringify({jsonrpc: "2.0", id: msg.id, result}) + "\n");
  }
});
"#;

/// pyenv's shim of the machine's user (not a planted home) — a shell script that runs
/// ROOT/libexec/pyenv, which picks ROOT/versions/X/bin/python3 — and that interpreter.
pub(crate) fn pyenv_python() -> Option<(PathBuf, PathBuf)> {
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".pyenv")))?;
    let shim = Some(root.join("shims/python3")).filter(|s| s.is_file())?;
    let real = std::process::Command::new(&shim)
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("running the shim");
    let real = PathBuf::from(text(&real.stdout).trim());
    Some((shim, real))
}

/// `python -m venv --without-pip venv`, which must succeed.
pub(crate) fn make_venv(python: &std::path::Path, venv: &std::path::Path) {
    let made = std::process::Command::new(python)
        .args(["-m", "venv", "--without-pip"])
        .arg(venv)
        .status()
        .expect("making a venv");
    assert!(made.success(), "{} -m venv", python.display());
}

#[test]
fn version_managed_interpreters_and_venvs_start_under_default_and_keys_stay_closed() {
    let world = planted();
    let dir = world.sandbox.path("servers");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("server.py"), PY_SERVER).expect("server.py");
    std::fs::write(dir.join("server.js"), JS_SERVER).expect("server.js");
    let mut interpreters: Vec<(String, PathBuf)> = Vec::new();
    match pyenv_python() {
        Some((shim, real)) => {
            let venv = world.sandbox.path("venv");
            make_venv(&real, &venv);
            interpreters.push(("the pyenv shim".to_owned(), shim));
            interpreters.push(("the interpreter it selects".to_owned(), real));
            interpreters.push(("a venv made from it".to_owned(), venv.join("bin/python3")));
        }
        None => eprintln!("NOTICE: no pyenv here: its shim, interpreter and venv not tried"),
    }
    // A Node as nvm installs one: ~/.nvm/versions/node/vX/bin/node with its lib/node_modules.
    let nvm = world.home.join(".nvm/versions/node/v20.0.0");
    std::fs::create_dir_all(nvm.join("bin")).expect("mkdir");
    std::fs::create_dir_all(nvm.join("lib/node_modules")).expect("mkdir");
    let node = nvm.join("bin/node");
    let system_node = std::process::Command::new("sh")
        .args(["-c", "command -v node"])
        .output()
        .map(|out| PathBuf::from(text(&out.stdout).trim()))
        .ok()
        .and_then(|p| p.canonicalize().ok());
    match system_node {
        Some(system) => {
            std::fs::hard_link(&system, &node)
                .or_else(|_| std::fs::copy(&system, &node).map(|_| ()))
                .expect("a node under ~/.nvm");
            interpreters.push(("a Node under ~/.nvm".to_owned(), node));
        }
        None => eprintln!("NOTICE: no node here"),
    }
    for (what, interpreter) in &interpreters {
        let script = if what.contains("Node") {
            "server.js"
        } else {
            "server.py"
        };
        let spec = format!(
            r#"{{"mcpServers": {{"s": {{"command": {}, "args": [{}]}}}}}}"#,
            json_str(&interpreter.to_string_lossy()),
            json_str(&dir.join(script).to_string_lossy())
        );
        let read = |path: &str| {
            let args = format!(r#"{{"path": {}}}"#, json_str(path));
            world.run(&[
                "call",
                "--mcp",
                &spec,
                "s",
                "read",
                "--args",
                &args,
                "--sandbox",
                "default",
            ])
        };
        let started = read("/etc/hostname");
        assert!(done(&started), "{what}: {}", both(&started));
        let key = read(&world.path(".ssh/id_rsa"));
        assert!(denied(&key), "{what}: {}", both(&key));
    }
}

/// Live processes whose working directory is under `dir`.
fn working_in(dir: &std::path::Path) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let zombie = stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'));
            (cwd.starts_with(dir) && !zombie).then_some(pid)
        })
        .collect()
}

#[test]
fn a_fork_and_exit_chain_does_not_outlive_the_run() {
    // What ends the chain is the pids cgroup; an unprivileged user here has none to write (the
    // chain then outlives the run: reported in specs/sandbox/TECH.md §9a).
    if !nix::unistd::geteuid().is_root() {
        eprintln!("NOTICE: no writable pids cgroup for this user: fork chain not tried");
        return;
    }
    let world = planted();
    let out = world.probe("default", &syscall("fork_chain"));
    assert!(done(&out), "{}", both(&out));
    // The run is over; give the kernel a bounded while to finish the kills it was sent.
    let mut left = working_in(&world.tmp);
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        left = working_in(&world.tmp);
    }
    for pid in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(left.is_empty(), "the chain outlived the run: {left:?}");
}
