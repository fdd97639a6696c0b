//! Managed installations: validated from an admin's config, sealed for the store, opened and
//! rendered with `tether_config` when a client asks.
//!
//! An installation is one server of tether's config format. Parsing (with user origin) moves
//! every `env` and header value out of the template into a captured value; the template keeps
//! `{{KEY}}`. The server seals the template (as JSON: a URL or command line may be sensitive
//! too), every captured value and every server-held secret (AES-256-GCM, each bound to its row). Rendering is always
//! `Installation::render(&secrets, &EmptyEnv)`: the server's own environment never leaks into a
//! config, and a placeholder with no server-held value stays for the client to fill.

use std::collections::BTreeSet;

use indexmap::IndexMap;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tether_config::{
    EmptyEnv, Installation, Origin, RemoteTransport, RenderedServer, RenderedTransport, Secrets,
    ServerTemplate, TemplatableServer, VariableValue, parse_config, placeholder,
};
use uuid::Uuid;
use zeroize::Zeroizing;

use crate::crypto::MasterKey;
use crate::error::{InstallationError, KeyError};
use crate::model::{SealedValue, StoredInstallation, TransportKind, ValueKind};

/// The team installations and API keys belong to when none is named.
pub const DEFAULT_TEAM: &str = "default";

/// Headers never taken from an installation's config: the HTTP stack sets them.
const RESERVED_UPSTREAM_HEADERS: [&str; 5] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
];

/// A validated installation, values in memory, ready to seal.
pub struct NewInstallation {
    /// A fresh uid.
    pub uid: Uuid,
    /// Its name (also the server's name in returned configs).
    pub name: String,
    /// Its team.
    pub team: String,
    /// URL or COMMAND.
    pub kind: TransportKind,
    installation: Installation,
    secrets: Secrets,
}

impl std::fmt::Debug for NewInstallation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewInstallation")
            .field("uid", &self.uid)
            .field("name", &self.name)
            .field("team", &self.team)
            .field("kind", &self.kind)
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

impl NewInstallation {
    /// Validates `spec` (tether's config format, user origin) as one server named `name` for
    /// `team`, with `secrets` held by the server.
    ///
    /// Refused: an invalid config, zero or several servers, a `warp_id` reference, a secret the
    /// config does not use. For a URL installation also: a placeholder with no server-held value,
    /// `${VAR}`, a URL that is not absolute `http(s)`, the SSE transport, an invalid header.
    pub fn from_spec(
        name: &str,
        team: &str,
        spec: &str,
        secrets: Secrets,
    ) -> Result<Self, InstallationError> {
        validate_installation_name(name)?;
        validate_team(team)?;
        let parsed = parse_config(spec, Origin::User)?;
        if !parsed.references.is_empty() {
            return Err(InstallationError::Reference);
        }
        let found = parsed.servers.len();
        let mut servers = parsed.servers.into_iter();
        let (Some(mut server), None) = (servers.next(), servers.next()) else {
            return Err(InstallationError::NotOneServer { found });
        };
        name.clone_into(&mut server.server.name);
        let kind = match server.server.template {
            ServerTemplate::Stdio(_) => TransportKind::Command,
            ServerTemplate::Remote(_) => TransportKind::Url,
        };
        let installation = server.into_installation();
        let used = used_names(&installation);
        if let Some(unused) = secrets.names().find(|name| !used.contains(*name)) {
            return Err(InstallationError::UnusedSecret {
                name: unused.to_owned(),
                used: used.into_iter().collect(),
            });
        }
        let new = Self {
            uid: Uuid::new_v4(),
            name: name.to_owned(),
            team: team.to_owned(),
            kind,
            installation,
            secrets,
        };
        if kind == TransportKind::Url {
            Upstream::from_rendered(&new.render())?;
        }
        Ok(new)
    }

    fn render(&self) -> RenderedServer {
        self.installation.render(&self.secrets, &EmptyEnv)
    }

    /// Seals every captured value and secret with `key` for the store.
    pub fn seal(&self, key: &MasterKey) -> Result<StoredInstallation, InstallationError> {
        let captured = self
            .installation
            .values
            .iter()
            .map(|(name, value)| (ValueKind::Captured, name.as_str(), value.value.clone()));
        let secrets = self.secrets.names().filter_map(|name| {
            self.secrets
                .get(name)
                .map(|value| (ValueKind::Secret, name, value))
        });
        let values = captured
            .chain(secrets)
            .map(|(kind, name, value)| {
                Ok(SealedValue {
                    kind,
                    name: name.to_owned(),
                    sealed: key
                        .seal(value.expose().as_bytes(), &value_aad(self.uid, kind, name))?,
                })
            })
            .collect::<Result<_, KeyError>>()?;
        let template = serde_json::to_vec(&self.installation.server).map_err(|_| KeyError::Seal)?;
        Ok(StoredInstallation {
            uid: self.uid,
            name: self.name.clone(),
            team: self.team.clone(),
            kind: self.kind,
            template: key.seal(&template, &template_aad(self.uid))?,
            active: true,
            values,
        })
    }
}

