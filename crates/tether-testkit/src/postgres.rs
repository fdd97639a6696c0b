//! Throwaway PostgreSQL clusters for tether-server's tests, the end-to-end tests and the
//! replicas bench (specs/server-postgres/TECH.md §5).
//!
//! `initdb` into a fresh directory, `postgres` listening only on a Unix socket in that
//! directory (`listen_addresses=''`), trust authentication, no fsync. `initdb` refuses to run
//! as root, so as root the directory is given to the `postgres` OS user (Debian's `postgresql`
//! package creates it) and both programs run under `setpriv --reuid postgres`.
//!
//! `postgres` runs under a `sh` that waits on its stdin, a pipe from this process: when the
//! test process ends, however it ends, the pipe closes and the shell stops PostgreSQL (fast
//! shutdown) and removes the directory. So a cluster in a `static` is cleaned up too.

#![allow(clippy::expect_used, reason = "test helpers fail loudly")]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tether_env::EnvVars;

/// How long a cluster may take to start.
const START_LIMIT: Duration = Duration::from_secs(30);

/// The directory holding `initdb`, `postgres`, `pg_isready`, `createdb`, `pg_dump`: the newest
/// `/usr/lib/postgresql/*/bin` (Debian), else whatever `PATH` finds (empty prefix).
fn bin_dir() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("postgres").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).unwrap_or_default()
}

fn program(name: &str) -> PathBuf {
    let dir = bin_dir();
    if dir.as_os_str().is_empty() {
        PathBuf::from(name)
    } else {
        dir.join(name)
    }
}

/// Whether this process runs as root (then the cluster runs as the `postgres` user).
fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The prefix that runs a program as the cluster's owner.
fn as_owner() -> Vec<String> {
    if is_root() {
        [
            "setpriv",
            "--reuid",
            "postgres",
            "--regid",
            "postgres",
            "--clear-groups",
            "--",
        ]
        .map(str::to_owned)
        .to_vec()
    } else {
        Vec::new()
    }
}

/// A running throwaway cluster; stopped and removed when dropped (or when the process ends).
pub struct PgCluster {
    dir: PathBuf,
    /// The port (also in the Unix socket's name): 5432 unless [`PgCluster::start_tls`] chose.
    port: u16,
    shell: Child,
    created: Mutex<HashSet<String>>,
}

