//! Opening databases through `tether_sqlite::open`: real files, real modes and owners.

#![allow(clippy::expect_used, reason = "test helpers fail loudly")]

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use tether_sqlite::{OpenError, checkpoint_truncate, open};
use tether_testkit::{files_bytes, holds};

const FILE: &str = "test.db";

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").mode() & 0o777
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The refusal's text; panics when the open succeeded or failed otherwise.
fn refusal(dir: &Path) -> String {
    match open(dir, FILE) {
        Err(error @ OpenError::Unsafe { .. }) => error.to_string(),
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("{} was opened", dir.display()),
    }
}

/// Every byte of the database and its side files.
fn all_bytes(dir: &Path) -> Vec<u8> {
    files_bytes(dir).expect("reading the database files")
}

#[test]
fn a_new_database_is_private_and_set_up() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("a/b");
    let conn = open(&dir, FILE).expect("opening a new database");
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&root.path().join("a")), 0o700);
    assert_eq!(mode(&dir.join(FILE)), 0o600);
    let pragma = |name: &str| -> String {
        conn.query_row(&format!("PRAGMA {name}"), [], |row| {
            row.get::<_, rusqlite::types::Value>(0)
        })
        .map(|value| match value {
            rusqlite::types::Value::Integer(n) => n.to_string(),
            rusqlite::types::Value::Text(text) => text,
            other => format!("{other:?}"),
        })
        .expect("reading a pragma")
    };
    assert_eq!(pragma("journal_mode"), "wal");
    assert_eq!(pragma("secure_delete"), "1");
    assert_eq!(pragma("foreign_keys"), "1");
    assert_eq!(pragma("busy_timeout"), "10000");
    assert_eq!(pragma("synchronous"), "1");
    conn.execute_batch("CREATE TABLE t (x TEXT)")
        .expect("writing");
    drop(conn);
    // SQLite gives the side files the database's mode.
    let again = open(&dir, FILE).expect("opening again");
    again
        .execute("INSERT INTO t VALUES ('a')", [])
        .expect("writing");
    assert_eq!(mode(&dir.join(format!("{FILE}-wal"))), 0o600);
}

/// `.cargo/config.toml` leaves SQLite's unused extensions out of the build (LIBSQLITE3_FLAGS):
/// the compiled library says so, and a table of one of them cannot be made.
#[test]
fn the_compiled_sqlite_has_no_unused_extensions() {
    let root = tempfile::tempdir().expect("tempdir");
    let conn = open(root.path(), FILE).expect("opening a new database");
    let mut statement = conn.prepare("PRAGMA compile_options").expect("preparing");
    let options: Vec<String> = statement
        .query_map([], |row| row.get(0))
        .expect("querying")
        .collect::<Result<_, _>>()
        .expect("reading");
    assert!(options.iter().any(|o| o == "THREADSAFE=1"), "{options:?}");
    for unused in [
        "ENABLE_FTS3",
        "ENABLE_FTS5",
        "ENABLE_RTREE",
        "ENABLE_DBSTAT_VTAB",
        "SOUNDEX",
    ] {
        assert!(
            !options.iter().any(|o| o == unused),
            "{unused} in {options:?}"
        );
    }
    let error = conn
        .execute_batch("CREATE VIRTUAL TABLE docs USING fts5(body)")
        .expect_err("fts5 is left out");
    assert!(error.to_string().contains("no such module"), "{error}");
}

#[test]
fn a_directory_others_can_write_is_refused() {
    for loose in [0o777, 0o770, 0o703] {
        let root = tempfile::tempdir().expect("tempdir");
        chmod(root.path(), loose);
        let text = refusal(root.path());
        assert!(text.contains("the directory is writable by"), "{text}");
        assert!(
            text.contains(&format!("Fix: chmod 700 {}", root.path().display())),
            "{text}"
        );
        assert!(!root.path().join(FILE).exists(), "nothing is created");
    }
}

