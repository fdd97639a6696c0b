//! tether's local store: templatable MCP installations kept in SQLite under the data directory,
//! their secret values in the secret store (`tether-secrets`).
//!
//! A local installation is a [`TemplatableServer`] (the template, which never holds a value)
//! plus its variable values. The SQLite file holds the template, where the installation came
//! from, and the **names** of its stored values with where each lives (the OS credential
//! store or the 0600 secret file); [`Store::get`] reads the values back into memory. The store
//! hands installations out by UUID; the driver resolves a UUID found here locally, with no
//! network call.
//!
//! ```no_run
//! use tether_store::Store;
//! # fn main() -> Result<(), tether_store::StoreError> {
//! let store = Store::open(&tether_store::default_data_dir()?)?;
//! for entry in store.list()? {
//!     println!("{} {} {:?}", entry.uid, entry.name, entry.variable_names);
//! }
//! # Ok(()) }
//! ```
//!
//! **Invariant:** SQLite is used only here (the file is opened by `tether-sqlite`, which
//! creates the directory 0700 and the database 0600 and refuses ones other users can write);
//! every write is one transaction, so a failed install leaves no row behind.
//!
//! **Invariant:** no value is written to the SQLite file. Values go to the secret store
//! *before* the transaction that makes them visible commits, under a `pending_secrets` row
//! committed first; a process killed in between leaves only pending rows, which the next
//! [`Store::open`] sweeps (their values deleted) once the process that wrote them is gone. A
//! store written by an older tether (values in `variable_values`) has them moved out on open
//! and deleted with `secure_delete` on and the WAL truncated.

#![deny(missing_docs)]

mod credential_rows;
mod credentials;
mod install;
mod read;
mod remove;
mod schema;
mod test_hooks;
mod values;

use std::path::{Path, PathBuf};

pub use credentials::{Registry, RegistryKey};
use rusqlite::Connection;
use test_hooks::pause_point;
use tether_config::{Installation, SecretValue, ServerTemplate, TemplatableServer};
pub use tether_secrets::{Location, Preference, SecretStore, SecretStoreError};
use uuid::Uuid;

/// Environment variable naming tether's data directory (default: the platform data dir +
/// `tether`, e.g. `~/.local/share/tether`).
pub const TETHER_HOME: &str = tether_env::EnvVars::TETHER_HOME;

/// The database file's name inside the data directory.
pub const DATABASE_FILE: &str = "tether.db";

/// The name an OAuth token entry's value is stored under in the secret store (its key is the
/// caller's: `tether auth` uses uuid v5 of the server URL, never an installation's v4 UUID).
pub const OAUTH_NAME: &str = "OAUTH";

/// A credential that belongs to no installation (a server's OAuth tokens, a registry's API
/// key): what it is for and where its value lives (never the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialEntry {
    /// The key its value is stored under (a v5 UUID of the caller's namespace).
    pub key: Uuid,
    /// The name its value is stored under ([`OAUTH_NAME`], `SMITHERY_API_KEY`, …).
    pub name: String,
    /// The server or registry URL it is for.
    pub server: String,
    /// Where its value is.
    pub location: Location,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data directory could not be found or created. The user should set `TETHER_HOME`
    /// to a writable directory.
    #[error(
        "cannot use the data directory {path}: {source}; set {TETHER_HOME} to a writable directory"
    )]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Another user could write the data directory or the database (or owns it): its rows
    /// cannot be trusted and stored values could be read. The message names the fix
    /// (`chmod`/`chown`).
    #[error(transparent)]
    Unsafe(tether_sqlite::OpenError),
    /// No platform data directory is known and `TETHER_HOME` is unset.
    #[error("no data directory is known for this platform; set {TETHER_HOME}")]
    NoDataDir,
    /// SQLite failed (locked past the busy timeout, disk full, corrupt file…).
    #[error("the local store at {path} failed: {source}")]
    Database {
        /// The database file.
        path: PathBuf,
        /// SQLite's error (holds no stored value: statements bind values as parameters).
        source: rusqlite::Error,
    },
    /// The secret store failed (credential store unreachable or locked, unsafe or corrupt
    /// secret file); its message says what to do.
    #[error(transparent)]
    Secrets(#[from] SecretStoreError),
    /// A stored template does not decode; the store was written by an incompatible version
    /// or edited by hand. Remove the installation and install it again.
    #[error(
        "the stored installation {uid} cannot be read ({reason}); remove it with `tether remove {uid}` and install it again"
    )]
    Corrupt {
        /// The installation.
        uid: Uuid,
        /// What did not decode (never a value).
        reason: String,
    },
    /// The database was written by a newer tether.
    #[error(
        "the local store at {path} has schema version {found}, newer than this tether knows ({known}); upgrade tether"
    )]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// Version found.
        found: i64,
        /// Newest version this build knows.
        known: i64,
    },
    /// `set_secret` named a variable the installation does not have.
    #[error("installation {uid} has no variable {name} (its variables: {known})")]
    UnknownVariable {
        /// The installation.
        uid: Uuid,
        /// The name given.
        name: String,
        /// Its variables, comma-separated.
        known: String,
    },
    /// `install_as` was given a UUID that is installed already (a caller's mistake: new
    /// installations get a random UUID).
    #[error("an installation {0} exists already")]
    AlreadyInstalled(Uuid),
    /// The installation does not exist.
    #[error("no local installation {0} (see `tether list`)")]
    NotInstalled(Uuid),
}

/// Where an installation came from, shown by `tether list`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InstallSource {
    /// The registry (`official`).
    pub registry: String,
    /// The entry's name there.
    pub name: String,
    /// The exact version installed.
    pub version: String,
    /// The package or remote used (`npm @scope/pkg`, `remote https://…`).
    #[serde(default)]
    pub package: String,
}

