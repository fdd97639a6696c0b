//! [`ManagedMcpError`]: every way resolving a managed MCP uid can fail.
//!
//! **Invariant:** no variant holds response text that may carry a secret (`mcpConfigJson`,
//! `proxyToken`, `authorizationHeaderValue`) or the API key. [`DecodeReason`] is an enum for
//! that reason: it cannot carry a serde message, which may quote the offending value.

use std::fmt;

use uuid::Uuid;

/// Why resolving a managed MCP server failed.
///
/// Every per-uid variant names the uid and the number of HTTP attempts made; the message says
/// "(after N attempts)" whenever retries happened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagedMcpError {
    /// The server answered with its `UserFacingError` result: the installation is unknown,
    /// inactive, or the server refused for a reason it explains in `message`.
    ///
    /// Not retried. Show the message to the user; the run cannot use this MCP server until the
    /// user fixes the installation (or the uid) on the managed side.
    #[error("failed to resolve managed MCP server {uid}: {message}{}", after(*attempts))]
    UserFacing {
        /// The managed MCP installation asked for.
        uid: Uuid,
        /// Which member of `UserFacingErrorInterface` the server returned.
        kind: UserFacingErrorKind,
        /// The server's message, meant for the user.
        message: String,
        /// HTTP attempts made.
        attempts: u32,
    },

    /// The server answered with a member of `CreateManagedMcpClientConfigResult` this version
    /// does not know: the server's schema moved ahead of this client.
    ///
    /// Not retried, and deliberately distinct from "not found". Upgrade tether.
    #[error(
        "managed MCP server {uid}: the server returned an unrecognised result type `{typename}`; \
         this tether version does not understand it, upgrade tether{}",
        after(*attempts)
    )]
    UnknownResult {
        /// The managed MCP installation asked for.
        uid: Uuid,
        /// The `__typename` the server sent.
        typename: String,
        /// HTTP attempts made.
        attempts: u32,
    },

    /// The endpoint answered with an HTTP status other than 2xx.
    ///
    /// 429, 502, 503 and 504 are retried up to the attempt budget and reach the caller only
    /// once it is spent; any other status (403 above all: check the API key) is returned at
    /// once. `body_excerpt` is the start of the body with the API key masked.
    ///
    /// A 401 while no API key is configured says which variables set one
    /// (`missing_api_key`).
    #[error(
        "managed MCP server {uid}: the managed MCP endpoint answered HTTP {status}{}{}{}",
        after(*attempts),
        excerpt(body_excerpt),
        if *missing_api_key { MISSING_API_KEY_HINT } else { "" }
    )]
    Http {
        /// The managed MCP installation asked for.
        uid: Uuid,
        /// The HTTP status code of the last attempt.
        status: u16,
        /// At most ~200 characters of the body, with known secrets masked.
        body_excerpt: String,
        /// HTTP attempts made.
        attempts: u32,
        /// The status was 401 and the client has no API key to send.
        missing_api_key: bool,
    },

    /// The response carried a top-level GraphQL `errors` array (the operation was rejected or
    /// failed on the server).
    ///
    /// Not retried. Usually a server bug or a client/server schema mismatch: report it with the
    /// messages.
    #[error(
        "managed MCP server {uid}: the GraphQL endpoint returned errors: {}{}",
        messages.join("; "),
        after(*attempts)
    )]
    GraphQl {
        /// The managed MCP installation asked for.
        uid: Uuid,
        /// The `message` of each error (truncated, known secrets masked).
        messages: Vec<String>,
        /// HTTP attempts made.
        attempts: u32,
    },

    /// No usable HTTP response arrived: connecting failed, the request timed out, or TLS failed.
    ///
    /// Connect errors and timeouts are retried up to the attempt budget; TLS and other failures
    /// are not. Check the endpoint URL, the network and the endpoint's certificate.
    #[error("managed MCP server {uid}: {kind}{}", after(*attempts))]
    Transport {
        /// The managed MCP installation asked for.
        uid: Uuid,
        /// What went wrong.
        kind: TransportErrorKind,
        /// HTTP attempts made.
        attempts: u32,
    },

    /// The resolution deadline ran out (retries and backoff included) before an answer
    /// arrived.
    ///
    /// Not retried: the deadline is the caller's whole budget. Check that the endpoint is up,
    /// or give resolution more time (`tether --managed-timeout SECS`).
    #[error(
        "managed MCP server {uid}: no answer from the managed MCP endpoint within the resolution deadline of {}{}",
        seconds(*deadline),
        after(*attempts)
    )]
    Deadline {
        /// The managed MCP installation asked for.
        uid: Uuid,
        /// The deadline that ran out.
        deadline: std::time::Duration,
        /// HTTP attempts started.
        attempts: u32,
    },

    /// The response was not valid JSON or did not have the shape of the operation's result.
    ///
    /// Not retried. A server bug or a schema mismatch: report it. The reason never quotes the
    /// response, which may hold secrets.
    #[error("managed MCP server {uid}: could not decode the response: {reason}{}", after(*attempts))]
    Decode {
        /// The managed MCP installation asked for.
        uid: Uuid,
        /// What did not match.
        reason: DecodeReason,
        /// HTTP attempts made.
        attempts: u32,
    },

    /// The client could not be configured: invalid settings, conflicting or unreadable API key
    /// variables, or the HTTP client could not be built.
    ///
    /// Returned by constructors only, before any request. Fix the configuration named in
    /// `reason`.
    #[error("managed MCP client configuration: {reason}")]
    Config {
        /// What is wrong, naming the setting or environment variable (never its secret value).
        reason: String,
    },
}

