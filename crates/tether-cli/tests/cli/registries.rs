//! More than one registry: two loopback fixture registries with different entries and one
//! name in both — `search` lists both tagged, `show`/`add` pick the right one (`REGISTRY:NAME`,
//! `--source`), a registry that is down is a warning beside the others' rows, and the cache is
//! kept per registry.

use std::os::unix::fs::PermissionsExt;

use tether_testkit::FixtureRegistry;

use crate::support::{Sandbox, text};

const SHARED: &str = "io.github.example/shared";

/// An official entry (as `--entry` takes it): one npm package `shared-mcp@VERSION`.
fn entry(sandbox: &Sandbox, file: &str, name: &str, version: &str, description: &str) -> String {
    let entry = serde_json::json!({
        "server": {
            "name": name, "description": description, "version": version,
            "packages": [{
                "registryType": "npm", "identifier": "shared-mcp", "version": version,
                "transport": {"type": "stdio"}
            }]
        },
        "_meta": {"io.modelcontextprotocol.registry/official": {
            "status": "active", "publishedAt": "2026-11-01T10:00:00Z",
            "updatedAt": "2026-11-01T10:00:00Z", "isLatest": true
        }}
    });
    sandbox.write(file, &entry.to_string())
}

/// The public fixtures plus `shared` 1.0.0 ("official"), and a second registry holding only
/// `shared` 2.0.0 and `corp-only` ("corp").
fn two_registries(sandbox: &Sandbox) -> (FixtureRegistry, FixtureRegistry) {
    let a = entry(sandbox, "a.json", SHARED, "1.0.0", "Shared, public copy");
    let b = entry(sandbox, "b.json", SHARED, "2.0.0", "Shared, company copy");
    let only = entry(
        sandbox,
        "only.json",
        "com.example/corp-only",
        "0.1.0",
        "Shared nowhere else",
    );
    (
        FixtureRegistry::start(&["--entry", &a]),
        FixtureRegistry::start(&["--no-fixtures", "--entry", &b, "--entry", &only]),
    )
}

