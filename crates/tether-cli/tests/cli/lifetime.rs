//! No process of a run outlives tether: a stdio server's grandchildren, one
//! that called `setsid`, and a harness with its run directory — after a normal shutdown and
//! after tether is SIGKILLed. Real processes, checked in `/proc` within a bounded wait.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tether_testkit::processes_with;

use crate::support::{Sandbox, json_str, test_server_bin};

/// How long processes get to disappear once tether is gone.
const GONE_WITHIN: Duration = Duration::from_secs(5);

/// A `sleep` duration no other process on the machine uses: its command line marks it.
fn marker() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}.{}",
        7000 + NEXT.fetch_add(1, Ordering::Relaxed),
        std::process::id()
    )
}

/// `sh` text that starts `sleep MARKER` in a new session and `sleep MARKER` as a plain
/// background child, then writes its own pid to `pid_file`.
fn grandchildren(setsid: &str, plain: &str, pid_file: &Path) -> String {
    format!(
        "setsid sleep {setsid} </dev/null >/dev/null 2>&1 & sleep {plain} </dev/null >/dev/null 2>&1 & echo $$ > '{}'",
        pid_file.display()
    )
}

/// `tether ARGS` started in the sandbox, stdout into `stdout` there.
fn start(sandbox: &Sandbox, args: &[&str]) -> Child {
    let stdout = std::fs::File::create(sandbox.path("stdout")).expect("creating the file");
    sandbox
        .runner()
        .command(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning tether")
}

/// Waits (bounded) until `ready` holds.
fn wait_for(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn pid_in(path: &Path) -> i32 {
    std::fs::read_to_string(path)
        .expect("reading the pid file")
        .trim()
        .parse()
        .expect("parsing the pid")
}

/// Whether `pid` is a live process (not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// The processes found by `markers` (command-line fragments; a supervisor's is `--parent PID `,
/// the space keeping PID 12 from matching 123) and `pids` still alive after
/// [`GONE_WITHIN`]: empty when everything is gone.
fn left_after_wait(markers: &[String], pids: &[i32]) -> Vec<String> {
    let deadline = Instant::now() + GONE_WITHIN;
    loop {
        let mut left: Vec<String> = markers
            .iter()
            .filter(|m| !processes_with(m).is_empty())
            .cloned()
            .collect();
        left.extend(
            pids.iter()
                .filter(|p| alive(**p))
                .map(|p| format!("pid {p}")),
        );
        if left.is_empty() || Instant::now() >= deadline {
            for marker in markers {
                for pid in processes_with(marker) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(child: &Child, signal: Signal) {
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("a pid fits in i32"));
    kill(pid, signal).expect("sending the signal");
}

/// A held stdio server (`sh -c "…grandchildren…; exec tether-test-mcp"`): returns tether, the
/// markers of the two grandchildren and the server's pid, once the server is ready.
fn hold_server_with_grandchildren(sandbox: &Sandbox) -> (Child, Vec<String>, i32) {
    let (setsid, plain) = (marker(), marker());
    let pid_file = sandbox.path("server.pid");
    let script = format!(
        "{}; exec '{}'",
        grandchildren(&setsid, &plain, &pid_file),
        test_server_bin().display()
    );
    let spec = format!(
        r#"{{"grand": {{"command": "sh", "args": ["-c", {}]}}}}"#,
        json_str(&script)
    );
    let tether = start(sandbox, &["run", "--hold", "--mcp", &spec]);
    wait_for("the server to be ready", Duration::from_secs(60), || {
        std::fs::read_to_string(sandbox.path("stdout")).is_ok_and(|s| s.contains("ready"))
    });
    let markers = vec![format!("sleep {setsid}"), format!("sleep {plain}")];
    for marker in &markers {
        assert!(
            !processes_with(marker).is_empty(),
            "{marker} is not running"
        );
    }
    (tether, markers, pid_in(&pid_file))
}

#[test]
fn a_sigkilled_tether_leaves_no_server_and_no_grandchild() {
    let sandbox = Sandbox::new();
    let (mut tether, mut markers, server) = hold_server_with_grandchildren(&sandbox);
    markers.push(format!("--parent {} ", tether.id()));
    signal(&tether, Signal::SIGKILL);
    let _ = tether.wait();
    assert_eq!(
        left_after_wait(&markers, &[server]),
        Vec::<String>::new(),
        "processes outlived a SIGKILLed tether"
    );
}

/// The supervisor ties the program it starts to itself (`PR_SET_PDEATHSIG`): should the
/// supervisor be SIGKILLed, the server goes too instead of running on unsupervised.
#[test]
fn a_sigkilled_supervisor_takes_its_server_with_it() {
    let sandbox = Sandbox::new();
    let (mut tether, mut markers, server) = hold_server_with_grandchildren(&sandbox);
    let supervisor = format!("--parent {} ", tether.id());
    let supervisors = processes_with(&supervisor);
    assert_eq!(supervisors.len(), 1, "one supervisor: {supervisors:?}");
    kill(Pid::from_raw(supervisors[0]), Signal::SIGKILL).expect("killing the supervisor");
    assert_eq!(
        left_after_wait(&[], &[server]),
        Vec::<String>::new(),
        "the server outlived its SIGKILLed supervisor"
    );
    // What the server itself had started is nobody's to end now (see the supervisor's docs);
    // the test cleans it up.
    markers.push(supervisor);
    signal(&tether, Signal::SIGKILL);
    let _ = tether.wait();
    let _ = left_after_wait(&markers, &[]);
}

#[test]
fn a_normal_shutdown_ends_a_grandchild_that_called_setsid() {
    let sandbox = Sandbox::new();
    let (mut tether, mut markers, server) = hold_server_with_grandchildren(&sandbox);
    markers.push(format!("--parent {} ", tether.id()));
    signal(&tether, Signal::SIGTERM);
    let status = tether.wait().expect("waiting for tether");
    assert_eq!(status.code(), Some(0), "{status}");
    assert_eq!(
        left_after_wait(&markers, &[server]),
        Vec::<String>::new(),
        "processes outlived tether's shutdown"
    );
}

#[test]
fn a_sigkilled_hand_off_takes_the_harness_its_children_and_the_run_directory() {
    let sandbox = Sandbox::new();
    let (setsid, plain) = (marker(), marker());
    let pid_file = sandbox.path("harness.pid");
    // Named like a harness tether knows; it starts two children and waits forever.
    let script = format!(
        "#!/bin/sh\n{}\nwhile true; do sleep 0.1; done\n",
        grandchildren(&setsid, &plain, &pid_file)
    );
    let harness = sandbox.fake_program("claude", &script);
    let spec = format!(
        r#"{{"s": {{"command": {}, "env": {{"K": "{{{{TOKEN}}}}"}}}}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    );
    let mut command =
        sandbox
            .runner()
            .command(&["run", "--mcp", &spec, "--secret", "TOKEN=env:SRC", "--"]);
    command
        .arg(&harness)
        .env("SRC", "sk-LIFETIME-SENTINEL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut tether = command.spawn().expect("spawning tether");
    // The shell creates the file before it writes the pid into it: wait for the pid.
    wait_for("the harness to start", Duration::from_secs(30), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|pid| pid.trim().parse::<i32>().is_ok())
    });
    let harness_pid = pid_in(&pid_file);
    let run_dirs = || -> Vec<PathBuf> {
        std::fs::read_dir(sandbox.home().join("run"))
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        run_dirs().len(),
        1,
        "one run directory while the harness runs"
    );
    let markers = vec![
        format!("sleep {setsid}"),
        format!("sleep {plain}"),
        format!("--parent {} ", tether.id()),
    ];
    signal(&tether, Signal::SIGKILL);
    let _ = tether.wait();
    assert_eq!(
        left_after_wait(&markers, &[harness_pid]),
        Vec::<String>::new(),
        "processes outlived a SIGKILLed tether"
    );
    wait_for("the run directory to go", GONE_WITHIN, || {
        run_dirs().is_empty()
    });
}
