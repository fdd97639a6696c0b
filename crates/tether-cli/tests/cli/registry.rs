//! `tether search` and `tether show` against the loopback fixture registry.

use tether_testkit::{FIXTURE_SMITHERY_KEY, FixtureRegistry};

use crate::support::{Sandbox, text};

/// `tether ARGS` with both registries pointed at `registry` (Smithery's key only when given).
fn tether(
    sandbox: &Sandbox,
    registry: &FixtureRegistry,
    key: Option<&str>,
    args: &[&str],
) -> std::process::Output {
    let mut command = sandbox.tether(args);
    command
        .env("TETHER_REGISTRY_URL", &registry.url)
        .env("TETHER_SMITHERY_URL", &registry.url)
        .env_remove("SMITHERY_API_KEY");
    if let Some(key) = key {
        command.env("SMITHERY_API_KEY", key);
    }
    command.output().expect("running tether")
}

fn scrub(output: &str, registry: &FixtureRegistry) -> String {
    output.replace(&registry.url, "http://127.0.0.1:PORT")
}

#[test]
fn search_lists_one_row_per_server_with_transports_version_and_source() {
    let sandbox = Sandbox::new();
    let registry = FixtureRegistry::start(&[]);
    let out = tether(&sandbox, &registry, None, &["search"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    insta::assert_snapshot!("search_all", text(&out.stdout));

    let out = tether(
        &sandbox,
        &registry,
        Some(FIXTURE_SMITHERY_KEY),
        &["search", "file", "--all"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    insta::assert_snapshot!("search_both_registries", text(&out.stdout));

    let out = tether(&sandbox, &registry, None, &["search", "search", "--all"]);
    insta::assert_snapshot!("search_hidden", text(&out.stdout));

    let out = tether(&sandbox, &registry, None, &["search", "no-such-thing"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(text(&out.stderr), "no servers match \"no-such-thing\"\n");
}

#[test]
fn search_json_carries_the_source_and_where_the_answer_came_from() {
    let sandbox = Sandbox::new();
    let registry = FixtureRegistry::start(&[]);
    let out = tether(&sandbox, &registry, None, &["search", "weather", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        value,
        serde_json::json!({
            "rows": [{
                "name": "io.github.example/weather",
                "title": "Weather",
                "description": "Forecasts and current conditions from a weather API",
                "transports": ["pypi"],
                "version": "0.4.1",
                "source": "official",
                "registry": "official",
                "status": "active"
            }],
            "sources": [{"source": "official", "registry": "official", "freshness": {"from": "network"}}]
        })
    );
    let again = tether(&sandbox, &registry, None, &["search", "weather", "--json"]);
    let value: serde_json::Value = serde_json::from_slice(&again.stdout).expect("JSON");
    assert_eq!(value["sources"][0]["freshness"]["from"], "cache");
}

#[test]
fn search_offline_answers_from_the_cache_and_says_how_old_it_is() {
    let sandbox = Sandbox::new();
    let registry = FixtureRegistry::start(&[]);
    let first = tether(&sandbox, &registry, None, &["search", "tenant"]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let url = registry.url.clone();
    drop(registry);

    let out = sandbox
        .tether(&["search", "tenant", "--refresh"])
        .env("TETHER_REGISTRY_URL", &url)
        .env_remove("SMITHERY_API_KEY")
        .output()
        .expect("running tether");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), text(&first.stdout));
    let stderr = text(&out.stderr).replace(&url, "http://127.0.0.1:PORT");
    assert!(
        stderr.starts_with("note: the official registry could not answer (cannot reach the official registry at http://127.0.0.1:PORT/v0.1/servers?search=tenant&version=latest&limit=20: "),
        "{stderr}"
    );
    assert!(
        stderr.ends_with("); showing its cached answer from just now\n"),
        "{stderr}"
    );

    // Nothing cached for another query: exit 1 with the error naming the registry.
    let out = sandbox
        .tether(&["search", "other"])
        .env("TETHER_REGISTRY_URL", &url)
        .env_remove("SMITHERY_API_KEY")
        .output()
        .expect("running tether");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with(&format!(
            "error: cannot reach the official registry at {url}/v0.1/servers?search=other"
        )),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn search_errors_name_the_registry_and_never_show_the_smithery_key() {
    let sandbox = Sandbox::new();
    let registry = FixtureRegistry::start(&[]);
    let out = tether(&sandbox, &registry, None, &["search", "fail-500"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        scrub(&text(&out.stderr), &registry),
        "error: the official registry answered 500 for http://127.0.0.1:PORT/v0.1/servers?search=fail-500&version=latest&limit=20: {\"error\":\"fixture failure\"}\n"
    );

    let out = tether(
        &sandbox,
        &registry,
        None,
        &["search", "x", "--source", "smithery"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "error: Smithery needs an API key: store it once with `tether secrets set --registry smithery`, or set SMITHERY_API_KEY (or smithery_api_key_file in config.toml)\n"
    );

    let wrong = "sk-smithery-wrong-0042";
    let out = tether(&sandbox, &registry, Some(wrong), &["search", "git", "-vv"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(!stderr.contains(wrong), "{stderr}");
    assert!(!text(&out.stdout).contains(wrong));
    assert!(
        scrub(&stderr, &registry).contains("warning: Smithery answered 401 for http://127.0.0.1:PORT/servers?q=git&page=1&pageSize=20: {\"error\":\"Unauthorized\"}; no rows from Smithery\n"),
        "{stderr}"
    );
    let cache =
        std::fs::read_dir(sandbox.home().join("cache/registry")).expect("the cache directory");
    for entry in cache {
        let bytes = std::fs::read(entry.expect("an entry").path()).expect("a cache file");
        assert!(!String::from_utf8_lossy(&bytes).contains(wrong));
    }
}

#[test]
fn show_prints_launch_lines_and_inputs() {
    let sandbox = Sandbox::new();
    let registry = FixtureRegistry::start(&[]);
    for (snapshot, name) in [
        (
            "show_filesystem",
            "io.github.modelcontextprotocol/filesystem",
        ),
        ("show_weather", "io.github.example/weather"),
        ("show_nuget", "io.github.example/nuget-tools"),
        ("show_tenant", "com.example/tenant-api"),
        ("show_http_image", "io.github.example/http-image"),
        ("show_bundle", "io.github.example/desktop-bundle"),
        ("show_deprecated", "io.github.example/old-search"),
    ] {
        let out = tether(&sandbox, &registry, None, &["show", name]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
        insta::assert_snapshot!(snapshot, text(&out.stdout));
    }
    let out = tether(
        &sandbox,
        &registry,
        Some(FIXTURE_SMITHERY_KEY),
        &["show", "@smithery-ai/github"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    insta::assert_snapshot!("show_smithery", text(&out.stdout));
}

#[test]
fn show_versions_json_and_missing_entries() {
    let sandbox = Sandbox::new();
    let registry = FixtureRegistry::start(&[]);
    let out = tether(
        &sandbox,
        &registry,
        None,
        &[
            "show",
            "io.github.example/everything",
            "--version",
            "2025.9.1",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(value["version"], "2025.9.1");
    assert_eq!(
        value["versions"],
        serde_json::json!(["2026.8.31", "2025.9.1"])
    );
    assert_eq!(
        value["options"][0]["command"],
        serde_json::json!([
            "npx",
            "-y",
            "@modelcontextprotocol/server-everything@2025.9.1"
        ])
    );
    assert_eq!(value["entry"]["name"], "io.github.example/everything");

    let out = tether(
        &sandbox,
        &registry,
        None,
        &["show", "io.github.example/nope"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "error: the official registry has no server io.github.example/nope\n"
    );
}

/// A search that creates TETHER_HOME (for its cache) creates it 0700, so the local store
/// opened later neither warns nor is left open to others.
#[test]
fn the_registry_cache_creates_tether_home_private() {
    use std::os::unix::fs::PermissionsExt;
    let sandbox = Sandbox::new();
    let registry = tether_testkit::FixtureRegistry::start(&[]);
    let out = sandbox
        .tether(&["search", "everything"])
        .env("TETHER_REGISTRY_URL", &registry.url)
        .env_remove("SMITHERY_API_KEY")
        .output()
        .expect("running tether search");
    assert!(out.status.success(), "{}", text(&out.stderr));
    for dir in [
        sandbox.home(),
        sandbox.home().join("cache"),
        sandbox.home().join("cache").join("registry"),
    ] {
        let mode = std::fs::metadata(&dir).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
    }
}

/// `tether secrets set --registry smithery` stores Smithery's key in the secret store (the
/// file or the OS credential store); `search`, `show` and `secrets list` use it with no
/// SMITHERY_API_KEY, and `secrets rm --registry smithery` removes it.
fn smithery_key_from_the_secret_store(backend: &str) {
    let sandbox = Sandbox::new();
    let registry = FixtureRegistry::start(&[]);
    let run = |args: &[&str]| {
        let mut command = sandbox.tether(args);
        command
            .env("TETHER_REGISTRY_URL", &registry.url)
            .env("TETHER_SMITHERY_URL", &registry.url)
            .env("TETHER_SECRET_STORE", backend)
            .env("STORED_KEY", FIXTURE_SMITHERY_KEY)
            .env_remove("SMITHERY_API_KEY");
        command.output().expect("running tether")
    };
    let out = run(&[
        "secrets",
        "set",
        "--registry",
        "smithery",
        "--from",
        "env:STORED_KEY",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains(FIXTURE_SMITHERY_KEY), "{stderr}");
    assert!(
        stderr.contains(&format!("stored SMITHERY_API_KEY for {}", registry.url)),
        "{stderr}"
    );

    // The key is found without the environment variable: Smithery's rows come back.
    let out = run(&["-vvv", "search", "file", "--source", "smithery"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        text(&out.stdout).contains("smithery"),
        "{}",
        text(&out.stdout)
    );
    assert!(!stderr.contains(FIXTURE_SMITHERY_KEY), "{stderr}");

    let out = run(&["secrets", "list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rows = listed["secrets"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["installation"], registry.url.as_str());
    assert_eq!(rows[0]["name"], "SMITHERY_API_KEY");
    assert_eq!(rows[0]["location"], backend);
    assert!(!text(&out.stdout).contains(FIXTURE_SMITHERY_KEY));

    // A key stored for this URL is not sent to another Smithery.
    let out = sandbox
        .tether(&["search", "x", "--source", "smithery"])
        .env("TETHER_SMITHERY_URL", "http://127.0.0.1:9")
        .env("TETHER_SECRET_STORE", backend)
        .env_remove("SMITHERY_API_KEY")
        .output()
        .expect("running tether");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    let out = run(&["secrets", "rm", "--registry", "smithery"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run(&["search", "x", "--source", "smithery"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = run(&["secrets", "rm", "--registry", "smithery"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "error: no SMITHERY_API_KEY is stored for {} (see `tether secrets list`)\n",
            registry.url
        )
    );
    // The file store holds nothing more (it is removed once empty).
    if let Ok(file) = std::fs::read(sandbox.home().join("secrets.json")) {
        assert!(!String::from_utf8_lossy(&file).contains(FIXTURE_SMITHERY_KEY));
    }
}

#[test]
fn smithery_key_from_the_secret_file() {
    smithery_key_from_the_secret_store("file");
}

#[test]
fn smithery_key_from_the_os_credential_store() {
    if crate::stored::secret_service_or_skip() {
        smithery_key_from_the_secret_store("keyring");
    }
}

#[test]
fn secrets_set_needs_an_installation_and_variable_or_a_registry() {
    let sandbox = Sandbox::new();
    let out = sandbox.run(&["secrets", "set", "only-one"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("<NAME>"),
        "{}",
        text(&out.stderr)
    );
    let out = sandbox.run(&["secrets", "set", "inst", "VAR", "--registry", "smithery"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot be used with"),
        "{}",
        text(&out.stderr)
    );
}
