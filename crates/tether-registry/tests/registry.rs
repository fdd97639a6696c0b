//! The registry clients against the loopback fixture registry (a real process on 127.0.0.1).

#![allow(
    clippy::expect_used,
    reason = "test helpers fail the test with a message when set-up fails"
)]

use std::time::Duration;

use pretty_assertions::assert_eq;
use tether_config::SecretValue;
use tether_registry::{
    ApiKey, Freshness, InputKind, Registries, RegistryError, RegistrySettings, SearchQuery, Source,
};
use tether_testkit::{FIXTURE_SMITHERY_KEY, FixtureRegistry};

struct Setup {
    registry: FixtureRegistry,
    cache: tempfile::TempDir,
}

impl Setup {
    fn new(args: &[&str]) -> Self {
        Self {
            registry: FixtureRegistry::start(args),
            cache: tempfile::tempdir().expect("creating the cache directory"),
        }
    }

    fn clients(&self, key: Option<&str>, refresh: bool) -> Registries {
        Registries::new(RegistrySettings {
            official_url: self.registry.url.clone(),
            more: Vec::new(),
            smithery_url: self.registry.url.clone(),
            smithery_key: key.map(|k| ApiKey::Given(SecretValue::new(k.to_owned()))),
            cache_dir: Some(self.cache.path().to_owned()),
            timeout: Duration::from_secs(2),
            refresh,
        })
        .expect("building the clients")
    }

    fn requests(&self) -> u64 {
        self.registry.stats()["requests"].as_u64().expect("a count")
    }
}

