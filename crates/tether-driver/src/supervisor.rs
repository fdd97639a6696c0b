//! The supervisor: a small process between tether and each process tether starts (a stdio
//! server, a harness), so that no descendant of it outlives tether — not a grandchild, not one
//! that called `setsid`, not even when tether is SIGKILLed.
//!
//! It is tether itself, re-executed as the hidden internal subcommand [`SUBCOMMAND`]:
//!
//! ```text
//! tether __supervise --parent PID [--forward-signals] [--remove-on-orphan DIR] -- PROGRAM ARGS…
//! ```
//!
//! It marks itself a child subreaper (`PR_SET_CHILD_SUBREAPER`), so every descendant whose
//! parent dies is re-parented to it rather than to init, starts `PROGRAM` with its own stdio,
//! environment, directory and process group, and then:
//!
//! - when `PROGRAM` exits: terminates every descendant left (SIGTERM, SIGKILL after
//!   [`LEFTOVER_GRACE`]) and exits with `PROGRAM`'s code (128 + N for a signal N);
//! - when its parent is gone (`getppid()` is no longer `PID`, checked every [`POLL`]): kills
//!   every descendant with SIGKILL, removes `DIR`, exits;
//! - on SIGTERM: with `--forward-signals`, passes it (and SIGHUP) to `PROGRAM` and waits;
//!   without it (a stdio server, whose group got the same signal), kills every descendant after
//!   [`TERM_GRACE`] if they are still there — before tether's own SIGKILL of the group, which
//!   would kill the supervisor too and let the rest escape;
//! - on SIGUSR1 (tether dropped the child without a shutdown): kills every descendant now;
//! - SIGINT is ignored: a terminal's Ctrl-C reaches the program itself.
//!
//! `PROGRAM` is tied to the supervisor with `PR_SET_PDEATHSIG` (the supervisor runs one
//! thread, so the signal follows the supervisor): should the supervisor itself be SIGKILLed,
//! `PROGRAM` gets SIGKILL too. What `PROGRAM` had started itself is then nobody's to end (the
//! supervisor was its reaper); only a cgroup would close that gap.
//!
//! Descendants are found by walking `/proc/*/stat` parent links from the supervisor's pid.
//! Polling `getppid()` rather than `PR_SET_PDEATHSIG` keeps it independent of which of tether's
//! threads spawned it (the death signal follows the thread, not the process).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// The hidden subcommand of `tether` that runs [`main`].
pub const SUBCOMMAND: &str = "__supervise";

/// How often the supervisor checks its parent and reaps its children.
pub const POLL: Duration = Duration::from_millis(50);

/// How long descendants left after the program exited get between SIGTERM and SIGKILL.
pub const LEFTOVER_GRACE: Duration = Duration::from_millis(500);

/// After a SIGTERM (without `--forward-signals`), how long until every descendant is killed.
/// Shorter than [`crate::TERMINATE_GRACE`], after which tether kills the whole group.
pub const TERM_GRACE: Duration = Duration::from_millis(1500);

/// The exit code when the supervisor could not start the program (as a shell's).
pub const CANNOT_START: u8 = 127;

static PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// Makes every process tether starts from now on go through the supervisor, `program` being
/// tether's own executable. Without it (library users, the driver's tests) children are
/// spawned directly, tied to tether by `PR_SET_PDEATHSIG` alone.
pub fn install(program: PathBuf) {
    let _ = PROGRAM.set(program);
}

/// What the supervisor does besides supervising.
#[derive(Debug, Clone, Default)]
pub struct SuperviseOptions {
    /// Pass SIGTERM and SIGHUP on to the program (a harness in tether's own process group).
    pub forward_signals: bool,
    /// A directory to remove when tether died (the run directory of a hand-off).
    pub remove_on_orphan: Option<PathBuf>,
    /// The sandbox the program starts in, as [`tether_sandbox::Policy`] JSON (paths and
    /// limits, no secret): the supervisor prepares it, applies it in the program's child only,
    /// and removes the program's private home when it ends.
    pub sandbox: Option<String>,
}

