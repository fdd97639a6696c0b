//! The JSON formats: tether's own, Claude Code, Gemini CLI, opencode, VS Code, Cursor.

use serde_json::{Map, Value, json};
use tether_config::{
    RemoteTransport, RenderedServer, RenderedText, RenderedTransport, ServerOptions,
};

use crate::{Format, HarnessError, ServerOption, Values};

/// Builds the whole config for a JSON format.
pub(crate) fn config(
    servers: &[RenderedServer],
    format: Format,
    values: &mut Values<'_>,
    notes: &mut Vec<String>,
) -> Result<Value, HarnessError> {
    let mut map = Map::new();
    for server in servers {
        if server.options.disabled && disabled_key(format).is_none() {
            notes.push(crate::left_out_disabled(&server.name, format));
            continue;
        }
        if let Values::Show(shown) = values {
            shown.start_server(server);
        }
        let mut out = server_json(server, format, values)?;
        if let Values::Show(shown) = values
            && let Some(refusal) = shown.refusal(&server.name, format)
        {
            return Err(refusal);
        }
        if server.options.disabled
            && let Some((key, value)) = disabled_key(format)
        {
            out[key] = Value::Bool(value);
        }
        let lost = write_options(&server.options, format, &mut out);
        notes.extend(crate::left_out_options(&server.name, format, &lost));
        map.insert(server.name.clone(), out);
    }
    let mut root = Map::new();
    if format == Format::Opencode {
        root.insert("$schema".into(), json!("https://opencode.ai/config.json"));
    }
    root.insert(format.harness().servers_key.into(), Value::Object(map));
    Ok(Value::Object(root))
}

/// How a JSON format marks a server off: the key and the value it takes then. `None`: the
/// format has no such flag (Claude Code, Gemini CLI, VS Code and Cursor read every server in
/// the map).
fn disabled_key(format: Format) -> Option<(&'static str, bool)> {
    match format {
        Format::Json => Some(("disabled", true)),
        Format::Opencode => Some(("enabled", false)),
        Format::Claude | Format::Codex | Format::Gemini | Format::Vscode | Format::Cursor => None,
    }
}

/// Writes the options `format` can express into `out`; returns those it cannot.
fn write_options(options: &ServerOptions, format: Format, out: &mut Value) -> Vec<ServerOption> {
    if format == Format::Json {
        options.write_json(out);
        return Vec::new();
    }
    let mut lost = Vec::new();
    for option in ServerOption::set_in(options) {
        match option_key(format, option) {
            Some(key) => out[key] = option_value(options, option),
            None => lost.push(option),
        }
    }
    lost
}

/// Where a JSON harness format keeps an option, if it has a place for it.
fn option_key(format: Format, option: ServerOption) -> Option<&'static str> {
    match (format, option) {
        (Format::Gemini, ServerOption::IncludeTools) => Some("includeTools"),
        (Format::Gemini, ServerOption::ExcludeTools) => Some("excludeTools"),
        (Format::Gemini, ServerOption::Trust) => Some("trust"),
        (Format::Gemini, ServerOption::Timeout) => Some("timeout"),
        // opencode's `timeout` bounds fetching the server's tools: its startup.
        (Format::Opencode, ServerOption::StartupTimeout) => Some("timeout"),
        _ => None,
    }
}

/// An option's value in the JSON formats (lists of names, booleans, milliseconds).
fn option_value(options: &ServerOptions, option: ServerOption) -> Value {
    match option {
        ServerOption::IncludeTools => json!(options.include_tools),
        ServerOption::ExcludeTools => json!(options.exclude_tools),
        ServerOption::AlwaysAllow => json!(options.always_allow),
        ServerOption::Trust => json!(options.trust),
        ServerOption::Timeout => json!(options.timeout_ms),
        ServerOption::StartupTimeout => json!(options.startup_timeout_ms),
        ServerOption::PassEnv => json!(options.pass_env),
    }
}

