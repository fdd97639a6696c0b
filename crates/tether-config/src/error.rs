//! The config crate's errors.
//!
//! **Invariant:** no message holds a config value or any part of the input text: they name
//! servers, fields, keys and positions only.

/// Why a config could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The text is not JSON. Returned by parsing; the caller should show the position so the
    /// user can fix the file or the inline spec.
    #[error("invalid JSON at line {line}, column {column}: {reason}")]
    InvalidJson {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the JSON reader expected (a fixed phrase, never input text).
        reason: String,
    },

    /// A user's config that does not start like JSON was read as TOML (Codex's
    /// `config.toml`) and is not TOML either. Returned by parsing; the caller should show the
    /// position.
    #[error("invalid TOML at line {line}, column {column}: {reason}")]
    InvalidToml {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the TOML reader expected (never input text).
        reason: String,
    },

    /// The JSON nests deeper than the reader's limit (128 levels).
    #[error(
        "the MCP config nests too deeply at line {line}, column {column} (more than 128 levels); an MCP config needs only a few"
    )]
    TooDeep {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },

    /// The text is larger than [`crate::MAX_CONFIG_BYTES`].
    #[error("the MCP config is {size} bytes, more than the limit of {limit} bytes")]
    TooLarge {
        /// Size of the input.
        size: usize,
        /// The limit.
        limit: usize,
    },

    /// The top level is not a JSON object.
    #[error("an MCP config must be a JSON object, found {found}")]
    NotAnObject {
        /// The JSON type found.
        found: &'static str,
    },

    /// Two servers share a name, within one JSON object or across the specs of a run.
    /// The user should rename one of them.
    #[error("Duplicate MCP server name '{name}': rename one of the servers")]
    DuplicateServerName {
        /// The duplicated name.
        name: String,
    },

    /// A top-level key (such as a wrapper like `mcpServers`) appears twice.
    #[error("the MCP config has the key '{key}' twice; keep one")]
    DuplicateKey {
        /// The key.
        key: String,
    },

    /// A server's field is invalid; the message names the server, the field and what is
    /// expected.
    #[error("MCP server '{server}': {field} {problem}")]
    InvalidField {
        /// The server's name.
        server: String,
        /// The field, e.g. `args` or `env.API_KEY`.
        field: String,
        /// What is wrong, e.g. "must be an array of strings".
        problem: String,
    },

    /// A server's shape is wrong as a whole, e.g. it has both `command` and `url`.
    #[error("MCP server '{server}': {problem}")]
    InvalidServer {
        /// The server's name.
        server: String,
        /// What is wrong.
        problem: String,
    },
}

impl ConfigError {
    pub(crate) fn field(
        server: &str,
        field: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        Self::InvalidField {
            server: server.to_owned(),
            field: field.into(),
            problem: problem.into(),
        }
    }

    pub(crate) fn server(server: &str, problem: impl Into<String>) -> Self {
        Self::InvalidServer {
            server: server.to_owned(),
            problem: problem.into(),
        }
    }
}
