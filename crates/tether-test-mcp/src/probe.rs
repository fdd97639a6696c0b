//! `--probe-tool`: a hostile tool `probe` that tries what a sandbox must deny — reading a
//! file, listing or writing a directory, connecting to a TCP port, starting processes without
//! end, reserving memory without end — and says whether it could. Each attempt is bounded
//! (a count, a size) so that it also ends unsandboxed, where the test expects it to succeed.

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::{Value, json};

/// The tool's name.
pub const TOOL: &str = "probe";

/// The most processes `spawn` starts.
const MAX_SPAWN: u64 = 2048;

/// The most MiB `allocate` reserves.
const MAX_ALLOCATE_MB: u64 = 16 * 1024;

/// The tool's definition.
pub fn tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["read", "list", "append", "connect", "spawn", "allocate", "fetch"]},
            "path": {"type": "string", "description": "read, list, append: the path; `~/` is this process's HOME."},
            "port": {"type": "integer", "description": "connect: the port on 127.0.0.1."},
            "count": {"type": "integer", "description": "spawn: how many `sleep` processes to hold at once."},
            "mb": {"type": "integer", "description": "allocate: how many MiB to reserve (untouched)."},
            "url": {"type": "string", "description": "fetch: an http://HOST:PORT/PATH URL, through HTTPS_PROXY (CONNECT) when set."},
            "via": {"type": "string", "enum": ["connect", "forward", "direct"], "description": "fetch: CONNECT through HTTPS_PROXY (default), an absolute-form request to HTTP_PROXY, or no proxy."}
        },
        "required": ["action"]
    });
    let schema: JsonObject = serde_json::from_value(schema).unwrap_or_default();
    Tool::new(
        TOOL,
        "Try an access a sandbox should deny; answers `done: …` or an error `denied: …`.",
        schema,
    )
}

/// The answer to a call: success `done: …`, or an error result `denied: …` with the OS error.
pub fn call(arguments: Option<&JsonObject>) -> Result<CallToolResult, String> {
    let text = |key: &str| arguments.and_then(|a| a.get(key)).and_then(Value::as_str);
    let number = |key: &str| arguments.and_then(|a| a.get(key)).and_then(Value::as_u64);
    let path = || -> Result<std::path::PathBuf, String> {
        let path = text("path").ok_or("this action takes a path")?;
        Ok(match path.strip_prefix("~/") {
            Some(rest) => {
                std::path::Path::new(&std::env::var("HOME").unwrap_or_default()).join(rest)
            }
            None => std::path::PathBuf::from(path),
        })
    };
    let outcome: Result<String, String> = match text("action").unwrap_or_default() {
        "read" => {
            let path = path()?;
            std::fs::read_to_string(&path)
                .map(|body| format!("read {} bytes of {}", body.len(), path.display()))
                .map_err(|e| format!("read {}: {e}", path.display()))
        }
        "list" => {
            let path = path()?;
            std::fs::read_dir(&path)
                .map(|entries| format!("listed {} entries of {}", entries.count(), path.display()))
                .map_err(|e| format!("list {}: {e}", path.display()))
        }
        "append" => {
            use std::io::Write;
            let path = path()?;
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .and_then(|mut file| file.write_all(b"# probe\n"))
                .map(|()| format!("appended to {}", path.display()))
                .map_err(|e| format!("append {}: {e}", path.display()))
        }
        "connect" => {
            let port = number("port")
                .and_then(|p| u16::try_from(p).ok())
                .ok_or("connect takes a port")?;
            std::net::TcpStream::connect(("127.0.0.1", port))
                .map(|_| format!("connected to 127.0.0.1:{port}"))
                .map_err(|e| format!("connect 127.0.0.1:{port}: {e}"))
        }
        "spawn" => Ok(spawn(number("count").unwrap_or(1).min(MAX_SPAWN))).and_then(|r| r),
        "allocate" => {
            let mb = number("mb").unwrap_or(1).min(MAX_ALLOCATE_MB);
            let bytes = usize::try_from(mb * 1024 * 1024).map_err(|e| e.to_string())?;
            let mut reserved: Vec<u8> = Vec::new();
            reserved
                .try_reserve_exact(bytes)
                .map(|()| format!("reserved {mb} MiB"))
                .map_err(|e| format!("allocate {mb} MiB: {e}"))
        }
        "fetch" => fetch(
            text("url").ok_or("fetch takes a url")?,
            text("via").unwrap_or("connect"),
        ),
        other => return Err(format!("unknown action {other:?}")),
    };
    Ok(match outcome {
        Ok(done) => CallToolResult::success(vec![ContentBlock::text(format!("done: {done}"))]),
        Err(denied) => CallToolResult::error(vec![ContentBlock::text(format!("denied: {denied}"))]),
    })
}

