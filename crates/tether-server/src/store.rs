//! The server's store: managed installations, their sealed values, API keys and proxy tokens,
//! in SQLite under the data directory.
//!
//! `tether-sqlite` opens the file: the directory 0700 and the database 0600, refused when another
//! user can write either; WAL journaling with `synchronous = NORMAL` (a crash may lose the last
//! transactions, never corrupt the file), a busy timeout so the admin CLI and a running server
//! can write at once, `secure_delete`. Migrations are versioned with `PRAGMA user_version`.
//! Every write is one transaction.
//!
//! This module stores bytes: templates and values arrive sealed (see [`crate::crypto`]) and
//! tokens arrive hashed; it never sees a plaintext secret. In clear: uids, names, teams, kinds,
//! the active flag, value *names*, expiry times.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use uuid::Uuid;

use crate::crypto::MasterKey;
use crate::error::{KeyError, StoreError};
use crate::model::{SealedValue, StoredInstallation, TransportKind, ValueKind};

/// The database file's name inside the data directory.
pub const DATABASE_FILE: &str = "tether-server.db";

/// What the key check row seals; opening it proves the key is the one the data was sealed with.
const KEY_CHECK_PLAINTEXT: &[u8] = b"tether-server key check v1";
const KEY_CHECK_AAD: &[u8] = b"meta:key_check";

/// Versioned migrations; `PRAGMA user_version` records how many have run.
const MIGRATIONS: &[&str] = &[
    // 1: installations, their sealed values, API keys, proxy tokens, metadata.
    "CREATE TABLE meta (
         key   TEXT PRIMARY KEY NOT NULL,
         value BLOB NOT NULL
     );
     CREATE TABLE installations (
         uid           TEXT PRIMARY KEY NOT NULL,
         name          TEXT NOT NULL,
         team          TEXT NOT NULL,
         kind          TEXT NOT NULL CHECK (kind IN ('URL', 'COMMAND')),
         template      BLOB NOT NULL,
         active        INTEGER NOT NULL DEFAULT 1,
         created_at    INTEGER NOT NULL
     );
     CREATE INDEX installations_team ON installations(team);
     CREATE TABLE installation_values (
         installation_uid TEXT NOT NULL REFERENCES installations(uid) ON DELETE CASCADE,
         kind             TEXT NOT NULL CHECK (kind IN ('captured', 'secret')),
         position         INTEGER NOT NULL,
         name             TEXT NOT NULL,
         sealed           BLOB NOT NULL,
         PRIMARY KEY (installation_uid, kind, name)
     );
     CREATE TABLE api_keys (
         key_hash   BLOB PRIMARY KEY NOT NULL,
         team       TEXT NOT NULL,
         created_at INTEGER NOT NULL
     );
     CREATE TABLE proxy_tokens (
         token_hash       BLOB PRIMARY KEY NOT NULL,
         installation_uid TEXT NOT NULL REFERENCES installations(uid) ON DELETE CASCADE,
         expires_at_ms    INTEGER NOT NULL,
         created_at_ms    INTEGER NOT NULL
     );
     CREATE INDEX proxy_tokens_expiry ON proxy_tokens(expires_at_ms);",
];

/// What `admin list` shows of an installation: never a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallationSummary {
    /// Its uid.
    pub uid: Uuid,
    /// Its name.
    pub name: String,
    /// URL or COMMAND.
    pub kind: TransportKind,
    /// Its team.
    pub team: String,
    /// Whether clients may use it.
    pub active: bool,
}

/// A proxy token's record, found by the token's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyTokenRecord {
    /// The installation the token was minted for.
    pub uid: Uuid,
    /// When it stops being accepted, Unix milliseconds.
    pub expires_at_ms: i64,
}