/// The key of a stdio server's environment in a JSON format.
pub(crate) fn stdio_env_key(format: Format) -> &'static str {
    match format {
        Format::Opencode => "environment",
        Format::Json
        | Format::Claude
        | Format::Codex
        | Format::Gemini
        | Format::Vscode
        | Format::Cursor => "env",
    }
}

/// A map of strings; `field` is its key in the config (`env`, `headers`), for refusals.
fn string_map(
    field: &str,
    map: &indexmap::IndexMap<String, RenderedText>,
    values: &mut Values<'_>,
) -> Map<String, Value> {
    map.iter()
        .map(|(k, v)| {
            let value = values.write(|| format!("{field}.{k}"), v);
            (k.clone(), Value::String(value))
        })
        .collect()
}

fn server_json(
    server: &RenderedServer,
    format: Format,
    values: &mut Values<'_>,
) -> Result<Value, HarnessError> {
    let unsupported = |what: &str| HarnessError::Unsupported {
        server: server.name.clone(),
        harness: format,
        what: what.to_owned(),
    };
    match &server.transport {
        RenderedTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let command = values.write(|| "command".to_owned(), command);
            let args: Vec<String> = args
                .iter()
                .enumerate()
                .map(|(i, a)| values.write(|| format!("args[{i}]"), a))
                .collect();
            let env = string_map("env", env, values);
            let cwd = cwd.as_ref().map(|c| values.write(|| "cwd".to_owned(), c));
            let mut out = match format {
                Format::Opencode => {
                    let mut argv = vec![command];
                    argv.extend(args);
                    json!({"type": "local", "command": argv, "environment": env, "enabled": true})
                }
                Format::Claude | Format::Vscode => {
                    json!({"type": "stdio", "command": command, "args": args, "env": env})
                }
                Format::Json | Format::Gemini | Format::Cursor | Format::Codex => {
                    json!({"command": command, "args": args, "env": env})
                }
            };
            if let Some(cwd) = cwd {
                match format {
                    Format::Json
                    | Format::Gemini
                    | Format::Vscode
                    | Format::Cursor
                    | Format::Claude => {
                        out["cwd"] = Value::String(cwd);
                    }
                    Format::Opencode | Format::Codex => {
                        return Err(unsupported(
                            "set a working directory (cwd) for a local server",
                        ));
                    }
                }
            }
            Ok(out)
        }
        RenderedTransport::Remote {
            url,
            headers,
            transport,
        } => {
            let url = values.write(|| "url".to_owned(), url);
            let headers = string_map("headers", headers, values);
            let kind = transport.type_name();
            Ok(match format {
                Format::Opencode => {
                    if *transport == RemoteTransport::Sse {
                        // opencode's remote type speaks Streamable HTTP and falls back to SSE.
                        tracing::debug!(server = %server.name, "opencode remote server uses SSE");
                    }
                    json!({"type": "remote", "url": url, "headers": headers, "enabled": true})
                }
                Format::Gemini => match transport {
                    // A URL the config gave without a type stays a `url`, which Gemini CLI
                    // reads as it reads the user's own (a guessed transport is not forced).
                    RemoteTransport::StreamableHttp if server.options.transport_guessed => {
                        json!({"url": url, "headers": headers})
                    }
                    RemoteTransport::StreamableHttp => json!({"httpUrl": url, "headers": headers}),
                    // `url` alone means "try Streamable HTTP, then SSE" to Gemini CLI's
                    // sessions, but `gemini mcp list` tries Streamable HTTP only: the type
                    // says which.
                    RemoteTransport::Sse => json!({"url": url, "type": "sse", "headers": headers}),
                },
                Format::Cursor => json!({"url": url, "headers": headers}),
                Format::Json | Format::Claude | Format::Vscode | Format::Codex => {
                    json!({"type": kind, "url": url, "headers": headers})
                }
            })
        }
    }
}
