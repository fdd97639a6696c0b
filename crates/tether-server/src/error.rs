//! The server's errors, one enum per layer ([`KeyError`], [`StoreError`],
//! [`InstallationError`], [`ServeError`]), joined by `#[from]` in [`ServerError`], which callers
//! that cross layers (the service, the binary) return. Each message is the layer's own.
//!
//! This module imports nothing else of the crate, so every module can name its errors without
//! an import cycle.
//!
//! **Invariant:** no variant holds a secret value, a stored config value, a token or the key;
//! they name paths, uids, fields and secret *names*.

use std::path::PathBuf;

use uuid::Uuid;

use tether_env::EnvVars;

/// The master key and what is sealed with it: reading the key, sealing, opening, random
/// numbers. Returned by [`crate::crypto`] and the key lookup.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Neither `TETHER_SERVER_KEY` nor `--insecure-dev-key` was given. Returned before anything
    /// is opened; the operator sets the key.
    #[error(
        "no encryption key: set {} to 32 random bytes as 64 hex digits (`openssl rand -hex 32`) \
         or base64 (`openssl rand -base64 32`), or pass --insecure-dev-key for a throwaway setup",
        EnvVars::TETHER_SERVER_KEY
    )]
    MissingKey,

    /// Both `TETHER_SERVER_KEY` and `--insecure-dev-key` were given; the operator picks one.
    #[error(
        "both {} and --insecure-dev-key are given; use one",
        EnvVars::TETHER_SERVER_KEY
    )]
    ConflictingKeys,

    /// `TETHER_SERVER_KEY` does not decode to 32 bytes. The operator fixes the variable.
    #[error(
        "{} is not a valid key: {reason}; give 32 bytes as 64 hex digits or base64",
        EnvVars::TETHER_SERVER_KEY
    )]
    InvalidKey {
        /// What is wrong with it (never the value).
        reason: String,
    },

    /// `TETHER_SERVER_PREVIOUS_KEY` does not decode to 32 bytes. The operator fixes it.
    #[error(
        "{} is not a valid key: {reason}; give 32 bytes as 64 hex digits or base64",
        EnvVars::TETHER_SERVER_PREVIOUS_KEY
    )]
    InvalidPreviousKey {
        /// What is wrong with it (never the value).
        reason: String,
    },

    /// Encrypting a value failed (it is larger than AES-GCM allows). The caller gives up.
    #[error("a value could not be encrypted")]
    Seal,

    /// A stored value did not decrypt: the database was altered, or a row was copied elsewhere.
    #[error("a stored value could not be decrypted: the database may have been altered")]
    Unseal,

    /// The operating system's random number generator failed. Nothing can be minted.
    #[error("the system random number generator failed: {reason}")]
    Random {
        /// The generator's error.
        reason: String,
    },
}

/// The server's store: the database URL, the data directory, the database (SQLite file or
/// PostgreSQL), its schema and rows. Returned by [`crate::store`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The data directory could not be created or a file in it could not be opened. The
    /// operator fixes the path or its permissions.
    #[error("cannot use the data directory {path}: {source}")]
    DataDir {
        /// The directory or file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// SQLite failed (locked past the busy timeout, disk full, damaged file…). Statements
    /// bind values as parameters, so the error holds no stored value.
    #[error("the server's database at {path} failed: {source}")]
    Database {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },

    /// The filesystem holding the SQLite database has less room than a write may need
    /// ([`crate::store::MIN_FREE_BYTES`]): writes fail or soon will. Returned by the health
    /// check; the operator frees space.
    #[error("the filesystem holding {path} has {free} bytes free: writes fail; free some space")]
    NoSpace {
        /// The database file.
        path: PathBuf,
        /// Bytes available to the server.
        free: u64,
    },

    /// The last write to the store failed for a reason of the store itself (the disk is full,
    /// an I/O error, the database is read-only), and a write tried since failed too. Returned
    /// by the health check until a write succeeds.
    #[error("writes to {database} fail: {class}")]
    WritesFail {
        /// The database file.
        database: String,
        /// What failed, in words (never a value).
        class: &'static str,
    },

    /// PostgreSQL failed (a statement, the connection, a constraint). Statements bind values
    /// as parameters, so the error holds no stored value; the database is named without its
    /// password.
    #[error("the server's database {database} failed: {source}")]
    Postgres {
        /// The database URL without its password.
        database: String,
        /// tokio-postgres's error.
        source: tokio_postgres::Error,
    },

    /// No connection to PostgreSQL could be had within the pool's timeout (down, unreachable,
    /// refused authentication). `/healthz` answers 503; the operator checks the database.
    #[error("the server's database {database} cannot be reached: {reason}")]
    Unreachable {
        /// The database URL without its password.
        database: String,
        /// The pool's or the connection's error.
        reason: String,
    },

    /// `--database-url` (or `TETHER_SERVER_DATABASE_URL`) is not a URL this server reads, or
    /// holds a password on the command line. The operator fixes it (exit 2); the message never
    /// quotes the URL.
    #[error("invalid database URL: {reason}")]
    InvalidUrl {
        /// What is wrong with it.
        reason: String,
    },

    /// Another user could write the data directory or the database file, or owns it: its rows
    /// cannot be trusted. The message names the fix (`chmod`/`chown`).
    #[error(transparent)]
    Unsafe(tether_sqlite::OpenError),

    /// The data directory was set up with another key (its key check does not open). Returned
    /// when opening the store; the operator starts with the original key.
    #[error(
        "the key does not match the one the data in {database} was encrypted with; start with the \
         original {} (or --insecure-dev-key if it was created with that), or during a key \
         rotation with the new key and {} set to the old one",
        EnvVars::TETHER_SERVER_KEY,
        EnvVars::TETHER_SERVER_PREVIOUS_KEY
    )]
    KeyMismatch {
        /// The database file or URL (without password).
        database: String,
    },

    /// The database was written by a newer tether-server. The operator upgrades.
    #[error(
        "the database at {database} has schema version {found}, newer than this tether-server \
         knows ({known}); upgrade tether-server"
    )]
    TooNew {
        /// The database file or URL (without password).
        database: String,
        /// Version found.
        found: i64,
        /// Newest version this build knows.
        known: i64,
    },

    /// A stored installation does not decode (written by an incompatible version, or edited).
    #[error("the stored installation {uid} cannot be read: {reason}")]
    Corrupt {
        /// The installation.
        uid: Uuid,
        /// What did not decode (never a value).
        reason: String,
    },

    /// `admin deactivate` named a uid the store does not hold.
    #[error("no installation {uid}")]
    UnknownInstallation {
        /// The uid given.
        uid: Uuid,
    },

    /// Sealing or opening the key check value failed.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// An installation as an admin gives it (config, names, secrets), or as it is opened for a
