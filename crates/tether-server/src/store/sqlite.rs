//! The SQLite backend: the store in one file under the data directory.
//!
//! `tether-sqlite` opens the file: the directory 0700 and the database 0600, refused when another
//! user can write either; WAL journaling with `synchronous = NORMAL` (a crash may lose the last
//! transactions, never corrupt the file), a busy timeout so the admin CLI and a running server
//! can write at once, `secure_delete`. Migrations are versioned with `PRAGMA user_version`.
//! One connection behind a mutex, used from tokio's blocking pool; every write is one
//! transaction.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use uuid::Uuid;

use super::{
    ApiKeyRecord, ApiKeySummary, AuditEvent, InstallationSummary, ProxyTokenRecord, Storage,
    last_used_is_stale, now_ms, parse_kind, parse_uid, parse_value_kind,
};
use crate::error::StoreError;
use crate::model::{SealedValue, StoredInstallation};

/// The database file's name inside the data directory.
pub const DATABASE_FILE: &str = "tether-server.db";

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
    // 2: API key ids and last use, the audit log, revoking tokens by installation.
    "ALTER TABLE api_keys ADD COLUMN id TEXT;
     UPDATE api_keys SET id = lower(hex(randomblob(8))) WHERE id IS NULL;
     CREATE UNIQUE INDEX api_keys_id ON api_keys(id);
     ALTER TABLE api_keys ADD COLUMN last_used_at INTEGER;
     CREATE TABLE audit_events (
         id     INTEGER PRIMARY KEY AUTOINCREMENT,
         at_ms  INTEGER NOT NULL,
         actor  TEXT NOT NULL,
         action TEXT NOT NULL,
         target TEXT NOT NULL,
         detail TEXT NOT NULL
     );
     CREATE INDEX proxy_tokens_installation ON proxy_tokens(installation_uid);",
];

