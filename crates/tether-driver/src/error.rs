//! The driver's errors: one enum for resolution, rendering and launch.
//!
//! **Invariant:** no message holds a secret, a rendered value or raw config text; they name
//! servers, uids, fields and spec positions.

use uuid::Uuid;

/// Why resolving or launching the MCP servers of a run failed.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// A `--mcp` value is none of the accepted forms, or its JSON is invalid. Returned by
    /// [`crate::McpSpec::parse`]; the user should fix the value.
    #[error("invalid MCP spec: {reason}")]
    InvalidSpec {
        /// What was tried and what failed (never the value itself).
        reason: String,
    },

    /// A spec's config (inline or file) is invalid. The user should fix the config.
    #[error("MCP spec {spec}: {source}")]
    Config {
        /// Which spec (e.g. `inline spec #2`, `file ./mcp.json`).
        spec: String,
        /// The config error (names server and field).
        source: tether_config::ConfigError,
    },

    /// The managed server could not resolve `uid`: a user-facing error (not found, inactive,
    /// …), a transport or HTTP failure after retries, or a returned config that does not
    /// parse. Fatal for the run: never downgraded to a degraded startup.
    #[error("Failed to resolve managed MCP server {uid}: {message}")]
    ManagedMcpResolutionFailed {
        /// The uid as given in the spec (or a task config's `warp_id`).
        uid: Uuid,
        /// The server's own message for a user-facing error, else the client's description;
        /// never the returned config's text.
        message: String,
    },

    /// `uid` is not installed locally and no managed server is configured to resolve it.
    #[error(
        "MCP server {0} is not installed locally and no managed server is configured: set TETHER_SERVER_URL (and TETHER_API_KEY or TETHER_API_KEY_FILE), or install it with `tether install`"
    )]
    ServerNotFound(Uuid),

    /// Placeholders are still unresolved after applying secrets and the caller asked for
    /// strictness. The user should pass the named secrets (`--secret NAME=SOURCE`).
    #[error("MCP server '{server}' needs values for: {}; pass them with --secret NAME=SOURCE", names.join(", "))]
    MissingVariables {
        /// The first server (in spec order) with a placeholder left.
        server: String,
        /// The placeholder names no secret supplied, sorted.
        names: Vec<String>,
    },

    /// Two resolved servers share a name. The user should rename one (the map form of a
    /// spec sets the name).
    #[error("Duplicate MCP server name '{name}' (from {}): rename one of them (a single-server spec is named by its \"name\" field, else by its command's file name or its URL's host)", sources.join(" and "))]
    DuplicateServerName {
        /// The name two servers share.
        name: String,
        /// Where each came from (`local installation <uid>`, `inline spec #2`, …), earlier
        /// first.
        sources: Vec<String>,
    },

    /// A rendered value cannot be used as it is (a header with CR/LF, a URL that is not
    /// http(s), an SSE server the launcher cannot speak to…).
    #[error("MCP server '{server}': {problem}")]
    InvalidServer {
        /// The server whose rendered config is unusable.
        server: String,
        /// What is wrong, without the value.
        problem: String,
    },

    /// Strict startup: at least one server failed to start; every failure is listed.
    #[error("MCP startup failed: {}", details.join("; "))]
    StartupFailed {
        /// One line per failed server: `name: reason`.
        details: Vec<String>,
    },

    /// A name given to a [`crate::Session`] (to start or call one server) is none of the
    /// servers its specs resolved to. The user should pick one of `held`.
    #[error("no MCP server named '{name}' in the given specs (they hold: {})", held.join(", "))]
    NotInSession {
        /// The name asked for.
        name: String,
        /// The servers the session holds, in spec order.
        held: Vec<String>,
    },

    /// [`crate::Session::start_server`]: the one server asked for did not start (its
    /// process exited, the handshake failed or timed out). Nothing is left running.
    #[error("MCP server '{server}' failed to start: {reason}")]
    ServerFailedToStart {
        /// The name that was asked for.
        server: String,
        /// Why, with the stderr tail; known secret values masked.
        reason: String,
    },

    /// A tool call named a server that is not running in this run.
    #[error("no running MCP server named '{name}' (running: {})", running.join(", "))]
    UnknownServer {
        /// The name asked for.
        name: String,
        /// The servers that are running.
        running: Vec<String>,
    },

    /// A tool call failed or timed out.
    #[error("calling tool '{tool}' on MCP server '{server}' failed: {message}")]
    ToolCallFailed {
        /// The running server the call went to.
        server: String,
        /// The tool name as given (the server may not offer it).
        tool: String,
        /// Why, with known secret values masked.
        message: String,
    },

    /// A request forwarded with [`crate::McpRuntime::forward`] (a gateway's `resources/read`,
    /// `prompts/get`, `tools/call`, …) failed: the server answered with an MCP error (`code`
    /// is its JSON-RPC code, to pass on), the connection broke, or no answer came in time
    /// (`code` is `None`). The caller reports it to whoever asked.
    #[error("MCP server '{server}' could not answer {method}: {message}")]
    RequestFailed {
        /// The running server the request went to.
        server: String,
        /// The MCP method, e.g. `resources/read`.
        method: String,
        /// The server's JSON-RPC error code, when it answered with an error.
        code: Option<i32>,
        /// Why, with known secret values masked.
        message: String,
    },

    /// A forwarded request the server refused for a capability its client did not declare
    /// (JSON-RPC -32021, "missing required client capability"): `required` is what the server
    /// said it needs (its error's `requiredCapabilities`, shaped like a client's capabilities;
    /// `{}` when it said nothing), to pass on.
    #[error("MCP server '{server}' could not answer {method}: {message}")]
    NeedsCapability {
        /// The running server the request went to.
        server: String,
        /// The MCP method, e.g. `tools/call`.
        method: String,
        /// Why, with known secret values masked.
        message: String,
        /// The capabilities the server requires.
        required: Box<serde_json::Value>,
    },

    /// A forwarded request was cancelled by the caller before the server answered; the
    /// server was sent `notifications/cancelled`.
    #[error("the {method} request to MCP server '{server}' was cancelled")]
    Cancelled {
        /// The running server the request went to.
        server: String,
        /// The MCP method.
        method: String,
    },

    /// The local store failed.
    #[error(transparent)]
    Store(#[from] tether_store::StoreError),
}