/// `program args` as a command line through the supervisor, if one is installed: the program
/// to execute and its arguments. `None` when no supervisor is installed.
pub(crate) fn wrap(
    program: &OsStr,
    args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    options: &SuperviseOptions,
) -> Option<(PathBuf, Vec<OsString>)> {
    PROGRAM
        .get()
        .map(|supervisor| (supervisor.clone(), supervisor_argv(program, args, options)))
}

/// The supervisor's arguments for `program args`, [`SUBCOMMAND`] first.
fn supervisor_argv(
    program: &OsStr,
    args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    options: &SuperviseOptions,
) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![
        SUBCOMMAND.into(),
        "--parent".into(),
        std::process::id().to_string().into(),
    ];
    if options.forward_signals {
        argv.push("--forward-signals".into());
    }
    if let Some(dir) = &options.remove_on_orphan {
        argv.push("--remove-on-orphan".into());
        argv.push(dir.clone().into_os_string());
    }
    if let Some(policy) = &options.sandbox {
        argv.push("--sandbox".into());
        argv.push(policy.into());
    }
    argv.push("--".into());
    argv.push(program.to_owned());
    argv.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
    argv
}

/// A [`tokio::process::Command`] for `program args` that goes through the supervisor when one
/// is installed (see [`install`]), and runs `program` directly otherwise.
pub fn supervised_command(
    program: &OsStr,
    args: &[impl AsRef<OsStr>],
    options: &SuperviseOptions,
) -> tokio::process::Command {
    match wrap(program, args, options) {
        Some((supervisor, argv)) => {
            let mut command = tokio::process::Command::new(supervisor);
            command.args(argv);
            command
        }
        None => {
            let mut command = tokio::process::Command::new(program);
            command.args(args);
            command
        }
    }
}

/// Whether processes are started through the supervisor.
pub(crate) fn installed() -> bool {
    PROGRAM.get().is_some()
}

struct Parsed {
    parent: Pid,
    options: SuperviseOptions,
    program: OsString,
    args: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Option<Parsed> {
    let mut parent = None;
    let mut options = SuperviseOptions::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.to_str() {
            Some("--parent") => {
                parent = rest
                    .next()?
                    .to_str()?
                    .parse::<i32>()
                    .ok()
                    .map(Pid::from_raw);
            }
            Some("--forward-signals") => options.forward_signals = true,
            Some("--remove-on-orphan") => {
                options.remove_on_orphan = Some(PathBuf::from(rest.next()?));
            }
            Some("--sandbox") => options.sandbox = Some(rest.next()?.to_str()?.to_owned()),
            Some("--") => break,
            _ => return None,
        }
    }
    let program = rest.next()?.clone();
    Some(Parsed {
        parent: parent?,
        options,
        program,
        args: rest.cloned().collect(),
    })
}

/// The supervisor's `main`: `args` are those after [`SUBCOMMAND`]. Returns the exit code.
pub fn main(args: &[OsString]) -> u8 {
    let Some(parsed) = parse(args) else {
        eprintln!(
            "tether {SUBCOMMAND}: internal use only: --parent PID [--forward-signals] [--remove-on-orphan DIR] [--sandbox POLICY] -- PROGRAM ARGS…"
        );
        return 2;
    };
    if nix::unistd::getppid() != parsed.parent {
        // tether died before this process got going.
        remove_dir(parsed.options.remove_on_orphan.as_deref());
        return 1;
    }
    let mut command = std::process::Command::new(&parsed.program);
    command.args(&parsed.args);
    run(command, parsed.parent, &parsed.options)
}