/// The server's store. One connection behind a mutex; callers on an async runtime use it from
/// `spawn_blocking`.
pub struct Store {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Store {
    /// Opens (creating if needed) the store in `dir` through [`tether_sqlite::open`], which
    /// refuses a directory or database another user can write or owns.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let conn = tether_sqlite::open(dir, DATABASE_FILE).map_err(|error| match error {
            tether_sqlite::OpenError::Io { path, source } => StoreError::DataDir { path, source },
            tether_sqlite::OpenError::Sqlite { path, source } => {
                StoreError::Database { path, source }
            }
            other => StoreError::Unsafe(other),
        })?;
        let store = Self {
            conn: Mutex::new(conn),
            path: dir.join(DATABASE_FILE),
        };
        store.migrate()?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a half-written transaction: an open
        // transaction rolls back when dropped.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `work` on the connection (reads).
    fn read<T>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let conn = self.lock();
        work(&conn).map_err(|failure| failure.into_error(&self.path))
    }

    /// Runs `work` in one immediate transaction, committed when it succeeds (writes).
    fn write<T>(
        &self,
        work: impl FnOnce(&Transaction<'_>) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut conn = self.lock();
        let run = |conn: &mut Connection| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let value = work(&tx)?;
            tx.commit()?;
            Ok(value)
        };
        run(&mut conn).map_err(|failure: Failure| failure.into_error(&self.path))
    }

    fn migrate(&self) -> Result<(), StoreError> {
        self.write(|tx| {
            let version: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
            let known = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX);
            if version > known {
                return Err(Failure::Store(StoreError::TooNew {
                    path: self.path.clone(),
                    found: version,
                    known,
                }));
            }
            let done = usize::try_from(version).unwrap_or(0);
            for (index, migration) in MIGRATIONS.iter().enumerate().skip(done) {
                tx.execute_batch(migration)?;
                tx.pragma_update(None, "user_version", index + 1)?;
                tracing::debug!(version = index + 1, "applied a store migration");
            }
            Ok(())
        })
    }

    /// Checks that `key` is the key this store's values are sealed with; a new store records
    /// a sealed check value first. A mismatch is [`StoreError::KeyMismatch`].
    pub fn verify_key(&self, key: &MasterKey) -> Result<(), StoreError> {
        self.write(|tx| {
            let existing: Option<Vec<u8>> = tx
                .query_row(
                    "SELECT value FROM meta WHERE key = 'key_check'",
                    [],
                    |row| row.get(0),
                )
                .optional()?;
            match existing {
                Some(sealed) => {
                    let opened = key.open(&sealed, KEY_CHECK_AAD);
                    if !opened.is_ok_and(|plain| plain.as_slice() == KEY_CHECK_PLAINTEXT) {
                        return Err(Failure::Store(StoreError::KeyMismatch {
                            path: self.path.clone(),
                        }));
                    }
                }
                None => {
                    let sealed = key.seal(KEY_CHECK_PLAINTEXT, KEY_CHECK_AAD)?;
                    tx.execute(
                        "INSERT INTO meta (key, value) VALUES ('key_check', ?1)",
                        params![sealed],
                    )?;
                }
            }
            Ok(())
        })
    }

    /// Stores a new installation and its sealed values, in one transaction.
    pub fn insert_installation(&self, installation: &StoredInstallation) -> Result<(), StoreError> {
        let uid = installation.uid.to_string();
        self.write(|tx| {
            tx.execute(
                "INSERT INTO installations (uid, name, team, kind, template, active, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    uid,
                    installation.name,
                    installation.team,
                    installation.kind.as_str(),
                    installation.template,
                    installation.active,
                    now_ms() / 1000,
                ],
            )?;
            for (position, value) in installation.values.iter().enumerate() {
                tx.execute(
                    "INSERT INTO installation_values (installation_uid, kind, position, name, sealed)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![uid, value.kind.as_str(), position, value.name, value.sealed],
                )?;
            }
            Ok(())
        })
    }

    /// Every installation, oldest first, without values.
    pub fn list_installations(&self) -> Result<Vec<InstallationSummary>, StoreError> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT name, team, kind, active, uid FROM installations
                 ORDER BY created_at, rowid",
            )?;
            let rows = statement.query_map([], |row| {
                Ok((texts_and_flag(row)?, row.get::<_, String>(4)?))
            })?;
            let mut summaries = Vec::new();
            for row in rows {
                let ((name, team, kind, active), uid) = row?;
                let uid = parse_uid(&uid)?;
                summaries.push(InstallationSummary {
                    uid,
                    name,
                    kind: parse_kind(uid, &kind)?,
                    team,
                    active,
                });
            }
            Ok(summaries)
        })
    }

    /// The active installations' uids of `team`, oldest first.
    pub fn team_uids(&self, team: &str) -> Result<Vec<Uuid>, StoreError> {
        self.read(|conn| {
            let uids: Vec<String> = conn
                .prepare_cached(
                    "SELECT uid FROM installations WHERE team = ?1 AND active = 1
                     ORDER BY created_at, rowid",
                )?
                .query_map([team], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            Ok(uids
                .iter()
                .map(|uid| parse_uid(uid))
                .collect::<Result<_, _>>()?)
        })
    }

    /// One installation with its sealed values, if it exists and belongs to `team`. Another
    /// team's installation reads exactly like a missing one: no row.
    pub fn team_installation(
        &self,
        uid: Uuid,
        team: &str,
    ) -> Result<Option<StoredInstallation>, StoreError> {
        self.read(|conn| installation_in(conn, uid, Some(team)))
    }

    /// Sets an installation's active flag; an unknown uid is
    /// [`StoreError::UnknownInstallation`].
    pub fn set_active(&self, uid: Uuid, active: bool) -> Result<(), StoreError> {
        self.write(|tx| {
            let changed = tx.execute(
                "UPDATE installations SET active = ?1 WHERE uid = ?2",
                params![active, uid.to_string()],
            )?;
            if changed == 0 {
                return Err(Failure::Store(StoreError::UnknownInstallation { uid }));
            }
            Ok(())
        })
    }

    /// Records an API key (by its hash) for `team`.
    pub fn insert_api_key(&self, key_hash: &[u8; 32], team: &str) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO api_keys (key_hash, team, created_at) VALUES (?1, ?2, ?3)",
                params![key_hash.as_slice(), team, now_ms() / 1000],
            )?;
            Ok(())
        })
    }

    /// The team of the API key with this hash, if there is one.
    pub fn api_key_team(&self, key_hash: &[u8; 32]) -> Result<Option<String>, StoreError> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached("SELECT team FROM api_keys WHERE key_hash = ?1")?
                .query_row([key_hash.as_slice()], |row| row.get(0))
                .optional()?)
        })
    }

    /// Records a proxy token (by its hash) for `uid`, valid until `expires_at_ms`.
    pub fn insert_proxy_token(
        &self,
        token_hash: &[u8; 32],
        uid: Uuid,
        expires_at_ms: i64,
    ) -> Result<(), StoreError> {
        self.write(|tx| {
            tx.prepare_cached(
                "INSERT INTO proxy_tokens (token_hash, installation_uid, expires_at_ms, created_at_ms)
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                token_hash.as_slice(),
                uid.to_string(),
                expires_at_ms,
                now_ms()
            ])?;
            Ok(())
        })
    }

    /// The record of the proxy token with this hash and its installation, read together.
    pub fn proxy_token(
        &self,
        token_hash: &[u8; 32],
    ) -> Result<Option<(ProxyTokenRecord, StoredInstallation)>, StoreError> {
        self.read(|conn| {
            let record: Option<(String, i64)> = conn
                .prepare_cached(
                    "SELECT installation_uid, expires_at_ms FROM proxy_tokens WHERE token_hash = ?1",
                )?
                .query_row([token_hash.as_slice()], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()?;
            let Some((uid, expires_at_ms)) = record else {
                return Ok(None);
            };
            let uid = parse_uid(&uid)?;
            Ok(installation_in(conn, uid, None)?
                .map(|installation| (ProxyTokenRecord { uid, expires_at_ms }, installation)))
        })
    }

    /// Deletes proxy tokens that expired before `before_ms`; returns how many.
    pub fn purge_proxy_tokens(&self, before_ms: i64) -> Result<usize, StoreError> {
        self.write(|tx| {
            Ok(tx.execute(
                "DELETE FROM proxy_tokens WHERE expires_at_ms < ?1",
                [before_ms],
            )?)
        })
    }

    /// A cheap query, for health checks.
    pub fn ping(&self) -> Result<(), StoreError> {
        self.read(|conn| Ok(conn.query_row("SELECT 1", [], |_| Ok(()))?))
    }
}

