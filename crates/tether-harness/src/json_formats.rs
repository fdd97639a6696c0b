//! The JSON formats: tether's own, Claude Code, Gemini CLI, opencode, VS Code, Cursor, GitHub
//! Copilot CLI, Claude Desktop, Windsurf, Zed, Goose (JSON is YAML too) and Antigravity.

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
        // Claude Desktop's file holds local servers only: a remote one is added in the app.
        if format == Format::ClaudeDesktop
            && matches!(server.transport, RenderedTransport::Remote { .. })
        {
            notes.push(format!(
                "MCP server '{}': Claude Desktop takes remote servers under Settings → Connectors, not in its config file: left out of the {format} config (`tether export --gateway --format {format}` serves it through tether's gateway, a local server)",
                server.name
            ));
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
        Format::Json | Format::Windsurf => Some(("disabled", true)),
        Format::Opencode | Format::Zed | Format::Goose => Some(("enabled", false)),
        Format::Claude
        | Format::Codex
        | Format::Gemini
        | Format::Vscode
        | Format::Cursor
        | Format::Copilot
        | Format::ClaudeDesktop
        | Format::Antigravity => None,
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
        // Copilot CLI: the tools to offer (`["*"]` unless set) and a timeout in milliseconds.
        (Format::Copilot, ServerOption::IncludeTools) => Some("tools"),
        (Format::Copilot, ServerOption::Timeout) => Some("timeout"),
        // Claude Code runs its `headersHelper` string with a shell: the words quoted back.
        (Format::Claude, ServerOption::HeadersHelper) => Some("headersHelper"),
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
        ServerOption::HeadersHelper => json!(
            options
                .headers_helper
                .as_deref()
                .and_then(tether_config::shell_line)
        ),
    }
}

/// The key of a stdio server's environment in a JSON format.
pub(crate) fn stdio_env_key(format: Format) -> &'static str {
    match format {
        Format::Opencode => "environment",
        Format::Goose => "envs",
        Format::Copilot
        | Format::ClaudeDesktop
        | Format::Windsurf
        | Format::Zed
        | Format::Antigravity
        | Format::Json
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
                Format::Copilot => json!({
                    "type": "local", "command": command, "args": args, "env": env, "tools": ["*"]
                }),
                Format::Zed => {
                    json!({"source": "custom", "command": command, "args": args, "env": env})
                }
                // Goose's extension entry: `enabled` beside the tagged config, which repeats
                // the name; 300 s is the timeout Goose's own `configure` writes.
                Format::Goose => json!({
                    "enabled": true, "type": "stdio", "name": server.name, "cmd": command,
                    "args": args, "envs": env, "timeout": 300
                }),
                Format::Json
                | Format::Gemini
                | Format::Cursor
                | Format::Codex
                | Format::ClaudeDesktop
                | Format::Windsurf
                | Format::Antigravity => json!({"command": command, "args": args, "env": env}),
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
                    Format::Opencode
                    | Format::Codex
                    | Format::Copilot
                    | Format::ClaudeDesktop
                    | Format::Windsurf
                    | Format::Zed
                    | Format::Goose
                    | Format::Antigravity => {
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
                Format::Cursor | Format::Zed => json!({"url": url, "headers": headers}),
                Format::Windsurf | Format::Antigravity => {
                    json!({"serverUrl": url, "headers": headers})
                }
                Format::Copilot => {
                    json!({"type": kind, "url": url, "headers": headers, "tools": ["*"]})
                }
                Format::Goose => match transport {
                    RemoteTransport::StreamableHttp => json!({
                        "enabled": true, "type": "streamable_http", "name": server.name,
                        "uri": url, "headers": headers, "envs": {}, "timeout": 300
                    }),
                    // Goose's SSE extension has no headers.
                    RemoteTransport::Sse if !headers.is_empty() => {
                        return Err(unsupported("send headers to an SSE server"));
                    }
                    RemoteTransport::Sse => json!({
                        "enabled": true, "type": "sse", "name": server.name, "uri": url,
                        "envs": {}, "timeout": 300
                    }),
                },
                // Left out by `config` with a note; refused if reached another way.
                Format::ClaudeDesktop => {
                    return Err(unsupported(
                        "connect to a remote server from its config file (add it under Settings → Connectors, or export it for another harness)",
                    ));
                }
                Format::Json | Format::Claude | Format::Vscode | Format::Codex => {
                    json!({"type": kind, "url": url, "headers": headers})
                }
            })
        }
    }
}
