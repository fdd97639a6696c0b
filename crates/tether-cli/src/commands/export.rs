//! `tether export`: the rendered config in a harness's own format.
//!
//! To VS Code, the `${input:ID}` references of the user's configs stay references and their
//! `inputs` entries are written back (VS Code prompts for the values); no value is read for
//! them.

use tether_config::Exposure;
use tether_harness::{Format, ServersConfig};

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
    let (session, inputs) = if args.format == Format::Vscode {
        super::session_keeping_inputs(&args.specs, &args.secrets, &progress).await?
    } else {
        (
            super::session(&args.specs, &args.secrets, &progress).await?,
            super::KeptInputs::default(),
        )
    };
    progress.finish();
    let mut servers = session.servers().to_vec();
    for server in &mut servers {
        server.declassify(&inputs.references);
    }
    let servers = servers.as_slice();
    let export = |exposure| -> anyhow::Result<ServersConfig> {
        let mut config = tether_harness::export_config(servers, args.format, exposure)?;
        config.set_inputs(&inputs.prompts);
        Ok(config)
    };
    match &args.output {
        Some(path) => {
            let config = export(Exposure::Real)?;
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
            let config = export(exposure)?;
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
