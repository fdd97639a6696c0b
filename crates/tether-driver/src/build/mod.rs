//! The session builder: every `--mcp` value and `--task` file read once into [`McpSpec`]s,
//! then one [`Session`], opening the local store and the managed client only when a spec
//! needs them, asking for missing inputs and applying bearer tokens through a [`SpecHost`]
//! the program implements. See specs/driver/TECH.md ("The session builder").

mod arg;
mod error;
mod shorthand;

use std::path::Path;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tether_config::{EnvLookup, InputPrompt, SecretValue, Secrets};
use tether_graphql::ManagedMcpClient;
use tether_store::{Store, StoreError};
use uuid::Uuid;

use arg::{McpArg, by_name, read_task};
pub use error::SpecError;

use crate::error::DriverError;
use crate::resolve::{LocalInstallations, NoLocalInstallations, Resolver};
use crate::session::Session;
use crate::spec::{McpSpec, used_inputs};

/// What the builder asks of the program that runs it: its store and managed client (opened
/// only when a spec needs them), its terminal, its stored tokens, its progress line and its
/// wording of a refusal.
pub trait SpecHost: Sync {
    /// The program's error: a driver or store error converts into it.
    type Error: From<DriverError> + From<StoreError>;
    /// `error` as the program says it (a usage error naming the value, with a hint).
    fn refuse(&self, error: SpecError) -> Self::Error;
    /// Whether the local store's database exists (a name is looked up only then, so a run
    /// of inline or file specs never creates one).
    fn store_exists(&self) -> Result<bool, Self::Error>;
    /// Opens (or creates) the local store.
    fn open_store(&self) -> Result<Store, Self::Error>;
    /// The managed client, when one is configured.
    fn managed_client(&self) -> Result<Option<Arc<dyn ManagedMcpClient>>, Self::Error>;
    /// A value for `input` (a VS Code `${input:ID}` no secret gave), or `None` when there is
    /// no one to ask (the run then stops naming the missing secret).
    fn ask_input(&self, input: &InputPrompt) -> Result<Option<SecretValue>, Self::Error>;
    /// Shows that `step` has begun.
    fn step(&self, step: &str);
    /// `session` with the program's stored bearer tokens applied.
    fn apply_tokens(&self, session: Session) -> BoxFuture<'_, Session>;
}

/// A run's specs, read once, and what resolving them will need.
pub struct SessionBuilder {
    specs: Vec<McpSpec>,
    task_id: Option<String>,
    /// The store, when reading a name opened it: resolution uses the same one.
    store: Option<Store>,
    pass_env: Vec<String>,
}

impl std::fmt::Debug for SessionBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionBuilder")
            .field("specs", &self.specs)
            .field("task_id", &self.task_id)
            .field("store_open", &self.store.is_some())
            .finish_non_exhaustive()
    }
}

impl SessionBuilder {
    /// Reads every `--mcp` value in order, then the task file: a harness shorthand's files, an
    /// installation's name (the store is opened for the first name, when it exists), a UUID,
    /// a file or inline JSON. Fails on the first value that is none of them, or when there is
    /// no spec at all.
    pub fn read<H: SpecHost>(
        values: &[String],
        task: Option<&Path>,
        host: &H,
    ) -> Result<Self, H::Error> {
        let mut builder = Self {
            specs: Vec::with_capacity(values.len()),
            task_id: None,
            store: None,
            pass_env: Vec::new(),
        };
        let mut installed: Option<Vec<(String, Uuid)>> = None;
        for (index, value) in values.iter().enumerate() {
            let spec = match McpArg::parse(value).map_err(|e| host.refuse(e))? {
                McpArg::Harness(specs) => {
                    builder.specs.extend(specs);
                    continue;
                }
                McpArg::Name { name, otherwise } => {
                    let names = match &mut installed {
                        Some(names) => names,
                        None => installed.insert(builder.installed(host)?),
                    };
                    let matching: Vec<Uuid> = names
                        .iter()
                        .filter(|(installed_name, _)| *installed_name == name)
                        .map(|(_, uid)| *uid)
                        .collect();
                    match by_name(&name, &matching).map_err(|e| host.refuse(e))? {
                        Some(spec) => Ok(spec),
                        None => otherwise,
                    }
                }
                McpArg::Spec(spec) => spec,
            };
            match spec {
                Ok(spec) => builder.specs.push(spec),
                Err(error) => {
                    return Err(host.refuse(SpecError::NotASpec {
                        index,
                        error: Box::new(error),
                        installed: installed.unwrap_or_default(),
                    }));
                }
            }
        }
        if let Some(path) = task {
            let (specs, id) = read_task(path).map_err(|e| host.refuse(e))?;
            builder.specs.extend(specs);
            builder.task_id = id;
        }
        if builder.specs.is_empty() {
            return Err(host.refuse(SpecError::Refused(
                "no MCP spec given: pass --mcp SPEC (a UUID, a JSON file or inline JSON) or --task FILE".into(),
            )));
        }
        Ok(builder)
    }

