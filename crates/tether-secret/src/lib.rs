//! tether's ground floor for secret values: [`SecretValue`] (zeroized, never printed), the run's
//! [`Secrets`], the [`Masker`] that hides every printed form of them in text and JSON, and the
//! parsing of `--secret NAME=SOURCE` arguments ([`parse_secret_args`]).
//!
//! It depends on no other tether crate, so the logger, the HTTP client, the secret stores and the
//! GraphQL client can mask secrets without depending on the config parser (`tether-config`
//! re-exports all of it under its old paths).
//!
//! ```
//! use tether_secret::{Masker, SecretValue};
//!
//! let value = SecretValue::from("hunter2-long");
//! let masker = Masker::new([&value]);
//! assert_eq!(masker.mask("token=hunter2-long"), "token=********");
//! ```
//!
//! **Invariant:** this crate does no I/O: no files, no network, no processes, no environment.

#![deny(missing_docs)]

mod encodings;
mod mask;
mod mask_json;
mod secret;
mod secret_args;

pub use encodings::printed_forms;
pub use mask::{
    Folded, MIN_SECRET_LINE_BYTES, Masker, SHORT_SECRET_CHARS, is_invisible, mask_known_values,
};
pub use mask_json::mask_json;
pub use secret::{MASK, SecretValue, Secrets};
pub use secret_args::{SecretArg, SecretArgError, SecretSource, parse_secret_args, shell_line};
