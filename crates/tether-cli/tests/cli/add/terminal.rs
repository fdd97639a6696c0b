//! `tether add` on a terminal: it asks for a missing secret (never under `--yes`) and, when
//! several packages fit, which one.

use super::*;

/// `tether ARGS` on a pseudo-terminal (util-linux `script`), as a person at a terminal runs
/// it: `answer` is typed once `prompt` shows — for a hidden prompt (`hidden`: an argument only
/// this run of tether has, to find its process by), once its terminal's echo is off too.
/// Returns everything the terminal showed and the exit code. `None` when `script` is not
/// installed.
fn on_a_terminal(
    sandbox: &Sandbox,
    env: &[(&str, &str)],
    args: &[&str],
    prompt: &str,
    answer: &str,
    hidden: Option<&str>,
) -> Option<(String, Option<i32>)> {
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};
    if Command::new("script").arg("--version").output().is_err() {
        tether_testkit::missing("util-linux `script`", "apt-get install util-linux");
        return None;
    }
    let tether = assert_cmd::cargo::cargo_bin("tether");
    let mut line = vec![tether.display().to_string()];
    line.extend(args.iter().map(|a| (*a).to_owned()));
    let quoted: Vec<String> = line
        .iter()
        .map(|word| format!("'{}'", word.replace('\'', r"'\''")))
        .collect();
    let mut command = Command::new("script");
    command
        .args(["-qec", &quoted.join(" "), "/dev/null"])
        .current_dir(sandbox.dir.path())
        .env("TETHER_HOME", sandbox.home())
        .env("NO_COLOR", "1")
        .env_remove("SMITHERY_API_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("starting script");
    let shown = Arc::new(Mutex::new(Vec::new()));
    let mut stdout = child.stdout.take().expect("script's stdout");
    let reader = {
        let shown = Arc::clone(&shown);
        std::thread::spawn(move || {
            let mut buffer = [0_u8; 4096];
            while let Ok(n) = stdout.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                shown
                    .lock()
                    .expect("the output")
                    .extend_from_slice(&buffer[..n]);
            }
        })
    };
    let mut stdin = child.stdin.take().expect("script's stdin");
    let waited = Instant::now();
    if !prompt.is_empty() {
        while !String::from_utf8_lossy(&shown.lock().expect("the output")).contains(prompt) {
            if waited.elapsed() > Duration::from_secs(60)
                || child.try_wait().ok().flatten().is_some()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(marker) = hidden {
            while !tether_testkit::terminal_echo_is_off(&tether, marker) {
                if waited.elapsed() > Duration::from_secs(60)
                    || child.try_wait().ok().flatten().is_some()
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = stdin.write_all(answer.as_bytes());
    }
    let status = child.wait().expect("waiting for script");
    drop(stdin);
    reader.join().expect("the reader thread");
    let shown = String::from_utf8_lossy(&shown.lock().expect("the output")).into_owned();
    Some((shown, status.code()))
}

/// On a terminal, a missing required secret is asked for with hidden input (not echoed),
/// stored, and used by the next run with no `--secret`; with `--yes` nothing is asked and the
/// error names the missing input.
#[test]
fn add_asks_for_a_missing_secret_on_a_terminal_and_yes_never_asks() {
    let server = HttpTestMcp::start();
    let registry = FixtureRegistry::start(&[]);
    let sandbox = Sandbox::new();
    let port = format!("port={}", server.port);
    let env = [
        ("TETHER_REGISTRY_URL", registry.url.as_str()),
        ("TETHER_SECRET_STORE", "file"),
    ];
    let base = [
        "add",
        "io.github.example/everything",
        "--package",
        "remote",
        "--set",
        &port,
    ];

    let mut with_yes = base.to_vec();
    with_yes.push("--yes");
    let Some((shown, code)) = on_a_terminal(&sandbox, &env, &with_yes, "", "", None) else {
        return;
    };
    assert_eq!(code, Some(2), "{shown}");
    assert!(
        shown.contains("--secret X-Api-Key=SOURCE  (Key the gateway checks)"),
        "{shown}"
    );
    assert!(!shown.contains("needs 1 more input"), "{shown}");

    let typed = "SENTINEL-typed-at-the-prompt";
    let (shown, code) = on_a_terminal(
        &sandbox,
        &env,
        &base,
        "Key the gateway checks (X-Api-Key): ",
        &format!("{typed}\n"),
        Some(&port),
    )
    .expect("script is installed");
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("needs 1 more input"), "{shown}");
    assert!(
        !shown.contains(typed),
        "the hidden input was echoed: {shown}"
    );
    assert!(
        shown.contains("its secrets (X-Api-Key) are stored in the file"),
        "{shown}"
    );

    let out = sandbox
        .tether(&["test", "--mcp", "everything"])
        .env("TETHER_SECRET_STORE", "file")
        .output()
        .expect("running tether test");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let secret_file =
        std::fs::read_to_string(sandbox.home().join("secrets.json")).expect("the secret file");
    assert!(secret_file.contains(typed));
}

/// With more than one usable way to run an entry (here a local npm package
/// whose runner is on PATH, and a remote), `add` on a terminal asks which; `--yes` takes the
/// preferred one and says what else there was.
#[test]
fn add_asks_which_package_on_a_terminal_when_several_fit() {
    let server = HttpTestMcp::start();
    let registry = FixtureRegistry::start(&[]);
    let sandbox = Sandbox::new();
    // An npx that would fail: picking the remote must not run it.
    let shim = npx_shim(&sandbox, "echo 'the npm package was launched' >&2; exit 1");
    let path = path_with(&shim);
    let port = format!("port={}", server.port);
    let env = [
        ("TETHER_REGISTRY_URL", registry.url.as_str()),
        ("TETHER_SECRET_STORE", "file"),
        ("PATH", path.as_str()),
        ("KEY", "SENTINEL-picked-remote-7f3a"),
    ];
    let (shown, code) = on_a_terminal(
        &sandbox,
        &env,
        &[
            "add",
            "io.github.example/everything",
            "--set",
            &port,
            "--secret",
            "X-Api-Key=env:KEY",
        ],
        "which one (Enter for 1): ",
        "2\n",
        None,
    )
    .expect("script is installed");
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("can run in 2 ways"), "{shown}");
    assert!(shown.contains("  2. remote"), "{shown}");
    assert!(!shown.contains("the npm package was launched"), "{shown}");
    assert!(!shown.contains("SENTINEL-picked-remote-7f3a"), "{shown}");

    let sandbox = Sandbox::new();
    let (shown, _) = on_a_terminal(
        &sandbox,
        &env,
        &["add", "io.github.example/everything", "--yes"],
        "",
        "",
        None,
    )
    .expect("script is installed");
    assert!(!shown.contains("can run in"), "--yes asked: {shown}");
    assert!(
        shown.contains("has 1 other way to run (see `tether show io.github.example/everything`); --package picks one"),
        "{shown}"
    );
}
