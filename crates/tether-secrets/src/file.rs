//! The fallback backend: `secrets.json` in the data directory, 0600.
//!
//! Every change is read-modify-write under an exclusive `flock` on `secrets.json.lock`, and
//! lands through `tether_fs::write_private` (a fresh temp file, `O_CREAT | O_EXCL |
//! O_NOFOLLOW`, 0600, synced, renamed over the file, the directory synced), so a reader or a
//! killed writer never sees half a file. An existing file that is a
//! link, not a regular file, owned by another user, or open to group or others is refused.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use tether_secret::SecretValue;
use uuid::Uuid;
use zeroize::Zeroizing;

use crate::{FILE_NAME, SecretStoreError};

/// The file's version; a newer one is refused rather than rewritten without what it added.
const VERSION: u32 = 1;

/// The file's contents: values by installation and name.
#[derive(Default)]
pub(crate) struct Contents {
    secrets: BTreeMap<Uuid, BTreeMap<String, SecretValue>>,
}

#[derive(Deserialize)]
struct Raw {
    version: u32,
    #[serde(default)]
    secrets: BTreeMap<String, BTreeMap<String, String>>,
}

#[derive(Serialize)]
struct RawRef<'a> {
    version: u32,
    secrets: BTreeMap<String, BTreeMap<&'a str, &'a str>>,
}

impl Contents {
    pub(crate) fn get(&self, uid: Uuid, name: &str) -> Option<SecretValue> {
        self.secrets.get(&uid)?.get(name).cloned()
    }

    pub(crate) fn insert(&mut self, uid: Uuid, name: &str, value: &SecretValue) {
        self.secrets
            .entry(uid)
            .or_default()
            .insert(name.to_owned(), value.clone());
    }

    pub(crate) fn remove(&mut self, uid: Uuid, name: &str) -> bool {
        let Some(values) = self.secrets.get_mut(&uid) else {
            return false;
        };
        let removed = values.remove(name).is_some();
        if values.is_empty() {
            self.secrets.remove(&uid);
        }
        removed
    }

    /// Keeps the installations `keep` accepts; returns how many values went.
    pub(crate) fn retain(&mut self, keep: &impl Fn(Uuid) -> bool) -> usize {
        let mut removed = 0;
        self.secrets.retain(|uid, values| {
            let kept = keep(*uid);
            if !kept {
                removed += values.len();
            }
            kept
        });
        removed
    }

    fn decode(path: &Path, text: &str) -> Result<Self, SecretStoreError> {
        let corrupt = |reason: String| SecretStoreError::Corrupt {
            path: path.to_owned(),
            reason,
        };
        // serde_json's messages quote no input for these shapes, but only the class is kept.
        let raw: Raw = serde_json::from_str(text).map_err(|e| {
            corrupt(match e.classify() {
                serde_json::error::Category::Data => "unexpected shape".to_owned(),
                _ => format!("invalid JSON at line {}", e.line()),
            })
        })?;
        if raw.version > VERSION {
            return Err(corrupt(format!(
                "version {} is newer than this tether knows ({VERSION}); upgrade tether",
                raw.version
            )));
        }
        let mut secrets = BTreeMap::new();
        for (uid, values) in raw.secrets {
            let uid = Uuid::parse_str(&uid)
                .map_err(|_| corrupt("an installation key is not a UUID".to_owned()))?;
            let values: BTreeMap<String, SecretValue> = values
                .into_iter()
                .map(|(name, value)| (name, SecretValue::new(value)))
                .collect();
            secrets.insert(uid, values);
        }
        Ok(Self { secrets })
    }

