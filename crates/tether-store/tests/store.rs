//! The local store against a real SQLite file in a temp directory.

#![allow(clippy::expect_used, reason = "test helpers fail loudly")]

use std::os::unix::fs::PermissionsExt;

use pretty_assertions::assert_eq;
use tether_config::{EmptyEnv, Exposure, Installation, Origin, Secrets, parse_config};
use tether_store::{DATABASE_FILE, Store};
use tether_testkit::{files_bytes, holds};
use uuid::Uuid;

fn installation(text: &str) -> Installation {
    let mut parsed = parse_config(text, Origin::User).expect("parsing the test config");
    parsed.servers.remove(0).into_installation()
}

const CONFIG: &str = r#"{"gh":{"command":"npx","args":["--token={{API_TOKEN}}"],"env":{"GITHUB":"sk-SENTINEL","1KEY":"v"}}}"#;

#[test]
fn install_get_list_remove() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let mut store = Store::open(&home).expect("open");
    let original = installation(CONFIG);
    let uid = store.install(&original).expect("install");
    assert!(store.contains(uid).expect("contains"));

    let loaded = store.get(uid).expect("get").expect("installed");
    assert_eq!(loaded, original);
    let secrets: Secrets = [("API_TOKEN", "t")].into_iter().collect();
    assert_eq!(
        loaded.render(&secrets, &EmptyEnv).to_json(Exposure::Real),
        original.render(&secrets, &EmptyEnv).to_json(Exposure::Real)
    );

    let listed = store.list().expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].uid, uid);
    assert_eq!(listed[0].name, "gh");
    assert_eq!(listed[0].variable_names, ["GITHUB", "1KEY", "API_TOKEN"]);
    assert!(!format!("{listed:?}").contains("SENTINEL"));

    assert!(store.remove(uid).expect("remove"));
    assert!(!store.remove(uid).expect("remove again"));
    assert_eq!(store.get(uid).expect("get"), None);
    assert!(store.list().expect("list").is_empty());
    assert_eq!(store.get(Uuid::new_v4()).expect("get unknown"), None);
}

#[test]
fn directory_is_0700_and_files_0600() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("nested").join("home");
    let mut store = Store::open(&home).expect("open");
    store.install(&installation(CONFIG)).expect("install");
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&home), 0o700);
    for entry in std::fs::read_dir(&home).expect("read_dir") {
        let path = entry.expect("entry").path();
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }
    assert!(home.join(DATABASE_FILE).exists());
}

#[test]
fn survives_reopen_and_migrates_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uid = {
        let mut store = Store::open(dir.path()).expect("open");
        store.install(&installation(CONFIG)).expect("install")
    };
    let store = Store::open(dir.path()).expect("reopen");
    assert!(store.contains(uid).expect("contains"));
}

#[test]
fn a_failed_install_leaves_no_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = Store::open(dir.path()).expect("open");
    let uid = Uuid::new_v4();
    store
        .install_as(uid, &installation(CONFIG))
        .expect("first install");
    // Installing under the same UUID fails on the primary key, after the template row was
    // written in the same transaction: the rollback must remove it.
    let before = store.list().expect("list").len();
    assert!(store.install_as(uid, &installation(CONFIG)).is_err());
    assert_eq!(store.list().expect("list").len(), before);
    let conn = rusqlite_count(store.path());
    assert_eq!(conn, 1, "one templatable server row, not two");
}

fn rusqlite_count(path: &std::path::Path) -> i64 {
    // A second connection, as another process would open it.
    let dir = path.parent().expect("the database's directory");
    let conn = tether_sqlite::open(dir, DATABASE_FILE).expect("opening a second connection");
    conn.query_row("SELECT count(*) FROM templatable_servers", [], |r| r.get(0))
        .expect("counting templatable servers")
}

#[test]
fn concurrent_writers_from_two_connections() {
    let dir = tempfile::tempdir().expect("tempdir");
    Store::open(dir.path()).expect("create");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let path = dir.path().to_owned();
            std::thread::spawn(move || {
                let mut store = Store::open(&path).expect("open");
                for _ in 0..25 {
                    store
                        .install(&installation(CONFIG))
                        .expect("install under contention");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("writer thread");
    }
    assert_eq!(
        Store::open(dir.path())
            .expect("open")
            .list()
            .expect("list")
            .len(),
        100
    );
}

/// Every byte of the database and its `-wal`/`-shm` files.
fn all_bytes(dir: &std::path::Path) -> Vec<u8> {
    files_bytes(dir).expect("reading the store's files")
}

/// Issue 10 item 5: a value given at install time leaves no byte in the store's files once
/// the installation is removed (secure_delete + a truncating WAL checkpoint).
#[test]
fn r10_5_remove_leaves_no_byte_of_a_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sentinel = "SENTINEL-4d2a9c71-install-time-value";
    let config = format!(
        r#"{{"gh":{{"command":"npx","env":{{"TOKEN":"{sentinel}","OTHER":"kept-value"}}}}}}"#
    );
    let mut store = Store::open(dir.path()).expect("open");
    let kept = store
        .install(&installation(CONFIG))
        .expect("install the kept one");
    let uid = store.install(&installation(&config)).expect("install");
    assert!(
        holds(&all_bytes(dir.path()), sentinel),
        "the value was stored"
    );
    assert!(store.remove(uid).expect("remove"));
    let bytes = all_bytes(dir.path());
    assert!(
        !holds(&bytes, sentinel),
        "a byte of the removed value is left"
    );
    assert!(
        !holds(&bytes, "kept-value"),
        "the removed installation's other value"
    );
    assert!(
        holds(&bytes, "sk-SENTINEL"),
        "the other installation is kept"
    );
    assert!(store.contains(kept).expect("contains"));
    drop(store);
    // A reopened store (another process) still reads the kept one.
    assert!(
        Store::open(dir.path())
            .expect("reopen")
            .contains(kept)
            .expect("contains")
    );
}

/// Issue 10 item 6: a store another user can write is refused, with the fix in the message.
#[test]
fn r10_6_a_store_others_can_write_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    Store::open(&home).expect("create");
    let chmod = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };

    chmod(&home, 0o777);
    let error = Store::open(&home).expect_err("a world-writable TETHER_HOME is refused");
    let text = error.to_string();
    assert!(
        text.contains(&format!("chmod 700 {}", home.display())),
        "{text}"
    );
    chmod(&home, 0o700);

    let db = home.join(DATABASE_FILE);
    chmod(&db, 0o666);
    let text = Store::open(&home)
        .expect_err("a 0666 database is refused")
        .to_string();
    assert!(
        text.contains(&format!("chmod 600 {}", db.display())),
        "{text}"
    );
    chmod(&db, 0o600);

    if running_as_root() {
        std::os::unix::fs::chown(&db, Some(54_321), None).expect("chown");
        let text = Store::open(&home)
            .expect_err("a foreign database is refused")
            .to_string();
        assert!(text.contains("owned by uid 54321"), "{text}");
        std::os::unix::fs::chown(&db, Some(0), None).expect("chown back");
    }
    Store::open(&home).expect("usable once fixed");
}

fn running_as_root() -> bool {
    // The euid owns a file it creates.
    let dir = tempfile::tempdir().expect("tempdir");
    let probe = dir.path().join("probe");
    std::fs::write(&probe, b"").expect("probe");
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&probe).expect("stat")) == 0
}
