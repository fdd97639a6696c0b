//! One exit-code table for `tether` and `tether-server` — README's table, and
//! both binaries exiting 2 on the same bad input.

#![allow(clippy::expect_used, reason = "test helpers fail loudly")]

use std::path::Path;
use std::process::{Command, Output};

use tether_e2e::{server_bin, tether_bin};

const README: &str = include_str!("../../../README.md");

fn run(bin: &Path, args: &[&str], home: &Path) -> Output {
    Command::new(bin)
        .args(args)
        .env("TETHER_HOME", home)
        .env(
            "TETHER_SERVER_KEY",
            "5f0c9e1ab27d4c83e6f1a09b3d5c7e21f4a8b6c0d2e4f6a8b0c2d4e6f8a0b2c4",
        )
        .env_remove("TETHER_SERVER_URL")
        .env_remove("TETHER_API_KEY")
        .env_remove("TETHER_API_KEY_FILE")
        .output()
        .expect("running a tether binary")
}

/// README's "Exit codes" table: code → (tether, tether-server).
fn readme_table() -> Vec<(String, String, String)> {
    let section = README
        .split("\n## Exit codes\n")
        .nth(1)
        .expect("README has an Exit codes section");
    section
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(|line| {
            let cells: Vec<String> = line
                .trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().to_owned())
                .collect();
            assert_eq!(cells.len(), 3, "{line}");
            (cells[0].clone(), cells[1].clone(), cells[2].clone())
        })
        .collect()
}

#[test]
fn one_exit_code_table_for_both_binaries() {
    let table = readme_table();
    let codes: Vec<&str> = table.iter().map(|(code, _, _)| code.as_str()).collect();
    assert_eq!(codes, ["0", "1", "2", "3"]);
    for (code, tether, server) in &table[..3] {
        assert!(
            !tether.is_empty() && server != "—",
            "code {code}: {tether} / {server}"
        );
    }
    assert_eq!(table[3].2, "—", "tether-server has no managed resolution");

    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let data = dir.path().join("data");
    let data = data.to_string_lossy();
    let spec = r#"{"x":{"command":"x","env":{"T":"{{T}}"}}}"#;
    let one = r#"{"command":"x","env":{"T":"{{T}}"}}"#;
    let tether = tether_bin();
    let server = server_bin();
    let mut cases: Vec<(&Path, Vec<&str>)> = vec![
        (&tether, vec!["--no-such-flag"]),
        (&server, vec!["--no-such-flag"]),
    ];
    // The same bad --secret arguments given to each binary: a literal, a name twice.
    for secrets in [&["T=sk-SENTINEL-literal"][..], &["T=env:A", "T=env:B"][..]] {
        let flags: Vec<&str> = secrets.iter().flat_map(|s| ["--secret", *s]).collect();
        let mut tether_args = vec!["test", "--mcp", spec];
        tether_args.extend(&flags);
        let mut server_args = vec!["admin", "--data-dir", &data, "add", "x", "--from", one];
        server_args.extend(&flags);
        cases.push((&tether, tether_args));
        cases.push((&server, server_args));
    }
    for (bin, args) in &cases {
        let output = run(bin, args, &home);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{} {args:?}: {}",
            bin.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!String::from_utf8_lossy(&output.stderr).contains("SENTINEL"));
    }
    for (bin, args) in [
        (&tether, vec!["list"]),
        (&server, vec!["admin", "--data-dir", &data, "list"]),
    ] {
        let output = run(bin, &args, &home);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
