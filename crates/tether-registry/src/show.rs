//! Show: one server's entry, and for each package and remote how it would launch — the
//! command line or URL with `<placeholders>` — and every input a user may have to supply.

use serde::Serialize;
use serde_json::Value;

use crate::client::{Endpoint, Freshness, OFFICIAL_NAME, Registries, SMITHERY_NAME, Source};
use crate::error::RegistryError;
use crate::model::{
    Argument, Input, KeyValueInput, Package, Remote, ServerList, ServerResponse,
    SmitheryConnection, SmitheryDetail,
};

/// What an input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InputKind {
    /// An environment variable.
    Env,
    /// A command-line argument (runtime or package).
    Argument,
    /// An HTTP header.
    Header,
    /// A `{name}` variable of a remote's URL.
    UrlVariable,
    /// A `{name}` variable inside another input's value (named by `of`).
    Variable,
    /// A key of a Smithery connection's config.
    Config,
}

impl InputKind {
    /// The word shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            InputKind::Env => "env",
            InputKind::Argument => "argument",
            InputKind::Header => "header",
            InputKind::UrlVariable => "url variable",
            InputKind::Variable => "variable",
            InputKind::Config => "config",
        }
    }
}

/// One thing a user may have to supply.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InputRow {
    /// What it is.
    pub kind: InputKind,
    /// Its name (env var, header, flag or value hint, variable).
    pub name: String,
    /// For a variable: the argument, env var or header whose value holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub of: Option<String>,
    /// Whether the server needs it.
    pub required: bool,
    /// Whether it is a secret.
    pub secret: bool,
    /// May be given more than once.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub repeated: bool,
    /// `string`, `number`, `boolean`, `filepath`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Used when none is given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// The only values accepted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<String>,
    /// An example.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
    /// What it is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// One way to use the server: a package or a remote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaunchOption {
    /// `npm`, `pypi`, `oci`, `nuget`, `mcpb`, …, or `remote`.
    pub kind: String,
    /// `stdio`, `streamable-http` or `sse` (Smithery: `stdio` or `http`).
    pub transport: String,
    /// The package and its pinned version, when a package.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    /// The command line, `<name>` standing for what a user supplies and `…` after a
    /// repeatable argument.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Its environment: `NAME=value`, `<NAME>` for what a user supplies, `[ ]` when optional.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Headers sent: `Name: value`, placeholders and brackets as for `env`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<String>,
    /// The URL (remote, or an HTTP package once started), with its `{variables}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// What else a user must know (mcpb download and checksum, Smithery's stdio).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Every input, required first.
    pub inputs: Vec<InputRow>,
}

/// What `show` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerDetails {
    /// Which API.
    pub source: Source,
    /// The name of the registry it came from (`official`, `smithery`, a configured one).
    pub registry: String,
    /// Where the answer came from.
    pub freshness: Freshness,
    /// The name.
    pub name: String,
    /// The title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The description.
    pub description: String,
    /// The version shown (official registry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Every published version, newest first (official registry; empty when unknown).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<String>,
    /// `active`, `deprecated`, `deleted`, with the registry's message.
    pub status: String,
    /// The registry's reason for the status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Website or homepage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub website: Option<String>,
    /// Source repository URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Packages, then remotes.
    pub options: Vec<LaunchOption>,
    /// The entry as the registry sent it (typed; unknown fields dropped).
    pub entry: Value,
}

/// A fixed value as `add` runs it: each `{name}` of one of its declared `variables` shown as
/// `<name>` (what a user supplies), every other character as published — `{{PATH_TO_SRC}}`,
/// `${VAR}` and `$VAR` are literal text, passed to the server as they are.
fn placeholders(template: &str, variables: &std::collections::BTreeMap<String, Input>) -> String {
    let mut out = template.to_owned();
    for name in variables.keys() {
        out = out.replace(&format!("{{{name}}}"), &format!("<{name}>"));
    }
    out
}

fn row(kind: InputKind, name: &str, of: Option<&str>, input: &Input, repeated: bool) -> InputRow {
    InputRow {
        kind,
        name: name.to_owned(),
        of: of.map(str::to_owned),
        required: input.is_required,
        secret: input.is_secret,
        repeated,
        format: input.format.clone(),
        default: input.default.clone(),
        choices: input.choices.clone(),
        placeholder: input.placeholder.clone(),
        description: input.description.clone(),
    }
}

