//! The exit codes of both binaries, decided in one place in each (README, "Exit codes"):
//! 0 success · 1 a failure (a server, the harness, the store, the network) · 2 bad input or
//! usage · 3 managed resolution failed (`tether` only). A harness run of `tether` passes the
//! harness's own exit code through ([`Reported`]).

use tether_config::SecretArgError;

use crate::secrets::ReadError;

/// Success.
pub const OK: u8 = 0;
/// A failure: a server or the harness failed, or the store, a file or the network did.
pub const FAILED: u8 = 1;
/// Bad input or usage (clap exits with it on its own errors too).
pub const USAGE: u8 = 2;
/// Managed resolution failed (`tether` only).
pub const MANAGED: u8 = 3;

/// Bad input found by a binary itself (exit [`USAGE`]): the message says what to give
/// instead.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(String);

impl UsageError {
    /// A usage error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// A failure already reported to the user (servers listed as failed, a harness's own exit):
/// the binary prints nothing more and exits with the code.
#[derive(Debug, thiserror::Error)]
#[error("exit {0}")]
pub struct Reported(pub u8);

/// The exit code for the error types both binaries share, or `None` for another error (the
/// binary then maps its libraries' errors): [`Reported`] carries its code; [`UsageError`] and
/// a refused `--secret` argument are [`USAGE`]; a secret that could not be read is [`USAGE`]
/// when [`ReadError::is_usage`] (the user gave something wrong), else [`FAILED`].
pub fn shared_code(cause: &(dyn std::error::Error + 'static)) -> Option<u8> {
    if let Some(reported) = cause.downcast_ref::<Reported>() {
        return Some(reported.0);
    }
    if cause.is::<UsageError>() || cause.is::<SecretArgError>() {
        return Some(USAGE);
    }
    cause
        .downcast_ref::<ReadError>()
        .map(|error| if error.is_usage() { USAGE } else { FAILED })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_errors_have_their_codes() {
        assert_eq!(shared_code(&Reported(7)), Some(7));
        assert_eq!(shared_code(&UsageError::new("bad")), Some(USAGE));
        assert_eq!(shared_code(&SecretArgError::EmptyName), Some(USAGE));
        let empty = ReadError::Empty {
            name: "T".to_owned(),
            from: "env:X".to_owned(),
        };
        assert_eq!(shared_code(&empty), Some(USAGE));
        let stdin = ReadError::Stdin {
            name: "T".to_owned(),
            cause: std::io::Error::other("closed"),
        };
        assert_eq!(shared_code(&stdin), Some(FAILED));
        assert_eq!(shared_code(&std::io::Error::other("other")), None);
    }
}
