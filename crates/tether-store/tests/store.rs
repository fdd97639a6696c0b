//! The local store against a real SQLite file in a temp directory.

#![allow(clippy::expect_used, reason = "test helpers fail loudly")]

use std::os::unix::fs::PermissionsExt;

use pretty_assertions::assert_eq;
use tether_config::{EmptyEnv, Exposure, Installation, Origin, Secrets, parse_config};
use tether_store::{DATABASE_FILE, Location, Preference, SecretStore, Store};
use tether_testkit::{files_bytes, holds};
use uuid::Uuid;

fn installation(text: &str) -> Installation {
    let mut parsed = parse_config(text, Origin::User).expect("parsing the test config");
    parsed.servers.remove(0).into_installation()
}

/// The store with its values in the 0600 file beside the database (the tests look at every
/// byte the store writes in that directory).
fn open_store(dir: &std::path::Path) -> Result<Store, tether_store::StoreError> {
    Store::open_with(dir, SecretStore::new(dir, Preference::File))
}

const CONFIG: &str = r#"{"gh":{"command":"npx","args":["--token={{API_TOKEN}}"],"env":{"GITHUB":"sk-SENTINEL","1KEY":"v"}}}"#;

#[test]
fn install_get_list_remove() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let mut store = open_store(&home).expect("open");
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
    let mut store = open_store(&home).expect("open");
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
        let mut store = open_store(dir.path()).expect("open");
        store.install(&installation(CONFIG)).expect("install")
    };
    let store = open_store(dir.path()).expect("reopen");
    assert!(store.contains(uid).expect("contains"));
}

#[test]
fn a_failed_install_leaves_no_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open_store(dir.path()).expect("open");
    let uid = Uuid::new_v4();
    // No stored values: the install is the transaction alone.
    let plain = r#"{"gh":{"command":"npx","args":["--token={{API_TOKEN}}"]}}"#;
    store
        .install_as(uid, &installation(plain), &Secrets::new(), None)
        .expect("first install");
    // Installing under the same UUID fails on the primary key, after the template row was
    // written in the same transaction: the rollback must remove it.
    let before = store.list().expect("list").len();
    assert!(
        store
            .install_as(uid, &installation(plain), &Secrets::new(), None)
            .is_err()
    );
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
    open_store(dir.path()).expect("create");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let path = dir.path().to_owned();
            std::thread::spawn(move || {
                let mut store = open_store(&path).expect("open");
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
        open_store(dir.path())
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

/// A value given at install time leaves no byte in the store's files once
/// the installation is removed (secure_delete + a truncating WAL checkpoint).
#[test]
fn remove_leaves_no_byte_of_a_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sentinel = "SENTINEL-4d2a9c71-install-time-value";
    let config = format!(
        r#"{{"gh":{{"command":"npx","env":{{"TOKEN":"{sentinel}","OTHER":"kept-value"}}}}}}"#
    );
    let mut store = open_store(dir.path()).expect("open");
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
        open_store(dir.path())
            .expect("reopen")
            .contains(kept)
            .expect("contains")
    );
}

/// A store another user can write is refused, with the fix in the message.
#[test]
fn a_store_others_can_write_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    open_store(&home).expect("create");
    let chmod = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };

    chmod(&home, 0o777);
    let error = open_store(&home).expect_err("a world-writable TETHER_HOME is refused");
    let text = error.to_string();
    assert!(
        text.contains(&format!("chmod 700 {}", home.display())),
        "{text}"
    );
    chmod(&home, 0o700);

    let db = home.join(DATABASE_FILE);
    chmod(&db, 0o666);
    let text = open_store(&home)
        .expect_err("a 0666 database is refused")
        .to_string();
    assert!(
        text.contains(&format!("chmod 600 {}", db.display())),
        "{text}"
    );
    chmod(&db, 0o600);

    if running_as_root() {
        std::os::unix::fs::chown(&db, Some(54_321), None).expect("chown");
        let text = open_store(&home)
            .expect_err("a foreign database is refused")
            .to_string();
        assert!(text.contains("owned by uid 54321"), "{text}");
        std::os::unix::fs::chown(&db, Some(0), None).expect("chown back");
    }
    open_store(&home).expect("usable once fixed");
}

fn running_as_root() -> bool {
    // The euid owns a file it creates.
    let dir = tempfile::tempdir().expect("tempdir");
    let probe = dir.path().join("probe");
    std::fs::write(&probe, b"").expect("probe");
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&probe).expect("stat")) == 0
}

