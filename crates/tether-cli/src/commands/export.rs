//! `tether export`: the rendered config in a harness's own format.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

use anyhow::Context;
use tether_config::Exposure;

use crate::cli::ExportArgs;
use crate::exit::OK;
use crate::output::{Progress, print};

pub async fn export(args: &ExportArgs, server_url: Option<&str>) -> anyhow::Result<u8> {
    let progress = Progress::new();
    let resolved = super::resolve(&args.specs, &args.secrets, server_url, &progress).await?;
    progress.finish();
    let servers = &resolved.servers;
    match &args.output {
        Some(path) => {
            let config = tether_harness::export_config(servers, args.format, Exposure::Real)?;
            print_notes(config.notes());
            let text = config.to_text();
            // Created 0600; an existing file is narrowed to 0600 before it is rewritten.
            if path.exists() {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                    .with_context(|| format!("cannot set mode 0600 on {}", path.display()))?;
            }
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            file.write_all(text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!(
                "wrote {} ({}, mode 0600, real values)",
                path.display(),
                count(servers.len(), "server", "servers")
            );
        }
        None => {
            let exposure = if args.show_secrets {
                Exposure::Real
            } else {
                Exposure::Masked
            };
            let config = tether_harness::export_config(servers, args.format, exposure)?;
            print_notes(config.notes());
            print(&config.to_text());
            if config.masked() > 0 {
                eprintln!(
                    "note: {} masked as ******** (from secrets, the environment, a managed server, credential-named fields or URL passwords); for the real values write a 0600 file with -o FILE, or print them with --show-secrets",
                    count(config.masked(), "value", "values")
                );
            }
        }
    }
    Ok(OK)
}

/// `1 server`, `2 servers`.
fn count(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// What the format cannot express, on stderr (names only, never values).
fn print_notes(notes: &[String]) {
    for note in notes {
        eprintln!("note: {note}");
    }
}
