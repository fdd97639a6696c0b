//! What `tether` and `tether-server` share as command-line programs.
//!
//! - [`exit`]: the exit-code table both binaries follow (0 success, 1 failure, 2 bad input or
//!   usage, 3 managed resolution — `tether` only), the error types either binary returns to
//!   say which code ([`UsageError`], [`Reported`]), and [`exit::shared_code`], which maps these
//!   and the secret readers' errors. Each binary keeps its own mapping of its libraries' errors
//!   and asks [`exit::shared_code`] first.
//! - [`secrets`]: reading the value of each `--secret NAME=SOURCE` (parsed by
//!   [`tether_config::parse_secret_args`]) from its source — an environment variable, a file,
//!   one line of stdin, a hidden prompt, a program's output (`cmd:`) — and dotenv files. An empty value is refused, every
//!   buffer a value passes through is zeroed when freed, and every value read is registered
//!   with [`tether_log::register`] so that nothing the process prints shows it.
//!
//! ```no_run
//! # fn main() -> Result<(), tether_clikit::secrets::ReadError> {
//! let secrets = tether_clikit::secrets::read(&["TOKEN=env:API_TOKEN".to_owned()])?;
//! assert!(secrets.get("TOKEN").is_some());
//! # Ok(()) }
//! ```

pub mod exit;
pub mod secrets;

pub use exit::{FAILED, MANAGED, OK, Reported, USAGE, UsageError};