#[test]
fn a_database_others_can_write_is_refused() {
    let root = tempfile::tempdir().expect("tempdir");
    drop(open(root.path(), FILE).expect("creating"));
    let file = root.path().join(FILE);
    chmod(&file, 0o666);
    let text = refusal(root.path());
    assert!(
        text.contains("writable by group and others (mode 0666)"),
        "{text}"
    );
    assert!(
        text.contains(&format!("Fix: chmod 600 {}", file.display())),
        "{text}"
    );
    chmod(&file, 0o600);
    open(root.path(), FILE).expect("open after the fix");

    // A planted, loose WAL is refused as well.
    let wal = root.path().join(format!("{FILE}-wal"));
    std::fs::write(&wal, b"").expect("planting a WAL");
    chmod(&wal, 0o646);
    let text = refusal(root.path());
    assert!(
        text.contains(&format!("chmod 600 {}", wal.display())),
        "{text}"
    );
}

#[test]
fn a_symlinked_database_is_refused_and_its_target_untouched() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("data");
    std::fs::create_dir(&dir).expect("mkdir");
    chmod(&dir, 0o700);
    let target = root.path().join("target");
    std::fs::write(&target, b"not a database").expect("writing the target");
    chmod(&target, 0o644);
    std::os::unix::fs::symlink(&target, dir.join(FILE)).expect("symlink");
    let text = refusal(&dir);
    assert!(text.contains("symbolic link"), "{text}");
    assert_eq!(std::fs::read(&target).expect("reading"), b"not a database");
    assert_eq!(mode(&target), 0o644);
}

#[test]
fn files_and_directories_of_another_user_are_refused() {
    if !is_root() {
        tether_testkit::skipped("chown to another user needs root");
        return;
    }
    let other = nix::unistd::Uid::from_raw(54_321);
    let root = tempfile::tempdir().expect("tempdir");
    drop(open(root.path(), FILE).expect("creating"));
    let file = root.path().join(FILE);
    std::os::unix::fs::chown(&file, Some(other.as_raw()), None).expect("chown");
    let text = refusal(root.path());
    assert!(
        text.contains("owned by uid 54321, not by you (uid 0)"),
        "{text}"
    );
    assert!(text.contains("chown 0"), "{text}");

    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::chown(dir.path(), Some(other.as_raw()), None).expect("chown");
    let text = refusal(dir.path());
    assert!(text.contains("owned by uid 54321"), "{text}");
}

#[test]
fn a_readable_directory_is_used_with_a_warning() {
    let root = tempfile::tempdir().expect("tempdir");
    chmod(root.path(), 0o755);
    let log = Arc::new(Mutex::new(Vec::<u8>::new()));
    let sink = Arc::clone(&log);
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || Writer(Arc::clone(&sink)))
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        open(root.path(), FILE).expect("a readable directory is used");
    });
    let text = String::from_utf8(log.lock().unwrap_or_else(PoisonError::into_inner).clone())
        .expect("UTF-8 log");
    assert!(text.contains("WARN"), "{text}");
    assert!(
        text.contains(&format!("chmod 700 {}", root.path().display())),
        "{text}"
    );
}

struct Writer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn deleted_values_leave_no_byte_after_a_truncating_checkpoint() {
    let root = tempfile::tempdir().expect("tempdir");
    let conn = open(root.path(), FILE).expect("creating");
    let sentinel = "SENTINEL-7c1d9e2f-deleted-value";
    conn.execute_batch("CREATE TABLE t (v TEXT); INSERT INTO t VALUES ('keep')")
        .expect("setup");
    conn.execute("INSERT INTO t VALUES (?1)", [sentinel])
        .expect("inserting");
    assert!(holds(&all_bytes(root.path()), sentinel));
    conn.execute("DELETE FROM t WHERE v = ?1", [sentinel])
        .expect("deleting");
    checkpoint_truncate(&conn).expect("checkpoint");
    assert!(!holds(&all_bytes(root.path()), sentinel));
    assert_eq!(
        std::fs::metadata(root.path().join(format!("{FILE}-wal")))
            .expect("the WAL")
            .len(),
        0
    );
}
