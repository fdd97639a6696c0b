//! The header rules of tether's two MCP reverse proxies, the hand-off bridge and the team
//! server's `/mcp-proxy/{uid}`: an allow-list each way. Nothing else crosses — above all not the
//! client's `Authorization` (the proxy adds the upstream's own credentials), cookies, or the
//! upstream's `Set-Cookie` and `WWW-Authenticate`.

use axum::http::{HeaderMap, HeaderName, header};

/// Client headers forwarded upstream; nothing else is.
pub const FORWARDED_REQUEST_HEADERS: [HeaderName; 5] = [
    header::ACCEPT,
    header::CONTENT_TYPE,
    HeaderName::from_static("mcp-session-id"),
    HeaderName::from_static("mcp-protocol-version"),
    HeaderName::from_static("last-event-id"),
];

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
        let passed: Vec<(String, String)> = allowed(&headers, &FORWARDED_REQUEST_HEADERS)
            .map(|(n, v)| (n.to_string(), v.to_str().expect("ascii").to_owned()))
            .collect();
        let expected = [
            ("accept", "text/event-stream"),
            ("accept", "application/json"),
            ("mcp-session-id", "s1"),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()));
        assert_eq!(passed, expected);
        assert!(!RETURNED_RESPONSE_HEADERS.contains(&header::SET_COOKIE));
        assert!(!RETURNED_RESPONSE_HEADERS.contains(&header::WWW_AUTHENTICATE));
    }
}
