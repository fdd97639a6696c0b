//! Sandboxed stdio servers without containers (`specs/sandbox/TECH.md`).
//!
//! A [`Mode`] (`none`, `default`, `strict`, a profile file) resolves to a [`Policy`]: a
//! [`Profile`] in ToolHive's JSON format. [`prepare`] turns a policy and the server's command
//! into a [`Prepared`] sandbox *before* the fork — every path opened, the Landlock ruleset
//! built, the seccomp program compiled, the cgroup made — and says in a [`Report`] what is and
//! is not enforced on this kernel. [`Prepared::into_child_hook`] gives the closure the child
//! runs between fork and exec: it only makes system calls (no allocation on its success path).
//! [`explain`] reads a failed server's stderr for a denial and names the profile line to add.

mod cache;
mod egress;
mod explain;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod netns;
mod profile;
mod script;

use std::path::{Path, PathBuf};

pub use cache::{PackageCache, package_cache};
pub use egress::{HostRules, NO_PROXY_VARS, PROXY_PORT, PROXY_VARS, proxy_url};
pub use explain::{explain, explain_policy};
#[cfg(target_os = "linux")]
pub use linux::{Egress, Prepared, assess, kernel_summary, prepare};
#[cfg(target_os = "linux")]
pub use netns::ParentNet;
pub use profile::{
    ASSUME_NO_NETNS, DEFAULT_CPU_SECONDS, DEFAULT_MEMORY_MB, DEFAULT_PORTS, DEFAULT_PROCESSES,
    Mode, Network, Outbound, Outgoing, Policy, Profile, TetherSettings,
};
pub use script::{is_interpreter, script_index};

/// Why a sandbox could not be set up. Each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// `--sandbox` was given an empty value.
    #[error("--sandbox needs none, default, strict or the path of a permission profile")]
    BadMode,
    /// A profile file could not be read.
    #[error("cannot read the permission profile {}: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        reason: String,
    },
    /// A profile file is not a valid profile.
    #[error("permission profile {}: {reason}", path.display())]
    Profile {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key.
        reason: String,
    },
    /// `strict` and something cannot be enforced here.
    #[error(
        "--sandbox {label} refuses to start the server: this system cannot enforce {}; use --sandbox default to run with what can be enforced",
        missing.join(", ")
    )]
    NotEnforced {
        /// The mode.
        label: String,
        /// What cannot be enforced.
        missing: Vec<String>,
    },
    /// The sandbox is not available on this operating system.
    #[error(
        "sandboxing stdio servers is built for Linux only; run with --sandbox none on this system"
    )]
    Unsupported,
    /// Setting the sandbox up failed (a Landlock or seccomp call, the private directory).
    #[error("cannot set up the sandbox: {0}")]
    Setup(String),
}

/// What a sandbox enforces for one server, and what it could not.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// The mode as the user wrote it.
    pub label: String,
    /// What is enforced, one short phrase each.
    pub enforced: Vec<String>,
    /// What the profile asks and this system cannot enforce (empty: everything is).
    pub missing: Vec<String>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sandbox {}: {}", self.label, self.enforced.join(", "))?;
        if !self.missing.is_empty() {
            write!(f, "; NOT enforced: {}", self.missing.join(", "))?;
        }
        Ok(())
    }
}

/// A server's private directory, its `HOME` and `TMPDIR`: made 0700 under the system's
/// temporary directory, removed when dropped unless kept.
#[derive(Debug)]
pub struct PrivateHome {
    path: PathBuf,
    keep: bool,
}

impl PrivateHome {
    /// Makes a fresh private directory under `parent` (`std::env::temp_dir()` in tether).
    pub fn create(parent: &Path, keep: bool) -> Result<Self, SandboxError> {
        use std::os::unix::fs::DirBuilderExt;
        let pid = std::process::id();
        for attempt in 0..64u32 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = parent.join(format!("tether-sandbox-{pid}-{nanos:08x}{attempt}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(Self { path, keep }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(SandboxError::Setup(format!(
                        "cannot make a private directory in {}: {e}",
                        parent.display()
                    )));
                }
            }
        }
        Err(SandboxError::Setup(format!(
            "cannot make a private directory in {}",
            parent.display()
        )))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether it stays after the run.
    pub fn kept(&self) -> bool {
        self.keep
    }
}

impl Drop for PrivateHome {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// What the child runs between fork and exec (see [`Prepared::into_child_hook`]).
pub type ChildHook = Box<dyn FnMut() -> std::io::Result<()> + Send + Sync>;

/// How many sweeps [`Cleanup::adopt`] makes at most for processes started before the move.
pub const ADOPT_SWEEPS: usize = 64;

/// What is left to do once the server is spawned, and to remove once it and its descendants
/// are gone: its cgroup.
#[derive(Debug, Default)]
pub struct Cleanup {
    pub(crate) cgroup_dir: Option<PathBuf>,
    /// The cgroup's `cgroup.procs`, when the child does not join it itself (see
    /// `Prepared::into_child_hook_adopted_later`): [`Cleanup::adopt`] writes to it.
    pub(crate) procs: Option<std::fs::File>,
    pub(crate) adopting: Option<std::thread::JoinHandle<()>>,
}

impl Cleanup {
    /// Moves the spawned server `pid` into its pids cgroup on a background thread, then the
    /// processes `started(pid)` lists (its descendants: those it started before the move
    /// stayed outside), sweep after sweep until one finds none it has not moved (at most
    /// [`ADOPT_SWEEPS`]); nothing when the child joined before exec. On cgroup v1 the first
    /// move waits for an RCU grace period (~10 ms): off the start-up path, the server runs
    /// meanwhile; the moves after it are quick.
    pub fn adopt(&mut self, pid: i32, started: impl Fn(i32) -> Vec<i32> + Send + 'static) {
        let Some(procs) = self.procs.take() else {
            return;
        };
        self.adopting = Some(std::thread::spawn(move || {
            use std::io::Write;
            // One write per pid: cgroup.procs takes one at a time.
            let adopt = |pid: i32| (&procs).write_all(pid.to_string().as_bytes()).is_ok();
            if !adopt(pid) {
                return;
            }
            let mut moved = std::collections::HashSet::new();
            for _ in 0..ADOPT_SWEEPS {
                let new: Vec<i32> = started(pid)
                    .into_iter()
                    .filter(|p| moved.insert(*p))
                    .collect();
                if new.is_empty() {
                    return;
                }
                for early in new {
                    adopt(early);
                }
            }
        }));
    }

