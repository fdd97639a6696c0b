//! `tether-test-registry`: a loopback MCP registry for tether's tests and benches.
//!
//! Serves the official registry's `/v0.1` API and Smithery's `/servers` API from the fixture
//! files in `fixtures/` on `127.0.0.1` (port 0 unless `--port`), prints `http://127.0.0.1:PORT`
//! on stdout once listening, and exits when stdin closes (so a test that dies leaves no
//! server behind).
//!
//! Fault injection through the search text: `fail-500`, `fail-400` answer that status, `slow`
//! answers after 5 s, `huge` streams a 1 GiB body (no length given) that never ends its JSON. `POST /_touch/{name}` marks an official entry updated now (for
//! `updated_since`); `GET /_stats` counts requests, 304s and unauthorised Smithery requests.
//! `--smithery-detail FILE` adds a Smithery detail; `--entry FILE` adds an official entry (`--no-fixtures`: serve only those) and `--file NAME=PATH` serves a file at
//! `/_files/NAME` (an mcpb bundle for `tether add`).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Parser;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

const OFFICIAL: &str = include_str!("../fixtures/official.json");
const SMITHERY: &str = include_str!("../fixtures/smithery.json");
const META: &str = "io.modelcontextprotocol.registry/official";

#[derive(Debug, Parser)]
#[command(about = "A loopback MCP registry serving fixture entries")]
struct Args {
    /// Largest page the official list and Smithery return, whatever the client asks.
    #[arg(long, default_value_t = 3)]
    page_size: usize,
    /// Send no ETag (clients must revalidate with `updated_since`).
    #[arg(long)]
    no_etag: bool,
    /// The Bearer key Smithery requests must carry.
    #[arg(long, default_value = "fixture-smithery-key")]
    smithery_key: String,
    /// Port to listen on (0: any free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// An extra official entry: a JSON file holding one list item (`{"server": …, "_meta":
    /// …}`); `{base}` in it becomes this registry's URL. Repeatable.
    #[arg(long, value_name = "FILE")]
    entry: Vec<std::path::PathBuf>,
    /// An extra Smithery detail (`GET /servers/{qualifiedName}`): a JSON file holding one;
    /// `{base}` in it becomes this registry's URL. Repeatable.
    #[arg(long, value_name = "FILE")]
    smithery_detail: Vec<std::path::PathBuf>,
    /// Serve only the `--entry` entries, not the official fixtures (a second registry with
    /// entries of its own).
    #[arg(long)]
    no_fixtures: bool,
    /// Serve the file PATH at `/_files/NAME` (a bundle to download). Repeatable.
    #[arg(long, value_name = "NAME=PATH")]
    file: Vec<String>,
}

struct Registry {
    args: Args,
    /// `--file` bytes by name.
    files: std::collections::HashMap<String, Vec<u8>>,
    official: Mutex<Vec<Value>>,
    smithery: Value,
    requests: AtomicU64,
    not_modified: AtomicU64,
    unauthorized: AtomicU64,
}

type Shared = Arc<Registry>;

#[derive(Debug, Deserialize)]
struct ListQuery {
    search: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
    version: Option<String>,
    updated_since: Option<String>,
    include_deleted: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SmitheryQuery {
    q: Option<String>,
    page: Option<usize>,
    page_size: Option<usize>,
}

fn meta<'a>(entry: &'a Value, key: &str) -> Option<&'a Value> {
    entry.get("_meta")?.get(META)?.get(key)
}

fn name_of(entry: &Value) -> &str {
    entry["server"]["name"].as_str().unwrap_or_default()
}

fn version_of(entry: &Value) -> &str {
    entry["server"]["version"].as_str().unwrap_or_default()
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({ "error": message }))).into_response()
}

/// Faults asked for through the search text.
async fn fault(text: &str) -> Option<Response> {
    if text.contains("fail-500") {
        return Some(error(StatusCode::INTERNAL_SERVER_ERROR, "fixture failure"));
    }
    if text.contains("fail-400") {
        return Some(error(StatusCode::BAD_REQUEST, "invalid search"));
    }
    if text.contains("slow") {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    if text.contains("huge") {
        let chunk = axum::body::Bytes::from(vec![b' '; 1024 * 1024]);
        let start = axum::body::Bytes::from_static(b"{\"servers\": [");
        let body = futures_util::stream::iter(
            std::iter::once(start)
                .chain(std::iter::repeat_n(chunk, 1024))
                .map(Ok::<_, std::convert::Infallible>),
        );
        return Some(
            (
                [(header::CONTENT_TYPE, "application/json")],
                axum::body::Body::from_stream(body),
            )
                .into_response(),
        );
    }
    None
}

/// A JSON answer with an ETag over its body (unless `--no-etag`), or 304 when it matches.
fn answer(registry: &Registry, headers: &HeaderMap, body: &Value) -> Response {
    let text = body.to_string();
    if registry.args.no_etag {
        return ([(header::CONTENT_TYPE, "application/json")], text).into_response();
    }
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    let etag = format!("\"{:016x}\"", hasher.finish());
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        registry.not_modified.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response();
    }
    let etag = HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("\"0\""));
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::ETAG, etag),
        ],
        text,
    )
        .into_response()
}

