//! The glue of a hand-off: `tether run -- HARNESS …`'s flags and tether's settings turned into
//! a `tether_handoff::HandOff` (the runtime lives in `tether-handoff`).

use anyhow::Context as _;
use tether_config::RenderedServer;

use crate::cli::{HarnessArg, RunArgs};
use crate::exit::UsageError;
use crate::{secrets, settings};

/// Hands `servers` to the harness command of `args` (`tether_handoff`) and returns its exit
/// code, each stdio server in its sandbox from `sandbox`; also what `run --gateway` hands its
/// one relay entry to (no sandbox: the relay is tether's own).
pub async fn hand_off(
    args: &RunArgs,
    harness: HarnessArg,
    servers: &[RenderedServer],
    sandbox: Option<&tether_driver::StartOptions>,
) -> anyhow::Result<u8> {
    let HarnessArg::Handoff(harness) = harness else {
        return Err(UsageError::new("the built-in harness takes no command").into());
    };
    let program = std::env::current_exe().context("cannot locate tether's executable")?;
    let home = settings::data_dir()?;
    let handoff = tether_handoff::HandOff {
        harness,
        command: &args.command,
        strict: args.strict_mcp,
        no_secrets_on_disk: args.no_secrets_on_disk,
        hidden_env: &secrets::env_source_names(&args.secrets),
        home: &home,
        program: &program,
        bearer_auth: Some(crate::commands::bearer_auth()),
        sandbox,
    };
    Ok(tether_handoff::run_harness(handoff, servers).await?)
}
