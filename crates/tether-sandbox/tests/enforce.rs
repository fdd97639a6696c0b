//! The sandbox applied to real processes: each probe runs twice, without the sandbox (it must
//! succeed: the probe works) and with it (it must be denied: the sandbox did it).
#![cfg(target_os = "linux")]
#![allow(unsafe_code, clippy::expect_used, clippy::unwrap_used)]

use std::ffi::OsString;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tether_sandbox::{Mode, Policy, PrivateHome, Profile, Target, prepare};

struct World {
    _dir: tempfile::TempDir,
    user_home: PathBuf,
    private: PrivateHome,
}

/// A user home with planted credentials, and a private home for the server.
fn world() -> World {
    let dir = tempfile::tempdir().expect("tempdir");
    let user_home = dir.path().join("home");
    std::fs::create_dir_all(user_home.join(".ssh")).expect("mkdir");
    std::fs::write(user_home.join(".ssh/id_rsa"), "PLANTED KEY").expect("plant");
    let private = PrivateHome::create(dir.path(), false).expect("private home");
    World {
        _dir: dir,
        user_home,
        private,
    }
}

/// Runs `sh -c script` with `policy` (none: unsandboxed), `F` and `P` set for the script.
fn run(world: &World, policy: Option<&Policy>, script: &str, vars: &[(&str, &str)]) -> Output {
    let args: Vec<OsString> = vec!["-c".into(), script.into()];
    let mut command = Command::new("/bin/sh");
    command
        .args(&args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", world.private.path())
        .envs(vars.iter().copied());
    // Removes the cgroup once the child is gone.
    let mut cleanup = None;
    if let Some(policy) = policy {
        let path = std::ffi::OsString::from("/usr/bin:/bin");
        let target = Target {
            program: "/bin/sh".as_ref(),
            args: &args,
            path: Some(&path),
            cwd: None,
            home: world.private.path(),
            cache: None,
            user_home: Some(&world.user_home),
        };
        let prepared = prepare(policy, &target).expect("prepared");
        eprintln!("{}", prepared.report());
        let (hook, after) = prepared.into_child_hook();
        cleanup = Some(after);
        // SAFETY: the hook makes system calls only (see tether_sandbox::Prepared).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, hook);
        }
    }
    let output = command.output().expect("ran sh");
    drop(cleanup);
    output
}

fn default() -> Policy {
    Mode::Default.policy().expect("policy").expect("some")
}

fn ok(output: &Output) -> bool {
    output.status.success()
}

fn text(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn planted_credentials_are_read_without_the_sandbox_and_denied_with_it() {
    let world = world();
    let key = text(&world.user_home.join(".ssh/id_rsa"));
    let script = r#"cat "$F""#;
    let open = run(&world, None, script, &[("F", &key)]);
    assert!(ok(&open), "{open:?}");
    assert_eq!(String::from_utf8_lossy(&open.stdout), "PLANTED KEY");
    let denied = run(&world, Some(&default()), script, &[("F", &key)]);
    assert!(!ok(&denied), "{denied:?}");
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains("Permission denied"),
        "{denied:?}"
    );
}

#[test]
fn the_user_home_is_neither_listed_nor_written_but_the_private_home_is() {
    let world = world();
    let home = text(&world.user_home);
    for script in [r#"ls -a "$F""#, r#"echo x >> "$F/.bashrc""#] {
        let open = run(&world, None, script, &[("F", &home)]);
        assert!(ok(&open), "{script}: {open:?}");
        let denied = run(&world, Some(&default()), script, &[("F", &home)]);
        assert!(!ok(&denied), "{script}: {denied:?}");
    }
    let private = run(
        &world,
        Some(&default()),
        r#"echo kept > "$HOME/f" && cat "$HOME/f" && ls /usr/bin/env"#,
        &[],
    );
    assert!(ok(&private), "{private:?}");
}

/// Connects with bash's `/dev/tcp` (a real `connect(2)`).
const CONNECT: &str = r#"exec /bin/bash -c 'echo hi > /dev/tcp/127.0.0.1/'"$P""#;

#[test]
fn a_port_outside_the_profile_is_refused_and_one_inside_is_reached() {
    let world = world();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port().to_string();
    let open = run(&world, None, CONNECT, &[("P", &port)]);
    assert!(ok(&open), "{open:?}");
    let denied = run(&world, Some(&default()), CONNECT, &[("P", &port)]);
    assert!(!ok(&denied), "{denied:?}");
    let profile = Profile::from_json(&format!(
        r#"{{"network": {{"outbound": {{"allow_port": [{port}]}}}}}}"#
    ))
    .expect("profile");
    let allowed = Policy {
        label: "port.json".to_owned(),
        profile,
        strict: false,
        assume_no_netns: false,
        cache_home: None,
    };
    let reached = run(&world, Some(&allowed), CONNECT, &[("P", &port)]);
    assert!(ok(&reached), "{reached:?}");
}

