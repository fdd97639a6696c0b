//! The one error type of the setup server.

/// Why the setup server could not start or serve, or a submission could not be sent.
/// Failures of a tool call are not errors: they are tool results the agent reads.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A file or directory of the page announcement could not be written (`doing` names it);
    /// the command fails with it.
    #[error("{doing}")]
    Io {
        /// What was being done, naming the path.
        doing: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },

    /// [`crate::serve_stdio`]: the MCP client on stdin/stdout did not complete `initialize`.
    #[error("starting the MCP session on stdin/stdout")]
    Handshake(#[source] Box<rmcp::service::ServerInitializeError>),

    /// [`crate::serve_http`]: the listener failed while serving.
    #[error("serving HTTP")]
    Serve(#[source] std::io::Error),

    /// [`crate::submit::post`]: the page did not answer (nothing listens there any more, or
    /// it timed out). The caller tries the next announced page.
    #[error("posting to the page")]
    Post(#[source] reqwest::Error),

    /// [`crate::submit::post`]: the listener at an announced address did not prove it holds
    /// the announcement's key (another program on a reused port, or no page at all); nothing
    /// of the value was sent. The caller tries the next announced page.
    #[error("the listener at {address} is not the announced tether setup-mcp: {why}")]
    Unproven {
        /// The announced address.
        address: std::net::SocketAddr,
        /// What failed.
        why: String,
    },
}

impl SetupError {
    /// A [`SetupError::Io`] naming what was being done.
    pub(crate) fn io(doing: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let doing = doing.into();
        move |source| Self::Io { doing, source }
    }
}
