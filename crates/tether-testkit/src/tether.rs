//! [`Tether`]: the one way tests run the `tether` binary.
//!
//! Every command starts from the same clean environment: its own `TETHER_HOME`, no managed
//! server (`TETHER_SERVER_URL`, `TETHER_API_KEY`, `TETHER_API_KEY_FILE` unset), no
//! `RUST_LOG`, `NO_COLOR=1`. Options add what some tests need: a managed server, a secret
//! store, the fixture registries, a sandboxed user home for harness CLIs, a working directory.
//!
//! ```no_run
//! use tether_testkit::Tether;
//! # fn demo(home: &std::path::Path) {
//! let out = Tether::new(tether_testkit::tether_bin(), home)
//!     .secret_store("file")
//!     .command(&["list", "--json"])
//!     .output()
//!     .expect("running tether");
//! # let _ = out;
//! # }
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use tether_env::EnvVars;

/// The variables every command starts without: a managed server, a log filter.
const UNSET: [&str; 4] = [
    EnvVars::TETHER_SERVER_URL,
    EnvVars::TETHER_API_KEY,
    EnvVars::TETHER_API_KEY_FILE,
    EnvVars::RUST_LOG,
];

/// Harness CLIs' own homes and config overrides, unset under [`Tether::user_home`] so a
/// harness reads the sandbox, not the developer's settings.
const HARNESS_OVERRIDES: [&str; 5] = [
    EnvVars::CODEX_HOME,
    EnvVars::GEMINI_CLI_HOME,
    "CLAUDE_CONFIG_DIR",
    "OPENCODE_CONFIG",
    EnvVars::OPENCODE_CONFIG_CONTENT,
];

/// The `tether` binary of this workspace's target directory (built with `cargo build` only
/// when it is missing; see [`crate::workspace_artifact`]). Tests of `tether-cli` itself pass
/// `env!("CARGO_BIN_EXE_tether")` to [`Tether::new`] instead.
pub fn tether_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        crate::workspace_artifact(
            &["-p", "tether-cli", "--bin", "tether"],
            Path::new("tether"),
        )
    })
    .clone()
}

/// How a test runs `tether`: the binary, its `TETHER_HOME`, and the options set so far.
#[derive(Debug, Clone)]
pub struct Tether {
    bin: PathBuf,
    home: PathBuf,
    cwd: Option<PathBuf>,
    /// Set (`Some`) or unset (`None`) on top of the clean environment, in order.
    envs: Vec<(OsString, Option<OsString>)>,
}

impl Tether {
    /// `bin` with `TETHER_HOME=home` in the clean environment (see the module docs).
    pub fn new(bin: impl Into<PathBuf>, home: impl Into<PathBuf>) -> Self {
        Self {
            bin: bin.into(),
            home: home.into(),
            cwd: None,
            envs: Vec::new(),
        }
    }

