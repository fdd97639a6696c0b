//! [`RegistryError`]: what a registry request can fail with. Every message names the
//! registry; none holds an API key.

/// A failed registry request.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The registry answered with an error status (4xx other than 404, or 5xx with nothing
    /// cached). The caller shows it; a 401/403 from Smithery means the API key is wrong.
    #[error("{registry} answered {status} for {url}{}", detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    Status {
        /// Which registry (`official registry`, `Smithery`).
        registry: String,
        /// The HTTP status.
        status: u16,
        /// The URL asked (no credentials are ever in it).
        url: String,
        /// The start of the error body, when it had one.
        detail: Option<String>,
    },

    /// No answer within the timeout, and nothing cached. Try again or raise the timeout.
    #[error("{registry} did not answer within {seconds} s ({url})")]
    Timeout {
        /// Which registry.
        registry: String,
        /// The timeout.
        seconds: u64,
        /// The URL asked.
        url: String,
    },

    /// The registry could not be reached (DNS, connection refused, TLS), and nothing cached.
    #[error("cannot reach {registry} at {url}: {reason}")]
    Unreachable {
        /// Which registry.
        registry: String,
        /// The URL asked.
        url: String,
        /// What failed.
        reason: String,
    },

    /// The answer was larger than [`crate::client::MAX_RESPONSE_BYTES`]: refused unread past
    /// the limit (a hostile or broken registry). Nothing is cached; the caller reports it.
    #[error("{registry} sent more than {limit_mib} MiB for {url}; refused")]
    TooLarge {
        /// Which registry.
        registry: String,
        /// The URL asked.
        url: String,
        /// The limit, in MiB.
        limit_mib: usize,
    },
    /// The answer was not the JSON shape the registry documents.
    #[error("{registry} sent an answer tether cannot read for {url}: {reason}")]
    Decode {
        /// Which registry.
        registry: String,
        /// The URL asked.
        url: String,
        /// The decoder's message (positions and field names, no values).
        reason: String,
    },

    /// The registry has no such server (or version). The caller says so (exit 2).
    #[error("{registry} has no server {name}{}", version.as_deref().map(|v| format!(" at version {v}")).unwrap_or_default())]
    NotFound {
        /// Which registry.
        registry: String,
        /// The name asked for.
        name: String,
        /// The version asked for, when not `latest`.
        version: Option<String>,
    },

    /// A base URL is not an http(s) URL. The caller fixes its configuration.
    #[error("the URL of {registry}, {url:?}, is not a valid http(s) URL")]
    BadUrl {
        /// Which registry.
        registry: String,
        /// The URL given.
        url: String,
    },

    /// `--source smithery` without an API key.
    #[error(
        "Smithery needs an API key: store it once with `tether secrets set --registry smithery`, or set SMITHERY_API_KEY (or smithery_api_key_file in config.toml)"
    )]
    NoSmitheryKey,

    /// A registry name or `NAME:server` prefix that names no registry, a duplicate or a
    /// malformed name. The caller fixes its arguments or config (exit 2).
    #[error("{0}")]
    BadRegistry(String),

    /// The HTTP client could not be built (TLS set-up).
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
}
