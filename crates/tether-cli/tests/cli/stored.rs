//! Stored secrets: `install --secret` stores the value in the secret
//! store, `--mcp NAME` applies it in memory with no `--secret`, a run's `--secret` overrides
//! it, and hostile values never reach stdout/stderr at -vvv, the SQLite file, or any file but
//! the 0600 store — with the file backend, and with a real Secret Service.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::{Sandbox, config, server_json, text};
use tether_testkit::{files_bytes, holds};

/// A value that breaks naive quoting, expansion or templating; its first line is unique.
const HOSTILE: &str =
    "SENTINEL-7c1e $HOME $$ %s \"dq\" 'sq' \\back\\ {{x}} ${Y} ünï秘密\nsecond line of it";

/// The Secret Service is reachable from this process; in CI it must be.
pub fn secret_service_or_skip() -> bool {
    let dir = tempfile::tempdir().expect("tempdir");
    let probe = tether_store::SecretStore::new(dir.path(), tether_store::Preference::Keyring);
    match probe.location() {
        Ok(_) => true,
        Err(error) => {
            tether_testkit::missing("a Secret Service", &error.to_string());
            false
        }
    }
}

/// Every file under TETHER_HOME except the 0600 secret file.
fn files_but_the_secret_file(home: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(home).expect("reading TETHER_HOME") {
        let path = entry.expect("entry").path();
        if path.is_file() && path.file_name().is_some_and(|n| n != "secrets.json") {
            bytes.extend(std::fs::read(&path).expect("reading a file"));
        }
    }
    bytes
}

fn stored_secret_applied_at_use(backend: &str) {
    let sandbox = Sandbox::new();
    let home = sandbox.home();
    let value_file = sandbox.write("value", HOSTILE);
    let from = config(&[server_json(
        "echo",
        &["--expect-env-file", &format!("API_KEY={value_file}")],
        &[("API_KEY", "{{API_KEY}}")],
    )]);
    let secret = format!("API_KEY=file:{value_file}");
    let run = |args: &[&str]| {
        sandbox
            .tether(args)
            .env("TETHER_SECRET_STORE", backend)
            .output()
            .expect("running tether")
    };
    let install = run(&[
        "-vvv", "install", "echo", "--from", &from, "--secret", &secret,
    ]);
    assert!(install.status.success(), "{}", text(&install.stderr));

    // No --secret: the stored value reaches the server byte-exact (it exits 3 otherwise).
    let test = run(&["-vvv", "test", "--mcp", "echo"]);
    assert!(
        test.status.success(),
        "{}{}",
        text(&test.stdout),
        text(&test.stderr)
    );
    assert!(
        text(&test.stdout).contains("ready"),
        "{}",
        text(&test.stdout)
    );

    // A run's --secret overrides the stored value for that run only.
    let other = sandbox.write("other", "SENTINEL-override");
    let overridden = run(&[
        "test",
        "--mcp",
        "echo",
        "--secret",
        &format!("API_KEY=file:{other}"),
    ]);
    assert_eq!(
        overridden.status.code(),
        Some(1),
        "{}",
        text(&overridden.stderr)
    );
    assert!(
        text(&overridden.stdout).contains("failed"),
        "{}",
        text(&overridden.stdout)
    );

    let list = run(&["list"]);
    assert!(
        text(&list.stdout).contains("hand-written  stdio      1/1 stored"),
        "{}",
        text(&list.stdout)
    );
    let secrets = run(&["secrets", "list", "echo"]);
    let where_ = if backend == "file" {
        format!("file {}", home.join("secrets.json").display())
    } else {
        "keyring (OS credential store)".to_owned()
    };
    assert!(
        text(&secrets.stdout).contains(&format!("API_KEY  {where_}")),
        "{}",
        text(&secrets.stdout)
    );

    for output in [&install, &test, &overridden, &list, &secrets] {
        for stream in [&output.stdout, &output.stderr] {
            let shown = text(stream);
            assert!(!shown.contains("SENTINEL-7c1e"), "{shown}");
            assert!(!shown.contains("second line of it"), "{shown}");
        }
    }
    let others = files_but_the_secret_file(&home);
    assert!(
        !holds(&others, "SENTINEL-7c1e"),
        "a value is in tether.db or another file"
    );
    let secret_file = home.join("secrets.json");
    if backend == "file" {
        let mode = std::fs::metadata(&secret_file)
            .expect("the secret file exists")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(holds(&files_bytes(&home).expect("files"), "SENTINEL-7c1e"));
    } else {
        assert!(!secret_file.exists(), "the keyring backend wrote the file");
    }

    // remove deletes the value from the secret store too.
    let uid = text(&install.stdout).trim().to_owned();
    let remove = run(&["remove", &uid]);
    assert!(remove.status.success(), "{}", text(&remove.stderr));
    let probe = tether_store::SecretStore::new(&home, tether_store::Preference::Auto);
    let location = if backend == "file" {
        tether_store::Location::File
    } else {
        tether_store::Location::Keyring
    };
    let parsed = uuid::Uuid::parse_str(&uid).expect("install printed a uid");
    assert_eq!(probe.get(location, parsed, "API_KEY").expect("get"), None);
    assert!(!holds(&files_bytes(&home).expect("files"), "SENTINEL-7c1e"));
}

