//! Local-first resolution of a run's MCP specs.
//!
//! - A JSON spec becomes ephemeral installations (user origin: `${VAR}` expands at render).
//! - A UUID found in the local store stays local; **no managed call is made for it**.
//! - Any other UUID is resolved through the managed client (managed origin: missing variables
//!   synthesized as `{{KEY}}`, server literals locked, no `${VAR}` expansion). All managed
//!   calls of a run go out together, bounded by the client's concurrency; results keep the
//!   input order.
//!
//! **Invariant:** nothing resolved here is written anywhere: the returned installations live
//! in memory for the run.

use std::sync::{Arc, Mutex};

use tether_config::{
    EnvLookup, Installation, Origin, ParsedConfig, RenderedServer, Secrets, parse_config,
};
use tether_graphql::{ManagedMcpClient, ManagedMcpError};
use tether_store::{Store, StoreError};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::error::DriverError;
use crate::spec::McpSpec;

/// The namespace of ephemeral installation ids (UUIDv5 of `task_id:spec:server_name`).
pub const EPHEMERAL_ID_NAMESPACE: Uuid = Uuid::from_u128(0x6d2f_4c1e_8a3b_5d7f_9e0a_1b2c_3d4e_5f60);

/// Read access to locally installed templatable servers.
pub trait LocalInstallations: Send + Sync {
    /// The installation `uid`, if installed.
    fn get(&self, uid: Uuid) -> Result<Option<Installation>, StoreError>;

    /// The secrets stored for `uid` (read from the secret store into memory): applied to it
    /// alone at render time, the run's own secrets winning for a name both have.
    fn stored_secrets(&self, uid: Uuid) -> Result<Secrets, StoreError> {
        let _ = uid;
        Ok(Secrets::new())
    }
}

impl LocalInstallations for Mutex<Store> {
    fn get(&self, uid: Uuid) -> Result<Option<Installation>, StoreError> {
        // A poisoned lock only means another thread panicked mid-read; the store is
        // transactional, so reading on is safe.
        let store = self
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        store.get(uid)
    }

    fn stored_secrets(&self, uid: Uuid) -> Result<Secrets, StoreError> {
        let store = self
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        store.secrets_for(uid)
    }
}

/// No local installations at all (e.g. a worker without a store).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoLocalInstallations;

impl LocalInstallations for NoLocalInstallations {
    fn get(&self, _uid: Uuid) -> Result<Option<Installation>, StoreError> {
        Ok(None)
    }
}

/// A locally installed server used by the run.
#[derive(Debug, Clone)]
pub struct LocalInstallation {
    /// Its UUID in the store.
    pub uid: Uuid,
    /// As stored: user origin, values captured at install time included.
    pub installation: Installation,
    /// Its stored secrets, in memory for the run (masked in `Debug`).
    pub stored: Secrets,
}

impl LocalInstallation {
    /// Its stored secrets with the run's `secrets` over them (a run's `--secret` overrides a
    /// stored value for that run).
    fn secrets_over(&self, secrets: &Secrets) -> Option<Secrets> {
        if self.stored.is_empty() {
            return None;
        }
        let mut merged = self.stored.clone();
        for name in secrets.names() {
            if let Some(value) = secrets.get(name) {
                merged.insert(name, value.clone());
            }
        }
        Some(merged)
    }
}

/// What the managed server said about a managed installation's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManagedLease {
    /// The managed installation it is for (the uid `Resolver::remint` takes).
    pub uid: Uuid,
    /// When its proxy token expires, if it does (`expiresAt`); `None` never needs a re-mint.
    pub expires_at: Option<OffsetDateTime>,
}

/// A server that exists only for this run: from inline/file JSON or a managed config.
#[derive(Debug, Clone)]
pub struct EphemeralInstallation {
    /// UUIDv5 of `task_id:spec:server_name` with a task id (stable across retries), else random.
    pub id: Uuid,
    /// Managed origin when a managed server returned it, user origin otherwise.
    pub installation: Installation,
    /// Where it came from, for messages (`inline spec #1`, `managed installation <uid>`).
    pub source: String,
    /// Set for servers a managed server returned.
    pub lease: Option<ManagedLease>,
}

/// The outcome of resolution: local installations plus ephemeral ones.
#[derive(Debug, Clone, Default)]
pub struct ResolvedMcpSpecs {
    /// Local installations, in spec order.
    pub local: Vec<LocalInstallation>,
    /// Ephemeral installations, in spec order.
    pub ephemeral: Vec<EphemeralInstallation>,
}

impl ResolvedMcpSpecs {
    /// Every installation, local ones first, in spec order.
    pub fn installations(&self) -> impl Iterator<Item = &Installation> {
        self.local
            .iter()
            .map(|l| &l.installation)
            .chain(self.ephemeral.iter().map(|e| &e.installation))
    }

