//! MCP bundles (`mcpb`): the launch config of an unpacked bundle, from its `manifest.json`.
//!
//! A bundle's `server.mcp_config` (`command`, `args`, `env`, and `platform_overrides.linux` /
//! `darwin` / `win32` merged over them) is turned into one stdio server in tether's config
//! shape. Substitutions: `${__dirname}` → the unpacked directory; `${user_config.KEY}` → the
//! user's value for that input (a `sensitive` one becomes the `{{KEY}}` placeholder filled at
//! run time, so its value is never in the stored config); `${DESKTOP}`, `${DOCUMENTS}`,
//! `${DOWNLOADS}` → `HOME/Desktop` …, and `${HOME}` → HOME, with the home directory the caller
//! passes (nothing in a bundle's values is expanded later, so a `${HOME}` left there would reach
//! the server as is; an input's default keeps its text);
//! `${pathSeparator}` and `${/}` → `/`. An argument that is exactly `${user_config.KEY}` of a
//! `multiple` input becomes one argument per value, and is dropped when an optional input has
//! no value. Without `mcp_config`, the server type decides: `node ENTRY`, `python3 ENTRY`,
//! `uv run --directory DIR ENTRY`, or the binary itself.
//!
//! No I/O here: the caller downloads, verifies and unpacks the bundle, and reads the manifest.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::add::{Answers, BuildError, BuiltConfig, MissingInput, SecretInput, secret_values};

/// The parts of `manifest.json` a launch needs (unknown fields ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct Manifest {
    /// Machine-readable name.
    pub name: String,
    /// The bundle's version.
    #[serde(default)]
    pub version: Option<String>,
    /// How to run the server.
    pub server: ManifestServer,
    /// The inputs a user fills in, by key, in the manifest's order.
    #[serde(default)]
    pub user_config: indexmap::IndexMap<String, UserConfig>,
}

/// `server` of a manifest.
#[derive(Debug, Clone, Deserialize)]
pub struct ManifestServer {
    /// `node`, `python`, `binary` or `uv`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The main file, relative to the bundle.
    #[serde(default)]
    pub entry_point: Option<String>,
    /// The command line; optional for `uv`.
    #[serde(default)]
    pub mcp_config: Option<McpConfig>,
}

/// `server.mcp_config`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct McpConfig {
    /// The program.
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// Its environment.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Per-platform replacements (`linux`, `darwin`, `win32`).
    #[serde(default)]
    pub platform_overrides: BTreeMap<String, McpConfig>,
}

/// One `user_config` input.
#[derive(Debug, Clone, Deserialize)]
pub struct UserConfig {
    /// `string`, `number`, `boolean`, `directory` or `file`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// A title for people.
    #[serde(default)]
    pub title: Option<String>,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Whether a value must be given.
    #[serde(default)]
    pub required: bool,
    /// A secret: never stored in the config.
    #[serde(default)]
    pub sensitive: bool,
    /// Several values allowed.
    #[serde(default)]
    pub multiple: bool,
    /// The default (a string, number, boolean, or a list for `multiple`).
    #[serde(default)]
    pub default: Option<Value>,
    /// The smallest number allowed.
    #[serde(default)]
    pub min: Option<f64>,
    /// The largest number allowed.
    #[serde(default)]
    pub max: Option<f64>,
}

/// A program, its arguments and its environment, before substitution.
type CommandLine = (String, Vec<String>, BTreeMap<String, String>);

/// The platform key of this build (`linux`, `darwin`, `win32`).
fn platform() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        "windows" => "win32",
        _ => "linux",
    }
}

impl Manifest {
    /// Parses `manifest.json`; the error says what is wrong (serde's words, no values).
    pub fn parse(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    /// The input names (what `--set` and `--secret` take), in order.
    pub fn input_names(&self) -> Vec<String> {
        self.user_config.keys().cloned().collect()
    }

    /// The command, arguments and environment for this platform, before substitution.
    fn command_line(&self) -> Result<CommandLine, BuildError> {
        let base = self.server.mcp_config.clone().unwrap_or_default();
        let over = base.platform_overrides.get(platform()).cloned();
        let command = over
            .as_ref()
            .and_then(|o| o.command.clone())
            .or(base.command.clone());
        let args = over
            .as_ref()
            .and_then(|o| o.args.clone())
            .or(base.args.clone());
        let mut env = base.env.clone().unwrap_or_default();
        if let Some(extra) = over.and_then(|o| o.env) {
            env.extend(extra);
        }
        if let Some(command) = command {
            return Ok((command, args.unwrap_or_default(), env));
        }
        let entry = self.server.entry_point.clone().ok_or_else(|| {
            BuildError::Unsupported(format!(
                "the bundle {} (its manifest has neither server.mcp_config.command nor server.entry_point)",
                self.name
            ))
        })?;
        let in_bundle = format!("${{__dirname}}/{entry}");
        let (command, mut argv) = match self.server.kind.as_str() {
            "node" => ("node".to_owned(), vec![in_bundle]),
            "python" => ("python3".to_owned(), vec![in_bundle]),
            "uv" => (
                "uv".to_owned(),
                vec![
                    "run".to_owned(),
                    "--directory".to_owned(),
                    "${__dirname}".to_owned(),
                    entry,
                ],
            ),
            "binary" => (in_bundle, Vec::new()),
            other => {
                return Err(BuildError::Unsupported(format!(
                    "the bundle {} (server type {other:?})",
                    self.name
                )));
            }
        };
        argv.extend(args.unwrap_or_default());
        Ok((command, argv, env))
    }
}

/// The values of each input: the user's, a placeholder for a secret, else the default.
struct Values<'a> {
    answers: &'a Answers,
    missing: Vec<MissingInput>,
    placeholders: Vec<String>,
}

