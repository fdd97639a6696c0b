//! Building a launch config from a registry entry: the values a user gave (or the entry's
//! defaults) put into `runtimeArguments`, `packageArguments`, `environmentVariables`, headers
//! and URL variables, every secret left as a `{{NAME}}` placeholder that is filled at run time.
//!
//! The result is one server in tether's own MCP config shape (`command`/`args`/`env`, or
//! `type`/`url`/`headers`), so it installs, renders and launches like a hand-written one.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use tether_config::placeholder::{Segment, segments};

use crate::model::{Argument, Input, KeyValueInput, Package, Remote};
use crate::show::{is_python_runner, pinned, python_module, runner};

/// What a user supplied: non-secret values by input name (repeatable inputs may have several),
/// and the names of the secrets that will be supplied at run time.
#[derive(Debug, Default, Clone)]
pub struct Answers {
    /// `--set NAME=VALUE`, in order, by name.
    pub values: BTreeMap<String, Vec<String>>,
    /// Names given with `--secret` (their values never reach this crate).
    pub secrets: Vec<String>,
}

impl Answers {
    /// Adds `value` for the input `name` (after any it has: a repeatable input takes several).
    pub fn set(&mut self, name: &str, value: &str) {
        self.values
            .entry(name.to_owned())
            .or_default()
            .push(value.to_owned());
    }

    /// Records that the secret `name` will be supplied (once, however often it is said).
    pub fn secret(&mut self, name: &str) {
        if !self.secrets.iter().any(|s| s == name) {
            self.secrets.push(name.to_owned());
        }
    }
}

/// An input the entry requires that has no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingInput {
    /// The input's name (what `--set`/`--secret` take).
    pub name: String,
    /// Whether it is a secret (so `--secret`, not `--set`).
    pub secret: bool,
    /// Its description.
    pub description: Option<String>,
}

impl BuildError {
    /// The message for the user: for missing inputs, one line per input with the flag that
    /// gives it (`--secret NAME=SOURCE` or `--set NAME=VALUE`) and its description.
    pub fn usage_text(&self) -> String {
        let BuildError::Missing(missing) = self else {
            return self.to_string();
        };
        let mut text = String::from("the entry needs values for:");
        for input in missing {
            let flag = if input.secret {
                format!("--secret {}=SOURCE", input.name)
            } else {
                format!("--set {}=VALUE", input.name)
            };
            let description = input.description.as_deref().map(|d| format!("  ({d})"));
            text.push_str(&format!("\n  {flag}{}", description.unwrap_or_default()));
        }
        text
    }
}

/// Why a config could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// Required inputs without a value; the caller asks for them or lists them.
    #[error("missing required inputs: {}", .0.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(", "))]
    Missing(Vec<MissingInput>),
    /// A value outside the input's `choices`, or not of its `format`.
    #[error("{name}: {reason}")]
    Invalid {
        /// The input.
        name: String,
        /// What is wrong (names the allowed choices or the format, never echoes a secret).
        reason: String,
    },
    /// A value was given for a secret input with `--set` (it would be stored in plain text).
    #[error("{0} is a secret: give it with --secret {0}=SOURCE, not --set")]
    SecretGivenAsValue(String),
    /// The entry's package identifier or version is one its runner would read as something else
    /// (an option: `npx -y --call=…` runs a command; a second word). Refused: a hostile or broken
    /// entry; the caller says which field.
    #[error("the entry's package {field} {value:?} {reason}; tether does not run it")]
    UnsafePackage {
        /// `identifier` or `version`.
        field: &'static str,
        /// The published value (registry data, not a secret), escaped when shown.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Text of the config that is not one of the entry's secret inputs reads as a `{{NAME}}`
    /// placeholder (a published `{{PATH_TO_SRC}}`, an answer holding `{{GITHUB_TOKEN}}`).
    /// Everything but a secret input's placeholder is literal, and tether's configs have no
    /// literal form for such text, so the config is not built: it would hand the secret NAME
    /// of a run to this server.
    #[error(
        "the entry's text {{{{{0}}}}} reads as a tether secret placeholder, and {0} is none of its secret inputs; tether passes a registry's values literally and cannot pass this one, so it does not run it"
    )]
    ForeignPlaceholder(String),
    /// A bundle's launch runs a script (an interpreter's first argument) that is not one of
    /// the bundle's own files (`${HOME}/project/x.js`, `${__dirname}/../../…`): the sandbox
    /// grants a script's package, so such a path would hand the server someone else's files.
    #[error(
        "the bundle runs the script {0:?}, which is outside the bundle; tether runs a bundle's own files only"
    )]
    OutsideBundle(String),
    /// tether cannot launch this kind of package yet; the caller offers another option.
    #[error("{0} cannot be added yet")]
    Unsupported(String),
}