    /// Applies `secrets` and renders every server: the one function the harness and launch
    /// paths share. Local and ephemeral installations get exactly the same treatment. Only a
    /// [`crate::Session`] calls it: callers get rendered servers from their session.
    pub(crate) fn render(&self, secrets: &Secrets, env: &dyn EnvLookup) -> Vec<RenderedServer> {
        let local = self
            .local
            .iter()
            .map(|local| match local.secrets_over(secrets) {
                Some(merged) => local.installation.render(&merged, env),
                None => local.installation.render(secrets, env),
            });
        let ephemeral = self
            .ephemeral
            .iter()
            .map(|e| e.installation.render(secrets, env));
        local.chain(ephemeral).collect()
    }

    /// The stored secrets of the local installations (for the masking set).
    pub(crate) fn stored_values(&self) -> impl Iterator<Item = tether_config::SecretValue> + '_ {
        self.local.iter().flat_map(|local| local.stored.values())
    }

    /// The managed installations with an expiry, once each.
    pub fn leases(&self) -> Vec<ManagedLease> {
        let mut leases: Vec<ManagedLease> = Vec::new();
        for lease in self.ephemeral.iter().filter_map(|e| e.lease) {
            if !leases.iter().any(|l| l.uid == lease.uid) {
                leases.push(lease);
            }
        }
        leases
    }
}

/// Refuses servers whose rendered config still holds placeholders.
pub fn require_resolved(servers: &[RenderedServer]) -> Result<(), DriverError> {
    match servers
        .iter()
        .find(|s| !s.unresolved_placeholders().is_empty())
    {
        Some(server) => Err(DriverError::MissingVariables {
            server: server.name.clone(),
            names: server.unresolved_placeholders().iter().cloned().collect(),
        }),
        None => Ok(()),
    }
}

/// Resolves specs local-first.
pub struct Resolver {
    local: Arc<dyn LocalInstallations>,
    managed: Option<Arc<dyn ManagedMcpClient>>,
    task_id: Option<String>,
}

/// One slot of the run, in spec order, before managed results are known.
enum Slot {
    Local(LocalInstallation),
    Ephemeral(EphemeralInstallation),
    Managed(Uuid),
}

impl Resolver {
    /// A resolver over `local` installations and, when configured, a managed client.
    pub fn new(
        local: Arc<dyn LocalInstallations>,
        managed: Option<Arc<dyn ManagedMcpClient>>,
    ) -> Self {
        Self {
            local,
            managed,
            task_id: None,
        }
    }

    /// Makes ephemeral ids stable for this task (UUIDv5 of `task_id:spec:server_name`).
    pub fn with_task_id(mut self, task_id: impl Into<String>) -> Self {
        self.task_id = Some(task_id.into());
        self
    }

    /// Resolves `specs`. Any failure is fatal: a spec that cannot be materialized is invalid
    /// setup, never a degraded startup.
    pub async fn resolve(&self, specs: &[McpSpec]) -> Result<ResolvedMcpSpecs, DriverError> {
        let mut slots = Vec::new();
        for (position, spec) in specs.iter().enumerate() {
            match spec {
                McpSpec::Uuid(uid) => slots.push(self.uuid_slot(*uid)?),
                McpSpec::Json { parsed, .. } => {
                    // Parsed when the spec was made: resolution reads that, never the text.
                    let parsed = ParsedConfig::clone(parsed);
                    for reference in &parsed.references {
                        slots.push(self.uuid_slot(reference.uid)?);
                    }
                    let source = spec.label(Some(position));
                    slots.extend(self.ephemeral_slots(parsed, &spec.identity(), &source, None));
                }
            }
        }

        let mut managed_uids: Vec<Uuid> = Vec::new();
        for slot in &slots {
            if let Slot::Managed(uid) = slot
                && !managed_uids.contains(uid)
            {
                managed_uids.push(*uid);
            }
        }
        let mut managed_results = Vec::new();
        if !managed_uids.is_empty() {
            let Some(client) = &self.managed else {
                return Err(DriverError::ServerNotFound(managed_uids[0]));
            };
            tracing::debug!(
                count = managed_uids.len(),
                "resolving managed MCP installations"
            );
            let results = client.resolve_many(&managed_uids).await;
            let mut first_error = None;
            for (uid, result) in managed_uids.iter().zip(results) {
                match self.managed_installations(*uid, result) {
                    Ok(installations) => managed_results.push((*uid, installations)),
                    Err(err) => {
                        tracing::debug!(%uid, "managed MCP resolution failed");
                        first_error.get_or_insert(err);
                    }
                }
            }
            if let Some(err) = first_error {
                return Err(err);
            }
        }

        let mut resolved = ResolvedMcpSpecs::default();
        let mut placed: Vec<Uuid> = Vec::new();
        for slot in slots {
            match slot {
                Slot::Local(local) => {
                    if !resolved.local.iter().any(|l| l.uid == local.uid) {
                        resolved.local.push(local);
                    }
                }
                Slot::Ephemeral(ephemeral) => resolved.ephemeral.push(ephemeral),
                Slot::Managed(uid) => {
                    if placed.contains(&uid) {
                        continue;
                    }
                    placed.push(uid);
                    if let Some((_, installations)) =
                        managed_results.iter_mut().find(|(u, _)| *u == uid)
                    {
                        resolved.ephemeral.append(installations);
                    }
                }
            }
        }
        check_unique_names(&resolved)?;
        tracing::debug!(
            local = resolved.local.len(),
            ephemeral = resolved.ephemeral.len(),
            "resolved MCP specs"
        );
        Ok(resolved)
    }