/// Re-seals every sealed part of `stored` under `key`'s current key, opening each with the
/// current key, else the previous one: one installation's step of a key rotation. The result
/// has the same names, kinds and order.
pub fn reseal(
    stored: &StoredInstallation,
    key: &MasterKey,
) -> Result<StoredInstallation, InstallationError> {
    let mut resealed = stored.clone();
    for value in &mut resealed.values {
        let aad = value_aad(stored.uid, value.kind, &value.name);
        let plain = key.open(&value.sealed, &aad)?;
        value.sealed = key.seal(&plain, &aad)?;
    }
    let aad = template_aad(stored.uid);
    let plain = key.open(&stored.template, &aad)?;
    resealed.template = key.seal(&plain, &aad)?;
    Ok(resealed)
}

/// Variable names and the placeholder names inside captured values: what a secret may be
/// called to be used.
fn used_names(installation: &Installation) -> BTreeSet<String> {
    let mut used: BTreeSet<String> = installation
        .server
        .variable_names()
        .map(str::to_owned)
        .collect();
    for value in installation.values.values() {
        for name in placeholder::placeholder_names(value.value.expose()) {
            used.insert(name.to_owned());
        }
    }
    used
}

/// The associated data a value is sealed with: it names the row, so a sealed value moved to
/// another installation, kind or name does not open.
fn value_aad(uid: Uuid, kind: ValueKind, name: &str) -> Vec<u8> {
    format!("tether-server value\0{uid}\0{}\0{name}", kind.as_str()).into_bytes()
}

/// The associated data the template is sealed with.
fn template_aad(uid: Uuid) -> Vec<u8> {
    format!("tether-server template\0{uid}").into_bytes()
}

/// An installation opened with the key: template, values and secrets in memory.
pub struct OpenedInstallation {
    /// URL or COMMAND.
    pub kind: TransportKind,
    installation: Installation,
    secrets: Secrets,
}

impl std::fmt::Debug for OpenedInstallation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedInstallation")
            .field("kind", &self.kind)
            .field("installation", &self.installation)
            .field("secrets", &self.secrets)
            .finish()
    }
}

impl OpenedInstallation {
    /// Opens every sealed value of `stored` with `key`.
    pub fn open(stored: &StoredInstallation, key: &MasterKey) -> Result<Self, InstallationError> {
        let mut values = IndexMap::new();
        let mut secrets = Secrets::new();
        for sealed in &stored.values {
            let plain = key.open(
                &sealed.sealed,
                &value_aad(stored.uid, sealed.kind, &sealed.name),
            )?;
            let text =
                Zeroizing::new(String::from_utf8(plain.to_vec()).map_err(|_| KeyError::Unseal)?);
            match sealed.kind {
                ValueKind::Captured => {
                    values.insert(sealed.name.clone(), VariableValue::new(text.as_str()));
                }
                ValueKind::Secret => secrets.insert(sealed.name.clone(), text.as_str()),
            }
        }
        let template = key.open(&stored.template, &template_aad(stored.uid))?;
        let server: TemplatableServer =
            serde_json::from_slice(&template).map_err(|e| InstallationError::Template {
                uid: stored.uid,
                reason: format!("the template does not decode ({:?})", e.classify()),
            })?;
        Ok(Self {
            kind: stored.kind,
            installation: Installation {
                server,
                values,
                origin: Origin::User,
            },
            secrets,
        })
    }

    /// Renders with the server-held secrets; no environment is read.
    pub fn render(&self) -> RenderedServer {
        self.installation.render(&self.secrets, &EmptyEnv)
    }

    /// The portable `{"mcpServers": {NAME: {...}}}` config with server-held values rendered in
    /// and client-side placeholders left in place (COMMAND installations).
    pub fn client_config_json(&self) -> Zeroizing<String> {
        let map = tether_config::render_server_map(&[self.render()], tether_config::Exposure::Real);
        Zeroizing::new(map.to_string())
    }

    /// Where and how the proxy reaches the upstream server (URL installations).
    pub fn upstream(&self) -> Result<Upstream, InstallationError> {
        Upstream::from_rendered(&self.render())
    }
}