/// Supervises `command` in this process, as [`main`] does for a command line: for a caller
/// that must not put the command on a command line (the hand-off's exec shim: a server's
/// arguments may hold secrets). `command` carries the program's environment and directory;
/// the supervised parent is this process's parent now (the harness that started it). Call it
/// outside any async runtime; returns the exit code.
pub fn supervise_in_place(command: std::process::Command, options: &SuperviseOptions) -> u8 {
    run(command, nix::unistd::getppid(), options)
}

fn run(command: std::process::Command, parent: Pid, options: &SuperviseOptions) -> u8 {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("tether {SUBCOMMAND}: cannot become a child subreaper: {e}");
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tether {SUBCOMMAND}: {e}");
            return 1;
        }
    };
    runtime.block_on(supervise(command, parent, options))
}

async fn supervise(
    mut command: std::process::Command,
    parent: Pid,
    options: &SuperviseOptions,
) -> u8 {
    use tokio::signal::unix::{SignalKind, signal};
    // Handlers first: a signal that arrives while the program starts is not lost.
    let (Ok(mut term), Ok(mut hangup), Ok(mut interrupt), Ok(mut usr1)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::user_defined1()),
    ) else {
        eprintln!("tether {SUBCOMMAND}: cannot handle signals");
        return 1;
    };
    let program = command.get_program().to_owned();
    let args: Vec<OsString> = command.get_args().map(OsStr::to_owned).collect();
    // Kept until the supervisor returns, after every descendant ended: the private home and
    // the cgroup are removed then.
    let (hook, mut sandbox, egress) = match options.sandbox.as_deref() {
        Some(json) => match sandbox_for(json, &mut command, &program, &args, true) {
            Ok((hook, kept, egress)) => (Some(hook), Some(kept), egress),
            Err(e) => {
                eprintln!(
                    "tether: cannot start '{}': {e}",
                    Path::new(&program).display()
                );
                return CANNOT_START;
            }
        },
        None => (None, None, None),
    };
    // Should the supervisor itself be SIGKILLed, the program goes with it (this runtime has
    // one thread, so the death signal is tied to the supervisor, not to a worker thread).
    tie_to_parent(&mut command, hook);
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!(
                "tether: cannot start '{}': {e}",
                Path::new(&program).display()
            );
            return CANNOT_START;
        }
    };
    let child = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    if let Some((_, cleanup)) = sandbox.as_mut() {
        // Into its pids cgroup off the start-up path, with what it started meanwhile.
        cleanup.adopt(child.as_raw(), descendants);
    }
    // Ends with this function, after every descendant ended (the runtime goes then too).
    let _proxy = start_egress(egress);
    release_stdio();
    let mut tick = tokio::time::interval(POLL);
    let mut kill_at: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = term.recv() => {
                // A sandboxed program leads a session of its own: the group's SIGTERM missed it.
                if options.forward_signals || options.sandbox.is_some() {
                    let _ = kill(child, Signal::SIGTERM);
                }
                if !options.forward_signals && kill_at.is_none() {
                    kill_at = Some(Instant::now() + TERM_GRACE);
                }
            }
            _ = hangup.recv() => {
                if options.forward_signals {
                    let _ = kill(child, Signal::SIGHUP);
                }
            }
            _ = interrupt.recv() => {}
            _ = usr1.recv() => {
                kill_descendants(Signal::SIGKILL, Duration::ZERO).await;
                return 128 + 9;
            }
            _ = tick.tick() => {}
        }
        if let Some(code) = reap(child) {
            kill_descendants(Signal::SIGTERM, LEFTOVER_GRACE).await;
            return code;
        }
        if nix::unistd::getppid() != parent {
            kill_descendants(Signal::SIGKILL, Duration::ZERO).await;
            remove_dir(options.remove_on_orphan.as_deref());
            return 1;
        }
        if kill_at.is_some_and(|at| Instant::now() >= at) {
            kill_descendants(Signal::SIGKILL, Duration::ZERO).await;
            return 128 + 15;
        }
    }
}

