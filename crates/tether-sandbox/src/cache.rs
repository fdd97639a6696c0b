//! A package runner's cache for a sandboxed server (`specs/sandbox/TECH.md` §8): a server
//! started through `npx`, `npm exec`, `uvx`, `uv` or `pipx` finds no cache in its private
//! home and would download its package on every start; the user's own cache (`~/.npm`,
//! `~/.cache/uv`) is not granted — writable, it would let one server replace another's
//! packages, or the user's. So each package gets a cache of its own, kept between runs
//! under the user's cache directory (`~/.cache/tether/sandbox/RUNNER-PACKAGE`), read-write
//! to the servers of that package alone, and the runner's variables point at it.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// A package's own cache and the variables that point its runner at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageCache {
    /// The directory (granted read-write; made by the caller).
    pub dir: PathBuf,
    /// Variables to set for the server, each a directory inside [`PackageCache::dir`].
    pub env: Vec<(&'static str, PathBuf)>,
}

/// A runner's variables: name, and the subdirectory of the cache it points at.
type Vars = &'static [(&'static str, &'static str)];

/// Runners by program name: the cache's prefix and its variables.
const RUNNERS: [(&str, &str, Vars); 5] = [
    ("npx", "npm", &[("npm_config_cache", "")]),
    ("npm", "npm", &[("npm_config_cache", "")]),
    (
        "uvx",
        "uv",
        &[
            ("UV_CACHE_DIR", "cache"),
            ("UV_PYTHON_INSTALL_DIR", "python"),
        ],
    ),
    (
        "uv",
        "uv",
        &[
            ("UV_CACHE_DIR", "cache"),
            ("UV_PYTHON_INSTALL_DIR", "python"),
        ],
    ),
    ("pipx", "pipx", &[("PIPX_HOME", "")]),
];

/// Words of a runner's command line that are not the package (`npm exec`, `uv tool run`).
const VERBS: [&str; 4] = ["exec", "x", "run", "tool"];

/// Variables that change what a runner or a runtime loads and runs (options, module and
/// library paths, preloads, the runner's own settings): part of a cache's key, so that a
/// server launched like another but with, say, `NODE_OPTIONS=--require evil.js` does not share
/// (and poison) its cache. Other variables (a server's API token) are not: they change what
/// the server does, not the code the cache holds. Names ending in `*` are prefixes.
const CODE_VARIABLES: [&str; 20] = [
    "NODE_OPTIONS",
    "NODE_PATH",
    "NODE_EXTRA_CA_CERTS",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PERL5OPT",
    "PERL5LIB",
    "RUBYOPT",
    "RUBYLIB",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "npm_config_*",
    "NPM_CONFIG_*",
    "UV_*",
    "PIP_*",
    "PIPX_*",
    "BUN_*",
    "DENO_*",
];

/// Whether `name` is one of [`CODE_VARIABLES`].
fn loads_code(name: &str) -> bool {
    CODE_VARIABLES
        .iter()
        .any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *pattern,
        })
}

