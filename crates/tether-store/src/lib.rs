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

mod credentials;

use std::path::{Path, PathBuf};

pub use credentials::{Registry, RegistryKey};
use indexmap::IndexMap;
use rusqlite::{Connection, OptionalExtension, params};
mod test_hooks;

use test_hooks::pause_point;
use tether_config::{
    Installation, Origin, SecretValue, Secrets, ServerTemplate, TemplatableServer, VariableValue,
};
pub use tether_secrets::{Location, Preference, SecretStore, SecretStoreError};
use uuid::Uuid;

/// Environment variable naming tether's data directory (default: the platform data dir +
/// `tether`, e.g. `~/.local/share/tether`).
pub const TETHER_HOME: &str = tether_env::EnvVars::TETHER_HOME;

/// The database file's name inside the data directory.
pub const DATABASE_FILE: &str = "tether.db";

/// Versioned migrations; `PRAGMA user_version` records how many have run.
const MIGRATIONS: &[&str] = &[
    // 1: templatable servers, installations, variable values.
    "CREATE TABLE templatable_servers (
         id            TEXT PRIMARY KEY NOT NULL,
         name          TEXT NOT NULL,
         template_json TEXT NOT NULL,
         created_at    INTEGER NOT NULL
     );
     CREATE TABLE installations (
         uid        TEXT PRIMARY KEY NOT NULL,
         server_id  TEXT NOT NULL REFERENCES templatable_servers(id) ON DELETE CASCADE,
         created_at INTEGER NOT NULL
     );
     CREATE TABLE variable_values (
         installation_uid TEXT NOT NULL REFERENCES installations(uid) ON DELETE CASCADE,
         position         INTEGER NOT NULL,
         name             TEXT NOT NULL,
         value            TEXT NOT NULL,
         PRIMARY KEY (installation_uid, name)
     );",
    // 2: values leave SQLite. Names and locations of stored values; values being written (or
    // deleted) whose installation is not (or no longer) committed; where an installation came
    // from. `variable_values` is emptied and dropped on open, once its values are moved.
    "CREATE TABLE stored_secrets (
         installation_uid TEXT NOT NULL REFERENCES installations(uid) ON DELETE CASCADE,
         position         INTEGER NOT NULL,
         name             TEXT NOT NULL,
         location         TEXT NOT NULL,
         literal          INTEGER NOT NULL DEFAULT 0,
         PRIMARY KEY (installation_uid, name)
     );
     CREATE TABLE pending_secrets (
         installation_uid TEXT NOT NULL,
         name             TEXT NOT NULL,
         location         TEXT NOT NULL,
         pid              INTEGER NOT NULL,
         created_at       INTEGER NOT NULL,
         PRIMARY KEY (installation_uid, name, location)
     );
     ALTER TABLE installations ADD COLUMN source_json TEXT;
     ALTER TABLE installations ADD COLUMN inputs_json TEXT;",
    // 3: credentials that belong to no installation — a server's OAuth tokens, a registry's API
    // key: which server or registry each is for and where its value lives (never the value).
    "CREATE TABLE credentials (
         key        TEXT NOT NULL,
         name       TEXT NOT NULL,
         server     TEXT NOT NULL,
         location   TEXT NOT NULL,
         created_at INTEGER NOT NULL,
         PRIMARY KEY (key, name)
     );",
];

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

    fn migrate(&mut self) -> Result<(), StoreError> {
        let known = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX);
        let db_error = database_error(&self.path);
        // An immediate transaction: two processes opening a new store at once migrate once.
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(db_error)?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .map_err(db_error)?;
        if version > known {
            return Err(StoreError::TooNew {
                path: self.path.clone(),
                found: version,
                known,
            });
        }
        for (index, migration) in MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(version).unwrap_or(0))
        {
            tx.execute_batch(migration).map_err(db_error)?;
            tx.pragma_update(None, "user_version", index + 1)
                .map_err(db_error)?;
            tracing::debug!(version = index + 1, "migrated the local store");
        }
        tx.commit().map_err(db_error)
    }

    /// Moves the values an older tether stored in `variable_values` into the secret store,
    /// then deletes them (zeroed by `secure_delete`), drops the table and truncates the WAL.
    /// A crash in between leaves the rows; the next open moves them again (the secret store
    /// overwrites the same entries).
    fn move_plain_values(&mut self) -> Result<(), StoreError> {
        let db_error = database_error(&self.path);
        let exists: bool = self
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'variable_values'",
                [],
                |row| row.get::<_, i64>(0),
            )
            .map_err(db_error)?
            > 0;
        if !exists {
            return Ok(());
        }
        let rows: Vec<(String, i64, String, SecretValue)> = {
            let mut statement = self
                .conn
                .prepare("SELECT installation_uid, position, name, value FROM variable_values ORDER BY installation_uid, position")
                .map_err(db_error)?;
            let rows = statement
                .query_map([], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, String>(2)?,
                        SecretValue::new(row.get::<_, String>(3)?),
                    ))
                })
                .map_err(db_error)?;
            rows.collect::<Result<_, _>>().map_err(db_error)?
        };
        let mut moved = Vec::new();
        for (uid_text, position, name, value) in &rows {
            if value.expose() == placeholder(name) {
                continue;
            }
            let uid = Uuid::parse_str(uid_text).map_err(|_| StoreError::Corrupt {
                uid: Uuid::nil(),
                reason: "a stored UUID does not parse".to_owned(),
            })?;
            let location = self.secrets.set(uid, name, value)?;
            moved.push((uid_text, *position, name, location));
        }
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(db_error)?;
        for (uid_text, position, name, location) in &moved {
            tx.execute(
                "INSERT OR REPLACE INTO stored_secrets (installation_uid, position, name, location, literal) VALUES (?1, ?2, ?3, ?4, 0)",
                params![uid_text, position, name, location.as_str()],
            )
            .map_err(db_error)?;
        }
        tx.execute("DELETE FROM variable_values", [])
            .map_err(db_error)?;
        tx.execute("DROP TABLE variable_values", [])
            .map_err(db_error)?;
        tx.commit().map_err(db_error)?;
        tether_sqlite::checkpoint_truncate(&self.conn).map_err(db_error)?;
        if !moved.is_empty() {
            tracing::info!(
                count = moved.len(),
                "moved values stored by an older tether out of the local store into the secret store"
            );
        }
        Ok(())
    }

    /// Deletes the values of pending rows whose writer is gone and whose installation is not
    /// committed (a killed `add`/`install`), and the rows; a committed installation's pending
    /// rows (a killed `remove` or `move`) are handled the same way only for values no stored
    /// row points at.
    fn sweep_pending(&mut self) -> Result<(), StoreError> {
        let db_error = database_error(&self.path);
        let rows: Vec<(String, String, String, i64)> = {
            let mut statement = self
                .conn
                .prepare(
                    "SELECT p.installation_uid, p.name, p.location, p.pid FROM pending_secrets p
                      WHERE NOT EXISTS (SELECT 1 FROM stored_secrets s
                                         WHERE s.installation_uid = p.installation_uid
                                           AND s.name = p.name AND s.location = p.location)",
                )
                .map_err(db_error)?;
            let rows = statement
                .query_map([], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
                })
                .map_err(db_error)?;
            rows.collect::<Result<_, _>>().map_err(db_error)?
        };
        for (uid_text, name, location_text, pid) in rows {
            if alive(pid) {
                continue;
            }
            let (Ok(uid), Ok(location)) = (
                Uuid::parse_str(&uid_text),
                location_text.parse::<Location>(),
            ) else {
                continue;
            };
            // Best effort: a credential store that is unreachable now must not stop every
            // command; the row stays and a later open tries again.
            if let Err(error) = self.secrets.delete(location, uid, &name) {
                tracing::debug!(%uid, %name, %error, "cannot sweep a pending value yet");
                continue;
            }
            self.conn
                .execute(
                    "DELETE FROM pending_secrets WHERE installation_uid = ?1 AND name = ?2 AND location = ?3",
                    params![uid_text, name, location_text],
                )
                .map_err(db_error)?;
            tracing::debug!(%uid, %name, "swept a value a killed tether left pending");
        }
        // Pending rows that a stored row points at were committed: nothing to sweep.
        self.conn
            .execute(
                "DELETE FROM pending_secrets WHERE EXISTS (SELECT 1 FROM stored_secrets s
                     WHERE s.installation_uid = pending_secrets.installation_uid
                       AND s.name = pending_secrets.name AND s.location = pending_secrets.location)",
                [],
            )
            .map_err(db_error)?;
        Ok(())
    }

    /// Records `names` in `location` for `uid` as pending (committed before any value is
    /// written, so a crash leaves something to sweep).
    fn mark_pending(
        &mut self,
        uid: Uuid,
        names: &[&str],
        location: Location,
    ) -> Result<(), StoreError> {
        if names.is_empty() {
            return Ok(());
        }
        let db_error = database_error(&self.path);
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(db_error)?;
        for name in names {
            tx.execute(
                "INSERT OR REPLACE INTO pending_secrets (installation_uid, name, location, pid, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![uid.to_string(), name, location.as_str(), i64::from(std::process::id()), now()],
            )
            .map_err(db_error)?;
        }
        tx.commit().map_err(db_error)
    }

    /// Stores `installation` (its template and values) under a new UUID and returns it.
    /// On any failure nothing is stored.
    pub fn install(&mut self, installation: &Installation) -> Result<Uuid, StoreError> {
        let uid = Uuid::new_v4();
        self.install_as(uid, installation, &Secrets::new(), None)?;
        Ok(uid)
    }

    /// Stores `installation` with `secrets` (those naming one of its variables; applied
    /// verbatim at each use, a run's `--secret` overriding) and where it came from, under a
    /// new UUID.
    pub fn install_with(
        &mut self,
        installation: &Installation,
        secrets: &Secrets,
        source: Option<&InstallSource>,
    ) -> Result<Uuid, StoreError> {
        let uid = Uuid::new_v4();
        self.install_as(uid, installation, secrets, source)?;
        Ok(uid)
    }

    /// Stores `installation` under `uid` (which must be new), with where it came from. The
    /// values go to the secret store first (marked pending), then one transaction makes the
    /// installation and its value names visible: a crash at any point leaves either nothing
    /// or everything visible. On failure the values written are deleted again.
    pub fn install_as(
        &mut self,
        uid: Uuid,
        installation: &Installation,
        secrets: &Secrets,
        source: Option<&InstallSource>,
    ) -> Result<(), StoreError> {
        let template_json =
            serde_json::to_string(&installation.server).map_err(|e| StoreError::Corrupt {
                uid,
                reason: format!("template does not serialize: {}", e.classify_name()),
            })?;
        let source_json =
            source
                .map(serde_json::to_string)
                .transpose()
                .map_err(|e| StoreError::Corrupt {
                    uid,
                    reason: format!("source does not serialize: {}", e.classify_name()),
                })?;
        // Values worth storing: the secrets for its variables, and the values written in the
        // config — not the `{{NAME}}` a variable without a value has.
        let inputs = input_names(installation);
        let mut values: Vec<Value<'_>> = Vec::new();
        for name in installation.server.variable_names() {
            if let Some(secret) = secrets.get(name) {
                values.push((name, secret, true));
            } else if let Some(value) = installation.values.get(name)
                && value.value.expose() != placeholder(name)
            {
                values.push((name, value.value.clone(), false));
            }
        }
        for name in &inputs {
            if !installation.server.has_variable(name)
                && let Some(secret) = secrets.get(name)
            {
                values.push((name, secret, true));
            }
        }
        let inputs_json = serde_json::to_string(&inputs).map_err(|e| StoreError::Corrupt {
            uid,
            reason: format!("inputs do not serialize: {}", e.classify_name()),
        })?;
        let location = if values.is_empty() {
            None
        } else {
            // Writing values under a uid that is taken would replace another installation's.
            if self.contains(uid)? {
                return Err(StoreError::AlreadyInstalled(uid));
            }
            Some(self.secrets.location()?)
        };
        if let Some(location) = location {
            let names: Vec<&str> = values.iter().map(|(name, _, _)| *name).collect();
            self.mark_pending(uid, &names, location)?;
            pause_point("pending");
        }
        let written = self.write_values(uid, &values, location);
        if written.is_ok() {
            pause_point("values");
        }
        let committed = written.and_then(|()| {
            let texts = RowTexts {
                template: &template_json,
                inputs: &inputs_json,
                source: source_json.as_deref(),
            };
            self.commit_install(uid, installation, &texts, &values, location)
        });
        if let Err(error) = committed {
            if let Some(location) = location {
                self.undo_values(uid, &values, location);
            }
            return Err(error);
        }
        pause_point("committed");
        tracing::debug!(%uid, name = %installation.server.name, "installed a local MCP server");
        Ok(())
    }

    fn write_values(
        &self,
        uid: Uuid,
        values: &[Value<'_>],
        location: Option<Location>,
    ) -> Result<(), StoreError> {
        let Some(location) = location else {
            return Ok(());
        };
        for (name, value, _) in values {
            self.secrets.set_in(location, uid, name, value)?;
        }
        Ok(())
    }

    /// Best effort after a failed install: deletes what was written and the pending rows.
    fn undo_values(&mut self, uid: Uuid, values: &[Value<'_>], location: Location) {
        for (name, _, _) in values {
            if let Err(error) = self.secrets.delete(location, uid, name) {
                tracing::warn!(%uid, %name, %error, "could not delete a value of a failed install; the next run sweeps it");
                return;
            }
        }
        let _ = self.conn.execute(
            "DELETE FROM pending_secrets WHERE installation_uid = ?1",
            params![uid.to_string()],
        );
    }

    fn commit_install(
        &mut self,
        uid: Uuid,
        installation: &Installation,
        texts: &RowTexts<'_>,
        values: &[Value<'_>],
        location: Option<Location>,
    ) -> Result<(), StoreError> {
        let db_error = database_error(&self.path);
        let created_at = now();
        let server_id = Uuid::new_v4().to_string();
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(db_error)?;
        tx.execute(
            "INSERT INTO templatable_servers (id, name, template_json, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![server_id, installation.server.name, texts.template, created_at],
        )
        .map_err(db_error)?;
        tx.execute(
            "INSERT INTO installations (uid, server_id, created_at, source_json, inputs_json) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![uid.to_string(), server_id, created_at, texts.source, texts.inputs],
        )
        .map_err(db_error)?;
        if let Some(location) = location {
            let mut insert = tx
                .prepare("INSERT INTO stored_secrets (installation_uid, position, name, location, literal) VALUES (?1, ?2, ?3, ?4, ?5)")
                .map_err(db_error)?;
            for (position, (name, _, literal)) in values.iter().enumerate() {
                let position = i64::try_from(position).unwrap_or(i64::MAX);
                insert
                    .execute(params![
                        uid.to_string(),
                        position,
                        name,
                        location.as_str(),
                        literal
                    ])
                    .map_err(db_error)?;
            }
        }
        tx.execute(
            "DELETE FROM pending_secrets WHERE installation_uid = ?1",
            params![uid.to_string()],
        )
        .map_err(db_error)?;
        tx.commit().map_err(db_error)
    }

    /// Whether `uid` is installed locally.
    pub fn contains(&self, uid: Uuid) -> Result<bool, StoreError> {
        self.conn
            .query_row(
                "SELECT 1 FROM installations WHERE uid = ?1",
                params![uid.to_string()],
                |_| Ok(()),
            )
            .optional()
            .map(|found| found.is_some())
            .map_err(self.db_error())
    }

    fn template(&self, uid: Uuid) -> Result<Option<TemplatableServer>, StoreError> {
        let row: Option<String> = self
            .conn
            .query_row(
                "SELECT s.template_json FROM installations i
                   JOIN templatable_servers s ON s.id = i.server_id
                  WHERE i.uid = ?1",
                params![uid.to_string()],
                |row| row.get(0),
            )
            .optional()
            .map_err(self.db_error())?;
        row.map(|template_json| {
            serde_json::from_str(&template_json).map_err(|e| StoreError::Corrupt {
                uid,
                reason: format!("template: {}", e.classify_name()),
            })
        })
        .transpose()
    }

    /// Whether `uid` was added from a registry entry (it has a source).
    fn has_registry_source(&self, uid: Uuid) -> Result<bool, StoreError> {
        self.conn
            .query_row(
                "SELECT source_json IS NOT NULL FROM installations WHERE uid = ?1",
                params![uid.to_string()],
                |row| row.get::<_, bool>(0),
            )
            .optional()
            .map(|found| found.unwrap_or(false))
            .map_err(self.db_error())
    }

    /// The inputs recorded for `uid` at install time (none recorded: its variables).
    fn inputs(&self, uid: Uuid, server: &TemplatableServer) -> Result<Vec<String>, StoreError> {
        let text: Option<String> = self
            .conn
            .query_row(
                "SELECT inputs_json FROM installations WHERE uid = ?1",
                params![uid.to_string()],
                |row| row.get(0),
            )
            .optional()
            .map_err(self.db_error())?
            .flatten();
        match text {
            Some(text) => serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                uid,
                reason: format!("inputs: {}", e.classify_name()),
            }),
            None => Ok(server.variable_names().map(str::to_owned).collect()),
        }
    }

    /// The names of `uid`'s stored values and where each lives, in install order.
    pub fn stored(&self, uid: Uuid) -> Result<Vec<StoredSecret>, StoreError> {
        let mut statement = self
            .conn
            .prepare("SELECT name, location, literal FROM stored_secrets WHERE installation_uid = ?1 ORDER BY position, name")
            .map_err(self.db_error())?;
        let rows = statement
            .query_map(params![uid.to_string()], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, bool>(2)?,
                ))
            })
            .map_err(self.db_error())?;
        let mut out = Vec::new();
        for row in rows {
            let (name, location, literal) = row.map_err(self.db_error())?;
            out.push(StoredSecret {
                name,
                location: location.parse()?,
                literal,
            });
        }
        Ok(out)
    }

    /// The installation `uid`, if installed, with its stored values read from the secret
    /// store into memory (a variable without one keeps its `{{NAME}}` placeholder, for the
    /// run's secrets). A hand-written installation (`tether install`) has [`Origin::User`]:
    /// `${VAR}` expands at render time. One added from a registry entry (it has a source) has
    /// [`Origin::Registry`]: its values are literal, nothing is read from the environment.
    /// Run secrets replace stored values for the run in both.
    pub fn get(&self, uid: Uuid) -> Result<Option<Installation>, StoreError> {
        let Some(server) = self.template(uid)? else {
            return Ok(None);
        };
        let mut stored = IndexMap::new();
        for StoredSecret {
            name,
            location,
            literal,
        } in self.stored(uid)?
        {
            if literal {
                // Applied as a secret at use ([`Store::secrets_for`]), not as written text.
                continue;
            }
            match self.secrets.get(location, uid, &name)? {
                Some(value) => {
                    stored.insert(name, value);
                }
                None => tracing::warn!(
                    %uid,
                    %name,
                    %location,
                    "a stored value is missing from the secret store; the run must pass it with --secret (or set it again with `tether secrets set`)"
                ),
            }
        }
        let mut values = IndexMap::new();
        for name in server.variable_names() {
            let value = stored
                .shift_remove(name)
                .unwrap_or_else(|| SecretValue::new(placeholder(name)));
            values.insert(name.to_owned(), VariableValue::new(value));
        }
        let origin = if self.has_registry_source(uid)? {
            Origin::Registry
        } else {
            Origin::User
        };
        Ok(Some(Installation {
            server,
            values,
            origin,
        }))
    }

    /// The secrets stored for `uid` (read into memory), applied verbatim to it at use.
    pub fn secrets_for(&self, uid: Uuid) -> Result<Secrets, StoreError> {
        let mut secrets = Secrets::new();
        for stored in self.stored(uid)?.into_iter().filter(|s| s.literal) {
            match self.secrets.get(stored.location, uid, &stored.name)? {
                Some(value) => secrets.insert(stored.name, value),
                None => tracing::warn!(
                    %uid,
                    name = %stored.name,
                    location = %stored.location,
                    "a stored secret is missing from the secret store; the run must pass it with --secret (or set it again with `tether secrets set`)"
                ),
            }
        }
        Ok(secrets)
    }

    /// Every installation: UUID, name, variable names, stored value names, transport and
    /// source, oldest first. Never values.
    pub fn list(&self) -> Result<Vec<InstalledSummary>, StoreError> {
        let mut statement = self
            .conn
            .prepare(
                "SELECT i.uid, s.name, s.template_json, i.created_at, i.source_json, i.inputs_json FROM installations i
                   JOIN templatable_servers s ON s.id = i.server_id
                  ORDER BY i.created_at, s.name, i.uid",
            )
            .map_err(self.db_error())?;
        let rows = statement
            .query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, i64>(3)?,
                    row.get::<_, Option<String>>(4)?,
                    row.get::<_, Option<String>>(5)?,
                ))
            })
            .map_err(self.db_error())?;
        let mut out = Vec::new();
        for row in rows {
            let (uid_text, name, template_json, created_at, source_json, inputs_json) =
                row.map_err(self.db_error())?;
            let uid = Uuid::parse_str(&uid_text).map_err(|_| StoreError::Corrupt {
                uid: Uuid::nil(),
                reason: "a stored UUID does not parse".to_owned(),
            })?;
            let server: TemplatableServer =
                serde_json::from_str(&template_json).map_err(|e| StoreError::Corrupt {
                    uid,
                    reason: format!("template: {}", e.classify_name()),
                })?;
            let source = source_json
                .map(|text| serde_json::from_str::<InstallSource>(&text))
                .transpose()
                .map_err(|e| StoreError::Corrupt {
                    uid,
                    reason: format!("source: {}", e.classify_name()),
                })?;
            let stored = self.stored(uid)?;
            let inputs = match inputs_json {
                Some(text) => {
                    serde_json::from_str::<Vec<String>>(&text).map_err(|e| StoreError::Corrupt {
                        uid,
                        reason: format!("inputs: {}", e.classify_name()),
                    })?
                }
                // Installed before inputs were recorded: the variables without a written value.
                None => server
                    .variable_names()
                    .filter(|n| !stored.iter().any(|s| s.name == *n && !s.literal))
                    .map(str::to_owned)
                    .collect(),
            };
            out.push(InstalledSummary {
                uid,
                name,
                variable_names: server.variable_names().map(str::to_owned).collect(),
                inputs,
                stored,
                transport: transport(&server),
                source,
                created_at,
            });
        }
        Ok(out)
    }

    /// Stores `value` for the variable `name` of `uid` where new values go, replacing a
    /// stored one (moved when it lived elsewhere). Returns where it went.
    pub fn set_secret(
        &mut self,
        uid: Uuid,
        name: &str,
        value: &SecretValue,
    ) -> Result<Location, StoreError> {
        let location = self.secrets.location()?;
        self.put_secret(uid, name, value, location, true)?;
        Ok(location)
    }

    /// Stores `value` for `name` of `uid` in `location`: pending row, value, then one
    /// transaction that records it; the value in another location, if any, is deleted after.
    fn put_secret(
        &mut self,
        uid: Uuid,
        name: &str,
        value: &SecretValue,
        location: Location,
        literal: bool,
    ) -> Result<(), StoreError> {
        let server = self.template(uid)?.ok_or(StoreError::NotInstalled(uid))?;
        let inputs = self.inputs(uid, &server)?;
        if !server.has_variable(name) && !inputs.iter().any(|i| i == name) {
            let mut known: Vec<&str> = server.variable_names().collect();
            known.extend(
                inputs
                    .iter()
                    .map(String::as_str)
                    .filter(|i| !server.has_variable(i)),
            );
            return Err(StoreError::UnknownVariable {
                uid,
                name: name.to_owned(),
                known: known.join(", "),
            });
        }
        let previous = self.stored(uid)?.into_iter().find(|s| s.name == name);
        self.mark_pending(uid, &[name], location)?;
        self.secrets.set_in(location, uid, name, value)?;
        let db_error = database_error(&self.path);
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(db_error)?;
        let position = server
            .variable_names()
            .chain(inputs.iter().map(String::as_str))
            .position(|n| n == name)
            .and_then(|p| i64::try_from(p).ok())
            .unwrap_or(i64::MAX);
        tx.execute(
            "INSERT OR REPLACE INTO stored_secrets (installation_uid, position, name, location, literal) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![uid.to_string(), position, name, location.as_str(), literal],
        )
        .map_err(db_error)?;
        tx.execute(
            "DELETE FROM pending_secrets WHERE installation_uid = ?1 AND name = ?2 AND location = ?3",
            params![uid.to_string(), name, location.as_str()],
        )
        .map_err(db_error)?;
        if let Some(previous) = previous.filter(|p| p.location != location) {
            // The old copy is deleted after the commit; pending until then.
            tx.execute(
                "INSERT OR REPLACE INTO pending_secrets (installation_uid, name, location, pid, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![uid.to_string(), name, previous.location.as_str(), i64::from(std::process::id()), now()],
            )
            .map_err(db_error)?;
            tx.commit().map_err(db_error)?;
            self.secrets.delete(previous.location, uid, name)?;
            self.conn
                .execute(
                    "DELETE FROM pending_secrets WHERE installation_uid = ?1 AND name = ?2 AND location = ?3",
                    params![uid.to_string(), name, previous.location.as_str()],
                )
                .map_err(db_error)?;
            return Ok(());
        }
        tx.commit().map_err(db_error)
    }

    /// Moves every stored value (OAuth token entries too) that lives elsewhere into `to`;
    /// returns how many moved.
    pub fn move_secrets(&mut self, to: Location) -> Result<usize, StoreError> {
        let mut moved = 0;
        for summary in self.list()? {
            for stored in summary.stored.iter().filter(|s| s.location != to) {
                let Some(value) = self
                    .secrets
                    .get(stored.location, summary.uid, &stored.name)?
                else {
                    continue;
                };
                self.put_secret(summary.uid, &stored.name, &value, to, stored.literal)?;
                moved += 1;
            }
        }
        for entry in self.credentials()? {
            if entry.location == to {
                continue;
            }
            let Some(value) = self.secrets.get(entry.location, entry.key, &entry.name)? else {
                continue;
            };
            self.secrets.set_in(to, entry.key, &entry.name, &value)?;
            self.conn
                .execute(
                    "UPDATE credentials SET location = ?1 WHERE key = ?2 AND name = ?3",
                    params![to.as_str(), entry.key.to_string(), entry.name],
                )
                .map_err(self.db_error())?;
            self.secrets
                .delete(entry.location, entry.key, &entry.name)?;
            moved += 1;
        }
        Ok(moved)
    }

    /// Stores the credential `value` (`key`, `name`) of `server` where new values go,
    /// replacing one stored elsewhere, and records where it lives. Returns that location.
    pub fn set_credential(
        &self,
        key: Uuid,
        name: &str,
        server: &str,
        value: &SecretValue,
    ) -> Result<Location, StoreError> {
        let previous = self.credential_location(key, name)?;
        let location = self.secrets.set(key, name, value)?;
        self.conn
            .execute(
                "INSERT OR REPLACE INTO credentials (key, name, server, location, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![key.to_string(), name, server, location.as_str(), now()],
            )
            .map_err(self.db_error())?;
        if let Some(previous) = previous.filter(|previous| *previous != location) {
            self.secrets.delete(previous, key, name)?;
        }
        Ok(location)
    }

    /// The credential (`key`, `name`): from where it is recorded, else (an entry written
    /// before entries were recorded) from where new values go.
    pub fn get_credential(&self, key: Uuid, name: &str) -> Result<Option<SecretValue>, StoreError> {
        let location = match self.credential_location(key, name)? {
            Some(location) => location,
            None => self.unrecorded_location()?,
        };
        Ok(self.secrets.get(location, key, name)?)
    }

    /// Deletes the credential (`key`, `name`) and its record; whether there was one.
    pub fn remove_credential(&self, key: Uuid, name: &str) -> Result<bool, StoreError> {
        let location = match self.credential_location(key, name)? {
            Some(location) => location,
            None => self.unrecorded_location()?,
        };
        let removed = self.secrets.delete(location, key, name)?;
        let recorded = self
            .conn
            .execute(
                "DELETE FROM credentials WHERE key = ?1 AND name = ?2",
                params![key.to_string(), name],
            )
            .map_err(self.db_error())?;
        Ok(removed || recorded > 0)
    }

    /// Every recorded credential, by server URL then name.
    pub fn credentials(&self) -> Result<Vec<CredentialEntry>, StoreError> {
        let mut statement = self
            .conn
            .prepare("SELECT key, name, server, location FROM credentials ORDER BY server, name")
            .map_err(self.db_error())?;
        let rows = statement
            .query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, String>(3)?,
                ))
            })
            .map_err(self.db_error())?;
        let mut entries = Vec::new();
        for row in rows {
            let (key, name, server, location) = row.map_err(self.db_error())?;
            let key = Uuid::parse_str(&key).map_err(|_| StoreError::Corrupt {
                uid: Uuid::nil(),
                reason: "a credential's key is not a UUID".to_owned(),
            })?;
            entries.push(CredentialEntry {
                key,
                name,
                server,
                location: location.parse()?,
            });
        }
        Ok(entries)
    }

    /// Where the credential (`key`, `name`) is recorded to live, if it is.
    pub fn credential_location(
        &self,
        key: Uuid,
        name: &str,
    ) -> Result<Option<Location>, StoreError> {
        let text: Option<String> = self
            .conn
            .query_row(
                "SELECT location FROM credentials WHERE key = ?1 AND name = ?2",
                params![key.to_string(), name],
                |row| row.get(0),
            )
            .optional()
            .map_err(self.db_error())?;
        Ok(text.map(|text| text.parse()).transpose()?)
    }

    /// [`Store::set_credential`] for the OAuth tokens of `server` under `key`.
    pub fn set_oauth(
        &self,
        key: Uuid,
        server: &str,
        value: &SecretValue,
    ) -> Result<Location, StoreError> {
        self.set_credential(key, OAUTH_NAME, server, value)
    }

    /// [`Store::get_credential`] for OAuth tokens.
    pub fn get_oauth(&self, key: Uuid) -> Result<Option<SecretValue>, StoreError> {
        self.get_credential(key, OAUTH_NAME)
    }

    /// [`Store::remove_credential`] for OAuth tokens.
    pub fn remove_oauth(&self, key: Uuid) -> Result<bool, StoreError> {
        self.remove_credential(key, OAUTH_NAME)
    }

    /// Every recorded OAuth token entry, by server URL.
    pub fn oauth_entries(&self) -> Result<Vec<CredentialEntry>, StoreError> {
        let mut entries = self.credentials()?;
        entries.retain(|entry| entry.name == OAUTH_NAME);
        Ok(entries)
    }

    /// Where an unrecorded entry is looked for: the file when the settings say so (no probe),
    /// else where new values go.
    fn unrecorded_location(&self) -> Result<Location, StoreError> {
        Ok(match self.secrets.preference() {
            Preference::File => Location::File,
            _ => self.secrets.location()?,
        })
    }

    /// Deletes the stored value of `name` of `uid` (the variable then comes from each run's
    /// secrets). Returns whether there was one.
    pub fn remove_secret(&mut self, uid: Uuid, name: &str) -> Result<bool, StoreError> {
        if !self.contains(uid)? {
            return Err(StoreError::NotInstalled(uid));
        }
        let Some(stored) = self.stored(uid)?.into_iter().find(|s| s.name == name) else {
            return Ok(false);
        };
        self.forget(uid, &[stored], Some(name))?;
        Ok(true)
    }

    /// Turns `stored` into pending rows and deletes their stored rows (and, with `name`
    /// `None`, the installation) in one transaction, then deletes the values and the pending
    /// rows: a crash after the commit leaves pending rows the next open sweeps.
    fn forget(
        &mut self,
        uid: Uuid,
        stored: &[StoredSecret],
        name: Option<&str>,
    ) -> Result<bool, StoreError> {
        let db_error = database_error(&self.path);
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(db_error)?;
        for secret in stored {
            tx.execute(
                "INSERT OR REPLACE INTO pending_secrets (installation_uid, name, location, pid, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![uid.to_string(), secret.name, secret.location.as_str(), i64::from(std::process::id()), now()],
            )
            .map_err(db_error)?;
        }
        let existed = match name {
            Some(name) => {
                tx.execute(
                    "DELETE FROM stored_secrets WHERE installation_uid = ?1 AND name = ?2",
                    params![uid.to_string(), name],
                )
                .map_err(db_error)?;
                true
            }
            None => {
                let server_id: Option<String> = tx
                    .query_row(
                        "SELECT server_id FROM installations WHERE uid = ?1",
                        params![uid.to_string()],
                        |row| row.get(0),
                    )
                    .optional()
                    .map_err(db_error)?;
                match server_id {
                    None => false,
                    Some(server_id) => {
                        tx.execute(
                            "DELETE FROM stored_secrets WHERE installation_uid = ?1",
                            params![uid.to_string()],
                        )
                        .map_err(db_error)?;
                        tx.execute(
                            "DELETE FROM installations WHERE uid = ?1",
                            params![uid.to_string()],
                        )
                        .map_err(db_error)?;
                        tx.execute(
                            "DELETE FROM templatable_servers WHERE id = ?1 AND NOT EXISTS
                                 (SELECT 1 FROM installations WHERE server_id = ?1)",
                            params![server_id],
                        )
                        .map_err(db_error)?;
                        true
                    }
                }
            }
        };
        if !existed {
            return Ok(false);
        }
        tx.commit().map_err(db_error)?;
        for secret in stored {
            // Committed: the value is no longer visible. One that cannot be deleted now (the
            // credential store is unreachable) stays pending, and a later open sweeps it.
            if let Err(error) = self.secrets.delete(secret.location, uid, &secret.name) {
                tracing::warn!(
                    %uid,
                    name = %secret.name,
                    %error,
                    "could not delete a stored value now; a later tether run deletes it"
                );
                continue;
            }
            self.conn
                .execute(
                    "DELETE FROM pending_secrets WHERE installation_uid = ?1 AND name = ?2 AND location = ?3",
                    params![uid.to_string(), secret.name, secret.location.as_str()],
                )
                .map_err(db_error)?;
        }
        // secure_delete zeroed the freed content in the pages written to the WAL; copying them
        // into the database and truncating the WAL leaves no copy of the old pages anywhere.
        tether_sqlite::checkpoint_truncate(&self.conn).map_err(db_error)?;
        Ok(true)
    }

    /// Removes `uid` with its template and its values (from the secret store too). Returns
    /// whether it existed.
    pub fn remove(&mut self, uid: Uuid) -> Result<bool, StoreError> {
        let stored = self.stored(uid)?;
        self.forget(uid, &stored, None)
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
