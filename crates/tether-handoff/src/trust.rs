//! A harness that gives no MCP server to a folder it does not trust (Gemini CLI): the check
//! before a run (`tether_driver::folder_trust` reads the harness's own variables and files).
//! tether never trusts a folder for the user: trusting one turns on that folder's own settings,
//! hooks and servers too, which the user has not looked at.

use std::path::Path;

use tether_harness::{Harness, TrustVerdict};

use crate::HandoffError;

pub(crate) use tether_driver::folder_trust::user_config_dir;

/// `Ok` unless `harness` gates MCP servers on folder trust and does not trust `folder` (the
/// working directory the harness will run in): then [`HandoffError::UntrustedFolder`], naming
/// the step to take. A rules file that does not parse is left to the harness to report.
pub fn check_folder_trust(harness: &'static Harness, folder: &Path) -> Result<(), HandoffError> {
    let Some(trust) = harness.run.and_then(|run| run.folder_trust) else {
        return Ok(());
    };
    match tether_driver::folder_trust::folder_trust(harness, folder) {
        None | Some(TrustVerdict::Trusted) => Ok(()),
        Some(TrustVerdict::NotTrusted(why)) => Err(HandoffError::UntrustedFolder {
            title: harness.title,
            program: harness.name,
            folder: std::fs::canonicalize(folder).unwrap_or_else(|_| folder.to_owned()),
            why,
            trust_env: trust.trust_env,
        }),
    }
}
