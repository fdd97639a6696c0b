//! Linux: Landlock (files, TCP ports, scopes), seccomp, rlimits, a pids cgroup.
//!
//! Everything is computed in [`prepare`], before the fork. The child's hook
//! ([`Prepared::into_child_hook`]) then makes only system calls: a `write` of `0` to the
//! cgroup's `cgroup.procs` (opened before), `setrlimit`, `prctl(PR_SET_NO_NEW_PRIVS)`,
//! `landlock_restrict_self` (the ruleset's fd was made before), `seccomp` (the program was
//! compiled before). Its success path allocates nothing; an error is a raw OS error.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};
use nix::sys::resource::Resource;
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

use crate::egress::{HostRules, PROXY_PORT};
use crate::netns::{ChildNet, ParentNet};
use crate::{ChildHook, Cleanup, Outgoing, Policy, Report, SandboxError, Target};

/// Read-only (and executable) system directories every sandboxed server gets.
const SYSTEM_DIRS: [&str; 8] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
];

/// Further read-only paths: what runtimes read to size themselves.
const SYSTEM_EXTRA: [&str; 2] = ["/sys/fs/cgroup", "/sys/devices/system/cpu"];

/// Devices a server may read and write. Not `/dev/tty`: the server runs in a session of its
/// own, without the terminal (a terminal's `TIOCSTI` types into the user's shell).
const DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Entries of `/etc` left out: credentials.
const ETC_DENIED: [&str; 11] = [
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "security",
    "krb5.keytab",
    ".pwd.lock",
    "libaudit.conf",
    "subuid-",
];

/// Directories of `/etc` granted entry by entry, leaving out private keys: TLS's `private/`
/// and SSH's host keys (`ssh_host_*_key`; the `.pub` halves stay readable).
const ETC_DESCENDED: [&str; 2] = ["ssl", "ssh"];

fn etc_private(dir: &str, name: &str) -> bool {
    match dir {
        "ssl" => name == "private",
        "ssh" => name.starts_with("ssh_host_") && !name.ends_with(".pub"),
        _ => false,
    }
}

/// System calls answered with `EPERM`: debugging and memory access of other processes,
/// mounts and namespaces, kernel modules and kexec, BPF, keyrings, performance counters,
/// handle-based opens (which bypass paths), io_uring (whose operations escape this list),
/// clock, swap, reboot, accounting.
const SECCOMP_DENIED: [&str; 34] = [
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "perf_event_open",
    "userfaultfd",
    "open_by_handle_at",
    "name_to_handle_at",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "syslog",
];

/// The number of system calls the seccomp filter denies.
pub const SECCOMP_DENIED_COUNT: usize = SECCOMP_DENIED.len();

/// `clone` flags that make a namespace: `clone` with any of them answers `EPERM` (as
/// `unshare` does). `CLONE_NEWTIME` is left out: for `clone` that bit is part of the exit
/// signal.
const CLONE_NAMESPACES: [u64; 7] = [
    0x0002_0000, // CLONE_NEWNS
    0x0200_0000, // CLONE_NEWCGROUP
    0x0400_0000, // CLONE_NEWUTS
    0x0800_0000, // CLONE_NEWIPC
    0x1000_0000, // CLONE_NEWUSER
    0x2000_0000, // CLONE_NEWPID
    0x4000_0000, // CLONE_NEWNET
];

/// What the seccomp filter denies besides [`SECCOMP_DENIED`], one short phrase (the report).
const SECCOMP_ARGUMENTS: &str =
    "clone with namespace flags, clone3, TIOCSTI and TIOCLINUX, packet and raw sockets";

/// What the seccomp filter also denies unless the profile says `"unix_sockets": true`.
const SECCOMP_UNIX: &str = "Unix sockets (socketpair allowed)";

