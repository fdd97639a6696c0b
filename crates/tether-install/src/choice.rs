//! How an entry runs: one of its packages, one of its remotes, or a downloaded bundle.

use std::path::Path;

use tether_registry::add::{Answers, BuildError, BuiltConfig, package_config, remote_config};
use tether_registry::mcpb::bundle_config;
use tether_registry::model::{Package, Remote, ServerJson};
use tether_registry::{InputRow, runner};

use crate::InstallError;
use crate::bundle::Bundle;

/// What an entry is installed as: one package or one remote of it, or a downloaded bundle.
pub enum Choice<'a> {
    /// A package (an mcpb one not yet downloaded, when [`Choice::needs_download`]).
    Package(&'a Package),
    /// A remote.
    Remote(&'a Remote),
    /// An mcpb package, downloaded, verified and unpacked.
    Bundle(&'a Package, Box<Bundle>),
}

impl Choice<'_> {
    /// `npm package NAME VERSION`, `remote URL (TRANSPORT)`: what the person is told.
    pub fn describe(&self) -> String {
        match self {
            Choice::Package(p) => format!(
                "{} package {}{}",
                p.registry_type,
                p.identifier,
                p.version
                    .as_deref()
                    .map(|v| format!(" {v}"))
                    .unwrap_or_default()
            ),
            Choice::Remote(r) => format!("remote {} ({})", r.url, r.kind),
            Choice::Bundle(p, _) => Choice::Package(p).describe(),
        }
    }

    /// Whether this is an mcpb package that must be downloaded ([`crate::bundle::fetch`])
    /// before it can be built.
    pub fn needs_download(&self) -> bool {
        matches!(self, Choice::Package(p) if is_bundle(p))
    }

    /// The names of every input of this option (what `--set` and `--secret` may name); a
    /// bundle's come from its manifest.
    pub fn input_names(&self) -> Vec<String> {
        match self {
            Choice::Bundle(_, bundle) => bundle.manifest.input_names(),
            _ => self.registry_inputs().into_iter().map(|i| i.name).collect(),
        }
    }

    /// The inputs the registry describes for this option (a bundle's package's, not its
    /// manifest's: known without a download).
    pub fn registry_inputs(&self) -> Vec<InputRow> {
        match self {
            Choice::Package(p) | Choice::Bundle(p, _) => tether_registry::package_option(p).inputs,
            Choice::Remote(r) => tether_registry::remote_option(r).inputs,
        }
    }

    /// The names of the inputs whose values go on the server's command line (its runtime and
    /// package arguments, or the variables of an argument's fixed value): visible to every
    /// process of the machine (`/proc/PID/cmdline`), so never a place for a secret. A remote
    /// has none; a bundle's are its registry package's.
    pub fn argument_inputs(&self) -> Vec<String> {
        let package = match self {
            Choice::Package(p) | Choice::Bundle(p, _) => p,
            Choice::Remote(_) => return Vec::new(),
        };
        let mut names = Vec::new();
        for argument in package
            .runtime_arguments
            .iter()
            .chain(&package.package_arguments)
        {
            if argument.input.value.is_some() {
                names.extend(argument.input.variables.keys().cloned());
            } else if argument.kind == "named" {
                names.push(argument.label().to_owned());
            } else {
                names.push(
                    argument
                        .value_hint
                        .clone()
                        .unwrap_or_else(|| argument.label().to_owned()),
                );
            }
        }
        names
    }

    /// The launch config for `answers`; [`BuildError::Missing`] names what is still needed.
    pub fn build(&self, answers: &Answers) -> Result<BuiltConfig, BuildError> {
        match self {
            Choice::Package(p) => package_config(p, answers),
            Choice::Remote(r) => remote_config(r, answers),
            Choice::Bundle(_, bundle) => {
                // `${DESKTOP}` and its kin name the user's own folders.
                let home = std::env::var(tether_env::EnvVars::HOME).unwrap_or_default();
                bundle_config(
                    &bundle.manifest,
                    &bundle.dir.to_string_lossy(),
                    &home,
                    answers,
                )
            }
        }
    }
}

impl Choice<'_> {
    /// `built` with the sandbox its installation runs under (`specs/sandbox/TECH.md` §8) as
    /// its `"sandbox"` key, so that the test-connect and every later start use it: `asked`
    /// (the user's `--sandbox`; a profile's path made absolute, the profile read and checked
    /// now), else `default` for a registry package or bundle — code tether did not write.
    /// A container image (`oci`) gets no key (the container is its sandbox) unless asked; a
    /// remote runs nowhere here, so asking for one is an error.
    pub fn sandboxed(
        &self,
        mut built: BuiltConfig,
        asked: Option<&str>,
    ) -> Result<BuiltConfig, InstallError> {
        let bad = |e: tether_sandbox::SandboxError| InstallError::Sandbox(e.to_string());
        let mode = match (self, asked) {
            (Choice::Remote(_), None) => return Ok(built),
            (Choice::Remote(r), Some(_)) => {
                return Err(InstallError::Sandbox(format!(
                    "the remote {} runs elsewhere; a sandbox applies to a package or bundle",
                    r.url
                )));
            }
            (_, Some(asked)) => {
                let mode = match tether_sandbox::Mode::parse(asked).map_err(bad)? {
                    tether_sandbox::Mode::Profile(path) => tether_sandbox::Mode::Profile(
                        std::path::absolute(&path)
                            .map_err(InstallError::io("reading the profile's path"))?,
                    ),
                    mode => mode,
                };
                mode.policy().map_err(bad)?;
                mode.label()
            }
            // The runner decides, never the registry type: only a container engine's package
            // runs in a container.
            (Choice::Package(p), None) if tether_registry::add::is_container_runner(&runner(p)) => {
                return Ok(built);
            }
            (_, None) => "default".to_owned(),
        };
        built.server["sandbox"] = serde_json::json!(mode);
        Ok(built)
    }
}

