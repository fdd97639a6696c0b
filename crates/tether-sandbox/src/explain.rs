//! Denials explained: a sandboxed server that failed says why on its stderr in its runtime's
//! words (`EACCES: permission denied, open '/home/u/.config/x'`, `PermissionError: [Errno 13]
//! Permission denied: '/x'`, `connect EACCES 127.0.0.1:5432`); this finds those lines and names
//! the profile line that would allow what was denied.

/// Words that mark a denial on a line.
const DENIED: [&str; 5] = [
    "EACCES",
    "EPERM",
    "permission denied",
    "operation not permitted",
    "errno 13",
];

/// Words that mark a write (else a read is assumed).
const WRITES: [&str; 12] = [
    "mkdir", "write", "unlink", "rename", "rmdir", "append", "creat", "symlink", "copyfile",
    "truncate", "chmod", "utime",
];

/// At most this many denials are named.
const MAX_NAMED: usize = 3;

/// What the sandbox `label` probably denied, from a server's `stderr`, with the profile lines
/// to add; `None` when stderr shows no denial.
pub fn explain(stderr: &str, label: &str) -> Option<String> {
    explain_with(stderr, label, false)
}

/// [`explain`] for a server under `policy`: behind the egress proxy (its hosts restricted and
/// enforced), a denied direct connection is not fixed by a port line, and says so.
pub fn explain_policy(stderr: &str, policy: &crate::Policy) -> Option<String> {
    explain_with(stderr, &policy.label, crate::behind_proxy(policy))
}

fn explain_with(stderr: &str, label: &str, behind_proxy: bool) -> Option<String> {
    let mut reads: Vec<String> = Vec::new();
    let mut writes: Vec<String> = Vec::new();
    let mut ports: Vec<u16> = Vec::new();
    let mut proxied: Vec<String> = Vec::new();
    for line in stderr.lines() {
        if let Some(denial) = proxy_denial(line) {
            if !proxied.contains(&denial) {
                proxied.push(denial);
            }
            continue;
        }
        let lower = line.to_lowercase();
        if !DENIED
            .iter()
            .any(|word| lower.contains(&word.to_lowercase()))
        {
            continue;
        }
        if let Some(port) = connect_port(&lower) {
            if !ports.contains(&port) {
                ports.push(port);
            }
            continue;
        }
        let Some(path) = denied_path(line) else {
            continue;
        };
        let list = if WRITES.iter().any(|w| lower.contains(w)) {
            &mut writes
        } else {
            &mut reads
        };
        if !list.contains(&path) {
            list.push(path);
        }
    }
    let mut lines: Vec<String> = Vec::new();
    for (key, paths) in [("read", &reads), ("write", &writes)] {
        for path in paths.iter().take(MAX_NAMED) {
            lines.push(format!(
                "access to {path} (add \"{path}\" to \"{key}\" of a permission profile)"
            ));
        }
    }
    for port in ports.iter().take(MAX_NAMED) {
        lines.push(if behind_proxy {
            format!(
                "a direct TCP connection to port {port} (with \"allow_host\" the server reaches hosts only through the egress proxy that HTTPS_PROXY and HTTP_PROXY name: a client that ignores them has no network)"
            )
        } else {
            format!(
                "a TCP connection to port {port} (add {port} to \"network\": {{\"outbound\": {{\"allow_port\": [...]}}}})"
            )
        });
    }
    lines.extend(proxied.into_iter().take(MAX_NAMED));
    if lines.is_empty() {
        return None;
    }
    Some(format!(
        "the sandbox (--sandbox {label}) probably denied {}; run it with --sandbox PROFILE.json holding that line (docs/sandbox.md), or --sandbox none if you trust the server",
        lines.join("; ")
    ))
}

/// A refusal of the egress proxy ([`crate::HostRules::denial`]'s line): what was refused and
/// the profile line to add.
fn proxy_denial(line: &str) -> Option<String> {
    let (_, rest) = line.split_once("refused a connection to ")?;
    let (target, rest) = rest.split_once(" through its egress proxy (")?;
    let (add, _) = rest.split_once(" of a permission profile)")?;
    Some(format!(
        "a connection to {target} through its egress proxy ({add} of a permission profile)"
    ))
}

/// The port of a denied `connect` (`connect EACCES 127.0.0.1:5432`, `[::1]:5432`).
fn connect_port(lower: &str) -> Option<u16> {
    let at = lower.find("connect")?;
    lower[at..]
        .split(|c: char| c.is_whitespace() || c == ',' || c == ')' || c == '\'')
        .filter_map(|token| token.trim_end_matches(':').rsplit_once(':'))
        .find_map(|(host, port)| {
            let host_like = host.contains('.') || host.ends_with(']') || host == "localhost";
            host_like.then(|| port.parse::<u16>().ok()).flatten()
        })
}

/// The first absolute path on `line`, quoted (`'…'`, `"…"`) or standing alone.
fn denied_path(line: &str) -> Option<String> {
    for quote in ['\'', '"'] {
        let mut parts = line.split(quote);
        let _ = parts.next();
        while let Some(inside) = parts.next() {
            if inside.starts_with('/') && !inside.contains(char::is_whitespace) {
                return Some(inside.to_owned());
            }
            let _ = parts.next();
        }
    }
    line.split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .find(|token| token.starts_with('/') && token.len() > 1)
        .map(|token| token.trim_end_matches([':', '.', ';']).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_and_python_denials_name_the_path_and_the_key() {
        let stderr = "Error: EACCES: permission denied, open '/home/u/.config/x/settings.json'\n    at Object.openSync (node:fs:573:18)";
        let said = explain(stderr, "default").expect("explained");
        assert!(
            said.contains("add \"/home/u/.config/x/settings.json\" to \"read\""),
            "{said}"
        );
        let stderr =
            "PermissionError: [Errno 13] Permission denied: '/srv/data/out.txt'\nmkdir failed";
        let said = explain(stderr, "p.json").expect("explained");
        assert!(said.contains("/srv/data/out.txt"), "{said}");
        assert!(said.contains("--sandbox p.json"), "{said}");
        let stderr = "Error: EACCES: permission denied, mkdir '/var/cache/app'";
        let said = explain(stderr, "default").expect("explained");
        assert!(said.contains("to \"write\""), "{said}");
    }

    #[test]
    fn a_denied_connect_names_the_port() {
        for stderr in [
            "Error: connect EACCES 127.0.0.1:5432",
            "denied: connect 127.0.0.1:5432: Permission denied (os error 13)",
        ] {
            let said = explain(stderr, "default").expect("explained");
            assert!(said.contains("port 5432"), "{said}");
            assert!(said.contains("allow_port"), "{said}");
        }
    }

    #[test]
    fn a_proxy_refusal_names_the_host_line() {
        let rules = crate::HostRules::new(&["localhost".to_owned()], &[8080]);
        let stderr = format!(
            "{}\nError: Proxy response (403) !== 200 when HTTP Tunneling",
            rules.denial("p.json", "127.0.0.1", 8080)
        );
        let said = explain(&stderr, "p.json").expect("explained");
        assert!(said.contains("a connection to 127.0.0.1:8080"), "{said}");
        assert!(said.contains("add \"127.0.0.1\" to \"network\""), "{said}");
    }

    #[test]
    fn stderr_without_a_denial_explains_nothing() {
        assert_eq!(
            explain("Error: ENOENT: no such file, open '/x'", "default"),
            None
        );
        assert_eq!(explain("", "default"), None);
    }
}