/// Every byte of the SQLite files alone (`tether.db`, `-wal`, `-shm`), not the secret file.
fn database_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        if let Ok(content) = std::fs::read(dir.join(format!("{DATABASE_FILE}{suffix}"))) {
            bytes.extend(content);
        }
    }
    bytes
}

/// Values that break naive quoting, expansion or templating (the sentinel makes each unique).
const HOSTILE: &[&str] = &[
    "SENTINEL-a $HOME $$ %s",
    "SENTINEL-b \"quoted\" 'single' \\back\\",
    "SENTINEL-c {{x}} ${X}",
    "SENTINEL-d line\nbreak",
    "SENTINEL-e ünï秘密",
];

/// The SQLite file keeps names and locations only; values live in the
/// secret store, come back byte-exact, and leave it on `remove`.
#[test]
fn values_live_in_the_secret_store_not_in_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open_store(dir.path()).expect("open");
    let env: serde_json::Map<String, serde_json::Value> = HOSTILE
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("K{i}"), serde_json::Value::from(*v)))
        .collect();
    let config = serde_json::json!({"s": {"command": "srv", "args": ["{{RUN_ONLY}}"], "env": env}});
    let original = installation(&config.to_string());
    let uid = store.install(&original).expect("install");
    let db = database_bytes(dir.path());
    for value in HOSTILE {
        assert!(!holds(&db, value), "a value is in the SQLite files");
    }
    assert_eq!(store.get(uid).expect("get").expect("installed"), original);
    let listed = store.list().expect("list");
    assert_eq!(listed[0].stored.len(), HOSTILE.len());
    assert!(
        listed[0]
            .stored
            .iter()
            .all(|s| s.location == Location::File)
    );
    // `{{x}}` inside a written value is filled by each run too.
    assert_eq!(listed[0].missing(), ["x", "RUN_ONLY"]);
    assert_eq!(listed[0].transport, "stdio");
    assert_eq!(listed[0].source, None);

    assert!(store.remove(uid).expect("remove"));
    let all = all_bytes(dir.path());
    for value in HOSTILE {
        assert!(!holds(&all, value), "a removed value is left on disk");
    }
    assert_eq!(
        store
            .secret_store()
            .get(Location::File, uid, "K0")
            .expect("get"),
        None
    );
}

/// A store written by an older tether (values in `variable_values`) has them moved into the
/// secret store on open, and no byte of them is left in the SQLite files.
#[test]
fn an_old_store_is_migrated_and_left_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sentinel = "SENTINEL-old-format-1f5e9a";
    let uid = Uuid::new_v4();
    {
        // Version 1 of the schema, as the older tether wrote it.
        let conn = tether_sqlite::open(dir.path(), DATABASE_FILE).expect("open");
        conn.execute_batch(
            "CREATE TABLE templatable_servers (id TEXT PRIMARY KEY NOT NULL, name TEXT NOT NULL, template_json TEXT NOT NULL, created_at INTEGER NOT NULL);
             CREATE TABLE installations (uid TEXT PRIMARY KEY NOT NULL, server_id TEXT NOT NULL REFERENCES templatable_servers(id) ON DELETE CASCADE, created_at INTEGER NOT NULL);
             CREATE TABLE variable_values (installation_uid TEXT NOT NULL REFERENCES installations(uid) ON DELETE CASCADE, position INTEGER NOT NULL, name TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (installation_uid, name));
             PRAGMA user_version = 1;",
        )
        .expect("old schema");
        let old = installation(
            r#"{"gh":{"command":"npx","args":["--token={{API_TOKEN}}"],"env":{"GITHUB":"x"}}}"#,
        );
        let template = serde_json::to_string(&old.server).expect("template");
        conn.execute(
            "INSERT INTO templatable_servers VALUES ('s1', 'gh', ?1, 1)",
            [template],
        )
        .expect("server row");
        conn.execute(
            "INSERT INTO installations VALUES (?1, 's1', 1)",
            [uid.to_string()],
        )
        .expect("installation row");
        for (position, (name, value)) in [("GITHUB", sentinel), ("API_TOKEN", "{{API_TOKEN}}")]
            .into_iter()
            .enumerate()
        {
            conn.execute(
                "INSERT INTO variable_values VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![uid.to_string(), position, name, value],
            )
            .expect("value row");
        }
        tether_sqlite::checkpoint_truncate(&conn).expect("checkpoint");
    }
    assert!(
        holds(&database_bytes(dir.path()), sentinel),
        "the old store holds it"
    );

    let store = open_store(dir.path()).expect("open migrates");
    assert!(
        !holds(&database_bytes(dir.path()), sentinel),
        "a byte of the moved value is left in the SQLite files"
    );
    let loaded = store.get(uid).expect("get").expect("installed");
    assert_eq!(loaded.values["GITHUB"].value.expose(), sentinel);
    assert_eq!(loaded.values["API_TOKEN"].value.expose(), "{{API_TOKEN}}");
    let listed = store.list().expect("list");
    assert_eq!(listed[0].missing(), ["API_TOKEN"]);
    drop(store);
    // Opening again moves nothing twice and keeps the value.
    let store = open_store(dir.path()).expect("reopen");
    let loaded = store.get(uid).expect("get").expect("installed");
    assert_eq!(loaded.values["GITHUB"].value.expose(), sentinel);
}

