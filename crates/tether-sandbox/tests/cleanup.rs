//! A prepared sandbox leaves nothing behind: its pids cgroup goes when it is dropped unused,
//! and when the cleanup of a used one runs. Alone in its test binary, so that no other test of
//! this process makes cgroups meanwhile.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used)]

use std::ffi::OsString;

use tether_sandbox::{Mode, PrivateHome, Target, prepare};

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

#[test]
fn the_cgroup_goes_with_the_prepared_sandbox() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = PrivateHome::create(dir.path(), false).expect("home");
    let policy = Mode::Default.policy().expect("policy").expect("some");
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