    /// Sets `name` to `value` in every command.
    #[must_use]
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.envs.push((name.into(), Some(value.into())));
        self
    }

    /// Leaves `name` out of every command's environment.
    #[must_use]
    pub fn env_remove(mut self, name: impl Into<OsString>) -> Self {
        self.envs.push((name.into(), None));
        self
    }

    /// Runs in `dir` instead of the test's working directory.
    #[must_use]
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Points tether at a managed server: `TETHER_SERVER_URL` (its GraphQL endpoint) and
    /// `TETHER_API_KEY` (`TETHER_API_KEY_FILE` stays unset).
    #[must_use]
    pub fn managed(self, graphql_url: &str, api_key: &str) -> Self {
        self.env(EnvVars::TETHER_SERVER_URL, graphql_url)
            .env(EnvVars::TETHER_API_KEY, api_key)
    }

    /// `TETHER_SECRET_STORE=store` (`file`: values in TETHER_HOME's 0600 file, where a test
    /// can look at every byte).
    #[must_use]
    pub fn secret_store(self, store: &str) -> Self {
        self.env(EnvVars::TETHER_SECRET_STORE, store)
    }

    /// The official registry at `url` (the fixture registry), and no Smithery key from the
    /// developer's environment.
    #[must_use]
    pub fn registry(self, url: &str) -> Self {
        self.env(EnvVars::TETHER_REGISTRY_URL, url)
            .env_remove(EnvVars::SMITHERY_API_KEY)
    }

    /// Smithery at `url` (the fixture registry serves both shapes), with `key` when given.
    #[must_use]
    pub fn smithery(self, url: &str, key: Option<&str>) -> Self {
        let this = self.env(EnvVars::TETHER_SMITHERY_URL, url);
        match key {
            Some(key) => this.env(EnvVars::SMITHERY_API_KEY, key),
            None => this.env_remove(EnvVars::SMITHERY_API_KEY),
        }
    }

    /// A sandboxed user home for harness CLIs: `HOME` and the XDG directories under `home`,
    /// and no harness home or config override from the developer's environment.
    #[must_use]
    pub fn user_home(self, home: &Path) -> Self {
        let mut this = self
            .env(EnvVars::HOME, home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env(EnvVars::XDG_CACHE_HOME, home.join(".cache"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", home.join(".local/state"));
        for name in HARNESS_OVERRIDES {
            this = this.env_remove(name);
        }
        this
    }

    /// The `TETHER_HOME` the commands run with.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// `tether ARGS` with this environment (stdio as the caller sets it).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.bin);
        command.args(args);
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        command
            .env(EnvVars::TETHER_HOME, &self.home)
            .env(EnvVars::NO_COLOR, "1");
        for name in UNSET {
            command.env_remove(name);
        }
        for (name, value) in &self.envs {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        command
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The environment a command was given: set variables with their values, unset ones with
    /// `None`.
    fn envs(command: &Command) -> Vec<(String, Option<String>)> {
        command
            .get_envs()
            .map(|(name, value)| {
                (
                    name.to_string_lossy().into_owned(),
                    value.map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect()
    }

    fn has(envs: &[(String, Option<String>)], name: &str, value: Option<&str>) -> bool {
        envs.iter().any(|(n, v)| n == name && v.as_deref() == value)
    }

    #[test]
    fn a_plain_command_has_its_home_and_no_managed_server() {
        let command = Tether::new("/bin/tether", "/tmp/home").command(&["list"]);
        let envs = envs(&command);
        assert!(has(&envs, "TETHER_HOME", Some("/tmp/home")), "{envs:?}");
        assert!(has(&envs, "NO_COLOR", Some("1")), "{envs:?}");
        for name in UNSET {
            assert!(has(&envs, name, None), "{name} is not unset: {envs:?}");
        }
        assert_eq!(command.get_program(), "/bin/tether");
        assert_eq!(
            command.get_args().collect::<Vec<_>>(),
            vec![std::ffi::OsStr::new("list")]
        );
    }

    #[test]
    fn options_set_on_top_of_the_clean_environment() {
        let command = Tether::new("/bin/tether", "/tmp/home")
            .managed("http://127.0.0.1:1/graphql", "key")
            .secret_store("file")
            .registry("http://127.0.0.1:2")
            .user_home(Path::new("/tmp/user"))
            .current_dir("/tmp")
            .command(&[]);
        let envs = envs(&command);
        assert!(
            has(
                &envs,
                "TETHER_SERVER_URL",
                Some("http://127.0.0.1:1/graphql")
            ),
            "{envs:?}"
        );
        assert!(has(&envs, "TETHER_API_KEY", Some("key")), "{envs:?}");
        assert!(has(&envs, "TETHER_API_KEY_FILE", None), "{envs:?}");
        assert!(has(&envs, "TETHER_SECRET_STORE", Some("file")), "{envs:?}");
        assert!(has(&envs, "SMITHERY_API_KEY", None), "{envs:?}");
        assert!(has(&envs, "HOME", Some("/tmp/user")), "{envs:?}");
        assert!(has(&envs, "CODEX_HOME", None), "{envs:?}");
        assert_eq!(command.get_current_dir(), Some(Path::new("/tmp")));
    }
}