fn tether(sandbox: &Sandbox, official: &str, args: &[&str]) -> std::process::Output {
    sandbox
        .tether(args)
        .env("TETHER_REGISTRY_URL", official)
        .env("TETHER_SECRET_STORE", "file")
        .env_remove("SMITHERY_API_KEY")
        .output()
        .expect("running tether")
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// (registry, name, version) of every row.
fn rows(value: &serde_json::Value) -> Vec<(String, String, String)> {
    value["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["registry"].as_str().unwrap_or_default().to_owned(),
                r["name"].as_str().unwrap_or_default().to_owned(),
                r["version"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn search_asks_every_registry_and_tags_each_row_with_its_registry() {
    let sandbox = Sandbox::new();
    let (public, corp) = two_registries(&sandbox);
    std::fs::create_dir_all(sandbox.home()).expect("creating TETHER_HOME");
    std::fs::write(
        sandbox.home().join("config.toml"),
        format!("[[registries]]\nname = \"corp\"\nurl = \"{}\"\n", corp.url),
    )
    .expect("writing config.toml");

    let found = json(&tether(
        &sandbox,
        &public.url,
        &["search", "shared", "--json"],
    ));
    let own = |r: &str, n: &str, v: &str| (r.to_owned(), n.to_owned(), v.to_owned());
    assert_eq!(
        rows(&found),
        [
            own("official", SHARED, "1.0.0"),
            own("corp", SHARED, "2.0.0"),
            own("corp", "com.example/corp-only", "0.1.0"),
        ]
    );
    let sources: Vec<&str> = found["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|s| s["registry"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(sources, ["official", "corp"]);

    // The table names the registry of each row.
    let table = tether(&sandbox, &public.url, &["search", "shared"]);
    let lines: Vec<String> = text(&table.stdout)
        .lines()
        .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        lines,
        [
            "NAME VERSION TRANSPORTS SOURCE",
            "io.github.example/shared 1.0.0 npm official",
            "io.github.example/shared 2.0.0 npm corp",
            "com.example/corp-only 0.1.0 npm corp",
        ]
    );

    // --source picks one by name; an unknown name is a usage error naming the registries.
    let only = json(&tether(
        &sandbox,
        &public.url,
        &["search", "shared", "--source", "corp", "--json"],
    ));
    assert_eq!(rows(&only).len(), 2);
    assert!(rows(&only).iter().all(|(r, _, _)| r == "corp"));
    let unknown = tether(&sandbox, &public.url, &["search", "--source", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert_eq!(
        text(&unknown.stderr),
        "error: no registry is named \"nope\"; the registries are official, corp, smithery\n"
    );
}

#[test]
fn show_takes_a_plain_name_from_the_first_registry_and_registry_colon_name_from_that_one() {
    let sandbox = Sandbox::new();
    let (public, corp) = two_registries(&sandbox);
    let flag = format!("corp={}", corp.url);
    let show = |name: &str, extra: &[&str]| {
        let mut args = vec!["show", name, "--registry", &flag, "--json"];
        args.extend(extra);
        json(&tether(&sandbox, &public.url, &args))
    };
    let first = show(SHARED, &[]);
    assert_eq!(
        (&first["registry"], &first["version"]),
        (&"official".into(), &"1.0.0".into())
    );
    let picked = show(&format!("corp:{SHARED}"), &[]);
    assert_eq!(
        (&picked["registry"], &picked["version"]),
        (&"corp".into(), &"2.0.0".into())
    );
    assert_eq!(picked["name"], SHARED);
    let by_source = show(SHARED, &["--source", "corp"]);
    assert_eq!(by_source["version"], "2.0.0");
    // Only in the second registry: found there without a prefix.
    let only = show("com.example/corp-only", &[]);
    assert_eq!(only["registry"], "corp");

    let text_out = tether(
        &sandbox,
        &public.url,
        &["show", &format!("corp:{SHARED}"), "--registry", &flag],
    );
    assert!(
        text(&text_out.stdout).starts_with(&format!(
            "{SHARED} 2.0.0, from the registry corp\nShared, company copy\n"
        )),
        "{}",
        text(&text_out.stdout)
    );
    // A prefix naming no registry is a usage error, not a lookup of a name with a colon.
    let bad = tether(&sandbox, &public.url, &["show", "nope:x/y"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    assert!(
        text(&bad.stderr).starts_with("error: no registry is named \"nope\""),
        "{}",
        text(&bad.stderr)
    );
}

#[test]
fn add_stores_the_entry_of_the_registry_asked_for_and_records_which() {
    let sandbox = Sandbox::new();
    let (public, corp) = two_registries(&sandbox);
    // `npx` runs the real test server, saying which version it was asked for.
    let shim = sandbox.path("shim");
    std::fs::create_dir_all(&shim).expect("creating the shim directory");
    let npx = shim.join("npx");
    let seen = sandbox.path("seen.txt");
    std::fs::write(
        &npx,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$2\" >> {}\nexec {}\n",
            seen.display(),
            tether_testkit::test_server_bin().display()
        ),
    )
    .expect("writing the npx shim");
    std::fs::set_permissions(&npx, std::fs::Permissions::from_mode(0o755))
        .expect("making the shim executable");
    let path = format!(
        "{}:{}",
        shim.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let flag = format!("corp={}", corp.url);
    let add = |name: &str, local: &str| {
        let out = sandbox
            .tether(&["add", name, "--registry", &flag, "--name", local, "--yes"])
            .args(["--sandbox", "none"])
            .env("TETHER_REGISTRY_URL", &public.url)
            .env("TETHER_SECRET_STORE", "file")
            .env("PATH", &path)
            .env_remove("SMITHERY_API_KEY")
            .output()
            .expect("running tether add");
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    };
    add(&format!("corp:{SHARED}"), "from-corp");
    add(SHARED, "from-public");
    assert_eq!(
        std::fs::read_to_string(&seen).expect("the versions npx was asked for"),
        "shared-mcp@2.0.0\nshared-mcp@1.0.0\n"
    );
    let list: serde_json::Value =
        serde_json::from_slice(&sandbox.run(&["list", "--json"]).stdout).expect("list --json");
    let mut sources: Vec<(String, String)> = list["installations"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_owned(),
                format!("{} {}", e["source"]["registry"], e["source"]["version"]),
            )
        })
        .collect();
    sources.sort();
    assert_eq!(
        sources,
        [
            ("from-corp".to_owned(), r#""corp" "2.0.0""#.to_owned()),
            ("from-public".to_owned(), r#""official" "1.0.0""#.to_owned()),
        ]
    );
}

#[test]
fn a_registry_that_is_down_is_a_warning_beside_the_others_rows() {
    let sandbox = Sandbox::new();
    let (public, corp) = two_registries(&sandbox);
    let gone = FixtureRegistry::start(&["--no-fixtures"]);
    let gone_url = gone.url.clone();
    drop(gone);
    let flags = [
        "search",
        "shared",
        "--registry",
        &format!("corp={}", corp.url),
        "--registry",
        &gone_url,
    ];
    let out = tether(&sandbox, &public.url, &flags);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).lines().count(),
        4,
        "{}",
        text(&out.stdout)
    );
    let port = gone_url.rsplit(':').next().expect("a port");
    let stderr = text(&out.stderr);
    let title = format!("the registry 127.0.0.1-{port}");
    assert!(
        stderr.starts_with(&format!(
            "warning: cannot reach {title} at {gone_url}/v0.1/servers?"
        )) && stderr.ends_with(&format!("; no rows from {title}\n")),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn each_registry_has_its_own_cache_entries() {
    let sandbox = Sandbox::new();
    let (public, corp) = two_registries(&sandbox);
    let corp_flag = format!("corp={}", corp.url);
    let search = |extra: &[&str]| {
        let mut args = vec!["search", "shared", "--json", "--registry", &corp_flag];
        args.extend(extra);
        json(&tether(&sandbox, &public.url, &args))
    };
    let first = search(&[]);
    let froms: Vec<&str> = first["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|s| s["freshness"]["from"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(froms, ["network", "network"]);

    // A registry at the same URL under another name shares no entry with it.
    let twin = format!("twin={}", public.url);
    let twin_first = search(&["--registry", &twin, "--source", "twin"]);
    assert_eq!(twin_first["sources"][0]["freshness"]["from"], "network");
    let twin_again = search(&["--registry", &twin, "--source", "twin"]);
    assert_eq!(twin_again["sources"][0]["freshness"]["from"], "cache");

    // corp goes down: its own cached rows stand in (offline), the public ones are fresh.
    drop(corp);
    let offline = search(&["--refresh"]);
    assert_eq!(rows(&offline), rows(&first));
    assert_eq!(offline["sources"][0]["freshness"]["from"], "revalidated");
    assert_eq!(offline["sources"][1]["registry"], "corp");
    assert_eq!(offline["sources"][1]["freshness"]["from"], "offline");
    let show = tether(
        &sandbox,
        &public.url,
        &["show", &format!("corp:{SHARED}"), "--registry", &corp_flag],
    );
    // Never fetched from corp: no cached answer to stand in, so the error names corp.
    assert_eq!(show.status.code(), Some(1), "{}", text(&show.stderr));
    assert!(
        text(&show.stderr).starts_with("error: cannot reach the registry corp at "),
        "{}",
        text(&show.stderr)
    );
}
