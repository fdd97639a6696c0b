//! Handing a run's servers to a third-party harness (Claude Code, Codex, Gemini CLI, opencode)
//! and running it: `tether run --mcp … -- HARNESS …`.
//!
//! - A stdio server is `tether __exec SOCKET ID` in the harness's config ([`exec_shim`]): its
//!   command, args, env, cwd and sandbox reach it from tether's memory over a socket in the
//!   run directory, byte-exact, and no other server or the harness sees them.
//! - A URL server with headers or a secret in its URL is `http://127.0.0.1:PORT/KEY` plus a
//!   per-run bearer token in the harness's config (the bridge): tether admits the harness's
//!   requests through `tether_http::Admission` and forwards them to the real URL with the real
//!   headers, so neither the harness nor its environment holds them.
//! - In `tether run --gateway` the harness's one server is `tether __gateway SOCKET`
//!   ([`gateway_relay`]), a byte relay to the gateway the run's tether process serves.
//! - Files tether writes live in a private run directory ([`RunDir`]:
//!   `$TETHER_HOME/run/<pid>-<random>`, 0700, files 0600), removed when the run ends —
//!   normally, on error, or on SIGTERM/SIGHUP (forwarded to the harness first). The harness
//!   runs under tether's supervisor (`tether_driver::supervisor`): if tether is SIGKILLed, the
//!   supervisor kills the harness and every process it started and removes the run directory.
//!   A directory left anyway (the supervisor killed too) is swept by the next run. The user's
//!   own config files are never written.
//!
//! **Invariant:** besides `tether-driver`, this is the one crate that holds rendered values (a
//! server's secrets, filled in) in order to hand them to other processes, so it keeps them as
//! narrowly as it can: a value leaves this process only over the run directory's 0700 socket
//! to the exec shim of its own server (which puts it in that server's own environment,
//! arguments or working directory and `exec`s it: the harness never sees it), as a header or
//! URL the bridge sends to that server alone, or as a reference's value in the harness
//! process's environment. It never puts a value in a command line of its own making, never
//! writes one to a file other than the 0600 files of the run directory it removes (and there
//! only what a harness cannot read from its environment, never under `--no-secrets-on-disk`),
//! and never prints, logs or returns one in an error. A value kept for later (a launch, a
//! bridged header or URL) is a `SecretValue`, zeroized when the run ends.
//!
//! ```no_run
//! # async fn hand_off(servers: &[tether_config::RenderedServer]) -> Result<u8, tether_handoff::HandoffError> {
//! use std::path::Path;
//!
//! let code = tether_handoff::run_harness(
//!     tether_handoff::HandOff {
//!         harness: tether_harness::Format::Claude.harness(),
//!         command: &["claude".to_owned(), "-p".to_owned(), "list my issues".to_owned()],
//!         strict: true,
//!         no_secrets_on_disk: false,
//!         hidden_env: &[],
//!         home: Path::new("/home/me/.local/share/tether"),
//!         program: Path::new("/usr/local/bin/tether"),
//!         bearer_auth: None,
//!         sandbox: None,
//!     },
//!     servers,
//! )
//! .await?;
//! # Ok(code) }
//! ```

mod bridge;
mod error;
pub mod exec_shim;
pub mod gateway_relay;
mod prepare;
mod run;
mod run_dir;
mod trust;

use std::path::Path;
use std::sync::Arc;

pub use error::HandoffError;
pub use run::run_harness;
pub use run_dir::RunDir;
pub use trust::check_folder_trust;

/// One hand-off: the harness, its command and how its servers are handed over.
#[derive(Clone)]
pub struct HandOff<'a> {
    /// The harness's row in `tether_harness::HARNESSES`; one without a `run` is
    /// [`HandoffError::NotRunnable`].
    pub harness: &'static tether_harness::Harness,
    /// The command after `--`: the program (looked up on `PATH`) and its arguments.
    pub command: &'a [String],
    /// `--strict-mcp`: ask the harness to use only the servers handed over, as its row says.
    pub strict: bool,
    /// `--no-secrets-on-disk`: refuse rather than write a value the harness cannot read from
    /// its environment into the run directory.
    pub no_secrets_on_disk: bool,
    /// Variables of tether's environment that held secrets (`--secret NAME=env:VAR`): the
    /// harness keeps them, the stdio servers it starts lose them.
    pub hidden_env: &'a [String],
    /// tether's data directory (`$TETHER_HOME`): the run directory is made under its `run/`.
    pub home: &'a Path,
    /// tether's own executable: what a stdio server becomes in the harness's config
    /// (`PROGRAM __exec SOCKET ID`); it must dispatch [`exec_shim::SUBCOMMAND`] to
    /// [`exec_shim::main`].
    pub program: &'a Path,
    /// Where a bridged server's refused `Authorization` is renewed (an OAuth refresh or
    /// step-up); `None`: it is sent as given.
    pub bearer_auth: Option<Arc<dyn tether_driver::BearerAuth>>,
    /// The run's start options, whose [`tether_driver::StartOptions::sandbox_for`] gives the
    /// sandbox each stdio server starts in (the exec shim applies it); `None`: no sandbox.
    pub sandbox: Option<&'a tether_driver::StartOptions>,
}

impl std::fmt::Debug for HandOff<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandOff")
            .field("harness", &self.harness.name)
            .field("command", &self.command)
            .field("strict", &self.strict)
            .field("no_secrets_on_disk", &self.no_secrets_on_disk)
            .field("hidden_env", &self.hidden_env)
            .field("home", &self.home)
            .field("program", &self.program)
            .field("bearer_auth", &self.bearer_auth.is_some())
            .field("sandbox", &self.sandbox)
            .finish()
    }
}
