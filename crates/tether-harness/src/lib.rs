//! Third-party harness formats: rendered MCP servers written the way Claude Code, Codex,
//! Gemini CLI, opencode, VS Code and Cursor read them.
//!
//! Two uses:
//! - [`export`]: the whole config as text, with real or masked values (`tether export`);
//! - [`export_with_references`]: the config with every sensitive value replaced by a reference
//!   to an environment variable the harness expands, plus the variables to set — so a run can
//!   hand the harness its servers with no secret in the file (`tether run -- claude …`).
//!
//! ```
//! use tether_config::{parse_config, EmptyEnv, Exposure, Origin, Secrets};
//! use tether_harness::{export, Format};
//!
//! let parsed = parse_config(r#"{"gh":{"command":"npx","env":{"TOKEN":"{{T}}"}}}"#, Origin::User)?;
//! let secrets: Secrets = [("T", "s3cret")].into_iter().collect();
//! let servers: Vec<_> = parsed.servers.into_iter()
//!     .map(|s| s.into_installation().render(&secrets, &EmptyEnv)).collect();
//! let text = export(&servers, Format::Claude, Exposure::Masked)?;
//! assert!(text.contains(r#""TOKEN": "********""#));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Invariant:** this crate does no I/O: it turns rendered servers into text and variables;
//! the CLI decides where they go.

#![deny(missing_docs)]

mod codex;
mod json_formats;

use std::fmt;

use tether_config::{Exposure, RenderedServer, RenderedText, SecretValue};

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// tether's portable JSON: `{"mcpServers": {name: {command,args,env[,cwd]} | {url,headers,type}}}`.
    Json,
    /// Claude Code (`--mcp-config`, `.mcp.json`).
    Claude,
    /// Codex CLI (`config.toml`, `[mcp_servers.NAME]`).
    Codex,
    /// Gemini CLI (`settings.json`, `mcpServers`).
    Gemini,
    /// opencode (`opencode.json`, `mcp`).
    Opencode,
    /// VS Code (`.vscode/mcp.json`, `servers`).
    Vscode,
    /// Cursor (`.cursor/mcp.json`, `mcpServers`).
    Cursor,
}

impl Format {
    /// Every format, in the order help text lists them.
    pub const ALL: [Format; 7] = [
        Format::Json,
        Format::Claude,
        Format::Codex,
        Format::Gemini,
        Format::Opencode,
        Format::Vscode,
        Format::Cursor,
    ];

    /// The format's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Claude => "claude",
            Format::Codex => "codex",
            Format::Gemini => "gemini",
            Format::Opencode => "opencode",
            Format::Vscode => "vscode",
            Format::Cursor => "cursor",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a config cannot be written in a format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HarnessError {
    /// The harness cannot express something a server needs (e.g. SSE for Codex). The user
    /// should use another harness for that server or drop it.
    #[error("MCP server '{server}': {harness} cannot {what}")]
    Unsupported {
        /// The server.
        server: String,
        /// The harness.
        harness: Format,
        /// What it cannot do.
        what: String,
    },
    /// `--no-secrets-on-disk` was asked, but this field can only be written inline.
    #[error(
        "MCP server '{server}': {harness} cannot read '{field}' from the environment, so its secret would have to be written to a (private, temporary) file; drop --no-secrets-on-disk to allow that"
    )]
    SecretWouldBeOnDisk {
        /// The server.
        server: String,
        /// The harness.
        harness: Format,
        /// The field (e.g. `args[1]`).
        field: String,
    },
}

/// How references to environment variables are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReferenceSyntax {
    /// `${NAME}` (Claude Code, Gemini CLI, VS Code's `${env:NAME}` is not used here).
    Dollar,
    /// `{env:NAME}` (opencode).
    OpencodeEnv,
}

/// The result of [`export_with_references`].
pub struct ReferencedExport {
    /// The config text. Holds no sensitive value unless `inlined` is not empty.
    pub text: String,
    /// Environment variables the harness process must get: name → value.
    pub env: Vec<(String, SecretValue)>,
    /// Fields whose secret had to be written into `text` (the harness cannot reference them):
    /// `server: field`. Empty unless the harness lacks references for some field.
    pub inlined: Vec<String>,
}