    /// Waits until [`Cleanup::adopt`]'s moves are done (at once if there were none).
    pub fn wait_adopted(&mut self) {
        if let Some(adopting) = self.adopting.take() {
            let _ = adopting.join();
        }
    }

    /// Ends whatever is left in the server's cgroup and removes it (call after every
    /// descendant the caller knows of ended). A fork-and-exit chain outruns a walk of parent
    /// links, and once its supervisor is gone its survivors belong to init; in the cgroup it
    /// cannot hide: `pids.max` goes to 0 first (no more forks), then every member gets SIGKILL
    /// until none is left (bounded: 2 s).
    pub fn run(&mut self) {
        self.wait_adopted();
        if let Some(dir) = self.cgroup_dir.take() {
            let _ = std::fs::write(dir.join("pids.max"), "0");
            for _ in 0..200 {
                let members = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                let pids: Vec<i32> = members
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect();
                if pids.is_empty() {
                    break;
                }
                for pid in pids {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.run();
    }
}

/// Whether a server under `policy` reaches hosts only through the egress proxy here (its
/// profile lists hosts and a network namespace can be made).
pub fn behind_proxy(policy: &Policy) -> bool {
    #[cfg(target_os = "linux")]
    {
        linux::hosts_enforced(policy).is_some_and(|enforced| enforced.is_ok())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = policy;
        false
    }
}

/// Whether process `pid` (a socket's peer, `SO_PEERCRED`) is confined where this process is
/// not: its `/proc/PID/status` shows `NoNewPrivs`, a seccomp mode or more seccomp filters than
/// this process's own. Every sandboxed server and each of its descendants has all three, and
/// cannot shed them; tether's exec shims and gateway relays, started by the harness, have
/// what tether has. tether's own sockets refuse such a peer: a sandboxed server that finds a
/// socket's path (on a command line, in `/proc/net/unix`) gets nothing from it. A status that
/// cannot be read counts as confined.
pub fn confined_peer(pid: i32) -> bool {
    let Ok(own) = std::fs::read_to_string("/proc/self/status") else {
        return true;
    };
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_or(true, |peer| more_confined(&peer, &own))
}

/// Whether the status `peer` shows a confinement that `own` does not.
fn more_confined(peer: &str, own: &str) -> bool {
    let field = |status: &str, name: &str| -> u64 {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0)
    };
    ["NoNewPrivs", "Seccomp", "Seccomp_filters"]
        .iter()
        .any(|name| field(peer, name) > field(own, name))
}

/// Not Linux: no sandbox can be prepared.
#[cfg(not(target_os = "linux"))]
pub fn prepare(
    _policy: &Policy,
    _target: &Target<'_>,
) -> Result<std::convert::Infallible, SandboxError> {
    Err(SandboxError::Unsupported)
}

#[cfg(test)]
mod tests {
    use super::more_confined;

    #[test]
    fn a_peer_with_no_new_privs_or_more_seccomp_filters_is_confined() {
        let own = "Name:\ttether\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n";
        assert!(!more_confined(own, own));
        let sandboxed = "NoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t2\n";
        assert!(more_confined(sandboxed, own));
        // In a container every process has a filter: one more is still told apart.
        let contained = "NoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n";
        assert!(!more_confined(contained, contained));
        assert!(more_confined(sandboxed, contained));
    }
}

/// The server a sandbox is prepared for.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    /// The program as its config names it (a bare name is looked up on `path`).
    pub program: &'a std::ffi::OsStr,
    /// Its arguments: those naming an existing file give their package read access.
    pub args: &'a [std::ffi::OsString],
    /// `PATH` as the child will have it.
    pub path: Option<&'a std::ffi::OsStr>,
    /// Its working directory, if not tether's (relative paths are read against it).
    pub cwd: Option<&'a Path>,
    /// Its private `HOME`/`TMPDIR` (read-write).
    pub home: &'a Path,
    /// Its package runner's cache ([`package_cache`]; read-write), if it has one.
    pub cache: Option<&'a Path>,
    /// The user's real home, for `~` in profiles and to keep it from being granted whole.
    pub user_home: Option<&'a Path>,
}

impl<'a> Target<'a> {
    /// `program args` with `home` as its private home; no `PATH`, working directory, cache or
    /// user home (set the fields for those).
    pub fn new(
        program: &'a std::ffi::OsStr,
        args: &'a [std::ffi::OsString],
        home: &'a Path,
    ) -> Self {
        Self {
            program,
            args,
            path: None,
            cwd: None,
            home,
            cache: None,
            user_home: None,
        }
    }
}
