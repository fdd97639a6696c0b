//! Server URLs as OAuth sees them: the canonical form tokens are stored under and sent as
//! `resource` (RFC 8707), which resources cover which servers (RFC 9728 §3.3), and the
//! `.well-known` URLs metadata is looked for at (RFC 8414, RFC 9728, OpenID discovery).

use reqwest::Url;

use crate::error::OAuthError;

/// The canonical form of an MCP server URL used as `resource` and as the storage key:
/// lower-case scheme and host, no fragment, no trailing `/` on a bare origin.
pub fn canonical_resource(url: &str) -> Result<String, OAuthError> {
    let mut parsed = parse(url)?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(OAuthError::NotHttp {
            url: url.to_owned(),
        });
    }
    parsed.set_fragment(None);
    let text = parsed.to_string();
    Ok(match text.strip_suffix('/') {
        Some(stripped) if parsed.path() == "/" && parsed.query().is_none() => stripped.to_owned(),
        _ => text,
    })
}

/// `url` as an endpoint of the authorization server's metadata (`field`): parsed, and `https`,
/// or `http` to a loopback host (`127.0.0.0/8`, `[::1]`, `localhost`) — the only URLs tether
/// hands to a browser opener or sends a code, token or registration to.
pub(crate) fn web_endpoint(field: &'static str, url: &str) -> Result<Url, OAuthError> {
    let parsed = Url::parse(url).map_err(|e| OAuthError::BadEndpoint {
        field,
        reason: e.to_string(),
    })?;
    let host = parsed.host_str().unwrap_or_default();
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match parsed.scheme() {
        "https" if !host.is_empty() => Ok(parsed),
        "http" if loopback => Ok(parsed),
        "http" => Err(OAuthError::UnsafeEndpoint {
            field,
            what: "plain http to another host".to_owned(),
        }),
        scheme => Err(OAuthError::UnsafeEndpoint {
            field,
            what: format!("a '{scheme}:' URL"),
        }),
    }
}

/// `url` parsed, or [`OAuthError::NotAUrl`].
pub(crate) fn parse(url: &str) -> Result<Url, OAuthError> {
    Url::parse(url).map_err(|e| OAuthError::NotAUrl {
        url: url.to_owned(),
        reason: e.to_string(),
    })
}

/// Whether the protected resource `resource` covers the MCP server at `server`: the same
/// origin, and the server's path is the resource's or below it (a resource may be the bare
/// origin or a parent path of the endpoint, as the MCP authorization rules allow).
pub(crate) fn resource_covers(resource: &str, server: &str) -> bool {
    let (Ok(resource), Ok(server)) = (Url::parse(resource), Url::parse(server)) else {
        return false;
    };
    if resource.origin() != server.origin() {
        return false;
    }
    let parent = resource.path().trim_end_matches('/');
    let path = server.path().trim_end_matches('/');
    parent.is_empty()
        || path == parent
        || path
            .strip_prefix(parent)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// `origin` + `/.well-known/<name>` + `path` (RFC 8414/9728 path insertion), then without the
/// path.
pub(crate) fn well_known(url: &Url, name: &str) -> Vec<String> {
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    let mut candidates = Vec::new();
    if !path.is_empty() {
        candidates.push(format!("{origin}/.well-known/{name}{path}"));
    }
    candidates.push(format!("{origin}/.well-known/{name}"));
    candidates
}

/// Where an issuer's authorization server metadata is looked for, in order. RFC 8414 §3.1 and
/// OpenID discovery: an issuer with a path is never looked up at the root.
pub(crate) fn authorization_server_metadata(issuer: &Url) -> Vec<String> {
    let origin = issuer.origin().ascii_serialization();
    let path = issuer.path().trim_end_matches('/');
    if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ]
    }
}

#[cfg(test)]
mod endpoint_tests {
    use super::*;

    #[test]
    fn only_https_and_loopback_http_endpoints_are_taken() {
        for good in [
            "https://auth.example/authorize",
            "http://127.0.0.1:8/authorize",
            "http://127.9.9.9/a",
            "http://[::1]:9/a",
            "http://LOCALHOST:1/a",
        ] {
            assert!(
                web_endpoint("authorization_endpoint", good).is_ok(),
                "{good}"
            );
        }
        for bad in [
            "file:///etc/passwd",
            "javascript:alert(1)",
            "vscode://extension/x?code=1",
            "http://auth.example/authorize",
            "http://localhost.evil.example/a",
            "data:text/html,<b>x</b>",
        ] {
            assert!(
                matches!(
                    web_endpoint("authorization_endpoint", bad),
                    Err(OAuthError::UnsafeEndpoint { .. } | OAuthError::BadEndpoint { .. })
                ),
                "{bad}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_covers_its_own_url_and_what_is_below_it() {
        let server = "http://127.0.0.1:8/tenant/mcp";
        for resource in [
            "http://127.0.0.1:8",
            "http://127.0.0.1:8/",
            "http://127.0.0.1:8/tenant",
            "http://127.0.0.1:8/tenant/mcp",
            "http://127.0.0.1:8/tenant/mcp/",
        ] {
            assert!(resource_covers(resource, server), "{resource}");
        }
        for resource in [
            "https://evil.example.com/mcp",
            "http://127.0.0.1:9/tenant/mcp",
            "https://127.0.0.1:8/tenant/mcp",
            "http://127.0.0.1:8/ten",
            "http://127.0.0.1:8/tenant/mcp/deeper",
            "not a url",
        ] {
            assert!(!resource_covers(resource, server), "{resource}");
        }
    }

    #[test]
    fn canonical_resource_forms() {
        assert_eq!(
            canonical_resource("HTTP://Example.COM/").expect("parsing a URL"),
            "http://example.com"
        );
        assert_eq!(
            canonical_resource("https://a.example/mcp#x").expect("parsing a URL"),
            "https://a.example/mcp"
        );
        assert_eq!(
            canonical_resource("https://a.example/?q=1").expect("parsing a URL"),
            "https://a.example/?q=1"
        );
        assert!(matches!(
            canonical_resource("ftp://a.example/mcp"),
            Err(OAuthError::NotHttp { .. })
        ));
        assert!(matches!(
            canonical_resource("not a url"),
            Err(OAuthError::NotAUrl { .. })
        ));
    }

    #[test]
    fn well_known_urls_insert_the_path_then_try_the_root() {
        let url = Url::parse("http://a.example/tenant/mcp").expect("a URL");
        assert_eq!(
            well_known(&url, "oauth-protected-resource"),
            [
                "http://a.example/.well-known/oauth-protected-resource/tenant/mcp",
                "http://a.example/.well-known/oauth-protected-resource",
            ]
        );
        let root = Url::parse("http://a.example/").expect("a URL");
        assert_eq!(
            well_known(&root, "oauth-protected-resource"),
            ["http://a.example/.well-known/oauth-protected-resource"]
        );
    }

    #[test]
    fn an_issuer_with_a_path_is_never_looked_up_at_the_root() {
        let issuer = Url::parse("https://auth.example/tenant1").expect("a URL");
        assert_eq!(
            authorization_server_metadata(&issuer),
            [
                "https://auth.example/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example/.well-known/openid-configuration/tenant1",
                "https://auth.example/tenant1/.well-known/openid-configuration",
            ]
        );
        let root = Url::parse("https://auth.example").expect("a URL");
        assert_eq!(
            authorization_server_metadata(&root),
            [
                "https://auth.example/.well-known/oauth-authorization-server",
                "https://auth.example/.well-known/openid-configuration",
            ]
        );
    }
}