    /// The installations' (name, uid), from the store when its database exists (kept open
    /// for resolution), else none.
    fn installed<H: SpecHost>(&mut self, host: &H) -> Result<Vec<(String, Uuid)>, H::Error> {
        if !host.store_exists()? {
            return Ok(Vec::new());
        }
        let store = host.open_store()?;
        let list = store
            .list()?
            .into_iter()
            .map(|summary| (summary.name, summary.uid))
            .collect();
        self.store = Some(store);
        Ok(list)
    }

    /// The specs read, in order.
    pub fn specs(&self) -> &[McpSpec] {
        &self.specs
    }

    /// The VS Code inputs (`${input:ID}`) the specs' servers use, once each, in spec order.
    pub fn used_inputs(&self) -> Vec<InputPrompt> {
        used_inputs(&self.specs)
    }

    /// Asks the host for each used input `secrets` lacks, in order, until it has no one to ask.
    pub fn ask_for_inputs<H: SpecHost>(
        &self,
        secrets: &mut Secrets,
        host: &H,
    ) -> Result<(), H::Error> {
        for input in self.used_inputs() {
            if secrets.get(&input.id).is_some() {
                continue;
            }
            match host.ask_input(&input)? {
                Some(value) => secrets.insert(input.id, value),
                None => break,
            }
        }
        Ok(())
    }

    /// Passes the variables `names` of tether's environment to every stdio server.
    #[must_use]
    pub fn with_pass_env(mut self, names: &[String]) -> Self {
        self.pass_env = names.to_vec();
        self
    }

    /// Resolves and renders with `secrets` and `env`, without the stored tokens (for what
    /// only looks at the servers). The store is opened (or the one reading names opened is
    /// used) and the managed client made only when a spec is a UUID or references one.
    pub async fn resolve<H: SpecHost>(
        self,
        secrets: Secrets,
        env: impl EnvLookup + Send + Sync + 'static,
        host: &H,
    ) -> Result<Session, H::Error> {
        let (local, managed): (Arc<dyn LocalInstallations>, _) =
            if self.specs.iter().any(McpSpec::needs_store) {
                let store = match self.store {
                    Some(store) => store,
                    None => host.open_store()?,
                };
                (Arc::new(Mutex::new(store)), host.managed_client()?)
            } else {
                (Arc::new(NoLocalInstallations), None)
            };
        let mut resolver = Resolver::new(local, managed);
        if let Some(task_id) = self.task_id {
            resolver = resolver.with_task_id(task_id);
        }
        host.step(&match self.specs.len() {
            1 => "resolving 1 MCP spec…".to_owned(),
            n => format!("resolving {n} MCP specs…"),
        });
        let session = Session::resolve(resolver, self.specs, secrets, env)
            .await?
            .with_pass_env(&self.pass_env);
        tether_log::register(session.sensitive_values());
        Ok(session)
    }

    /// [`SessionBuilder::resolve`], then the host's stored bearer tokens applied; every
    /// value the session holds is registered for masking.
    pub async fn build<H: SpecHost>(
        self,
        secrets: Secrets,
        env: impl EnvLookup + Send + Sync + 'static,
        host: &H,
    ) -> Result<Session, H::Error> {
        let session = self.resolve(secrets, env, host).await?;
        let session = host.apply_tokens(session).await;
        tether_log::register(session.sensitive_values());
        Ok(session)
    }
}
