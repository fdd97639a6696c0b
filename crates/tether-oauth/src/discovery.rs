//! Discovery: how an MCP server is authorized. An unauthenticated probe reads the challenge,
//! then the protected resource metadata (RFC 9728) names the authorization server, whose
//! metadata (RFC 8414 / OpenID discovery) names the endpoints. specs/oauth/TECH.md §1 gives
//! the order of the URLs tried.

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, WWW_AUTHENTICATE};
use reqwest::{StatusCode, Url};
use serde_json::{Value, json};

use crate::challenge::challenge_params;
use crate::client::OAuthClient;
use crate::error::OAuthError;
use crate::resource::{
    authorization_server_metadata, canonical_resource, parse, resource_covers, well_known,
};

/// The scope that asks for a refresh token (SEP-2207), where the authorization server lists it.
pub(crate) const OFFLINE_ACCESS: &str = "offline_access";

/// How an unauthenticated request to the server went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Probe {
    /// It answered 401.
    pub unauthorized: bool,
    /// `resource_metadata` from its challenge.
    pub resource_metadata: Option<String>,
    /// `scope` from its challenge.
    pub scope: Option<String>,
}

impl Probe {
    /// What an answer's status and `WWW-Authenticate` headers say.
    fn read(status: StatusCode, headers: &HeaderMap) -> Self {
        let mut probe = Self {
            unauthorized: status == StatusCode::UNAUTHORIZED,
            ..Self::default()
        };
        for header in headers.get_all(WWW_AUTHENTICATE) {
            let Ok(header) = header.to_str() else {
                continue;
            };
            for (name, value) in challenge_params(header) {
                match name.as_str() {
                    "resource_metadata" => probe.resource_metadata = Some(value),
                    "scope" => probe.scope = Some(value),
                    _ => {}
                }
            }
        }
        probe
    }
}

/// What discovery found for a protected resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// The canonical URL of the MCP server logged in to: the key tokens are stored under.
    pub server: String,
    /// The resource URI sent as `resource` (RFC 8707): the protected resource metadata's
    /// `resource`, else the server's URL.
    pub resource: String,
    /// The scope to ask for: `WWW-Authenticate`'s `scope`, else the resource's
    /// `scopes_supported` joined, else none; plus `offline_access` when there is one and the
    /// authorization server lists it.
    pub scope: Option<String>,
    /// Where the browser is sent to authorize.
    pub authorization_endpoint: String,
    /// Where codes and refresh tokens are exchanged for tokens.
    pub token_endpoint: String,
    /// Where a client registers itself (RFC 7591), when the server offers that.
    pub registration_endpoint: Option<String>,
    /// `token_endpoint_auth_methods_supported` (empty when the server lists none).
    pub auth_methods: Vec<String>,
    /// `grant_types_supported` (empty when the server lists none: RFC 8414 then means
    /// `authorization_code` and `implicit`).
    pub grant_types: Vec<String>,
    /// `client_id_metadata_document_supported`: a client-id metadata document URL may be the
    /// client id.
    pub client_metadata_documents: bool,
    /// The authorization server metadata's `issuer`, exactly as written: what an
    /// authorization response's `iss` must equal (RFC 9207). `None` without metadata.
    pub issuer: Option<String>,
    /// `authorization_response_iss_parameter_supported`: every authorization response must
    /// carry `iss`.
    pub iss_parameter_supported: bool,
    /// `dpop_signing_alg_values_supported` (RFC 9449 §5.1): where it lists ES256, tokens are
    /// bound to a DPoP key.
    pub dpop_algs: Vec<String>,
}

/// What the protected resource metadata, or its absence, says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProtectedResource {
    resource: String,
    issuer: String,
    /// Whether the protected resource metadata named the issuer (else it is the server's own
    /// origin, the 2025-03-26 default, and nothing names an issuer to hold the metadata to).
    named: bool,
    scope: Option<String>,
}