/// A stored value's name and where it lives (never the value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSecret {
    /// The variable's name.
    pub name: String,
    /// Where its value is.
    pub location: Location,
    /// A secret (`install --secret`, `add`, `secrets set`): applied verbatim at use, like a
    /// run's `--secret`, never expanded. `false`: a value written in the config itself
    /// (captured `env`/header literal), rendered as written (`${VAR}` expands).
    pub literal: bool,
}

/// What `list` shows of an installation: names only, never values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledSummary {
    /// The installation's UUID.
    pub uid: Uuid,
    /// The server's name.
    pub name: String,
    /// The variable names (values are never listed).
    pub variable_names: Vec<String>,
    /// The names a run fills: each `{{NAME}}` left in the installation (a variable without a
    /// written value, or a placeholder inside one), in order.
    pub inputs: Vec<String>,
    /// The variables with a stored value, and where each lives.
    pub stored: Vec<StoredSecret>,
    /// `stdio`, `http` or `sse`.
    pub transport: &'static str,
    /// The registry entry it was added from; `None` for `tether install` (hand-written).
    pub source: Option<InstallSource>,
    /// Unix seconds when it was installed.
    pub created_at: i64,
}

impl InstalledSummary {
    /// The inputs without a stored value: each run must pass them (`--secret`).
    pub fn missing(&self) -> Vec<&str> {
        self.inputs
            .iter()
            .filter(|name| !self.stored.iter().any(|s| &s.name == *name))
            .map(String::as_str)
            .collect()
    }
}

/// The local store. Cheap to open; one per process is enough.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    secrets: SecretStore,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// The data directory: `$TETHER_HOME`, else the platform data dir + `tether`.
pub fn default_data_dir() -> Result<PathBuf, StoreError> {
    match std::env::var_os(TETHER_HOME) {
        Some(dir) if !dir.is_empty() => Ok(PathBuf::from(dir)),
        _ => dirs::data_dir()
            .map(|d| d.join("tether"))
            .ok_or(StoreError::NoDataDir),
    }
}

/// The secret store preference from `TETHER_SECRET_STORE` (unset: `auto`).
pub fn preference_from_env() -> Result<Preference, StoreError> {
    match std::env::var(tether_env::EnvVars::TETHER_SECRET_STORE) {
        Ok(text) => Ok(text.parse()?),
        Err(_) => Ok(Preference::Auto),
    }
}

/// Maps a SQLite error to [`StoreError::Database`] naming the file at `path`.
fn database_error(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + Copy + '_ {
    move |source| StoreError::Database {
        path: path.to_owned(),
        source,
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The literal `{{NAME}}`: the value an installation has for a variable nothing was given for
/// (it renders from the run's secrets). Not a secret; never stored.
fn placeholder(name: &str) -> String {
    format!("{{{{{name}}}}}")
}

/// Whether the process `pid` is alive (or belongs to another user).
fn alive(pid: i64) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// The names a run fills in `installation`: variables whose value is their own placeholder,
/// and placeholders inside other values, once each, in order.
pub fn input_names(installation: &Installation) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut add = |name: &str| {
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    };
    for name in installation.server.variable_names() {
        match installation.values.get(name) {
            None => add(name),
            Some(value) if value.value.expose() == placeholder(name) => add(name),
            Some(value) => {
                for inner in tether_config::placeholder::placeholder_names(value.value.expose()) {
                    add(inner);
                }
            }
        }
    }
    names
}

fn transport(server: &TemplatableServer) -> &'static str {
    match &server.template {
        ServerTemplate::Stdio(_) => "stdio",
        ServerTemplate::Remote(remote) => remote.transport.type_name(),
    }
}

impl Store {
    /// Opens (creating if needed) the store in `dir` through [`tether_sqlite::open`]: the
    /// directory 0700, the file 0600, refused when another user can write either, WAL
    /// journaling, a busy timeout for concurrent processes, `secure_delete`, and pending
    /// migrations. Secret values go where `TETHER_SECRET_STORE` says ([`Store::open_with`]
    /// takes the secret store itself).
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(dir, SecretStore::new(dir, preference_from_env()?))
    }

    /// [`Store::open`] with the secret store values go to and come from. Values an older
    /// tether left in the database are moved into it, and pending values of killed writers
    /// are swept.
    pub fn open_with(dir: &Path, secrets: SecretStore) -> Result<Self, StoreError> {
        let conn = tether_sqlite::open(dir, DATABASE_FILE).map_err(|error| match error {
            tether_sqlite::OpenError::Io { path, source } => StoreError::DataDir { path, source },
            tether_sqlite::OpenError::Sqlite { path, source } => {
                StoreError::Database { path, source }
            }
            other => StoreError::Unsafe(other),
        })?;
        let mut store = Self {
            conn,
            path: dir.join(DATABASE_FILE),
            secrets,
        };
        store.migrate()?;
        store.move_plain_values()?;
        store.sweep_pending()?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The secret store values live in (for its one-time notice, and `tether secrets`).
    pub fn secret_store(&self) -> &SecretStore {
        &self.secrets
    }

    fn db_error(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        database_error(&self.path)
    }
}

/// The JSON texts of an installation's rows.
struct RowTexts<'a> {
    template: &'a str,
    inputs: &'a str,
    source: Option<&'a str>,
}

/// A value to store: variable name, value, whether it is a secret applied verbatim.
type Value<'a> = (&'a str, SecretValue, bool);

/// A short, value-free name for a serde_json error's class.
trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "I/O error",
            serde_json::error::Category::Syntax => "invalid JSON",
            serde_json::error::Category::Data => "unexpected shape",
            serde_json::error::Category::Eof => "truncated JSON",
        }
    }
}
