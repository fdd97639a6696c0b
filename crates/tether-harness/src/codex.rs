//! Codex CLI's TOML: `[mcp_servers.NAME]` with `command`, `args`, `env`, `cwd` or `url`,
//! `http_headers`. Codex has no `${VAR}` interpolation; what it offers instead are
//! `env_vars` (names forwarded from its own environment to a stdio server) and
//! `env_http_headers` (header → name of an environment variable holding its value). Secrets in
//! any other field can only be written inline.

use tether_config::{
    Exposure, RemoteTransport, RenderedServer, RenderedText, RenderedTransport, SecretValue,
    ServerOptions,
};
use toml::{Table, Value};

use crate::{Format, HarnessError, ServerOption};

/// How values are written for Codex.
pub(crate) enum CodexValues<'a> {
    /// Real or masked values inline; counts the fields written masked.
    Show(Exposure, usize),
    /// Env and header secrets through Codex's environment forwarding; the rest inline (or an
    /// error with `forbid_inline`).
    Refer {
        env: &'a mut Vec<(String, SecretValue)>,
        forbid_inline: bool,
    },
}

impl CodexValues<'_> {
    /// How many fields were written masked.
    pub(crate) fn masked(&self) -> usize {
        match self {
            CodexValues::Show(_, masked) => *masked,
            CodexValues::Refer { .. } => 0,
        }
    }
}

/// A built Codex config.
pub(crate) struct CodexConfig {
    pub(crate) table: Table,
    pub(crate) inlined: Vec<String>,
    pub(crate) notes: Vec<String>,
}

pub(crate) fn config(
    servers: &[RenderedServer],
    values: &mut CodexValues<'_>,
) -> Result<CodexConfig, HarnessError> {
    let mut inlined = Vec::new();
    let mut notes = Vec::new();
    let mut all = Table::new();
    for server in servers {
        let mut table = Table::new();
        let mut inline = |field: &str,
                          text: &RenderedText,
                          values: &mut CodexValues<'_>|
         -> Result<Value, HarnessError> {
            match values {
                CodexValues::Show(exposure, masked) => {
                    if *exposure == Exposure::Masked && text.is_sensitive() {
                        *masked += 1;
                    }
                    Ok(Value::String(text.show(*exposure)))
                }
                CodexValues::Refer { forbid_inline, .. } => {
                    if text.is_sensitive() {
                        if *forbid_inline {
                            return Err(HarnessError::SecretWouldBeOnDisk {
                                server: server.name.clone(),
                                harness: Format::Codex,
                                field: field.to_owned(),
                            });
                        }
                        inlined.push(format!("{}: {field}", server.name));
                    }
                    Ok(Value::String(text.expose()))
                }
            }
        };
        match &server.transport {
            RenderedTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                table.insert("command".into(), inline("command", command, values)?);
                let mut arg_values = Vec::with_capacity(args.len());
                for (i, arg) in args.iter().enumerate() {
                    arg_values.push(inline(&format!("args[{i}]"), arg, values)?);
                }
                table.insert("args".into(), Value::Array(arg_values));
                let mut env_table = Table::new();
                let mut forwarded = Vec::new();
                for (key, value) in env {
                    match values {
                        CodexValues::Refer { env: out, .. }
                            if value.is_sensitive() && forwardable(out, key, value) =>
                        {
                            // Codex forwards the variable of the same name from its own
                            // environment to this server.
                            if !out.iter().any(|(k, _)| k == key) {
                                out.push((key.clone(), SecretValue::new(value.expose())));
                            }
                            forwarded.push(Value::String(key.clone()));
                        }
                        _ => {
                            env_table
                                .insert(key.clone(), inline(&format!("env.{key}"), value, values)?);
                        }
                    }
                }
                if !env_table.is_empty() {
                    table.insert("env".into(), Value::Table(env_table));
                }
                if !forwarded.is_empty() {
                    table.insert("env_vars".into(), Value::Array(forwarded));
                }
                if let Some(cwd) = cwd {
                    table.insert("cwd".into(), inline("cwd", cwd, values)?);
                }
            }
            RenderedTransport::Remote {
                url,
                headers,
                transport,
            } => {
                if *transport == RemoteTransport::Sse {
                    return Err(HarnessError::Unsupported {
                        server: server.name.clone(),
                        harness: Format::Codex,
                        what: "connect to an SSE server (it speaks Streamable HTTP only)"
                            .to_owned(),
                    });
                }
                table.insert("url".into(), inline("url", url, values)?);
                let mut plain = Table::new();
                let mut from_env = Table::new();
                for (name, value) in headers {
                    match values {
                        CodexValues::Refer { env: out, .. } if value.is_sensitive() => {
                            let var = format!("TETHER_SECRET_{}", out.len() + 1);
                            out.push((var.clone(), SecretValue::new(value.expose())));
                            from_env.insert(name.clone(), Value::String(var));
                        }
                        _ => {
                            plain.insert(
                                name.clone(),
                                inline(&format!("headers.{name}"), value, values)?,
                            );
                        }
                    }
                }
                if !plain.is_empty() {
                    table.insert("http_headers".into(), Value::Table(plain));
                }
                if !from_env.is_empty() {
                    table.insert("env_http_headers".into(), Value::Table(from_env));
                }
            }
        }
        if server.options.disabled {
            table.insert("enabled".into(), Value::Boolean(false));
        }
        let lost = write_options(&server.options, &mut table);
        notes.extend(crate::left_out_options(&server.name, Format::Codex, &lost));
        all.insert(server.name.clone(), Value::Table(table));
    }
    let mut root = Table::new();
    root.insert(
        Format::Codex.harness().servers_key.into(),
        Value::Table(all),
    );
    Ok(CodexConfig {
        table: root,
        inlined,
        notes,
    })
}