/// The Landlock status of this kernel, found once per process with one system call:
/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)` answers the kernel's ABI
/// (or `EOPNOTSUPP`: built in but not enabled; `ENOSYS`: not built in). No ruleset is made.
fn landlock_status() -> LandlockStatus {
    static STATUS: OnceLock<LandlockStatus> = OnceLock::new();
    *STATUS.get_or_init(|| {
        const LANDLOCK_CREATE_RULESET_VERSION: nix::libc::c_uint = 1;
        // SAFETY: with a null attribute pointer and size 0 the kernel reads no memory; the
        // call only returns the ABI version (or an error).
        #[expect(
            unsafe_code,
            reason = "the landlock crate reports the ABI only after restrict_self"
        )]
        let version = unsafe {
            nix::libc::syscall(
                nix::libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        match i32::try_from(version) {
            Ok(version) if version > 0 => {
                let abi = ABI::from(version);
                LandlockStatus::Available {
                    effective_abi: abi,
                    kernel_abi: (version != abi as i32).then_some(version),
                }
            }
            _ if nix::errno::Errno::last() == nix::errno::Errno::EOPNOTSUPP => {
                LandlockStatus::NotEnabled
            }
            _ => LandlockStatus::NotImplemented,
        }
    })
}

fn landlock_abi() -> Option<ABI> {
    match landlock_status() {
        LandlockStatus::Available { effective_abi, .. } => Some(effective_abi),
        _ => None,
    }
}

/// One line on what this kernel offers: Landlock's ABI, seccomp's architecture, the cgroup.
pub fn kernel_summary() -> String {
    let landlock = match landlock_status() {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => match kernel_abi {
            Some(kernel) => format!("Landlock {effective_abi} (kernel ABI {kernel})"),
            None => format!("Landlock {effective_abi}"),
        },
        LandlockStatus::NotEnabled => "Landlock built in but not enabled".to_owned(),
        LandlockStatus::NotImplemented => "no Landlock".to_owned(),
    };
    let seccomp = match seccomp_arch() {
        Some(_) => "seccomp",
        None => "no seccomp filter for this architecture",
    };
    let cgroup = match pids_cgroup_parent() {
        Some(dir) => format!("pids cgroup under {}", dir.display()),
        None => "no writable pids cgroup".to_owned(),
    };
    format!("{landlock}, {seccomp}, {cgroup}")
}

fn seccomp_arch() -> Option<TargetArch> {
    TargetArch::try_from(std::env::consts::ARCH).ok()
}

/// A sandbox ready to be applied in a child: made by [`prepare`].
pub struct Prepared {
    ruleset: Option<RulesetCreated>,
    /// The ruleset applied instead when the child cannot enter its network namespace (best
    /// effort with a host allow-list: the profile's ports, reaching any host).
    fallback: Option<RulesetCreated>,
    /// The filter, the one making `clone3` answer `ENOSYS` (a second action) and, unless the
    /// profile allows them, the one making `socket(AF_UNIX, …)` answer `EACCES`.
    seccomp: Option<Vec<BpfProgram>>,
    limits: [Option<(Resource, u64)>; 4],
    /// Capabilities to give up in the child: all of them, the bounding set too as root.
    capabilities: Capabilities,
    cgroup_procs: Option<File>,
    /// The network namespace the child enters when its hosts are restricted.
    net: Option<ChildNet>,
    /// Where the proxy's listening socket arrives, and what the proxy lets through.
    egress: Option<Egress>,
    /// Removes the cgroup when dropped: a `Prepared` dropped unused leaves nothing behind.
    cleanup: Cleanup,
    strict: bool,
    report: Report,
}

/// What the supervisor needs to run a server's egress proxy: the socket the child sends its
/// listening socket over ([`ParentNet::receive`], after the spawn), the rules, the mode's label
/// for denial lines.
#[derive(Debug)]
pub struct Egress {
    /// The supervisor's end of the socket pair.
    pub net: ParentNet,
    /// The profile's `allow_host` and `allow_port`.
    pub rules: HostRules,
    /// The mode as the user wrote it.
    pub label: String,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// What is and is not enforced.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The egress proxy's part, when the profile restricts hosts and this system can give the
    /// server its own network namespace: take it before [`Prepared::into_child_hook`], and
    /// start the proxy (on [`crate::proxy_url`]'s port, which the server's environment must
    /// name: [`crate::PROXY_VARS`]) after the spawn.
    pub fn take_egress(&mut self) -> Option<Egress> {
        self.egress.take()
    }

    /// The hook for `CommandExt::pre_exec`, and what to clean up after the run.
    ///
    /// The hook joins the cgroup, sets the limits, sets `no_new_privs`, enforces the Landlock
    /// ruleset, installs the seccomp filter — in that order, so that the filter (which would
    /// not stop them anyway) comes last. Its success path makes system calls only.
    pub fn into_child_hook(self) -> (ChildHook, Cleanup) {
        self.hook(true)
    }

    /// As [`Prepared::into_child_hook`], except that the child does not join its pids cgroup
    /// before exec (on cgroup v1 that waits for an RCU grace period, ~10 ms of every start):
    /// the caller moves it after the spawn with [`Cleanup::adopt`]. What the server starts
    /// before the move lands is moved by `adopt`'s sweep. A strict policy still joins before
    /// exec: no process of the server ever runs outside the limit.
    pub fn into_child_hook_adopted_later(self) -> (ChildHook, Cleanup) {
        let strict = self.strict;
        self.hook(strict)
    }

    fn hook(self, join_in_child: bool) -> (ChildHook, Cleanup) {
        let Self {
            mut ruleset,
            mut fallback,
            seccomp,
            limits,
            capabilities,
            mut cgroup_procs,
            net,
            egress: _,
            mut cleanup,
            strict: _,
            report: _,
        } = self;
        if !join_in_child {
            cleanup.procs = cgroup_procs.take();
        }
        let hook = move || -> std::io::Result<()> {
            if let Some(mut procs) = cgroup_procs.as_ref() {
                // "0" moves the writer itself.
                procs.write_all(b"0")?;
            }
            // Before Landlock and seccomp: the filter denies unshare. Where the namespace
            // cannot be made, best effort goes on without it (the supervisor was told).
            if let Some(net) = &net
                && !net.apply()?
                && let Some(fallback) = fallback.take()
            {
                ruleset = Some(fallback);
            }
            for (resource, value) in limits.iter().flatten() {
                nix::sys::resource::setrlimit(*resource, *value, *value)?;
            }
            // A session of its own: the terminal tether runs in is no longer its controlling
            // terminal (no TIOCSTI into the user's shell, no keystrokes read).
            nix::unistd::setsid()?;
            capabilities.drop_all()?;
            nix::sys::prctl::set_no_new_privs()?;
            if let Some(ruleset) = ruleset.take() {
                ruleset
                    .restrict_self()
                    .map_err(|_| std::io::Error::last_os_error())?;
            }
            for program in seccomp.iter().flatten() {
                seccompiler::apply_filter(program).map_err(|_| std::io::Error::last_os_error())?;
            }
            Ok(())
        };
        (Box::new(hook), cleanup)
    }
}

/// What `policy` comes to on this system, without preparing anything: what `tether test`
/// shows, and what `strict` checks before a server is started.
pub fn assess(policy: &Policy) -> Report {
    report(policy, pids_cgroup_parent().is_some(), true)
}

/// Whether `policy`'s host allow-list can be enforced here (a network namespace for the
/// server): `None` when it has none. Probes once per process (see [`crate::netns::available`]).
pub(crate) fn hosts_enforced(policy: &Policy) -> Option<Result<(), String>> {
    hosts_enforced_if(policy, true)
}

/// [`hosts_enforced`]; without `probe`, namespaces are taken to work unless a strict policy
/// must know (where they do not, the child falls back and says so: [`prepare`]).
fn hosts_enforced_if(policy: &Policy, probe: bool) -> Option<Result<(), String>> {
    let Outgoing::Ports { hosts, .. } = policy.profile.outgoing() else {
        return None;
    };
    if hosts.is_empty() {
        return None;
    }
    if policy.strict && policy.assume_no_netns {
        return Some(Err(
            "network namespaces assumed unavailable (TETHER_SANDBOX_ASSUME_NO_NETNS)".to_owned(),
        ));
    }
    if !probe && !policy.strict {
        return Some(Ok(()));
    }
    Some(crate::netns::available())
}

/// Whether a profile without network (no port, no host, no listening) gets a namespace of its
/// own too (no UDP either): where one can be made. Nothing is missing where it cannot: the
/// profile's TCP rules are Landlock's.
fn isolated(policy: &Policy, probe: bool) -> bool {
    let none = Outgoing::Ports {
        ports: Vec::new(),
        hosts: Vec::new(),
    };
    policy.profile.outgoing() == none
        && policy.profile.allow_bind().is_empty()
        && (!probe || crate::netns::available().is_ok())
}

/// What is enforced; without `probe`, a network namespace is taken to work (see
/// [`hosts_enforced_if`]).
fn report(policy: &Policy, cgroup: bool, probe: bool) -> Report {
    let profile = &policy.profile;
    let mut enforced = Vec::new();
    let mut missing = Vec::new();
    let outgoing = profile.outgoing();
    let hosts = hosts_enforced_if(policy, probe);
    match landlock_abi() {
        None => {
            missing.push("file rules, TCP port rules and scopes (Landlock unavailable)".to_owned())
        }
        Some(abi) => {
            enforced.push(format!("files (Landlock {abi})"));
            if AccessNet::from_all(abi).is_empty() {
                missing.push(format!("TCP port rules (Landlock {abi} has none)"));
            } else {
                let listening = match profile.allow_bind() {
                    [] => "no listening".to_owned(),
                    ports => format!("listening on ports {ports:?} only"),
                };
                enforced.push(match &outgoing {
                    Outgoing::All => format!("any TCP connection, {listening}"),
                    Outgoing::Ports { hosts: allowed, ports } if matches!(hosts, Some(Ok(()))) => {
                        let ports = if ports.is_empty() {
                            "any port".to_owned()
                        } else {
                            format!("ports {ports:?}")
                        };
                        format!(
                            "TCP connections to hosts {allowed:?} on {ports} only (egress proxy, own network namespace), {listening}"
                        )
                    }
                    Outgoing::Ports { ports, .. } if ports.is_empty() && isolated(policy, probe) => {
                        format!("no network (own network namespace: no TCP, no UDP), {listening}")
                    }
                    Outgoing::Ports { ports, .. } if ports.is_empty() => {
                        format!("no TCP connection, {listening}")
                    }
                    Outgoing::Ports { ports, .. } => {
                        format!("TCP connections to ports {ports:?} only, {listening}")
                    }
                });
            }
            if Scope::from_all(abi).is_empty() {
                missing.push(format!(
                    "signal and abstract-socket scoping (Landlock {abi} has none)"
                ));
            } else {
                enforced.push("signals and abstract sockets scoped".to_owned());
            }
        }
    }
    match (&hosts, &outgoing) {
        (Some(Err(why)), Outgoing::Ports { hosts, .. }) => missing.push(format!(
            "the host allow-list {hosts:?} (no network namespace for the server: {why}; the allowed ports reach any host)"
        )),
        // Without Landlock's TCP rules the phrase above is missing: the namespace still holds.
        (Some(Ok(())), Outgoing::Ports { hosts, .. })
            if !enforced.iter().any(|e| e.contains("egress proxy")) =>
        {
            enforced.push(format!(
                "TCP connections to hosts {hosts:?} only (egress proxy, own network namespace)"
            ));
        }
        _ => {}
    }
    match seccomp_arch() {
        Some(_) if profile.unix_sockets() => enforced.push(format!(
            "seccomp ({SECCOMP_DENIED_COUNT} calls denied; {SECCOMP_ARGUMENTS}; Unix sockets allowed by the profile)"
        )),
        Some(_) => enforced.push(format!(
            "seccomp ({SECCOMP_DENIED_COUNT} calls denied; {SECCOMP_ARGUMENTS}, {SECCOMP_UNIX})"
        )),
        None => missing.push(format!(
            "the seccomp filter (none for {})",
            std::env::consts::ARCH
        )),
    }
    let memory = profile.memory_mb();
    if memory > 0 {
        enforced.push(format!("memory {memory} MiB"));
    }
    let cpu = profile.cpu_seconds();
    if cpu > 0 {
        enforced.push(format!("CPU {cpu} s"));
    }
    let processes = profile.processes();
    if processes > 0 {
        if cgroup {
            enforced.push(format!("{processes} processes (pids cgroup)"));
        } else if nix::unistd::geteuid().is_root() {
            missing.push(format!(
                "the limit of {processes} processes (no writable pids cgroup, and RLIMIT_NPROC does not bind root)"
            ));
        } else {
            enforced.push(format!(
                "{processes} processes of this user (RLIMIT_NPROC: no writable pids cgroup)"
            ));
        }
    }
    Report {
        label: policy.label.clone(),
        enforced,
        missing,
    }
}

/// Prepares `policy` for `target`: opens every path, builds the Landlock ruleset, compiles the
/// seccomp filter, makes the pids cgroup. A strict policy fails if anything is missing.
pub fn prepare(policy: &Policy, target: &Target<'_>) -> Result<Prepared, SandboxError> {
    let profile = &policy.profile;
    let processes = profile.processes();
    let cgroup = if processes > 0 {
        pids_cgroup(processes)
    } else {
        None
    };
    // No probe here (a fork and a namespace made and dropped, 1–8 ms): the child tries, and
    // falls back where it cannot (see below). A strict policy probes: it must refuse up front.
    let report = report(policy, cgroup.is_some(), false);
    let (cgroup_dir, cgroup_procs) = cgroup.unzip();
    if policy.strict && !report.missing.is_empty() {
        if let Some(dir) = cgroup_dir {
            let _ = std::fs::remove_dir(dir);
        }
        return Err(SandboxError::NotEnforced {
            label: policy.label.clone(),
            missing: report.missing,
        });
    }
    // Best effort: where the namespace cannot be made, the child says so to the supervisor and
    // applies the fallback ruleset (the profile's ports, as without host rules); strict fails.
    let (net, egress) = match (hosts_enforced_if(policy, false), profile.outgoing()) {
        (Some(Ok(())), Outgoing::Ports { hosts, ports }) => {
            let (child, parent) = crate::netns::pair(!policy.strict).map_err(setup)?;
            let egress = Egress {
                net: parent,
                rules: HostRules::new(&hosts, &ports),
                label: policy.label.clone(),
            };
            (Some(child), Some(egress))
        }
        _ if isolated(policy, false) => (Some(crate::netns::isolated()), None),
        _ => (None, None),
    };
    let (ruleset, fallback) = match landlock_abi() {
        Some(abi) => {
            let paths = landlock_paths(abi, profile, target);
            let ruleset = landlock_ruleset(abi, policy, &paths, egress.is_some())?;
            let fallback = match &net {
                Some(net) if net.falls_back() && egress.is_some() => {
                    Some(landlock_ruleset(abi, policy, &paths, false)?)
                }
                _ => None,
            };
            (Some(ruleset), fallback)
        }
        None => (None, None),
    };
    let seccomp = seccomp_arch()
        .map(|arch| seccomp_programs(arch, profile.unix_sockets()))
        .transpose()?;
    let memory = profile.memory_mb();
    let cpu = profile.cpu_seconds();
    let limits = [
        Some((Resource::RLIMIT_CORE, 0)),
        (memory > 0).then(|| (Resource::RLIMIT_DATA, memory.saturating_mul(1024 * 1024))),
        (cpu > 0).then_some((Resource::RLIMIT_CPU, cpu)),
        (processes > 0 && cgroup_procs.is_none()).then_some((Resource::RLIMIT_NPROC, processes)),
    ];
    Ok(Prepared {
        ruleset,
        fallback,
        seccomp,
        limits,
        capabilities: Capabilities::of_this_process(),
        cgroup_procs,
        net,
        egress,
        cleanup: Cleanup {
            cgroup_dir,
            procs: None,
            adopting: None,
        },
        strict: policy.strict,
        report,
    })
}

fn setup(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Setup(e.to_string())
}

/// The paths granted, opened (`O_PATH`), with the access each gets on `abi`.
fn landlock_paths(
    abi: ABI,
    profile: &crate::Profile,
    target: &Target<'_>,
) -> Vec<(PathFd, landlock::BitFlags<AccessFs>)> {
    granted_paths(profile, target)
        .into_iter()
        .filter_map(|(path, write)| {
            let fd = PathFd::new(&path).ok()?;
            let mut access = if write {
                AccessFs::from_all(abi)
            } else {
                AccessFs::from_read(abi)
            };
            if !path.is_dir() {
                access &= AccessFs::from_file(abi);
            }
            Some((fd, access))
        })
        .collect()
}

/// The Landlock ruleset for `policy` on `abi` with `paths` (see [`landlock_paths`]); behind the
/// proxy, the proxy's port is the only TCP port allowed.
fn landlock_ruleset(
    abi: ABI,
    policy: &Policy,
    paths: &[(PathFd, landlock::BitFlags<AccessFs>)],
    behind_proxy: bool,
) -> Result<RulesetCreated, SandboxError> {
    let profile = &policy.profile;
    let outgoing = profile.outgoing();
    let net = AccessNet::from_all(abi) & (AccessNet::BindTcp | AccessNet::ConnectTcp);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(setup)?;
    if !net.is_empty() {
        let handled = if outgoing == Outgoing::All {
            net & AccessNet::BindTcp
        } else {
            net
        };
        ruleset = ruleset.handle_access(handled).map_err(setup)?;
    }
    let scopes = Scope::from_all(abi);
    if !scopes.is_empty() {
        ruleset = ruleset.scope(scopes).map_err(setup)?;
    }
    let mut created = ruleset.create().map_err(setup)?;
    for (fd, access) in paths {
        created = created
            .add_rule(PathBeneath::new(fd, *access))
            .map_err(setup)?;
    }
    if !net.is_empty() {
        if let Outgoing::Ports { ports, .. } = &outgoing {
            // Behind the proxy the server reaches the proxy's port only (in its namespace
            // nothing else listens); the proxy checks the profile's ports.
            let ports = if behind_proxy {
                &vec![PROXY_PORT]
            } else {
                ports
            };
            for port in ports {
                created = created
                    .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                    .map_err(setup)?;
            }
        }
        for port in profile.allow_bind() {
            created = created
                .add_rule(NetPort::new(*port, AccessNet::BindTcp))
                .map_err(setup)?;
        }
    }
    Ok(created)
}

/// Every path granted, with whether it is writable: the system, the devices, the server's
/// command and packages, its private home, the profile's own lines.
fn granted_paths(profile: &crate::Profile, target: &Target<'_>) -> Vec<(PathBuf, bool)> {
    // A BTreeMap: a path named twice gets write if either says so.
    let mut granted: BTreeMap<PathBuf, bool> = BTreeMap::new();
    let mut grant = |path: PathBuf, write: bool| {
        let entry = granted.entry(path).or_insert(write);
        *entry |= write;
    };
    for dir in SYSTEM_DIRS.iter().chain(SYSTEM_EXTRA.iter()) {
        grant(PathBuf::from(dir), false);
    }
    for device in DEVICES {
        grant(PathBuf::from(device), true);
    }
    for entry in std::fs::read_dir("/etc").into_iter().flatten().flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if ETC_DENIED.contains(&name.as_ref()) {
            continue;
        }
        if !ETC_DESCENDED.contains(&name.as_ref()) {
            grant(entry.path(), false);
            continue;
        }
        for inner in std::fs::read_dir(entry.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if !etc_private(&name, &inner.file_name().to_string_lossy()) {
                grant(inner.path(), false);
            }
        }
    }
    let never_whole = |dir: &Path| {
        dir == Path::new("/")
            || dir == Path::new("/tmp")
            || dir == Path::new("/home")
            || dir == Path::new("/root")
            || target.user_home.is_some_and(|home| home == dir)
    };
    let found = found_program(target.program, target.path, target.cwd);
    let program = found.as_ref().and_then(|found| found.canonicalize().ok());
    // The program as found (a venv's `bin/python`, a version manager's shim) and the file it
    // leads to (the interpreter itself): each with its package, its installation's prefix,
    // and a shim's version manager.
    for file in found.iter().chain(program.iter()) {
        grant(package_root(file, &never_whole, true), false);
        if let Some(prefix) = interpreter_prefix(file, &never_whole) {
            grant(prefix, false);
        }
        if let Some(manager) = version_manager(file, &never_whole) {
            grant(manager, false);
        }
    }
    // What the program is, never what an argument says: an interpreter's script is the
    // program; any other file an argument names (a registry's or a bundle's included) needs a
    // profile line.
    if let Some(script) = interpreter_script(target, program.as_deref()) {
        grant(package_root(&script, &never_whole, true), false);
    }
    grant(target.home.to_owned(), true);
    if let Some(cache) = target.cache {
        grant(cache.to_owned(), true);
    }
    let (read, write) = profile.paths(target.user_home);
    for path in read {
        grant(path, false);
    }
    for path in write {
        grant(path, true);
    }
    granted.into_iter().collect()
}

/// The program's file as found, absolute but not resolved (a venv's `bin/python` stays one):
/// as named if it has a slash (relative to `cwd`), else the first match on `path`.
fn found_program(program: &OsStr, path: Option<&OsStr>, cwd: Option<&Path>) -> Option<PathBuf> {
    let named = Path::new(program);
    if named.components().count() > 1 {
        let named = match cwd {
            Some(cwd) if named.is_relative() => cwd.join(named),
            _ => std::path::absolute(named).ok()?,
        };
        return named.is_file().then_some(named);
    }
    std::env::split_paths(path?)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// The installation an interpreter runs from, when `file` is an interpreter in a `bin`
/// directory whose parent holds its library (`lib/pythonX.Y`, `lib/node_modules`): a pyenv,
/// asdf or mise Python (whose standard library is under its own prefix), a Node under `~/.nvm`.
fn interpreter_prefix(file: &Path, never_whole: &dyn Fn(&Path) -> bool) -> Option<PathBuf> {
    let name = file.file_name()?.to_str()?;
    let interpreter = crate::script::is_interpreter(name)
        || name
            .strip_prefix("python")
            .is_some_and(|v| v.bytes().all(|b| b.is_ascii_digit() || b == b'.'));
    let bin = file.parent()?;
    let prefix = bin.parent()?;
    if !interpreter || bin.file_name() != Some(OsStr::new("bin")) || never_whole(prefix) {
        return None;
    }
    let library = std::fs::read_dir(prefix.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| {
            let entry = entry.file_name();
            let entry = entry.to_string_lossy();
            entry.starts_with("python") || entry == "node_modules"
        });
    library.then(|| prefix.to_owned())
}

/// A version manager's root, when `file` is one of its shims: a file in `ROOT/shims` (pyenv,
/// rbenv, nodenv, asdf, mise) or `ROOT/bin` of volta, whose root holds the manager itself
/// (`libexec`, `bin`, `lib`, `installs`, `tools`). The shim runs the manager, which reads its
/// version files and runs an interpreter under the root: all of it read-only.
fn version_manager(file: &Path, never_whole: &dyn Fn(&Path) -> bool) -> Option<PathBuf> {
    let dir = file.parent()?;
    let root = dir.parent()?;
    let shims = dir.file_name() == Some(OsStr::new("shims"))
        || (dir.file_name() == Some(OsStr::new("bin"))
            && root.file_name() == Some(OsStr::new(".volta")));
    let manager = ["libexec", "bin", "lib", "installs", "tools"]
        .iter()
        .any(|sub| root.join(sub).is_dir());
    (shims && manager && !never_whole(root)).then(|| root.to_owned())
}

/// `arg` as an existing regular file (relative to `cwd`), canonical; directories are not
/// granted this way (a profile line grants them).
fn existing_file(arg: &OsStr, cwd: Option<&Path>) -> Option<PathBuf> {
    let path = Path::new(arg);
    if arg.is_empty() || arg.as_encoded_bytes().starts_with(b"-") {
        return None;
    }
    let path = match cwd {
        Some(cwd) if path.is_relative() => cwd.join(path),
        _ => path.to_owned(),
    };
    let path = path.canonicalize().ok()?;
    path.is_file().then_some(path)
}

/// Scripts an interpreter runs, granted with their package (they import their siblings).
const SCRIPTS: [&str; 8] = ["js", "mjs", "cjs", "ts", "py", "rb", "pl", "sh"];

/// The script `target`'s program runs, when the program is an interpreter (by the name its
/// config gives, or its resolved file's: `python3.12`): its first argument that is not a flag,
/// if that names an existing file with a script's extension by a path without `..`. Nothing
/// for any other program: a runner's (`npx`, `uvx`) arguments are package names.
fn interpreter_script(target: &Target<'_>, program: Option<&Path>) -> Option<PathBuf> {
    let is_interpreter = |name: Option<&OsStr>| {
        name.and_then(OsStr::to_str)
            .is_some_and(crate::script::is_interpreter)
    };
    if !is_interpreter(Path::new(target.program).file_name())
        && !is_interpreter(program.and_then(Path::file_name))
    {
        return None;
    }
    let arg = &target.args[crate::script::script_index(target.args)?];
    let written = Path::new(arg);
    if written
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return None;
    }
    let script = existing_file(arg, target.cwd)?;
    script
        .extension()
        .and_then(OsStr::to_str)
        .is_some_and(|ext| SCRIPTS.contains(&ext))
        .then_some(script)
}

/// Where a file's package starts: its outermost `node_modules`, else the nearest directory
/// holding a package manifest (`package.json`, `manifest.json` of an mcpb bundle,
/// `pyproject.toml`, a venv's `pyvenv.cfg`), else, with `with_dir` (a program, a script), its
/// directory, else the file alone. Never a directory whose whole grant would expose the
/// user's files (the home, `/tmp`, `/`): then the file alone.
fn package_root(file: &Path, never_whole: &dyn Fn(&Path) -> bool, with_dir: bool) -> PathBuf {
    let ancestors = || file.ancestors().skip(1).take_while(|dir| !never_whole(dir));
    if let Some(outermost) = ancestors()
        .filter(|dir| dir.file_name() == Some(OsStr::new("node_modules")))
        .last()
    {
        return outermost.to_owned();
    }
    const MANIFESTS: [&str; 4] = [
        "package.json",
        "manifest.json",
        "pyproject.toml",
        "pyvenv.cfg",
    ];
    if let Some(dir) = ancestors().find(|dir| MANIFESTS.iter().any(|m| dir.join(m).is_file())) {
        return dir.to_owned();
    }
    match file.parent() {
        Some(dir) if with_dir && !never_whole(dir) => dir.to_owned(),
        _ => file.to_owned(),
    }
}

/// The seccomp filters: each of [`SECCOMP_DENIED`] known on `arch` answers `EPERM`, and so do
/// `clone` with a namespace flag, `ioctl` `TIOCSTI`/`TIOCLINUX` and `socket` of `AF_PACKET`
/// or `SOCK_RAW`; the second filter makes `clone3` (whose flags are in memory, out of a
/// filter's reach) answer `ENOSYS`, so that C libraries fall back to `clone`; unless
/// `unix_sockets`, a third makes `socket(AF_UNIX, …)` answer `EACCES` — Landlock (up to ABI 7)
/// does not restrict `connect` to a named Unix socket, and without a socket there is nothing
/// to connect. `socketpair` (runtimes' pipes) stays allowed: its sockets have no name.
fn seccomp_programs(arch: TargetArch, unix_sockets: bool) -> Result<Vec<BpfProgram>, SandboxError> {
    use nix::libc;
    use seccompiler::{SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition, SeccompRule};
    let rule = |conditions: Vec<(u8, Len, Op, u64)>| -> Result<SeccompRule, SandboxError> {
        let conditions = conditions
            .into_iter()
            .map(|(arg, len, op, value)| SeccompCondition::new(arg, len, op, value).map_err(setup))
            .collect::<Result<Vec<_>, _>>()?;
        SeccompRule::new(conditions).map_err(setup)
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = SECCOMP_DENIED
        .iter()
        .filter_map(|name| syscall_number(name))
        .map(|number| (number, Vec::new()))
        .collect();
    let clone = CLONE_NAMESPACES
        .iter()
        .map(|flag| rule(vec![(0, Len::Qword, Op::MaskedEq(*flag), *flag)]))
        .collect::<Result<_, _>>()?;
    rules.insert(libc::SYS_clone, clone);
    let ioctl = [libc::TIOCSTI, libc::TIOCLINUX]
        .iter()
        .map(|request| rule(vec![(1, Len::Dword, Op::Eq, u64::from(*request as u32))]))
        .collect::<Result<_, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctl);
    let packet = u64::try_from(libc::AF_PACKET).unwrap_or(17);
    let raw = u64::try_from(libc::SOCK_RAW).unwrap_or(3);
    rules.insert(
        libc::SYS_socket,
        vec![
            rule(vec![(0, Len::Dword, Op::Eq, packet)])?,
            // The type's low bits; SOCK_CLOEXEC and SOCK_NONBLOCK are flags above them.
            rule(vec![(1, Len::Dword, Op::MaskedEq(0xf), raw)])?,
        ],
    );
    let errno = |code: i32| SeccompAction::Errno(u32::try_from(code).unwrap_or(1));
    let program =
        |rules: BTreeMap<i64, Vec<SeccompRule>>, code: i32| -> Result<BpfProgram, SandboxError> {
            SeccompFilter::new(rules, SeccompAction::Allow, errno(code), arch)
                .map_err(setup)?
                .try_into()
                .map_err(setup)
        };
    let mut programs = vec![
        program(rules, libc::EPERM)?,
        program(
            [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
            libc::ENOSYS,
        )?,
    ];
    if !unix_sockets {
        let unix = u64::try_from(libc::AF_UNIX).unwrap_or(1);
        let socket = vec![rule(vec![(0, Len::Dword, Op::Eq, unix)])?];
        programs.push(program(
            [(libc::SYS_socket, socket)].into_iter().collect(),
            libc::EACCES,
        )?);
    }
    Ok(programs)
}

/// What the child gives up of its capabilities (`capabilities(7)`): every set, the ambient
/// one included; as root also the bounding set (`PR_CAPBSET_DROP`, up to the kernel's last
/// capability) and root's special treatment (`SECBIT_NOROOT`, `SECBIT_NO_SETUID_FIXUP`,
/// locked). Without it, root's server would keep `CAP_SYS_PTRACE` (other processes'
/// `environ`), `CAP_NET_RAW` (sniffing loopback), `CAP_DAC_OVERRIDE`…
#[derive(Debug, Clone, Copy)]
struct Capabilities {
    root: bool,
    last: u32,
}

impl Capabilities {
    fn of_this_process() -> Self {
        let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(63);
        Self {
            root: nix::unistd::geteuid().is_root(),
            last,
        }
    }

    /// In the child: system calls only.
    fn drop_all(self) -> std::io::Result<()> {
        use nix::libc;
        // SECBIT_NOROOT | _LOCKED, SECBIT_NO_SETUID_FIXUP | _LOCKED, SECBIT_KEEP_CAPS_LOCKED.
        const SECURE_BITS: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20;
        const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let check = |result: libc::c_long| {
            if result < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        #[expect(
            unsafe_code,
            reason = "nix has no binding for the capability sets, the bounding set or securebits"
        )]
        // SAFETY: prctl(2) with integer arguments reads no memory of ours; capset(2) reads the
        // header and two data records, which live on this stack frame for the whole call.
        unsafe {
            if self.root {
                for capability in 0..=self.last {
                    check(
                        libc::prctl(
                            libc::PR_CAPBSET_DROP,
                            libc::c_ulong::from(capability),
                            0,
                            0,
                            0,
                        )
                        .into(),
                    )?;
                }
                check(libc::prctl(libc::PR_SET_SECUREBITS, SECURE_BITS, 0, 0, 0).into())?;
            }
            // EINVAL before Linux 4.3 (no ambient set): nothing to clear there.
            let _ = libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            );
            let header = Header {
                version: CAPABILITY_VERSION_3,
                pid: 0,
            };
            let none = [Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            }; 2];
            check(libc::syscall(
                libc::SYS_capset,
                std::ptr::from_ref(&header),
                none.as_ptr(),
            ))
        }
    }
}

/// A system call's number on this architecture, by name.
fn syscall_number(name: &str) -> Option<i64> {
    use nix::libc;
    let number = match name {
        "ptrace" => libc::SYS_ptrace,
        "process_vm_readv" => libc::SYS_process_vm_readv,
        "process_vm_writev" => libc::SYS_process_vm_writev,
        "mount" => libc::SYS_mount,
        "umount2" => libc::SYS_umount2,
        "pivot_root" => libc::SYS_pivot_root,
        "chroot" => libc::SYS_chroot,
        "unshare" => libc::SYS_unshare,
        "setns" => libc::SYS_setns,
        "kexec_load" => libc::SYS_kexec_load,
        "kexec_file_load" => libc::SYS_kexec_file_load,
        "init_module" => libc::SYS_init_module,
        "finit_module" => libc::SYS_finit_module,
        "delete_module" => libc::SYS_delete_module,
        "bpf" => libc::SYS_bpf,
        "keyctl" => libc::SYS_keyctl,
        "add_key" => libc::SYS_add_key,
        "request_key" => libc::SYS_request_key,
        "perf_event_open" => libc::SYS_perf_event_open,
        "userfaultfd" => libc::SYS_userfaultfd,
        "open_by_handle_at" => libc::SYS_open_by_handle_at,
        "name_to_handle_at" => libc::SYS_name_to_handle_at,
        "io_uring_setup" => libc::SYS_io_uring_setup,
        "io_uring_enter" => libc::SYS_io_uring_enter,
        "io_uring_register" => libc::SYS_io_uring_register,
        "settimeofday" => libc::SYS_settimeofday,
        "clock_settime" => libc::SYS_clock_settime,
        "clock_adjtime" => libc::SYS_clock_adjtime,
        "adjtimex" => libc::SYS_adjtimex,
        "swapon" => libc::SYS_swapon,
        "swapoff" => libc::SYS_swapoff,
        "reboot" => libc::SYS_reboot,
        "acct" => libc::SYS_acct,
        "syslog" => libc::SYS_syslog,
        _ => return None,
    };
    Some(number)
}

/// Where this process may make a pids cgroup: its own cgroup in the v1 `pids` hierarchy, or
/// in the unified one when `pids` is delegated there; `None` when neither is writable.
fn pids_cgroup_parent() -> Option<PathBuf> {
    static PARENT: OnceLock<Option<PathBuf>> = OnceLock::new();
    PARENT
        .get_or_init(|| {
            let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
            let own = |controller: &str| {
                cgroups.lines().find_map(|line| {
                    let mut fields = line.splitn(3, ':');
                    let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
                    controllers
                        .split(',')
                        .any(|c| c == controller)
                        .then(|| path.trim_start_matches('/').to_owned())
                })
            };
            let candidates = [
                own("pids").map(|p| Path::new("/sys/fs/cgroup/pids").join(p)),
                own("").map(|p| Path::new("/sys/fs/cgroup").join(p)),
                own("").map(|p| Path::new("/sys/fs/cgroup/unified").join(p)),
            ];
            candidates.into_iter().flatten().find(|dir| {
                let v1 = dir.starts_with("/sys/fs/cgroup/pids");
                let delegated = std::fs::read_to_string(dir.join("cgroup.subtree_control"))
                    .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"));
                (v1 || delegated)
                    && nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
            })
        })
        .clone()
}

/// Makes a cgroup allowing `max` processes; its directory and its `cgroup.procs`, open.
fn pids_cgroup(max: u64) -> Option<(PathBuf, File)> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let parent = pids_cgroup_parent()?;
    let dir = parent.join(format!(
        "tether-sandbox-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir(&dir).ok()?;
    let made = (|| {
        std::fs::write(dir.join("pids.max"), max.to_string()).ok()?;
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .ok()
    })();
    match made {
        Some(procs) => Some((dir, procs)),
        None => {
            let _ = std::fs::remove_dir(&dir);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_denied_call_has_a_number_here() {
        for name in SECCOMP_DENIED {
            assert!(syscall_number(name).is_some(), "{name}");
        }
        let arch = seccomp_arch().expect("a known architecture");
        for unix_sockets in [false, true] {
            let programs = seccomp_programs(arch, unix_sockets).expect("compiled");
            assert_eq!(programs.len(), if unix_sockets { 2 } else { 3 });
            assert!(programs.iter().all(|p| !p.is_empty()));
        }
    }

    #[test]
    fn a_package_root_is_its_node_modules_or_manifest_and_never_the_home() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let pkg = home.join("app/node_modules/@scope/pkg/dist");
        std::fs::create_dir_all(&pkg).expect("mkdir");
        let never = |d: &Path| d == home;
        assert_eq!(
            package_root(&pkg.join("index.js"), &never, true),
            home.join("app/node_modules")
        );
        let bundle = home.join("bundles/abc/server");
        std::fs::create_dir_all(&bundle).expect("mkdir");
        std::fs::write(home.join("bundles/abc/manifest.json"), "{}").expect("write");
        assert_eq!(
            package_root(&bundle.join("index.js"), &never, true),
            home.join("bundles/abc")
        );
        assert_eq!(
            package_root(&home.join("server.py"), &never, true),
            home.join("server.py")
        );
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).expect("mkdir");
        assert_eq!(
            package_root(&data.join("notes.txt"), &never, false),
            data.join("notes.txt")
        );
        assert_eq!(package_root(&data.join("tool"), &never, true), data);
    }
}
