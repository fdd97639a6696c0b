//! `--oauth`: a small OAuth 2.1 authorization server on the same port as `/mcp`, and the
//! bearer check of the tokens it issues in front of `/mcp`. For tests of an MCP client's
//! authorization flow; not for anything else (tokens are counters plus clock noise, state is
//! in memory).
//!
//! - `GET /.well-known/oauth-protected-resource[/mcp]`: RFC 9728 metadata (`resource` is the
//!   `/mcp` URL, the authorization server is this origin, `scopes_supported: ["mcp"]`).
//! - `GET /.well-known/oauth-authorization-server`: RFC 8414 metadata.
//! - `POST /register`: RFC 7591 dynamic registration (public clients, `none`).
//! - With `--oauth-cimd`, the metadata says `client_id_metadata_document_supported` and any
//!   `https://` client id is taken as a client-id metadata document URL, unregistered (the
//!   document is not fetched: tests have no https server; a real server fetches it and checks
//!   its `redirect_uris`).
//! - `GET /authorize`: checks the client, redirect URI, PKCE S256 and `resource`, then
//!   redirects at once with a code (no login page) and `state`. The scopes granted are those
//!   asked for among `mcp` and `mcp:write` (`mcp` when none is asked for).
//! - `POST /token`: `authorization_code` (PKCE checked) and `refresh_token` (rotated: the old
//!   one stops working); access tokens live `--oauth-token-ttl` seconds.
//! - `POST /revoke`: revokes every token issued so far (a test's "the user revoked access").
//! - `POST /expire`: ends every access token early, refresh tokens stay valid (a server that
//!   refuses a token the client still thinks is fresh).
//! - `GET /stats`: `{"codes":N,"refreshes":N,"registrations":N}`.
//!
//! In front of `/mcp`: a live access token, else 401; and a `tools/call` of `add` needs the
//! scope `mcp:write` too, else 403 `insufficient_scope` with `scope="mcp mcp:write"` (a
//! step-up).
//!
//! Issued tokens start with `SENTINEL-AT-` / `SENTINEL-RT-`, so a test can look for them in
//! every output, and hold what a shell, a template or an encoder could mangle (`$HOME`, `$$`,
//! `%`, a space, quotes, `\`, `{{x}}`; everything an HTTP header value allows, so no line
//! break and no non-ASCII).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

/// The server's state: registrations, pending codes, live tokens.
pub struct AuthServer {
    base: String,
    resource: String,
    ttl: Duration,
    client_metadata_documents: bool,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    counter: u64,
    clients: HashMap<String, Vec<String>>,
    codes: HashMap<String, PendingCode>,
    /// Access token → (end of life, scopes).
    access: HashMap<String, (Instant, Vec<String>)>,
    /// Refresh token → (client id, scopes).
    refresh: HashMap<String, (String, Vec<String>)>,
    issued_codes: u64,
    refreshes: u64,
}

struct PendingCode {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    scopes: Vec<String>,
}

/// In every token: what a shell, a template or an encoder could mangle.
const HOSTILE: &str = r#"$HOME $$ %41 "q" 'q' \ {{x}} ${X}"#;

/// The scopes this server grants.
const SCOPES: [&str; 2] = ["mcp", "mcp:write"];

/// The scope a `tools/call` of `add` needs besides `mcp`.
const WRITE_SCOPE: &str = "mcp:write";

/// The scopes granted for `asked` (a space-separated `scope`): those known, else `mcp`.
fn granted(asked: &str) -> Vec<String> {
    let scopes: Vec<String> = asked
        .split_whitespace()
        .filter(|scope| SCOPES.contains(scope))
        .map(str::to_owned)
        .collect();
    if scopes.is_empty() {
        vec!["mcp".to_owned()]
    } else {
        scopes
    }
}

type Shared = Arc<AuthServer>;