/// Holds `count` `sleep` processes at once, then ends them all.
fn spawn(count: u64) -> Result<String, String> {
    let mut children = Vec::new();
    let mut failure = None;
    for _ in 0..count {
        match std::process::Command::new("sleep")
            .arg("60")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            Ok(child) => children.push(child),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let started = children.len();
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
    match failure {
        None => Ok(format!("held {started} processes")),
        Some(e) => Err(format!("spawn after {started} processes: {e}")),
    }
}

/// Fetches `url` (`http://HOST:PORT/PATH`) as `via` says: a `CONNECT` tunnel through
/// `HTTPS_PROXY`, an absolute-form request to `HTTP_PROXY`, or directly (also when the proxy
/// variable is unset). `done` with the status line and body on a 2xx, else the refusal.
fn fetch(url: &str, via: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    let rest = url
        .strip_prefix("http://")
        .ok_or("fetch takes an http:// URL")?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let proxy = |name: &str| {
        std::env::var(name).ok().and_then(|p| {
            p.strip_prefix("http://")
                .map(|a| a.trim_end_matches('/').to_owned())
        })
    };
    let (dial, request) = match (via, proxy("HTTPS_PROXY"), proxy("HTTP_PROXY")) {
        ("connect", Some(proxy), _) => (
            proxy,
            Some(format!(
                "CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n"
            )),
        ),
        ("forward", _, Some(proxy)) => (proxy, None),
        _ => (authority.to_owned(), None),
    };
    let failed = |e: std::io::Error| format!("fetch {url}: connect {dial}: {e}");
    let mut stream = std::net::TcpStream::connect(&dial).map_err(failed)?;
    let timeout = Some(std::time::Duration::from_secs(10));
    stream.set_read_timeout(timeout).map_err(failed)?;
    let read_head = |stream: &mut std::net::TcpStream| -> Result<String, String> {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
            match stream.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                Ok(_) => break,
                Err(e) => return Err(failed(e)),
            }
        }
        Ok(String::from_utf8_lossy(&head).into_owned())
    };
    if let Some(connect) = request {
        stream.write_all(connect.as_bytes()).map_err(failed)?;
        let head = read_head(&mut stream)?;
        if !head.starts_with("HTTP/1.1 200") {
            let mut body = String::new();
            let _ = stream.read_to_string(&mut body);
            return Err(format!(
                "fetch {url}: the proxy answered {} {}",
                head.lines().next().unwrap_or_default(),
                body.trim()
            ));
        }
    }
    let target = if via == "forward" && dial != authority {
        url
    } else {
        path
    };
    let get = format!("GET {target} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream.write_all(get.as_bytes()).map_err(failed)?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(failed)?;
    let status = response.lines().next().unwrap_or_default().to_owned();
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .trim();
    if status
        .split(' ')
        .nth(1)
        .is_some_and(|code| code.starts_with('2'))
    {
        Ok(format!("fetched {url}: {status}: {body}"))
    } else {
        Err(format!("fetch {url}: {status} {body}"))
    }
}