impl PgCluster {
    /// initdb + postgres on a Unix socket in a fresh directory; waits until it answers.
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// [`PgCluster::start`], also listening on `127.0.0.1` with TLS only (`hostnossl` is
    /// refused), its certificate (for `127.0.0.1` and `localhost`) signed by a fresh CA of
    /// the cluster's own: the cluster, its TCP port and the CA's PEM file.
    pub fn start_tls() -> (Self, u16, PathBuf) {
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|listener| listener.local_addr())
            .expect("finding a free port")
            .port();
        let cluster = Self::start_with(Some(port));
        let ca = cluster.dir.join("ca.pem");
        (cluster, port, ca)
    }

    fn start_with(tls_port: Option<u16>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("tether-pg-")
            .tempdir()
            .unwrap_or_else(|e| panic!("creating the cluster's directory: {e}"))
            .keep();
        if is_root() {
            let owner = nix::unistd::User::from_name("postgres")
                .expect("looking up the postgres user")
                .expect(
                    "running as root, the tests run PostgreSQL as the `postgres` OS user; install \
                     Debian's `postgresql` package, which creates it",
                );
            std::os::unix::fs::chown(&dir, Some(owner.uid.as_raw()), Some(owner.gid.as_raw()))
                .expect("giving the cluster's directory to the postgres user");
        }
        let prefix = as_owner();
        let mut initdb = match prefix.split_first() {
            Some((first, rest)) => {
                let mut command = Command::new(first);
                command.args(rest).arg(program("initdb"));
                command
            }
            None => Command::new(program("initdb")),
        };
        let initdb = initdb
            .arg("-D")
            .arg(dir.join("pg"))
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "running initdb ({}): {e}; install PostgreSQL's server binaries",
                    program("initdb").display()
                )
            });
        assert!(
            initdb.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        let mut listen = String::new();
        let mut tls_settings = String::new();
        if let Some(port) = tls_port {
            tls_files(&dir);
            listen = "127.0.0.1".to_owned();
            tls_settings = format!(
                "-c port={port} -c ssl=on -c ssl_cert_file={0}/server.crt -c ssl_key_file={0}/server.key",
                dir.display()
            );
        }
        // LISTEN and TLS: empty (a Unix socket only), or 127.0.0.1 and the TLS settings
        // (paths without spaces: a temporary directory's).
        let script = r#"dir=$1; shift
"$@" -D "$dir/pg" -k "$dir" -c listen_addresses="$LISTEN" -c fsync=off -c synchronous_commit=off \
  -c full_page_writes=off -c max_connections=400 -c shared_buffers=32MB $TLS >"$dir/log" 2>&1 &
pid=$!
cat >/dev/null
kill -INT "$pid"
wait "$pid"
rm -rf "$dir""#;
        let shell = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .arg(&dir)
            .args(&prefix)
            .arg(program("postgres"))
            .env("LISTEN", listen)
            .env("TLS", tls_settings)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting postgres");
        let cluster = Self {
            dir,
            port: tls_port.unwrap_or(5432),
            shell,
            created: Mutex::new(HashSet::new()),
        };
        cluster.wait_ready();
        cluster
    }

    fn wait_ready(&self) {
        let started = Instant::now();
        loop {
            let ready = Command::new(program("pg_isready"))
                .arg("-h")
                .arg(&self.dir)
                .args(["-p", &self.port.to_string()])
                .args(["-U", "postgres", "-q"])
                .status()
                .is_ok_and(|status| status.success());
            if ready {
                return;
            }
            assert!(
                started.elapsed() < START_LIMIT,
                "PostgreSQL did not answer within {START_LIMIT:?}; its log:\n{}",
                std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The URL of database `name` (no password: trust authentication on the socket).
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgres://postgres@/{name}?host={}&port={}",
            self.dir.display(),
            self.port
        )
    }

    /// Creates database `name` once; returns its URL.
    pub fn database(&self, name: &str) -> String {
        let mut created = self.created.lock().unwrap_or_else(PoisonError::into_inner);
        if created.insert(name.to_owned()) {
            let output = Command::new(program("createdb"))
                .arg("-h")
                .arg(&self.dir)
                .args(["-p", &self.port.to_string()])
                .args(["-U", "postgres", name])
                .output()
                .expect("running createdb");
            assert!(
                output.status.success(),
                "createdb {name}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        self.url(name)
    }

    /// Everything database `name` holds, as `pg_dump` writes it (bytea as hex).
    pub fn dump(&self, name: &str) -> String {
        let output = Command::new(program("pg_dump"))
            .arg("-h")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string()])
            .args(["-U", "postgres", "--data-only", name])
            .output()
            .expect("running pg_dump");
        assert!(
            output.status.success(),
            "pg_dump {name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl PgCluster {
    /// Runs one SQL statement with `psql` on database `name`; its unaligned output, trimmed.
    pub fn sql(&self, name: &str, statement: &str) -> String {
        let output = Command::new(program("psql"))
            .arg("-h")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", name, "-At", "-c", statement])
            .output()
            .expect("running psql");
        assert!(
            output.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}

/// A CA and a server certificate for `127.0.0.1`/`localhost` signed by it, made with the
/// `openssl` command in `dir` (`ca.pem`, `server.crt`, `server.key` owned by the cluster's OS
/// user, 0600), and `pg_hba.conf` refusing TCP without TLS.
fn tls_files(dir: &Path) {
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("running openssl (Debian package openssl)");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("writing the certificate extensions");
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=tether test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "server.ext",
        "-out",
        "server.crt",
    ]);
    for file in ["server.key", "server.crt"] {
        let path = dir.join(file);
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("restricting the key's mode");
        if is_root() {
            let owner = nix::unistd::User::from_name("postgres")
                .ok()
                .flatten()
                .expect("the postgres user");
            std::os::unix::fs::chown(&path, Some(owner.uid.as_raw()), Some(owner.gid.as_raw()))
                .expect("giving the key to the postgres user");
        }
    }
    let hba = dir.join("pg").join("pg_hba.conf");
    let rest = std::fs::read_to_string(&hba).expect("reading pg_hba.conf");
    std::fs::write(
        &hba,
        format!("hostnossl all all 0.0.0.0/0 reject\nhostssl all all 127.0.0.1/32 trust\n{rest}"),
    )
    .expect("writing pg_hba.conf");
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // Closing stdin makes the shell stop PostgreSQL and remove the directory.
        drop(self.shell.stdin.take());
        let _ = self.shell.wait();
    }
}

/// Whether the suite runs on PostgreSQL (`TETHER_TEST_BACKEND=postgres`).
pub fn enabled() -> bool {
    std::env::var(EnvVars::TETHER_TEST_BACKEND).is_ok_and(|backend| backend == "postgres")
}

/// Whether PostgreSQL's server binaries are installed.
pub fn available() -> bool {
    let initdb = program("initdb");
    initdb.is_file()
        || Command::new(&initdb)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
}

fn forced() -> &'static Mutex<HashSet<PathBuf>> {
    static FORCED: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    FORCED.get_or_init(Mutex::default)
}

/// Makes data directory `dir` stand for a PostgreSQL database whatever the suite's backend
/// (the replica tests).
pub fn force(dir: &Path) {
    forced()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(dir.to_owned());
}

/// Whether `dir` was given to [`force`].
pub fn is_forced(dir: &Path) -> bool {
    forced()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(dir)
}

/// Whether the end-to-end stack runs as two replicas on one PostgreSQL database
/// (`TETHER_TEST_BACKEND=postgres-replicas`).
pub fn replicas_enabled() -> bool {
    std::env::var(EnvVars::TETHER_TEST_BACKEND).is_ok_and(|backend| backend == "postgres-replicas")
}

/// The cluster the whole suite shares when it runs on PostgreSQL (one per test process).
pub fn shared() -> &'static PgCluster {
    static SHARED: OnceLock<PgCluster> = OnceLock::new();
    SHARED.get_or_init(PgCluster::start)
}

/// The database name standing for data directory `dir`: one database per directory, so each
/// test's store is its own, as with SQLite.
pub fn database_name(dir: &Path) -> String {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut hasher);
    format!("t_{:016x}", hasher.finish())
}
