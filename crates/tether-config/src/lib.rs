//! tether's MCP config core: parse every MCP config form, find `{{VAR}}` placeholders, apply
//! secrets in memory, and render exactly.
//!
//! The path every config takes: [`parse_config`] → [`ParsedServer::into_installation`] (or a
//! stored [`Installation`]) → [`Installation::render`] with the run's [`Secrets`] →
//! [`RenderedServer`], which launches a server or exports to a harness.
//!
//! ```
//! use tether_config::{parse_config, EmptyEnv, Exposure, Origin, Secrets};
//!
//! let text = r#"{"mcpServers":{"gh":{"command":"npx","args":["--token={{API_TOKEN}}"]}}}"#;
//! let parsed = parse_config(text, Origin::Managed)?;
//! let installation = parsed.servers.into_iter().next().unwrap().into_installation();
//! let secrets: Secrets = [("API_TOKEN", "real")].into_iter().collect();
//! let rendered = installation.render(&secrets, &EmptyEnv);
//! assert_eq!(rendered.to_json(Exposure::Real)["args"][0], "--token=real");
//! assert_eq!(rendered.to_json(Exposure::Masked)["args"][0], "--token=********");
//! # Ok::<(), tether_config::ConfigError>(())
//! ```
//!
//! **Invariant:** this crate does no I/O: no files, no network, no processes. It reads the
//! process environment only through [`ProcessEnv`], when a caller passes it.

#![deny(missing_docs)]

mod env_expand;
mod error;
mod json;
mod model;
mod parse;
pub mod placeholder;
mod printable;
mod provenance;
mod render;

pub use env_expand::{EmptyEnv, EnvLookup, ProcessEnv};
pub use error::ConfigError;
pub use json::MAX_CONFIG_BYTES;
pub use model::{
    Installation, Origin, ParsedServer, RemoteTemplate, RemoteTransport, ServedUrl, ServerOptions,
    ServerTemplate, StdioTemplate, TemplatableServer, Variable, VariableSource, VariableValue,
};
pub use parse::{
    ConfigWarning, InputPrompt, ParsedConfig, ServerReference, declares_servers, parse_config,
    raw_server_entries,
};
pub use printable::escape_controls;
pub use provenance::{is_credential_name, url_passwords};
pub use render::{Exposure, RenderedServer, RenderedText, RenderedTransport, render_server_map};
// The secret value, the masker and `--secret` parsing live in the bottom crate tether-secret;
// they are re-exported here under their old paths.
pub use tether_secret::{
    MASK, MIN_SECRET_LINE_BYTES, Masker, SHORT_SECRET_CHARS, SecretArg, SecretArgError,
    SecretSource, SecretValue, Secrets, is_invisible, mask_json, mask_known_values,
    parse_secret_args, printed_forms, shell_line,
};
