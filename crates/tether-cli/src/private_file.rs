//! Writing a file that holds real secret values (`tether export -o FILE`).
//!
//! The bytes go into a fresh file in the target's directory, created with `O_CREAT|O_EXCL` and
//! mode 0600 (so no other user can open it, and no link planted in advance is followed), which
//! is then renamed over the target. A target that is a symbolic link or not a regular file is
//! refused: tether never writes through a link and never changes the mode of a file it did not
//! create. A failed write leaves the target as it was and no temp file behind.

use std::io::Write;
use std::path::Path;

use crate::exit::UsageError;

/// Refuses a target that is a symbolic link or exists and is not a regular file.
pub fn check_target(path: &Path) -> Result<(), UsageError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(UsageError::new(format!(
            "{} is a symbolic link; tether writes real secret values only to a regular file it \
             replaces itself: name the link's target, or a new file",
            path.display()
        ))),
        Ok(meta) if !meta.is_file() => Err(UsageError::new(format!(
            "{} exists and is not a regular file; name a new file or a regular one to replace",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Writes `bytes` to `path` as a new 0600 file that replaces `path` in one rename.
pub fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    check_target(path)?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cannot = |what: &str, err: std::io::Error| {
        anyhow::anyhow!("cannot write {}: {what}: {err}", path.display())
    };
    // Asked first so the cause is the operating system's own words: tempfile's errors name the
    // temp path, which the user never saw.
    std::fs::metadata(dir)
        .map_err(|err| cannot(&format!("cannot use the directory {}", dir.display()), err))?;
    // tempfile creates with O_CREAT|O_EXCL and mode 0600, and removes the file if dropped.
    let mut file = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|err| cannot(&format!("cannot create a file in {}", dir.display()), err))?;
    file.write_all(bytes)
        .and_then(|()| file.as_file().sync_all())
        .map_err(|err| cannot("writing", err))?;
    file.persist(path)
        .map_err(|err| cannot("renaming the temp file over it", err.error))?;
    Ok(())
}