impl AuthServer {
    /// A server whose origin is `base` (`http://127.0.0.1:PORT`), protecting `resource` (the
    /// MCP endpoint's URL).
    pub fn new(
        base: String,
        resource: String,
        ttl: Duration,
        client_metadata_documents: bool,
    ) -> Shared {
        Arc::new(Self {
            base,
            resource,
            ttl,
            client_metadata_documents,
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn resource(&self) -> String {
        self.resource.clone()
    }
}

impl Inner {
    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        let noise = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        format!("{prefix}{}-{noise:08x}", self.counter)
    }
}

/// The authorization server's routes.
pub fn routes(server: Shared) -> Router {
    Router::new()
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(server_metadata),
        )
        .route("/register", post(register))
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .route("/revoke", post(revoke))
        .route("/expire", post(expire))
        .route("/stats", get(stats))
        .with_state(server)
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        value.to_string(),
    )
        .into_response()
}

fn oauth_error(code: &str) -> Response {
    json_response(StatusCode::BAD_REQUEST, &json!({ "error": code }))
}

async fn resource_metadata(State(server): State<Shared>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "resource": server.resource(),
            "authorization_servers": [server.base],
            "scopes_supported": ["mcp"],
            "bearer_methods_supported": ["header"],
        }),
    )
}

async fn server_metadata(State(server): State<Shared>) -> Response {
    let base = &server.base;
    let mut metadata = json!({
            "issuer": base,
            "authorization_endpoint": format!("{base}/authorize"),
            "token_endpoint": format!("{base}/token"),
            "registration_endpoint": format!("{base}/register"),
            "revocation_endpoint": format!("{base}/revoke"),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "scopes_supported": SCOPES,
    });
    if server.client_metadata_documents {
        metadata["client_id_metadata_document_supported"] = json!(true);
    }
    json_response(StatusCode::OK, &metadata)
}

