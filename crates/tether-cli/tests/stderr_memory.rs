//! A stdio server's stderr without line ends must not grow tether's memory without bound
//! (an unbounded line reader took tether to 2.1 GB RSS on 1 GB of stderr with no newline). Here a server writes 256 MiB of
//! stderr with neither `\n` nor `\r` before it answers, at `-vv` (so every piece is logged), and
//! tether's peak resident memory must stay far below the amount written.
//!
//! Its own test binary: the peak is read with `getrusage(RUSAGE_CHILDREN)`, which covers every
//! child this process has waited for, so no other test may run children beside it.

use tether_testkit::{Tether, json_str, test_server_bin};

/// What the server writes to stderr before it starts: 256 MiB of `x`, no line end.
const WRITTEN_MIB: u64 = 256;
/// The peak tether may reach: a fraction of what was written (the old reader kept it all, and
/// more: the line, its lossy copy and its masked copy).
const PEAK_LIMIT_MIB: i64 = 64;

#[test]
fn stderr_without_line_ends_keeps_memory_bounded() {
    let home = tempfile::tempdir().expect("a temp TETHER_HOME");
    let server = test_server_bin();
    let script = format!(
        "head -c {} /dev/zero | tr '\\0' x >&2; exec \"$0\"",
        WRITTEN_MIB * 1024 * 1024
    );
    let spec = format!(
        r#"{{"noisy":{{"command":"sh","args":["-c",{},{}]}}}}"#,
        json_str(&script),
        json_str(&server.to_string_lossy())
    );
    let out = Tether::new(env!("CARGO_BIN_EXE_tether"), home.path())
        .command(&["test", "-vv", "--timeout", "60", "--mcp", &spec])
        .output()
        .expect("running tether test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("noisy"), "{stdout}");
    // The log got the stderr in bounded pieces: tens of thousands of 8 KiB lines.
    assert!(
        out.stderr.len() as u64 > WRITTEN_MIB * 1024 * 1024 / 2,
        "the stderr was forwarded at -vv ({} bytes)",
        out.stderr.len()
    );
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage of the waited-for children");
    // ru_maxrss is in KiB on Linux: the largest child (tether; head, tr and the server are small).
    let peak_mib = usage.max_rss() / 1024;
    assert!(
        peak_mib < PEAK_LIMIT_MIB,
        "tether peaked at {peak_mib} MiB for {WRITTEN_MIB} MiB of stderr without line ends"
    );
}