/// client. Returned by [`crate::NewInstallation`] and the installation checks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InstallationError {
    /// The config given to `admin add` is invalid. The message names servers and fields only.
    #[error("the installation's config is invalid: {0}")]
    Config(#[from] tether_config::ConfigError),

    /// The config given to `admin add` holds no server or several: an installation is one
    /// server.
    #[error("an installation holds exactly one MCP server; the config has {found}")]
    NotOneServer {
        /// How many servers the config holds.
        found: usize,
    },

    /// The config given to `admin add` refers to another installation by `warp_id`.
    #[error(
        "an installation must describe its server ('command' or 'url'), not refer to another ('warp_id')"
    )]
    Reference,

    /// A `--secret` names nothing the config uses. The operator fixes the name (typo?).
    #[error(
        "secret '{name}' is not used by the config; it uses: {}",
        if used.is_empty() { "no variables".to_owned() } else { used.join(", ") }
    )]
    UnusedSecret {
        /// The secret's name.
        name: String,
        /// The variable and placeholder names the config uses.
        used: Vec<String>,
    },

    /// A URL installation would leave placeholders for the client, but a proxied server's
    /// values must all be held by the server. The operator adds `--secret NAME=SOURCE`.
    #[error(
        "a URL installation needs a server-held value for every placeholder; missing: {} \
         (give each with --secret NAME=SOURCE)",
        names.join(", ")
    )]
    UnresolvedUpstream {
        /// The placeholder names.
        names: Vec<String>,
    },

    /// A URL installation uses `${VAR}`, which the server does not expand.
    #[error(
        "a URL installation cannot use ${{VAR}} expansion (found: {}); hold the value as a \
         --secret and write {{{{NAME}}}} instead",
        names.join(", ")
    )]
    UpstreamEnvExpansion {
        /// The variable names.
        names: Vec<String>,
    },

    /// A URL installation's rendered URL is not an absolute `http(s)` URL.
    #[error("a URL installation's url must be an absolute http or https URL: {reason}")]
    InvalidUpstreamUrl {
        /// What is wrong (never the URL, which may embed a credential).
        reason: String,
    },

    /// A URL installation asks for the legacy SSE transport; the proxy forwards Streamable
    /// HTTP only.
    #[error(
        "a URL installation must use Streamable HTTP; the proxy does not forward the legacy SSE transport"
    )]
    SseUpstream,

    /// A URL installation's header has a name or value HTTP does not allow.
    #[error("header '{name}' of the URL installation is not a valid HTTP header (name or value)")]
    InvalidUpstreamHeader {
        /// The header's name.
        name: String,
    },

    /// A name given to the admin CLI (installation or team) is not acceptable.
    #[error("invalid {what} '{value}': {reason}")]
    InvalidName {
        /// `installation name` or `team`.
        what: &'static str,
        /// The name given (names are not secret).
        value: String,
        /// Which rule it breaks.
        reason: &'static str,
    },

    /// A stored installation's template does not decode (written by an incompatible version,
    /// or edited). Same message as [`StoreError::Corrupt`].
    #[error("the stored installation {uid} cannot be read: {reason}")]
    Template {
        /// The installation.
        uid: Uuid,
        /// What did not decode (never a value).
        reason: String,
    },

    /// Sealing or opening a value of the installation failed.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// Serving HTTP: the listen address, the public URL, the upstream HTTP client, the listener.
/// Returned by [`crate::BoundServer`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The listen address could not be bound (in use, not local, no permission).
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address asked for.
        address: std::net::SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },

    /// `--public-url` is not an absolute `http(s)` URL without query or fragment.
    #[error("invalid public URL: {reason}")]
    InvalidPublicUrl {
        /// What is wrong.
        reason: String,
    },

    /// The HTTP client for upstream servers could not be built (TLS setup failed).
    #[error("cannot set up the upstream HTTP client: {reason}")]
    HttpClient {
        /// reqwest's error.
        reason: String,
    },
}

/// Any failure of the server's library: one layer's error, message unchanged (`transparent`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The key, sealing or opening.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An installation's config, names or values.
    #[error(transparent)]
    Installation(#[from] InstallationError),
    /// Serving HTTP.
    #[error(transparent)]
    Serve(#[from] ServeError),
}