/// An error inside a store operation: SQLite's (given the path on the way out), or one of ours.
enum Failure {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for Failure {
    fn from(error: rusqlite::Error) -> Self {
        Failure::Sql(error)
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Failure::Store(error)
    }
}

impl From<KeyError> for Failure {
    fn from(error: KeyError) -> Self {
        Failure::Store(StoreError::Key(error))
    }
}

impl Failure {
    fn into_error(self, path: &Path) -> StoreError {
        match self {
            Failure::Sql(source) => StoreError::Database {
                path: path.to_owned(),
                source,
            },
            Failure::Store(error) => error,
        }
    }
}

/// Name, team, kind and the active flag: the columns both installation queries start with.
fn texts_and_flag(row: &rusqlite::Row<'_>) -> rusqlite::Result<(String, String, String, bool)> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
}

/// The installation `uid` (of `team`, when given) with its sealed values.
fn installation_in(
    conn: &Connection,
    uid: Uuid,
    team: Option<&str>,
) -> Result<Option<StoredInstallation>, Failure> {
    let uid_text = uid.to_string();
    let row = conn
        .prepare_cached(
            "SELECT name, team, kind, active, template FROM installations
             WHERE uid = ?1 AND (?2 IS NULL OR team = ?2)",
        )?
        .query_row(params![uid_text, team], |row| {
            Ok((texts_and_flag(row)?, row.get::<_, Vec<u8>>(4)?))
        })
        .optional()?;
    let Some(((name, team, kind, active), template)) = row else {
        return Ok(None);
    };
    let mut statement = conn.prepare_cached(
        "SELECT kind, name, sealed FROM installation_values
         WHERE installation_uid = ?1 ORDER BY position",
    )?;
    let rows = statement.query_map([&uid_text], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, Vec<u8>>(2)?,
        ))
    })?;
    let mut values = Vec::new();
    for row in rows {
        let (kind, name, sealed) = row?;
        let kind = ValueKind::parse(&kind).ok_or_else(|| StoreError::Corrupt {
            uid,
            reason: format!("value '{name}' has an unknown kind"),
        })?;
        values.push(SealedValue { kind, name, sealed });
    }
    Ok(Some(StoredInstallation {
        uid,
        name,
        team,
        kind: parse_kind(uid, &kind)?,
        template,
        active,
        values,
    }))
}

fn parse_uid(text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|_| StoreError::Corrupt {
        uid: Uuid::nil(),
        reason: "a stored uid is not a UUID".to_owned(),
    })
}

fn parse_kind(uid: Uuid, text: &str) -> Result<TransportKind, StoreError> {
    TransportKind::parse(text).ok_or_else(|| StoreError::Corrupt {
        uid,
        reason: "unknown transport kind".to_owned(),
    })
}
