//! Local-first resolution, the seed spec's test list, duplicate names, ids.

use std::sync::{Arc, Mutex};

use pretty_assertions::assert_eq;
use serde_json::json;
use tether_config::{EmptyEnv, Exposure, Origin, Secrets, parse_config};
use tether_driver::{
    DriverError, McpSpec, NoLocalInstallations, Resolver, Session, require_resolved,
    server_map_to_specs, specs_to_server_map,
};
use tether_store::Store;
use uuid::Uuid;

use crate::support::{Answer, FakeManaged, session};

fn config(json: &str) -> Answer {
    Answer::Config {
        json: json.to_owned(),
        expires_at: None,
    }
}

fn local_store(dir: &std::path::Path, config: &str) -> (Arc<Mutex<Store>>, Uuid) {
    let mut store = Store::open(dir).expect("opening the local store");
    let mut parsed = parse_config(config, Origin::User).expect("parsing the test config");
    let uid = store
        .install(&parsed.servers.remove(0).into_installation())
        .expect("installing into the local store");
    (Arc::new(Mutex::new(store)), uid)
}

fn secrets(pairs: &[(&str, &str)]) -> Secrets {
    pairs.iter().map(|(k, v)| (*k, *v)).collect()
}

/// Resolves `specs` with `fake` and renders them with `secrets`: name → real JSON.
async fn resolve_render(
    fake: Arc<FakeManaged>,
    specs: &[McpSpec],
    secrets: &Secrets,
) -> Result<serde_json::Map<String, serde_json::Value>, DriverError> {
    let session = session(specs.to_vec(), secrets.clone(), Some(fake)).await?;
    Ok(session
        .servers()
        .iter()
        .map(|s| (s.name.clone(), s.to_json(Exposure::Real)))
        .collect())
}

#[tokio::test]
async fn a_local_uuid_makes_no_managed_call() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let (store, uid) = local_store(
        dir.path(),
        r#"{"local-srv":{"command":"srv","args":["{{K}}"]}}"#,
    );
    let fake = Arc::new(FakeManaged::new(vec![]));
    let resolver = Resolver::new(store, Some(fake.clone()));
    let resolved = resolver
        .resolve(&[McpSpec::Uuid(uid)])
        .await
        .expect("resolving the specs");
    assert_eq!(
        fake.calls(),
        0,
        "a local UUID must not reach the managed server"
    );
    assert_eq!(resolved.local.len(), 1);
    assert_eq!(resolved.local[0].uid, uid);
    assert!(resolved.ephemeral.is_empty());
}

