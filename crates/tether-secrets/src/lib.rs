//! tether's secret store: the values of local installations' secrets, keyed by installation
//! UUID and variable name, kept out of the SQLite store.
//!
//! Two backends, one per [`Location`]:
//!
//! - [`Location::Keyring`]: the OS credential store through the `keyring` crate — the Secret
//!   Service (D-Bus, e.g. gnome-keyring or KeePassXC) on Linux, the Keychain on macOS, the
//!   Credential Manager on Windows. Service `tether`, account `<uuid>/<NAME>`.
//! - [`Location::File`]: `secrets.json` in the data directory, mode 0600, written atomically
//!   (a fresh `O_EXCL` 0600 temp file renamed over it, under a lock), refused when it is a
//!   link, not a regular file, owned by another user or open to group/others. Not encrypted:
//!   it is the fallback where no credential store is reachable (a headless Linux machine
//!   without a Secret Service), and the first write to it yields a notice
//!   ([`SecretStore::take_notice`]) that says where the values are and how to move them.
//!
//! [`Preference::Auto`] probes the credential store once per process, bounded by
//! [`PROBE_TIMEOUT`], and uses the file when it does not answer. The SQLite store records
//! which location each value lives in, so reading a value never probes.
//!
//! ```no_run
//! use tether_secrets::{Preference, SecretStore};
//! # fn main() -> Result<(), tether_secrets::SecretStoreError> {
//! let store = SecretStore::new(std::path::Path::new("/home/me/.local/share/tether"), Preference::Auto);
//! let uid = uuid::Uuid::new_v4();
//! let location = store.set(uid, "API_TOKEN", &"sk-…".into())?;
//! assert!(store.get(location, uid, "API_TOKEN")?.is_some());
//! store.delete(location, uid, "API_TOKEN")?;
//! # Ok(()) }
//! ```
//!
//! **Invariant:** a value is only ever a [`SecretValue`] here (zeroed on drop, masked in
//! `Debug`); no error, log line or `Debug` print holds one; the file backend writes nothing but
//! its own 0600 file.

#![deny(missing_docs)]

mod file;
mod os;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

pub use tether_secret::SecretValue;
use uuid::Uuid;

/// The fallback file's name in the data directory.
pub const FILE_NAME: &str = "secrets.json";

/// How long [`Preference::Auto`] waits for the credential store to answer a probe.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// How long one credential-store operation may take (a locked keyring that pops up a prompt
/// nobody answers must not hang tether).
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(20);

/// Which backend new values go to (`TETHER_SECRET_STORE`, `secret_store` in config.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preference {
    /// The credential store when it answers a probe, else the file (with a notice).
    #[default]
    Auto,
    /// The credential store; an error when it is not reachable.
    Keyring,
    /// The 0600 file in the data directory.
    File,
}

impl Preference {
    /// The word for it in settings.
    pub fn as_str(self) -> &'static str {
        match self {
            Preference::Auto => "auto",
            Preference::Keyring => "keyring",
            Preference::File => "file",
        }
    }
}

impl FromStr for Preference {
    type Err = SecretStoreError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "auto" | "" => Ok(Preference::Auto),
            "keyring" => Ok(Preference::Keyring),
            "file" => Ok(Preference::File),
            other => Err(SecretStoreError::InvalidPreference {
                given: other.to_owned(),
            }),
        }
    }
}

/// Where one value lives; the SQLite store records it beside the value's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Location {
    /// The OS credential store.
    Keyring,
    /// The 0600 file in the data directory.
    File,
}

impl Location {
    /// The word stored for it (and shown by `tether secrets list`).
    pub fn as_str(self) -> &'static str {
        match self {
            Location::Keyring => "keyring",
            Location::File => "file",
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Location {
    type Err = SecretStoreError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "keyring" => Ok(Location::Keyring),
            "file" => Ok(Location::File),
            other => Err(SecretStoreError::InvalidPreference {
                given: other.to_owned(),
            }),
        }
    }
}

/// Why a secret-store operation failed. No variant holds a value.
#[derive(Debug, thiserror::Error)]
pub enum SecretStoreError {
    /// A backend name that is not `auto`, `keyring` or `file` (from `TETHER_SECRET_STORE`,
    /// config.toml or a stored row). The user fixes the setting.
    #[error("unknown secret store {given:?}: expected auto, keyring or file")]
    InvalidPreference {
        /// What was given.
        given: String,
    },
    /// `keyring` was asked for (or a value lives there) and no credential store answered.
    /// The user starts one (a Secret Service on Linux) or chooses `file`.
    #[error(
        "the OS credential store is not reachable: {reason}; start one (on Linux a Secret Service such as gnome-keyring, unlocked, on the D-Bus session bus) or set {var}=file",
        var = tether_env::EnvVars::TETHER_SECRET_STORE
    )]
    KeyringUnavailable {
        /// What the probe or the operation said (never a value).
        reason: String,
    },
    /// The credential store answered with an error.
    #[error("the OS credential store failed to {operation} {account}: {reason}")]
    Keyring {
        /// What was being done (`read`, `store`, `delete`).
        operation: &'static str,
        /// The entry (`<uuid>/<NAME>`).
        account: String,
        /// The store's error (never a value).
        reason: String,
    },
    /// The file or its directory is unsafe (another user could read or write it) or could not
    /// be created; the message names the fix.
    #[error(transparent)]
    Unsafe(#[from] tether_sqlite::OpenError),
    /// Reading or writing the file failed.
    #[error("the secret file {path} failed: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file does not decode (edited by hand, truncated by a full disk…). The user moves
    /// it away and sets the secrets again.
    #[error(
        "the secret file {path} cannot be read ({reason}); move it away and set the secrets again with `tether secrets set`"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What did not decode (never a value).
        reason: String,
    },
}

