//! The `tether` CLI's local store as a user meets it, as real processes on real files: values
//! given at install time leave no byte behind after `remove`, and a store
//! another user can write is refused.

#![allow(clippy::expect_used, reason = "test helpers fail loudly")]

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::process::Output;

use tether_e2e::{Tether, files_bytes, holds, tether_bin};

/// `tether ARGS` with `home` as TETHER_HOME and no managed server.
fn tether(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    // Values in TETHER_HOME's 0600 file, where these tests can look at every byte.
    Tether::new(tether_bin(), home)
        .secret_store("file")
        .command(args)
        .envs(env.iter().copied())
        .output()
        .expect("running tether")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every byte of the store's files (`tether.db`, `-wal`, `-shm`).
fn store_bytes(home: &Path) -> Vec<u8> {
    files_bytes(home).expect("reading the store's files")
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Installs a server whose placeholder is filled from `--secret TOKEN=env:SENTINEL_VALUE`;
/// returns its uid.
fn install(home: &Path, name: &str, value: &str) -> String {
    let output = tether(
        home,
        &[
            "install",
            name,
            "--from",
            r#"{"command":"true","env":{"TOKEN":"{{TOKEN}}"}}"#,
            "--secret",
            "TOKEN=env:SENTINEL_VALUE",
        ],
        &[("SENTINEL_VALUE", value)],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    stdout
        .lines()
        .next()
        .expect("install prints the uid")
        .trim()
        .to_owned()
}

#[test]
fn remove_leaves_no_byte_of_an_install_time_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let removed = format!("SENTINEL-removed-{}", std::process::id());
    let kept = format!("SENTINEL-kept-{}", std::process::id());
    let kept_uid = install(&home, "kept", &kept);
    let uid = install(&home, "gone", &removed);
    // As `install --help` says: the value is written to the secret store (here the 0600
    // file), never to the SQLite files.
    assert!(holds(&store_bytes(&home), &removed), "the value is stored");
    let mut database = Vec::new();
    for name in ["tether.db", "tether.db-wal", "tether.db-shm"] {
        database.extend(std::fs::read(home.join(name)).unwrap_or_default());
    }
    assert!(
        !holds(&database, &removed),
        "a value is in the SQLite files"
    );

    let output = tether(&home, &["remove", &uid], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let bytes = store_bytes(&home);
    assert!(
        !holds(&bytes, &removed),
        "a byte of the removed value is left"
    );
    assert!(
        holds(&bytes, &kept),
        "the other installation's value is kept"
    );
    let list = tether(&home, &["list"], &[]);
    assert!(
        text(&list.stdout).contains(&kept_uid),
        "{}",
        text(&list.stdout)
    );
    assert!(!text(&list.stdout).contains(&uid));

    let help = tether(&home, &["install", "--help"], &[]);
    assert!(
        text(&help.stdout).contains("tether.db keeps only their names"),
        "{}",
        text(&help.stdout)
    );
}

#[test]
fn a_store_other_users_can_write_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let _ = install(&home, "x", "SENTINEL-loose");

    chmod(&home, 0o777);
    let output = tether(&home, &["list"], &[]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!("Fix: chmod 700 {}", home.display())),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());

    // Readable by others: used, with a warning that names the fix.
    chmod(&home, 0o755);
    let output = tether(&home, &["list"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains(&format!("chmod 700 {}", home.display())),
        "{}",
        text(&output.stderr)
    );
    chmod(&home, 0o700);

    let db = home.join("tether.db");
    chmod(&db, 0o666);
    let output = tether(&home, &["list"], &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains(&format!("chmod 600 {}", db.display())));
    chmod(&db, 0o600);

    // A database owned by another user (needs root to chown; as another user the mode
    // cases above and tether-sqlite's tests cover the checks).
    if std::fs::metadata(&db).expect("stat").uid() == 0 {
        std::os::unix::fs::chown(&db, Some(54_321), None).expect("chown");
        let output = tether(&home, &["list"], &[]);
        assert_eq!(output.status.code(), Some(1));
        assert!(
            text(&output.stderr).contains("owned by uid 54321"),
            "{}",
            text(&output.stderr)
        );
        std::os::unix::fs::chown(&db, Some(0), None).expect("chown back");
    }
    let output = tether(&home, &["list"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
}
