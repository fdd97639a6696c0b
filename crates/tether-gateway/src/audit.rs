//! The audit log: one JSON line per forwarded call, appended to a file of its own per
//! `tether serve`.
//!
//! A record holds when, which gateway session, which server and tool (or method and target),
//! how long, how it ended, and the size and SHA-256 of the arguments and of the result — never
//! a value. Both hashes are taken over the bytes **after** redaction (the same masking the
//! client gets), so a hash cannot confirm a guess of a secret value.
//!
//! The file is created fresh (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600; its directory 0700) and
//! written with `O_APPEND`, one `write` per record, so records never interleave.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::error::GatewayError;

/// How a forwarded call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The server answered with a result.
    Ok,
    /// The tool ran and reported its own failure (`isError: true`).
    ToolError,
    /// No result: the server answered with an error, broke off, or was unavailable.
    Error,
    /// The client cancelled the call.
    Cancelled,
    /// The gateway refused the call (unknown name, redaction policy, …).
    Refused,
}

impl Outcome {
    /// The word in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::Error => "error",
            Outcome::Cancelled => "cancelled",
            Outcome::Refused => "refused",
        }
    }
}

/// One forwarded call, as the log keeps it.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    /// The gateway session (a random id per client connection; never an `Mcp-Session-Id`).
    pub session: &'a str,
    /// The MCP method (`tools/call`, `resources/read`, `prompts/get`).
    pub method: &'a str,
    /// The server's name in the run (`None` when the name led nowhere).
    pub server: Option<&'a str>,
    /// The tool or prompt name on that server, or the resource URI's scheme and host only.
    pub target: &'a str,
    /// How long the server took.
    pub duration: Duration,
    /// How it ended.
    pub outcome: Outcome,
    /// The arguments as sent on, after redaction.
    pub arguments: Option<&'a Value>,
    /// The result as sent back, after redaction.
    pub result: Option<&'a Value>,
    /// The secret scan's findings in the arguments or the result, by rule name only
    /// (`tether-scan`'s `secrets`); written as `secret_findings` when there are any.
    pub findings: &'a [&'static str],
}

/// An open audit log.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl AuditLog {
    /// Creates the log at `path`: its directory (0700) when missing, the file new (0600);
    /// an existing file or a symbolic link there is refused.
    pub fn create(path: &Path) -> Result<Self, GatewayError> {
        let failed = |source: std::io::Error| GatewayError::Audit {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(failed)?;
        }
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(path)
            .map_err(failed)?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// Where the log is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `record` as one line. A write that fails is reported through `tracing` and
    /// does not fail the call it records.
    pub fn append(&self, record: &Record<'_>) {
        let mut line = record_json(record, OffsetDateTime::now_utc()).to_string();
        line.push('\n');
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(error) = file.write_all(line.as_bytes()) {
            tracing::warn!(path = %self.path.display(), %error, "cannot append to the audit log");
        }
    }
}

/// The JSON line for `record` at `now`.
pub fn record_json(record: &Record<'_>, now: OffsetDateTime) -> Value {
    let (arguments_bytes, arguments_sha256) = size_and_hash(record.arguments);
    let (result_bytes, result_sha256) = size_and_hash(record.result);
    let mut line = json!({
        "time": now.format(&Rfc3339).unwrap_or_default(),
        "session": record.session,
        "method": record.method,
        "server": record.server,
        "target": record.target,
        "duration_ms": (record.duration.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0,
        "outcome": record.outcome.as_str(),
        "arguments_bytes": arguments_bytes,
        "arguments_sha256": arguments_sha256,
        "result_bytes": result_bytes,
        "result_sha256": result_sha256,
    });
    if !record.findings.is_empty() {
        line["secret_findings"] = json!(record.findings);
    }
    line
}

/// The size of `value`'s compact JSON and its SHA-256 in hex; `(0, null)` for none.
fn size_and_hash(value: Option<&Value>) -> (usize, Value) {
    let Some(value) = value else {
        return (0, Value::Null);
    };
    let bytes = value.to_string().into_bytes();
    let digest = Sha256::digest(&bytes);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    (bytes.len(), Value::String(hex))
}

/// The part of a resource URI an audit line keeps: its scheme and authority, not its path or
/// query (either may carry a value).
pub fn uri_target(uri: &str) -> String {
    match uri.split_once("://") {
        Some((scheme, rest)) => {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            // user:password@host keeps only the host.
            let host = authority.rsplit('@').next().unwrap_or_default();
            format!("{scheme}://{host}")
        }
        None => uri.split(':').next().unwrap_or_default().to_owned() + ":",
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn a_record_holds_sizes_and_hashes_never_values() {
        let arguments = json!({"text": "a-value-never-logged"});
        let result = json!({"content": [{"type": "text", "text": "a-result-never-logged"}]});
        let record = Record {
            session: "s1",
            method: "tools/call",
            server: Some("everything"),
            target: "echo",
            duration: Duration::from_micros(1500),
            outcome: Outcome::Ok,
            arguments: Some(&arguments),
            result: Some(&result),
            findings: &[],
        };
        let line = record_json(&record, OffsetDateTime::UNIX_EPOCH);
        let text = line.to_string();
        assert!(!text.contains("never-logged"), "{text}");
        assert_eq!(line["time"], json!("1970-01-01T00:00:00Z"));
        assert_eq!(line["duration_ms"], json!(1.5));
        assert_eq!(line["arguments_bytes"], json!(arguments.to_string().len()));
        assert_eq!(
            line["arguments_sha256"].as_str().map(str::len),
            Some(64),
            "{text}"
        );
        assert_eq!(line["outcome"], json!("ok"));
    }

    #[test]
    fn the_file_is_new_private_and_never_a_link() {
        let dir = tempfile::tempdir().expect("creating a temporary directory");
        let path = dir.path().join("audit/serve.jsonl");
        let log = AuditLog::create(&path).expect("creating the audit log");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = std::fs::metadata(path.parent().expect("parent"))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        log.append(&Record {
            session: "s",
            method: "tools/call",
            server: None,
            target: "x",
            duration: Duration::ZERO,
            outcome: Outcome::Refused,
            arguments: None,
            result: None,
            findings: &[],
        });
        drop(log);
        assert!(
            AuditLog::create(&path).is_err(),
            "an existing file is refused"
        );
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).expect("symlink");
        assert!(
            AuditLog::create(&link).is_err(),
            "a symbolic link is refused"
        );
        assert!(!dir.path().join("elsewhere").exists());
        let text = std::fs::read_to_string(&path).expect("reading the log");
        assert_eq!(text.lines().count(), 1);
    }

    #[test]
    fn a_uri_keeps_scheme_and_host_only() {
        assert_eq!(uri_target("file:///home/u/.env"), "file://");
        assert_eq!(
            uri_target("https://u:pw@example.com/x?t=1"),
            "https://example.com"
        );
        assert_eq!(uri_target("demo://resource/static/1"), "demo://resource");
        assert_eq!(uri_target("urn:x:y"), "urn:");
    }
}