/// A built config: the server's JSON and the placeholders a run must fill.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltConfig {
    /// One server in tether's MCP config shape.
    pub server: Value,
    /// The `{{NAME}}` placeholders in it (secrets), sorted.
    pub placeholders: Vec<String>,
}

/// A secret input, as [`secret_values`] needs it.
pub(crate) struct SecretInput<'a> {
    pub name: &'a str,
    pub required: bool,
    pub description: Option<&'a str>,
}

/// The values of a secret input: its `{{NAME}}` placeholder (filled at run time) when it is
/// supplied with `--secret` or required — a required one not supplied is recorded in
/// `missing` — and nothing for an optional one not supplied. A `--set` value for it is refused:
/// it would be stored in plain text.
pub(crate) fn secret_values(
    input: SecretInput<'_>,
    answers: &Answers,
    missing: &mut Vec<MissingInput>,
    placeholders: &mut Vec<String>,
) -> Result<Vec<String>, BuildError> {
    let name = input.name;
    if answers.values.contains_key(name) {
        return Err(BuildError::SecretGivenAsValue(name.to_owned()));
    }
    let supplied = answers.secrets.iter().any(|s| s == name);
    if !supplied && !input.required {
        return Ok(Vec::new());
    }
    if !supplied {
        missing.push(MissingInput {
            name: name.to_owned(),
            secret: true,
            description: input.description.map(str::to_owned),
        });
    }
    if !placeholders.iter().any(|p| p == name) {
        placeholders.push(name.to_owned());
    }
    Ok(vec![format!("{{{{{name}}}}}")])
}

struct Builder<'a> {
    answers: &'a Answers,
    missing: Vec<MissingInput>,
    placeholders: Vec<String>,
    /// Resolved values by input name, for `{name}` in transport URLs.
    resolved: BTreeMap<String, String>,
}