    /// Asks the managed server for a fresh config for `uid` (a re-mint before expiry) and
    /// returns its servers as ephemeral installations, with the same ids as before when a
    /// task id is set.
    pub async fn remint(&self, uid: Uuid) -> Result<Vec<EphemeralInstallation>, DriverError> {
        let Some(client) = &self.managed else {
            return Err(DriverError::ServerNotFound(uid));
        };
        let result = client.create_managed_mcp_client_config(uid).await;
        self.managed_installations(uid, result)
    }

    fn uuid_slot(&self, uid: Uuid) -> Result<Slot, DriverError> {
        match self.local.get(uid)? {
            Some(installation) => {
                tracing::debug!(%uid, "resolved MCP installation locally");
                let stored = self.local.stored_secrets(uid)?;
                Ok(Slot::Local(LocalInstallation {
                    uid,
                    installation,
                    stored,
                }))
            }
            None => Ok(Slot::Managed(uid)),
        }
    }

    fn ephemeral_slots(
        &self,
        parsed: ParsedConfig,
        identity: &str,
        source: &str,
        lease: Option<ManagedLease>,
    ) -> impl Iterator<Item = Slot> {
        let ids: Vec<Uuid> = parsed
            .servers
            .iter()
            .map(|server| self.ephemeral_id(identity, &server.server.name))
            .collect();
        let source = source.to_owned();
        parsed
            .servers
            .into_iter()
            .zip(ids)
            .map(move |(server, id)| {
                Slot::Ephemeral(EphemeralInstallation {
                    id,
                    installation: server.into_installation(),
                    source: source.clone(),
                    lease,
                })
            })
    }

    fn ephemeral_id(&self, identity: &str, server_name: &str) -> Uuid {
        match &self.task_id {
            Some(task_id) => Uuid::new_v5(
                &EPHEMERAL_ID_NAMESPACE,
                format!("{task_id}:{identity}:{server_name}").as_bytes(),
            ),
            None => Uuid::new_v4(),
        }
    }

    fn managed_installations(
        &self,
        uid: Uuid,
        result: Result<tether_graphql::ManagedMcpClientConfig, ManagedMcpError>,
    ) -> Result<Vec<EphemeralInstallation>, DriverError> {
        let failed = |message: String| DriverError::ManagedMcpResolutionFailed { uid, message };
        let config = result.map_err(|err| failed(managed_error_message(&err)))?;
        let parsed = parse_config(config.mcp_config_json.expose(), Origin::Managed)
            .map_err(|err| failed(format!("the returned MCP config is invalid: {err}")))?;
        if !parsed.references.is_empty() {
            return Err(failed(
                "the returned MCP config refers to other installations (warp_id), which a managed config may not do".to_owned(),
            ));
        }
        if parsed.servers.is_empty() {
            return Err(failed("the returned MCP config holds no server".to_owned()));
        }
        let lease = Some(ManagedLease {
            uid,
            expires_at: config.expires_at,
        });
        let source = format!("managed installation {uid}");
        Ok(self
            .ephemeral_slots(parsed, &uid.to_string(), &source, lease)
            .filter_map(|slot| match slot {
                Slot::Ephemeral(e) => Some(e),
                Slot::Local(_) | Slot::Managed(_) => None,
            })
            .collect())
    }
}

/// The part of a managed client error worth showing after "Failed to resolve managed MCP
/// server {uid}: ". User-facing errors give the server's own message.
fn managed_error_message(err: &ManagedMcpError) -> String {
    match err {
        ManagedMcpError::UserFacing { message, .. } => message.clone(),
        other => {
            let text = other.to_string();
            // The client's messages start with a uid prefix of their own; drop it.
            match text.split_once(": ") {
                Some((prefix, rest)) if prefix.contains("managed MCP server") => rest.to_owned(),
                _ => text,
            }
        }
    }
}

/// Two resolved servers with one name are an error, never a silent overwrite.
fn check_unique_names(resolved: &ResolvedMcpSpecs) -> Result<(), DriverError> {
    let named: Vec<(&str, String)> = resolved
        .local
        .iter()
        .map(|l| {
            (
                l.installation.name(),
                format!("local installation {}", l.uid),
            )
        })
        .chain(
            resolved
                .ephemeral
                .iter()
                .map(|e| (e.installation.name(), e.source.clone())),
        )
        .collect();
    for (i, (name, source)) in named.iter().enumerate() {
        if let Some((_, earlier)) = named[..i].iter().find(|(n, _)| n == name) {
            return Err(DriverError::DuplicateServerName {
                name: (*name).to_owned(),
                sources: vec![earlier.clone(), source.clone()],
            });
        }
    }
    Ok(())
}
