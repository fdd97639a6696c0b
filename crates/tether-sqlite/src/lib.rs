//! The one place tether's programs open SQLite files (`tether`'s local store and
//! `tether-server`'s store), so that every database holding installations or secrets gets the
//! same file safety and the same connection settings.
//!
//! [`open`] takes a data directory and a file name and:
//!
//! - creates the directory (and missing parents) 0700 when it does not exist;
//! - refuses a directory another user can write (group/other-writable, or owned by another
//!   user than the caller or root): another user could plant a database or replace the file;
//!   warns when the directory is merely readable or searchable by others;
//! - creates a new database file 0600 with `O_CREAT | O_EXCL | O_NOFOLLOW` (never through a
//!   symlink, never with the umask's mode), and refuses an existing one that is a symlink, not a
//!   regular file, owned by another user, or writable by group/others; the same for the
//!   `-wal`/`-shm` files when present;
//! - opens it with `SQLITE_OPEN_NOFOLLOW` and sets WAL journaling, `synchronous = NORMAL`, a
//!   busy timeout ([`BUSY_TIMEOUT`]), `foreign_keys = ON` and `secure_delete = ON` (deleted
//!   content is overwritten with zeros, so a removed secret does not stay in a free page).
//!
//! Every refusal says what is wrong and the command that fixes it (`chmod`, `chown`). The checks
//! and SQLite's own open cannot race with another user: once the directory is known not to be
//! writable by anyone else, no one else can swap the file between them.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let conn = tether_sqlite::open(std::path::Path::new("/home/me/.local/share/tether"), "tether.db")?;
//! conn.execute_batch("CREATE TABLE IF NOT EXISTS t (x)")?;
//! // After deleting rows that held secrets:
//! tether_sqlite::checkpoint_truncate(&conn)?;
//! # Ok(()) }
//! ```
//!
//! **Invariant:** no other crate calls `rusqlite::Connection::open*`; every SQLite file of
//! tether is opened here.

#![deny(missing_docs)]

use std::fs::{DirBuilder, File, Metadata, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

/// How long a writer waits for another connection's lock before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The suffixes of the files SQLite keeps beside a database in WAL mode.
const SIDE_FILES: [&str; 2] = ["-wal", "-shm"];

/// Why a database could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// Creating or inspecting the directory or a file failed (no permission, not a directory,
    /// disk full…). Callers say which setting chooses the directory.
    #[error("cannot use the data directory {path}: {source}")]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// SQLite could not open the file or set it up (damaged file, locked past the timeout…).
    #[error("the database at {path} failed: {source}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },

    /// Another user could write the directory or the file, so its rows cannot be trusted and
    /// secrets written to it could be read. The user runs the command in `fix`.
    #[error(
        "refusing to use {path}: {problem}; another user could plant rows or read secrets. Fix: {fix}"
    )]
    Unsafe {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
        /// The command (or step) that fixes it.
        fix: String,
    },
}

/// Creates `dir` (and missing parents) 0700 when it does not exist, and refuses it when
/// another user can write it or owns it, as [`open`] does: for other private files kept beside
/// the database (the secret store's fallback file).
pub fn private_dir(dir: &Path) -> Result<(), OpenError> {
    let me = nix::unistd::geteuid().as_raw();
    let io = |source| OpenError::Io {
        path: dir.to_owned(),
        source,
    };
    if !dir.exists() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
    }
    let dir_meta = std::fs::metadata(dir).map_err(io)?;
    check_directory(dir, &dir_meta, me)
}

/// Refuses a private file that is a symlink, not a regular file, owned by another user, or
/// writable by group or others, as [`open`] does for a database (`meta` from
/// `symlink_metadata` or an open file). Callers that hold secrets refuse readable ones too.
pub fn check_private_file(path: &Path, meta: &Metadata) -> Result<(), OpenError> {
    check_file(path, meta, nix::unistd::geteuid().as_raw())
}

/// Opens (creating when missing) the database `file_name` in `dir` with every check and
/// setting described in the [crate] docs.
pub fn open(dir: &Path, file_name: &str) -> Result<Connection, OpenError> {
    let me = nix::unistd::geteuid().as_raw();
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| OpenError::Io { path, source }
    };
    private_dir(dir)?;

    let path = dir.join(file_name);
    let file = create_or_open(&path)?;
    let meta = file.metadata().map_err(io(&path))?;
    check_file(&path, &meta, me)?;
    drop(file);
    for suffix in SIDE_FILES {
        let mut side = path.clone().into_os_string();
        side.push(suffix);
        let side = PathBuf::from(side);
        match std::fs::symlink_metadata(&side) {
            Ok(meta) => check_file(&side, &meta, me)?,
            Err(error) if error.kind() == ErrorKind::NotFound => {}
            Err(error) => return Err(io(&side)(error)),
        }
    }

    let sqlite = |source| OpenError::Sqlite {
        path: path.clone(),
        source,
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NOFOLLOW
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(&path, flags).map_err(sqlite)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sqlite)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(sqlite)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(sqlite)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(sqlite)?;
    conn.pragma_update(None, "secure_delete", "ON")
        .map_err(sqlite)?;
    Ok(conn)
}