impl Builder<'_> {
    /// The values of one input: the user's, else a secret placeholder, else (required or
    /// with a default) its default; empty when optional and not given.
    fn values(&mut self, name: &str, input: &Input) -> Result<Vec<String>, BuildError> {
        let given = self.answers.values.get(name);
        if input.is_secret {
            return secret_values(
                SecretInput {
                    name,
                    required: input.is_required,
                    description: input.description.as_deref(),
                },
                self.answers,
                &mut self.missing,
                &mut self.placeholders,
            );
        }
        let values = match given {
            Some(values) => values.clone(),
            None => match &input.default {
                Some(default) if input.is_required => vec![default.clone()],
                _ if input.is_required => {
                    self.missing.push(MissingInput {
                        name: name.to_owned(),
                        secret: false,
                        description: input.description.clone(),
                    });
                    vec![String::new()]
                }
                _ => Vec::new(),
            },
        };
        for value in &values {
            validate(name, input, value)?;
        }
        if let Some(first) = values.first() {
            self.resolved.insert(name.to_owned(), first.clone());
        }
        Ok(values)
    }

    /// A value template (`{name}` → the variable's value), once per combination of repeated
    /// variable values (the first variable drives the repetition).
    fn template(
        &mut self,
        template: &str,
        variables: &BTreeMap<String, Input>,
    ) -> Result<Vec<String>, BuildError> {
        let mut resolved: Vec<(String, Vec<String>)> = Vec::new();
        for (name, input) in variables {
            let values = self.values(name, input)?;
            resolved.push((name.clone(), values));
        }
        let count = resolved
            .iter()
            .map(|(_, v)| v.len())
            .max()
            .unwrap_or(1)
            .max(1);
        if resolved.iter().any(|(_, v)| v.is_empty()) {
            return Ok(Vec::new());
        }
        Ok((0..count)
            .map(|i| {
                let mut text = template.to_owned();
                for (name, values) in &resolved {
                    let value = values.get(i).or(values.last()).map_or("", String::as_str);
                    text = text.replace(&format!("{{{name}}}"), value);
                }
                text
            })
            .collect())
    }

    /// The values of an input that may have a fixed `value` with variables.
    fn input_values(&mut self, name: &str, input: &Input) -> Result<Vec<String>, BuildError> {
        match &input.value {
            Some(template) => self.template(template, &input.variables),
            None => self.values(name, input),
        }
    }

    fn arguments(
        &mut self,
        arguments: &[Argument],
        argv: &mut Vec<String>,
    ) -> Result<(), BuildError> {
        for argument in arguments {
            let label = match argument.kind.as_str() {
                "named" => argument.label().to_owned(),
                _ => argument
                    .value_hint
                    .clone()
                    .unwrap_or_else(|| argument.label().to_owned()),
            };
            let mut values = self.input_values(&label, &argument.input)?;
            if !argument.is_repeated {
                values.truncate(1);
            }
            for value in values {
                match (&argument.name, argument.kind.as_str()) {
                    (Some(name), "named") => {
                        let flag = argument.input.value.is_none()
                            && argument.input.format.as_deref() == Some("boolean");
                        if flag {
                            if value == "true" {
                                argv.push(name.clone());
                            }
                        } else {
                            argv.push(name.clone());
                            argv.push(value);
                        }
                    }
                    _ => argv.push(value),
                }
            }
        }
        Ok(())
    }

    fn pairs(&mut self, items: &[KeyValueInput]) -> Result<Map<String, Value>, BuildError> {
        let mut map = Map::new();
        for item in items {
            if let Some(value) = self
                .input_values(&item.name, &item.input)?
                .into_iter()
                .next()
            {
                map.insert(item.name.clone(), Value::String(value));
            }
        }
        Ok(map)
    }

    /// A URL with its `{name}` variables replaced by their values.
    fn url(&self, template: &str) -> String {
        let mut url = template.to_owned();
        for (name, value) in &self.resolved {
            url = url.replace(&format!("{{{name}}}"), value);
        }
        url
    }

    fn finish(mut self, server: Value) -> Result<BuiltConfig, BuildError> {
        if !self.missing.is_empty() {
            return Err(BuildError::Missing(self.missing));
        }
        if let Some(name) = foreign_placeholder(&server, &self.placeholders) {
            return Err(BuildError::ForeignPlaceholder(name));
        }
        self.placeholders.sort();
        Ok(BuiltConfig {
            server,
            placeholders: self.placeholders,
        })
    }
}

/// The first `{{NAME}}` in any string of `server` (keys included) that is not one of `ours`:
/// text from the entry or an answer that would read as a placeholder.
fn foreign_placeholder(server: &Value, ours: &[String]) -> Option<String> {
    let foreign = |text: &str| {
        segments(text).find_map(|segment| match segment {
            Segment::Placeholder(name) if !ours.iter().any(|o| o == name) => Some(name.to_owned()),
            _ => None,
        })
    };
    match server {
        Value::String(text) => foreign(text),
        Value::Array(items) => items
            .iter()
            .find_map(|item| foreign_placeholder(item, ours)),
        Value::Object(map) => map
            .iter()
            .find_map(|(key, value)| foreign(key).or_else(|| foreign_placeholder(value, ours))),
        _ => None,
    }
}

