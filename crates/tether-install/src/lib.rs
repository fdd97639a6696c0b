//! From a registry entry to a local installation: what `tether add` and `tether setup-mcp`
//! share.
//!
//! Four steps, each its own function, so that a terminal command and an MCP tool put them
//! together in their own ways:
//! 1. [`choose`] how the entry runs — a stdio package whose runner is on `PATH`, a remote, or
//!    an mcpb bundle — as a [`Choice`], and [`Choice::build`] its launch config from the
//!    answers (`tether_registry::add`).
//! 2. [`bundle::fetch`] an mcpb bundle: https download, SHA-256 check, zip-slip-safe unpack
//!    into `$TETHER_HOME/bundles/<sha256>`.
//! 3. [`test_connect`]: start the built server in a scratch directory, initialize, list its
//!    tools, stop it; nothing is stored.
//! 4. [`install_built`]: store it in the local store with its secrets in the secret store,
//!    atomically (`tether_store::Store::install_with`).
//!
//! Nothing here prints, reads the program's settings or exits: progress goes to a
//! [`Progress`], the data directory and the store are parameters, OAuth tokens come from a
//! [`StoredTokens`] the program supplies, and every failure is an [`InstallError`].
//!
//! ```no_run
//! # async fn demo(server: &tether_registry::model::ServerJson, store: &mut tether_store::Store)
//! # -> Result<(), tether_install::InstallError> {
//! use std::time::Duration;
//! use tether_install::{Silent, Trial, TrialOptions, choose, install_built, local_name, test_connect};
//!
//! let choice = choose(server, None)?;
//! let Ok(built) = choice.build(&tether_registry::add::Answers::default()) else {
//!     return Ok(()); // the entry needs inputs: ask for them, build again
//! };
//! let given = tether_config::Secrets::new();
//! let local = local_name(server);
//! let options = TrialOptions { startup_timeout: Duration::from_secs(60), tokens: None };
//! if let Trial::Ready(_tools) = test_connect(&local, &built, &given, &options, &Silent).await? {
//!     let uid = install_built(store, ("official", server), &choice, &local, &built, &given)?;
//!     println!("{uid}");
//! }
//! # Ok(())
//! # }
//! ```

pub mod bundle;
mod choice;
mod error;
pub mod signature;
mod store;
mod trial;

pub use choice::{Choice, choose, local_name, sandbox_note, usable};
pub use error::InstallError;
pub use signature::Policy;
pub use store::install_built;
pub use trial::{StoredTokens, Trial, TrialOptions, test_connect};

/// Where the steps of a download or a test-connect are shown (a spinner on a terminal, say).
pub trait Progress: Send + Sync {
    /// `message` is now the current step.
    fn step(&self, message: &str);
}

/// A [`Progress`] that shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Progress for Silent {
    fn step(&self, _message: &str) {}
}
