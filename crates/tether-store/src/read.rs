//! Reading installations back: templates, inputs, stored values and the list.

use indexmap::IndexMap;
use rusqlite::{OptionalExtension, params};
use tether_config::{Installation, Origin, SecretValue, Secrets, TemplatableServer, VariableValue};
use uuid::Uuid;

use crate::{
    ClassifyName, InstallSource, InstalledSummary, Store, StoreError, StoredSecret, placeholder,
    transport,
};

impl Store {
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

    pub(crate) fn template(&self, uid: Uuid) -> Result<Option<TemplatableServer>, StoreError> {
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
    pub(crate) fn has_registry_source(&self, uid: Uuid) -> Result<bool, StoreError> {
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
    pub(crate) fn inputs(
        &self,
        uid: Uuid,
        server: &TemplatableServer,
    ) -> Result<Vec<String>, StoreError> {
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
}