#[tokio::test]
async fn a_non_local_uuid_calls_the_managed_client_once() {
    let uid = Uuid::new_v4();
    let fake = Arc::new(FakeManaged::new(vec![(
        uid,
        config(r#"{"mcpServers":{"m":{"command":"npx"}}}"#),
    )]));
    let out = resolve_render(fake.clone(), &[McpSpec::Uuid(uid)], &Secrets::new())
        .await
        .expect("resolving and rendering the specs");
    assert_eq!(fake.calls(), 1);
    assert_eq!(out["m"], json!({"command": "npx", "args": [], "env": {}}));
}

#[tokio::test]
async fn managed_env_and_arg_placeholders_get_the_secrets() {
    let env_uid = Uuid::new_v4();
    let arg_uid = Uuid::new_v4();
    let fake = Arc::new(FakeManaged::new(vec![
        (
            env_uid,
            config(
                r#"{"mcpServers":{"GitHub MCP":{"command":"npx","env":{"API_TOKEN":"{{API_TOKEN}}"}}}}"#,
            ),
        ),
        (
            arg_uid,
            config(
                r#"{"mcpServers":{"GitHub args":{"command":"npx","args":["--token={{API_TOKEN}}"]}}}"#,
            ),
        ),
    ]));
    let out = resolve_render(
        fake,
        &[McpSpec::Uuid(env_uid), McpSpec::Uuid(arg_uid)],
        &secrets(&[("API_TOKEN", "real")]),
    )
    .await
    .expect("resolving and rendering the specs");
    assert_eq!(out["GitHub MCP"]["env"]["API_TOKEN"], "real");
    assert_eq!(out["GitHub args"]["args"][0], "--token=real");
}

#[tokio::test]
async fn managed_url_config_keeps_the_proxy_url_and_header() {
    let uid = Uuid::new_v4();
    let fake = Arc::new(FakeManaged::new(vec![(
        uid,
        config(
            r#"{"mcpServers":{"Linear":{"url":"https://proxy.example/mcp-proxy/abc","headers":{"Authorization":"Bearer proxy-token"}}}}"#,
        ),
    )]));
    let out = resolve_render(
        fake,
        &[McpSpec::Uuid(uid)],
        &secrets(&[("Authorization", "Bearer local")]),
    )
    .await
    .expect("resolving and rendering the specs");
    assert_eq!(out["Linear"]["url"], "https://proxy.example/mcp-proxy/abc");
    assert_eq!(
        out["Linear"]["headers"]["Authorization"],
        "Bearer proxy-token"
    );
}

#[tokio::test]
async fn a_missing_managed_secret_leaves_the_placeholder_and_strict_callers_refuse() {
    let uid = Uuid::new_v4();
    let fake = Arc::new(FakeManaged::new(vec![(
        uid,
        config(r#"{"mcpServers":{"gh":{"command":"npx","args":["--token={{API_TOKEN}}"]}}}"#),
    )]));
    let session = session(vec![McpSpec::Uuid(uid)], Secrets::new(), Some(fake))
        .await
        .expect("resolving the managed spec");
    let rendered = session.servers();
    assert_eq!(
        rendered[0].to_json(Exposure::Real)["args"][0],
        "--token={{API_TOKEN}}"
    );
    let err = require_resolved(rendered)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_eq!(
        err,
        "MCP server 'gh' needs values for: API_TOKEN; pass them with --secret NAME=SOURCE"
    );
}

/// Resolves one managed uid the fake answers with `answer`; the resolution must fail with
/// `ManagedMcpResolutionFailed` for that uid. Returns the uid and the error.
async fn managed_failure(answer: Answer) -> (Uuid, DriverError) {
    let uid = Uuid::new_v4();
    let fake = Arc::new(FakeManaged::new(vec![(uid, answer)]));
    let err = resolve_render(fake, &[McpSpec::Uuid(uid)], &Secrets::new())
        .await
        .err();
    match err {
        Some(err @ DriverError::ManagedMcpResolutionFailed { uid: failed, .. }) => {
            assert_eq!(failed, uid);
            (uid, err)
        }
        other => panic!("expected ManagedMcpResolutionFailed, got {other:?}"),
    }
}

/// The message of a `ManagedMcpResolutionFailed`.
fn failure_message(err: &DriverError) -> &str {
    match err {
        DriverError::ManagedMcpResolutionFailed { message, .. } => message,
        other => panic!("expected ManagedMcpResolutionFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn user_facing_error_becomes_managed_resolution_failed() {
    let (_, err) =
        managed_failure(Answer::UserFacing("This MCP server is inactive".to_owned())).await;
    assert_eq!(failure_message(&err), "This MCP server is inactive");
    let (uid, err) = managed_failure(Answer::UserFacing("gone".to_owned())).await;
    assert_eq!(
        err.to_string(),
        format!("Failed to resolve managed MCP server {uid}: gone")
    );
}

#[tokio::test]
async fn unknown_result_is_a_managed_error_not_server_not_found() {
    let (_, err) = managed_failure(Answer::Unknown("SomethingNew".to_owned())).await;
    let message = failure_message(&err);
    assert!(message.contains("SomethingNew"), "{message}");
}

#[tokio::test]
async fn an_unparsable_managed_config_is_a_resolution_failure_without_its_text() {
    let (uid, err) =
        managed_failure(config(r#"{"mcpServers":{"a":{"command":"sk-SENTINEL",}}}"#)).await;
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "Failed to resolve managed MCP server {uid}: the returned MCP config is invalid"
        )),
        "{text}"
    );
    assert!(!text.contains("SENTINEL"), "{text}");
}

#[tokio::test]
async fn no_managed_server_configured_says_how_to_configure_one() {
    let uid = Uuid::new_v4();
    let resolver = Resolver::new(Arc::new(NoLocalInstallations), None);
    let text = resolver
        .resolve(&[McpSpec::Uuid(uid)])
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        text.contains(&uid.to_string()) && text.contains("TETHER_SERVER_URL"),
        "{text}"
    );
}

#[tokio::test]
async fn duplicate_names_across_local_and_ephemeral_are_errors() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let (store, uid) = local_store(dir.path(), r#"{"github":{"command":"srv"}}"#);
    let managed_uid = Uuid::new_v4();
    let fake = Arc::new(FakeManaged::new(vec![(
        managed_uid,
        config(r#"{"mcpServers":{"github":{"command":"other"}}}"#),
    )]));
    let resolver = Resolver::new(store, Some(fake));
    let err = resolver
        .resolve(&[McpSpec::Uuid(uid), McpSpec::Uuid(managed_uid)])
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_eq!(
        err,
        format!(
            "Duplicate MCP server name 'github' (from local installation {uid} and managed installation {managed_uid}): rename one of them (a single-server spec is named by its \"name\" field, else by its command's file name or its URL's host)"
        )
    );
}

#[tokio::test]
async fn local_and_ephemeral_installations_get_the_same_secrets() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let (store, uid) = local_store(
        dir.path(),
        r#"{"local":{"command":"srv","args":["--t={{T}}"],"env":{"K":"{{T}}"}}}"#,
    );
    let inline =
        McpSpec::parse(r#"{"inline":{"command":"srv","args":["--t={{T}}"],"env":{"K":"{{T}}"}}}"#)
            .expect("parsing the test spec");
    let session = Session::resolve(
        Resolver::new(store, None),
        vec![McpSpec::Uuid(uid), inline],
        secrets(&[("T", "s3cret")]),
        EmptyEnv,
    )
    .await
    .expect("resolving a local and an inline spec");
    let rendered = session.servers();
    assert_eq!(rendered.len(), 2);
    for server in rendered {
        let json = server.to_json(Exposure::Real);
        assert_eq!(json["args"][0], "--t=s3cret", "{}", server.name);
        assert_eq!(json["env"]["K"], "s3cret", "{}", server.name);
    }
}

#[tokio::test]
async fn managed_results_keep_input_order_and_calls_overlap() {
    let uids: Vec<Uuid> = (0..8).map(|_| Uuid::new_v4()).collect();
    let answers = uids
        .iter()
        .enumerate()
        .map(|(i, uid)| {
            (
                *uid,
                config(&format!(r#"{{"mcpServers":{{"s{i}":{{"command":"x"}}}}}}"#)),
            )
        })
        .collect();
    let mut fake = FakeManaged::new(answers);
    fake.delay = std::time::Duration::from_millis(50);
    let fake = Arc::new(fake);
    let specs: Vec<McpSpec> = uids.iter().map(|u| McpSpec::Uuid(*u)).collect();
    let resolver = Resolver::new(Arc::new(NoLocalInstallations), Some(fake.clone()));
    let resolved = resolver.resolve(&specs).await.expect("resolving the specs");
    let names: Vec<&str> = resolved
        .ephemeral
        .iter()
        .map(|e| e.installation.name())
        .collect();
    assert_eq!(names, ["s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"]);
    assert_eq!(fake.calls(), 8);
}

#[tokio::test]
async fn ephemeral_ids_are_stable_for_a_task_and_random_without() {
    let spec = McpSpec::parse(r#"{"a":{"command":"x"}}"#).expect("parsing the test spec");
    let ids = |task: Option<&str>| {
        let spec = spec.clone();
        let task = task.map(str::to_owned);
        async move {
            let mut resolver = Resolver::new(Arc::new(NoLocalInstallations), None);
            if let Some(task) = task {
                resolver = resolver.with_task_id(task);
            }
            resolver
                .resolve(&[spec])
                .await
                .expect("resolving the specs")
                .ephemeral[0]
                .id
        }
    };
    assert_eq!(ids(Some("task-1")).await, ids(Some("task-1")).await);
    assert_ne!(ids(Some("task-1")).await, ids(Some("task-2")).await);
    assert_ne!(ids(None).await, ids(None).await);
    assert_eq!(ids(Some("task-1")).await.get_version_num(), 5);
}

#[tokio::test]
async fn a_task_config_with_warp_ids_resolves_like_direct_specs() {
    let uid = Uuid::new_v4();
    let fake = Arc::new(FakeManaged::new(vec![(
        uid,
        config(r#"{"mcpServers":{"m":{"command":"npx"}}}"#),
    )]));
    let direct = vec![
        McpSpec::Uuid(uid),
        McpSpec::parse(r#"{"inline":{"command":"srv"}}"#).expect("parsing the test spec"),
    ];
    let task_map = specs_to_server_map(&direct).expect("turning specs into a task map");
    // The task config keeps the reference, never the resolved config.
    assert_eq!(
        task_map[&uid.to_string()],
        json!({"warp_id": uid.to_string()})
    );
    let from_task = server_map_to_specs(&task_map).expect("turning a task map into specs");
    let a = resolve_render(fake.clone(), &direct, &Secrets::new())
        .await
        .expect("resolving and rendering the specs");
    let b = resolve_render(fake.clone(), &from_task, &Secrets::new())
        .await
        .expect("resolving and rendering the specs");
    assert_eq!(a, b);
    assert_eq!(fake.calls(), 2);
}

/// Stored secrets belong to their installation: two local installations
/// with a `TOKEN` each get their own value, a run's `--secret TOKEN` overrides both for the
/// run, and every stored value is in the session's masking set.
#[tokio::test]
async fn stored_secrets_apply_to_their_own_installation_under_the_runs() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let mut store = Store::open_with(
        dir.path(),
        tether_store::SecretStore::new(dir.path(), tether_store::Preference::File),
    )
    .expect("opening the local store");
    let mut uids = Vec::new();
    for (name, value) in [("a", "SENTINEL-a $HOME {{x}}"), ("b", "SENTINEL-b")] {
        let mut parsed = parse_config(
            &format!(r#"{{"{name}":{{"command":"srv","args":["--token={{{{TOKEN}}}}"]}}}}"#),
            Origin::User,
        )
        .expect("parsing the test config");
        let stored: Secrets = [("TOKEN", value)].into_iter().collect();
        uids.push(
            store
                .install_with(&parsed.servers.remove(0).into_installation(), &stored, None)
                .expect("installing into the local store"),
        );
    }
    let store: Arc<Mutex<Store>> = Arc::new(Mutex::new(store));
    let render = |secrets: Secrets| {
        let resolver = Resolver::new(store.clone(), None);
        let specs: Vec<McpSpec> = uids.iter().map(|uid| McpSpec::Uuid(*uid)).collect();
        async move {
            let session = Session::resolve(resolver, specs, secrets, EmptyEnv)
                .await
                .expect("resolving the specs");
            let masking: Vec<String> = session
                .sensitive_values()
                .iter()
                .map(|v| v.expose().to_owned())
                .collect();
            let servers: std::collections::BTreeMap<String, serde_json::Value> = session
                .servers()
                .iter()
                .map(|s| (s.name.clone(), s.to_json(Exposure::Real)))
                .collect();
            (servers, masking)
        }
    };
    let (servers, masking) = render(Secrets::new()).await;
    assert_eq!(servers["a"]["args"][0], "--token=SENTINEL-a $HOME {{x}}");
    assert_eq!(servers["b"]["args"][0], "--token=SENTINEL-b");
    assert!(
        masking.contains(&"SENTINEL-a $HOME {{x}}".to_owned()),
        "{masking:?}"
    );
    assert!(masking.contains(&"SENTINEL-b".to_owned()), "{masking:?}");

    let (servers, _) = render(secrets(&[("TOKEN", "from-the-run")])).await;
    assert_eq!(servers["a"]["args"][0], "--token=from-the-run");
    assert_eq!(servers["b"]["args"][0], "--token=from-the-run");
}
