//! Host allow-lists: what the egress proxy lets a sandboxed server reach (`specs/sandbox/TECH.md`
//! §7). The proxy itself runs in the supervisor (`tether-driver`); the network namespace that
//! leaves the server no other way out is made in the child (`netns.rs`).

use serde::{Deserialize, Serialize};

/// The port the proxy listens on inside the server's network namespace (`127.0.0.1`): the
/// only TCP port Landlock lets the server connect to when its hosts are restricted.
pub const PROXY_PORT: u16 = 3128;

/// The environment a server behind the proxy gets: each set to `http://127.0.0.1:PORT`.
pub const PROXY_VARS: [&str; 4] = ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"];

/// Variables removed from a server behind the proxy (they would let it skip the proxy, and it
/// has no other way out).
pub const NO_PROXY_VARS: [&str; 2] = ["NO_PROXY", "no_proxy"];

/// The proxy's URL for the server.
pub fn proxy_url() -> String {
    format!("http://127.0.0.1:{PROXY_PORT}")
}

/// A profile's host allow-list, as the proxy checks it: `allow_host` entries (exact names, or
/// `.example.com` for `example.com` and every subdomain, as Squid's `dstdomain` that ToolHive's
/// egress container uses) and `allow_port` (empty: any port).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HostRules {
    /// Allowed hosts, lower-cased, without a trailing dot.
    pub hosts: Vec<String>,
    /// Allowed ports; empty allows every port of an allowed host.
    pub ports: Vec<u16>,
}

impl HostRules {
    /// The rules of a profile's `allow_host` and `allow_port`.
    pub fn new(hosts: &[String], ports: &[u16]) -> Self {
        Self {
            hosts: hosts.iter().map(|h| normalize(h)).collect(),
            ports: ports.to_vec(),
        }
    }

    /// Whether `host:port` may be reached. Names compare without case and without a trailing
    /// dot; an entry `.example.com` allows `example.com` and any name ending in
    /// `.example.com`; an IP address is allowed only when listed as written.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = normalize(host);
        let port_ok = self.ports.is_empty() || self.ports.contains(&port);
        port_ok
            && !host.is_empty()
            && self
                .hosts
                .iter()
                .any(|entry| match entry.strip_prefix('.') {
                    Some(domain) => {
                        host == domain
                            || host
                                .strip_suffix(domain)
                                .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.'))
                    }
                    None => host == *entry,
                })
    }

    /// The line a denial prints on the server's stderr: what was refused and the profile line
    /// that would allow it (read by [`crate::explain`]).
    pub fn denial(&self, label: &str, host: &str, port: u16) -> String {
        let host = normalize(host);
        let listed = Self::new(&self.hosts, &[]).allows(&host, port);
        let add = if listed {
            format!("add {port} to \"network\".\"outbound\".\"allow_port\"")
        } else {
            format!("add \"{host}\" to \"network\".\"outbound\".\"allow_host\"")
        };
        format!(
            "tether: the sandbox (--sandbox {label}) refused a connection to {host}:{port} through its egress proxy ({add} of a permission profile)"
        )
    }
}

fn normalize(host: &str) -> String {
    let host = host.trim();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_match_exactly_or_as_a_leading_dot_domain() {
        let rules = HostRules::new(
            &[
                "API.example.com".to_owned(),
                ".docs.example.org".to_owned(),
                "127.0.0.1".to_owned(),
            ],
            &[],
        );
        for (host, allowed) in [
            ("api.example.com", true),
            ("Api.Example.Com.", true),
            ("example.com", false),
            ("xapi.example.com", false),
            ("api.example.com.evil.net", false),
            ("docs.example.org", true),
            ("a.b.docs.example.org", true),
            ("xdocs.example.org", false),
            (".docs.example.org", false),
            ("127.0.0.1", true),
            ("localhost", false),
            ("", false),
        ] {
            assert_eq!(rules.allows(host, 443), allowed, "{host}");
        }
    }

    #[test]
    fn ports_bind_when_listed() {
        let rules = HostRules::new(&["localhost".to_owned()], &[8080]);
        assert!(rules.allows("localhost", 8080));
        assert!(!rules.allows("localhost", 8081));
        let line = rules.denial("p.json", "localhost", 8081);
        assert!(line.contains("localhost:8081"), "{line}");
        assert!(line.contains("add 8081 to"), "{line}");
        let line = rules.denial("p.json", "127.0.0.1", 8080);
        assert!(line.contains("add \"127.0.0.1\" to"), "{line}");
    }
}
