//! The server's own network namespace, whose only way out is the egress proxy (spec §7).
//!
//! In the child, between fork and exec and before Landlock and seccomp (whose filter denies
//! `unshare`): `unshare(CLONE_NEWNET)` as root, `unshare(CLONE_NEWUSER | CLONE_NEWNET)`
//! otherwise (or when root lacks the capability) with the process's own uid and gid mapped
//! (`setgroups` denied first); `lo` brought up (`SIOCSIFFLAGS`); a TCP socket bound and
//! listening on `127.0.0.1:PROXY_PORT` *inside* the namespace, sent to the supervisor over a
//! socket pair made before the fork (`SCM_RIGHTS`). A socket keeps the namespace it was made
//! in: the supervisor accepts the server's connections on it and dials out from its own.
//!
//! The child's side makes system calls only and allocates nothing: the map lines are written
//! before the fork, the structures live on the stack, errors are raw OS errors.
#![expect(
    unsafe_code,
    reason = "namespaces, ioctl and SCM_RIGHTS are raw system calls in a pre_exec hook"
)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::OnceLock;

use nix::libc;

use crate::egress::PROXY_PORT;

/// What the child needs to enter its namespace and hand its listening socket over.
#[derive(Debug)]
pub(crate) struct ChildNet {
    /// The child's end of the socket pair (close-on-exec: the server never holds it); `None`
    /// for a namespace with no way out at all (a profile without network).
    sock: Option<OwnedFd>,
    /// Root: try `CLONE_NEWNET` alone first.
    root: bool,
    /// `"UID UID 1"`, `"GID GID 1"`: the process's own ids, made before the fork.
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// Where the namespace cannot be made, go on without it (best effort) rather than fail.
    fall_back: bool,
}

/// The supervisor's end: where the listening socket arrives.
#[derive(Debug)]
pub struct ParentNet {
    sock: OwnedFd,
}

/// A socket pair for one server, and the map lines of this process's ids; with `fall_back`
/// the child goes on without the namespace where it cannot make one, and says so over the pair.
pub(crate) fn pair(fall_back: bool) -> io::Result<(ChildNet, ParentNet)> {
    let (child, parent) = UnixStream::pair()?;
    Ok((
        ChildNet {
            sock: Some(child.into()),
            fall_back,
            ..isolated()
        },
        ParentNet {
            sock: parent.into(),
        },
    ))
}

/// A namespace with loopback only and nothing handed to the supervisor; where one cannot be
/// made, the child goes on without it (the profile's Landlock rules allow no TCP either way).
pub(crate) fn isolated() -> ChildNet {
    let (root, uid_map, gid_map) = own_ids();
    ChildNet {
        sock: None,
        root,
        uid_map,
        gid_map,
        fall_back: true,
    }
}

/// Whether this process is root, and the map lines of its own uid and gid.
fn own_ids() -> (bool, Vec<u8>, Vec<u8>) {
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    (
        nix::unistd::geteuid().is_root(),
        format!("{uid} {uid} 1").into_bytes(),
        format!("{gid} {gid} 1").into_bytes(),
    )
}

fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// Writes `bytes` to `path` in one `write` (what `/proc/self/uid_map` needs).
fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; the fd is closed on every path out.
    unsafe {
        let fd = check(libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC))?;
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let error = (written < 0).then(io::Error::last_os_error);
        libc::close(fd);
        error.map_or(Ok(()), Err)
    }
}

/// `struct ifreq` as `SIOCGIFFLAGS`/`SIOCSIFFLAGS` use it: the name, the flags, padding to the
/// kernel's 40 bytes.
#[repr(C)]
struct IfreqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Enters a new network namespace (and user namespace where needed) and brings `lo` up.
fn enter(root: bool, uid_map: &[u8], gid_map: &[u8]) -> io::Result<()> {
    // SAFETY: unshare takes flags only.
    let user = if root {
        match check(unsafe { libc::unshare(libc::CLONE_NEWNET) }) {
            Ok(_) => false,
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                check(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) })?;
                true
            }
            Err(e) => return Err(e),
        }
    } else {
        check(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) })?;
        true
    };
    if user {
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", uid_map)?;
        write_file(c"/proc/self/gid_map", gid_map)?;
    }
    let mut request = IfreqFlags {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _pad: [0; 22],
    };
    request.name[0] = b'l';
    request.name[1] = b'o';
    // SAFETY: the request is a live, correctly sized ifreq for both ioctls; the socket is
    // closed on every path out.
    unsafe {
        let fd = check(libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let mut result = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut request);
        if result >= 0 {
            request.flags |= libc::IFF_UP as libc::c_short;
            result = libc::ioctl(fd, libc::SIOCSIFFLAGS, &request);
        }
        let error = (result < 0).then(io::Error::last_os_error);
        libc::close(fd);
        error.map_or(Ok(()), Err)
    }
}