async fn register(State(server): State<Shared>, body: String) -> Response {
    let Ok(request) = serde_json::from_str::<Value>(&body) else {
        return oauth_error("invalid_client_metadata");
    };
    let redirect_uris: Vec<String> = request
        .get("redirect_uris")
        .and_then(Value::as_array)
        .map(|uris| {
            uris.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if redirect_uris.is_empty() {
        return oauth_error("invalid_redirect_uri");
    }
    let mut inner = server.lock();
    let client_id = inner.fresh("client-");
    inner
        .clients
        .insert(client_id.clone(), redirect_uris.clone());
    tracing::info!(%client_id, "registered a client");
    json_response(
        StatusCode::CREATED,
        &json!({
            "client_id": client_id,
            "redirect_uris": redirect_uris,
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
        }),
    )
}

async fn authorize(
    State(server): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let field = |name: &str| query.get(name).cloned().unwrap_or_default();
    let (client_id, redirect_uri) = (field("client_id"), field("redirect_uri"));
    let mut inner = server.lock();
    let known = inner
        .clients
        .get(&client_id)
        .is_some_and(|uris| uris.contains(&redirect_uri))
        || (server.client_metadata_documents && client_id.starts_with("https://"));
    if !known {
        return (StatusCode::BAD_REQUEST, "unknown client or redirect_uri\n").into_response();
    }
    let refused = if field("response_type") != "code" {
        Some("unsupported_response_type")
    } else if field("code_challenge_method") != "S256" || field("code_challenge").is_empty() {
        Some("invalid_request")
    } else if field("resource") != server.resource() {
        Some("invalid_target")
    } else {
        None
    };
    let mut target: Vec<(&str, String)> = Vec::new();
    if let Some(error) = refused {
        target.push(("error", error.to_owned()));
    } else {
        let code = inner.fresh("code-");
        inner.codes.insert(
            code.clone(),
            PendingCode {
                client_id,
                redirect_uri: redirect_uri.clone(),
                challenge: field("code_challenge"),
                scopes: granted(&field("scope")),
            },
        );
        inner.issued_codes += 1;
        target.push(("code", code));
    }
    target.push(("state", field("state")));
    let location = format!(
        "{redirect_uri}{}{}",
        if redirect_uri.contains('?') { '&' } else { '?' },
        encode_pairs(&target)
    );
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

fn encode_pairs(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .map(|(name, value)| format!("{name}={}", percent_encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

fn percent_encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

async fn token(
    State(server): State<Shared>,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let field = |name: &str| form.get(name).cloned().unwrap_or_default();
    if field("resource") != server.resource() {
        return oauth_error("invalid_target");
    }
    let mut inner = server.lock();
    match field("grant_type").as_str() {
        "authorization_code" => {
            let Some(pending) = inner.codes.remove(&field("code")) else {
                return oauth_error("invalid_grant");
            };
            let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(field("code_verifier")));
            if pending.client_id != field("client_id")
                || pending.redirect_uri != field("redirect_uri")
                || pending.challenge != challenge
            {
                return oauth_error("invalid_grant");
            }
            issue(&server, &mut inner, &pending.client_id, pending.scopes)
        }
        "refresh_token" => {
            let Some((client_id, scopes)) = inner.refresh.remove(&field("refresh_token")) else {
                return oauth_error("invalid_grant");
            };
            if client_id != field("client_id") {
                return oauth_error("invalid_grant");
            }
            inner.refreshes += 1;
            issue(&server, &mut inner, &client_id, scopes)
        }
        // A workload's JWT from its platform (RFC 7523 §2.1): any assertion that starts
        // `SENTINEL-WL-` stands for one (so a test can look for it in output).
        "urn:ietf:params:oauth:grant-type:jwt-bearer" => {
            if !field("assertion").starts_with("SENTINEL-WL-") {
                return oauth_error("invalid_grant");
            }
            issue(&server, &mut inner, &field("client_id"), Vec::new())
        }
        _ => oauth_error("unsupported_grant_type"),
    }
}

fn issue(server: &AuthServer, inner: &mut Inner, client_id: &str, scopes: Vec<String>) -> Response {
    let access = inner.fresh(&format!("SENTINEL-AT-{HOSTILE}-"));
    let refresh = inner.fresh(&format!("SENTINEL-RT-{HOSTILE}-"));
    let scope = scopes.join(" ");
    inner.access.insert(
        access.clone(),
        (Instant::now() + server.ttl, scopes.clone()),
    );
    inner
        .refresh
        .insert(refresh.clone(), (client_id.to_owned(), scopes));
    json_response(
        StatusCode::OK,
        &json!({
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": server.ttl.as_secs(),
            "refresh_token": refresh,
            "scope": scope,
        }),
    )
}

async fn revoke(State(server): State<Shared>) -> Response {
    let mut inner = server.lock();
    inner.access.clear();
    inner.refresh.clear();
    tracing::info!("revoked every token");
    StatusCode::OK.into_response()
}

async fn expire(State(server): State<Shared>) -> Response {
    server.lock().access.clear();
    tracing::info!("expired every access token (refresh tokens stay valid)");
    StatusCode::OK.into_response()
}

async fn stats(State(server): State<Shared>) -> Response {
    let inner = server.lock();
    json_response(
        StatusCode::OK,
        &json!({
            "codes": inner.issued_codes,
            "refreshes": inner.refreshes,
            "registrations": inner.clients.len(),
        }),
    )
}

/// The bearer check in front of `/mcp`: a live access token this server issued, else 401
/// with the challenge that points at the resource metadata; a `tools/call` of `add` without
/// `mcp:write`, 403 `insufficient_scope`.
pub async fn require_token(State(server): State<Shared>, request: Request, next: Next) -> Response {
    let scopes = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .and_then(|token| {
            server
                .lock()
                .access
                .get(token)
                .filter(|(until, _)| Instant::now() < *until)
                .map(|(_, scopes)| scopes.clone())
        });
    let metadata = format!("{}/.well-known/oauth-protected-resource/mcp", server.base);
    let Some(scopes) = scopes else {
        let challenge = format!(
            "Bearer error=\"invalid_token\", resource_metadata=\"{metadata}\", scope=\"mcp\""
        );
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, challenge)],
            "missing, expired or revoked access token\n",
        )
            .into_response();
    };
    if scopes.iter().any(|scope| scope == WRITE_SCOPE) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "body too large\n").into_response();
    };
    let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if message["method"] == "tools/call" && message["params"]["name"] == "add" {
        let challenge = format!(
            "Bearer error=\"insufficient_scope\", scope=\"mcp {WRITE_SCOPE}\", resource_metadata=\"{metadata}\""
        );
        return (
            StatusCode::FORBIDDEN,
            [(header::WWW_AUTHENTICATE, challenge)],
            "add needs the scope mcp:write\n",
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}