impl ManagedMcpError {
    /// The uid this error is about, if it is about one.
    #[must_use]
    pub fn uid(&self) -> Option<Uuid> {
        match self {
            Self::UserFacing { uid, .. }
            | Self::UnknownResult { uid, .. }
            | Self::Http { uid, .. }
            | Self::GraphQl { uid, .. }
            | Self::Transport { uid, .. }
            | Self::Deadline { uid, .. }
            | Self::Decode { uid, .. } => Some(*uid),
            Self::Config { .. } => None,
        }
    }
}

/// Which member of `UserFacingErrorInterface` the server returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UserFacingErrorKind {
    /// `GenericUserFacingError`.
    Generic,
    /// `ManagedMcpNotFoundError`: no managed installation has this uid.
    NotFound,
    /// `ManagedMcpInactiveError`: the installation exists but is not active.
    Inactive,
    /// A member added to the interface after this version; the message is still shown.
    Unrecognised,
}

/// What went wrong below HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportErrorKind {
    /// The TCP connection could not be made (refused, unreachable, DNS). Retried.
    Connect,
    /// The connect timeout or the total request timeout ran out. Retried.
    Timeout,
    /// The TLS handshake failed (certificate, protocol). Not retried.
    Tls,
    /// The request failed otherwise, e.g. the connection closed mid-response. Not retried.
    Other,
}

impl TransportErrorKind {
    /// Whether a request that failed this way is worth another attempt.
    #[must_use]
    pub fn is_transient(self) -> bool {
        matches!(self, Self::Connect | Self::Timeout)
    }
}

impl fmt::Display for TransportErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Connect => {
                "could not connect to the managed MCP endpoint; check the endpoint URL and the network"
            }
            Self::Timeout => "the managed MCP endpoint did not answer in time",
            Self::Tls => {
                "the TLS handshake with the managed MCP endpoint failed; check its certificate and URL scheme"
            }
            Self::Other => "the request to the managed MCP endpoint failed before a full response arrived",
        })
    }
}

/// Why a response could not be decoded. Holds positions and field names, never response text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeReason {
    /// The body is not JSON.
    Syntax {
        /// 1-based line of the first offending byte.
        line: usize,
        /// 1-based column of the first offending byte.
        column: usize,
    },
    /// The body ended in the middle of a JSON value.
    Truncated,
    /// The JSON does not have the shape of the operation's result (missing field, wrong type,
    /// unknown enum value).
    Shape {
        /// 1-based line where the mismatch was found.
        line: usize,
        /// 1-based column where the mismatch was found.
        column: usize,
    },
    /// Neither `data` nor `errors` was present.
    MissingData,
    /// The body exceeded the size this client reads.
    TooLarge {
        /// The limit, in bytes.
        limit_bytes: usize,
    },
    /// A `Time` field is not an RFC 3339 timestamp.
    InvalidTimestamp {
        /// The GraphQL field name.
        field: &'static str,
    },
    /// A URL field is not an absolute URL.
    InvalidUrl {
        /// The GraphQL field name.
        field: &'static str,
    },
    /// Only one of `authorizationHeaderName` and `authorizationHeaderValue` was present.
    UnpairedAuthorizationHeader,
}

impl DecodeReason {
    /// Classifies a serde_json error by category and position only: its message may quote
    /// the offending value, so it is dropped.
    pub(crate) fn from_json(error: &serde_json::Error) -> Self {
        use serde_json::error::Category;
        let (line, column) = (error.line(), error.column());
        match error.classify() {
            Category::Eof => Self::Truncated,
            Category::Data => Self::Shape { line, column },
            Category::Syntax | Category::Io => Self::Syntax { line, column },
        }
    }
}

impl fmt::Display for DecodeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax { line, column } => {
                write!(f, "the body is not valid JSON (line {line}, column {column})")
            }
            Self::Truncated => f.write_str("the body ended in the middle of a JSON value"),
            Self::Shape { line, column } => write!(
                f,
                "the JSON does not match the expected result shape (line {line}, column {column})"
            ),
            Self::MissingData => f.write_str("the response has neither `data` nor `errors`"),
            Self::TooLarge { limit_bytes } => {
                write!(f, "the body is larger than {limit_bytes} bytes")
            }
            Self::InvalidTimestamp { field } => {
                write!(f, "`{field}` is not an RFC 3339 timestamp")
            }
            Self::InvalidUrl { field } => write!(f, "`{field}` is not an absolute URL"),
            Self::UnpairedAuthorizationHeader => f.write_str(
                "`authorizationHeaderName` and `authorizationHeaderValue` must both be present or both absent",
            ),
        }
    }
}

/// " (after N attempts)" when retries happened, nothing otherwise.
fn after(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (after {attempts} attempts)")
    } else {
        String::new()
    }
}

/// ": <excerpt>" when there is one.
fn excerpt(body_excerpt: &str) -> String {
    if body_excerpt.is_empty() {
        String::new()
    } else {
        format!(": {body_excerpt}")
    }
}

/// Appended to an HTTP 401 when the client sent no API key.
const MISSING_API_KEY_HINT: &str =
    "; no API key is configured: set TETHER_API_KEY or TETHER_API_KEY_FILE";

/// `30 s`, `1.5 s`: a deadline for a message.
fn seconds(duration: std::time::Duration) -> String {
    let millis = duration.as_millis();
    if millis.is_multiple_of(1000) {
        format!("{} s", millis / 1000)
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}