#[test]
fn a_stored_secret_is_applied_at_use_file_backend() {
    stored_secret_applied_at_use("file");
}

#[test]
fn a_stored_secret_is_applied_at_use_secret_service() {
    if secret_service_or_skip() {
        stored_secret_applied_at_use("keyring");
    }
}

/// `tether secrets set` reads all of stdin when it is not a terminal (a multi-line value),
/// `rm` deletes it, and neither prints it.
#[test]
fn secrets_set_from_stdin_and_rm() {
    let sandbox = Sandbox::new();
    let from = config(&[server_json("echo", &[], &[("TOKEN", "{{TOKEN}}")])]);
    let pinned = |args: &[&str]| {
        let mut command = sandbox.tether(args);
        command.env("TETHER_SECRET_STORE", "file");
        command
    };
    let install = pinned(&["install", "echo", "--from", &from])
        .output()
        .expect("install");
    assert!(install.status.success(), "{}", text(&install.stderr));
    assert!(
        text(&install.stderr).contains("pass these at run time with --secret: TOKEN"),
        "{}",
        text(&install.stderr)
    );
    let set = pinned(&["secrets", "set", "echo", "TOKEN"])
        .write_stdin(HOSTILE)
        .output()
        .expect("set");
    assert!(set.status.success(), "{}", text(&set.stderr));
    // The first write created the file: the one-time notice says where and how to move.
    let stderr = text(&set.stderr);
    assert!(
        stderr.contains("secrets.json") && stderr.contains("tether secrets move keyring"),
        "{stderr}"
    );
    assert!(!stderr.contains("SENTINEL"), "{stderr}");
    let stored = tether_store::SecretStore::new(&sandbox.home(), tether_store::Preference::File);
    let uid = uuid::Uuid::parse_str(text(&install.stdout).trim()).expect("uid");
    assert_eq!(
        stored
            .get(tether_store::Location::File, uid, "TOKEN")
            .expect("get")
            .expect("stored")
            .expose(),
        HOSTILE
    );
    let unknown = pinned(&["secrets", "set", "echo", "NOPE", "--from", "env:HOME"])
        .output()
        .expect("set unknown");
    assert_eq!(unknown.status.code(), Some(2));
    assert!(text(&unknown.stderr).contains("its variables: TOKEN"));
    let rm = pinned(&["secrets", "rm", "echo", "TOKEN"])
        .output()
        .expect("rm");
    assert!(rm.status.success(), "{}", text(&rm.stderr));
    let again = pinned(&["secrets", "rm", "echo", "TOKEN"])
        .output()
        .expect("rm");
    assert_eq!(again.status.code(), Some(2));
    assert!(!holds(
        &files_bytes(&sandbox.home()).expect("files"),
        "SENTINEL"
    ));
}

