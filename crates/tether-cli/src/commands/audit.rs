//! `tether audit tail`: the last lines of a gateway audit log.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;

use anyhow::Context as _;

use crate::cli::AuditCommand;
use crate::exit::{OK, UsageError};
use crate::output::print;
use crate::settings;

pub fn audit(command: &AuditCommand) -> anyhow::Result<u8> {
    match command {
        AuditCommand::Tail(args) => {
            let path = match &args.path {
                Some(path) => path.clone(),
                None => newest()?,
            };
            let file = std::fs::File::open(&path)
                .with_context(|| format!("opening the audit log {}", path.display()))?;
            let mut last = std::collections::VecDeque::with_capacity(args.lines.min(10_000));
            for line in BufReader::new(file).lines() {
                let line = line.with_context(|| format!("reading {}", path.display()))?;
                if last.len() == args.lines {
                    last.pop_front();
                }
                if args.lines > 0 {
                    last.push_back(line);
                }
            }
            let mut text = String::new();
            for line in last {
                text.push_str(&line);
                text.push('\n');
            }
            print(&text);
            Ok(OK)
        }
    }
}

/// The newest `serve-*.jsonl` in `$TETHER_HOME/audit` (names sort by time).
fn newest() -> anyhow::Result<PathBuf> {
    let dir = settings::data_dir()?.join("audit");
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| UsageError::new(format!("no audit logs in {}: {e}", dir.display())))?;
    let mut logs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("serve-") && n.ends_with(".jsonl"))
        })
        .collect();
    logs.sort();
    logs.pop()
        .ok_or_else(|| UsageError::new(format!("no audit logs in {}", dir.display())).into())
}
