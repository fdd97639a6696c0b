//! The npm packages the tests use, installed once into one prefix by however many test
//! processes ask at the same time.
//!
//! The pinned list is `npm-packages.txt` at the crate root (`.ci/run` installs the same file).
//! A test asking for a package takes an exclusive `flock` on `<prefix>/.tether-install.lock`
//! (test binaries are separate processes; the lock is per open file, so threads of one
//! process exclude each other too), checks again under the lock, and when any package is
//! missing or at another version installs the whole list in one `npm install`. A second
//! install never runs beside the first, so no test sees a half-written `node_modules`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The pinned list, one `name@version bin` a line (`#` starts a comment).
pub const NPM_PACKAGES_FILE: &str = include_str!("../npm-packages.txt");

/// One pinned npm package the tests use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NpmPackage {
    /// `name@version`, as given to `npm install`.
    pub spec: &'static str,
    /// The executable it puts in `node_modules/.bin/`.
    pub bin: &'static str,
}

impl NpmPackage {
    /// The package name and pinned version (`@scope/name@1.2.3` → `@scope/name`, `1.2.3`).
    pub fn name_and_version(&self) -> (&'static str, &'static str) {
        match self.spec.rsplit_once('@') {
            Some((name, version)) if !name.is_empty() => (name, version),
            _ => panic!("npm-packages.txt: {:?} has no @version", self.spec),
        }
    }
}

/// Every package of [`NPM_PACKAGES_FILE`], in file order.
pub fn npm_packages() -> Vec<NpmPackage> {
    NPM_PACKAGES_FILE
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some(spec), Some(bin), None) => NpmPackage { spec, bin },
                _ => panic!("npm-packages.txt: expected `name@version bin`, got {line:?}"),
            }
        })
        .collect()
}

/// The npm prefix the tests install packages into: `$TETHER_NPM_PREFIX`, else the repository's
/// `.cache/npm` (where `.ci/run` installs them).
pub fn npm_prefix() -> PathBuf {
    std::env::var_os(tether_env::EnvVars::TETHER_NPM_PREFIX)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.cache/npm"))
}

/// `node_modules/.bin/<bin>` of the pinned package providing `bin`, after every package of the
/// list is installed into [`npm_prefix`]. `None`, with a printed notice, only when npm itself
/// is absent; an install that fails is a test failure, never a silent skip. Panics when no
/// pinned package provides `bin`.
pub fn npm_bin(bin: &str) -> Option<PathBuf> {
    let packages = npm_packages();
    let Some(package) = packages.iter().find(|p| p.bin == bin) else {
        panic!("no package in npm-packages.txt provides {bin:?}");
    };
    if !ensure_installed() {
        crate::missing(
            "npm",
            &format!("it installs {} for this test", package.spec),
        );
        return None;
    }
    let path = npm_prefix().join("node_modules/.bin").join(bin);
    assert!(
        path.exists(),
        "npm installed {} but {} is missing",
        package.spec,
        path.display()
    );
    Some(path)
}

/// Installs the whole list once per process (see the module docs); `false` when npm is absent.
fn ensure_installed() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(|| install_all(&npm_prefix(), &npm_packages()))
}

/// Takes the prefix's install lock, then installs `packages` in one `npm install` unless they
/// are all present at their pinned versions. `false` when npm is absent.
fn install_all(prefix: &Path, packages: &[NpmPackage]) -> bool {
    std::fs::create_dir_all(prefix)
        .unwrap_or_else(|e| panic!("cannot create the npm prefix {}: {e}", prefix.display()));
    let lock_path = prefix.join(".tether-install.lock");
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", lock_path.display()));
    // Blocks while another test process installs; released when `lock` drops.
    lock.lock()
        .unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock_path.display()));
    // Checked again under the lock: the process that held it may have installed everything.
    if packages.iter().all(|p| is_installed(prefix, p)) {
        return true;
    }
    if Command::new("npm")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        return false;
    }
    let specs: Vec<&str> = packages.iter().map(|p| p.spec).collect();
    eprintln!(
        "installing the tests' npm packages into {} (about 1.1 GB, once): {}",
        prefix.display(),
        specs.join(" ")
    );
    // A temp HOME: some packages' install scripts write into HOME.
    let home = std::env::temp_dir().join(format!("tether-npm-home-{}", std::process::id()));
    let status = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "--prefix",
        ])
        .arg(prefix)
        .args(&specs)
        .env("HOME", &home)
        .status()
        .unwrap_or_else(|e| panic!("npm install failed to start: {e}"));
    let _ = std::fs::remove_dir_all(&home);
    assert!(status.success(), "npm install {} failed", specs.join(" "));
    for package in packages {
        assert!(
            is_installed(prefix, package),
            "npm install succeeded but {} is not installed in {}",
            package.spec,
            prefix.display()
        );
    }
    true
}

/// `package` is in `prefix` at its pinned version, with its executable.
fn is_installed(prefix: &Path, package: &NpmPackage) -> bool {
    let (name, version) = package.name_and_version();
    let manifest = prefix.join("node_modules").join(name).join("package.json");
    let installed_version = std::fs::read(&manifest)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .and_then(|json| json.get("version")?.as_str().map(str::to_owned));
    installed_version.as_deref() == Some(version)
        && prefix.join("node_modules/.bin").join(package.bin).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_parses_with_unique_executables() {
        let packages = npm_packages();
        assert!(packages.len() >= 5, "{packages:?}");
        for package in &packages {
            let (name, version) = package.name_and_version();
            assert!(!name.is_empty() && !version.is_empty(), "{package:?}");
            assert!(
                version.chars().all(|c| c.is_ascii_digit() || c == '.'),
                "{} is not pinned to an exact version",
                package.spec
            );
        }
        let mut bins: Vec<&str> = packages.iter().map(|p| p.bin).collect();
        bins.sort_unstable();
        bins.dedup();
        assert_eq!(
            bins.len(),
            packages.len(),
            "two packages name one executable"
        );
    }

    #[test]
    fn scoped_names_keep_their_scope() {
        let package = NpmPackage {
            spec: "@scope/name@1.2.3",
            bin: "name",
        };
        assert_eq!(package.name_and_version(), ("@scope/name", "1.2.3"));
    }

    #[test]
    fn ci_installs_the_same_list() {
        let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.ci/run"))
            .expect("reading .ci/run");
        assert!(
            ci.contains("crates/tether-testkit/npm-packages.txt"),
            ".ci/run does not install from crates/tether-testkit/npm-packages.txt"
        );
    }
}
