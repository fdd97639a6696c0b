//! The response cache: one JSON file per request under `$TETHER_HOME/cache/registry/`, named
//! by a hash of the request (base URL, path and query; never a credential), holding when it
//! was fetched, the ETag the registry sent, and the body.
//!
//! Files are written by `tether_fs::write_private` (0600, a temporary name renamed over the
//! entry), so a reader sees a whole entry or none.
//! A cache that cannot be read or written is never an error: the request goes to the network.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One cached answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry<T> {
    /// When the registry last confirmed it (seconds since the Unix epoch).
    pub fetched_at: u64,
    /// The ETag the registry sent, for `If-None-Match`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// The answer.
    pub body: T,
}

impl<T> Entry<T> {
    /// How long ago the registry last confirmed it.
    pub fn age(&self) -> Duration {
        Duration::from_secs(now().saturating_sub(self.fetched_at))
    }
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A cache directory.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// A cache in `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str) -> PathBuf {
        let digest = Sha256::digest(key.as_bytes());
        let name: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{name}.json"))
    }

    /// The entry for `key`, when one is cached and readable.
    pub fn load<T: for<'de> Deserialize<'de>>(&self, key: &str) -> Option<Entry<T>> {
        let bytes = std::fs::read(self.path(key)).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(entry) => Some(entry),
            Err(e) => {
                tracing::debug!("ignoring an unreadable registry cache entry: {e}");
                None
            }
        }
    }

    /// Stores `entry` under `key`; failures are logged and otherwise ignored.
    pub fn store<T: Serialize>(&self, key: &str, entry: &Entry<T>) {
        if let Err(e) = self.try_store(key, entry) {
            tracing::debug!(
                "cannot write the registry cache in {}: {e}",
                self.dir.display()
            );
        }
    }

    fn try_store<T: Serialize>(&self, key: &str, entry: &Entry<T>) -> Result<(), String> {
        // 0700, like the rest of TETHER_HOME: the cache may be what creates TETHER_HOME, and
        // the local store refuses a directory others can write and warns on one they can read.
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(&self.dir)
            .map_err(|e| e.to_string())?;
        let bytes = serde_json::to_vec(entry).map_err(|e| e.to_string())?;
        tether_fs::write_private(&self.path(key), &bytes).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn an_entry_is_stored_whole_0600_and_read_back() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let cache = Cache::new(dir.path().join("cache").join("registry"));
        let entry = Entry {
            fetched_at: now(),
            etag: Some("\"v1\"".to_owned()),
            body: vec!["a".to_owned(), "b".to_owned()],
        };
        cache.store("https://registry/v0.1/servers?search=x", &entry);
        let loaded: Entry<Vec<String>> = cache
            .load("https://registry/v0.1/servers?search=x")
            .expect("the stored entry");
        assert_eq!(loaded.body, entry.body);
        assert_eq!(loaded.etag, entry.etag);
        let files: Vec<_> = std::fs::read_dir(cache.dir())
            .expect("listing the cache")
            .map(|e| e.expect("an entry").path())
            .collect();
        assert_eq!(files.len(), 1, "one file, no temporary one: {files:?}");
        let mode = std::fs::metadata(&files[0])
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = std::fs::metadata(cache.dir())
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        assert!(cache.load::<Vec<String>>("another request").is_none());
    }
}
