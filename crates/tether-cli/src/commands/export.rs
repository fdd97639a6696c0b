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
            let text = tether_harness::export(servers, args.format, Exposure::Real)?;
            write_private(path, text.as_bytes())?;
            eprintln!(
                "wrote {} ({} servers, mode 0600, real values)",
                path.display(),
                servers.len()
            );
        }
        None => {
            let exposure = if args.show_secrets {
                Exposure::Real
            } else {
                Exposure::Masked
            };
            print(&tether_harness::export(servers, args.format, exposure)?);
        }
    }
    Ok(OK)
}
