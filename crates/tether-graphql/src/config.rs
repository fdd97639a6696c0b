//! [`ManagedMcpClientConfig`]: the run-scoped config the managed server returns for one uid.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::error::DecodeReason;
use crate::operation::{CreateManagedMcpClientConfigOutput, ManagedMcpTransportKind};
use tether_secret::SecretValue;

/// How the MCP server described by [`ManagedMcpClientConfig::mcp_config_json`] is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// A remote server reached over HTTP (usually through the managed proxy).
    Url,
    /// A local server started as a child process.
    Command,
}

/// An HTTP header the run must send to the MCP server (usually to the managed proxy).
#[derive(Debug, Clone)]
pub struct AuthorizationHeader {
    /// Header name, e.g. `Authorization`.
    pub name: String,
    /// Header value; a secret.
    pub value: SecretValue,
}

/// A managed MCP installation resolved for one run. Lives in memory only: tether never writes
/// it to disk, and its `Debug` masks every secret.
#[derive(Debug, Clone)]
pub struct ManagedMcpClientConfig {
    /// The managed MCP installation this config was minted for.
    pub uid: Uuid,
    /// Whether the config describes a URL or a command server.
    pub transport_kind: TransportKind,
    /// The portable MCP config JSON (`{"mcpServers":{…}}`); may embed secrets.
    pub mcp_config_json: SecretValue,
    /// The managed proxy's URL, for URL servers.
    pub proxy_url: Option<reqwest::Url>,
    /// The token the proxy expects; a secret.
    pub proxy_token: Option<SecretValue>,
    /// A header to send to the MCP server, when the server issued one.
    pub authorization_header: Option<AuthorizationHeader>,
    /// When the proxy token stops being valid.
    pub expires_at: Option<OffsetDateTime>,
}

impl ManagedMcpClientConfig {
    /// Converts the wire output into the domain type. Every field is destructured, so a field
    /// added to the fragment cannot slip past this conversion. Secrets are moved into
    /// [`SecretValue`]s before anything else can fail.
    pub(crate) fn from_output(
        uid: Uuid,
        output: CreateManagedMcpClientConfigOutput,
    ) -> Result<Self, DecodeReason> {
        let CreateManagedMcpClientConfigOutput {
            transport_kind,
            mcp_config_json,
            proxy_url,
            proxy_token,
            authorization_header_name,
            authorization_header_value,
            expires_at,
        } = output;
        let mcp_config_json = SecretValue::new(mcp_config_json);
        let proxy_token = proxy_token.map(SecretValue::new);
        let authorization_header_value = authorization_header_value.map(SecretValue::new);

        let authorization_header = match (authorization_header_name, authorization_header_value) {
            (Some(name), Some(value)) => Some(AuthorizationHeader { name, value }),
            (None, None) => None,
            _ => return Err(DecodeReason::UnpairedAuthorizationHeader),
        };
        let proxy_url = proxy_url
            .map(|url| reqwest::Url::parse(&url))
            .transpose()
            .map_err(|_| DecodeReason::InvalidUrl { field: "proxyUrl" })?;
        let expires_at = expires_at
            .map(|time| OffsetDateTime::parse(&time.0, &Rfc3339))
            .transpose()
            .map_err(|_| DecodeReason::InvalidTimestamp { field: "expiresAt" })?;
        let transport_kind = match transport_kind {
            ManagedMcpTransportKind::Url => TransportKind::Url,
            ManagedMcpTransportKind::Command => TransportKind::Command,
        };

        Ok(Self {
            uid,
            transport_kind,
            mcp_config_json,
            proxy_url,
            proxy_token,
            authorization_header,
            expires_at,
        })
    }
}