/// The cache `program args` gets under `root` (the user's cache directory's
/// `tether/sandbox`), when `program` is a package runner; `None` otherwise. The package is the
/// first argument that is neither a flag nor a verb; its name, made safe for a file name
/// (letters, digits, `@._+=-`, the rest `_`) after the runner's prefix, and 16 hex digits of
/// the SHA-256 of the whole command line name the directory: a package identifier is chosen
/// by whoever published the entry, so another entry naming the same package with other
/// arguments (`npx --call=… -y pkg@1`) gets a cache of its own, not the legitimate server's;
/// so does one whose environment `env` (the server's, as it will start) sets any of
/// [`CODE_VARIABLES`] otherwise — the runner's own cache variables, which tether sets, aside.
pub fn package_cache(
    program: &OsStr,
    args: &[OsString],
    env: &[(OsString, OsString)],
    root: &Path,
) -> Option<PackageCache> {
    use sha2::Digest as _;
    let name = Path::new(program).file_name()?.to_str()?;
    let (_, prefix, vars) = RUNNERS.iter().find(|(runner, ..)| *runner == name)?;
    let package = args
        .iter()
        .filter_map(|arg| arg.to_str())
        .find(|arg| !arg.starts_with('-') && !VERBS.contains(arg))
        .unwrap_or("default");
    let safe: String = package
        .chars()
        .take(80)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "@._+=-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut digest = sha2::Sha256::new();
    for word in std::iter::once(OsStr::new(name)).chain(args.iter().map(OsString::as_os_str)) {
        digest.update(word.as_encoded_bytes());
        digest.update([0]);
    }
    let mut loading: Vec<&(OsString, OsString)> = env
        .iter()
        .filter(|(name, _)| {
            name.to_str()
                .is_some_and(|name| loads_code(name) && !vars.iter().any(|(own, _)| *own == name))
        })
        .collect();
    loading.sort();
    if !loading.is_empty() {
        digest.update(b"\0env\0");
    }
    for (name, value) in loading {
        digest.update(name.as_encoded_bytes());
        digest.update([b'=']);
        digest.update(value.as_encoded_bytes());
        digest.update([0]);
    }
    let line: String = digest.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = root.join(format!("{prefix}-{safe}-{line}"));
    let env = vars
        .iter()
        .map(|(var, sub)| {
            (
                *var,
                if sub.is_empty() {
                    dir.clone()
                } else {
                    dir.join(sub)
                },
            )
        })
        .collect();
    Some(PackageCache { dir, env })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(program: &str, args: &[&str]) -> Option<PackageCache> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        package_cache(OsStr::new(program), &args, &[], Path::new("/c"))
    }

    /// The directory's name without its digest, and the digest.
    fn named(cache: &PackageCache) -> (String, String) {
        let name = cache.dir.file_name().expect("a name").to_string_lossy();
        let (package, line) = name.rsplit_once('-').expect("a digest");
        assert_eq!(cache.dir.parent(), Some(Path::new("/c")));
        (package.to_owned(), line.to_owned())
    }

    #[test]
    fn a_runner_gets_a_cache_per_package_and_other_programs_none() {
        let npx = cache("/usr/bin/npx", &["-y", "@scope/pkg@1.2.3", "--flag"]).expect("npx");
        assert_eq!(named(&npx).0, "npm-@scope_pkg@1.2.3");
        assert_eq!(named(&npx).1.len(), 16);
        assert_eq!(npx.env, [("npm_config_cache", npx.dir.clone())]);
        let uvx = cache("uvx", &["mcp-server-git==1.0"]).expect("uvx");
        assert_eq!(named(&uvx).0, "uv-mcp-server-git==1.0");
        assert_eq!(
            uvx.env.first(),
            Some(&("UV_CACHE_DIR", uvx.dir.join("cache")))
        );
        let exec = cache("npm", &["exec", "--yes", "pkg"]).expect("npm exec");
        assert_eq!(named(&exec).0, "npm-pkg");
        // Nothing in a package's name leaves the root.
        let odd = cache("npx", &["../../etc/x y"]).expect("npx");
        assert_eq!(named(&odd).0, "npm-.._.._etc_x_y");
        let dot = cache("npx", &[".."]).expect("npx");
        assert_eq!(named(&dot).0, "npm-..");
        assert_eq!(cache("node", &["server.js"]), None);
    }

    #[test]
    fn another_command_line_for_the_same_package_gets_another_cache() {
        let legitimate = cache(
            "npx",
            &["-y", "@modelcontextprotocol/server-github@2025.4.8"],
        );
        let again = cache(
            "npx",
            &["-y", "@modelcontextprotocol/server-github@2025.4.8"],
        );
        let hostile = cache(
            "npx",
            &[
                "--call=node poison.js",
                "-y",
                "@modelcontextprotocol/server-github@2025.4.8",
            ],
        );
        assert_eq!(legitimate, again, "the same launch keeps its cache");
        let (legitimate, hostile) = (legitimate.expect("npx"), hostile.expect("npx"));
        assert_eq!(named(&legitimate).0, named(&hostile).0);
        assert_ne!(legitimate.dir, hostile.dir);
    }

    #[test]
    fn the_same_command_line_with_code_loading_variables_gets_another_cache() {
        let line = ["-y", "@modelcontextprotocol/server-github@2025.4.8"].map(OsString::from);
        let with = |env: &[(&str, &str)]| {
            let env: Vec<(OsString, OsString)> = env
                .iter()
                .map(|(name, value)| (OsString::from(name), OsString::from(value)))
                .collect();
            package_cache(OsStr::new("npx"), &line, &env, Path::new("/c")).expect("npx")
        };
        let plain = with(&[]);
        // A server's own secret or setting changes nothing of the code: the same cache.
        assert_eq!(with(&[("GITHUB_TOKEN", "ghp_x"), ("LOG", "1")]), plain);
        // tether's own cache variable is not part of the key.
        assert_eq!(with(&[("npm_config_cache", "/elsewhere")]), plain);
        // What loads code does change it, and by its value.
        let poisoned = with(&[("NODE_OPTIONS", "--require /tmp/evil.js")]);
        assert_ne!(poisoned.dir, plain.dir);
        assert_eq!(named(&poisoned).0, named(&plain).0);
        let other = with(&[("NODE_OPTIONS", "--require /tmp/other.js")]);
        assert_ne!(other.dir, poisoned.dir);
        assert_ne!(
            with(&[("npm_config_registry", "http://127.0.0.1:1")]).dir,
            plain.dir
        );
        assert_ne!(with(&[("PYTHONPATH", "/tmp")]).dir, plain.dir);
        // Order does not matter.
        assert_eq!(
            with(&[("NODE_OPTIONS", "a"), ("PYTHONPATH", "b")]),
            with(&[("PYTHONPATH", "b"), ("NODE_OPTIONS", "a")])
        );
    }
}
