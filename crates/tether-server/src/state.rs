//! What every request handler shares: the service, the GraphQL schema, the upstream HTTP
//! client; and reading a bearer token. Its own module so that the routes ([`crate::app`]) and
//! the proxy ([`crate::proxy`]) both use it without importing each other.

use std::sync::Arc;

use axum::http::{HeaderMap, header};

use crate::graphql::ManagedMcpSchema;
use crate::limits::{BodyLimits, LimitLogs, Limits};
use crate::rate::RateLimiter;
use crate::service::Service;

/// The state behind every route.
pub(crate) struct AppState {
    pub(crate) service: Arc<Service>,
    pub(crate) schema: ManagedMcpSchema,
    pub(crate) http: reqwest::Client,
    pub(crate) limits: Limits,
    pub(crate) body_limits: BodyLimits,
    pub(crate) logs: LimitLogs,
    pub(crate) rate: RateLimiter,
    /// `/metrics` on the main listener needs no API key (`--metrics-public`).
    pub(crate) metrics_public: bool,
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive).
pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn bearer_tokens() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer_token(&headers), None);
        for (value, expected) in [
            ("Bearer abc", Some("abc")),
            ("bearer  abc ", Some("abc")),
            ("Basic abc", None),
            ("Bearer", None),
            ("Bearer ", None),
        ] {
            headers.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
            assert_eq!(bearer_token(&headers), expected, "{value:?}");
        }
    }
}