/// The secret store of one data directory. Cheap to create: the credential store is probed
/// only when a value is first written with [`Preference::Auto`].
pub struct SecretStore {
    dir: PathBuf,
    preference: Preference,
    /// The location new values go to, decided once.
    chosen: OnceLock<Result<Location, String>>,
    /// Set when this process created the file; taken once by [`SecretStore::take_notice`].
    notice: Mutex<Option<String>>,
}

impl std::fmt::Debug for SecretStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretStore")
            .field("dir", &self.dir)
            .field("preference", &self.preference)
            .finish_non_exhaustive()
    }
}

impl SecretStore {
    /// The store for the data directory `dir`.
    pub fn new(dir: &Path, preference: Preference) -> Self {
        Self {
            dir: dir.to_owned(),
            preference,
            chosen: OnceLock::new(),
            notice: Mutex::new(None),
        }
    }

    /// The fallback file's path.
    pub fn file_path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// The preference it was created with.
    pub fn preference(&self) -> Preference {
        self.preference
    }

    /// Where new values go: decided on first call (for `auto`, by a probe bounded by
    /// [`PROBE_TIMEOUT`]) and kept for the process.
    pub fn location(&self) -> Result<Location, SecretStoreError> {
        let chosen = self.chosen.get_or_init(|| match self.preference {
            Preference::File => Ok(Location::File),
            Preference::Keyring => os::probe().map(|()| Location::Keyring),
            Preference::Auto => match os::probe() {
                Ok(()) => Ok(Location::Keyring),
                Err(reason) => {
                    tracing::debug!(%reason, "no OS credential store; secrets go to the file");
                    Ok(Location::File)
                }
            },
        });
        chosen
            .clone()
            .map_err(|reason| SecretStoreError::KeyringUnavailable { reason })
    }

    /// Stores `value` for (`uid`, `name`) where new values go, replacing one there, and
    /// returns that location.
    pub fn set(
        &self,
        uid: Uuid,
        name: &str,
        value: &SecretValue,
    ) -> Result<Location, SecretStoreError> {
        let location = self.location()?;
        self.set_in(location, uid, name, value)?;
        Ok(location)
    }

    /// Stores `value` for (`uid`, `name`) in `location`.
    pub fn set_in(
        &self,
        location: Location,
        uid: Uuid,
        name: &str,
        value: &SecretValue,
    ) -> Result<(), SecretStoreError> {
        match location {
            Location::Keyring => os::set(&account(uid, name), value),
            Location::File => {
                let created = file::update(&self.dir, |contents| {
                    contents.insert(uid, name, value);
                })?;
                if created {
                    self.announce_file();
                }
                Ok(())
            }
        }
    }

    /// The value for (`uid`, `name`) in `location`, if there is one.
    pub fn get(
        &self,
        location: Location,
        uid: Uuid,
        name: &str,
    ) -> Result<Option<SecretValue>, SecretStoreError> {
        match location {
            Location::Keyring => os::get(&account(uid, name)),
            Location::File => Ok(file::read(&self.dir)?.and_then(|c| c.get(uid, name))),
        }
    }

    /// Deletes the value for (`uid`, `name`) in `location`; whether there was one.
    pub fn delete(
        &self,
        location: Location,
        uid: Uuid,
        name: &str,
    ) -> Result<bool, SecretStoreError> {
        match location {
            Location::Keyring => os::delete(&account(uid, name)),
            Location::File => {
                if !self.file_path().exists() {
                    return Ok(false);
                }
                let mut removed = false;
                file::update(&self.dir, |contents| removed = contents.remove(uid, name))?;
                Ok(removed)
            }
        }
    }

    /// Deletes every value in the file whose installation `keep` rejects (the sweep of
    /// secrets a killed `tether add` wrote before its installation was committed). Returns
    /// how many values went.
    pub fn sweep_file(&self, keep: impl Fn(Uuid) -> bool) -> Result<usize, SecretStoreError> {
        if !self.file_path().exists() {
            return Ok(0);
        }
        let mut removed = 0;
        file::update(&self.dir, |contents| removed = contents.retain(&keep))?;
        Ok(removed)
    }

    /// The one-time notice after this process created the file: where the values are and
    /// how to move them. `None` afterwards, and when no file was created.
    pub fn take_notice(&self) -> Option<String> {
        self.notice
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    fn announce_file(&self) {
        let reason = match self.preference {
            Preference::File => format!(
                "{}=file (or secret_store = \"file\" in config.toml) chose it",
                tether_env::EnvVars::TETHER_SECRET_STORE
            ),
            _ => "no OS credential store (Secret Service, Keychain, Credential Manager) answered"
                .to_owned(),
        };
        let text = format!(
            "notice: secrets are now stored in {path} (mode 0600, NOT encrypted: anyone who can read that file as you can read them), because {reason}. \
To move them into the OS credential store, make one reachable (on Linux: a Secret Service such as gnome-keyring, unlocked, on the D-Bus session bus) and run `tether secrets move keyring`; \
`tether secrets list` shows what is stored where.",
            path = self.file_path().display()
        );
        *self
            .notice
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(text);
    }
}

/// The credential store's account name for a value.
fn account(uid: Uuid, name: &str) -> String {
    format!("{uid}/{name}")
}
