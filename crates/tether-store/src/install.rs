//! Installing: the values written to the secret store first (under pending rows), then the rows in
//! one transaction.

use rusqlite::params;
use tether_config::{Installation, Secrets};
use uuid::Uuid;

use crate::{
    ClassifyName, InstallSource, Location, RowTexts, Store, StoreError, Value, database_error,
    input_names, now, pause_point, placeholder,
};

impl Store {
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

    pub(crate) fn write_values(
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
    pub(crate) fn undo_values(&mut self, uid: Uuid, values: &[Value<'_>], location: Location) {
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

    pub(crate) fn commit_install(
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
}
