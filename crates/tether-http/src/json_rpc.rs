//! The bodies of tether's MCP endpoints over HTTP (the gateway's and setup-mcp's `/mcp`): a
//! POST whose `Content-Type` is JSON must hold one JSON-RPC message, else it gets 400 with a
//! JSON-RPC error body (-32700 when it is not JSON, -32600 when it is not a message), as
//! JSON-RPC over HTTP says; 415 stays for a `Content-Type` that is not JSON, which is what it
//! means. rmcp answers 415 to both; the check runs before it. What a message is, the caller
//! says ([`BodyCheck::parses`]: rmcp's own type), since this crate knows no MCP.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// JSON-RPC's "Parse error": the body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's "Invalid Request": JSON, but not a message.
pub const INVALID_REQUEST: i64 = -32600;

/// How a POST body is checked.
#[derive(Debug, Clone, Copy)]
pub struct BodyCheck {
    /// The largest body read (413 beyond).
    pub limit: usize,
    /// Whether the bytes are one message the endpoint knows; the error says why not.
    pub parses: fn(&[u8]) -> Result<(), String>,
}

/// Middleware: [`checked`] in front of the endpoint.
pub async fn check_body(
    State(check): State<Arc<BodyCheck>>,
    request: Request,
    next: Next,
) -> Response {
    match checked(request, &check).await {
        Ok(request) => next.run(request).await,
        Err(refused) => refused,
    }
}

/// `request`, its body read and checked when it is a JSON POST (then handed on in memory), or
/// the refusal to send instead.
pub async fn checked(request: Request, check: &BodyCheck) -> Result<Request, Response> {
    if request.method() != Method::POST || !is_json(request.headers()) {
        return Ok(request);
    }
    let (parts, body) = request.into_parts();
    let limit = check.limit;
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than {limit} bytes, or was cut off\n"),
        )
            .into_response());
    };
    if let Err(why) = (check.parses)(&bytes) {
        let (code, what) = match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Err(_) => (PARSE_ERROR, "Parse error: the body is not JSON"),
            Ok(_) => (
                INVALID_REQUEST,
                "Invalid Request: the body is not one JSON-RPC message this endpoint knows",
            ),
        };
        return Err(error_response(
            StatusCode::BAD_REQUEST,
            code,
            &format!("{what} ({why})"),
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// Whether `headers` say the body is JSON (`application/json`, any parameters).
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// An HTTP `status` whose body is a JSON-RPC error `code` with `message` (`id` null: the
/// request's id was not read).
pub fn error_response(status: StatusCode, code: i64, message: &str) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code, "message": message},
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects_only(bytes: &[u8]) -> Result<(), String> {
        match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(serde_json::Value::Object(_)) => Ok(()),
            _ => Err("not an object".to_owned()),
        }
    }

    async fn status_of(content_type: &str, body: &'static str) -> (StatusCode, Option<i64>) {
        let check = BodyCheck {
            limit: 64,
            parses: objects_only,
        };
        let request = Request::post("/mcp")
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(body))
            .expect("a request");
        match checked(request, &check).await {
            Ok(_) => (StatusCode::OK, None),
            Err(response) => {
                let status = response.status();
                let bytes = axum::body::to_bytes(response.into_body(), 4096)
                    .await
                    .expect("the body");
                let code = serde_json::from_slice::<serde_json::Value>(&bytes)
                    .ok()
                    .and_then(|v| v["error"]["code"].as_i64());
                (status, code)
            }
        }
    }

    #[tokio::test]
    async fn bodies_are_refused_by_what_is_wrong_with_them() {
        let json = "application/json; charset=utf-8";
        assert_eq!(status_of(json, "{}").await, (StatusCode::OK, None));
        assert_eq!(
            status_of(json, "nope").await,
            (StatusCode::BAD_REQUEST, Some(PARSE_ERROR))
        );
        assert_eq!(
            status_of(json, "[1]").await,
            (StatusCode::BAD_REQUEST, Some(INVALID_REQUEST))
        );
        let large = "{\"x\": \"0123456789012345678901234567890123456789012345678901234567890\"}";
        assert_eq!(
            status_of(json, large).await,
            (StatusCode::PAYLOAD_TOO_LARGE, None)
        );
        // Not JSON by its type: left to the endpoint (rmcp's 415).
        assert_eq!(
            status_of("text/plain", "nope").await,
            (StatusCode::OK, None)
        );
    }
}
