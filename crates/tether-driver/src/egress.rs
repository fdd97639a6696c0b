//! The egress proxy of a sandboxed server whose profile restricts hosts
//! (`specs/sandbox/TECH.md` §7): it accepts on the socket the server's child made listening
//! inside its own network namespace, and dials out from the supervisor's.
//!
//! - `CONNECT host:port HTTP/1.1` (what `HTTPS_PROXY` clients send): `200` and the two
//!   connections spliced when the profile allows `host:port`, else `403`;
//! - absolute-form `GET http://host[:port]/path HTTP/1.1` (what `HTTP_PROXY` clients send for
//!   plain HTTP), any method: the request line rewritten to origin form, the `Proxy-*` headers
//!   dropped, forwarded and spliced the same way; anything else: `400`.
//!
//! Each refusal prints one line on stderr naming `host:port` and the profile line to add
//! ([`tether_sandbox::HostRules::denial`]; the run's denial explanation reads it). The head of
//! a request is bounded ([`MAX_HEAD`]) and must arrive within [`HEAD_TIMEOUT`]; a dial gets
//! [`DIAL_TIMEOUT`]; the proxy resolves names itself (the namespace has no DNS).

use std::time::Duration;

use tether_sandbox::HostRules;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The most a request's head (request line and headers) may take.
pub const MAX_HEAD: usize = 16 * 1024;

/// How long a client has to send a request's head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How long dialing an allowed host may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves the proxy on `listener` (the socket from [`tether_sandbox::ParentNet::receive`])
/// until the task is dropped or aborted; each connection runs in its own task.
pub async fn serve(listener: std::net::TcpListener, rules: HostRules, label: String) {
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("tether: the sandbox's egress proxy cannot listen: {e}");
            return;
        }
    };
    let shared = std::sync::Arc::new((rules, label));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let shared = std::sync::Arc::clone(&shared);
                    connections.spawn(async move { handle(stream, &shared.0, &shared.1).await });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    /// `CONNECT host:port`.
    Tunnel { host: String, port: u16 },
    /// An absolute-form `http://` request: where to, and the head to send there.
    Forward {
        host: String,
        port: u16,
        head: Vec<u8>,
    },
}

async fn handle(mut client: TcpStream, rules: &HostRules, label: &str) {
    let Ok(Ok((head, rest))) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await
    else {
        let _ = reply(&mut client, "400 Bad Request", "no complete request head").await;
        return;
    };
    let request = match parse(&head) {
        Ok(request) => request,
        Err(why) => {
            let _ = reply(&mut client, "400 Bad Request", why).await;
            return;
        }
    };
    let (host, port) = match &request {
        Request::Tunnel { host, port } | Request::Forward { host, port, .. } => (host, *port),
    };
    if !rules.allows(host, port) {
        let line = rules.denial(label, host, port);
        eprintln!("{line}");
        let _ = reply(&mut client, "403 Forbidden", &line).await;
        return;
    }
    let dialed =
        tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect((host.as_str(), port))).await;
    let mut upstream = match dialed {
        Ok(Ok(upstream)) => upstream,
        Ok(Err(e)) => {
            let why = format!("cannot connect to {host}:{port}: {e}");
            let _ = reply(&mut client, "502 Bad Gateway", &why).await;
            return;
        }
        Err(_) => {
            let why = format!("connecting to {host}:{port} timed out");
            let _ = reply(&mut client, "504 Gateway Timeout", &why).await;
            return;
        }
    };
    let sent = match &request {
        Request::Tunnel { .. } => {
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
        }
        Request::Forward { head, .. } => upstream.write_all(head).await,
    };
    if sent.is_err() || upstream.write_all(&rest).await.is_err() {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// Reads up to the end of the head (`\r\n\r\n`): the head, and what came after it.
async fn read_head(client: &mut TcpStream) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let read = client.read(&mut chunk).await?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let searched_from = buffer.len().saturating_sub(3);
        buffer.extend_from_slice(chunk.get(..read).unwrap_or_default());
        if let Some(at) = find(buffer.get(searched_from..).unwrap_or_default(), b"\r\n\r\n") {
            let end = searched_from + at + 4;
            let rest = buffer.split_off(end);
            return Ok((buffer, rest));
        }
        if buffer.len() > MAX_HEAD {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The request a head asks for, or why it cannot be served.
fn parse(head: &[u8]) -> Result<Request, &'static str> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8")?;
    let (line, headers) = text.split_once("\r\n").ok_or("no request line")?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the request line is not METHOD TARGET VERSION");
    };
    if !version.starts_with("HTTP/1.") {
        return Err("only HTTP/1.x is spoken here");
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = authority(target, None).ok_or("CONNECT needs host:port")?;
        return Ok(Request::Tunnel { host, port });
    }
    let rest = target.strip_prefix("http://").ok_or(
        "this is tether's egress proxy: use CONNECT host:port, or an absolute http:// URL",
    )?;
    let (authority_part, path) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, "/"),
    };
    let (host, port) = authority(authority_part, Some(80)).ok_or("a URL needs a host")?;
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let mut forwarded = format!("{method} {path} {version}\r\n");
    for header in headers.split("\r\n").filter(|h| !h.is_empty()) {
        let name = header.split(':').next().unwrap_or_default().trim();
        if !name.to_ascii_lowercase().starts_with("proxy-") {
            forwarded.push_str(header);
            forwarded.push_str("\r\n");
        }
    }
    forwarded.push_str("\r\n");
    Ok(Request::Forward {
        host,
        port,
        head: forwarded.into_bytes(),
    })
}

