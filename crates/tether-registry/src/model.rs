//! Typed models of what the registries return: the official registry's `server.json` and list
//! envelopes, and Smithery's list and detail shapes.
//!
//! Every field is optional or defaulted where the schema allows it, unknown fields are
//! ignored, and scalar input values (`default`, `value`, `choices`) accept numbers and
//! booleans as well as strings, so one odd entry never fails a whole page.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// `server.json`: one version of one server in the official registry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerJson {
    /// The schema URL the entry was published against.
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// Reverse-DNS name, `namespace/name`.
    pub name: String,
    /// One line (≤ 100 characters).
    #[serde(default)]
    pub description: String,
    /// Exact version.
    #[serde(default)]
    pub version: String,
    /// Human title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Project website.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub website_url: Option<String>,
    /// Source repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<Repository>,
    /// Icons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub icons: Vec<Icon>,
    /// Local packages (npm, pypi, oci, nuget, mcpb, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<Package>,
    /// Hosted endpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remotes: Vec<Remote>,
    /// Publisher metadata (`_meta`), kept as JSON.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
}

impl ServerJson {
    /// The transports a user can pick: each package's registry type, then `remote` once.
    pub fn transports(&self) -> Vec<String> {
        let mut kinds: Vec<String> = Vec::new();
        for package in &self.packages {
            if !kinds.contains(&package.registry_type) {
                kinds.push(package.registry_type.clone());
            }
        }
        if !self.remotes.is_empty() {
            kinds.push("remote".to_owned());
        }
        kinds
    }
}

/// `repository`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Repository {
    /// Repository URL.
    #[serde(default)]
    pub url: String,
    /// Hosting service (`github`, …).
    #[serde(default)]
    pub source: String,
    /// The service's repository id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The server's folder in a monorepo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subfolder: Option<String>,
}

/// An icon.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Icon {
    /// Image URL.
    #[serde(default)]
    pub src: String,
    /// MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Sizes (`48x48`, `any`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<String>,
    /// `light` or `dark`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theme: Option<String>,
}

/// One way to run the server locally.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    /// `npm`, `pypi`, `oci`, `nuget`, `mcpb` (newer entries: `cargo`).
    #[serde(default)]
    pub registry_type: String,
    /// The package registry's base URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry_base_url: Option<String>,
    /// Package name, image reference or bundle URL.
    #[serde(default)]
    pub identifier: String,
    /// Exact package version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// SHA-256 of an `mcpb` bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_sha256: Option<String>,
    /// The runner to use (`npx`, `uvx`, `docker`, `dnx`), overriding the registry type's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_hint: Option<String>,
    /// How a client talks to it once running.
    #[serde(default)]
    pub transport: Transport,
    /// Arguments for the runner.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_arguments: Vec<Argument>,
    /// Arguments for the package.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub package_arguments: Vec<Argument>,
    /// Environment variables the package reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment_variables: Vec<KeyValueInput>,
}

/// A package's transport: `stdio`, or `streamable-http`/`sse` at a URL (which may hold
/// `{name}` variables naming arguments or environment variables).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transport {
    /// `stdio`, `streamable-http` or `sse`.
    #[serde(rename = "type", default = "stdio")]
    pub kind: String,
    /// The endpoint for the HTTP transports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers to send.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<KeyValueInput>,
}

fn stdio() -> String {
    "stdio".to_owned()
}

impl Default for Transport {
    fn default() -> Self {
        Self {
            kind: stdio(),
            url: None,
            headers: Vec::new(),
        }
    }
}

/// A hosted endpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remote {
    /// `streamable-http` or `sse`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The URL, possibly with `{name}` variables.
    #[serde(default)]
    pub url: String,
    /// Headers to send.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<KeyValueInput>,
    /// The URL's variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, Input>,
}

/// What a user may have to supply: the fields shared by environment variables, headers,
/// arguments and variables.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Input {
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether the server needs it (default false).
    #[serde(default, skip_serializing_if = "is_false")]
    pub is_required: bool,
    /// Whether it is a secret (default false).
    #[serde(default, skip_serializing_if = "is_false")]
    pub is_secret: bool,
    /// `string`, `number`, `boolean` or `filepath`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// The value used when none is given.
    #[serde(
        default,
        deserialize_with = "scalar",
        skip_serializing_if = "Option::is_none"
    )]
    pub default: Option<String>,
    /// An example to show.
    #[serde(
        default,
        deserialize_with = "scalar",
        skip_serializing_if = "Option::is_none"
    )]
    pub placeholder: Option<String>,
    /// The only values accepted.
    #[serde(
        default,
        deserialize_with = "scalars",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub choices: Vec<String>,
    /// A fixed value, where `{name}` refers to [`Input::variables`].
    #[serde(
        default,
        deserialize_with = "scalar",
        skip_serializing_if = "Option::is_none"
    )]
    pub value: Option<String>,
    /// The variables of [`Input::value`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, Input>,
}

/// An environment variable or header: a name and an [`Input`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KeyValueInput {
    /// The variable's or header's name.
    #[serde(default)]
    pub name: String,
    /// What to supply.
    #[serde(flatten)]
    pub input: Input,
}

/// A command-line argument: `positional` (with a `valueHint`) or `named` (`--flag`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Argument {
    /// `positional` or `named`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The flag, dashes included (named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the value stands for (positional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_hint: Option<String>,
    /// Whether it may be given more than once.
    #[serde(default, skip_serializing_if = "is_false")]
    pub is_repeated: bool,
    /// What to supply.
    #[serde(flatten)]
    pub input: Input,
}

