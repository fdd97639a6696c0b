//! `tether test`: start, initialize, list tools, report, shut down.

use tether_driver::ServerStatus;

use crate::cli::TestArgs;
use crate::exit::{FAILED, OK, Reported};
use crate::output::{Progress, print, print_json, reports_json, reports_table};

pub async fn test(args: &TestArgs) -> anyhow::Result<u8> {
    let progress = Progress::new();
    let session = super::session(&args.specs, &args.secrets, &progress).await?;
    let options = super::start_options(args.timeout, false);
    let runtime = super::start(&session, &options, &progress).await?;
    progress.step("shutting down…");
    let mut reports = runtime.reports().to_vec();
    runtime.shutdown().await;
    super::auth::explain_unauthorized(&session, &mut reports).await;
    progress.finish();
    if args.json {
        print_json(&reports_json(&reports));
    } else {
        print(&reports_table(&reports));
    }
    if reports.iter().all(|r| {
        matches!(
            r.status,
            ServerStatus::Ready { .. } | ServerStatus::Disabled
        )
    }) {
        Ok(OK)
    } else {
        Err(Reported(FAILED).into())
    }
}
