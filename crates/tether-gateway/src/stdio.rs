//! The gateway's own stdin and stdout when they are pipes (how an MCP client starts a server),
//! read and written by the runtime's event loop rather than through tokio's `Stdin`/`Stdout`,
//! which hand every read and every write to a thread of the blocking pool and back: measured,
//! those hand-offs were most of what a `tools/call` through `tether serve` added over stdio
//! (docs/performance.md, "The gateway"). A terminal or a file keeps tokio's `Stdin`/`Stdout`.
//!
//! A pipe is put in non-blocking mode for this, which holds for its whole open file
//! description (shared with any process holding the same end): the mode each had is put back
//! when serving ends ([`Restore`]).

use std::os::fd::{AsFd as _, OwnedFd};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::unix::pipe;

/// This process's stdin and stdout as the gateway serves a client on them ([`stdio`]).
pub struct Stdio {
    /// Stdin.
    pub reader: Box<dyn AsyncRead + Send + Unpin>,
    /// Stdout.
    pub writer: Box<dyn AsyncWrite + Send + Unpin>,
    /// Puts the pipes' modes back when dropped: keep it until serving ends.
    pub restore: Restore,
}

/// Stdin and stdout: pipes of the event loop when both are pipes, else tokio's `Stdin` and
/// `Stdout`.
pub fn stdio() -> Stdio {
    match pipes() {
        Some((reader, writer, restore)) => Stdio {
            reader: Box::new(reader),
            writer: Box::new(writer),
            restore,
        },
        None => Stdio {
            reader: Box::new(tokio::io::stdin()),
            writer: Box::new(tokio::io::stdout()),
            restore: Restore(Vec::new()),
        },
    }
}

/// Stdin and stdout as pipes of the event loop, and what puts their modes back (keep it until
/// serving ends); `None`, with nothing changed, unless both are pipes.
fn pipes() -> Option<(pipe::Receiver, pipe::Sender, Restore)> {
    let stdin = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let stdout = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    let modes = [&stdin, &stdout]
        .into_iter()
        .map(|fd| {
            let flags = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL).ok()?);
            Some((fd.try_clone().ok()?, flags))
        })
        .collect::<Option<Vec<_>>>()?;
    // Each checks that its descriptor is a pipe before it changes its mode.
    let reader = pipe::Receiver::from_owned_fd(stdin).ok()?;
    let restore = Restore(modes);
    let writer = pipe::Sender::from_owned_fd(stdout).ok()?;
    Some((reader, writer, restore))
}

/// Puts each pipe's mode back when dropped.
pub struct Restore(Vec<(OwnedFd, OFlag)>);

impl Drop for Restore {
    fn drop(&mut self) {
        restore(&self.0);
    }
}

fn restore(modes: &[(OwnedFd, OFlag)]) {
    for (fd, flags) in modes {
        if let Err(error) = fcntl(fd, FcntlArg::F_SETFL(*flags)) {
            tracing::debug!(%error, "could not put a stdio pipe's mode back");
        }
    }
}