/// A URL installation's upstream: the URL and the headers the proxy adds. `Debug` shows
/// neither the URL nor header values.
pub struct Upstream {
    /// The upstream MCP endpoint.
    pub url: reqwest::Url,
    /// Headers added to every forwarded request (values marked sensitive).
    pub headers: HeaderMap,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Upstream {
    fn from_rendered(rendered: &RenderedServer) -> Result<Self, InstallationError> {
        let RenderedTransport::Remote {
            url,
            headers,
            transport,
        } = &rendered.transport
        else {
            return Err(InstallationError::InvalidUpstreamUrl {
                reason: "the installation is not a URL installation".to_owned(),
            });
        };
        if *transport == RemoteTransport::Sse {
            return Err(InstallationError::SseUpstream);
        }
        if !rendered.unresolved_placeholders().is_empty() {
            return Err(InstallationError::UnresolvedUpstream {
                names: rendered.unresolved_placeholders().iter().cloned().collect(),
            });
        }
        if !rendered.unset_env_vars().is_empty() {
            return Err(InstallationError::UpstreamEnvExpansion {
                names: rendered.unset_env_vars().iter().cloned().collect(),
            });
        }
        let url_text = Zeroizing::new(url.expose());
        let url =
            reqwest::Url::parse(&url_text).map_err(|e| InstallationError::InvalidUpstreamUrl {
                reason: e.to_string(),
            })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(InstallationError::InvalidUpstreamUrl {
                reason: "the scheme is not http or https".to_owned(),
            });
        }
        let mut header_map = HeaderMap::new();
        for (name, value) in headers {
            let invalid = || InstallationError::InvalidUpstreamHeader { name: name.clone() };
            let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
            if RESERVED_UPSTREAM_HEADERS.contains(&header_name.as_str()) {
                return Err(invalid());
            }
            let value_text = Zeroizing::new(value.expose());
            let mut header_value = HeaderValue::from_str(&value_text).map_err(|_| invalid())?;
            header_value.set_sensitive(true);
            header_map.insert(header_name, header_value);
        }
        Ok(Self {
            url,
            headers: header_map,
        })
    }
}

fn validate_installation_name(name: &str) -> Result<(), InstallationError> {
    let invalid = |reason| InstallationError::InvalidName {
        what: "installation name",
        value: name.to_owned(),
        reason,
    };
    if name.trim().is_empty() {
        return Err(invalid("it is empty"));
    }
    if name.chars().count() > 128 {
        return Err(invalid("it is longer than 128 characters"));
    }
    if name.chars().any(char::is_control) {
        return Err(invalid("it holds a control character"));
    }
    Ok(())
}