impl Values<'_> {
    fn of(&mut self, key: &str, input: &UserConfig) -> Result<Vec<String>, BuildError> {
        let given = self.answers.values.get(key);
        if input.sensitive {
            return secret_values(
                SecretInput {
                    name: key,
                    required: input.required,
                    description: input.description.as_deref().or(input.title.as_deref()),
                },
                self.answers,
                &mut self.missing,
                &mut self.placeholders,
            );
        }
        let values = match given {
            Some(values) => values.clone(),
            None => match input.default.as_ref().map(default_values) {
                Some(values) if !values.is_empty() => values,
                _ if input.required => {
                    self.missing.push(MissingInput {
                        name: key.to_owned(),
                        secret: false,
                        description: input.description.clone().or(input.title.clone()),
                    });
                    return Ok(vec![String::new()]);
                }
                _ => Vec::new(),
            },
        };
        if values.len() > 1 && !input.multiple {
            return Err(BuildError::Invalid {
                name: key.to_owned(),
                reason: "takes one value".to_owned(),
            });
        }
        for value in &values {
            validate(key, input, value)?;
        }
        Ok(values)
    }
}

/// A default as text values (a list gives several).
fn default_values(value: &Value) -> Vec<String> {
    match value {
        Value::Array(items) => items.iter().flat_map(default_values).collect(),
        Value::String(text) => vec![text.clone()],
        Value::Null => Vec::new(),
        other => vec![other.to_string()],
    }
}

fn validate(key: &str, input: &UserConfig, value: &str) -> Result<(), BuildError> {
    let invalid = |reason: String| BuildError::Invalid {
        name: key.to_owned(),
        reason,
    };
    match input.kind.as_str() {
        "number" => {
            let number: f64 = value
                .parse()
                .map_err(|_| invalid("must be a number".to_owned()))?;
            if input.min.is_some_and(|min| number < min)
                || input.max.is_some_and(|max| number > max)
            {
                return Err(invalid(format!(
                    "must be between {} and {}",
                    input.min.map_or("-∞".to_owned(), |m| m.to_string()),
                    input.max.map_or("∞".to_owned(), |m| m.to_string())
                )));
            }
            Ok(())
        }
        "boolean" if !matches!(value, "true" | "false") => {
            Err(invalid("must be true or false".to_owned()))
        }
        _ => Ok(()),
    }
}

/// `text` with every substitution but `${user_config.…}` applied.
fn fixed(text: &str, dir: &str, home: &str) -> String {
    text.replace("${__dirname}", dir)
        .replace("${DESKTOP}", &format!("{home}/Desktop"))
        .replace("${DOCUMENTS}", &format!("{home}/Documents"))
        .replace("${DOWNLOADS}", &format!("{home}/Downloads"))
        .replace("${HOME}", home)
        .replace("${pathSeparator}", "/")
        .replace("${/}", "/")
}

/// The script `command argv` runs, when `command` is an interpreter: the argument the
/// sandbox grants with its package (`tether_sandbox::script_index`).
fn interpreter_script<'a>(command: &str, argv: &'a [String]) -> Option<&'a str> {
    let name = command.rsplit('/').next().unwrap_or(command);
    if !tether_sandbox::is_interpreter(name) {
        return None;
    }
    tether_sandbox::script_index(argv).map(|index| argv[index].as_str())
}

/// Whether `path` (absolute, or relative to the bundle as the manifest's entry point is) is
/// inside `dir` once `.` and `..` are resolved by their text (no I/O: an unpacked bundle holds
/// no symbolic links).
fn inside(path: &str, dir: &str) -> bool {
    let full = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{dir}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in full.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    let dir: Vec<&str> = dir
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    parts.len() > dir.len() && parts.starts_with(&dir)
}