/// The SQLite store. One connection behind a mutex, used from tokio's blocking pool.
pub(super) struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Mutex<Connection>,
    path: PathBuf,
    /// Why the last write failed, when it failed for a reason of the store itself (disk full,
    /// I/O, read-only); cleared by the next write that succeeds. The health check reads it.
    write_failure: Mutex<Option<&'static str>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a half-written transaction: an open
        // transaction rolls back when dropped.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `work` in one immediate transaction, committed when it succeeds.
    fn write_now<T>(
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
        let outcome = run(&mut conn).map_err(|failure: Failure| failure.into_error(&self.path));
        let failure = match &outcome {
            Ok(_) => None,
            Err(StoreError::Database { source, .. }) => write_failure_class(source),
            // Ours (a constraint of the service, a key): not the store's health.
            Err(_) => return outcome,
        };
        *self
            .write_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = failure;
        outcome
    }

    fn write_failure(&self) -> Option<&'static str> {
        *self
            .write_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn migrate(&self) -> Result<(), StoreError> {
        self.write_now(|tx| {
            let version: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
            let known = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX);
            if version > known {
                return Err(Failure::Store(StoreError::TooNew {
                    database: self.path.display().to_string(),
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
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `dir` through [`tether_sqlite::open`], which
    /// refuses a directory or database another user can write or owns, and migrates it.
    pub(super) async fn open(dir: &Path) -> Result<Self, StoreError> {
        let dir = dir.to_owned();
        run_blocking(move || {
            let conn = tether_sqlite::open(&dir, DATABASE_FILE).map_err(|error| match error {
                tether_sqlite::OpenError::Io { path, source } => {
                    StoreError::DataDir { path, source }
                }
                tether_sqlite::OpenError::Sqlite { path, source } => {
                    StoreError::Database { path, source }
                }
                other => StoreError::Unsafe(other),
            })?;
            let inner = Inner {
                conn: Mutex::new(conn),
                path: dir.join(DATABASE_FILE),
                write_failure: Mutex::new(None),
            };
            inner.migrate()?;
            Ok(Self {
                inner: Arc::new(inner),
            })
        })
        .await
    }

    /// Runs `work` on the connection, on the blocking pool (reads, and single statements).
    async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = Arc::clone(&self.inner);
        run_blocking(move || {
            let conn = inner.lock();
            work(&conn).map_err(|failure| failure.into_error(&inner.path))
        })
        .await
    }

    /// Runs `work` in one immediate transaction on the blocking pool (writes).
    async fn write<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Transaction<'_>) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = Arc::clone(&self.inner);
        run_blocking(move || inner.write_now(work)).await
    }
}

/// Runs blocking SQLite work on tokio's blocking pool; a panic in it is resumed here.
async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    }
}

fn count(changed: usize) -> u64 {
    u64::try_from(changed).unwrap_or(u64::MAX)
}

#[async_trait::async_trait]
impl Storage for SqliteStore {
    fn describe(&self) -> String {
        self.inner.path.display().to_string()
    }

    async fn meta(&self, key: &'static str) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(move |conn| {
            Ok(conn
                .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
                .query_row([key], |row| row.get(0))
                .optional()?)
        })
        .await
    }

    async fn insert_meta_if_absent(
        &self,
        key: &'static str,
        value: Vec<u8>,
    ) -> Result<(), StoreError> {
        self.write(move |tx| {
            tx.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES (?1, ?2)",
                params![key, value],
            )?;
            Ok(())
        })
        .await
    }

    async fn replace_meta(&self, key: &'static str, value: Vec<u8>) -> Result<(), StoreError> {
        self.write(move |tx| {
            tx.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?1, ?2)",
                params![key, value],
            )?;
            Ok(())
        })
        .await
    }

    async fn insert_installation(
        &self,
        installation: StoredInstallation,
    ) -> Result<(), StoreError> {
        self.write(move |tx| {
            let uid = installation.uid.to_string();
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
            insert_values(tx, &uid, &installation.values)
        })
        .await
    }

    async fn replace_sealed(&self, installation: StoredInstallation) -> Result<(), StoreError> {
        self.write(move |tx| {
            let uid = installation.uid.to_string();
            let changed = tx.execute(
                "UPDATE installations SET template = ?1 WHERE uid = ?2",
                params![installation.template, uid],
            )?;
            if changed == 0 {
                return Err(Failure::Store(StoreError::UnknownInstallation {
                    uid: installation.uid,
                }));
            }
            tx.execute(
                "DELETE FROM installation_values WHERE installation_uid = ?1",
                [&uid],
            )?;
            insert_values(tx, &uid, &installation.values)
        })
        .await
    }

    async fn list_installations(&self) -> Result<Vec<InstallationSummary>, StoreError> {
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
        .await
    }

    async fn team_uids(&self, team: String) -> Result<Vec<Uuid>, StoreError> {
        self.read(move |conn| {
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
        .await
    }

    async fn installation(
        &self,
        uid: Uuid,
        team: Option<String>,
    ) -> Result<Option<StoredInstallation>, StoreError> {
        self.read(move |conn| installation_in(conn, uid, team.as_deref()))
            .await
    }

    async fn set_active(&self, uid: Uuid, active: bool) -> Result<(), StoreError> {
        self.write(move |tx| {
            let changed = tx.execute(
                "UPDATE installations SET active = ?1 WHERE uid = ?2",
                params![active, uid.to_string()],
            )?;
            if changed == 0 {
                return Err(Failure::Store(StoreError::UnknownInstallation { uid }));
            }
            Ok(())
        })
        .await
    }

    async fn insert_api_key(
        &self,
        key_hash: [u8; 32],
        id: String,
        team: String,
    ) -> Result<(), StoreError> {
        self.write(move |tx| {
            tx.execute(
                "INSERT INTO api_keys (key_hash, id, team, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![key_hash.as_slice(), id, team, now_ms() / 1000],
            )?;
            Ok(())
        })
        .await
    }

    async fn api_key(&self, key_hash: [u8; 32]) -> Result<Option<ApiKeyRecord>, StoreError> {
        self.read(move |conn| {
            let found: Option<(String, String, Option<i64>)> = conn
                .prepare_cached("SELECT id, team, last_used_at FROM api_keys WHERE key_hash = ?1")?
                .query_row([key_hash.as_slice()], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .optional()?;
            let Some((id, team, last_used_at)) = found else {
                return Ok(None);
            };
            let now = now_ms();
            if last_used_is_stale(last_used_at, now) {
                conn.prepare_cached("UPDATE api_keys SET last_used_at = ?1 WHERE key_hash = ?2")?
                    .execute(params![now / 1000, key_hash.as_slice()])?;
            }
            Ok(Some(ApiKeyRecord { id, team }))
        })
        .await
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeySummary>, StoreError> {
        self.read(|conn| {
            let mut statement = conn.prepare_cached(
                "SELECT id, team, created_at, last_used_at FROM api_keys ORDER BY created_at, rowid",
            )?;
            let rows = statement.query_map([], |row| {
                Ok(ApiKeySummary {
                    id: row.get(0)?,
                    team: row.get(1)?,
                    created_at: row.get(2)?,
                    last_used_at: row.get(3)?,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }

    async fn revoke_api_key(&self, id: String) -> Result<bool, StoreError> {
        self.write(move |tx| Ok(tx.execute("DELETE FROM api_keys WHERE id = ?1", [id])? > 0))
            .await
    }

    async fn insert_proxy_token(
        &self,
        token_hash: [u8; 32],
        uid: Uuid,
        expires_at_ms: i64,
    ) -> Result<(), StoreError> {
        self.write(move |tx| {
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
        .await
    }

    async fn proxy_token(
        &self,
        token_hash: [u8; 32],
    ) -> Result<Option<(ProxyTokenRecord, StoredInstallation)>, StoreError> {
        self.read(move |conn| {
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
        .await
    }

    async fn revoke_proxy_tokens(&self, uid: Option<Uuid>) -> Result<u64, StoreError> {
        self.write(move |tx| {
            let changed = match uid {
                Some(uid) => tx.execute(
                    "DELETE FROM proxy_tokens WHERE installation_uid = ?1",
                    [uid.to_string()],
                )?,
                None => tx.execute("DELETE FROM proxy_tokens", [])?,
            };
            Ok(count(changed))
        })
        .await
    }

    async fn purge_proxy_tokens(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.write(move |tx| {
            Ok(count(tx.execute(
                "DELETE FROM proxy_tokens WHERE expires_at_ms < ?1",
                [before_ms],
            )?))
        })
        .await
    }

    async fn record_audit(&self, event: AuditEvent) -> Result<(), StoreError> {
        self.write(move |tx| {
            tx.prepare_cached(
                "INSERT INTO audit_events (at_ms, actor, action, target, detail)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                event.at_ms,
                event.actor,
                event.action,
                event.target,
                event.detail
            ])?;
            Ok(())
        })
        .await
    }

    async fn audit_events(&self, limit: i64) -> Result<Vec<AuditEvent>, StoreError> {
        self.read(move |conn| {
            let mut statement = conn.prepare_cached(
                "SELECT at_ms, actor, action, target, detail FROM audit_events
                 ORDER BY id DESC LIMIT ?1",
            )?;
            let rows = statement.query_map([limit], |row| {
                Ok(AuditEvent {
                    at_ms: row.get(0)?,
                    actor: row.get(1)?,
                    action: row.get(2)?,
                    target: row.get(3)?,
                    detail: row.get(4)?,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
        .await
    }

    /// A read; then the room left on the database's filesystem; then, when the last write
    /// failed for a reason of the store, a write of a `meta` row (which clears it if it
    /// succeeds): a full disk answers reads but not writes.
    async fn ping(&self) -> Result<(), StoreError> {
        self.read(|conn| Ok(conn.query_row("SELECT 1", [], |_| Ok(()))?))
            .await?;
        let inner = Arc::clone(&self.inner);
        run_blocking(move || {
            let free = free_bytes(&inner.path)?;
            if free < super::MIN_FREE_BYTES {
                return Err(StoreError::NoSpace {
                    path: inner.path.clone(),
                    free,
                });
            }
            if inner.write_failure().is_some() {
                let probed = inner.write_now(|tx| {
                    tx.execute(
                        "INSERT OR REPLACE INTO meta (key, value) VALUES ('health_probe', ?1)",
                        [now_ms().to_le_bytes().to_vec()],
                    )?;
                    Ok(())
                });
                if let (Err(_), Some(class)) = (probed, inner.write_failure()) {
                    return Err(StoreError::WritesFail {
                        database: inner.path.display().to_string(),
                        class,
                    });
                }
            }
            Ok(())
        })
        .await
    }
}

/// What a failed write says of the store's health, in words: `None` for a failure of the
/// statement or the data (a constraint, a busy database), which a later write need not share.
fn write_failure_class(error: &rusqlite::Error) -> Option<&'static str> {
    use rusqlite::ErrorCode;
    match error.sqlite_error_code()? {
        ErrorCode::DiskFull => Some("the disk is full"),
        ErrorCode::SystemIoFailure => Some("an I/O error"),
        ErrorCode::ReadOnly => Some("the database is read-only"),
        ErrorCode::CannotOpen => Some("a file of the database cannot be opened"),
        ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => Some("the database is damaged"),
        _ => None,
    }
}

/// Bytes available to this process on the filesystem holding `path`.
#[allow(
    clippy::useless_conversion,
    reason = "the block count and size are narrower than u64 on some targets"
)]
fn free_bytes(path: &Path) -> Result<u64, StoreError> {
    let stat = nix::sys::statvfs::statvfs(path).map_err(|errno| StoreError::DataDir {
        path: path.to_owned(),
        source: std::io::Error::from(errno),
    })?;
    Ok(u64::from(stat.blocks_available()).saturating_mul(u64::from(stat.fragment_size())))
}

/// Inserts an installation's sealed values, in their order.
fn insert_values(tx: &Transaction<'_>, uid: &str, values: &[SealedValue]) -> Result<(), Failure> {
    for (position, value) in values.iter().enumerate() {
        tx.execute(
            "INSERT INTO installation_values (installation_uid, kind, position, name, sealed)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![uid, value.kind.as_str(), position, value.name, value.sealed],
        )?;
    }
    Ok(())
}

/// An error inside a store operation: SQLite's, or one of ours.
type Failure = super::Failure<rusqlite::Error>;

impl From<rusqlite::Error> for Failure {
    fn from(error: rusqlite::Error) -> Self {
        Failure::Driver(error)
    }
}

impl Failure {
    fn into_error(self, path: &Path) -> StoreError {
        match self {
            Failure::Driver(source) => StoreError::Database {
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
        let kind = parse_value_kind(uid, &name, &kind)?;
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
