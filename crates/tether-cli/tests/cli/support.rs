//! Running `tether` in a sandboxed environment.

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
pub use tether_testkit::{Tether, json_str, test_server_bin};

/// A temporary TETHER_HOME and working directory for one test.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("creating a temporary directory"),
        }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("tether-home")
    }

    /// Writes `script` as an executable `bin/NAME` (a fake harness); its path.
    pub fn fake_program(&self, name: &str, script: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let bin = self.path("bin");
        std::fs::create_dir_all(&bin).expect("creating the bin directory");
        let path = bin.join(name);
        std::fs::write(&path, script).expect("writing the fake program");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("making it executable");
        path
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// How this sandbox runs tether ([`tether_testkit::Tether`]): TETHER_HOME here, no
    /// managed server configured, colour off, cwd in the sandbox.
    pub fn runner(&self) -> Tether {
        Tether::new(env!("CARGO_BIN_EXE_tether"), self.home()).current_dir(self.dir.path())
    }

    /// `tether ARGS` with TETHER_HOME here, no managed server configured, colour off.
    pub fn tether(&self, args: &[&str]) -> Command {
        Command::from_std(self.runner().command(args))
    }

    /// Runs `tether ARGS` (as [`Sandbox::tether`]) to the end: its exit status and output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.tether(args).output().expect("running tether")
    }

    /// Installs our test server as `name` (`tether install NAME --from …`); returns its UUID.
    pub fn install_test_server(&self, name: &str) -> String {
        let spec = format!(
            r#"{{"command": {}}}"#,
            json_str(&test_server_bin().to_string_lossy())
        );
        let out = self.run(&["install", name, "--from", &spec]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_owned()
    }

    /// Writes `text` to `name` and returns its path as a string.
    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, text).expect("writing the file");
        path.to_string_lossy().into_owned()
    }
}

/// The real `opencode` with a fresh home `home` (created) as its HOME, config directory and
/// working directory, so no config of the machine's is read.
pub fn opencode_in(opencode: &Path, home: &Path) -> std::process::Command {
    std::fs::create_dir_all(home).expect("creating the opencode home");
    let mut command = std::process::Command::new(opencode);
    command
        .current_dir(home)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"));
    command
}

/// What the real `codex mcp list --json` lists with `codex_home` as its home (and HOME).
pub fn codex_mcp_list(codex: &Path, codex_home: &Path) -> serde_json::Value {
    let out = std::process::Command::new(codex)
        .args(["mcp", "list", "--json"])
        .env("CODEX_HOME", codex_home)
        .env("HOME", codex_home)
        .output()
        .expect("running codex mcp list");
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("codex lists JSON")
}

/// A config with one server of ours named `name` with `args`, plus `env`.
pub fn server_json(name: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let args: Vec<String> = args.iter().map(|a| json_str(a)).collect();
    let env: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{}: {}", json_str(k), json_str(v)))
        .collect();
    format!(
        "{}: {{\"command\": {}, \"args\": [{}], \"env\": {{{}}}}}",
        json_str(name),
        json_str(&test_server_bin().to_string_lossy()),
        args.join(", "),
        env.join(", ")
    )
}

/// `{...}` around server entries.
pub fn config(entries: &[String]) -> String {
    format!("{{{}}}", entries.join(", "))
}

/// Output as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The test server's path with its directory replaced, for stable snapshots.
pub fn scrub(text: &str) -> String {
    let bin = test_server_bin();
    let dir = bin.parent().map(Path::to_path_buf).unwrap_or_default();
    text.replace(&dir.to_string_lossy().into_owned(), "[BIN]")
}
