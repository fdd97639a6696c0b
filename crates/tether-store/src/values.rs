//! Setting and moving an installation's stored values.

use rusqlite::params;
use tether_config::SecretValue;
use uuid::Uuid;

use crate::{Location, Store, StoreError, database_error, now};

impl Store {
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
    pub(crate) fn put_secret(
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
}
