//! The header rules of tether's two MCP reverse proxies, the hand-off bridge and the team
//! server's `/mcp-proxy/{uid}`: an allow-list each way. Nothing else crosses — above all not the
//! client's `Authorization` (the proxy adds the upstream's own credentials), cookies, or the
//! upstream's `Set-Cookie` and `WWW-Authenticate`.

use axum::http::{HeaderMap, HeaderName, header};

/// Client headers forwarded upstream, with those named [`FORWARDED_REQUEST_PREFIX`]…; nothing
/// else is. `Mcp-Method` and `Mcp-Name` (and the `Mcp-Param-*` mirrors of tool arguments) are
/// MCP 2026-07-28's: a server of that revision refuses a request without them (-32020).
pub static FORWARDED_REQUEST_HEADERS: [HeaderName; 7] = [
    header::ACCEPT,
    header::CONTENT_TYPE,
    HeaderName::from_static("mcp-session-id"),
    HeaderName::from_static("mcp-protocol-version"),
    HeaderName::from_static("last-event-id"),
    HeaderName::from_static("mcp-method"),
    HeaderName::from_static("mcp-name"),
];

/// The prefix of the forwarded headers that mirror a tool's arguments (MCP 2026-07-28's
/// `x-mcp-header` parameters): the body carries the same values.
pub const FORWARDED_REQUEST_PREFIX: &str = "mcp-param-";

/// The client headers of `from` forwarded upstream: [`FORWARDED_REQUEST_HEADERS`] in order,
/// then every `Mcp-Param-*` header.
pub fn forwarded_request(
    from: &HeaderMap,
) -> impl Iterator<Item = (&HeaderName, &axum::http::HeaderValue)> + '_ {
    let params = from
        .iter()
        .filter(|(name, _)| name.as_str().starts_with(FORWARDED_REQUEST_PREFIX));
    allowed(from, &FORWARDED_REQUEST_HEADERS).chain(params)
}

/// Upstream headers returned to the client; nothing else is.
pub const RETURNED_RESPONSE_HEADERS: [HeaderName; 4] = [
    header::CONTENT_TYPE,
    header::CACHE_CONTROL,
    HeaderName::from_static("mcp-session-id"),
    HeaderName::from_static("mcp-protocol-version"),
];

/// The headers of `from` named in `allowed`, every value of each, in order.
pub fn allowed<'a>(
    from: &'a HeaderMap,
    allowed: &'a [HeaderName],
) -> impl Iterator<Item = (&'a HeaderName, &'a axum::http::HeaderValue)> + 'a {
    allowed
        .iter()
        .flat_map(move |name| from.get_all(name).iter().map(move |value| (name, value)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn only_listed_headers_pass() {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        headers.insert(header::COOKIE, HeaderValue::from_static("a=b"));
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.append(header::ACCEPT, HeaderValue::from_static("application/json"));
        headers.insert("mcp-session-id", HeaderValue::from_static("s1"));
        headers.insert("mcp-method", HeaderValue::from_static("tools/call"));
        headers.insert("mcp-param-region", HeaderValue::from_static("eu"));
        headers.insert("x-other", HeaderValue::from_static("no"));
        let passed: Vec<(String, String)> = forwarded_request(&headers)
            .map(|(n, v)| (n.to_string(), v.to_str().expect("ascii").to_owned()))
            .collect();
        let expected = [
            ("accept", "text/event-stream"),
            ("accept", "application/json"),
            ("mcp-session-id", "s1"),
            ("mcp-method", "tools/call"),
            ("mcp-param-region", "eu"),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()));
        assert_eq!(passed, expected);
        assert!(!RETURNED_RESPONSE_HEADERS.contains(&header::SET_COOKIE));
        assert!(!RETURNED_RESPONSE_HEADERS.contains(&header::WWW_AUTHENTICATE));
    }
}