/// Checks a team name: 1 to 64 ASCII letters, digits, `.`, `_` or `-`.
pub fn validate_team(team: &str) -> Result<(), InstallationError> {
    let invalid = |reason| InstallationError::InvalidName {
        what: "team",
        value: team.to_owned(),
        reason,
    };
    if team.is_empty() || team.len() > 64 {
        return Err(invalid("it must be 1 to 64 characters long"));
    }
    if !team
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(invalid("use ASCII letters, digits, '.', '_' and '-' only"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn secrets(pairs: &[(&str, &str)]) -> Secrets {
        pairs.iter().copied().collect()
    }

    fn round_trip(new: &NewInstallation) -> OpenedInstallation {
        let key = MasterKey::insecure_dev_key();
        let stored = new.seal(&key).unwrap();
        OpenedInstallation::open(&stored, &key).unwrap()
    }

    #[test]
    fn command_installation_renders_server_values_and_keeps_client_placeholders() {
        let spec = r#"{"mcpServers":{"x":{"command":"gh-mcp","args":["--token={{CLIENT}}","--org={{ORG}}"],
                       "env":{"GH_TOKEN":"{{GH_TOKEN}}","MODE":"fixed","USER_KEY":"{{USER_KEY}}"}}}}"#;
        let new = NewInstallation::from_spec(
            "GitHub",
            DEFAULT_TEAM,
            spec,
            secrets(&[("GH_TOKEN", "server\"secret\\"), ("ORG", "acme")]),
        )
        .unwrap();
        assert_eq!(new.kind, TransportKind::Command);
        let opened = round_trip(&new);
        let json: serde_json::Value = serde_json::from_str(&opened.client_config_json()).unwrap();
        assert_eq!(
            json,
            json!({"mcpServers": {"GitHub": {
                "command": "gh-mcp",
                "args": ["--token={{CLIENT}}", "--org=acme"],
                "env": {"GH_TOKEN": "server\"secret\\", "MODE": "fixed", "USER_KEY": "{{USER_KEY}}"},
            }}})
        );
    }

    #[test]
    fn url_installation_needs_every_value_on_the_server() {
        let spec = r#"{"url":"https://mcp.example.com/mcp","headers":{"Authorization":"Bearer {{TOKEN}}"}}"#;
        let error = NewInstallation::from_spec("up", "t", spec, Secrets::new()).unwrap_err();
        assert!(
            matches!(error, InstallationError::UnresolvedUpstream { ref names } if names == &["TOKEN"])
        );
        let new =
            NewInstallation::from_spec("up", "t", spec, secrets(&[("TOKEN", "abc")])).unwrap();
        assert_eq!(new.kind, TransportKind::Url);
        let upstream = round_trip(&new).upstream().unwrap();
        assert_eq!(upstream.url.as_str(), "https://mcp.example.com/mcp");
        assert_eq!(upstream.headers["authorization"], "Bearer abc");
        assert!(upstream.headers["authorization"].is_sensitive());
        assert!(!format!("{upstream:?}").contains("abc"));
        assert!(!format!("{upstream:?}").contains("example"));
    }

    #[test]
    fn refusals() {
        /// Name, spec, secrets, and what the error must be.
        type Case = (
            &'static str,
            &'static str,
            Secrets,
            fn(&InstallationError) -> bool,
        );
        let cases: Vec<Case> = vec![
            ("x", "{}", Secrets::new(), |e| {
                matches!(e, InstallationError::NotOneServer { found: 0 })
            }),
            (
                "x",
                r#"{"a":{"command":"a"},"b":{"command":"b"}}"#,
                Secrets::new(),
                |e| matches!(e, InstallationError::NotOneServer { found: 2 }),
            ),
            (
                "x",
                r#"{"a":{"warp_id":"9b2f1a64-3c1e-4d4b-8a49-3e0c2d1f5a77"}}"#,
                Secrets::new(),
                |e| matches!(e, InstallationError::Reference),
            ),
            ("x", "{", Secrets::new(), |e| {
                matches!(e, InstallationError::Config(_))
            }),
            (
                "x",
                r#"{"command":"a","env":{"K":"{{K}}"}}"#,
                secrets(&[("TYPO", "v")]),
                |e| matches!(e, InstallationError::UnusedSecret { name, used } if name == "TYPO" && used == &["K"]),
            ),
            (
                "x",
                r#"{"url":"https://a/mcp","type":"sse"}"#,
                Secrets::new(),
                |e| matches!(e, InstallationError::SseUpstream),
            ),
            ("x", r#"{"url":"ftp://a/mcp"}"#, Secrets::new(), |e| {
                matches!(e, InstallationError::InvalidUpstreamUrl { .. })
            }),
            (
                "x",
                r#"{"url":"https://${HOST}/mcp"}"#,
                Secrets::new(),
                |e| matches!(e, InstallationError::UpstreamEnvExpansion { names } if names == &["HOST"]),
            ),
            (
                "x",
                r#"{"url":"https://a/mcp","headers":{"Host":"b"}}"#,
                Secrets::new(),
                |e| matches!(e, InstallationError::InvalidUpstreamHeader { name } if name == "Host"),
            ),
            (
                "x",
                r#"{"url":"https://a/mcp","headers":{"X":"a\nb"}}"#,
                Secrets::new(),
                |e| matches!(e, InstallationError::InvalidUpstreamHeader { name } if name == "X"),
            ),
            ("", r#"{"command":"a"}"#, Secrets::new(), |e| {
                matches!(e, InstallationError::InvalidName { .. })
            }),
        ];
        for (name, spec, secrets, expected) in cases {
            let error = NewInstallation::from_spec(name, DEFAULT_TEAM, spec, secrets).unwrap_err();
            assert!(expected(&error), "{spec}: {error:?}");
        }
        for team in ["", "a b", "é", &"t".repeat(65)] {
            assert!(validate_team(team).is_err(), "{team:?}");
        }
    }

    #[test]
    fn sealed_values_are_bound_to_their_row() {
        let key = MasterKey::insecure_dev_key();
        let spec = r#"{"command":"a","env":{"A":"{{A}}","B":"{{B}}"}}"#;
        let new = NewInstallation::from_spec(
            "n",
            DEFAULT_TEAM,
            spec,
            secrets(&[("A", "alpha"), ("B", "beta")]),
        )
        .unwrap();
        let mut stored = new.seal(&key).unwrap();
        for value in &stored.values {
            assert!(!value.sealed.windows(5).any(|w| w == b"alpha"));
        }
        let (first, second) = (
            stored.values[2].sealed.clone(),
            stored.values[3].sealed.clone(),
        );
        stored.values[2].sealed = second;
        stored.values[3].sealed = first;
        assert!(matches!(
            OpenedInstallation::open(&stored, &key),
            Err(InstallationError::Key(KeyError::Unseal))
        ));
    }
}
