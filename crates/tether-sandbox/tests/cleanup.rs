//! A prepared sandbox leaves nothing behind: its pids cgroup goes when it is dropped unused,
//! and when the cleanup of a used one runs; a server moved into it after the spawn gets there
//! with what it started before the move. Alone in its test binary, so that no other test of
//! this process makes cgroups meanwhile (the tests of this file run one after the other).
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used)]

use std::ffi::OsString;

use std::sync::Mutex;

use tether_sandbox::{Mode, PrivateHome, Target, prepare};

/// The tests here count this process's cgroups: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// This process's cgroups in the v1 pids hierarchy (none where it is not writable).
fn mine() -> usize {
    let prefix = format!("tether-sandbox-{}-", std::process::id());
    std::fs::read_dir("/sys/fs/cgroup/pids")
        .map(|dir| {
            dir.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .count()
        })
        .unwrap_or(0)
}

/// What each test here starts with: its turn, a private home (in a directory removed after it),
/// the default policy.
fn start() -> (
    std::sync::MutexGuard<'static, ()>,
    tempfile::TempDir,
    PrivateHome,
    tether_sandbox::Policy,
) {
    let one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = tempfile::tempdir().expect("tempdir");
    let home = PrivateHome::create(dir.path(), false).expect("home");
    let policy = Mode::Default.policy().expect("policy").expect("some");
    (one, dir, home, policy)
}

#[test]
fn the_cgroup_goes_with_the_prepared_sandbox() {
    let (_one, _dir, home, policy) = start();
    let args: Vec<OsString> = Vec::new();
    let target = Target::new("/bin/true".as_ref(), &args, home.path());
    let cgroup = tether_sandbox::assess(&policy)
        .enforced
        .iter()
        .any(|e| e.contains("pids cgroup"));
    let unused = prepare(&policy, &target).expect("prepared");
    assert_eq!(mine(), usize::from(cgroup));
    drop(unused);
    assert_eq!(mine(), 0);
    let (_hook, mut cleanup) = prepare(&policy, &target)
        .expect("prepared")
        .into_child_hook();
    assert_eq!(mine(), usize::from(cgroup));
    cleanup.run();
    assert_eq!(mine(), 0);
}

/// The pids cgroup `pid` is in (its line of `/proc/PID/cgroup`).
fn pids_cgroup_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find(|line| line.split(':').nth(1) == Some("pids"))
        .unwrap_or_default()
        .to_owned()
}

/// The live children of `pid` (from `/proc/PID/task/*/children`).
fn children(pid: u32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[test]
fn a_server_adopted_after_the_spawn_is_moved_with_what_it_started_before() {
    let (_one, _dir, home, policy) = start();
    let args: Vec<OsString> = vec!["-c".into(), "sleep 30 & sleep 30 & wait".into()];
    let target = Target::new("/bin/sh".as_ref(), &args, home.path());
    let (_hook, mut cleanup) = prepare(&policy, &target)
        .expect("prepared")
        .into_child_hook_adopted_later();
    if mine() == 0 {
        eprintln!("NOTICE: no writable pids cgroup here; nothing to adopt into");
        return;
    }
    // Spawned without the hook: only the move is under test.
    let mut child = std::process::Command::new("/bin/sh")
        .args(&args)
        .spawn()
        .expect("spawned");
    let pid = child.id();
    let outside = pids_cgroup_of(pid);
    // Its two children exist before the move (bounded wait on the condition itself).
    let started = std::time::Instant::now();
    while children(pid).len() < 2 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "sh never started its children"
        );
        std::thread::yield_now();
    }
    let early = children(pid);
    cleanup.adopt(i32::try_from(pid).expect("a pid"), move |pid| {
        children(u32::try_from(pid).unwrap_or(0))
    });
    cleanup.wait_adopted();
    let inside = pids_cgroup_of(pid);
    let kids: Vec<String> = early
        .iter()
        .map(|p| pids_cgroup_of(u32::try_from(*p).unwrap_or(0)))
        .collect();
    let _ = child.kill();
    for p in &early {
        let _ = kill9(*p);
    }
    let _ = child.wait();
    assert_ne!(inside, outside, "the server was not moved");
    assert!(inside.contains("tether-sandbox-"), "{inside}");
    assert_eq!(
        kids,
        vec![inside.clone(); 2],
        "its early children stayed outside"
    );
    // Once they are gone, the cgroup goes too (bounded: the kernel reaps them first).
    let started = std::time::Instant::now();
    while std::fs::read_dir("/sys/fs/cgroup/pids")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| inside.ends_with(&*e.file_name().to_string_lossy()) && has_tasks(&e.path()))
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the cgroup kept its processes"
        );
        std::thread::yield_now();
    }
    cleanup.run();
    assert_eq!(mine(), 0);
}

fn has_tasks(dir: &std::path::Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|procs| !procs.trim().is_empty())
}

fn kill9(pid: i32) -> std::io::Result<()> {
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .map(|_| ())
}