/// What a sandboxed program leaves to remove once it and its descendants are gone.
pub(crate) type SandboxKept = (tether_sandbox::PrivateHome, tether_sandbox::Cleanup);

/// The egress proxy's part of a prepared sandbox (none off Linux).
#[cfg(target_os = "linux")]
pub(crate) type EgressPart = tether_sandbox::Egress;
#[cfg(not(target_os = "linux"))]
pub(crate) type EgressPart = std::convert::Infallible;

/// A running egress proxy: aborted when dropped, with every connection it spliced.
#[derive(Debug)]
pub(crate) struct ProxyTask(tokio::task::JoinHandle<()>);

impl Drop for ProxyTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the egress proxy of a spawned sandboxed child (on the current runtime): its
/// listening socket arrived before the spawn returned. `None` without one. A child that could
/// not make its network namespace (best effort) said why instead, which is said on stderr:
/// it runs with the profile's ports, its hosts not enforced.
#[cfg(target_os = "linux")]
pub(crate) fn start_egress(egress: Option<EgressPart>) -> Option<ProxyTask> {
    let egress = egress?;
    match egress.net.receive() {
        Ok(listener) => Some(ProxyTask(tokio::spawn(crate::egress::serve(
            listener,
            egress.rules,
            egress.label,
        )))),
        Err(e) => {
            eprintln!(
                "tether: the sandbox (--sandbox {}) could not give the server a network namespace ({e}): its host allow-list {:?} is NOT enforced (the allowed ports reach any host)",
                egress.label, egress.rules.hosts
            );
            None
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn start_egress(egress: Option<EgressPart>) -> Option<ProxyTask> {
    egress.map(|never| match never {})
}

/// Prepares the sandbox `json` (a [`tether_sandbox::Policy`]) for `program args` in
/// `command`: its private home as `HOME` and `TMPDIR`, and the hook its child runs. With
/// `adopt_later` the child does not join its pids cgroup itself: the caller calls
/// [`tether_sandbox::Cleanup::adopt`] after the spawn (see
/// [`tether_sandbox::Prepared::into_child_hook_adopted_later`]).
#[cfg(target_os = "linux")]
pub(crate) fn sandbox_for(
    json: &str,
    command: &mut std::process::Command,
    program: &OsStr,
    args: &[OsString],
    adopt_later: bool,
) -> Result<(tether_sandbox::ChildHook, SandboxKept, Option<EgressPart>), String> {
    let policy: tether_sandbox::Policy =
        serde_json::from_str(json).map_err(|e| format!("bad sandbox policy: {e}"))?;
    let home =
        tether_sandbox::PrivateHome::create(&std::env::temp_dir(), policy.profile.keep_home())
            .map_err(|e| e.to_string())?;
    let path = env_of(command, "PATH");
    let user_home = env_of(command, "HOME").map(PathBuf::from);
    let cwd = command.get_current_dir().map(Path::to_owned);
    let cache = package_cache(
        command,
        program,
        args,
        policy.cache_home.as_deref(),
        user_home.as_deref(),
    );
    let target = tether_sandbox::Target {
        program,
        args,
        path: path.as_deref(),
        cwd: cwd.as_deref(),
        home: home.path(),
        cache: cache.as_deref(),
        user_home: user_home.as_deref(),
    };
    let mut prepared = tether_sandbox::prepare(&policy, &target).map_err(|e| e.to_string())?;
    tracing::debug!("{}", prepared.report());
    let egress = prepared.take_egress();
    if egress.is_some() {
        // Its only way out: the proxy (never on a command line: the environment).
        let url = tether_sandbox::proxy_url();
        for name in tether_sandbox::PROXY_VARS {
            command.env(name, &url);
        }
        for name in tether_sandbox::NO_PROXY_VARS {
            command.env_remove(name);
        }
        command.env("NODE_USE_ENV_PROXY", "1");
    }
    if home.kept() {
        eprintln!(
            "tether: the sandbox's private home is kept: {}",
            home.path().display()
        );
    }
    command.env("HOME", home.path()).env("TMPDIR", home.path());
    let (hook, cleanup) = if adopt_later {
        prepared.into_child_hook_adopted_later()
    } else {
        prepared.into_child_hook()
    };
    Ok((hook, (home, cleanup), egress))
}

/// A package runner's own cache, kept between runs ([`tether_sandbox::package_cache`]) under
/// the user's cache directory (`cache_home`: tether's `$XDG_CACHE_HOME`, carried by the
/// policy; else the server's; else `~/.cache`): made (0700) and pointed at by the runner's
/// variables on `command`. `None` for another program, or when it cannot be made (the server
/// then starts with its private home's empty cache).
#[cfg(target_os = "linux")]
fn package_cache(
    command: &mut std::process::Command,
    program: &OsStr,
    args: &[OsString],
    cache_home: Option<&Path>,
    user_home: Option<&Path>,
) -> Option<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let user_cache = cache_home
        .map(Path::to_owned)
        .or_else(|| env_of(command, "XDG_CACHE_HOME").map(PathBuf::from))
        .filter(|dir| dir.is_absolute())
        .or_else(|| user_home.map(|home| home.join(".cache")))?;
    let env: Vec<(OsString, OsString)> = command
        .get_envs()
        .filter_map(|(name, value)| Some((name.to_owned(), value?.to_owned())))
        .collect();
    let cache =
        tether_sandbox::package_cache(program, args, &env, &user_cache.join("tether/sandbox"))?;
    let mut dirs = std::fs::DirBuilder::new();
    dirs.recursive(true).mode(0o700);
    for (name, dir) in &cache.env {
        if let Err(e) = dirs.create(dir) {
            eprintln!(
                "tether: no package cache for the sandboxed server: cannot make {}: {e}",
                dir.display()
            );
            return None;
        }
        command.env(name, dir);
    }
    Some(cache.dir)
}

/// The value of `name` the program of `command` will see: set on `command`, else inherited.
#[cfg(target_os = "linux")]
fn env_of(command: &std::process::Command, name: &str) -> Option<OsString> {
    match command.get_envs().find(|(key, _)| *key == name) {
        Some((_, value)) => value.map(OsStr::to_owned),
        None => std::env::var_os(name),
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn sandbox_for(
    _json: &str,
    _command: &mut std::process::Command,
    _program: &OsStr,
    _args: &[OsString],
    _adopt_later: bool,
) -> Result<(tether_sandbox::ChildHook, SandboxKept, Option<EgressPart>), String> {
    Err(tether_sandbox::SandboxError::Unsupported.to_string())
}

/// Makes `command`'s process get SIGKILL when the thread that spawns it dies (Linux's
/// `PR_SET_PDEATHSIG`), and end at once if its parent is already gone; then runs `sandbox`,
/// the sandbox's hook (see [`tether_sandbox::Prepared::into_child_hook`]), if any.
#[cfg(target_os = "linux")]
pub(crate) fn tie_to_parent(
    command: &mut std::process::Command,
    mut sandbox: Option<tether_sandbox::ChildHook>,
) {
    // Captured before the fork: the pid the child must still have as its parent once the
    // death signal is set.
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec and makes only the
    // async-signal-safe prctl(2), getppid(2) and kill(2) calls (no allocation: the errors are
    // raw errno values), then the sandbox's hook, which makes only system calls too (write,
    // setrlimit, setsid, prctl, capset, landlock_restrict_self, seccomp: everything was built
    // before the fork); it touches no memory shared with the parent.
    #[expect(
        unsafe_code,
        reason = "pre_exec is the only way to set PR_SET_PDEATHSIG for the child"
    )]
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            // The parent may have died between fork and prctl: the signal was then never
            // armed and the child was re-parented. End it as the signal would have.
            if nix::unistd::getppid() != parent {
                nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)?;
                return Err(nix::errno::Errno::ESRCH.into());
            }
            match sandbox.as_mut() {
                Some(hook) => hook(),
                None => Ok(()),
            }
        });
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn tie_to_parent(
    _command: &mut std::process::Command,
    _sandbox: Option<tether_sandbox::ChildHook>,
) {
}