impl fmt::Debug for ReferencedExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReferencedExport")
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("inlined", &self.inlined)
            .finish_non_exhaustive()
    }
}

/// How field values are written while building a config.
pub(crate) enum Values<'a> {
    /// Real or masked values.
    Show(Exposure),
    /// Sensitive values become references; the values are collected.
    Refer {
        syntax: ReferenceSyntax,
        env: &'a mut Vec<(String, SecretValue)>,
    },
}

impl Values<'_> {
    /// The text for one field.
    pub(crate) fn write(&mut self, text: &RenderedText) -> String {
        match self {
            Values::Show(exposure) => text.show(*exposure),
            Values::Refer { syntax, env } => {
                let exposed = text.expose();
                if !text.is_sensitive() && !syntax.would_expand(&exposed) {
                    return exposed;
                }
                // Sensitive values, and plain ones the harness would otherwise expand, go
                // through the environment.
                let name = format!("TETHER_SECRET_{}", env.len() + 1);
                let value = match syntax {
                    ReferenceSyntax::Dollar => exposed,
                    // opencode pastes `{env:…}` text into the JSON before parsing it: the
                    // variable holds the JSON-escaped form so the parsed value is exact.
                    ReferenceSyntax::OpencodeEnv => json_escaped(&exposed),
                };
                env.push((name.clone(), SecretValue::new(value)));
                match syntax {
                    ReferenceSyntax::Dollar => format!("${{{name}}}"),
                    ReferenceSyntax::OpencodeEnv => format!("{{env:{name}}}"),
                }
            }
        }
    }
}

impl ReferenceSyntax {
    /// Whether the harness would rewrite `text` on its own: `$NAME`/`${NAME}` for Claude Code and
    /// Gemini CLI, `{env:…}`/`{file:…}` for opencode.
    fn would_expand(self, text: &str) -> bool {
        match self {
            ReferenceSyntax::Dollar => text.contains('$'),
            ReferenceSyntax::OpencodeEnv => text.contains("{env:") || text.contains("{file:"),
        }
    }
}

/// `text` as the inside of a JSON string literal (no surrounding quotes).
fn json_escaped(text: &str) -> String {
    let quoted = serde_json::Value::String(text.to_owned()).to_string();
    quoted[1..quoted.len() - 1].to_owned()
}

/// The config for `servers` in `format`, with real or masked values.
pub fn export(
    servers: &[RenderedServer],
    format: Format,
    exposure: Exposure,
) -> Result<String, HarnessError> {
    let mut values = Values::Show(exposure);
    match format {
        Format::Codex => {
            codex::config(servers, &mut codex::CodexValues::Show(exposure)).map(|c| c.text)
        }
        _ => json_formats::config(servers, format, &mut values),
    }
}

/// The config for `servers` in `format` with every sensitive value replaced by a reference to
/// an environment variable the harness expands, and those variables. Formats whose harness
/// cannot expand references in some field (Codex args, say) write that value inline and list
/// it in [`ReferencedExport::inlined`]; with `forbid_inline` that is an error instead.
pub fn export_with_references(
    servers: &[RenderedServer],
    format: Format,
    forbid_inline: bool,
) -> Result<ReferencedExport, HarnessError> {
    let mut env = Vec::new();
    match format {
        Format::Codex => {
            let mut values = codex::CodexValues::Refer {
                env: &mut env,
                forbid_inline,
            };
            let built = codex::config(servers, &mut values)?;
            Ok(ReferencedExport {
                text: built.text,
                env,
                inlined: built.inlined,
            })
        }
        Format::Opencode
        | Format::Claude
        | Format::Gemini
        | Format::Json
        | Format::Vscode
        | Format::Cursor => {
            let syntax = if format == Format::Opencode {
                ReferenceSyntax::OpencodeEnv
            } else {
                ReferenceSyntax::Dollar
            };
            let mut values = Values::Refer {
                syntax,
                env: &mut env,
            };
            let text = json_formats::config(servers, format, &mut values)?;
            Ok(ReferencedExport {
                text,
                env,
                inlined: Vec::new(),
            })
        }
    }
}