/// `auto` with no session bus falls back to the 0600 file and says so once: where the values
/// are, that they are not encrypted, and how to move them.
#[test]
fn auto_without_a_secret_service_uses_the_file_and_says_so_once() {
    let sandbox = Sandbox::new();
    let runtime = sandbox.path("runtime");
    std::fs::create_dir_all(&runtime).expect("an empty runtime dir");
    let from = config(&[server_json("echo", &[], &[("TOKEN", "{{TOKEN}}")])]);
    let install = |name: &str| {
        sandbox
            .tether(&[
                "install",
                name,
                "--from",
                &from,
                "--secret",
                "TOKEN=env:VALUE",
            ])
            .env("TETHER_SECRET_STORE", "auto")
            .env_remove(tether_env::EnvVars::DBUS_SESSION_BUS_ADDRESS)
            .env(tether_env::EnvVars::XDG_RUNTIME_DIR, &runtime)
            .env("VALUE", "SENTINEL-auto")
            .output()
            .expect("running tether install")
    };
    let first = install("one");
    assert!(first.status.success(), "{}", text(&first.stderr));
    let stderr = text(&first.stderr);
    let file = sandbox.home().join("secrets.json");
    assert!(
        stderr.contains(&format!(
            "notice: secrets are now stored in {} (mode 0600, NOT encrypted",
            file.display()
        )) && stderr.contains("no OS credential store")
            && stderr.contains("tether secrets move keyring"),
        "{stderr}"
    );
    assert!(!stderr.contains("SENTINEL"), "{stderr}");
    let second = install("two");
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert!(
        !text(&second.stderr).contains("notice:"),
        "{}",
        text(&second.stderr)
    );
    assert!(holds(
        &std::fs::read(&file).expect("the file"),
        "SENTINEL-auto"
    ));
    assert!(!holds(
        &files_but_the_secret_file(&sandbox.home()),
        "SENTINEL-auto"
    ));

    // Moving them into the keyring while none answers says what the move needs, not how to
    // keep using the file, and moves nothing.
    let before = std::fs::read(&file).expect("the file");
    let moved = sandbox
        .tether(&["secrets", "move", "keyring"])
        .env("TETHER_SECRET_STORE", "auto")
        .env_remove(tether_env::EnvVars::DBUS_SESSION_BUS_ADDRESS)
        .env(tether_env::EnvVars::XDG_RUNTIME_DIR, &runtime)
        .output()
        .expect("running tether secrets move keyring");
    let stderr = text(&moved.stderr);
    assert_eq!(moved.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot move the values into the OS credential store")
            && stderr.contains("nothing was moved")
            && stderr.contains("run `tether secrets move keyring` again"),
        "{stderr}"
    );
    assert!(!stderr.contains("TETHER_SECRET_STORE=file"), "{stderr}");
    assert_eq!(std::fs::read(&file).expect("the file"), before);
}

/// `secret_store` in config.toml chooses the backend when `TETHER_SECRET_STORE` is unset; an
/// unknown value is a usage error naming where it came from.
#[test]
fn config_toml_chooses_the_secret_store() {
    let sandbox = Sandbox::new();
    std::fs::create_dir_all(sandbox.home()).expect("TETHER_HOME");
    std::fs::set_permissions(sandbox.home(), std::fs::Permissions::from_mode(0o700))
        .expect("chmod");
    let config_file = sandbox.home().join("config.toml");
    let from = config(&[server_json("echo", &[], &[("TOKEN", "{{TOKEN}}")])]);
    let install = || {
        sandbox
            .tether(&[
                "install",
                "echo",
                "--from",
                &from,
                "--secret",
                "TOKEN=env:VALUE",
            ])
            .env_remove("TETHER_SECRET_STORE")
            // Long enough to be told apart: every value read is masked in what tether prints
            // from then on, and a one-letter value would mask that letter in the error.
            .env("VALUE", "value-of-the-token")
            .output()
            .expect("running tether install")
    };
    std::fs::write(&config_file, "secret_store = \"vault\"\n").expect("config.toml");
    let out = install();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("secret_store in config.toml: unknown secret store \"vault\""),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(&config_file, "secret_store = \"file\"\n").expect("config.toml");
    let out = install();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(sandbox.home().join("secrets.json").exists());
}
