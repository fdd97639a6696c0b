//! `tether add` of a Smithery-hosted server, as the `smithery` CLI 1.2.0 installs one: a
//! Streamable HTTP remote at the connection's deployment URL (else
//! `https://server.smithery.ai/{qualifiedName}/mcp`, the URL the CLI writes), the entry's
//! `configSchema` properties as URL query parameters (how Smithery's hosted runtime reads a
//! session's config), and the Smithery API key as `Authorization: Bearer` — only when the
//! URL is on `server.smithery.ai` or on the host of the Smithery API tether is configured for,
//! never to a host a registry entry names. The entry becomes a [`ServerJson`] with one remote,
//! so `add`'s choice, build, test-connect and install run unchanged.

use std::collections::BTreeMap;

use reqwest::Url;

use crate::client::{Registries, SMITHERY_NAME};
use crate::error::RegistryError;
use crate::model::{Input, KeyValueInput, Remote, ServerJson, ServerResponse, SmitheryDetail};
use crate::show::schema_inputs;
use crate::{Found, InputRow};

/// The secret input that carries the Smithery API key (filled from tether's key store).
pub const SMITHERY_KEY_INPUT: &str = "smithery_api_key";

/// Smithery's hosting domain.
const HOSTED: &str = "server.smithery.ai";

/// Whether a config property reads as a credential: Smithery publishes no secret flag, so a
/// property whose name says token, key, secret, password or credential is a secret input
/// (`--secret`, a `{{NAME}}` placeholder; never stored in clear).
fn secret_like(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["token", "key", "secret", "password", "credential"]
        .iter()
        .any(|word| name.contains(word))
}

fn input(row: &InputRow) -> Input {
    Input {
        description: row.description.clone(),
        is_required: row.required,
        is_secret: secret_like(&row.name),
        format: row
            .format
            .clone()
            .filter(|f| f == "number" || f == "boolean"),
        default: row.default.clone(),
        choices: row.choices.clone(),
        ..Input::default()
    }
}

/// The hosted URL of `detail`: the first `http` connection's deployment URL (or `url`), else
/// the entry's, else the one the CLI forms.
fn hosted_url(detail: &SmitheryDetail) -> Option<String> {
    let connection = detail.connections.iter().find(|c| c.kind == "http")?;
    Some(
        connection
            .deployment_url
            .clone()
            .or_else(|| connection.url.clone())
            .or_else(|| {
                detail
                    .deployment_url
                    .as_ref()
                    .map(|u| format!("{}/mcp", u.trim_end_matches('/')))
            })
            .unwrap_or_else(|| format!("https://{HOSTED}/{}/mcp", detail.qualified_name)),
    )
}