/// Writes the options Codex can express (`enabled_tools`, `disabled_tools`,
/// `tool_timeout_sec`, `startup_timeout_sec`) into a server's table; returns those it cannot.
fn write_options(options: &ServerOptions, table: &mut Table) -> Vec<ServerOption> {
    let strings =
        |items: &[String]| Value::Array(items.iter().cloned().map(Value::String).collect());
    let mut lost = Vec::new();
    for option in ServerOption::set_in(options) {
        match option {
            ServerOption::IncludeTools => {
                let include = options.include_tools.as_deref().unwrap_or_default();
                table.insert("enabled_tools".into(), strings(include));
            }
            ServerOption::ExcludeTools => {
                table.insert("disabled_tools".into(), strings(&options.exclude_tools));
            }
            ServerOption::Timeout => {
                let ms = options.timeout_ms.unwrap_or_default();
                table.insert("tool_timeout_sec".into(), seconds(ms));
            }
            ServerOption::StartupTimeout => {
                let ms = options.startup_timeout_ms.unwrap_or_default();
                table.insert("startup_timeout_sec".into(), seconds(ms));
            }
            // Codex's `env_vars` forwards variables from its own environment: the same thing.
            ServerOption::PassEnv => {
                let mut names = match table.remove("env_vars") {
                    Some(Value::Array(names)) => names,
                    _ => Vec::new(),
                };
                for name in &options.pass_env {
                    let name = Value::String(name.clone());
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
                table.insert("env_vars".into(), Value::Array(names));
            }
            ServerOption::AlwaysAllow | ServerOption::Trust | ServerOption::HeadersHelper => {
                lost.push(option)
            }
        }
    }
    lost
}

/// Milliseconds as TOML seconds: an integer when whole, else a float.
fn seconds(ms: u64) -> Value {
    if ms.is_multiple_of(1000) {
        Value::Integer(i64::try_from(ms / 1000).unwrap_or(i64::MAX))
    } else {
        Value::Float(ms as f64 / 1000.0)
    }
}

/// Whether `key` can be forwarded from Codex's environment with `value`: not yet used, or used
/// with the same value (two servers wanting different values under one name cannot share it).
fn forwardable(out: &[(String, SecretValue)], key: &str, value: &RenderedText) -> bool {
    match out.iter().find(|(k, _)| k == key) {
        None => true,
        Some((_, existing)) => existing.expose() == value.expose(),
    }
}
