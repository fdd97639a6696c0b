//! One `--mcp VALUE` read once: which form it is (a harness shorthand, a word that may name an
//! installation, a UUID, a file, inline JSON), and the task file's specs. Nothing here opens
//! the store: what only the store can decide is left as [`McpArg::Name`].

use std::path::Path;

use serde_json::Value;
use uuid::Uuid;

use super::error::SpecError;
use super::shorthand;
use crate::error::DriverError;
use crate::spec::{McpSpec, server_map_to_specs};

/// What one `--mcp` value is.
pub(super) enum McpArg {
    /// A harness's config files (`claude:`), each a spec.
    Harness(Vec<McpSpec>),
    /// A word an installation may be called: the store decides. `otherwise` is the value read
    /// as a UUID, file or JSON spec, for when no installation is called that.
    Name {
        name: String,
        otherwise: Result<McpSpec, DriverError>,
    },
    /// A UUID, a file or inline JSON (or why the value is none of them).
    Spec(Result<McpSpec, DriverError>),
}

impl McpArg {
    /// Reads `value`: a harness shorthand's files now (its errors are final), anything else
    /// as a UUID, file or JSON spec, kept beside the name it may also be.
    pub(super) fn parse(value: &str) -> Result<Self, SpecError> {
        if let Some(specs) = shorthand::specs(value)? {
            return Ok(McpArg::Harness(specs));
        }
        let name = value.trim();
        let spec = McpSpec::parse(value);
        // A UUID, JSON, an absolute path or several lines are never a name.
        if name.is_empty()
            || name.starts_with(['{', '"', '/'])
            || Uuid::parse_str(name).is_ok()
            || name.contains(['\n', '\r'])
        {
            return Ok(McpArg::Spec(spec));
        }
        Ok(McpArg::Name {
            name: name.to_owned(),
            otherwise: spec,
        })
    }
}

/// `--mcp NAME` when the installations `matching` (uids) are called NAME: the one's UUID, or
/// `None` when none is. A name that is also an existing path is refused, since either could
/// be meant; so is a name several installations share.
pub(super) fn by_name(name: &str, matching: &[Uuid]) -> Result<Option<McpSpec>, SpecError> {
    match matching {
        [] => Ok(None),
        [uid] if Path::new(name).exists() => Err(SpecError::Refused(format!(
            "--mcp {name}: both a path in this directory and the installed server {uid} are called that; pass ./{name} for the file or {uid} for the installation"
        ))),
        [uid] => Ok(Some(McpSpec::Uuid(*uid))),
        several => {
            let uids: Vec<String> = several.iter().map(ToString::to_string).collect();
            Err(SpecError::Refused(format!(
                "--mcp {name}: {} installed servers have that name ({}); pass the UUID of the one you mean",
                several.len(),
                uids.join(", ")
            )))
        }
    }
}

/// A task config: `{"task_id": "…", "mcp_servers": {…}}` (`mcpServers` also accepted): its
/// specs and its id.
pub(super) fn read_task(path: &Path) -> Result<(Vec<McpSpec>, Option<String>), SpecError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        SpecError::Refused(format!(
            "cannot read the task config {}: {e}",
            path.display()
        ))
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        SpecError::Refused(format!(
            "the task config {} is not JSON (line {}, column {})",
            path.display(),
            e.line(),
            e.column()
        ))
    })?;
    let servers = value
        .get("mcp_servers")
        .or_else(|| value.get("mcpServers"))
        .and_then(Value::as_object)
        .ok_or_else(|| {
            SpecError::Refused(format!(
                "the task config {} has no `mcp_servers` object",
                path.display()
            ))
        })?;
    let task_id = value
        .get("task_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok((server_map_to_specs(servers)?, task_id))
}