/// Whether the key may go to `url`: Smithery's hosted servers over HTTPS on the default port,
/// or the API's own origin (scheme, host and port). Another scheme or port of those hosts is
/// another service, or cleartext. An API on a loopback address (tests, a local mirror) lends
/// its host to any port of it.
fn smitherys_own(url: &Url, api: &Url) -> bool {
    let hosted = url.scheme() == "https"
        && url.host_str() == Some(HOSTED)
        && url.port_or_known_default() == Some(443);
    let same_host = url.host_str().is_some() && url.host_str() == api.host_str();
    let loopback = api.host_str().is_some_and(|host| {
        host == "localhost"
            || host
                .trim_matches(['[', ']'])
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    let same_origin =
        url.scheme() == api.scheme() && url.port_or_known_default() == api.port_or_known_default();
    hosted || (same_host && (same_origin || loopback))
}

/// `detail` as an entry with one Streamable HTTP remote; `None` when it has no hosted
/// connection. `api` is the Smithery API base URL tether asks (its host may get the key).
pub fn smithery_entry(detail: &SmitheryDetail, api: &Url) -> Option<ServerJson> {
    let url = hosted_url(detail)?;
    let connection = detail.connections.iter().find(|c| c.kind == "http")?;
    let parsed = Url::parse(&url).ok()?;
    let rows = schema_inputs(connection.config_schema.as_ref());
    let mut variables: BTreeMap<String, Input> = rows
        .iter()
        .map(|row| (row.name.clone(), input(row)))
        .collect();
    let query: Vec<String> = rows
        .iter()
        .map(|row| format!("{0}={{{0}}}", row.name))
        .collect();
    let mut remote_url = url.clone();
    if !query.is_empty() {
        remote_url.push(if parsed.query().is_some() { '&' } else { '?' });
        remote_url.push_str(&query.join("&"));
    }
    let mut headers = Vec::new();
    if smitherys_own(&parsed, api) {
        let mut key = BTreeMap::new();
        key.insert(
            SMITHERY_KEY_INPUT.to_owned(),
            Input {
                description: Some("Smithery API key (from tether's key store)".to_owned()),
                is_required: true,
                is_secret: true,
                ..Input::default()
            },
        );
        headers.push(KeyValueInput {
            name: "Authorization".to_owned(),
            input: Input {
                is_required: true,
                is_secret: true,
                value: Some(format!("Bearer {{{SMITHERY_KEY_INPUT}}}")),
                variables: key,
                ..Input::default()
            },
        });
    }
    variables.retain(|name, _| name != SMITHERY_KEY_INPUT);
    Some(ServerJson {
        name: detail.qualified_name.clone(),
        title: detail.display_name.clone(),
        description: detail.description.clone(),
        version: "hosted".to_owned(),
        remotes: vec![Remote {
            kind: "streamable-http".to_owned(),
            url: remote_url,
            headers,
            variables,
        }],
        ..ServerJson::default()
    })
}

impl Registries {
    /// A Smithery entry as `add` takes it ([`smithery_entry`]): an error naming the entry when
    /// it has no hosted connection (Smithery publishes no launch line for its stdio servers).
    pub async fn smithery_addable(&self, name: &str) -> Result<Found, RegistryError> {
        let (detail, freshness) = self.smithery_server(name).await?;
        let server = smithery_entry(&detail, &self.smithery.base).ok_or_else(|| {
            RegistryError::BadRegistry(format!(
                "{name} is a Smithery server with no hosted (http) connection; Smithery publishes no command line for its stdio servers, so tether cannot add it"
            ))
        })?;
        let response = ServerResponse {
            server,
            meta: Default::default(),
        };
        Ok((response, freshness, SMITHERY_NAME.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail(url: &str) -> SmitheryDetail {
        serde_json::from_value(serde_json::json!({
            "qualifiedName": "@a/b",
            "connections": [{"type": "http", "deploymentUrl": url, "configSchema": {
                "type": "object", "required": ["apiToken"],
                "properties": {"apiToken": {"type": "string"}, "n": {"type": "number"}}}}]
        }))
        .expect("a detail")
    }

    #[test]
    fn the_key_goes_only_to_smitherys_host_and_credential_like_config_is_secret() {
        let api = Url::parse("https://api.smithery.ai").expect("a URL");
        let hosted =
            smithery_entry(&detail("https://server.smithery.ai/@a/b/mcp"), &api).expect("an entry");
        let remote = &hosted.remotes[0];
        assert_eq!(
            remote.url,
            "https://server.smithery.ai/@a/b/mcp?apiToken={apiToken}&n={n}"
        );
        assert_eq!(remote.headers[0].name, "Authorization");
        assert!(remote.variables["apiToken"].is_secret);
        assert!(!remote.variables["n"].is_secret);
        for elsewhere in [
            "https://evil.example/server.smithery.ai/mcp",
            "https://server.smithery.ai.evil.example/mcp",
            // Another scheme or port of the trusted hosts.
            "http://server.smithery.ai/@a/b/mcp",
            "https://server.smithery.ai:8443/@a/b/mcp",
            "http://api.smithery.ai/mcp",
            "https://api.smithery.ai:444/mcp",
        ] {
            let entry = smithery_entry(&detail(elsewhere), &api).expect("an entry");
            assert!(entry.remotes[0].headers.is_empty(), "{elsewhere}");
        }
        let stdio: SmitheryDetail = serde_json::from_value(serde_json::json!({
            "qualifiedName": "@a/c", "connections": [{"type": "stdio"}]
        }))
        .expect("a detail");
        assert!(smithery_entry(&stdio, &api).is_none());
        // The API's own origin gets it; a loopback API (tests) any port of its host.
        let own = smithery_entry(&detail("https://api.smithery.ai/x/mcp"), &api).expect("entry");
        assert_eq!(own.remotes[0].headers.len(), 1);
        let local = Url::parse("http://127.0.0.1:4000").expect("a URL");
        let other = smithery_entry(&detail("http://127.0.0.1:4001/x/mcp"), &local).expect("entry");
        assert_eq!(other.remotes[0].headers.len(), 1);
    }
}