fn validate(name: &str, input: &Input, value: &str) -> Result<(), BuildError> {
    let invalid = |reason: String| BuildError::Invalid {
        name: name.to_owned(),
        reason,
    };
    if !input.choices.is_empty() && !input.choices.iter().any(|c| c == value) {
        return Err(invalid(format!(
            "must be one of {}",
            input.choices.join(", ")
        )));
    }
    match input.format.as_deref() {
        Some("number") if value.parse::<f64>().is_err() => {
            Err(invalid("must be a number".to_owned()))
        }
        Some("boolean") if !matches!(value, "true" | "false") => {
            Err(invalid("must be true or false".to_owned()))
        }
        _ => Ok(()),
    }
}

/// The config for a package: its command line, and for a package that serves HTTP once
/// started (`streamable-http`/`sse`) the loopback URL as `"serves"`.
pub fn package_config(package: &Package, answers: &Answers) -> Result<BuiltConfig, BuildError> {
    if package.registry_type == "mcpb" && package.runtime_hint.is_none() {
        return Err(BuildError::Unsupported(
            "an mcpb bundle this way (`tether add --package mcpb` downloads, verifies and unpacks bundles)".to_owned(),
        ));
    }
    let serves = match package.transport.kind.as_str() {
        "stdio" => None,
        "streamable-http" | "http" => Some("http"),
        "sse" => Some("sse"),
        other => {
            return Err(BuildError::Unsupported(format!(
                "a {} package with the transport {other:?}",
                package.registry_type
            )));
        }
    };
    check_word("identifier", &package.identifier)?;
    if let Some(version) = &package.version {
        check_word("version", version)?;
    }
    let mut builder = Builder {
        answers,
        missing: Vec::new(),
        placeholders: Vec::new(),
        resolved: BTreeMap::new(),
    };
    let runner = runner(package);
    check_runner(&runner)?;
    if is_python_runner(&runner) && package.registry_type != "pypi" {
        return Err(BuildError::UnsafePackage {
            field: "runtimeHint",
            value: runner,
            reason: "runs only a PyPI package (as a module)",
        });
    }
    let mut args = Vec::new();
    if is_container_runner(&runner) {
        args.extend(["run".to_owned(), "-i".to_owned(), "--rm".to_owned()]);
    }
    let own = args.len();
    builder.arguments(&package.runtime_arguments, &mut args)?;
    let given: Vec<&str> = answers
        .values
        .values()
        .flatten()
        .map(String::as_str)
        .collect();
    check_runtime_arguments(&runner, args.get(own..).unwrap_or_default(), &given)?;
    let python = is_python_runner(&runner);
    if python {
        check_python_arguments(package, args.get(own..).unwrap_or_default())?;
    }
    let env = builder.pairs(&package.environment_variables)?;
    if is_container_runner(&runner) {
        // The container sees only what `-e NAME` passes through.
        for name in env.keys() {
            args.extend(["-e".to_owned(), name.clone()]);
        }
    }
    if matches!(runner.as_str(), "npx" | "bunx") {
        args.push("-y".to_owned());
    }
    if python {
        // The package is installed in the interpreter (or its venv): it runs as its module.
        if !args.iter().skip(own).any(|a| a == "-m") {
            args.extend(["-m".to_owned(), python_module(package)]);
        }
    } else {
        args.push(pinned(package, &runner));
    }
    if runner == "dnx" {
        args.push("--yes".to_owned());
    }
    builder.arguments(&package.package_arguments, &mut args)?;
    let mut server = json!({ "command": runner, "args": args });
    if !env.is_empty() {
        server["env"] = Value::Object(env);
    }
    if let Some(kind) = serves {
        server["serves"] = json!({ "type": kind, "url": served_url(package, &builder)? });
    }
    builder.finish(server)
}

/// The loopback URL an HTTP-port package serves at once started: the transport's URL with its
/// `{variables}` filled and `localhost` as `127.0.0.1` (what tether dials).
fn served_url(package: &Package, builder: &Builder<'_>) -> Result<String, BuildError> {
    if !package.transport.headers.is_empty() {
        return Err(BuildError::Unsupported(format!(
            "a {} package serving {} with transport headers (not built yet)",
            package.registry_type, package.transport.kind
        )));
    }
    let published = package.transport.url.as_deref().unwrap_or_default();
    let url = builder
        .url(published)
        .replacen("://localhost", "://127.0.0.1", 1);
    tether_config::ServedUrl::check(&url).map_err(|why| {
        BuildError::Unsupported(format!(
            "a {} package serving {} at {published:?}: the URL {why}",
            package.registry_type, package.transport.kind
        ))
    })?;
    Ok(url)
}