async fn list(
    State(registry): State<Shared>,
    Query(query): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    registry.requests.fetch_add(1, Ordering::Relaxed);
    let text = query.search.clone().unwrap_or_default().to_lowercase();
    if let Some(response) = fault(&text).await {
        return response;
    }
    let rows: Vec<Value> = {
        let official = registry.official.lock().unwrap_or_else(|p| p.into_inner());
        official
            .iter()
            .filter(|e| {
                name_of(e).to_lowercase().contains(&text)
                    || e["server"]["description"]
                        .as_str()
                        .unwrap_or_default()
                        .to_lowercase()
                        .contains(&text)
            })
            .filter(|e| {
                query.version.as_deref() != Some("latest")
                    || meta(e, "isLatest").and_then(Value::as_bool) == Some(true)
            })
            .filter(|e| {
                query.include_deleted == Some(true)
                    || meta(e, "status").and_then(Value::as_str) != Some("deleted")
            })
            .filter(|e| match &query.updated_since {
                Some(since) => meta(e, "updatedAt")
                    .and_then(Value::as_str)
                    .is_some_and(|updated| updated > since.as_str()),
                None => true,
            })
            .cloned()
            .collect()
    };
    let start = match &query.cursor {
        Some(cursor) => match rows
            .iter()
            .position(|e| format!("{}:{}", name_of(e), version_of(e)) == *cursor)
        {
            Some(i) => i + 1,
            None => return error(StatusCode::BAD_REQUEST, "invalid cursor"),
        },
        None => 0,
    };
    let limit = query.limit.unwrap_or(30);
    if !(1..=100).contains(&limit) {
        return error(StatusCode::BAD_REQUEST, "limit must be 1..100");
    }
    let size = limit.min(registry.args.page_size);
    let page: Vec<Value> = rows.iter().skip(start).take(size).cloned().collect();
    let mut metadata = json!({ "count": page.len() });
    if start + page.len() < rows.len()
        && let Some(last) = page.last()
    {
        metadata["nextCursor"] = json!(format!("{}:{}", name_of(last), version_of(last)));
    }
    answer(
        &registry,
        &headers,
        &json!({ "servers": page, "metadata": metadata }),
    )
}

async fn versions(State(registry): State<Shared>, Path(name): Path<String>) -> Response {
    registry.requests.fetch_add(1, Ordering::Relaxed);
    let official = registry.official.lock().unwrap_or_else(|p| p.into_inner());
    let rows: Vec<Value> = official
        .iter()
        .filter(|e| name_of(e) == name)
        .cloned()
        .collect();
    if rows.is_empty() {
        return error(StatusCode::NOT_FOUND, "Server not found");
    }
    axum::Json(json!({ "servers": rows, "metadata": { "count": rows.len() } })).into_response()
}

