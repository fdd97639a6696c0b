//! What the gateway's benches share.

#![allow(dead_code, reason = "each bench uses a part")]

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Runs `bench` on a two-thread runtime with a temporary `TETHER_HOME` for the processes it
/// starts, removed afterwards.
pub fn with_home<F: std::future::Future<Output = ()>>(bench: impl FnOnce(PathBuf) -> F) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("a temporary TETHER_HOME");
    runtime.block_on(bench(dir.path().to_owned()));
    drop(runtime);
    drop(dir);
}

/// `target/PROFILE/NAME` with `TETHER_BENCH_PROFILE=PROFILE` (e.g. `dist`, what users
/// install), else `target/release/NAME` when built, else the debug binary.
pub fn binary(name: &str, package: &str) -> PathBuf {
    if let Some(profile) = std::env::var_os("TETHER_BENCH_PROFILE") {
        let chosen = tether_testkit::target_dir().join(profile).join(name);
        assert!(chosen.is_file(), "{} is not built", chosen.display());
        return chosen;
    }
    let release = tether_testkit::target_dir().join("release").join(name);
    if release.is_file() {
        return release;
    }
    tether_testkit::workspace_artifact(&["-p", package, "--bin", name], Path::new(name))
}

/// The `q` quantile (0 to 1) of `sorted`; zero when empty.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let last = sorted.len() - 1;
    let index = (last as f64 * q).round() as usize;
    sorted[index.min(last)]
}

pub fn ms(duration: Duration) -> String {
    format!("{:.3} ms", duration.as_secs_f64() * 1000.0)
}

/// An MCP client over stdio of `program` with `args`, its `TETHER_HOME` `home`, its stderr
/// dropped; and the process's id.
pub async fn stdio_client(
    program: &Path,
    args: &[&str],
    home: &Path,
) -> (rmcp::service::RunningService<rmcp::RoleClient, ()>, u32) {
    use rmcp::ServiceExt as _;
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env("NO_COLOR", "1")
        .env("TETHER_HOME", home);
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawning a stdio server");
    let pid = transport.id().expect("a pid");
    let client = ().serve(transport).await.expect("initializing over stdio");
    (client, pid)
}