impl OAuthClient {
    /// Sends an unauthenticated MCP `server/discover` (2026-07-28, with its headers and
    /// `_meta`) to `url` and reads the challenge. Not `initialize`: a server may let that
    /// through unauthenticated and challenge only the requests that follow; a protected
    /// server of any revision answers anything else 401.
    pub async fn probe(&self, url: &str) -> Result<Probe, OAuthError> {
        let body = json!({"jsonrpc":"2.0","id":0,"method":"server/discover","params":{"_meta":{
            "io.modelcontextprotocol/protocolVersion":"2026-07-28",
            "io.modelcontextprotocol/clientCapabilities":{},
            "io.modelcontextprotocol/clientInfo":{"name":"tether","version":env!("CARGO_PKG_VERSION")}}}});
        let response = self
            .http
            .post(url)
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .header("Mcp-Method", "server/discover")
            .header("MCP-Protocol-Version", "2026-07-28")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| OAuthError::Unreachable {
                url: url.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(Probe::read(response.status(), response.headers()))
    }

    /// Discovery for `server_url`.
    pub async fn discover(&self, server_url: &str) -> Result<Discovered, OAuthError> {
        let server = canonical_resource(server_url)?;
        let url = parse(&server)?;
        let probe = self.probe(server_url).await?;
        let mut candidates: Vec<String> = probe.resource_metadata.clone().into_iter().collect();
        candidates.extend(well_known(&url, "oauth-protected-resource"));
        let resource_metadata = self.first_json(&candidates, "protected resource").await;
        let protected = protected_resource(&server, &url, &probe, resource_metadata.as_ref())?;
        let issuer = Url::parse(&protected.issuer).map_err(|e| OAuthError::BadIssuer {
            issuer: protected.issuer.clone(),
            reason: e.to_string(),
        })?;
        let metadata = self
            .first_json(
                &authorization_server_metadata(&issuer),
                "authorization server",
            )
            .await;
        discovered(server, protected, &issuer, metadata.as_ref())
    }

    /// The token endpoint of the identity provider whose issuer is `issuer` (its OpenID or
    /// RFC 8414 metadata), for the token exchange of enterprise-managed authorization.
    pub(crate) async fn idp_token_endpoint(&self, issuer: &str) -> Result<String, OAuthError> {
        let url = Url::parse(issuer).map_err(|e| OAuthError::BadIssuer {
            issuer: issuer.to_owned(),
            reason: e.to_string(),
        })?;
        let metadata = self
            .first_json(&authorization_server_metadata(&url), "identity provider")
            .await;
        let endpoint = metadata
            .as_ref()
            .and_then(|m| m.get("token_endpoint"))
            .and_then(Value::as_str)
            .ok_or_else(|| OAuthError::IdpUnknown {
                issuer: issuer.to_owned(),
            })?;
        crate::resource::web_endpoint("token_endpoint", endpoint)?;
        Ok(endpoint.to_owned())
    }

    /// The first of `candidates` that answers JSON with a success status.
    async fn first_json(&self, candidates: &[String], what: &str) -> Option<Value> {
        for candidate in candidates {
            if let Some(found) = self.get_json(candidate).await {
                tracing::debug!(url = %candidate, "{what} metadata");
                return Some(found);
            }
        }
        None
    }

    async fn get_json(&self, url: &str) -> Option<Value> {
        let response = self
            .http
            .get(url)
            .header(ACCEPT, "application/json")
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            tracing::debug!(%url, status = %response.status(), "no metadata here");
            return None;
        }
        let bytes = response.bytes().await.ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// The resource, authorization server and scope of `server` (canonical, parsed as `url`),
/// from its protected resource `metadata` when there is one; refuses metadata for another
/// resource (RFC 9728 §3.3: a token asked for it would be for someone else).
fn protected_resource(
    server: &str,
    url: &Url,
    probe: &Probe,
    metadata: Option<&Value>,
) -> Result<ProtectedResource, OAuthError> {
    // 2025-03-26 servers publish no resource metadata: the server's origin is the
    // authorization server.
    let named = metadata
        .and_then(|m| m.get("authorization_servers"))
        .and_then(Value::as_array)
        .and_then(|servers| servers.first())
        .and_then(Value::as_str);
    let issuer = named.map_or_else(|| url.origin().ascii_serialization(), str::to_owned);
    let named = named.is_some();
    let resource = metadata
        .and_then(|m| m.get("resource"))
        .and_then(Value::as_str)
        .map_or_else(|| server.to_owned(), str::to_owned);
    if !resource_covers(&resource, server) {
        return Err(OAuthError::ForeignResource {
            server: server.to_owned(),
            resource,
        });
    }
    let scope = probe.scope.clone().or_else(|| {
        let scopes = strings(metadata?.get("scopes_supported"));
        (!scopes.is_empty()).then(|| scopes.join(" "))
    });
    Ok(ProtectedResource {
        resource,
        issuer,
        named,
        scope,
    })
}

/// The string items of a JSON array (none when it is not one).
fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Everything discovery found, from the protected resource and the authorization server
/// `metadata` of `issuer` (none: the 2025-03-26 default endpoints).
fn discovered(
    server: String,
    protected: ProtectedResource,
    issuer: &Url,
    metadata: Option<&Value>,
) -> Result<Discovered, OAuthError> {
    let origin = issuer.origin().ascii_serialization();
    let field = |name: &str| {
        metadata
            .and_then(|m| m.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let required =
        |name: &'static str| field(name).ok_or(OAuthError::MissingEndpoint { field: name });
    let (authorization_endpoint, token_endpoint, registration_endpoint) = match metadata {
        Some(metadata) => {
            // RFC 8414 §3.3: the metadata's issuer is the one it was fetched for, else it is
            // another server's (equal as URLs: case of scheme and host, an empty path). Held
            // to the issuer the resource metadata named; a 2025-03-26 server without resource
            // metadata is its own authorization server, its metadata read from its own origin
            // (whose `issuer` may carry a path), so there is no named issuer to compare with.
            let named = metadata.get("issuer").and_then(Value::as_str);
            if protected.named
                && named.and_then(|named| Url::parse(named).ok()).as_ref() != Some(issuer)
            {
                return Err(OAuthError::IssuerMismatch {
                    expected: issuer.to_string(),
                    found: named.map(str::to_owned),
                });
            }
            // An authorization server for machines alone (`client_credentials` only) has no
            // browser step, and need not name where it would be.
            let machines_only = {
                let grants = strings(metadata.get("grant_types_supported"));
                !grants.is_empty() && !grants.iter().any(|g| g == "authorization_code")
            };
            let authorization_endpoint = if machines_only {
                field("authorization_endpoint").unwrap_or_default()
            } else {
                required("authorization_endpoint")?
            };
            (
                authorization_endpoint,
                required("token_endpoint")?,
                field("registration_endpoint"),
            )
        }
        None => (
            format!("{origin}/authorize"),
            format!("{origin}/token"),
            Some(format!("{origin}/register")),
        ),
    };
    for (name, endpoint) in [
        (
            "authorization_endpoint",
            Some(&authorization_endpoint).filter(|endpoint| !endpoint.is_empty()),
        ),
        ("token_endpoint", Some(&token_endpoint)),
        ("registration_endpoint", registration_endpoint.as_ref()),
    ] {
        if let Some(endpoint) = endpoint {
            crate::resource::web_endpoint(name, endpoint)?;
        }
    }
    let client_metadata_documents = metadata
        .and_then(|m| m.get("client_id_metadata_document_supported"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let auth_methods =
        strings(metadata.and_then(|m| m.get("token_endpoint_auth_methods_supported")));
    let grant_types = strings(metadata.and_then(|m| m.get("grant_types_supported")));
    // SEP-2207: tether wants a refresh token; where the authorization server lists
    // `offline_access`, it is asked for too (never where it is not listed).
    let offline = strings(metadata.and_then(|m| m.get("scopes_supported")))
        .iter()
        .any(|s| s == OFFLINE_ACCESS);
    let scope = match protected.scope {
        Some(scope) if offline && !scope.split_whitespace().any(|s| s == OFFLINE_ACCESS) => {
            Some(format!("{scope} {OFFLINE_ACCESS}"))
        }
        scope => scope,
    };
    let recorded_issuer = metadata
        .and_then(|m| m.get("issuer"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let iss_parameter_supported = metadata
        .and_then(|m| m.get("authorization_response_iss_parameter_supported"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let dpop_algs = strings(metadata.and_then(|m| m.get("dpop_signing_alg_values_supported")));
    Ok(Discovered {
        dpop_algs,
        issuer: recorded_issuer,
        iss_parameter_supported,
        server,
        resource: protected.resource,
        scope,
        authorization_endpoint,
        token_endpoint,
        registration_endpoint,
        auth_methods,
        grant_types,
        client_metadata_documents,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: &str = "http://127.0.0.1:8/mcp";

    fn url() -> Url {
        Url::parse(SERVER).expect("a URL")
    }

    fn protected(probe: &Probe, metadata: Option<Value>) -> Result<ProtectedResource, OAuthError> {
        protected_resource(SERVER, &url(), probe, metadata.as_ref())
    }

    #[test]
    fn the_challenge_is_read_from_every_www_authenticate_header() {
        let mut headers = HeaderMap::new();
        headers.append(
            WWW_AUTHENTICATE,
            "Basic realm=\"x\"".parse().expect("a value"),
        );
        headers.append(
            WWW_AUTHENTICATE,
            r#"Bearer resource_metadata="http://a/.well-known/oauth-protected-resource", scope="mcp read""#
                .parse()
                .expect("a value"),
        );
        assert_eq!(
            Probe::read(StatusCode::UNAUTHORIZED, &headers),
            Probe {
                unauthorized: true,
                resource_metadata: Some("http://a/.well-known/oauth-protected-resource".to_owned()),
                scope: Some("mcp read".to_owned()),
            }
        );
        assert_eq!(
            Probe::read(StatusCode::OK, &HeaderMap::new()),
            Probe::default()
        );
    }

    #[test]
    fn resource_metadata_names_the_issuer_resource_and_scopes() {
        let metadata = json!({
            "resource": "http://127.0.0.1:8",
            "authorization_servers": ["https://auth.example/tenant", "https://other.example"],
            "scopes_supported": ["mcp", "read"],
        });
        assert_eq!(
            protected(&Probe::default(), Some(metadata.clone())).expect("metadata for this server"),
            ProtectedResource {
                resource: "http://127.0.0.1:8".to_owned(),
                issuer: "https://auth.example/tenant".to_owned(),
                named: true,
                scope: Some("mcp read".to_owned()),
            }
        );
        // The challenge's scope comes first.
        let probe = Probe {
            scope: Some("write".to_owned()),
            ..Probe::default()
        };
        let found = protected(&probe, Some(metadata)).expect("metadata for this server");
        assert_eq!(found.scope.as_deref(), Some("write"));
        // None at all: the server's origin and URL, no scope.
        assert_eq!(
            protected(&Probe::default(), None).expect("no metadata"),
            ProtectedResource {
                resource: SERVER.to_owned(),
                issuer: "http://127.0.0.1:8".to_owned(),
                named: false,
                scope: None,
            }
        );
    }

    #[test]
    fn metadata_for_another_resource_stops_discovery() {
        let metadata = json!({"resource": "https://evil.example/mcp"});
        match protected(&Probe::default(), Some(metadata)) {
            Err(OAuthError::ForeignResource { server, resource }) => {
                assert_eq!(
                    (server.as_str(), resource.as_str()),
                    (SERVER, "https://evil.example/mcp")
                );
            }
            other => panic!("{other:?}"),
        }
    }

    fn facts(scope: Option<&str>) -> ProtectedResource {
        ProtectedResource {
            resource: SERVER.to_owned(),
            issuer: "http://127.0.0.1:8".to_owned(),
            named: true,
            scope: scope.map(str::to_owned),
        }
    }

    #[test]
    fn authorization_server_metadata_names_endpoints_methods_and_offline_access() {
        let metadata = json!({
            "issuer": SERVER,
            "authorization_endpoint": "https://auth.example/authorize",
            "token_endpoint": "https://auth.example/token",
            "token_endpoint_auth_methods_supported": ["client_secret_post", 7],
            "scopes_supported": ["mcp", "offline_access"],
            "client_id_metadata_document_supported": true,
        });
        let found = discovered(
            SERVER.to_owned(),
            facts(Some("mcp")),
            &url(),
            Some(&metadata),
        )
        .expect("complete metadata");
        assert_eq!(
            found,
            Discovered {
                server: SERVER.to_owned(),
                resource: SERVER.to_owned(),
                scope: Some("mcp offline_access".to_owned()),
                authorization_endpoint: "https://auth.example/authorize".to_owned(),
                token_endpoint: "https://auth.example/token".to_owned(),
                registration_endpoint: None,
                auth_methods: vec!["client_secret_post".to_owned()],
                grant_types: Vec::new(),
                client_metadata_documents: true,
                issuer: Some(SERVER.to_owned()),
                iss_parameter_supported: false,
                dpop_algs: Vec::new(),
            }
        );
        // offline_access is added once, and never to no scope at all.
        let again = discovered(
            SERVER.to_owned(),
            facts(Some("offline_access mcp")),
            &url(),
            Some(&metadata),
        )
        .expect("complete metadata");
        assert_eq!(again.scope.as_deref(), Some("offline_access mcp"));
        let none = discovered(SERVER.to_owned(), facts(None), &url(), Some(&metadata))
            .expect("complete metadata");
        assert_eq!(none.scope, None);
    }

    #[test]
    fn without_metadata_the_2025_03_26_endpoints_are_used() {
        let found = discovered(SERVER.to_owned(), facts(None), &url(), None).expect("defaults");
        assert_eq!(found.authorization_endpoint, "http://127.0.0.1:8/authorize");
        assert_eq!(found.token_endpoint, "http://127.0.0.1:8/token");
        assert_eq!(
            found.registration_endpoint.as_deref(),
            Some("http://127.0.0.1:8/register")
        );
        assert!(found.auth_methods.is_empty() && !found.client_metadata_documents);
    }

    #[test]
    fn metadata_of_another_issuer_or_with_unsafe_endpoints_is_refused() {
        let endpoints = json!({
            "authorization_endpoint": "https://auth.example/authorize",
            "token_endpoint": "https://auth.example/token",
        });
        for issuer in [json!("https://evil.example"), json!(null), json!(7)] {
            let mut metadata = endpoints.clone();
            metadata["issuer"] = issuer.clone();
            assert!(
                matches!(
                    discovered(SERVER.to_owned(), facts(None), &url(), Some(&metadata)),
                    Err(OAuthError::IssuerMismatch { .. })
                ),
                "{issuer}"
            );
        }
        for (field, bad) in [
            ("authorization_endpoint", "javascript:alert(1)"),
            ("token_endpoint", "file:///etc/passwd"),
            ("registration_endpoint", "http://auth.example/register"),
        ] {
            let mut metadata = endpoints.clone();
            metadata["issuer"] = json!(SERVER);
            metadata[field] = json!(bad);
            match discovered(SERVER.to_owned(), facts(None), &url(), Some(&metadata)) {
                Err(OAuthError::UnsafeEndpoint { field: named, .. }) => assert_eq!(named, field),
                other => panic!("{field} {bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn metadata_without_a_token_endpoint_is_refused() {
        let metadata =
            json!({"issuer": SERVER, "authorization_endpoint": "https://auth.example/authorize"});
        assert!(matches!(
            discovered(SERVER.to_owned(), facts(None), &url(), Some(&metadata)),
            Err(OAuthError::MissingEndpoint {
                field: "token_endpoint"
            })
        ));
    }

    #[test]
    fn a_servers_own_metadata_may_name_an_issuer_with_a_path_but_not_unsafe_endpoints() {
        // 2025-03-26: no resource metadata, the server's origin is asked; its metadata's issuer
        // (here with a path) names no other server than the one tether talks to.
        let own = ProtectedResource {
            named: false,
            ..facts(None)
        };
        let metadata = json!({
            "issuer": "http://127.0.0.1:8/oauth",
            "authorization_endpoint": "http://127.0.0.1:8/oauth/authorize",
            "token_endpoint": "http://127.0.0.1:8/oauth/token",
        });
        let found = discovered(SERVER.to_owned(), own.clone(), &url(), Some(&metadata))
            .expect("the server's own metadata");
        assert_eq!(
            found.authorization_endpoint,
            "http://127.0.0.1:8/oauth/authorize"
        );
        let mut hostile = metadata.clone();
        hostile["authorization_endpoint"] = json!("file:///etc/passwd");
        assert!(matches!(
            discovered(SERVER.to_owned(), own, &url(), Some(&hostile)),
            Err(OAuthError::UnsafeEndpoint { .. })
        ));
        // Named by resource metadata: held to it.
        assert!(matches!(
            discovered(SERVER.to_owned(), facts(None), &url(), Some(&metadata)),
            Err(OAuthError::IssuerMismatch { .. })
        ));
    }
}
