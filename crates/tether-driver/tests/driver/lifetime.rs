//! No server process outlives the run: SIGTERM of the parent shuts the groups down, and a
//! SIGKILLed parent takes its direct children with it (PR_SET_PDEATHSIG).

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncBufReadExt;

use crate::support::{hold_bin, json_str, processes_in_group, test_server_bin, wait_group_gone};

/// Starts `hold` with two servers (one spawning a grandchild); returns it and their groups.
async fn start_hold() -> (tokio::process::Child, Vec<i32>) {
    let server = json_str(&test_server_bin().to_string_lossy());
    let spec = format!(
        r#"{{"a":{{"command":{server},"args":["--spawn-child"]}},"b":{{"command":{server}}}}}"#
    );
    let mut child = tokio::process::Command::new(hold_bin())
        .arg(spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawning the process");
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut groups = Vec::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("hold did not get ready"))
            .expect("reading a line of its output")
            .unwrap_or_else(|| panic!("hold exited before ready"));
        if line == "ready" {
            break;
        }
        if let Some(pgid) = line.strip_prefix("pgid ") {
            groups.push(pgid.parse().expect("parsing the printed number"));
        }
    }
    assert_eq!(groups.len(), 2);
    for pgid in &groups {
        assert!(!processes_in_group(*pgid).is_empty());
    }
    (child, groups)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_the_parent_leaves_no_process_of_any_group() {
    let (mut hold, groups) = start_hold().await;
    let pid = Pid::from_raw(i32::try_from(hold.id().unwrap_or_default()).unwrap_or_default());
    kill(pid, Signal::SIGTERM).expect("sending the signal");
    let status = tokio::time::timeout(Duration::from_secs(30), hold.wait())
        .await
        .unwrap_or_else(|_| panic!("hold did not exit after SIGTERM"))
        .expect("waiting for the process");
    assert!(status.success(), "{status}");
    for pgid in groups {
        assert_eq!(
            wait_group_gone(pgid, Duration::from_secs(5)).await,
            Vec::<i32>::new(),
            "group {pgid}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_parent_takes_its_servers_with_it() {
    let (mut hold, groups) = start_hold().await;
    let pid = Pid::from_raw(i32::try_from(hold.id().unwrap_or_default()).unwrap_or_default());
    kill(pid, Signal::SIGKILL).expect("sending the signal");
    let _ = hold.wait().await;
    // Each group's leader is the server tether spawned: PR_SET_PDEATHSIG kills it.
    for pgid in &groups {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while processes_in_group(*pgid).contains(pgid) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            !processes_in_group(*pgid).contains(pgid),
            "server {pgid} outlived its SIGKILLed parent"
        );
        // A grandchild cannot be reached by the parent-death signal; clean it up here.
        let _ = killpg(Pid::from_raw(*pgid), Signal::SIGKILL);
    }
}
