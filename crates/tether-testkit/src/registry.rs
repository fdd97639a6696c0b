//! The loopback fixture registry (`tether-test-registry`), started as a real process.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;

use crate::workspace_artifact;

/// The `tether-test-registry` binary (built on first use when missing).
pub fn test_registry_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        workspace_artifact(
            &[
                "-p",
                "tether-test-registry",
                "--bin",
                "tether-test-registry",
            ],
            Path::new("tether-test-registry"),
        )
    })
    .clone()
}

/// A running fixture registry; killed when dropped (and it exits by itself when its stdin
/// closes, so a test that dies leaves nothing behind).
#[derive(Debug)]
pub struct FixtureRegistry {
    child: Child,
    _stdin: Option<ChildStdin>,
    /// `http://127.0.0.1:PORT`: the base URL of both the official `/v0.1` API and Smithery's.
    pub url: String,
}

/// The Smithery key the fixture accepts unless told otherwise.
pub const FIXTURE_SMITHERY_KEY: &str = "fixture-smithery-key";

impl FixtureRegistry {
    /// Starts one with extra flags (`--page-size N`, `--no-etag`, `--smithery-key K`).
    pub fn start(args: &[&str]) -> Self {
        let mut child = Command::new(test_registry_bin())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start tether-test-registry: {e}"));
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("tether-test-registry has no stdout"));
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("reading tether-test-registry's URL: {e}"));
        let url = line.trim().to_owned();
        assert!(
            url.starts_with("http://127.0.0.1:"),
            "unexpected first line {url:?}"
        );
        Self {
            child,
            _stdin: stdin,
            url,
        }
    }

    /// The fixture's counters: `requests`, `notModified`, `unauthorized`.
    pub fn stats(&self) -> serde_json::Value {
        let address = self.url.trim_start_matches("http://");
        let body = http_request(address, "GET", "/_stats");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("/_stats is not JSON: {e}"))
    }

    /// Marks an official entry updated now (its description becomes "Updated just now").
    pub fn touch(&self, name: &str) {
        let address = self.url.trim_start_matches("http://");
        http_request(
            address,
            "POST",
            &format!("/_touch/{}", name.replace('/', "%2F")),
        );
    }
}

/// A minimal HTTP/1.1 request over a plain socket: the body of the answer.
fn http_request(address: &str, method: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address)
        .unwrap_or_else(|e| panic!("connecting to the fixture registry: {e}"));
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap_or_else(|e| panic!("writing to the fixture registry: {e}"));
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .unwrap_or_else(|e| panic!("reading from the fixture registry: {e}"));
    answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

impl Drop for FixtureRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
