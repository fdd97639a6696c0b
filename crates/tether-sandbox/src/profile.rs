//! Permission profiles: ToolHive's JSON format, read as it is, plus tether's own keys under
//! `"tether"`; the modes (`none`, `default`, `strict`, a profile file) that choose one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::SandboxError;

/// How a stdio server is sandboxed: `--sandbox MODE`, `sandbox` in config.toml, a server's
/// own `sandbox` key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Mode {
    /// No sandbox: the server runs with the user's rights (hand-written configs' default).
    #[default]
    None,
    /// The built-in [`Profile::builtin_default`], enforced as far as the kernel allows and
    /// saying what it could not enforce.
    Default,
    /// The built-in profile, refusing to start the server if any part cannot be enforced.
    Strict,
    /// A permission profile file (ToolHive's format), best effort unless it says
    /// `"tether": {"strict": true}`.
    Profile(PathBuf),
}

impl Mode {
    /// `none`, `default`, `strict`, or a path to a profile file. An empty text is refused.
    pub fn parse(text: &str) -> Result<Self, SandboxError> {
        match text.trim() {
            "" => Err(SandboxError::BadMode),
            "none" => Ok(Self::None),
            "default" => Ok(Self::Default),
            "strict" => Ok(Self::Strict),
            path => Ok(Self::Profile(PathBuf::from(path))),
        }
    }

    /// The mode as a user wrote it (`none`, `default`, `strict`, the profile's path).
    pub fn label(&self) -> String {
        match self {
            Self::None => "none".to_owned(),
            Self::Default => "default".to_owned(),
            Self::Strict => "strict".to_owned(),
            Self::Profile(path) => path.display().to_string(),
        }
    }

    /// The policy this mode stands for: `None` for [`Mode::None`], the built-in profile, or
    /// the file read and checked.
    pub fn policy(&self) -> Result<Option<Policy>, SandboxError> {
        let (profile, strict) = match self {
            Self::None => return Ok(None),
            Self::Default => (Profile::builtin_default(), false),
            Self::Strict => (Profile::builtin_default(), true),
            Self::Profile(path) => {
                let profile = Profile::from_file(path)?;
                let strict = profile.tether.as_ref().is_some_and(|t| t.strict);
                (profile, strict)
            }
        };
        Ok(Some(Policy {
            label: self.label(),
            profile,
            strict,
            assume_no_netns: std::env::var_os(ASSUME_NO_NETNS).is_some_and(|v| v == "1"),
            cache_home: std::env::var_os("XDG_CACHE_HOME")
                .map(std::path::PathBuf::from)
                .filter(|dir| dir.is_absolute()),
        }))
    }
}

/// A mode resolved: the profile, and whether every part of it must be enforced. This is what
/// the supervisor is handed (as JSON on its command line: a profile holds paths, no secret).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// The mode as the user wrote it, for reports.
    pub label: String,
    /// What the server may reach.
    pub profile: Profile,
    /// Refuse to start when anything cannot be enforced.
    pub strict: bool,
    /// A strict policy treats network namespaces as unavailable, so that a host allow-list
    /// refuses the start (`TETHER_SANDBOX_ASSUME_NO_NETNS=1` when the mode was resolved). It
    /// only ever makes a strict start refuse; a best-effort one enforces what it can whatever
    /// this says.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub assume_no_netns: bool,
    /// `XDG_CACHE_HOME` of the tether process that resolved the mode (absolute): where the
    /// package runners' caches go. The supervisor's own environment is the server's, filtered,
    /// and has lost it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_home: Option<std::path::PathBuf>,
}

/// The variable that sets [`Policy::assume_no_netns`].
pub const ASSUME_NO_NETNS: &str = "TETHER_SANDBOX_ASSUME_NO_NETNS";

