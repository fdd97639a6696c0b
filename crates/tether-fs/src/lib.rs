//! Writing a file only its owner may read, in one step.
//!
//! [`write_private`] puts the bytes into a fresh file in the target's directory — created with
//! `O_CREAT|O_EXCL|O_NOFOLLOW` and mode 0600, so no other user can open it and no link planted
//! in advance is followed —, syncs it, renames it over the target and syncs the directory: a
//! reader, or a crash, sees the old file or the new one, never half of one. A target that is a
//! symbolic link, or exists and is not a regular file, is refused ([`check_target`]): tether
//! never writes through a link and never changes the mode of a file it did not create. A failed
//! write leaves the target as it was and no temporary file behind.
//!
//! Every file tether rewrites whole goes through here: `tether export -o`, the gateway's tool
//! pins, the secret store's file, the registry's response cache. Locking (when two writers
//! must not lose each other's changes) and the directory's own creation stay with the caller.
//!
//! ```
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("config.json");
//! tether_fs::write_private(&path, b"{}\n")?;
//! tether_fs::write_private_with(&path, |file| std::io::Write::write_all(file, b"[]\n"))?;
//! assert_eq!(std::fs::read(&path)?, b"[]\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a private write did not happen (or, for [`Step::SyncDirectory`], may not last).
///
/// An I/O cause is part of the message, not a `source()`: an error chain printed line by line
/// shows it once.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The target is a symbolic link. Returned by [`check_target`] and the writes before
    /// anything is created; the user names the link's target, or a new file.
    #[error(
        "{} is a symbolic link; tether writes only to a regular file it replaces itself: name the link's target, or a new file",
        path.display()
    )]
    Link {
        /// The target.
        path: PathBuf,
    },
    /// The target exists and is not a regular file (a directory, a FIFO, a device). Returned
    /// like [`WriteError::Link`]; the user names a new file or a regular one.
    #[error(
        "{} exists and is not a regular file; name a new file or a regular one to replace",
        path.display()
    )]
    NotRegular {
        /// The target.
        path: PathBuf,
    },
    /// A step of the write failed. Before [`Step::SyncDirectory`] the target is as it was and
    /// no temporary file is left; the caller reports it (the message names the target, the
    /// step and the operating system's words).
    #[error("cannot write {}: {step}: {cause}", path.display())]
    Io {
        /// The target.
        path: PathBuf,
        /// What was being done.
        step: Step,
        /// The operating system's error.
        cause: std::io::Error,
    },
}

/// The step of a write that failed, as [`WriteError::Io`] names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Step {
    /// The target's directory cannot be used (missing, or not searchable).
    #[error("cannot use the directory {}", .0.display())]
    Directory(PathBuf),
    /// No new file can be created in the target's directory.
    #[error("cannot create a file in {}", .0.display())]
    Create(PathBuf),
    /// Writing the new file, or syncing it to disk.
    #[error("writing")]
    Write,
    /// Renaming the new file over the target.
    #[error("renaming the temp file over it")]
    Rename,
    /// Syncing the directory after the rename: the target has been replaced, but a crash now
    /// might bring the old one back.
    #[error("syncing its directory")]
    SyncDirectory,
}