/// The rows for one input: its variables when it has a fixed value, else itself.
fn collect(kind: InputKind, name: &str, input: &Input, repeated: bool, out: &mut Vec<InputRow>) {
    if input.value.is_some() {
        for (variable, inner) in &input.variables {
            out.push(row(
                InputKind::Variable,
                variable,
                Some(name),
                inner,
                repeated,
            ));
        }
    } else {
        out.push(row(kind, name, None, input, repeated));
    }
}

/// An argument's words: a fixed value as it is, `<hint>` for what a user supplies, `…` after
/// a repeatable one, and `[ ]` around an optional one that has no fixed value.
fn argument_tokens(argument: &Argument, out: &mut Vec<String>) {
    let hint = argument
        .value_hint
        .clone()
        .unwrap_or_else(|| argument.label().trim_start_matches('-').to_owned());
    let value = argument.input.value.as_deref().map_or_else(
        || format!("<{hint}>"),
        |value| placeholders(value, &argument.input.variables),
    );
    let mut words = Vec::with_capacity(2);
    match (argument.kind.as_str(), &argument.name) {
        ("named", Some(name)) => {
            words.push(name.clone());
            let flag_only = argument.input.value.is_none()
                && argument.input.format.as_deref() == Some("boolean");
            if !flag_only {
                words.push(value);
            }
        }
        _ => words.push(value),
    }
    if argument.input.value.is_none() && !argument.input.is_required {
        if let Some(first) = words.first_mut() {
            first.insert(0, '[');
        }
        if let Some(last) = words.last_mut() {
            last.push(']');
        }
    }
    out.extend(words);
    if argument.is_repeated {
        out.push("…".to_owned());
    }
}

/// The package pinned the way its runner spells it: `id@v` (npx, dnx), `id==v` (uvx),
/// `image:v` (docker, unless the reference has a tag or digest already), the bare identifier
/// without a version.
pub(crate) fn pinned(package: &Package, runner: &str) -> String {
    let identifier = &package.identifier;
    let Some(version) = package.version.as_deref() else {
        return identifier.clone();
    };
    match runner {
        "uvx" => format!("{identifier}=={version}"),
        "docker" | "podman" => {
            let tagged = identifier
                .rsplit('/')
                .next()
                .is_some_and(|last| last.contains(':'))
                || identifier.contains('@');
            if tagged {
                identifier.clone()
            } else {
                format!("{identifier}:{version}")
            }
        }
        "mcpb" => identifier.clone(),
        _ => format!("{identifier}@{version}"),
    }
}

/// Whether `runner` is a Python interpreter (`runtimeHint` `python` or `python3`): it runs an
/// installed PyPI package as a module (`-m MODULE`), never code of the entry's.
pub fn is_python_runner(runner: &str) -> bool {
    matches!(runner, "python" | "python3")
}

/// The module a PyPI package runs as under a Python runner: its identifier in lower case with
/// `-` and `.` as `_` (`mcp-server-fetch` → `mcp_server_fetch`).
pub fn python_module(package: &Package) -> String {
    package.identifier.to_lowercase().replace(['-', '.'], "_")
}

/// The runner of a package: its `runtimeHint`, else the registry type's.
pub fn runner(package: &Package) -> String {
    package
        .runtime_hint
        .clone()
        .unwrap_or_else(|| match package.registry_type.as_str() {
            "npm" => "npx".to_owned(),
            "pypi" => "uvx".to_owned(),
            "oci" => "docker".to_owned(),
            "nuget" => "dnx".to_owned(),
            other => other.to_owned(),
        })
}

/// `NAME=value` / `Name: value` lines for environment variables or headers: a fixed value
/// with `<variables>`, else `<NAME>`; in `[ ]` when optional without a fixed value.
fn assignments(items: &[KeyValueInput], separator: &str) -> Vec<String> {
    items
        .iter()
        .map(|item| {
            let value = item.input.value.as_deref().map_or_else(
                || format!("<{}>", item.name),
                |value| placeholders(value, &item.input.variables),
            );
            let line = format!("{}{separator}{value}", item.name);
            if item.input.value.is_none() && !item.input.is_required {
                format!("[{line}]")
            } else {
                line
            }
        })
        .collect()
}