/// The launch config of the bundle unpacked in `dir`, for a user whose home directory is
/// `home` (what `${DESKTOP}` and its kin name).
pub fn bundle_config(
    manifest: &Manifest,
    dir: &str,
    home: &str,
    answers: &Answers,
) -> Result<BuiltConfig, BuildError> {
    let mut values = Values {
        answers,
        missing: Vec::new(),
        placeholders: Vec::new(),
    };
    let mut resolved: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (key, input) in &manifest.user_config {
        resolved.insert(key, values.of(key, input)?);
    }
    let substitute = |text: &str| -> String {
        let mut text = fixed(text, dir, home);
        for (key, list) in &resolved {
            let joined = list.join(",");
            text = text.replace(&format!("${{user_config.{key}}}"), &joined);
        }
        text
    };
    let (command, args, env) = manifest.command_line()?;
    let mut argv = Vec::new();
    for arg in &args {
        // A whole argument that is one input: one argument per value, none when unset.
        let whole = arg
            .strip_prefix("${user_config.")
            .and_then(|rest| rest.strip_suffix('}'))
            .and_then(|key| resolved.get(key));
        match whole {
            Some(list) => argv.extend(list.iter().cloned()),
            None => argv.push(substitute(arg)),
        }
    }
    let env: Map<String, Value> = env
        .iter()
        .map(|(name, value)| (name.clone(), Value::String(substitute(value))))
        .filter(|(_, value)| value.as_str().is_some_and(|v| !v.is_empty()))
        .collect();
    if !values.missing.is_empty() {
        return Err(BuildError::Missing(values.missing));
    }
    let command = substitute(&command);
    if let Some(script) = interpreter_script(&command, &argv)
        && !inside(script, dir)
    {
        return Err(BuildError::OutsideBundle(script.to_owned()));
    }
    let mut server = json!({ "command": command, "args": argv });
    if !env.is_empty() {
        server["env"] = Value::Object(env);
    }
    values.placeholders.sort();
    Ok(BuiltConfig {
        server,
        placeholders: values.placeholders,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn manifest(text: &str) -> Manifest {
        match Manifest::parse(text) {
            Ok(manifest) => manifest,
            Err(error) => panic!("{error}"),
        }
    }

    const FULL: &str = r#"{
        "manifest_version": "0.3", "name": "files", "version": "1.2.0",
        "author": {"name": "x"},
        "server": {"type": "node", "entry_point": "server/index.js",
            "mcp_config": {"command": "node",
                "args": ["${__dirname}/server/index.js", "--root", "${user_config.dirs}", "--size=${user_config.max}"],
                "env": {"API_KEY": "${user_config.api_key}", "CACHE": "${DOCUMENTS}${/}cache", "OPT": "${user_config.opt}"},
                "platform_overrides": {"win32": {"command": "node.exe"}}}},
        "user_config": {
            "dirs": {"type": "directory", "title": "Directories", "multiple": true, "required": true, "default": ["${HOME}/Desktop"]},
            "max": {"type": "number", "default": 10, "min": 1, "max": 100},
            "api_key": {"type": "string", "sensitive": true, "required": true, "description": "Your key"},
            "opt": {"type": "string"}
        }
    }"#;

    fn answers(values: &[(&str, &str)], secrets: &[&str]) -> Answers {
        let mut answers = Answers::default();
        for (name, value) in values {
            answers.set(name, value);
        }
        for name in secrets {
            answers.secret(name);
        }
        answers
    }

    #[test]
    fn mcp_config_with_user_config_defaults_secrets_and_repeated_values() {
        let built = bundle_config(
            &manifest(FULL),
            "/b/abc",
            "/home/u",
            &answers(&[], &["api_key"]),
        );
        let built = match built {
            Ok(built) => built,
            Err(error) => panic!("{error}"),
        };
        assert_eq!(
            built.server,
            json!({
                "command": "node",
                "args": ["/b/abc/server/index.js", "--root", "${HOME}/Desktop", "--size=10"],
                "env": {"API_KEY": "{{api_key}}", "CACHE": "/home/u/Documents/cache"}
            })
        );
        assert_eq!(built.placeholders, ["api_key"]);

        let built = bundle_config(
            &manifest(FULL),
            "/b",
            "/home/u",
            &answers(
                &[("dirs", "/a"), ("dirs", "/b c"), ("max", "5")],
                &["api_key"],
            ),
        );
        assert_eq!(
            built.map(|b| b.server["args"].clone()),
            Ok(json!([
                "/b/server/index.js",
                "--root",
                "/a",
                "/b c",
                "--size=5"
            ]))
        );
    }

    #[test]
    fn missing_invalid_and_secret_values_are_refused() {
        assert_eq!(
            bundle_config(&manifest(FULL), "/b", "/home/u", &answers(&[], &[])).map(|b| b.server),
            Err(BuildError::Missing(vec![MissingInput {
                name: "api_key".to_owned(),
                secret: true,
                description: Some("Your key".to_owned()),
            }]))
        );
        assert_eq!(
            bundle_config(
                &manifest(FULL),
                "/b",
                "/home/u",
                &answers(&[("max", "500")], &["api_key"])
            )
            .map(|b| b.server),
            Err(BuildError::Invalid {
                name: "max".to_owned(),
                reason: "must be between 1 and 100".to_owned()
            })
        );
        assert_eq!(
            bundle_config(
                &manifest(FULL),
                "/b",
                "/home/u",
                &answers(&[("api_key", "x")], &[])
            )
            .map(|b| b.server),
            Err(BuildError::SecretGivenAsValue("api_key".to_owned()))
        );
        assert_eq!(
            bundle_config(
                &manifest(FULL),
                "/b",
                "/home/u",
                &answers(&[("max", "1"), ("max", "2")], &["api_key"])
            )
            .map(|b| b.server),
            Err(BuildError::Invalid {
                name: "max".to_owned(),
                reason: "takes one value".to_owned()
            })
        );
    }

    #[test]
    fn a_script_outside_the_bundle_is_refused() {
        let with_args = |args: &str| {
            manifest(&format!(
                r#"{{"name": "b", "server": {{"type": "node", "mcp_config": {{"command": "node", "args": {args}}}}}}}"#
            ))
        };
        let answers = answers(&[], &[]);
        for args in [
            r#"["${HOME}/project/server.js"]"#,
            r#"["${__dirname}/../../../victim/id_rsa.js"]"#,
            r#"["--inspect", "/etc/passwd"]"#,
            r#"["${__dirname}/.."]"#,
        ] {
            let built = bundle_config(&with_args(args), "/b/dir", "/home/u", &answers);
            assert!(
                matches!(built, Err(BuildError::OutsideBundle(_))),
                "{args}: {built:?}"
            );
        }
        for args in [
            r#"["${__dirname}/server/index.js"]"#,
            r#"["--enable-source-maps", "${__dirname}/./a/../server.js", "--root", "/data"]"#,
            r#"["server/index.js"]"#,
        ] {
            let built = bundle_config(&with_args(args), "/b/dir", "/home/u", &answers);
            assert!(built.is_ok(), "{args}: {built:?}");
        }
        // Not an interpreter: its arguments are its own business (the sandbox grants none).
        let binary = manifest(
            r#"{"name": "b", "server": {"type": "binary", "mcp_config": {"command": "${__dirname}/bin/srv", "args": ["/etc/hosts"]}}}"#,
        );
        assert!(bundle_config(&binary, "/b/dir", "/home/u", &answers).is_ok());
    }

    #[test]
    fn without_mcp_config_the_server_type_decides() {
        let of = |kind: &str| {
            let text =
                format!(r#"{{"name":"n","server":{{"type":"{kind}","entry_point":"srv/main"}}}}"#);
            bundle_config(&manifest(&text), "/d", "/home/u", &Answers::default()).map(|b| b.server)
        };
        assert_eq!(
            of("node"),
            Ok(json!({"command": "node", "args": ["/d/srv/main"]}))
        );
        assert_eq!(
            of("python"),
            Ok(json!({"command": "python3", "args": ["/d/srv/main"]}))
        );
        assert_eq!(
            of("uv"),
            Ok(json!({"command": "uv", "args": ["run", "--directory", "/d", "srv/main"]}))
        );
        assert_eq!(
            of("binary"),
            Ok(json!({"command": "/d/srv/main", "args": []}))
        );
        assert!(matches!(of("java"), Err(BuildError::Unsupported(_))));
        let none = manifest(r#"{"name":"n","server":{"type":"node"}}"#);
        assert!(matches!(
            bundle_config(&none, "/d", "/home/u", &Answers::default()),
            Err(BuildError::Unsupported(_))
        ));
    }

    #[test]
    fn platform_overrides_replace_the_command_and_add_env() {
        let text = r#"{"name":"n","server":{"type":"binary","mcp_config":{
            "command":"${__dirname}/bin/srv","args":["a"],"env":{"A":"1"},
            "platform_overrides":{"linux":{"command":"${__dirname}/bin/srv-linux","env":{"B":"2"}},
                                  "darwin":{"command":"${__dirname}/bin/srv-mac","env":{"B":"2"}}}}}}"#;
        let built =
            bundle_config(&manifest(text), "/d", "/home/u", &Answers::default()).map(|b| b.server);
        let expected = if cfg!(target_os = "macos") {
            "/d/bin/srv-mac"
        } else {
            "/d/bin/srv-linux"
        };
        assert_eq!(
            built,
            Ok(json!({"command": expected, "args": ["a"], "env": {"A": "1", "B": "2"}}))
        );
    }
}
