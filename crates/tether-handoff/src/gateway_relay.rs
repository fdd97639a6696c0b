//! The gateway relay of a hand-off (`tether run --gateway`): the harness's one MCP server is
//! `tether __gateway SOCKET`, which connects to the gateway that the run's own tether process
//! serves on a Unix socket in the private run directory, and copies bytes both ways: its stdin
//! to the socket, the socket to its stdout.
//!
//! The relay knows nothing of the servers: no spec, value or secret passes through its command
//! line, its environment or the harness's config. The servers run in the tether process that
//! resolved them, under its supervisor; the harness reaches them only through the gateway, so
//! it sees namespaced tools and masked results.

use std::ffi::OsString;
use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;

/// The hidden subcommand of `tether` that runs [`main`].
pub const SUBCOMMAND: &str = "__gateway";

/// `tether __gateway SOCKET`: relays until either side closes. Exit 0 on a normal end, 1 when
/// the gateway cannot be reached.
pub fn main(args: &[OsString]) -> u8 {
    let [socket] = args else {
        eprintln!("usage: tether {SUBCOMMAND} SOCKET");
        return 2;
    };
    let stream = match UnixStream::connect(socket) {
        Ok(stream) => stream,
        Err(e) => {
            eprintln!(
                "tether: cannot reach the run's MCP gateway at {}: {e} (has the run ended?)",
                std::path::Path::new(socket).display()
            );
            return 1;
        }
    };
    let Ok(mut to_gateway) = stream.try_clone() else {
        eprintln!("tether: cannot use the gateway connection");
        return 1;
    };
    // stdin → gateway on its own thread; when the client closes stdin, the gateway sees the
    // end of its input and closes the session.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_gateway);
        let _ = to_gateway.shutdown(std::net::Shutdown::Write);
    });
    // gateway → stdout, flushed after every read: a JSON-RPC line must not wait in a buffer.
    let mut from_gateway = stream;
    let mut stdout = std::io::stdout().lock();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match from_gateway.read(&mut buffer) {
            Ok(0) | Err(_) => return 0,
            Ok(n) => {
                if stdout.write_all(&buffer[..n]).is_err() || stdout.flush().is_err() {
                    return 0;
                }
            }
        }
    }
}