/// How a package launches, as argv with placeholders (`None` for `mcpb`, which is downloaded).
pub fn package_command(package: &Package) -> Option<Vec<String>> {
    let runner = runner(package);
    if package.registry_type == "mcpb" && package.runtime_hint.is_none() {
        return None;
    }
    let mut argv = vec![runner.clone()];
    if runner == "docker" {
        argv.extend(["run".to_owned(), "-i".to_owned(), "--rm".to_owned()]);
    }
    for argument in &package.runtime_arguments {
        argument_tokens(argument, &mut argv);
    }
    if matches!(runner.as_str(), "npx" | "bunx") {
        argv.push("-y".to_owned());
    }
    if is_python_runner(&runner) {
        if !argv.iter().any(|a| a == "-m") {
            argv.extend(["-m".to_owned(), python_module(package)]);
        }
    } else {
        argv.push(pinned(package, &runner));
    }
    if runner == "dnx" {
        argv.push("--yes".to_owned());
    }
    for argument in &package.package_arguments {
        argument_tokens(argument, &mut argv);
    }
    Some(argv)
}

fn sort_inputs(inputs: &mut [InputRow]) {
    inputs.sort_by_key(|row| !row.required);
}

fn header_inputs(headers: &[KeyValueInput], out: &mut Vec<InputRow>) {
    for header in headers {
        collect(InputKind::Header, &header.name, &header.input, false, out);
    }
}

/// The launch option for a package.
pub fn package_option(package: &Package) -> LaunchOption {
    let mut inputs = Vec::new();
    for argument in package
        .runtime_arguments
        .iter()
        .chain(&package.package_arguments)
    {
        let label = argument
            .value_hint
            .as_deref()
            .filter(|_| argument.kind != "named")
            .unwrap_or(argument.label());
        collect(
            InputKind::Argument,
            label,
            &argument.input,
            argument.is_repeated,
            &mut inputs,
        );
    }
    for variable in &package.environment_variables {
        collect(
            InputKind::Env,
            &variable.name,
            &variable.input,
            false,
            &mut inputs,
        );
    }
    header_inputs(&package.transport.headers, &mut inputs);
    sort_inputs(&mut inputs);
    let note = (package.registry_type == "mcpb").then(|| {
        format!(
            "`tether add --package mcpb` downloads {}, checks its SHA-256 ({}), unpacks it and runs what its manifest names; the bundle's inputs are in its manifest",
            package.identifier,
            package.file_sha256.as_deref().unwrap_or("no checksum published")
        )
    });
    LaunchOption {
        kind: package.registry_type.clone(),
        transport: package.transport.kind.clone(),
        package: Some(pinned(package, &runner(package))),
        env: assignments(&package.environment_variables, "="),
        headers: assignments(&package.transport.headers, ": "),
        command: package_command(package),
        url: package.transport.url.clone(),
        note,
        inputs,
    }
}

/// The launch option for a remote.
pub fn remote_option(remote: &Remote) -> LaunchOption {
    let mut inputs = Vec::new();
    for (name, variable) in &remote.variables {
        collect(InputKind::UrlVariable, name, variable, false, &mut inputs);
    }
    header_inputs(&remote.headers, &mut inputs);
    sort_inputs(&mut inputs);
    LaunchOption {
        kind: "remote".to_owned(),
        transport: remote.kind.clone(),
        package: None,
        env: Vec::new(),
        headers: assignments(&remote.headers, ": "),
        command: None,
        url: Some(remote.url.clone()),
        note: None,
        inputs,
    }
}