/// A package identifier or version becomes one argument of the runner's command line, right
/// after the runner's own options: it must read as a package, never as an option or as more
/// than one word.
/// The runners a registry package may name (`runtimeHint`): package runners, container
/// engines, and a Python interpreter for a PyPI package run as its module (`-m MODULE`, see
/// [`check_python_arguments`]). Anything else (`sh`, `node`, a path) would run what the entry
/// says, as it says.
pub const RUNNERS: [&str; 11] = [
    "npx", "bunx", "pnpm", "uvx", "uv", "pipx", "dnx", "docker", "podman", "python", "python3",
];

/// Container engines: their package runs in a container, not in tether's sandbox.
pub fn is_container_runner(runner: &str) -> bool {
    matches!(runner, "docker" | "podman")
}

fn check_runner(runner: &str) -> Result<(), BuildError> {
    if RUNNERS.contains(&runner) {
        return Ok(());
    }
    Err(BuildError::UnsafePackage {
        field: "runtimeHint",
        value: runner.to_owned(),
        reason: "is not a package runner tether knows (npx, bunx, pnpm, uvx, uv, pipx, dnx, docker, podman, python, python3)",
    })
}

/// Options of a container engine's `run` a registry's runtime arguments may pass: an
/// environment variable, and the flags tether passes itself. A mount, `--privileged`, the
/// host's pid or network namespace, a capability or a device would undo the container.
const CONTAINER_FLAGS: [&str; 4] = ["-i", "--interactive", "--rm", "--init"];

/// Options of a package runner that make it run something else than the pinned package: a
/// command (`npx --call`), another package (`--package`, `uvx --from`, `--with`).
const RUNNER_CODE_FLAGS: [&str; 10] = [
    "-c",
    "--call",
    "-p",
    "--package",
    "--from",
    "--with",
    "--with-editable",
    "--with-requirements",
    "--node-options",
    "--script-shell",
];

/// Interpreter flags a registry may give a Python runner before `-m`: none of them runs code
/// or reads a file (`-c`, `-X`, `-W`, a script path are refused).
const PYTHON_FLAGS: [&str; 6] = ["-u", "-B", "-s", "-E", "-I", "-O"];

/// Refuses a Python runner's runtime arguments unless they are [`PYTHON_FLAGS`] and, last and
/// at most once, `-m MODULE` where `MODULE` is the package's own module or one of its
/// submodules ([`python_module`]): the entry runs its package, never code or another module
/// (`-m pip`, `-m http.server`).
fn check_python_arguments(package: &Package, args: &[String]) -> Result<(), BuildError> {
    let refused = |value: &str, reason: &'static str| BuildError::UnsafePackage {
        field: "runtime argument",
        value: value.to_owned(),
        reason,
    };
    let own = python_module(package);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if PYTHON_FLAGS.contains(&arg.as_str()) {
            continue;
        }
        if arg != "-m" {
            return Err(refused(
                arg,
                "is not an interpreter option tether passes to Python (-u, -B, -s, -E, -I, -O, then -m MODULE)",
            ));
        }
        let module = args.next().ok_or_else(|| refused(arg, "lacks its value"))?;
        let submodule = module
            .strip_prefix(own.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'));
        if !submodule {
            return Err(refused(module, "is not the package's own module"));
        }
        if let Some(more) = args.next() {
            return Err(refused(
                more,
                "follows -m MODULE (package arguments go after it)",
            ));
        }
    }
    Ok(())
}

