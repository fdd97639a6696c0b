//! Removing a stored value or a whole installation, values first.

use rusqlite::{OptionalExtension, params};
use uuid::Uuid;

use crate::{Store, StoreError, StoredSecret, database_error, now};

impl Store {
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
    pub(crate) fn forget(
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
