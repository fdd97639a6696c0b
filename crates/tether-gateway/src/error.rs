//! What can stop a gateway.

use std::path::PathBuf;

/// Why a gateway could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The audit log could not be created (an existing file, a link, a directory that cannot
    /// be made). Returned by [`crate::AuditLog::create`]; the user picks another `--audit` path.
    #[error("cannot create the audit log {}: {source}", path.display())]
    Audit {
        /// The path asked for.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },

    /// `--listen` named an address that is not loopback (the caller checks with
    /// [`crate::is_loopback`]); the gateway has no TLS, so it only listens where no one else
    /// can watch the token.
    #[error(
        "{address} is not a loopback address: tether serve listens on 127.0.0.1, ::1 or localhost only"
    )]
    NotLoopback {
        /// The address given.
        address: String,
    },

    /// Binding or serving failed (the port is taken, stdin closed badly, …).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },

    /// The MCP session over stdio could not start (the client's `initialize` never came or
    /// was invalid).
    #[error("the MCP client did not complete initialize: {message}")]
    Handshake {
        /// rmcp's description.
        message: String,
    },
}