/// A stored key: counts its lookups.
fn stored_key(
    value: Option<&'static str>,
    lookups: &std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> ApiKey {
    let lookups = std::sync::Arc::clone(lookups);
    ApiKey::Stored(Box::new(move || {
        lookups.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(value.map(|v| SecretValue::new(v.to_owned())))
    }))
}

fn query(text: &str, limit: usize, source: Option<Source>) -> SearchQuery {
    SearchQuery {
        text: text.to_owned(),
        limit,
        source: source.map(|s| s.as_str().to_owned()),
        include_hidden: false,
    }
}

fn names(results: &tether_registry::SearchResults) -> Vec<(String, &'static str)> {
    results
        .rows
        .iter()
        .map(|r| (r.name.clone(), r.source.as_str()))
        .collect()
}

fn owned(rows: &[(&str, &'static str)]) -> Vec<(String, &'static str)> {
    rows.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect()
}

const ACTIVE: [&str; 8] = [
    "io.github.modelcontextprotocol/filesystem",
    "io.github.example/everything",
    "io.github.example/weather",
    "io.github.example/nuget-tools",
    "com.example/tenant-api",
    "io.github.example/http-image",
    "io.github.example/desktop-bundle",
    "io.github.example/web-search",
];

#[tokio::test]
async fn official_search_follows_cursors_and_hides_deprecated_and_deleted() {
    let setup = Setup::new(&[]);
    let results = setup
        .clients(None, false)
        .search(&query("", 100, None))
        .await
        .expect("searching");
    let expected: Vec<(&str, &str)> = ACTIVE.iter().map(|n| (*n, "official")).collect();
    assert_eq!(names(&results), owned(&expected));
    // Nine latest entries (the deleted one is not listed without include_deleted), three
    // to a page.
    assert_eq!(setup.requests(), 3);
    assert_eq!(
        results.sources.len(),
        1,
        "Smithery is skipped without a key"
    );
    assert_eq!(results.sources[0].freshness, Some(Freshness::Network));

    let everything = &results.rows[1];
    assert_eq!(everything.version.as_deref(), Some("2026.8.31"));
    assert_eq!(everything.transports, ["npm", "remote"]);
    assert_eq!(results.rows[0].transports, ["npm", "oci"]);
}

#[tokio::test]
async fn hidden_entries_are_shown_when_asked_with_their_status() {
    let setup = Setup::new(&[]);
    let mut asked = query("", 100, Some(Source::Official));
    asked.include_hidden = true;
    let results = setup
        .clients(None, false)
        .search(&asked)
        .await
        .expect("searching");
    let statuses: Vec<(&str, &str)> = results
        .rows
        .iter()
        .filter(|r| r.status.is_hidden())
        .map(|r| (r.name.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(
        statuses,
        [
            ("io.github.example/old-search", "deprecated"),
            ("io.github.example/withdrawn", "deleted")
        ]
    );
    assert_eq!(results.rows.len(), 10);
}

#[tokio::test]
async fn a_limit_stops_paging() {
    let setup = Setup::new(&[]);
    let results = setup
        .clients(None, false)
        .search(&query("", 2, None))
        .await
        .expect("searching");
    assert_eq!(results.rows.len(), 2);
    assert_eq!(setup.requests(), 1);
}

#[tokio::test]
async fn both_registries_are_searched_and_merged_with_their_source() {
    let setup = Setup::new(&["--page-size", "2"]);
    let clients = setup.clients(Some(FIXTURE_SMITHERY_KEY), false);
    let results = clients
        .search(&query("file", 10, None))
        .await
        .expect("searching");
    assert_eq!(
        names(&results),
        owned(&[
            ("io.github.modelcontextprotocol/filesystem", "official"),
            ("@example/filesystem-plus", "smithery"),
            ("io.github.example/nuget-tools", "official"),
        ])
    );
    let smithery = clients
        .search(&query("", 10, Some(Source::Smithery)))
        .await
        .expect("searching Smithery");
    // Three rows over two pages of two.
    assert_eq!(
        names(&smithery),
        owned(&[
            ("@smithery-ai/github", "smithery"),
            ("@example/filesystem-plus", "smithery"),
            ("@example/weather-live", "smithery"),
        ])
    );
    assert_eq!(smithery.rows[0].transports, ["remote"]);
    assert_eq!(smithery.rows[1].transports, ["local"]);
    assert_eq!(setup.registry.stats()["unauthorized"], 0);
}

#[tokio::test]
async fn a_stored_key_is_read_once_and_only_when_a_request_needs_it() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let setup = Setup::new(&[]);
    let lookups = std::sync::Arc::new(AtomicUsize::new(0));
    let settings = |refresh| RegistrySettings {
        official_url: setup.registry.url.clone(),
        more: Vec::new(),
        smithery_url: setup.registry.url.clone(),
        smithery_key: Some(stored_key(Some(FIXTURE_SMITHERY_KEY), &lookups)),
        cache_dir: Some(setup.cache.path().to_owned()),
        timeout: Duration::from_secs(2),
        refresh,
    };
    let clients = Registries::new(settings(false)).expect("building the clients");
    assert!(clients.smithery_enabled());
    let first = clients
        .search(&query("", 10, Some(Source::Smithery)))
        .await
        .expect("searching Smithery");
    assert_eq!(first.rows.len(), 3);
    clients
        .search(&query("git", 10, Some(Source::Smithery)))
        .await
        .expect("searching Smithery again");
    // Two searches that asked Smithery: one lookup (the value is kept for the process).
    assert_eq!(lookups.load(Ordering::SeqCst), 1);
    assert_eq!(setup.registry.stats()["unauthorized"], 0);

    // A new process with a fresh cache: no request, so no lookup.
    let clients = Registries::new(settings(false)).expect("building the clients");
    let cached = clients
        .search(&query("", 10, Some(Source::Smithery)))
        .await
        .expect("searching from the cache");
    assert_eq!(cached.rows.len(), 3);
    assert_eq!(lookups.load(Ordering::SeqCst), 1);

    // Recorded but gone from the store: no request without a key; the cached answer is shown
    // with the reason.
    let requests = setup.requests();
    let gone = Registries::new(RegistrySettings {
        smithery_key: Some(stored_key(None, &lookups)),
        ..settings(true)
    })
    .expect("building the clients");
    let offline = gone
        .search(&query("", 10, Some(Source::Smithery)))
        .await
        .expect("the cached answer");
    match &offline.sources[0].freshness {
        Some(Freshness::Offline { reason, .. }) => {
            assert!(reason.starts_with("Smithery needs an API key"), "{reason}");
        }
        other => panic!("expected the cached answer with a reason, got {other:?}"),
    }
    assert_eq!(setup.requests(), requests);
    assert_eq!(setup.registry.stats()["unauthorized"], 0);
}

#[tokio::test]
async fn smithery_without_a_key_or_with_a_wrong_one_fails_naming_smithery_and_never_the_key() {
    let setup = Setup::new(&[]);
    let error = setup
        .clients(None, false)
        .search(&query("", 5, Some(Source::Smithery)))
        .await
        .expect_err("no key");
    assert!(matches!(error, RegistryError::NoSmitheryKey), "{error}");

    let wrong = "sk-wrong-key-4711";
    let error = setup
        .clients(Some(wrong), false)
        .search(&query("", 5, Some(Source::Smithery)))
        .await
        .expect_err("a wrong key");
    let text = error.to_string();
    assert!(text.starts_with("Smithery answered 401 for "), "{text}");
    assert!(!text.contains(wrong), "{text}");
    assert!(!format!("{error:?}").contains(wrong));

    // Searching both: the official rows still come, Smithery's failure is reported.
    let results = setup
        .clients(Some(wrong), false)
        .search(&query("weather", 5, None))
        .await
        .expect("the official registry answers");
    assert_eq!(
        names(&results),
        owned(&[("io.github.example/weather", "official")])
    );
    let smithery = &results.sources[1];
    assert_eq!(smithery.source, Source::Smithery);
    assert!(
        smithery
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("Smithery answered 401")),
        "{smithery:?}"
    );
}

#[tokio::test]
async fn a_fresh_cache_answers_without_asking_then_etags_revalidate_then_offline_says_how_old() {
    let setup = Setup::new(&[]);
    let asked = query("", 100, None);
    let first = setup
        .clients(None, false)
        .search(&asked)
        .await
        .expect("searching");
    assert_eq!(setup.requests(), 3);

    let cached = setup
        .clients(None, false)
        .search(&asked)
        .await
        .expect("searching again");
    assert_eq!(cached.rows, first.rows);
    assert!(matches!(
        cached.sources[0].freshness,
        Some(Freshness::Cache { age_secs: 0..=5 })
    ));
    assert_eq!(setup.requests(), 3, "a fresh cache asks nobody");

    let revalidated = setup
        .clients(None, true)
        .search(&asked)
        .await
        .expect("revalidating");
    assert_eq!(revalidated.rows, first.rows);
    assert_eq!(
        revalidated.sources[0].freshness,
        Some(Freshness::Revalidated)
    );
    assert_eq!(
        setup.requests(),
        4,
        "one request: the first page, answered 304"
    );
    assert_eq!(setup.registry.stats()["notModified"], 1);

    let Setup { registry, cache } = setup;
    let url = registry.url.clone();
    drop(registry);
    let offline = Registries::new(RegistrySettings {
        official_url: url.clone(),
        cache_dir: Some(cache.path().to_owned()),
        timeout: Duration::from_secs(2),
        refresh: true,
        ..RegistrySettings::default()
    })
    .expect("building the clients")
    .search(&asked)
    .await
    .expect("searching offline");
    assert_eq!(offline.rows, first.rows);
    match &offline.sources[0].freshness {
        Some(Freshness::Offline { age_secs, reason }) => {
            assert!(*age_secs <= 5);
            assert!(
                reason.starts_with(&format!(
                    "cannot reach the official registry at {url}/v0.1/servers?"
                )),
                "{reason}"
            );
        }
        other => panic!("expected an offline answer, got {other:?}"),
    }

    // Nothing cached for this query: the error itself.
    let error = Registries::new(RegistrySettings {
        official_url: url,
        cache_dir: Some(cache.path().to_owned()),
        ..RegistrySettings::default()
    })
    .expect("building the clients")
    .search(&query("other", 5, None))
    .await
    .expect_err("offline, nothing cached");
    assert!(
        matches!(error, RegistryError::Unreachable { .. }),
        "{error}"
    );
}

#[tokio::test]
async fn without_etags_a_stale_search_revalidates_with_updated_since_and_merges() {
    let setup = Setup::new(&["--no-etag"]);
    let asked = query("everything", 10, None);
    let first = setup
        .clients(None, false)
        .search(&asked)
        .await
        .expect("searching");
    assert_eq!(
        first.rows[0].description,
        "Test server that exercises every MCP feature"
    );

    let unchanged = setup
        .clients(None, true)
        .search(&asked)
        .await
        .expect("revalidating");
    assert_eq!(unchanged.sources[0].freshness, Some(Freshness::Revalidated));
    assert_eq!(unchanged.rows, first.rows);

    setup.registry.touch("io.github.example/everything");
    let updated = setup
        .clients(None, true)
        .search(&asked)
        .await
        .expect("revalidating after an update");
    assert_eq!(updated.sources[0].freshness, Some(Freshness::Network));
    assert_eq!(updated.rows.len(), 1);
    assert_eq!(updated.rows[0].description, "Updated just now");
}

#[tokio::test]
async fn errors_name_the_registry_the_status_and_the_timeout() {
    let setup = Setup::new(&[]);
    let clients = setup.clients(None, false);
    let error = clients
        .search(&query("fail-500", 5, None))
        .await
        .expect_err("a 500");
    let text = error.to_string();
    assert!(
        text.starts_with("the official registry answered 500 for http://127.0.0.1:"),
        "{text}"
    );
    assert!(text.ends_with(r#": {"error":"fixture failure"}"#), "{text}");

    let error = clients
        .search(&query("fail-400", 5, None))
        .await
        .expect_err("a 400");
    assert!(
        matches!(error, RegistryError::Status { status: 400, .. }),
        "{error}"
    );

    let quick = Registries::new(RegistrySettings {
        official_url: setup.registry.url.clone(),
        timeout: Duration::from_secs(1),
        ..RegistrySettings::default()
    })
    .expect("building the clients");
    let started = std::time::Instant::now();
    let error = quick
        .search(&query("slow", 5, None))
        .await
        .expect_err("a timeout");
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(
        error
            .to_string()
            .starts_with("the official registry did not answer within 1 s"),
        "{error}"
    );

    // A body that never ends is refused at the byte limit, long before the timeout.
    let error = clients
        .search(&query("huge", 5, None))
        .await
        .expect_err("a 1 GiB answer");
    assert!(
        matches!(error, RegistryError::TooLarge { limit_mib: 16, .. }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .starts_with("the official registry sent more than 16 MiB for http://127.0.0.1:"),
        "{error}"
    );

    let error = Registries::new(RegistrySettings {
        official_url: "ftp://example.com".to_owned(),
        ..RegistrySettings::default()
    })
    .expect_err("not http");
    assert_eq!(
        error.to_string(),
        r#"the URL of the official registry, "ftp://example.com", is not a valid http(s) URL"#
    );
}

#[tokio::test]
async fn show_describes_how_each_package_and_remote_launches_and_every_input() {
    let setup = Setup::new(&[]);
    let clients = setup.clients(None, false);
    let details = clients
        .show("io.github.modelcontextprotocol/filesystem", None, None)
        .await
        .expect("showing");
    assert_eq!(details.version.as_deref(), Some("1.0.2"));
    let commands: Vec<Option<String>> = details
        .options
        .iter()
        .map(|o| o.command.as_ref().map(|c| c.join(" ")))
        .collect();
    assert_eq!(
        commands,
        [
            Some("npx -y @modelcontextprotocol/server-filesystem@1.0.2 <target_dir> …".to_owned()),
            Some(
                "docker run -i --rm --mount type=bind,src=<source_path>,dst=<target_path> … docker.io/mcp/filesystem:1.0.2 /project"
                    .to_owned()
            ),
        ]
    );
    type Row<'a> = (InputKind, &'a str, bool, Option<&'a str>, Vec<String>);
    let npm: Vec<Row> = details.options[0]
        .inputs
        .iter()
        .map(|i| {
            (
                i.kind,
                i.name.as_str(),
                i.required,
                i.default.as_deref(),
                i.choices.clone(),
            )
        })
        .collect();
    assert_eq!(
        npm,
        [
            (InputKind::Argument, "target_dir", true, None, vec![]),
            (
                InputKind::Env,
                "LOG_LEVEL",
                false,
                Some("info"),
                ["debug", "info", "warn", "error"]
                    .map(String::from)
                    .to_vec()
            ),
        ]
    );
    let oci: Vec<(InputKind, &str, Option<&str>, bool)> = details.options[1]
        .inputs
        .iter()
        .map(|i| (i.kind, i.name.as_str(), i.of.as_deref(), i.repeated))
        .collect();
    assert_eq!(
        oci,
        [
            (InputKind::Variable, "source_path", Some("--mount"), true),
            (InputKind::Variable, "target_path", Some("--mount"), true),
        ]
    );

    let weather = clients
        .show("io.github.example/weather", None, Some("official"))
        .await
        .expect("showing");
    assert_eq!(
        weather.options[0].command.as_ref().map(|c| c.join(" ")),
        Some("uvx --python 3.12 mcp-weather==0.4.1 [--units <units>] [--verbose]".to_owned())
    );
    let key = &weather.options[0].inputs[0];
    assert_eq!(
        (
            key.name.as_str(),
            key.required,
            key.secret,
            key.placeholder.as_deref()
        ),
        ("WEATHER_API_KEY", true, true, Some("wk_..."))
    );

    let nuget = clients
        .show("io.github.example/nuget-tools", None, None)
        .await
        .expect("showing");
    assert_eq!(
        nuget.options[0].command.as_ref().map(|c| c.join(" ")),
        Some("dnx Example.McpTools@2.1.0 --yes --allow <dir> …".to_owned())
    );

    let tenant = clients
        .show("com.example/tenant-api", None, None)
        .await
        .expect("showing");
    let remote = &tenant.options[0];
    assert_eq!(
        remote.url.as_deref(),
        Some("https://{tenant_id}.api.example.com/mcp")
    );
    let inputs: Vec<(InputKind, &str, Option<&str>, bool, bool)> = remote
        .inputs
        .iter()
        .map(|i| {
            (
                i.kind,
                i.name.as_str(),
                i.of.as_deref(),
                i.required,
                i.secret,
            )
        })
        .collect();
    assert_eq!(
        inputs,
        [
            (InputKind::UrlVariable, "tenant_id", None, true, false),
            (
                InputKind::Variable,
                "api_token",
                Some("Authorization"),
                true,
                true
            ),
            (InputKind::Header, "X-Region", None, false, false),
        ]
    );
    assert_eq!(tenant.options[1].transport, "sse");

    let image = clients
        .show("io.github.example/http-image", None, None)
        .await
        .expect("showing");
    assert_eq!(
        image.options[0].command.as_ref().map(|c| c.join(" ")),
        Some(
            "docker run -i --rm -p <--port>:8080 ghcr.io/example/http-image:0.9.0 --port 8080"
                .to_owned()
        )
    );
    assert_eq!(
        image.options[0].url.as_deref(),
        Some("http://localhost:{--port}/mcp")
    );

    let bundle = clients
        .show("io.github.example/desktop-bundle", None, None)
        .await
        .expect("showing");
    assert_eq!(bundle.options[0].command, None);
    assert!(
        bundle.options[0].note.as_deref().is_some_and(
            |n| n.contains("fe333e598595000ae021bd27117db32ec69af6987f507ba7a63c90638ff633ce")
        ),
        "{bundle:?}"
    );
}

#[tokio::test]
async fn show_picks_versions_reports_missing_ones_and_tolerates_unknown_fields() {
    let setup = Setup::new(&[]);
    let clients = setup.clients(Some(FIXTURE_SMITHERY_KEY), false);
    let old = clients
        .show("io.github.example/everything", Some("2025.9.1"), None)
        .await
        .expect("showing an old version");
    assert_eq!(
        old.options[0].command.as_ref().map(|c| c.join(" ")),
        Some("npx -y @modelcontextprotocol/server-everything@2025.9.1".to_owned())
    );
    let error = clients
        .show("io.github.example/everything", Some("9.9.9"), None)
        .await
        .expect_err("no such version");
    assert_eq!(
        error.to_string(),
        "the official registry has no server io.github.example/everything at version 9.9.9"
    );

    let search = clients
        .show("io.github.example/web-search", None, None)
        .await
        .expect("an entry with fields tether does not know");
    let max = &search.options[0].inputs[1];
    assert_eq!(
        (max.name.as_str(), max.default.as_deref()),
        ("SEARCH_MAX", Some("10"))
    );

    let deprecated = clients
        .show("io.github.example/old-search", None, None)
        .await
        .expect("showing a deprecated entry");
    assert_eq!(deprecated.status, "deprecated");
    assert_eq!(
        deprecated.status_message.as_deref(),
        Some("Use io.github.example/web-search")
    );

    // Not in the official registry: Smithery (a key is set).
    let github = clients
        .show("@smithery-ai/github", None, None)
        .await
        .expect("showing from Smithery");
    assert_eq!(github.source, Source::Smithery);
    let option = &github.options[0];
    assert_eq!(
        option.url.as_deref(),
        Some("https://server.smithery.ai/@smithery-ai/github/mcp")
    );
    let inputs: Vec<(&str, bool, Option<&str>)> = option
        .inputs
        .iter()
        .map(|i| (i.name.as_str(), i.required, i.default.as_deref()))
        .collect();
    assert_eq!(
        inputs,
        [
            ("githubPersonalAccessToken", true, None),
            ("toolsets", false, Some("all"))
        ]
    );
}