/// `host:port`, `[v6]:port`, or (with a default port) `host` alone; no user info.
fn authority(text: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    if text.contains('@') || text.is_empty() {
        return None;
    }
    let (host, port) = if let Some(bracketed) = text.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']')?;
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return None,
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match port {
        Some(port) => port.parse::<u16>().ok().filter(|p| *p > 0)?,
        None => default_port?,
    };
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':');
    (!host.is_empty() && host.chars().all(valid)).then(|| (host.to_owned(), port))
}

/// Answers `status` with a one-line plain-text body, and closes.
async fn reply(client: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}\n",
        body.len() + 1
    );
    client.write_all(response.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the proxy on a fresh loopback listener answers `request` (up to its close).
    async fn ask(proxy: std::net::SocketAddr, request: &[u8]) -> String {
        let mut client = TcpStream::connect(proxy).await.expect("connected");
        // The proxy may answer (and close) before it read everything: a failed write is fine.
        let _ = client.write_all(request).await;
        let mut answer = Vec::new();
        let _ = client.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn the_proxy_splices_allowed_tunnels_and_refuses_the_rest_without_panicking() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = upstream.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = upstream.accept().await {
                let _ = stream.write_all(b"upstream says hi").await;
            }
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let proxy = listener.local_addr().expect("addr");
        let rules = HostRules::new(&["localhost".to_owned()], &[port]);
        let served = tokio::spawn(serve(listener, rules, "p.json".to_owned()));
        let tunnel = ask(
            proxy,
            format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(
            tunnel,
            "HTTP/1.1 200 Connection established\r\n\r\nupstream says hi"
        );
        let denied = ask(
            proxy,
            format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes(),
        )
        .await;
        assert!(denied.starts_with("HTTP/1.1 403"), "{denied}");
        assert!(denied.contains(&format!("127.0.0.1:{port}")), "{denied}");
        // A head past the bound, garbage, a request line with no target: 400, and the proxy
        // still serves the next client.
        let endless = vec![b'a'; MAX_HEAD + 4096];
        for garbage in [&endless[..], b"\xff\xfe\r\n\r\n", b"GET\r\n\r\n"] {
            let answer = ask(proxy, garbage).await;
            assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        }
        let again = ask(
            proxy,
            format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n").as_bytes(),
        )
        .await;
        assert!(again.ends_with("upstream says hi"), "{again}");
        served.abort();
    }

    #[test]
    fn requests_parse_into_tunnels_and_forwards_and_garbage_is_refused() {
        assert_eq!(
            parse(b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(Request::Tunnel {
                host: "api.example.com".to_owned(),
                port: 443
            })
        );
        assert_eq!(
            parse(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n"),
            Ok(Request::Tunnel {
                host: "::1".to_owned(),
                port: 8443
            })
        );
        let forward = parse(
            b"GET http://localhost:8080/a?b=1 HTTP/1.1\r\nHost: localhost:8080\r\nProxy-Connection: keep-alive\r\n\r\n",
        );
        assert_eq!(
            forward,
            Ok(Request::Forward {
                host: "localhost".to_owned(),
                port: 8080,
                head: b"GET /a?b=1 HTTP/1.1\r\nHost: localhost:8080\r\n\r\n".to_vec()
            })
        );
        let Ok(Request::Forward { port, head, .. }) = parse(b"POST http://h?q HTTP/1.0\r\n\r\n")
        else {
            panic!("not a forward");
        };
        assert_eq!((port, head), (80, b"POST /?q HTTP/1.0\r\n\r\n".to_vec()));
        for garbage in [
            &b"GET /local HTTP/1.1\r\n\r\n"[..],
            b"CONNECT host HTTP/1.1\r\n\r\n",
            b"CONNECT user@host:443 HTTP/1.1\r\n\r\n",
            b"CONNECT host:0 HTTP/1.1\r\n\r\n",
            b"CONNECT host:99999 HTTP/1.1\r\n\r\n",
            b"CONNECT ho st:1 HTTP/1.1\r\n\r\n",
            b"GET https://h/ HTTP/1.1\r\n\r\n",
            b"\xff\xfe\r\n\r\n",
            b"CONNECT h:1 SPDY/3\r\n\r\n",
            b"\r\n\r\n",
        ] {
            assert!(
                parse(garbage).is_err(),
                "{}",
                String::from_utf8_lossy(garbage)
            );
        }
    }
}
