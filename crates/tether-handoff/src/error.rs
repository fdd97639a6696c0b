//! The one error type of the crate. No message holds a value: they name servers, headers,
//! programs and paths, never a header value, a URL or a command a server runs.

use std::path::PathBuf;

/// Why a hand-off (or the exec shim) could not go on.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// [`crate::run_harness`] was given no program to run. The user's command line is at fault:
    /// a usage error (tether exits 2).
    #[error("no harness command given after `--`")]
    NoCommand,

    /// [`crate::run_harness`] was given a row of `tether_harness::HARNESSES` without a `run`
    /// (an export-only format such as `vscode`). A usage error: the user names a harness tether
    /// can run.
    #[error("{name} is an export format, not a harness tether can run")]
    NotRunnable {
        /// The row's name.
        name: &'static str,
    },

    /// The harness program is not on `PATH` (or not executable), or the supervisor could not
    /// start it. Returned by [`crate::run_harness`] before anything else is set up when the
    /// program cannot be found. A usage error: the user fixes the command.
    #[error("cannot start the harness command `{program}`: {reason}")]
    CannotStart {
        /// The program as the user gave it.
        program: String,
        /// What went wrong (part of the message, not a separate cause).
        reason: std::io::Error,
    },

    /// The harness gives no MCP server to a folder it does not trust (Gemini CLI), and it does
    /// not trust the working folder. Returned by [`crate::check_folder_trust`] before anything
    /// is resolved or started; a usage error: the user trusts the folder in the harness, or
    /// for one run sets the harness's own variable. tether never trusts it for them.
    #[error(
        "{title} does not trust {folder} ({why}) and gives no MCP server to a folder it does not trust, tether's included: trust the folder in {title} first (start `{program}` there and accept its trust prompt, or use its /permissions command), or for this run only set {trust_env}=true (`{trust_env}=true tether run …`), which also turns on the folder's own {title} settings"
    )]
    UntrustedFolder {
        /// The harness's title.
        title: &'static str,
        /// Its program name.
        program: &'static str,
        /// The working folder.
        folder: PathBuf,
        /// Why it is not trusted.
        why: String,
        /// The variable that trusts the folder for a run.
        trust_env: &'static str,
    },

    /// A bridged URL server has a header name, a header value or a URL that HTTP does not
    /// allow. Returned by [`crate::run_harness`] before the harness starts; the message names
    /// the server and the header, never the value. The user fixes the server's config.
    #[error("MCP server '{server}': {problem}")]
    InvalidServer {
        /// The server's name.
        server: String,
        /// What is wrong, without the value.
        problem: String,
    },

    /// The harness config could not be written in the harness's format (a user's own config
    /// file that does not parse, a value `--no-secrets-on-disk` cannot keep off disk).
    /// Returned by [`crate::run_harness`]; a usage error, as in `tether export`.
    #[error(transparent)]
    Harness(#[from] tether_harness::HarnessError),

    /// The system's random number source failed, so no route key, socket id or bearer token
    /// can be made. Returned by [`crate::run_harness`] and [`crate::RunDir::create`]; the
    /// command fails.
    #[error(transparent)]
    NoRandomness(#[from] tether_http::token::NoRandomness),

    /// A file, directory, socket, listener or signal handler of the run could not be made or
    /// used, or waiting for the harness failed. `what` says which (with the path); the command
    /// fails.
    #[error("{what}")]
    Io {
        /// What tether was doing, with the path where there is one.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// The config text tether itself wrote could not be read back to add the allowed-servers
    /// setting (`--strict-mcp` with a private home). A bug of tether's; the command fails.
    #[error("re-reading the harness config tether wrote")]
    Rewrite(#[source] serde_json::Error),

    /// The bridge's HTTP client could not be built (no TLS roots, for instance). Returned by
    /// [`crate::run_harness`]; the command fails.
    #[error("cannot build the bridge's HTTP client")]
    HttpClient(#[source] reqwest::Error),

    /// The exec shim cannot reach the run's socket or read its answer: the run has ended, or
    /// the socket is not tether's. Printed by [`crate::exec_shim::main`] (exit 127).
    #[error("cannot reach tether at {} (has the run ended?)", socket.display())]
    ShimUnreachable {
        /// The socket the shim was given.
        socket: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// The run's socket answered nothing for the shim's id (a stale config, or an id of
    /// another run). Printed by [`crate::exec_shim::main`] (exit 127).
    #[error("tether does not know the server id {id}")]
    UnknownServerId {
        /// The id the shim was given.
        id: String,
    },

    /// The launch tether sent the shim has no command. A bug of tether's; printed by
    /// [`crate::exec_shim::main`] (exit 127).
    #[error("the launch has no command")]
    NoLaunchCommand,
}

impl HandoffError {
    /// An [`HandoffError::Io`] saying what was being done.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::Io { what, source }
    }
}