/// Values a killed writer left pending (no committed installation) are swept by the next
/// open once that process is gone; a live writer's are left alone.
#[test]
fn pending_values_of_a_dead_writer_are_swept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(dir.path()).expect("open");
    let secrets = store.secret_store();
    let (dead_uid, live_uid) = (Uuid::new_v4(), Uuid::new_v4());
    secrets
        .set(dead_uid, "A", &"dead-writer".into())
        .expect("set");
    secrets
        .set(live_uid, "A", &"live-writer".into())
        .expect("set");
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawning true");
    let dead_pid = child.id();
    child.wait().expect("waiting for true");
    drop(store);
    {
        let conn = tether_sqlite::open(dir.path(), DATABASE_FILE).expect("open");
        for (uid, pid) in [(dead_uid, dead_pid), (live_uid, std::process::id())] {
            conn.execute(
                "INSERT INTO pending_secrets VALUES (?1, 'A', 'file', ?2, 0)",
                rusqlite::params![uid.to_string(), pid],
            )
            .expect("pending row");
        }
    }
    let store = open_store(dir.path()).expect("open sweeps");
    let secrets = store.secret_store();
    assert_eq!(
        secrets.get(Location::File, dead_uid, "A").expect("get"),
        None
    );
    assert!(
        secrets
            .get(Location::File, live_uid, "A")
            .expect("get")
            .is_some()
    );
}

/// `set_secret` / `remove_secret` / `move_secrets`: names only in SQLite, one location each.
#[test]
fn set_remove_and_move_one_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open_store(dir.path()).expect("open");
    let uid = store.install(&installation(CONFIG)).expect("install");
    let error = store
        .set_secret(uid, "NOPE", &"x".into())
        .expect_err("unknown variable");
    assert!(error.to_string().contains("API_TOKEN"), "{error}");
    assert_eq!(
        store
            .set_secret(uid, "API_TOKEN", &"SENTINEL-set".into())
            .expect("set"),
        Location::File
    );
    // A secret: applied verbatim at use, not as text of the config.
    let loaded = store.get(uid).expect("get").expect("installed");
    assert_eq!(loaded.values["API_TOKEN"].value.expose(), "{{API_TOKEN}}");
    let stored = store.secrets_for(uid).expect("secrets_for");
    assert_eq!(
        stored.get("API_TOKEN").as_ref().map(|v| v.expose()),
        Some("SENTINEL-set")
    );
    assert!(!holds(&database_bytes(dir.path()), "SENTINEL-set"));
    assert!(store.list().expect("list")[0].missing().is_empty());
    assert_eq!(store.move_secrets(Location::File).expect("move"), 0);
    assert!(store.remove_secret(uid, "API_TOKEN").expect("rm"));
    assert!(!store.remove_secret(uid, "API_TOKEN").expect("rm again"));
    assert!(store.secrets_for(uid).expect("secrets_for").is_empty());
    assert!(!holds(&all_bytes(dir.path()), "SENTINEL-set"));
}

/// Secrets given at install time are stored as secrets: the installation keeps the
/// placeholder, `secrets_for` gives the value (verbatim, whatever it holds), and a secret for
/// a name that is no variable is not stored.
#[test]
fn install_time_secrets_are_applied_as_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open_store(dir.path()).expect("open");
    let secrets: Secrets = [("API_TOKEN", "SENTINEL-$HOME-{{x}}"), ("UNUSED", "u")]
        .into_iter()
        .collect();
    let uid = store
        .install_with(&installation(CONFIG), &secrets, None)
        .expect("install");
    let loaded = store.get(uid).expect("get").expect("installed");
    assert_eq!(loaded.values["API_TOKEN"].value.expose(), "{{API_TOKEN}}");
    assert_eq!(loaded.values["GITHUB"].value.expose(), "sk-SENTINEL");
    let stored = store.secrets_for(uid).expect("secrets_for");
    assert_eq!(stored.names().collect::<Vec<_>>(), ["API_TOKEN"]);
    assert_eq!(
        stored.get("API_TOKEN").as_ref().map(|v| v.expose()),
        Some("SENTINEL-$HOME-{{x}}")
    );
    let rendered = loaded
        .render(&stored, &EmptyEnv)
        .to_json(Exposure::Real)
        .to_string();
    assert!(
        rendered.contains("--token=SENTINEL-$HOME-{{x}}"),
        "{rendered}"
    );
    assert!(store.list().expect("list")[0].missing().is_empty());
    assert!(!holds(&database_bytes(dir.path()), "SENTINEL-$HOME"));
}