async fn version(
    State(registry): State<Shared>,
    Path((name, version)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    registry.requests.fetch_add(1, Ordering::Relaxed);
    let found = {
        let official = registry.official.lock().unwrap_or_else(|p| p.into_inner());
        official
            .iter()
            .find(|e| {
                name_of(e) == name
                    && if version == "latest" {
                        meta(e, "isLatest").and_then(Value::as_bool) == Some(true)
                    } else {
                        version_of(e) == version
                    }
            })
            .cloned()
    };
    match found {
        Some(entry) => answer(&registry, &headers, &entry),
        None => error(StatusCode::NOT_FOUND, "Server not found"),
    }
}

async fn touch(State(registry): State<Shared>, Path(name): Path<String>) -> Response {
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let mut official = registry.official.lock().unwrap_or_else(|p| p.into_inner());
    let mut touched = 0;
    for entry in official.iter_mut().filter(|e| name_of(e) == name) {
        entry["server"]["description"] = json!("Updated just now");
        entry["_meta"][META]["updatedAt"] = json!(now);
        touched += 1;
    }
    axum::Json(json!({ "touched": touched })).into_response()
}

async fn stats(State(registry): State<Shared>) -> Response {
    axum::Json(json!({
        "requests": registry.requests.load(Ordering::Relaxed),
        "notModified": registry.not_modified.load(Ordering::Relaxed),
        "unauthorized": registry.unauthorized.load(Ordering::Relaxed),
    }))
    .into_response()
}

fn authorised(registry: &Registry, headers: &HeaderMap) -> bool {
    let expected = format!("Bearer {}", registry.args.smithery_key);
    let ok = headers
        .get(header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes() == expected.as_bytes());
    if !ok {
        registry.unauthorized.fetch_add(1, Ordering::Relaxed);
    }
    ok
}

async fn smithery_list(
    State(registry): State<Shared>,
    Query(query): Query<SmitheryQuery>,
    headers: HeaderMap,
) -> Response {
    registry.requests.fetch_add(1, Ordering::Relaxed);
    if !authorised(&registry, &headers) {
        return error(StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    let text = query.q.clone().unwrap_or_default().to_lowercase();
    if let Some(response) = fault(&text).await {
        return response;
    }
    let rows: Vec<Value> = registry.smithery["servers"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter(|row| {
                    ["qualifiedName", "displayName", "description"]
                        .iter()
                        .any(|key| {
                            row[key]
                                .as_str()
                                .unwrap_or_default()
                                .to_lowercase()
                                .contains(&text)
                        })
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let size = query
        .page_size
        .unwrap_or(10)
        .clamp(1, registry.args.page_size);
    let page = query.page.unwrap_or(1).max(1);
    let total_pages = rows.len().div_ceil(size).max(1);
    let servers: Vec<Value> = rows
        .iter()
        .skip((page - 1) * size)
        .take(size)
        .cloned()
        .collect();
    answer(
        &registry,
        &headers,
        &json!({
            "servers": servers,
            "pagination": { "currentPage": page, "pageSize": size, "totalPages": total_pages, "totalCount": rows.len() }
        }),
    )
}

async fn smithery_detail(
    State(registry): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    registry.requests.fetch_add(1, Ordering::Relaxed);
    if !authorised(&registry, &headers) {
        return error(StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    match registry.smithery["details"].get(&name) {
        Some(detail) => answer(&registry, &headers, detail),
        None => error(StatusCode::NOT_FOUND, "Server not found"),
    }
}

/// `GET /_files/{name}`: a `--file`'s bytes.
async fn file(State(registry): State<Shared>, Path(name): Path<String>) -> Response {
    registry.requests.fetch_add(1, Ordering::Relaxed);
    match registry.files.get(&name) {
        Some(bytes) => ([(header::CONTENT_TYPE, "application/zip")], bytes.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut official: Vec<Value> = if args.no_fixtures {
        Vec::new()
    } else {
        serde_json::from_str(OFFICIAL)?
    };
    let mut smithery: Value = serde_json::from_str(SMITHERY)?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    let base = format!("http://{}", listener.local_addr()?);
    for path in &args.entry {
        let text = std::fs::read_to_string(path)?.replace("{base}", &base);
        official.push(serde_json::from_str(&text)?);
    }
    for path in &args.smithery_detail {
        let text = std::fs::read_to_string(path)?.replace("{base}", &base);
        let detail: Value = serde_json::from_str(&text)?;
        let name = detail["qualifiedName"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        smithery["details"][name] = detail;
    }
    let mut files = std::collections::HashMap::new();
    for spec in &args.file {
        let (name, path) = spec.split_once('=').ok_or("--file takes NAME=PATH")?;
        files.insert(name.to_owned(), std::fs::read(path)?);
    }
    let registry = Arc::new(Registry {
        files,
        args,
        official: Mutex::new(official),
        smithery,
        requests: AtomicU64::new(0),
        not_modified: AtomicU64::new(0),
        unauthorized: AtomicU64::new(0),
    });
    let app = Router::new()
        .route("/v0.1/servers", get(list))
        .route("/v0.1/servers/{name}/versions", get(versions))
        .route("/v0.1/servers/{name}/versions/{version}", get(version))
        .route("/servers", get(smithery_list))
        .route("/servers/{name}", get(smithery_detail))
        .route("/_touch/{name}", post(touch))
        .route("/_stats", get(stats))
        .route("/_files/{name}", get(file))
        .with_state(registry);
    println!("{base}");
    let stdin_closed = async {
        let mut buffer = [0u8; 64];
        let mut stdin = tokio::io::stdin();
        while matches!(stdin.read(&mut buffer).await, Ok(n) if n > 0) {}
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(stdin_closed)
        .await?;
    Ok(())
}