    fn encode(&self) -> Zeroizing<Vec<u8>> {
        let raw = RawRef {
            version: VERSION,
            secrets: self
                .secrets
                .iter()
                .map(|(uid, values)| {
                    (
                        uid.to_string(),
                        values
                            .iter()
                            .map(|(name, value)| (name.as_str(), value.expose()))
                            .collect(),
                    )
                })
                .collect(),
        };
        // Room for every value escaped, so the buffer is not reallocated (leaving copies).
        let estimate: usize = self
            .secrets
            .values()
            .flat_map(|values| values.iter())
            .map(|(name, value)| name.len() + value.expose().len() * 6 + 64)
            .sum::<usize>()
            + 64;
        let mut out = Zeroizing::new(Vec::with_capacity(estimate));
        // Writing JSON into a Vec cannot fail for string maps.
        if serde_json::to_writer_pretty(&mut *out, &raw).is_err() {
            out.clear();
        }
        out.push(b'\n');
        out
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> SecretStoreError + '_ {
    move |source| SecretStoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Refuses a file another user could read or write, or one that is not ours or not a file.
fn check(path: &Path, meta: &std::fs::Metadata) -> Result<(), SecretStoreError> {
    tether_sqlite::check_private_file(path, meta)?;
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(tether_sqlite::OpenError::Unsafe {
            path: path.to_owned(),
            problem: format!("the secret file is readable by other users (mode {mode:04o})"),
            fix: format!(
                "chmod 600 '{}' (and consider every value in it known to others)",
                path.display()
            ),
        }
        .into());
    }
    Ok(())
}

/// Reads the file; `None` when there is none.
pub(crate) fn read(dir: &Path) -> Result<Option<Contents>, SecretStoreError> {
    let path = dir.join(FILE_NAME);
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(None),
        Err(error) if error.raw_os_error() == Some(nix::libc::ELOOP) => {
            let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
            check(&path, &meta)?;
            return Err(io(&path)(error));
        }
        Err(error) => return Err(io(&path)(error)),
    };
    read_open(&path, file).map(Some)
}

fn read_open(path: &Path, mut file: File) -> Result<Contents, SecretStoreError> {
    let meta = file.metadata().map_err(io(path))?;
    check(path, &meta)?;
    let capacity = usize::try_from(meta.len()).unwrap_or(0);
    let mut text = Zeroizing::new(String::with_capacity(capacity + 1));
    file.read_to_string(&mut text).map_err(io(path))?;
    Contents::decode(path, &text)
}

/// Applies `change` to the file's contents under the lock and writes the result atomically.
/// Returns whether the file was created by this call.
pub(crate) fn update(
    dir: &Path,
    change: impl FnOnce(&mut Contents),
) -> Result<bool, SecretStoreError> {
    tether_sqlite::private_dir(dir)?;
    let path = dir.join(FILE_NAME);
    let lock_path = dir.join(format!("{FILE_NAME}.lock"));
    let lock_file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&lock_path)
        .map_err(io(&lock_path))?;
    let lock_meta = lock_file.metadata().map_err(io(&lock_path))?;
    tether_sqlite::check_private_file(&lock_path, &lock_meta)?;
    let _lock = Flock::lock(lock_file, FlockArg::LockExclusive)
        .map_err(|(_, errno)| io(&lock_path)(std::io::Error::from(errno)))?;

    let existing = read(dir)?;
    let created = existing.is_none();
    let mut contents = existing.unwrap_or_default();
    change(&mut contents);
    if contents.secrets.is_empty() {
        // No value left: no file (a later write creates it again, and says so).
        return match std::fs::remove_file(&path) {
            Ok(()) => Ok(false),
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(false),
            Err(error) => Err(io(&path)(error)),
        };
    }
    let bytes = contents.encode();
    tether_fs::write_private(&path, &bytes).map_err(|error| match error {
        tether_fs::WriteError::Io { step, cause, .. } => match step {
            tether_fs::Step::SyncDirectory => io(dir)(cause),
            _ => io(&path)(cause),
        },
        // A link or a directory put there after `read` checked the file, by a process that
        // does not take the lock.
        refused => io(&path)(std::io::Error::other(refused.to_string())),
    })?;
    Ok(created)
}