/// What a built config's stored sandbox enforces here, for the line after its test-connect:
/// `; sandbox default: files (Landlock 7), …` (`tether_sandbox::assess`), or nothing without
/// one (`none`, a remote, a container image).
pub fn sandbox_note(built: &BuiltConfig) -> String {
    let policy = built.server["sandbox"]
        .as_str()
        .and_then(|mode| tether_sandbox::Mode::parse(mode).ok())
        .and_then(|mode| mode.policy().ok().flatten());
    policy.map_or_else(String::new, |policy| {
        format!("; {}", tether_sandbox::assess(&policy))
    })
}

/// An mcpb package tether downloads itself (one with a runtime hint is run by that runtime).
fn is_bundle(package: &Package) -> bool {
    package.registry_type == "mcpb" && package.runtime_hint.is_none()
}

/// Whether `program` is an executable file in a `PATH` directory.
fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(Path::new(&dir).join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// `asked` (a package type, or `remote`) decides; else the first of [`usable`].
pub fn choose<'a>(server: &'a ServerJson, asked: Option<&str>) -> Result<Choice<'a>, InstallError> {
    let available = server.transports().join(", ");
    if let Some(kind) = asked {
        if kind == "remote" {
            return server.remotes.first().map(Choice::Remote).ok_or_else(|| {
                InstallError::NoRemote {
                    server: server.name.clone(),
                    available,
                }
            });
        }
        return server
            .packages
            .iter()
            .find(|p| p.registry_type == kind)
            .map(Choice::Package)
            .ok_or_else(|| InstallError::NoPackage {
                server: server.name.clone(),
                kind: kind.to_owned(),
                available,
            });
    }
    if let Some(first) = usable(server).into_iter().next() {
        return Ok(first);
    }
    let runners: Vec<String> = server.packages.iter().map(runner).collect();
    Err(InstallError::NothingUsable {
        server: server.name.clone(),
        runners: runners.join(", "),
    })
}

/// What can be used without a wish, in the order preferred: each stdio package whose runner is
/// on `PATH`, then each remote, then each package serving HTTP on a local port whose runner is
/// on `PATH`, then each bundle (downloaded and unpacked before it can even be tried).
pub fn usable(server: &ServerJson) -> Vec<Choice<'_>> {
    server
        .packages
        .iter()
        .filter(|p| p.transport.kind == "stdio" && p.registry_type != "mcpb" && on_path(&runner(p)))
        .map(Choice::Package)
        .chain(server.remotes.iter().map(Choice::Remote))
        .chain(
            server
                .packages
                .iter()
                .filter(|p| p.transport.kind != "stdio" && !is_bundle(p) && on_path(&runner(p)))
                .map(Choice::Package),
        )
        .chain(
            server
                .packages
                .iter()
                .filter(|p| is_bundle(p))
                .map(Choice::Package),
        )
        .collect()
}

/// The local name an entry installs under: the part after its last `/`.
pub fn local_name(server: &ServerJson) -> String {
    server
        .name
        .rsplit('/')
        .next()
        .unwrap_or(&server.name)
        .to_owned()
}
