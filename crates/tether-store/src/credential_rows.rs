//! Credentials that belong to no installation (registry keys, OAuth tokens): set, read, listed and
//! removed by key.

use rusqlite::{OptionalExtension, params};
use tether_config::SecretValue;
use uuid::Uuid;

use crate::{CredentialEntry, Location, OAUTH_NAME, Preference, Store, StoreError, now};

impl Store {
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
    pub(crate) fn unrecorded_location(&self) -> Result<Location, StoreError> {
        Ok(match self.secrets.preference() {
            Preference::File => Location::File,
            _ => self.secrets.location()?,
        })
    }
}