/// A permission profile in ToolHive's JSON format:
/// `{"read": [...], "write": [...], "network": {"outbound": {"insecure_allow_all": bool,
/// "allow_host": [...], "allow_port": [...]}}}`, with ToolHive's `name` and `privileged` (which
/// must be false), and tether's own settings under `"tether"`. Unknown keys are refused.
///
/// The paths of `read` and `write` are added to the base every sandboxed server gets (the
/// system read-only, its own command and package, a private `HOME`). A ToolHive mount
/// declaration `HOST:CONTAINER` grants `HOST`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// ToolHive's profile name (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Paths the server may read (and execute) below.
    #[serde(default)]
    pub read: Vec<String>,
    /// Paths the server may read, write, create and remove below.
    #[serde(default)]
    pub write: Vec<String>,
    /// Outbound network. Absent: none (as in ToolHive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// ToolHive's privileged containers: refused when true (a sandbox cannot grant it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
    /// tether's own settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tether: Option<TetherSettings>,
}

/// `network` of a profile.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// ToolHive's network mode: `none` (no network whatever `outbound` says), `host` (all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Outbound connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbound: Option<Outbound>,
}

/// `network.outbound` of a profile.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outbound {
    /// Every host and port.
    #[serde(default)]
    pub insecure_allow_all: bool,
    /// Host names allowed through the egress proxy: exact, or `.example.com` for the domain
    /// and its subdomains.
    #[serde(default)]
    pub allow_host: Vec<String>,
    /// TCP ports the server may connect to, on any host.
    #[serde(default)]
    pub allow_port: Vec<u16>,
}

/// `"tether": {...}` of a profile: what ToolHive's format has no words for.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TetherSettings {
    /// Refuse to start unless everything is enforced (as `--sandbox strict`).
    #[serde(default)]
    pub strict: bool,
    /// Keep the private home directory after the run (its path is logged).
    #[serde(default)]
    pub keep_home: bool,
    /// Writable data memory in MiB (`RLIMIT_DATA`); 0 for no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Processes and threads (a pids cgroup where writable, else `RLIMIT_NPROC`); 0: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// CPU seconds (`RLIMIT_CPU`); 0 for no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<u64>,
    /// TCP ports the server may listen on (default none).
    #[serde(default)]
    pub allow_bind: Vec<u16>,
    /// Let the server make Unix sockets (`socket(AF_UNIX, …)`), and so connect to any named
    /// one whose path it knows (docker.sock, an ssh-agent, D-Bus): seccomp refuses them
    /// otherwise. `socketpair` is allowed either way.
    #[serde(default)]
    pub unix_sockets: bool,
}

/// `default`'s data memory limit: 4 GiB (`RLIMIT_DATA`: V8's and CPython's reserved but
/// untouched address space does not count against it, unlike `RLIMIT_AS`).
pub const DEFAULT_MEMORY_MB: u64 = 4096;
/// `default`'s process and thread limit: 256.
pub const DEFAULT_PROCESSES: u64 = 256;
/// `default`'s CPU limit: none (a gateway's servers run for hours).
pub const DEFAULT_CPU_SECONDS: u64 = 0;
/// The ports `default` lets a server connect to: DNS over TCP, HTTP, HTTPS.
pub const DEFAULT_PORTS: [u16; 3] = [53, 80, 443];

/// What a profile's `network` comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    /// Every TCP port of every host.
    All,
    /// These TCP ports (none: no TCP connection at all), with host names that would need
    /// the egress proxy.
    Ports {
        /// Allowed TCP ports.
        ports: Vec<u16>,
        /// Allowed host names (through the egress proxy, where a network namespace can be made).
        hosts: Vec<String>,
    },
}

impl Profile {
    /// The built-in `default`: nothing beyond the base, outbound TCP to ports 53, 80 and 443.
    pub fn builtin_default() -> Self {
        Self {
            name: Some("default".to_owned()),
            network: Some(Network {
                mode: None,
                outbound: Some(Outbound {
                    insecure_allow_all: false,
                    allow_host: Vec::new(),
                    allow_port: DEFAULT_PORTS.to_vec(),
                }),
            }),
            ..Self::default()
        }
    }

