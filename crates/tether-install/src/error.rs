//! The one error type of the install steps.

use std::path::PathBuf;

/// Why a step of [`crate::choose`], [`crate::bundle::fetch`], [`crate::test_connect`] or
/// [`crate::install_built`] failed. Messages name entries, URLs, paths and digests, never a
/// value. [`InstallError::is_bad_input`] tells the caller's input (an entry or a flag that
/// cannot work: exit 2 in the CLI) from a failure along the way.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// [`crate::choose`]: `remote` was asked for and the entry has none. Bad input: the caller
    /// names what the entry has (the message lists it).
    #[error("{server} has no remote (it has: {available})")]
    NoRemote {
        /// The entry's name.
        server: String,
        /// Its transports, comma-separated.
        available: String,
    },

    /// [`crate::choose`]: a package type was asked for and the entry has none of it. Bad
    /// input, as [`InstallError::NoRemote`].
    #[error("{server} has no {kind} package (it has: {available})")]
    NoPackage {
        /// The entry's name.
        server: String,
        /// The package type asked for.
        kind: String,
        /// Its transports, comma-separated.
        available: String,
    },

    /// [`crate::choose`] without a wish: no remote, and no package whose runner is on `PATH`.
    /// Bad input: the person installs a runner or picks a package.
    #[error(
        "{server} has no remote and none of its packages' runners is on PATH ({runners}); install one, or pick a package with --package"
    )]
    NothingUsable {
        /// The entry's name.
        server: String,
        /// The runners its packages need, comma-separated.
        runners: String,
    },

    /// [`crate::bundle::fetch`]: the registry gives no SHA-256 (64 hex digits) for the
    /// bundle, and tether installs nothing it cannot verify. Bad input (the entry).
    #[error(
        "the registry gives no valid fileSha256 for the bundle {url}; tether installs only bundles it can verify"
    )]
    BundleUnverifiable {
        /// The bundle's address.
        url: String,
    },

    /// [`crate::bundle::fetch`]: the bundle's identifier is not a URL. Bad input (the entry).
    #[error("the bundle's address {url:?} is not a URL")]
    BundleNotUrl {
        /// The identifier.
        url: String,
    },

    /// [`crate::bundle::fetch`]: the bundle is not on https (plain http is taken from a
    /// loopback host only). Bad input (the entry).
    #[error("the bundle's address {url} is not https; tether downloads bundles over https only")]
    BundleNotHttps {
        /// The bundle's address.
        url: String,
    },

    /// [`crate::bundle::fetch`]: `$TETHER_HOME/bundles` could not be made a private
    /// directory (another user owns or can write it; the message says how to fix it).
    #[error(transparent)]
    BundlesDir(#[from] tether_sqlite::OpenError),

    /// A file or directory could not be created, written or read (`doing` says which); the
    /// caller reports it, nothing was installed.
    #[error("{doing}")]
    Io {
        /// What was being done, naming the path.
        doing: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },

    /// [`crate::bundle::fetch`]: the HTTP client could not be built (no TLS roots).
    #[error("building the HTTP client")]
    HttpClient(#[source] reqwest::Error),

    /// [`crate::bundle::fetch`]: the download did not start, or the server did not answer
    /// 2xx (`reason` says which). The caller reports it; trying again later may work.
    #[error("cannot download the bundle {url}: {reason}")]
    Download {
        /// The bundle's address.
        url: String,
        /// The innermost cause, or the status the server answered.
        reason: String,
    },

    /// [`crate::bundle::fetch`]: the download broke off. As [`InstallError::Download`].
    #[error("downloading the bundle {url}: {reason}")]
    DownloadBroken {
        /// The bundle's address.
        url: String,
        /// The innermost cause.
        reason: String,
    },

    /// [`crate::bundle::fetch`]: the bundle is larger than [`crate::bundle::MAX_DOWNLOAD`];
    /// nothing was kept.
    #[error("the bundle {url} is larger than {mib} MiB; not installed")]
    BundleTooLarge {
        /// The bundle's address.
        url: String,
        /// The limit in MiB.
        mib: u64,
    },

    /// [`crate::bundle::fetch`]: the downloaded bytes are not the ones the registry
    /// describes; nothing was kept. The caller reports it (the bundle or the entry changed).
    #[error(
        "the bundle downloaded from {url} has SHA-256 {actual}, but the registry says {expected}; nothing was installed"
    )]
    ChecksumMismatch {
        /// The bundle's address.
        url: String,
        /// The digest of what was downloaded.
        actual: String,
        /// The registry's `fileSha256`.
        expected: String,
    },

    /// [`crate::bundle::fetch`]: the bundle's signature is not what the policy accepts.
    #[error("the bundle {url} was not installed: {reason}")]
    BundleSignature {
        /// The bundle's address.
        url: String,
        /// The verdict and what to do ([`crate::signature::Policy::refusal`]).
        reason: String,
    },

    /// [`crate::bundle::fetch`]: the unpacking task panicked or was cancelled.
    #[error("unpacking the bundle")]
    UnpackTask(#[source] tokio::task::JoinError),

    /// [`crate::bundle::fetch`]: the bundle is not a zip archive.
    #[error("the bundle is not a zip archive")]
    NotZip(#[source] zip::result::ZipError),

    /// [`crate::bundle::fetch`]: an entry of the archive cannot be read (`doing` names it).
    #[error("{doing}")]
    Zip {
        /// What was being read.
        doing: String,
        /// Why it failed.
        #[source]
        source: zip::result::ZipError,
    },

    /// [`crate::bundle::fetch`]: the archive holds more than [`crate::bundle::MAX_ENTRIES`]
    /// entries; nothing was kept.
    #[error("the bundle holds {count} entries (at most {max}); not installed")]
    TooManyEntries {
        /// How many it holds.
        count: usize,
        /// The limit.
        max: usize,
    },

    /// [`crate::bundle::fetch`]: an entry's name is absolute or climbs out with `..`
    /// (zip-slip); nothing was kept.
    #[error("the bundle's entry {entry:?} points outside the bundle; not installed")]
    OutsideBundle {
        /// The entry's name as the archive gives it.
        entry: String,
    },

    /// [`crate::bundle::fetch`]: two entries share a name (zip tools disagree on which one an
    /// unpacked bundle holds); nothing was kept.
    #[error("the bundle names its entry {entry:?} twice; not installed")]
    DuplicateEntry {
        /// The name, as the archive gives it.
        entry: String,
    },

    /// [`crate::bundle::fetch`]: an entry is a symbolic link; nothing was kept.
    #[error("the bundle's entry {entry:?} is a symbolic link; not installed")]
    Symlink {
        /// The entry's name.
        entry: String,
    },

    /// [`crate::bundle::fetch`]: the archive unpacks to more than
    /// [`crate::bundle::MAX_UNPACKED`] bytes; nothing was kept.
    #[error("the bundle unpacks to more than {mib} MiB; not installed")]
    UnpackedTooLarge {
        /// The limit in MiB.
        mib: u64,
    },

    /// [`crate::bundle::fetch`]: the unpacked bundle has no `manifest.json` that can be read.
    #[error("the bundle {url} has no readable manifest.json: {reason}")]
    ManifestUnreadable {
        /// The bundle's address.
        url: String,
        /// Why it cannot be read.
        reason: String,
    },

    /// [`crate::bundle::fetch`]: the bundle's `manifest.json` is not a valid manifest.
    #[error("the bundle {url} has an invalid manifest.json: {reason}")]
    ManifestInvalid {
        /// The bundle's address.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// [`crate::bundle::fetch`]: the unpacked directory could not be renamed into place;
    /// nothing was kept.
    #[error("cannot move the unpacked bundle to {}: {error}", dir.display())]
    BundleMove {
        /// Where it was to go.
        dir: PathBuf,
        /// Why the rename failed.
        error: std::io::Error,
    },

    /// [`crate::test_connect`]: the driver refused the built config or could not start it
    /// (its own error, which says which).
    #[error(transparent)]
    Driver(#[from] tether_driver::DriverError),

    /// [`crate::install_built`]: the built config does not parse (tether built it, so this
    /// is a bug of the builder).
    #[error(transparent)]
    Config(#[from] tether_config::ConfigError),

    /// [`crate::install_built`]: the built config holds no server, or several.
    #[error("the built config does not hold exactly one server")]
    NotOneServer,

    /// [`crate::install_built`]: the local store or the secret store refused the write;
    /// nothing was stored.
    #[error(transparent)]
    Store(#[from] tether_store::StoreError),

    /// [`crate::Choice::sandboxed`]: the sandbox asked for is not a valid mode (a profile that
    /// cannot be read or parsed), or was asked for a remote, which runs nowhere here.
    #[error("--sandbox: {0}")]
    Sandbox(String),
}

impl InstallError {
    /// Whether the caller's input is at fault — the entry, or what was asked of it — rather
    /// than something along the way: the CLI exits 2 for these.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Self::NoRemote { .. }
                | Self::NoPackage { .. }
                | Self::NothingUsable { .. }
                | Self::BundleUnverifiable { .. }
                | Self::BundleNotUrl { .. }
                | Self::BundleNotHttps { .. }
                | Self::BundleSignature { .. }
                | Self::Sandbox(_)
        )
    }

    /// An [`InstallError::Io`] naming what was being done.
    pub(crate) fn io(doing: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let doing = doing.into();
        move |source| Self::Io { doing, source }
    }
}