pub(crate) fn schema_inputs(schema: Option<&Value>) -> Vec<InputRow> {
    let Some(schema) = schema else {
        return Vec::new();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|keys| keys.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut inputs: Vec<InputRow> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .map(|(name, property)| {
                    let text = |key: &str| {
                        property.get(key).and_then(|v| match v {
                            Value::String(s) => Some(s.clone()),
                            Value::Null => None,
                            other => Some(other.to_string()),
                        })
                    };
                    InputRow {
                        kind: InputKind::Config,
                        name: name.clone(),
                        of: None,
                        required: required.contains(&name.as_str()),
                        secret: false,
                        repeated: property.get("type").and_then(Value::as_str) == Some("array"),
                        format: text("type"),
                        default: text("default"),
                        choices: property
                            .get("enum")
                            .and_then(Value::as_array)
                            .map(|v| {
                                v.iter()
                                    .map(|c| {
                                        c.as_str().map_or_else(|| c.to_string(), str::to_owned)
                                    })
                                    .collect()
                            })
                            .unwrap_or_default(),
                        placeholder: None,
                        description: text("description"),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    sort_inputs(&mut inputs);
    inputs
}

fn smithery_option(detail: &SmitheryDetail, connection: &SmitheryConnection) -> LaunchOption {
    let http = connection.kind == "http";
    LaunchOption {
        kind: if http { "remote" } else { "local" }.to_owned(),
        transport: connection.kind.clone(),
        package: None,
        env: Vec::new(),
        headers: Vec::new(),
        command: None,
        url: if http {
            connection
                .deployment_url
                .clone()
                .or_else(|| connection.url.clone())
                .or_else(|| detail.deployment_url.clone())
        } else {
            None
        },
        note: (!http).then(|| {
            "Smithery publishes no command line for stdio servers; it runs them through its own CLI"
                .to_owned()
        }),
        inputs: schema_inputs(connection.config_schema.as_ref()),
    }
}

/// `show` of an official entry.
pub fn official_details(response: &ServerResponse, freshness: Freshness) -> ServerDetails {
    let server = &response.server;
    let official = response.meta.official.as_ref();
    let options = server
        .packages
        .iter()
        .map(package_option)
        .chain(server.remotes.iter().map(remote_option))
        .collect();
    ServerDetails {
        source: Source::Official,
        registry: OFFICIAL_NAME.to_owned(),
        freshness,
        name: server.name.clone(),
        title: server.title.clone(),
        description: server.description.clone(),
        version: Some(server.version.clone()),
        versions: Vec::new(),
        status: response.status().as_str().to_owned(),
        status_message: official.and_then(|o| o.status_message.clone()),
        website: server.website_url.clone(),
        repository: server.repository.as_ref().map(|r| r.url.clone()),
        options,
        entry: serde_json::to_value(server).unwrap_or(Value::Null),
    }
}

/// `show` of a Smithery entry.
pub fn smithery_details(detail: &SmitheryDetail, freshness: Freshness) -> ServerDetails {
    ServerDetails {
        source: Source::Smithery,
        registry: SMITHERY_NAME.to_owned(),
        freshness,
        name: detail.qualified_name.clone(),
        title: detail.display_name.clone(),
        description: detail.description.clone(),
        version: None,
        versions: Vec::new(),
        status: "active".to_owned(),
        status_message: None,
        website: None,
        repository: None,
        options: detail
            .connections
            .iter()
            .map(|c| smithery_option(detail, c))
            .collect(),
        entry: serde_json::to_value(detail).unwrap_or(Value::Null),
    }
}

/// An official-API entry and the name of the registry that had it.
pub type Found = (ServerResponse, Freshness, String);

impl Registries {
    /// One version (`None`: the latest) of an official-API entry: `REGISTRY:NAME` from that
    /// registry; a plain name from the first registry, in order, that has it (one that fails
    /// is passed over; when none has it, the first failure, else not found). A Smithery name
    /// (`@owner/name`, `smithery:NAME`) is its hosted remote ([`Registries::smithery_addable`]).
    pub async fn official_server(
        &self,
        name: &str,
        version: Option<&str>,
    ) -> Result<Found, RegistryError> {
        let (at, bare) = self.split(name)?;
        match at {
            Some(at) if at.source == Source::Smithery => self.smithery_addable(bare).await,
            None if bare.starts_with('@') => self.smithery_addable(bare).await,
            _ => self.official_only(name, version).await,
        }
    }

    /// [`Registries::official_server`] without Smithery: `REGISTRY:NAME` from that
    /// official-API registry, a plain name from the first one that has it.
    async fn official_only(
        &self,
        name: &str,
        version: Option<&str>,
    ) -> Result<Found, RegistryError> {
        let (at, name) = self.split(name)?;
        let candidates: Vec<&Endpoint> = match at {
            Some(at) => vec![at],
            None => self.officials.iter().collect(),
        };
        let mut failure = None;
        for at in candidates {
            match self.official_in(at, name, version).await {
                Ok((response, freshness)) => return Ok((response, freshness, at.name.clone())),
                Err(error @ RegistryError::NotFound { .. }) => {
                    failure.get_or_insert((false, error));
                }
                Err(error) => {
                    if !failure.as_ref().is_some_and(|(real, _)| *real) {
                        failure = Some((true, error));
                    }
                }
            }
        }
        Err(failure.map_or_else(
            || RegistryError::BadRegistry("no registry to ask".to_owned()),
            |(_, error)| error,
        ))
    }

    async fn official_in(
        &self,
        at: &Endpoint,
        name: &str,
        version: Option<&str>,
    ) -> Result<(ServerResponse, Freshness), RegistryError> {
        let url = self.url(
            at,
            &[
                "v0.1",
                "servers",
                name,
                "versions",
                version.unwrap_or("latest"),
            ],
            &[],
        );
        self.fetch(at, url, || RegistryError::NotFound {
            registry: at.title(),
            name: name.to_owned(),
            version: version.map(str::to_owned),
        })
        .await
    }

    /// Every version of an official-API entry in the registry named `registry`, newest first.
    pub async fn official_versions(
        &self,
        registry: &str,
        name: &str,
    ) -> Result<Vec<String>, RegistryError> {
        let at = self.endpoint(registry)?;
        let url = self.url(at, &["v0.1", "servers", name, "versions"], &[]);
        let (list, _): (ServerList, _) = self
            .fetch(at, url, || RegistryError::NotFound {
                registry: at.title(),
                name: name.to_owned(),
                version: None,
            })
            .await?;
        Ok(list.servers.into_iter().map(|s| s.server.version).collect())
    }

    /// The details of `found`, with its versions; a failure to list them leaves the list empty
    /// (the entry itself was found).
    async fn with_versions(&self, (response, freshness, registry): Found) -> ServerDetails {
        let mut details = official_details(&response, freshness);
        match self.official_versions(&registry, &details.name).await {
            Ok(versions) => details.versions = versions,
            Err(e) => tracing::debug!("cannot list the versions of {}: {e}", details.name),
        }
        details.registry = registry;
        details
    }

    /// A Smithery entry.
    pub async fn smithery_server(
        &self,
        name: &str,
    ) -> Result<(SmitheryDetail, Freshness), RegistryError> {
        if !self.smithery_enabled() {
            return Err(RegistryError::NoSmitheryKey);
        }
        let at = &self.smithery;
        let url = self.url(at, &["servers", name], &[]);
        self.fetch(at, url, || RegistryError::NotFound {
            registry: at.title(),
            name: name.to_owned(),
            version: None,
        })
        .await
    }

    /// `show NAME`: from the registry `source` names or `NAME`'s `REGISTRY:` prefix, else the
    /// official-API registries in order and then (not found, no version, with a key)
    /// Smithery.
    pub async fn show(
        &self,
        name: &str,
        version: Option<&str>,
        source: Option<&str>,
    ) -> Result<ServerDetails, RegistryError> {
        let (prefix, bare) = self.split(name)?;
        let at = match (prefix, source) {
            (Some(at), _) => Some(at),
            (None, Some(source)) => Some(self.endpoint(source)?),
            (None, None) => None,
        };
        match at {
            Some(at) if at.source == Source::Smithery => {
                let (detail, freshness) = self.smithery_server(bare).await?;
                Ok(smithery_details(&detail, freshness))
            }
            Some(at) => {
                let (response, freshness) = self.official_in(at, bare, version).await?;
                Ok(self
                    .with_versions((response, freshness, at.name.clone()))
                    .await)
            }
            None => match self.official_only(bare, version).await {
                Ok(found) => Ok(self.with_versions(found).await),
                Err(RegistryError::NotFound { .. })
                    if version.is_none() && self.smithery_enabled() =>
                {
                    let (detail, freshness) = self.smithery_server(bare).await?;
                    Ok(smithery_details(&detail, freshness))
                }
                Err(error) => Err(error),
            },
        }
    }
}