/// Points the supervisor's own stdin and stdout at `/dev/null`: the program holds them, and a
/// reader of its stdout must see end of file when the program exits, not when this does.
fn release_stdio() {
    if let Ok(null) = std::fs::File::open("/dev/null") {
        let _ = nix::unistd::dup2_stdin(&null);
    }
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdout(&null);
    }
}

fn remove_dir(dir: Option<&Path>) {
    if let Some(dir) = dir {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Reaps every exited child (adopted orphans too); the exit code if `child` was among them.
fn reap(child: Pid) -> Option<u8> {
    let mut code = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, status)) if pid == child => {
                code = Some(u8::try_from(status).unwrap_or(1));
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == child => {
                code = Some(u8::try_from(128 + signal as i32).unwrap_or(1));
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return code,
            Ok(_) => {}
        }
    }
}

/// Ends every live descendant: `signal` first, then, for those still there after `grace`,
/// SIGKILL, until none is left (bounded: a few seconds). Reaps as it goes.
async fn kill_descendants(signal: Signal, grace: Duration) {
    let me = nix::unistd::getpid().as_raw();
    let start = Instant::now();
    let mut signal = signal;
    loop {
        let _ = reap(Pid::from_raw(0));
        let left = descendants(me);
        if left.is_empty() {
            return;
        }
        if signal != Signal::SIGKILL && start.elapsed() >= grace {
            signal = Signal::SIGKILL;
        }
        for pid in &left {
            // A process that exited meanwhile (ESRCH) is what this loop wants anyway.
            let _ = kill(Pid::from_raw(*pid), signal);
        }
        if start.elapsed() > grace + Duration::from_secs(5) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Pids of the live (not zombie) descendants of `root`, from `/proc/*/stat`.
pub fn descendants(root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesized command: state ppid …
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let Some(ppid) = fields.next().and_then(|f| f.parse::<i32>().ok()) else {
            continue;
        };
        if state != Some("Z") {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        if let Some(kids) = children.get(&pid) {
            found.extend(kids);
            queue.extend(kids);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_round_trip_through_wrap_and_parse() {
        let options = SuperviseOptions {
            forward_signals: true,
            remove_on_orphan: Some(PathBuf::from("/tmp/run dir")),
            sandbox: Some("{}".to_owned()),
        };
        let argv = supervisor_argv(OsStr::new("srv"), ["--", "a b"], &options);
        assert_eq!(
            argv.first().map(OsString::as_os_str),
            Some(OsStr::new(SUBCOMMAND))
        );
        let parsed = parse(argv.get(1..).unwrap_or_default()).expect("parsed");
        assert_eq!(
            parsed.parent.as_raw(),
            i32::try_from(std::process::id()).unwrap_or(0)
        );
        assert!(options.forward_signals);
        assert_eq!(parsed.options.remove_on_orphan, options.remove_on_orphan);
        assert_eq!(parsed.options.sandbox, options.sandbox);
        assert_eq!(parsed.program, OsString::from("srv"));
        assert_eq!(parsed.args, [OsString::from("--"), OsString::from("a b")]);
    }

    #[test]
    fn descendants_of_this_process_include_a_child_and_not_this_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawning sleep");
        let me = i32::try_from(std::process::id()).unwrap_or(0);
        let pid = i32::try_from(child.id()).unwrap_or(0);
        let found = descendants(me);
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&pid), "{found:?}");
        assert!(!found.contains(&me));
    }
}