impl Argument {
    /// The name a user knows it by: the flag, else the value hint.
    pub fn label(&self) -> &str {
        self.name
            .as_deref()
            .or(self.value_hint.as_deref())
            .unwrap_or("argument")
    }
}

fn is_false(value: &bool) -> bool {
    !*value
}

fn scalar_text(value: Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(text) => Some(text),
        other => Some(other.to_string()),
    }
}

fn scalar<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    Ok(scalar_text(Value::deserialize(deserializer)?))
}

fn scalars<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    Ok(match Value::deserialize(deserializer)? {
        Value::Array(items) => items.into_iter().filter_map(scalar_text).collect(),
        other => scalar_text(other).into_iter().collect(),
    })
}

/// The official registry's key in `_meta`.
pub const OFFICIAL_META_KEY: &str = "io.modelcontextprotocol.registry/official";

/// One row of `GET /v0.1/servers` (and the body of `…/versions/{version}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerResponse {
    /// The entry.
    pub server: ServerJson,
    /// Registry metadata.
    #[serde(rename = "_meta", default)]
    pub meta: ResponseMeta,
}

impl ServerResponse {
    /// The registry's status for this entry (`active` when absent).
    pub fn status(&self) -> Status {
        self.meta
            .official
            .as_ref()
            .map_or(Status::Active, |o| o.status)
    }
}

/// `_meta` of a list row.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResponseMeta {
    /// The official registry's metadata.
    #[serde(
        rename = "io.modelcontextprotocol.registry/official",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub official: Option<OfficialMeta>,
}

/// `_meta["io.modelcontextprotocol.registry/official"]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OfficialMeta {
    /// Lifecycle status.
    #[serde(default)]
    pub status: Status,
    /// Why it is deprecated or deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// First published (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_at: Option<String>,
    /// Last updated (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// Whether this is the server's latest version.
    #[serde(default)]
    pub is_latest: bool,
}

/// An entry's lifecycle status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Listed normally.
    #[default]
    Active,
    /// Still installable, but the publisher says not to.
    Deprecated,
    /// Withdrawn.
    Deleted,
    /// A status this version of tether does not know; shown, treated as active.
    #[serde(other)]
    Unknown,
}

impl Status {
    /// Whether search hides it unless asked.
    pub fn is_hidden(self) -> bool {
        matches!(self, Status::Deprecated | Status::Deleted)
    }

    /// The word shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Deprecated => "deprecated",
            Status::Deleted => "deleted",
            Status::Unknown => "unknown",
        }
    }
}

/// `GET /v0.1/servers`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerList {
    /// The page's rows.
    #[serde(default)]
    pub servers: Vec<ServerResponse>,
    /// Paging.
    #[serde(default)]
    pub metadata: ListMetadata,
}

/// `metadata` of a list page.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListMetadata {
    /// The cursor of the next page; absent on the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// Rows on this page.
    #[serde(default)]
    pub count: u64,
}

/// One row of Smithery's `GET /servers`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmitheryServer {
    /// Smithery's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `@owner/name` (or `name`).
    pub qualified_name: String,
    /// Human name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Description.
    #[serde(default)]
    pub description: String,
    /// Homepage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homepage: Option<String>,
    /// Icon URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon_url: Option<String>,
    /// Uses counted by Smithery.
    #[serde(default)]
    pub use_count: u64,
    /// Verified by Smithery.
    #[serde(default)]
    pub verified: bool,
    /// Hosted remotely.
    #[serde(default)]
    pub remote: bool,
    /// Deployed on Smithery.
    #[serde(default)]
    pub is_deployed: bool,
    /// Created (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
}

/// Smithery's `GET /servers` response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SmitheryList {
    /// The page's rows.
    #[serde(default)]
    pub servers: Vec<SmitheryServer>,
    /// Paging.
    #[serde(default)]
    pub pagination: SmitheryPagination,
}

/// Smithery's page numbers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmitheryPagination {
    /// This page (from 1).
    #[serde(default)]
    pub current_page: u64,
    /// Rows per page.
    #[serde(default)]
    pub page_size: u64,
    /// Pages in all.
    #[serde(default)]
    pub total_pages: u64,
    /// Rows in all.
    #[serde(default)]
    pub total_count: u64,
}

/// Smithery's `GET /servers/{qualifiedName}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmitheryDetail {
    /// `@owner/name`.
    pub qualified_name: String,
    /// Human name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Description.
    #[serde(default)]
    pub description: String,
    /// Icon URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon_url: Option<String>,
    /// Hosted remotely.
    #[serde(default)]
    pub remote: bool,
    /// The hosted endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_url: Option<String>,
    /// The ways to connect.
    #[serde(default)]
    pub connections: Vec<SmitheryConnection>,
    /// Security scan result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<Value>,
    /// Tools, when Smithery knows them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<SmitheryTool>>,
}

/// One connection of a Smithery server: `stdio` or `http`, with a JSON Schema of its config.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmitheryConnection {
    /// `stdio` or `http`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The hosted endpoint (`http`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_url: Option<String>,
    /// The endpoint (`http`, older shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// JSON Schema of the config; its `required` names the required keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_schema: Option<Value>,
}

/// A tool as Smithery lists it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmitheryTool {
    /// Tool name.
    pub name: String,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}
