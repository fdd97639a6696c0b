//! `--mcp NAME` runs the local installation called NAME; a name that
//! is also a path, or that two installations share, is refused with what to pass instead.

use crate::support::{Sandbox, json_str, test_server_bin, text};

#[test]
fn an_installed_server_runs_by_its_name() {
    let sandbox = Sandbox::new();
    sandbox.install_test_server("tools");
    let out = sandbox.run(&["test", "--mcp", "tools", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("parsing the JSON report");
    assert_eq!(report["servers"][0]["name"], "tools");
    assert_eq!(report["servers"][0]["status"], "ready");

    // A name nothing is installed under is read as a path, and says so.
    let out = sandbox.run(&["test", "--mcp", "nothing-called-this"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--mcp nothing-called-this is not an installed server's name"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_name_that_is_also_a_path_or_shared_is_refused() {
    let sandbox = Sandbox::new();
    let uid = sandbox.install_test_server("twice");
    sandbox.write("twice", "{}");
    let out = sandbox.run(&["test", "--mcp", "twice"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pass ./twice for the file"), "{stderr}");
    assert!(stderr.contains(&uid), "{stderr}");

    // A second installation of the same name is refused when it is installed, so `--mcp NAME`
    // cannot become ambiguous through `tether install`.
    let sandbox = Sandbox::new();
    sandbox.install_test_server("shared");
    let spec = format!(
        r#"{{"command": {}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    );
    let out = sandbox.run(&["install", "shared", "--from", &spec]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("exists already"), "{stderr}");
}
