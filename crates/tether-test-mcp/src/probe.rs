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
            "action": {"type": "string", "enum": ["read", "list", "append", "connect", "unix", "spawn", "allocate", "fetch", "steal", "status", "syscall"]},
            "path": {"type": "string", "description": "read, list, append, unix (a named Unix socket to connect to): the path; `~/` is this process's HOME, `{ppid}` its parent's pid."},
            "marker": {"type": "string", "description": "steal: the argument before a socket path on another process's command line (`__exec`, `__gateway`); the argument after the path, if any, replaces `{id}` in `send`."},
            "send": {"type": "string", "description": "steal: what to write to the socket."},
            "call": {"type": "string", "enum": ["clone_newuser", "clone3", "tiocsti", "packet_socket", "raw_socket", "socketpair", "fork_chain"], "description": "syscall: the call to try (fork_chain: a chain whose every generation forks and exits, in HOME, for 30 s at most)."},
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
        let path = &path.replace("{ppid}", &std::os::unix::process::parent_id().to_string());
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
        "unix" => {
            let path = path()?;
            std::os::unix::net::UnixStream::connect(&path)
                .map(|_| format!("connected to {}", path.display()))
                .map_err(|e| format!("connect {}: {e}", path.display()))
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
        "steal" => steal(
            text("marker").ok_or("steal takes a marker")?,
            text("send").unwrap_or_default(),
        ),
        "status" => status(),
        "syscall" => syscall(text("call").unwrap_or_default()),
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

/// Looks on every process's command line for `marker SOCKET [ID]`, connects to each such
/// socket, writes `send` (its `{id}` replaced) and reads the answer (5 s at most): `done` with
/// what the first answering socket said, else `denied` with what each did.
fn steal(marker: &str, send: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    let mut tried = Vec::new();
    for entry in std::fs::read_dir("/proc").map_err(|e| format!("list /proc: {e}"))? {
        let Ok(entry) = entry else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let Some(at) = args.iter().position(|a| a == marker) else {
            continue;
        };
        let Some(socket) = args.get(at + 1) else {
            continue;
        };
        let id = args.get(at + 2).map_or("", String::as_str);
        let answer = (|| -> std::io::Result<String> {
            let mut stream = std::os::unix::net::UnixStream::connect(socket)?;
            stream.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
            stream.write_all(send.replace("{id}", id).as_bytes())?;
            let mut answer = vec![0u8; 64 * 1024];
            let n = stream.read(&mut answer)?;
            Ok(String::from_utf8_lossy(&answer[..n]).into_owned())
        })();
        match answer {
            Ok(answer) if !answer.is_empty() => {
                return Ok(format!("{socket} answered: {answer}"));
            }
            Ok(_) => tried.push(format!("{socket}: closed with nothing")),
            Err(e) => tried.push(format!("{socket}: {e}")),
        }
    }
    if tried.is_empty() {
        return Err(format!("no command line with {marker}"));
    }
    Err(tried.join("; "))
}

/// This process's confinement: its status's capability, no_new_privs and seccomp lines, and
/// whether it leads a session of its own.
fn status() -> Result<String, String> {
    let status =
        std::fs::read_to_string("/proc/self/status").map_err(|e| format!("status: {e}"))?;
    let lines: Vec<&str> = status
        .lines()
        .filter(|l| l.starts_with("Cap") || l.starts_with("NoNewPrivs") || l.starts_with("Seccomp"))
        .collect();
    // SAFETY: getsid(0) and getpid() read no memory of ours.
    #[expect(unsafe_code, reason = "std has no getsid")]
    let leader = unsafe { libc::getsid(0) == libc::getpid() };
    Ok(format!("{}; session leader: {leader}", lines.join("; ")))
}

/// Tries one system call a sandbox denies; `done` if it worked.
fn syscall(call: &str) -> Result<String, String> {
    let result: i64 = match call {
        // SAFETY: clone without CLONE_VM and a null stack is a fork: the child gets a copy of
        // this process's memory and leaves at once with _exit, touching nothing.
        #[expect(unsafe_code, reason = "no safe binding makes a namespace by clone")]
        "clone_newuser" => unsafe {
            let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNET | libc::SIGCHLD;
            let pid = libc::syscall(
                libc::SYS_clone,
                libc::c_ulong::try_from(flags).unwrap_or(0),
                0,
                0,
                0,
                0,
            );
            if pid == 0 {
                libc::_exit(0);
            }
            if pid > 0 {
                libc::waitpid(i32::try_from(pid).unwrap_or(0), std::ptr::null_mut(), 0);
            }
            pid
        },
        // SAFETY: a null argument with size 0: the kernel reads nothing (EFAULT or EINVAL at
        // worst); a filter answers before that.
        #[expect(unsafe_code, reason = "no binding for clone3")]
        "clone3" => unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) },
        // SAFETY: TIOCSTI reads one byte from the pointer, a local.
        #[expect(unsafe_code, reason = "no binding for TIOCSTI")]
        "tiocsti" => unsafe {
            let byte: libc::c_char = 0;
            i64::from(libc::ioctl(0, libc::TIOCSTI, &byte))
        },
        // SAFETY: socket(2) reads no memory; the descriptor is closed at once.
        #[expect(unsafe_code, reason = "std makes no packet or raw socket")]
        "packet_socket" | "raw_socket" => unsafe {
            let fd = if call == "packet_socket" {
                libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0x0300)
            } else {
                libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_TCP)
            };
            if fd >= 0 {
                libc::close(fd);
            }
            i64::from(fd)
        },
        "socketpair" => match std::os::unix::net::UnixStream::pair() {
            Ok(_) => 0,
            Err(_) => -1,
        },
        "fork_chain" => fork_chain(),
        other => return Err(format!("unknown call {other:?}")),
    };
    if result >= 0 {
        Ok(format!("{call} returned {result}"))
    } else {
        Err(format!("{call}: {}", std::io::Error::last_os_error()))
    }
}

/// Starts a fork-and-exit chain in HOME (its working directory marks it): each generation
/// forks and exits at once, so the chain's one live process keeps changing its pid and parent.
/// It ends by itself after 30 s. Returns the first generation's pid.
fn fork_chain() -> i64 {
    let home =
        std::ffi::CString::new(std::env::var("HOME").unwrap_or_default()).unwrap_or_default();
    // SAFETY: after fork only async-signal-safe calls follow in the child (chdir, time,
    // fork, nanosleep, _exit): no allocation, no lock; the CString was made before.
    #[expect(unsafe_code, reason = "a fork-and-exit chain needs raw fork")]
    unsafe {
        let first = libc::fork();
        if first != 0 {
            return i64::from(first);
        }
        libc::chdir(home.as_ptr());
        let end = libc::time(std::ptr::null_mut()) + 30;
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        while libc::time(std::ptr::null_mut()) < end {
            match libc::fork() {
                0 => {}
                // No process left to make (a limit): wait and try again.
                failed if failed < 0 => {
                    libc::nanosleep(&pause, std::ptr::null_mut());
                }
                _ => libc::_exit(0),
            }
        }
        libc::_exit(0)
    }
}
