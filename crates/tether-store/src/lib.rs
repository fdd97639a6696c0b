//! tether's local store: templatable MCP installations kept in SQLite under the data directory.
//!
//! A local installation is a [`TemplatableServer`] (the template, which never holds a value)
//! plus its variable values. The store hands them out by UUID; the driver resolves a UUID found
//! here locally, with no network call.
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
//! Values given at install time are stored as given, in the database file (not encrypted:
//! anyone who can read the file as the user can read them). [`Store::remove`] deletes them
//! with `secure_delete` on and truncates the WAL, so no byte of a removed value stays in
//! either file.

#![deny(missing_docs)]

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use rusqlite::{Connection, OptionalExtension, params};
use tether_config::{Installation, Origin, TemplatableServer, VariableValue};
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
];

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
    /// Unix seconds when it was installed.
    pub created_at: i64,
}

/// The local store. Cheap to open; one per process is enough.
pub struct Store {
    conn: Connection,
    path: PathBuf,
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

impl Store {
    /// Opens (creating if needed) the store in `dir` through [`tether_sqlite::open`]: the
    /// directory 0700, the file 0600, refused when another user can write either, WAL
    /// journaling, a busy timeout for concurrent processes, `secure_delete`, and pending
    /// migrations.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
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
        };
        store.migrate()?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
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

    /// Stores `installation` (its template and values) under a new UUID and returns it.
    /// One transaction: on any failure nothing is stored.
    pub fn install(&mut self, installation: &Installation) -> Result<Uuid, StoreError> {
        let uid = Uuid::new_v4();
        self.install_as(uid, installation)?;
        Ok(uid)
    }

    /// Stores `installation` under `uid` (which must be new).
    pub fn install_as(&mut self, uid: Uuid, installation: &Installation) -> Result<(), StoreError> {
        let template_json =
            serde_json::to_string(&installation.server).map_err(|e| StoreError::Corrupt {
                uid,
                reason: format!("template does not serialize: {}", e.classify_name()),
            })?;
        let db_error = database_error(&self.path);
        let created_at = now();
        let server_id = Uuid::new_v4().to_string();
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(db_error)?;
        tx.execute(
            "INSERT INTO templatable_servers (id, name, template_json, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![server_id, installation.server.name, template_json, created_at],
        )
        .map_err(db_error)?;
        tx.execute(
            "INSERT INTO installations (uid, server_id, created_at) VALUES (?1, ?2, ?3)",
            params![uid.to_string(), server_id, created_at],
        )
        .map_err(db_error)?;
        {
            let mut insert = tx
                .prepare("INSERT INTO variable_values (installation_uid, position, name, value) VALUES (?1, ?2, ?3, ?4)")
                .map_err(db_error)?;
            for (position, (name, value)) in installation.values.iter().enumerate() {
                let position = i64::try_from(position).unwrap_or(i64::MAX);
                insert
                    .execute(params![
                        uid.to_string(),
                        position,
                        name,
                        value.value.expose()
                    ])
                    .map_err(db_error)?;
            }
        }
        tx.commit().map_err(db_error)?;
        tracing::debug!(%uid, name = %installation.server.name, "installed a local MCP server");
        Ok(())
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

    /// The installation `uid`, if installed. Local installations have [`Origin::User`]:
    /// `${VAR}` expands at render time, and run secrets may replace values.
    pub fn get(&self, uid: Uuid) -> Result<Option<Installation>, StoreError> {
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
        let Some(template_json) = row else {
            return Ok(None);
        };
        let server: TemplatableServer =
            serde_json::from_str(&template_json).map_err(|e| StoreError::Corrupt {
                uid,
                reason: format!("template: {}", e.classify_name()),
            })?;
        let mut statement = self
            .conn
            .prepare("SELECT name, value FROM variable_values WHERE installation_uid = ?1 ORDER BY position")
            .map_err(self.db_error())?;
        let mut values = IndexMap::new();
        let rows = statement
            .query_map(params![uid.to_string()], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
            })
            .map_err(self.db_error())?;
        for row in rows {
            let (name, value) = row.map_err(self.db_error())?;
            values.insert(name, VariableValue::new(value));
        }
        Ok(Some(Installation {
            server,
            values,
            origin: Origin::User,
        }))
    }

    /// Every installation: UUID, name and variable names, oldest first. Never values.
    pub fn list(&self) -> Result<Vec<InstalledSummary>, StoreError> {
        let mut statement = self
            .conn
            .prepare(
                "SELECT i.uid, s.name, s.template_json, i.created_at FROM installations i
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
                ))
            })
            .map_err(self.db_error())?;
        let mut out = Vec::new();
        for row in rows {
            let (uid_text, name, template_json, created_at) = row.map_err(self.db_error())?;
            let uid = Uuid::parse_str(&uid_text).map_err(|_| StoreError::Corrupt {
                uid: Uuid::nil(),
                reason: "a stored UUID does not parse".to_owned(),
            })?;
            let server: TemplatableServer =
                serde_json::from_str(&template_json).map_err(|e| StoreError::Corrupt {
                    uid,
                    reason: format!("template: {}", e.classify_name()),
                })?;
            out.push(InstalledSummary {
                uid,
                name,
                variable_names: server.variable_names().map(str::to_owned).collect(),
                created_at,
            });
        }
        Ok(out)
    }

    /// Removes `uid` with its template and values. Returns whether it existed.
    pub fn remove(&mut self, uid: Uuid) -> Result<bool, StoreError> {
        let db_error = database_error(&self.path);
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(db_error)?;
        let server_id: Option<String> = tx
            .query_row(
                "SELECT server_id FROM installations WHERE uid = ?1",
                params![uid.to_string()],
                |row| row.get(0),
            )
            .optional()
            .map_err(db_error)?;
        let Some(server_id) = server_id else {
            return Ok(false);
        };
        tx.execute(
            "DELETE FROM variable_values WHERE installation_uid = ?1",
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
        tx.commit().map_err(db_error)?;
        // secure_delete zeroed the freed content in the pages written to the WAL; copying them
        // into the database and truncating the WAL leaves no copy of the old pages anywhere.
        tether_sqlite::checkpoint_truncate(&self.conn).map_err(db_error)?;
        Ok(true)
    }
}

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