    /// Reads and checks a profile file.
    pub fn from_file(path: &Path) -> Result<Self, SandboxError> {
        let text = std::fs::read_to_string(path).map_err(|e| SandboxError::Read {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        Self::from_json(&text).map_err(|reason| SandboxError::Profile {
            path: path.to_owned(),
            reason,
        })
    }

    /// Parses and checks a profile's JSON; the error is one line naming what is wrong.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let profile: Self = serde_json::from_str(text).map_err(|e| e.to_string())?;
        profile.check()?;
        Ok(profile)
    }

    fn check(&self) -> Result<(), String> {
        if self.privileged {
            return Err("\"privileged\": true cannot be granted by a sandbox: remove it (or run the server with --sandbox none)".to_owned());
        }
        for (key, entries) in [("read", &self.read), ("write", &self.write)] {
            for entry in entries {
                host_path(entry).map_err(|why| format!("\"{key}\": {entry:?}: {why}"))?;
            }
        }
        if let Some(mode) = self.network.as_ref().and_then(|n| n.mode.as_deref())
            && !matches!(mode, "none" | "host" | "bridge" | "")
        {
            return Err(format!(
                "\"network\".\"mode\": {mode:?} is not one of \"none\", \"host\", \"bridge\""
            ));
        }
        Ok(())
    }

    /// The host paths of `read`, then of `write` (`~` expanded with `home`).
    pub fn paths(&self, home: Option<&Path>) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let expand = |entries: &[String]| {
            entries
                .iter()
                .filter_map(|entry| host_path(entry).ok())
                .filter_map(|path| expand_home(&path, home))
                .collect()
        };
        (expand(&self.read), expand(&self.write))
    }

    /// What the profile allows out.
    pub fn outgoing(&self) -> Outgoing {
        let none = Outgoing::Ports {
            ports: Vec::new(),
            hosts: Vec::new(),
        };
        let Some(network) = &self.network else {
            return none;
        };
        match network.mode.as_deref() {
            Some("none") => return none,
            Some("host") => return Outgoing::All,
            _ => {}
        }
        match &network.outbound {
            None => none,
            Some(out) if out.insecure_allow_all => Outgoing::All,
            Some(out) => Outgoing::Ports {
                ports: out.allow_port.clone(),
                hosts: out.allow_host.clone(),
            },
        }
    }

    fn setting(&self, pick: impl Fn(&TetherSettings) -> Option<u64>, default: u64) -> u64 {
        self.tether.as_ref().and_then(pick).unwrap_or(default)
    }

    /// The data memory limit in MiB (0: none).
    pub fn memory_mb(&self) -> u64 {
        self.setting(|t| t.memory_mb, DEFAULT_MEMORY_MB)
    }

    /// The process and thread limit (0: none).
    pub fn processes(&self) -> u64 {
        self.setting(|t| t.processes, DEFAULT_PROCESSES)
    }

    /// The CPU limit in seconds (0: none).
    pub fn cpu_seconds(&self) -> u64 {
        self.setting(|t| t.cpu_seconds, DEFAULT_CPU_SECONDS)
    }

    /// Ports the server may listen on.
    pub fn allow_bind(&self) -> &[u16] {
        self.tether.as_ref().map_or(&[], |t| &t.allow_bind)
    }

    /// Whether the server may make Unix sockets (`"tether": {"unix_sockets": true}`).
    pub fn unix_sockets(&self) -> bool {
        self.tether.as_ref().is_some_and(|t| t.unix_sockets)
    }

    /// Whether the private home is kept after the run.
    pub fn keep_home(&self) -> bool {
        self.tether.as_ref().is_some_and(|t| t.keep_home)
    }
}

