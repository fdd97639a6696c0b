//! The schema and its upkeep on open: the versioned migrations, moving values an older tether kept
//! in SQLite out to the secret store, and sweeping pending values a killed install left.

use rusqlite::params;
use tether_config::SecretValue;
use uuid::Uuid;

use crate::{Location, Store, StoreError, alive, database_error, now, placeholder};

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

impl Store {
    pub(crate) fn migrate(&mut self) -> Result<(), StoreError> {
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
    pub(crate) fn move_plain_values(&mut self) -> Result<(), StoreError> {
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
    pub(crate) fn sweep_pending(&mut self) -> Result<(), StoreError> {
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
    pub(crate) fn mark_pending(
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
}
