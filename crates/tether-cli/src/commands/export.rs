//! `tether export`: the rendered config in a harness's own format.

use tether_config::Exposure;

use crate::cli::ExportArgs;
use crate::exit::OK;
use crate::output::{Progress, print};
use crate::private_file::{check_target, write_private};

pub async fn export(args: &ExportArgs) -> anyhow::Result<u8> {
    if let Some(path) = &args.output {
        // Before anything is resolved (a managed config may be minted for nothing otherwise).
        check_target(path)?;
    }
    let progress = Progress::new();
    let session = super::session(&args.specs, &args.secrets, &progress).await?;
    progress.finish();
    let servers = session.servers();
    match &args.output {
        Some(path) => {
            let config = tether_harness::export_config(servers, args.format, Exposure::Real)?;
            print_notes(config.notes());
            write_private(path, config.to_text().as_bytes())?;
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