/// A TCP socket listening on `127.0.0.1:port` in the current network namespace.
fn listen(port: u16) -> io::Result<RawFd> {
    let address = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: the address is a live sockaddr_in of the size given; the socket is closed when
    // bind or listen fails.
    unsafe {
        let fd = check(libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let bound = libc::bind(
            fd,
            (&raw const address).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        if bound < 0 || libc::listen(fd, 128) < 0 {
            let error = io::Error::last_os_error();
            libc::close(fd);
            return Err(error);
        }
        Ok(fd)
    }
}

/// Room for one `SCM_RIGHTS` control message, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; 64]);

/// A message of `data` with room for a control message (`control`).
///
/// SAFETY (for the caller): the returned header points into `data`, `iov` and `control`,
/// which must outlive its use.
unsafe fn message(
    iov: &mut libc::iovec,
    data: &mut [u8],
    control: &mut Control,
    control_len: usize,
) -> libc::msghdr {
    iov.iov_base = data.as_mut_ptr().cast();
    iov.iov_len = data.len();
    // SAFETY: msghdr is plain data: all zero is valid.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = iov;
    message.msg_iovlen = 1;
    message.msg_control = control.0.as_mut_ptr().cast();
    message.msg_controllen = control_len as _;
    message
}

/// Sends `fd` over `sock` (one byte of data, the descriptor as `SCM_RIGHTS`).
fn send_fd(sock: RawFd, fd: RawFd) -> io::Result<()> {
    let (mut byte, mut control) = ([0u8; 1], Control([0; 64]));
    let mut iov = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    // SAFETY: the control buffer is larger than CMSG_SPACE(sizeof(int)) and aligned; every
    // pointer outlives the sendmsg call.
    unsafe {
        let space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
        let message = message(&mut iov, &mut byte, &mut control, space);
        let header = libc::CMSG_FIRSTHDR(&raw const message);
        if header.is_null() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<RawFd>(), fd);
        check(libc::sendmsg(sock, &raw const message, libc::MSG_NOSIGNAL) as libc::c_int)?;
    }
    Ok(())
}

impl ChildNet {
    /// Whether the child goes on without the namespace where it cannot make one.
    pub(crate) fn falls_back(&self) -> bool {
        self.fall_back
    }

    /// In the child: the namespace, `lo` up, the proxy's socket listening and sent to the
    /// supervisor (when there is one). `Ok(false)` when the namespace could not be made and
    /// the child goes on without it (the supervisor is sent the errno instead). System calls
    /// only.
    pub(crate) fn apply(&self) -> io::Result<bool> {
        if let Err(e) = enter(self.root, &self.uid_map, &self.gid_map) {
            if !self.fall_back {
                return Err(e);
            }
            if let Some(sock) = &self.sock {
                let errno = e.raw_os_error().unwrap_or(libc::EPERM).to_ne_bytes();
                // SAFETY: four bytes of a live array; the socket is the child's end.
                let sent = unsafe {
                    libc::send(
                        sock.as_raw_fd(),
                        errno.as_ptr().cast(),
                        errno.len(),
                        libc::MSG_NOSIGNAL,
                    )
                };
                check(sent as libc::c_int)?;
            }
            return Ok(false);
        }
        let Some(sock) = &self.sock else {
            return Ok(true);
        };
        let listener = listen(PROXY_PORT)?;
        let sent = send_fd(sock.as_raw_fd(), listener);
        // SAFETY: the listener is this hook's own descriptor (the supervisor got a copy).
        unsafe { libc::close(listener) };
        sent.map(|()| true)
    }
}

impl ParentNet {
    /// The listening socket the spawned child sent (call after the spawn succeeded: the child
    /// sent it before exec). Does not wait. An error with an OS code when the child could not
    /// make its namespace (it runs without: its host allow-list is not enforced).
    pub fn receive(self) -> io::Result<std::net::TcpListener> {
        let (mut data, mut control) = ([0u8; 4], Control([0; 64]));
        let mut iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // SAFETY: as in send_fd; the received descriptor is checked to be a SCM_RIGHTS one and
        // owned from here on.
        unsafe {
            let mut message = message(&mut iov, &mut data, &mut control, 64);
            let read = check(libc::recvmsg(
                self.sock.as_raw_fd(),
                &raw mut message,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            ) as libc::c_int)?;
            let header = libc::CMSG_FIRSTHDR(&raw const message);
            if header.is_null() && read == 4 {
                return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(data)));
            }
            if header.is_null()
                || (*header).cmsg_level != libc::SOL_SOCKET
                || (*header).cmsg_type != libc::SCM_RIGHTS
            {
                return Err(io::Error::other(
                    "the sandboxed child sent no listening socket",
                ));
            }
            let fd = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<RawFd>());
            let listener = std::net::TcpListener::from(OwnedFd::from_raw_fd(fd));
            listener.set_nonblocking(true)?;
            Ok(listener)
        }
    }
}

/// Whether this process can give a child its own network namespace: found once, by a forked
/// child that tries (and exits); `Err` says why not (the errno of the step that failed).
pub(crate) fn available() -> Result<(), String> {
    static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
    AVAILABLE
        .get_or_init(|| {
            let (root, uid_map, gid_map) = own_ids();
            // SAFETY: the child makes system calls only (unshare, open, write, ioctl, close)
            // and leaves with _exit; the parent waits for it.
            unsafe {
                let pid = libc::fork();
                if pid == 0 {
                    let code = match enter(root, &uid_map, &gid_map) {
                        Ok(()) => 0,
                        Err(e) => e.raw_os_error().unwrap_or(255).clamp(1, 255),
                    };
                    libc::_exit(code);
                }
                if pid < 0 {
                    return Err(format!("fork: {}", io::Error::last_os_error()));
                }
                let mut status = 0;
                if libc::waitpid(pid, &raw mut status, 0) < 0 {
                    return Err(format!("waitpid: {}", io::Error::last_os_error()));
                }
                match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
                    Some(0) => Ok(()),
                    Some(errno) => Err(io::Error::from_raw_os_error(errno).to_string()),
                    None => Err("the namespace probe was killed".to_owned()),
                }
            }
        })
        .clone()
}