#[test]
fn a_profile_file_read_line_is_honoured() {
    let world = world();
    let data = world.user_home.join("project");
    std::fs::create_dir_all(&data).expect("mkdir");
    std::fs::write(data.join("notes.txt"), "notes").expect("write");
    let file = world.user_home.join("profile.json");
    std::fs::write(
        &file,
        format!(r#"{{"read": ["{}"], "network": {{}}}}"#, text(&data)),
    )
    .expect("profile");
    let policy = Mode::Profile(file).policy().expect("read").expect("some");
    let notes = text(&data.join("notes.txt"));
    let key = text(&world.user_home.join(".ssh/id_rsa"));
    let read = run(&world, Some(&policy), r#"cat "$F""#, &[("F", &notes)]);
    assert!(ok(&read), "{read:?}");
    let write = run(&world, Some(&policy), r#"echo x > "$F""#, &[("F", &notes)]);
    assert!(!ok(&write), "{write:?}");
    let key = run(&world, Some(&policy), r#"cat "$F""#, &[("F", &key)]);
    assert!(!ok(&key), "{key:?}");
}

#[test]
fn a_memory_limit_refuses_a_large_allocation() {
    let world = world();
    let profile = Profile::from_json(r#"{"tether": {"memory_mb": 64}}"#).expect("profile");
    let policy = Policy {
        label: "mem.json".to_owned(),
        profile,
        strict: false,
        assume_no_netns: false,
        cache_home: None,
    };
    let limit = run(&world, Some(&policy), "ulimit -d", &[]);
    assert!(ok(&limit), "{limit:?}");
    assert_eq!(String::from_utf8_lossy(&limit.stdout).trim(), "65536");
    let unlimited = run(&world, None, "ulimit -d", &[]);
    assert_ne!(String::from_utf8_lossy(&unlimited.stdout).trim(), "65536");
}

/// A profile with a host allow-list on `port`.
fn hosts_policy(port: &str, strict: bool, assume_no_netns: bool) -> Policy {
    let profile = Profile::from_json(&format!(
        r#"{{"network": {{"outbound": {{"allow_host": ["localhost"], "allow_port": [{port}]}}}}}}"#
    ))
    .expect("profile");
    Policy {
        label: "hosts.json".to_owned(),
        profile,
        strict,
        assume_no_netns,
        cache_home: None,
    }
}

#[test]
fn strict_refuses_what_it_cannot_enforce() {
    let world = world();
    let args: Vec<OsString> = Vec::new();
    let target = Target {
        user_home: Some(&world.user_home),
        ..Target::new("/bin/true".as_ref(), &args, world.private.path())
    };
    // Namespaces assumed away: strict refuses the host allow-list…
    let err = prepare(&hosts_policy("443", true, true), &target).expect_err("refused");
    let said = err.to_string();
    assert!(said.contains("host allow-list"), "{said}");
    assert!(said.contains("--sandbox default"), "{said}");
    // …and best effort is not weakened by the assumption.
    let assumed = tether_sandbox::assess(&hosts_policy("443", false, true));
    let real = tether_sandbox::assess(&hosts_policy("443", false, false));
    assert_eq!(assumed, real);
}

/// `program args` prepared under `policy` (a host allow-list), with `P` set to `port`: the
/// command (its hook installed), the egress part, what to clean up after.
fn hosts_command(
    world: &World,
    policy: &Policy,
    program: &str,
    args: &[OsString],
    port: &str,
) -> (Command, tether_sandbox::Egress, tether_sandbox::Cleanup) {
    let path = OsString::from("/usr/bin:/bin");
    let target = Target {
        path: Some(&path),
        user_home: Some(&world.user_home),
        ..Target::new(program.as_ref(), args, world.private.path())
    };
    let mut prepared = prepare(policy, &target).expect("prepared");
    let egress = prepared.take_egress().expect("an egress part");
    let (hook, cleanup) = prepared.into_child_hook();
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .env("PATH", &path)
        .env("P", port);
    // SAFETY: the hook makes system calls only (see tether_sandbox::Prepared).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, hook);
    }
    (command, egress, cleanup)
}

/// The network namespace this process (or `pid`) is in.
fn netns(pid: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/net"))
        .expect("ns link")
        .display()
        .to_string()
}

#[test]
fn a_server_with_hosts_gets_its_own_network_namespace_and_the_proxy_socket() {
    let world = world();
    let report = tether_sandbox::assess(&hosts_policy("443", false, false));
    if !report.missing.is_empty() {
        eprintln!("no network namespace here: {report}");
        return;
    }
    let outside = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = outside.local_addr().expect("addr").port().to_string();
    let policy = hosts_policy(&port, false, false);
    let args: Vec<OsString> = vec![
        "-c".into(),
        r#"readlink /proc/self/ns/net; echo through > /dev/tcp/127.0.0.1/3128 && echo sent;
           echo direct > /dev/tcp/127.0.0.1/"$P" && echo escaped"#
            .into(),
    ];
    let (mut command, egress, _cleanup) = hosts_command(&world, &policy, "/bin/bash", &args, &port);
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = command.spawn().expect("spawned");
    let listener = egress.net.receive().expect("the listening socket");
    listener.set_nonblocking(false).expect("blocking");
    let (mut accepted, _) = listener.accept().expect("the server's connection");
    let mut got = String::new();
    std::io::Read::read_to_string(&mut accepted, &mut got).expect("read");
    assert_eq!(got, "through\n");
    let out = child.wait_with_output().expect("waited");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    assert_ne!(lines.next(), Some(netns("self").as_str()), "{out:?}");
    assert_eq!(lines.next(), Some("sent"), "{out:?}");
    // The allowed port on the host's loopback is not reachable from the namespace.
    assert!(!stdout.contains("escaped"), "{out:?}");
    assert_eq!(egress.rules.ports, [port.parse::<u16>().expect("port")]);
}

/// This test binary's `inner_without_network_namespaces`, run in a user namespace of its own
/// where no network namespace can be made (`user.max_net_namespaces` 0 there: the host's
/// limit is untouched).
#[test]
fn without_network_namespaces_best_effort_falls_back_and_strict_refuses() {
    let exe = std::env::current_exe().expect("this test binary");
    let script = r#"echo 0 > /proc/sys/user/max_net_namespaces || exit 77
exec "$0" --exact inner_without_network_namespaces --ignored --test-threads 1 --nocapture"#;
    let Ok(out) = Command::new("unshare")
        .args(["-Ur", "sh", "-c", script])
        .arg(&exe)
        .output()
    else {
        eprintln!("NOTICE: no unshare(1) here");
        return;
    };
    if out.status.code() == Some(77)
        || String::from_utf8_lossy(&out.stderr).contains("unshare failed")
    {
        eprintln!("NOTICE: cannot make a user namespace here: {out:?}");
        return;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{out:?}"
    );
}

#[test]
#[ignore = "run by without_network_namespaces_best_effort_falls_back_and_strict_refuses"]
fn inner_without_network_namespaces() {
    let world = world();
    let outside = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = outside.local_addr().expect("addr").port().to_string();
    let report = tether_sandbox::assess(&hosts_policy(&port, false, false));
    assert!(
        report
            .missing
            .iter()
            .any(|m| m.contains("no network namespace")),
        "{report}"
    );
    // Best effort: the profile's ports, any host; the supervisor is told why.
    let args: Vec<OsString> = vec!["-c".into(), CONNECT.into()];
    let policy = hosts_policy(&port, false, false);
    let (mut command, egress, _cleanup) = hosts_command(&world, &policy, "/bin/sh", &args, &port);
    let out = command.output().expect("ran");
    assert!(ok(&out), "the allowed port is reached directly: {out:?}");
    let why = egress.net.receive().expect_err("no socket");
    assert_eq!(why.raw_os_error(), Some(nix::libc::ENOSPC), "{why}");
    // Strict refuses up front.
    let target = Target::new("/bin/sh".as_ref(), &args, world.private.path());
    let err = prepare(&hosts_policy(&port, true, false), &target).expect_err("refused");
    assert!(err.to_string().contains("host allow-list"), "{err}");
}

#[test]
fn a_profile_without_network_sends_no_udp_either() {
    let world = world();
    let policy = Policy {
        label: "none.json".to_owned(),
        profile: Profile::from_json(r#"{"read": []}"#).expect("profile"),
        strict: false,
        assume_no_netns: false,
        cache_home: None,
    };
    let report = tether_sandbox::assess(&policy);
    if !report.enforced.iter().any(|e| e.contains("no UDP")) {
        eprintln!("no network namespace here: {report}");
        return;
    }
    let inbox = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = inbox.local_addr().expect("addr").port().to_string();
    let send = r#"exec /bin/bash -c 'echo "$0" > /dev/udp/127.0.0.1/"$P"' "#;
    // Bounds a wait for a datagram that went missing.
    inbox
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let open = run(&world, None, &format!("{send}open"), &[("P", &port)]);
    assert!(ok(&open), "{open:?}");
    let mut buffer = [0u8; 64];
    let (n, _) = inbox.recv_from(&mut buffer).expect("the open datagram");
    assert_eq!(&buffer[..n], b"open\n");
    let closed = run(
        &world,
        Some(&policy),
        &format!("{send}closed"),
        &[("P", &port)],
    );
    // A marker sent after the child ended: whatever the child sent is queued before it.
    inbox
        .send_to(b"marker\n", inbox.local_addr().expect("addr"))
        .expect("marker");
    let (n, _) = inbox.recv_from(&mut buffer).expect("a datagram");
    assert_eq!(&buffer[..n], b"marker\n", "{closed:?}");
}

#[test]
fn the_kernel_summary_names_landlock() {
    let summary = tether_sandbox::kernel_summary();
    eprintln!("{summary}");
    assert!(summary.contains("Landlock"), "{summary}");
}