/// Refuses a target that is a symbolic link or exists and is not a regular file (a missing
/// target is fine). Callers that want to refuse before doing other work call it first; the
/// writes call it again.
pub fn check_target(path: &Path) -> Result<(), WriteError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(WriteError::Link {
            path: path.to_owned(),
        }),
        Ok(meta) if !meta.is_file() => Err(WriteError::NotRegular {
            path: path.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Writes `bytes` to `path` as a new 0600 file that replaces `path` in one rename.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    write_private_with(path, |file| file.write_all(bytes))
}

/// As [`write_private`], with `write` filling the new file (serializing straight into it, say).
/// An error from `write` fails the write as [`Step::Write`]; nothing replaces the target.
pub fn write_private_with(
    path: &Path,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> Result<(), WriteError> {
    check_target(path)?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let failed = |step: Step, cause: std::io::Error| WriteError::Io {
        path: path.to_owned(),
        step,
        cause,
    };
    // Asked first so that the cause is about the directory the user named.
    std::fs::metadata(dir).map_err(|cause| failed(Step::Directory(dir.to_owned()), cause))?;
    let (temp, mut file) =
        create_temp(dir, path).map_err(|cause| failed(Step::Create(dir.to_owned()), cause))?;
    write(&mut file)
        .and_then(|()| file.sync_all())
        .map_err(|cause| failed(Step::Write, cause))?;
    drop(file);
    std::fs::rename(&temp.0, path).map_err(|cause| failed(Step::Rename, cause))?;
    temp.keep();
    // The rename lasts a crash once the directory is synced.
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|cause| failed(Step::SyncDirectory, cause))
}

/// A temporary file that is removed when dropped (an error, a panic in the writer) unless
/// [`TempFile::keep`] says it became the target.
struct TempFile(PathBuf);

impl TempFile {
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Makes each temporary name of this process unique; `O_EXCL` makes it safe.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Creates `.NAME.PID.N.tmp` beside `target`: `O_CREAT|O_EXCL|O_NOFOLLOW`, 0600. A name taken
/// by another file (a writer of another process, something planted) is passed over.
fn create_temp(dir: &Path, target: &Path) -> std::io::Result<(TempFile, File)> {
    let name = target
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut attempts = 0;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let temp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&temp)
        {
            Ok(file) => return Ok((TempFile(temp), file)),
            Err(error) if error.kind() == ErrorKind::AlreadyExists && attempts < 100 => {
                attempts += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    /// The names in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("listing the directory")
            .map(|entry| {
                entry
                    .expect("a directory entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
    }

    #[test]
    fn a_new_file_is_0600_and_alone() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("out.json");
        write_private(&path, b"secret\n").expect("writing");
        assert_eq!(std::fs::read(&path).expect("reading"), b"secret\n");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(names(dir.path()), ["out.json"]);
    }

    #[test]
    fn an_existing_file_is_replaced_whole_not_rewritten_in_place() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("out.json");
        std::fs::write(&path, b"old contents").expect("writing the old file");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        // A reader that opened the old file keeps reading the old file: the new one is another
        // file renamed over the name, never the old one truncated and rewritten.
        let mut reader = File::open(&path).expect("opening the old file");
        write_private(&path, b"new").expect("replacing");
        let mut seen = String::new();
        reader
            .read_to_string(&mut seen)
            .expect("reading the old file");
        assert_eq!(seen, "old contents");
        assert_eq!(std::fs::read(&path).expect("reading"), b"new");
        assert_eq!(mode(&path), 0o600, "the new file has the new file's mode");
        assert_eq!(names(dir.path()), ["out.json"]);
    }

    #[test]
    fn links_and_non_regular_targets_are_refused() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let target = dir.path().join("target");
        std::fs::write(&target, b"untouched").expect("writing the link's target");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).expect("making a link");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).expect("a link");
        for path in [&link, &dangling] {
            let error = write_private(path, b"x").expect_err("a link is refused");
            assert!(matches!(error, WriteError::Link { .. }), "{error:?}");
            assert!(error.to_string().contains("symbolic link"), "{error}");
        }
        assert_eq!(std::fs::read(&target).expect("reading"), b"untouched");
        assert!(!dir.path().join("nowhere").exists());
        let error = write_private(dir.path(), b"x").expect_err("a directory is refused");
        assert!(matches!(error, WriteError::NotRegular { .. }), "{error:?}");
        assert_eq!(names(dir.path()), ["dangling", "link", "target"]);
    }

    #[test]
    fn a_failed_write_leaves_the_target_and_no_temp_file() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("out.json");
        std::fs::write(&path, b"before").expect("writing the old file");
        let error = write_private_with(&path, |file| {
            file.write_all(b"half")?;
            Err(std::io::Error::other("the encoder failed"))
        })
        .expect_err("the writer's error fails the write");
        assert!(
            matches!(
                &error,
                WriteError::Io {
                    step: Step::Write,
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "cannot write {}: writing: the encoder failed",
                path.display()
            )
        );
        assert_eq!(std::fs::read(&path).expect("reading"), b"before");
        assert_eq!(names(dir.path()), ["out.json"]);
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let missing = dir.path().join("missing");
        let path = missing.join("out.json");
        let error = write_private(&path, b"x").expect_err("no directory");
        let text = error.to_string();
        let expected = format!(
            "cannot write {}: cannot use the directory {}: ",
            path.display(),
            missing.display()
        );
        assert!(text.starts_with(&expected), "{text}");
        assert!(names(dir.path()).is_empty());
    }
}