/// A value that cannot be deleted when its installation is removed (its store is unusable
/// now) stays pending: `remove` succeeds, later opens keep working, and the value is swept
/// once the store is usable again.
#[test]
fn a_value_that_cannot_be_deleted_now_is_swept_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open_store(dir.path()).expect("open");
    let secrets: Secrets = [("API_TOKEN", "SENTINEL-later")].into_iter().collect();
    let uid = store
        .install_with(&installation(CONFIG), &secrets, None)
        .expect("install");
    let file = dir.path().join("secrets.json");
    // Another user could read it now: the file backend refuses to touch it.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert!(store.remove(uid).expect("remove succeeds"));
    assert!(store.list().expect("list").is_empty());
    drop(store);
    let store = open_store(dir.path()).expect("open with a pending value it cannot sweep yet");
    drop(store);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    // The removing process has exited by the time a later run opens the store.
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawning true");
    let dead_pid = child.id();
    child.wait().expect("waiting for true");
    {
        let conn = tether_sqlite::open(dir.path(), DATABASE_FILE).expect("open");
        let changed = conn
            .execute("UPDATE pending_secrets SET pid = ?1", [dead_pid])
            .expect("pending rows");
        assert_eq!(
            changed, 3,
            "its three values (two written in the config) are pending"
        );
    }
    let store = open_store(dir.path()).expect("open sweeps");
    assert_eq!(
        store
            .secret_store()
            .get(Location::File, uid, "API_TOKEN")
            .expect("get"),
        None
    );
}

/// OAuth token entries: stored where new values go and recorded with their server, read back
/// from there, listed without values, and deleted with their record.
#[test]
fn oauth_entries_are_recorded_read_and_removed() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = open_store(dir.path()).expect("opening the store");
    let key = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, b"http://127.0.0.1:1/mcp");
    let value = tether_config::SecretValue::new("{\"access_token\":\"SENTINEL $HOME\"}".to_owned());
    assert_eq!(store.get_oauth(key).expect("reading"), None);
    let location = store
        .set_oauth(key, "http://127.0.0.1:1/mcp", &value)
        .expect("storing");
    assert_eq!(location, tether_store::Location::File);
    assert_eq!(
        store.oauth_entries().expect("listing"),
        [tether_store::CredentialEntry {
            key,
            name: tether_store::OAUTH_NAME.to_owned(),
            server: "http://127.0.0.1:1/mcp".to_owned(),
            location,
        }]
    );
    assert_eq!(store.get_oauth(key).expect("reading"), Some(value));
    // Another credential under the same key (a registry's API key): listed with the OAuth
    // entry, kept apart from it.
    let api_key = tether_config::SecretValue::new("SENTINEL-API-KEY".to_owned());
    store
        .set_credential(key, "SMITHERY_API_KEY", "http://127.0.0.1:2", &api_key)
        .expect("storing the key");
    assert_eq!(store.credentials().expect("listing").len(), 2);
    assert_eq!(store.oauth_entries().expect("listing").len(), 1);
    assert_eq!(
        store
            .get_credential(key, "SMITHERY_API_KEY")
            .expect("reading"),
        Some(api_key)
    );
    assert!(
        store
            .remove_credential(key, "SMITHERY_API_KEY")
            .expect("removing")
    );
    assert_eq!(store.credentials().expect("listing").len(), 1);
    let database = std::fs::read(store.path()).expect("reading the database");
    assert!(
        !tether_testkit::holds(&database, "SENTINEL"),
        "no value in SQLite"
    );
    assert!(store.remove_oauth(key).expect("removing"));
    assert_eq!(store.get_oauth(key).expect("reading"), None);
    assert!(store.oauth_entries().expect("listing").is_empty());
    assert!(!store.remove_oauth(key).expect("removing again"));
}