/// Copies every committed page from the WAL into the database file and truncates the WAL to
/// zero bytes. With `secure_delete` on, deleted content is then gone from both files. Call it
/// after deleting something secret; it waits for readers up to the busy timeout.
pub fn checkpoint_truncate(conn: &Connection) -> rusqlite::Result<()> {
    let (busy, _, _): (i64, i64, i64) =
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?;
    if busy != 0 {
        // Another connection kept reading old pages; they are overwritten by a later checkpoint.
        tracing::debug!("the WAL checkpoint was blocked by a reader; the WAL is not truncated yet");
    }
    Ok(())
}

/// Creates the file 0600 exclusively, or opens an existing one without following a symlink.
fn create_or_open(path: &Path) -> Result<File, OpenError> {
    let created = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path);
    match created {
        Ok(file) => return Ok(file),
        Err(error) if error.kind() == ErrorKind::AlreadyExists => {}
        Err(error) => {
            return Err(OpenError::Io {
                path: path.to_owned(),
                source: error,
            });
        }
    }
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|source| {
            if source.raw_os_error() == Some(nix::libc::ELOOP) {
                unsafe_path(
                    path,
                    "it is a symbolic link".to_owned(),
                    format!(
                        "rm {} (the link) and keep the database itself there",
                        quoted(path)
                    ),
                )
            } else {
                OpenError::Io {
                    path: path.to_owned(),
                    source,
                }
            }
        })
}

fn unsafe_path(path: &Path, problem: String, fix: String) -> OpenError {
    OpenError::Unsafe {
        path: path.to_owned(),
        problem,
        fix,
    }
}

/// Refuses a directory another user can write; warns about one others can read.
fn check_directory(dir: &Path, meta: &Metadata, me: u32) -> Result<(), OpenError> {
    if !meta.is_dir() {
        return Err(OpenError::Io {
            path: dir.to_owned(),
            source: std::io::Error::new(ErrorKind::NotADirectory, "not a directory"),
        });
    }
    check_owner(dir, meta, me)?;
    check_mode(dir, meta, "directory", 0o700)
}

/// Refuses a file that is not regular, is owned by another user, or group/other-writable.
fn check_file(path: &Path, meta: &Metadata, me: u32) -> Result<(), OpenError> {
    if meta.file_type().is_symlink() {
        return Err(unsafe_path(
            path,
            "it is a symbolic link".to_owned(),
            format!("rm {} (only SQLite's own files belong there)", quoted(path)),
        ));
    }
    if !meta.is_file() {
        return Err(unsafe_path(
            path,
            "it is not a regular file".to_owned(),
            format!("move {} out of the way", quoted(path)),
        ));
    }
    check_owner(path, meta, me)?;
    check_mode(path, meta, "file", 0o600)
}

/// Refuses a `what` (directory or file) writable by group or others; warns when they can
/// read it. `private` is the mode it should have.
fn check_mode(path: &Path, meta: &Metadata, what: &str, private: u32) -> Result<(), OpenError> {
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(unsafe_path(
            path,
            format!(
                "the {what} is writable by {} (mode {mode:04o})",
                who(mode, 0o020, 0o002)
            ),
            format!("chmod {private:o} {}", quoted(path)),
        ));
    }
    if mode & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            mode = format!("{mode:04o}"),
            "the {what} is readable by other users; expected {private:04o} (fix: chmod {private:o} {})",
            quoted(path)
        );
    }
    Ok(())
}

/// Refuses what is owned by neither the caller nor root.
fn check_owner(path: &Path, meta: &Metadata, me: u32) -> Result<(), OpenError> {
    let owner = meta.uid();
    if owner == me || owner == 0 {
        return Ok(());
    }
    Err(unsafe_path(
        path,
        format!("it is owned by uid {owner}, not by you (uid {me})"),
        format!(
            "check who created it; if it is yours, `sudo chown {me} {0}`, else move it away and let tether create a new one",
            quoted(path)
        ),
    ))
}

fn who(mode: u32, group_bit: u32, other_bit: u32) -> &'static str {
    match (mode & group_bit != 0, mode & other_bit != 0) {
        (true, true) => "group and others",
        (true, false) => "its group",
        _ => "others",
    }
}

/// A path as a shell word: as is when it holds only safe characters, else single-quoted.
fn quoted(path: &Path) -> String {
    let text = path.to_string_lossy();
    if !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%".contains(&b))
    {
        text.into_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words() {
        assert_eq!(quoted(Path::new("/a/b.db")), "/a/b.db");
        assert_eq!(quoted(Path::new("/a b/it's")), r"'/a b/it'\''s'");
    }

    #[test]
    fn who_can_write() {
        assert_eq!(who(0o777, 0o020, 0o002), "group and others");
        assert_eq!(who(0o770, 0o020, 0o002), "its group");
        assert_eq!(who(0o707, 0o020, 0o002), "others");
    }
}
