//! What a person sees: progress on stderr (a spinner on a terminal, nothing otherwise),
//! results on stdout (tables, or JSON with --json). Colour only on a terminal and without
//! NO_COLOR.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use tether_config::escape_controls;
use tether_driver::{ServerReport, ServerStatus};

use tether_env::EnvVars;

/// Progress messages on stderr.
pub struct Progress {
    spinner: Option<ProgressBar>,
}

impl Progress {
    /// A spinner when stderr is a terminal; otherwise progress is not shown (a log or a pipe
    /// gets results and errors, not steps).
    pub fn new() -> Self {
        let spinner = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        Self { spinner }
    }

    /// Shows `message` as the current step.
    pub fn step(&self, message: &str) {
        if let Some(bar) = &self.spinner {
            bar.set_message(message.to_owned());
        }
    }

    /// Runs `f` with the spinner hidden, so that a prompt on the terminal is not drawn over.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.spinner {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// Removes the spinner.
    pub fn finish(&self) {
        if let Some(bar) = &self.spinner {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Whether stdout may be coloured.
fn colour() -> bool {
    std::env::var_os(EnvVars::NO_COLOR).is_none_or(|v| v.is_empty())
        && std::io::stdout().is_terminal()
}

fn paint(text: &str, code: &str) -> String {
    if colour() {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// The `--json` report: `{"servers":[{"name","status","tools":[{"name","description"}],"error"}]}`;
/// `status` is `ready`, `failed` or `disabled`.
pub fn reports_json(reports: &[ServerReport]) -> Value {
    let servers: Vec<Value> = reports
        .iter()
        .map(|report| match &report.status {
            ServerStatus::Ready { tools } => json!({
                "name": report.name,
                "status": "ready",
                "tools": tools.iter().map(|t| json!({"name": t.name, "description": t.description, "inputSchema": t.definition.get("inputSchema")})).collect::<Vec<_>>(),
                "error": null,
            }),
            ServerStatus::Failed { reason } => json!({
                "name": report.name,
                "status": "failed",
                "tools": [],
                "error": reason,
            }),
            ServerStatus::Disabled => json!({
                "name": report.name,
                "status": "disabled",
                "tools": [],
                "error": null,
            }),
        })
        .collect();
    json!({ "servers": servers })
}

/// The human report: one block per server.
pub fn reports_table(reports: &[ServerReport]) -> String {
    let width = reports
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(0);
    // The status column is as wide as the widest status shown (`disabled` only when present).
    let status_width = if reports
        .iter()
        .any(|r| matches!(r.status, ServerStatus::Disabled))
    {
        "disabled".len()
    } else {
        "failed".len()
    };
    let status = |label: &str, code: &str| paint(&format!("{label:status_width$}"), code);
    let indent = " ".repeat(status_width + 4);
    let mut out = String::new();
    for report in reports {
        let name = format!("{:width$}", report.name);
        match &report.status {
            ServerStatus::Ready { tools } => {
                let count = match tools.len() {
                    1 => "1 tool".to_owned(),
                    n => format!("{n} tools"),
                };
                out.push_str(&format!("{}  {name}  {count}\n", status("ready", "32")));
                for tool in tools {
                    // Server-supplied text: masked by the driver, its control characters
                    // escaped here (a terminal would act on them).
                    let description = tool
                        .description
                        .as_deref()
                        .map(|d| escape_controls(d.lines().next().unwrap_or_default()))
                        .unwrap_or_default();
                    out.push_str(&format!(
                        "{indent}{:width$}  {}{}\n",
                        "",
                        escape_controls(&tool.name),
                        if description.is_empty() {
                            String::new()
                        } else {
                            format!(" — {description}")
                        }
                    ));
                }
            }
            ServerStatus::Failed { reason } => {
                let reason = escape_controls(reason);
                let mut lines = reason.lines();
                out.push_str(&format!(
                    "{}  {name}  {}\n",
                    status("failed", "31"),
                    lines.next().unwrap_or_default()
                ));
                for line in lines {
                    out.push_str(&format!("{indent}{:width$}  {line}\n", ""));
                }
            }
            ServerStatus::Disabled => {
                out.push_str(&format!(
                    "{}  {name}  not started (\"disabled\": true in its config)\n",
                    status("disabled", "33")
                ));
            }
        }
    }
    out
}

/// Writes `text` to stdout (ignoring a closed pipe, as `| head` would cause).
pub fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}

/// Pretty JSON plus a newline on stdout.
pub fn print_json(value: &Value) {
    print(&(serde_json::to_string_pretty(value).unwrap_or_default() + "\n"));
}