/// The host side of a ToolHive mount declaration (`PATH` or `HOST:CONTAINER`), which must be
/// absolute or start with `~`.
fn host_path(entry: &str) -> Result<PathBuf, String> {
    if entry.contains("://") {
        return Err("resource URIs are not supported: give a path".to_owned());
    }
    let host = match entry.split_once(':') {
        Some((host, _container)) => host,
        None => entry,
    };
    if host.is_empty() {
        return Err("empty path".to_owned());
    }
    if !(host.starts_with('/') || host == "~" || host.starts_with("~/")) {
        return Err("give an absolute path (or one starting with ~/)".to_owned());
    }
    Ok(PathBuf::from(host))
}

fn expand_home(path: &Path, home: Option<&Path>) -> Option<PathBuf> {
    match path.strip_prefix("~") {
        Ok(rest) => home.map(|home| home.join(rest)),
        Err(_) => Some(path.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toolhive_profile_parses_as_written() {
        let profile = Profile::from_json(
            r#"{"name": "x", "read": ["/data:/data", "~/notes"], "write": ["/tmp/out"],
                "network": {"outbound": {"insecure_allow_all": false,
                "allow_host": ["api.example.com"], "allow_port": [443, 8443]}}}"#,
        )
        .expect("parsed");
        let (read, write) = profile.paths(Some(Path::new("/home/u")));
        assert_eq!(
            read,
            [PathBuf::from("/data"), PathBuf::from("/home/u/notes")]
        );
        assert_eq!(write, [PathBuf::from("/tmp/out")]);
        assert_eq!(
            profile.outgoing(),
            Outgoing::Ports {
                ports: vec![443, 8443],
                hosts: vec!["api.example.com".to_owned()]
            }
        );
    }

    #[test]
    fn an_unknown_key_is_refused_by_name() {
        let err = Profile::from_json(r#"{"read": [], "wrte": ["/x"]}"#).expect_err("refused");
        assert!(err.contains("unknown field `wrte`"), "{err}");
        let err = Profile::from_json(r#"{"network": {"outbound": {"allow_ports": [1]}}}"#)
            .expect_err("refused");
        assert!(err.contains("unknown field `allow_ports`"), "{err}");
        let err = Profile::from_json(r#"{"tether": {"memory": 1}}"#).expect_err("refused");
        assert!(err.contains("unknown field `memory`"), "{err}");
    }

    #[test]
    fn relative_paths_resource_uris_and_privileged_are_refused() {
        for (json, says) in [
            (r#"{"read": ["data"]}"#, "absolute"),
            (r#"{"write": ["file:///x"]}"#, "resource URIs"),
            (r#"{"privileged": true}"#, "privileged"),
            (r#"{"network": {"mode": "bridgee"}}"#, "mode"),
        ] {
            let err = Profile::from_json(json).expect_err(json);
            assert!(err.contains(says), "{json}: {err}");
        }
    }

    #[test]
    fn network_defaults_follow_toolhive() {
        let none = Outgoing::Ports {
            ports: vec![],
            hosts: vec![],
        };
        assert_eq!(Profile::default().outgoing(), none);
        let all = Profile::from_json(r#"{"network": {"outbound": {"insecure_allow_all": true}}}"#)
            .expect("parsed");
        assert_eq!(all.outgoing(), Outgoing::All);
        let off = Profile::from_json(
            r#"{"network": {"mode": "none", "outbound": {"insecure_allow_all": true}}}"#,
        )
        .expect("parsed");
        assert_eq!(off.outgoing(), none);
        assert_eq!(
            Profile::builtin_default().outgoing(),
            Outgoing::Ports {
                ports: DEFAULT_PORTS.to_vec(),
                hosts: vec![]
            }
        );
    }

    #[test]
    fn modes_parse_and_resolve() {
        assert_eq!(Mode::parse("none").ok(), Some(Mode::None));
        assert!(Mode::parse(" ").is_err());
        assert_eq!(Mode::None.policy().ok(), Some(None));
        let strict = Mode::Strict.policy().ok().flatten().expect("a policy");
        assert!(strict.strict);
        let err = Mode::Profile(PathBuf::from("/nonexistent/p.json"))
            .policy()
            .expect_err("missing file");
        assert!(err.to_string().contains("/nonexistent/p.json"), "{err}");
    }
}
