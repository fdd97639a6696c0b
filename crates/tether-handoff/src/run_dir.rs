//! The private run directory of a hand-off: `<home>/run/<pid>-<random>`, 0700, its files 0600,
//! removed on drop; directories of runs whose process is gone are swept when a new one is made.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::HandoffError;

/// A private run directory, removed on drop.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// Creates `<home>/run/<pid>-<random>` (0700, and `run/` 0700 when it is new), first
    /// removing the directories there whose tether process is gone (a SIGKILLed run cannot
    /// clean up). `home` is tether's data directory (`$TETHER_HOME`).
    pub fn create(home: &Path) -> Result<Self, HandoffError> {
        let root = home.join("run");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root)
            .map_err(HandoffError::io(format!(
                "cannot create {}",
                root.display()
            )))?;
        sweep_stale(&root);
        let name = format!(
            "{}-{}",
            std::process::id(),
            tether_http::token::random_hex(16)?
        );
        let path = root.join(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(HandoffError::io(format!(
                "cannot create {}",
                path.display()
            )))?;
        Ok(Self { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `name` (a path relative to the directory, whose parents exist) with mode 0600;
    /// fails when it exists. Returns its path.
    pub fn write(&self, name: &str, text: &str) -> Result<PathBuf, HandoffError> {
        use std::io::Write;
        let path = self.path.join(name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(HandoffError::io(format!(
                "cannot create {}",
                path.display()
            )))?;
        file.write_all(text.as_bytes())
            .map_err(HandoffError::io(format!("cannot write {}", path.display())))?;
        Ok(path)
    }

    /// Creates the directory `name` (relative, its parents created too) with mode 0700.
    pub(crate) fn create_dir(&self, name: &Path) -> Result<PathBuf, HandoffError> {
        let path = self.path.join(name);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)
            .map_err(HandoffError::io(format!(
                "cannot create {}",
                path.display()
            )))?;
        Ok(path)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(
                "cannot remove the run directory {}: {e}",
                self.path.display()
            );
        }
    }
}

/// Removes run directories whose tether process is gone.
fn sweep_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let own = i32::try_from(std::process::id()).unwrap_or(-1);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = Path::new("/proc").join(pid.to_string()).exists();
        if !alive && pid != own {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .expect("reading the metadata")
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn a_run_directory_is_private_swept_when_stale_and_removed_on_drop() {
        let fresh = tempfile::tempdir().expect("creating a temporary directory");
        let first = RunDir::create(fresh.path()).expect("creating the run directory");
        assert_eq!(mode(&fresh.path().join("run")), 0o700);
        drop(first);
        let home = tempfile::tempdir().expect("creating a temporary directory");
        // A run whose process is gone (no pid is this large on Linux) and a foreign entry.
        let stale = home.path().join("run/2147483646-dead");
        std::fs::create_dir_all(&stale).expect("creating the stale directory");
        let other = home.path().join("run/not-a-run");
        std::fs::create_dir_all(&other).expect("creating the other directory");
        let dir = RunDir::create(home.path()).expect("creating the run directory");
        assert!(!stale.exists(), "the stale run directory was not swept");
        assert!(other.exists(), "an entry that is not a run was removed");
        assert_eq!(mode(dir.path()), 0o700);
        let file = dir.write("a.json", "{}").expect("writing a file");
        assert_eq!(mode(&file), 0o600);
        assert!(
            dir.write("a.json", "{}").is_err(),
            "an existing file was overwritten"
        );
        let path = dir.path().to_owned();
        drop(dir);
        assert!(!path.exists(), "the run directory outlived its RunDir");
    }
}