/// Refuses a registry's runtime arguments that reach past the package: for a container, all
/// but [`CONTAINER_FLAGS`], `-e`/`--env NAME[=VALUE]` and a bind mount of a path the user gave
/// (`--mount type=bind,src=PATH,…` or `-v PATH:…`, `PATH` one of `given`, the user's answers);
/// for a package runner, the options of [`RUNNER_CODE_FLAGS`] (also as `--flag=value`).
fn check_runtime_arguments(
    runner: &str,
    args: &[String],
    given: &[&str],
) -> Result<(), BuildError> {
    let refused = |value: &str, reason: &'static str| BuildError::UnsafePackage {
        field: "runtime argument",
        value: value.to_owned(),
        reason,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if is_container_runner(runner) {
            if arg == "-e" || arg == "--env" {
                if args.next().is_none() {
                    return Err(refused(arg, "lacks its value"));
                }
            } else if arg == "--mount" || arg == "-v" || arg == "--volume" {
                let value = args.next().ok_or_else(|| refused(arg, "lacks its value"))?;
                if !user_mount(arg, value, given) {
                    return Err(refused(
                        value,
                        "mounts a path the user did not give (only a bind mount of an answered path passes)",
                    ));
                }
            } else if !CONTAINER_FLAGS.contains(&arg.as_str()) && !arg.starts_with("--env=") {
                return Err(refused(
                    arg,
                    "is not a container option tether passes (-e/--env NAME, -i, --rm, --init)",
                ));
            }
        } else {
            let flag = arg.split_once('=').map_or(arg.as_str(), |(flag, _)| flag);
            if RUNNER_CODE_FLAGS.contains(&flag) {
                return Err(refused(
                    arg,
                    "makes the runner run something else than the package",
                ));
            }
        }
    }
    Ok(())
}

/// Whether `value` of `flag` (`--mount` or `-v`) bind-mounts a path the user gave and nothing
/// else: `type=bind,src=PATH[,dst=…][,readonly]` or `PATH:DEST[:ro]`.
fn user_mount(flag: &str, value: &str, given: &[&str]) -> bool {
    if flag != "--mount" {
        return value
            .split_once(':')
            .is_some_and(|(source, _)| given.contains(&source));
    }
    let mut source = None;
    for field in value.split(',') {
        match field.split_once('=') {
            Some(("type", "bind")) | Some(("dst" | "destination" | "target", _)) => {}
            Some(("src" | "source", path)) => source = Some(path),
            None if field == "readonly" || field == "ro" => {}
            _ => return false,
        }
    }
    source.is_some_and(|path| given.contains(&path))
}

fn check_word(field: &'static str, value: &str) -> Result<(), BuildError> {
    let reason = if value.is_empty() {
        Some("is empty")
    } else if value.starts_with('-') {
        Some("starts with '-' (the runner would read it as an option)")
    } else if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("holds white space or a control character")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(BuildError::UnsafePackage {
            field,
            value: value.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// `url` without the query parameters whose value is still one of `variables`' `{name}` (an
/// optional variable given no value): `?region={region}` is left out, not sent literally.
fn drop_unset_query(url: &str, variables: &BTreeMap<String, Input>) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let unset = |pair: &&str| {
        let value = pair.split_once('=').map_or("", |(_, v)| v);
        variables.keys().any(|name| value == format!("{{{name}}}"))
    };
    let kept: Vec<&str> = query.split('&').filter(|pair| !unset(pair)).collect();
    if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

/// The config for a remote.
pub fn remote_config(remote: &Remote, answers: &Answers) -> Result<BuiltConfig, BuildError> {
    let mut builder = Builder {
        answers,
        missing: Vec::new(),
        placeholders: Vec::new(),
        resolved: BTreeMap::new(),
    };
    for (name, variable) in &remote.variables {
        // A secret variable's value is its placeholder (`{{NAME}}`, filled at run time).
        if let Some(first) = builder.values(name, variable)?.into_iter().next() {
            builder.resolved.entry(name.clone()).or_insert(first);
        }
    }
    let url = drop_unset_query(&builder.url(&remote.url), &remote.variables);
    let headers = builder.pairs(&remote.headers)?;
    let kind = if remote.kind == "sse" { "sse" } else { "http" };
    let mut server = json!({ "type": kind, "url": url });
    if !headers.is_empty() {
        server["headers"] = Value::Object(headers);
    }
    builder.finish(server)
}
