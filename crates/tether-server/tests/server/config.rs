//! `createManagedMcpClientConfig` through the workspace's own client, and raw HTTP for what the
//! client cannot send (no key, a wrong key).

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tether_config::Secrets;
use tether_graphql::{ManagedMcpClient as _, ManagedMcpError, TransportKind, UserFacingErrorKind};
use uuid::Uuid;

use crate::support::{
    Fixture, add, admin, api_key, call, json_str, launch, sentinel, test_mcp_bin,
};

/// POSTs a GraphQL body with an optional `Authorization` value.
pub async fn raw_graphql(
    url: &str,
    authorization: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut request = reqwest::Client::new().post(url).json(body);
    if let Some(value) = authorization {
        request = request.header("Authorization", value);
    }
    request
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"))
}

pub(crate) fn create_body(uid: &str) -> Value {
    json!({
        "query": "mutation M($input: CreateManagedMcpClientConfigInput!) { createManagedMcpClientConfig(input: $input) { __typename ... on UserFacingError { error { __typename message } } } }",
        "variables": {"input": {"uid": uid}},
    })
}

/// The user-facing error the client reports for `uid`: (kind, message).
async fn user_facing(fixture: &Fixture, api_key: &str, uid: Uuid) -> (UserFacingErrorKind, String) {
    match fixture
        .server
        .client(api_key)
        .create_managed_mcp_client_config(uid)
        .await
    {
        Err(ManagedMcpError::UserFacing { kind, message, .. }) => (kind, message),
        other => panic!("expected a user-facing error for {uid}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_config_renders_server_secrets_and_keeps_client_placeholders() {
    let fixture = Fixture::start(&[]).await;
    let server_secret = sentinel("server-secret");
    let bin = test_mcp_bin().to_string_lossy().into_owned();
    let spec = format!(
        r#"{{"mcpServers": {{"ignored-name": {{"command": {}, "env": {{
            "SERVER_SECRET": "{{{{SERVER_SECRET}}}}", "CLIENT_SECRET": "{{{{CLIENT_SECRET}}}}", "FIXED": "plain"}}}}}}}}"#,
        json_str(&bin)
    );
    let uid = add(
        &fixture.data(),
        "tools",
        &spec,
        &["SERVER_SECRET=env:THE_SECRET"],
        "default",
        &[("THE_SECRET", &server_secret)],
    )
    .await;

    let config = fixture.mint(uid).await;
    assert_eq!(config.transport_kind, TransportKind::Command);
    assert!(config.proxy_url.is_none() && config.proxy_token.is_none());
    assert!(config.authorization_header.is_none() && config.expires_at.is_none());
    let returned: Value =
        serde_json::from_str(config.mcp_config_json.expose()).expect("mcpConfigJson is JSON");
    assert_eq!(
        returned,
        json!({"mcpServers": {"tools": {
            "command": bin,
            "args": [],
            "env": {"SERVER_SECRET": server_secret, "CLIENT_SECRET": "{{CLIENT_SECRET}}", "FIXED": "plain"},
        }}})
    );

    // The client fills its own placeholder and runs the command.
    let client_secrets: Secrets = [("CLIENT_SECRET", "client-value")].into_iter().collect();
    let runtime = launch(config.mcp_config_json.expose(), &client_secrets).await;
    for name in ["SERVER_SECRET", "CLIENT_SECRET", "FIXED"] {
        let out = call(&runtime, "tools", "env_check", json!({"name": name})).await;
        assert!(out.contains(r#"\"set\":true"#), "{name}: {out}");
    }
    runtime.shutdown().await;
    assert_eq!(fixture.server.config_requests(&fixture.api_key).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_other_team_and_inactive_installations() {
    let fixture = Fixture::start(&[]).await;
    let data = fixture.data();
    let spec = r#"{"command": "some-mcp"}"#;
    let ours = add(&data, "ours", spec, &[], "default", &[]).await;
    let theirs = add(&data, "theirs", spec, &[], "other-team", &[]).await;
    let other_key = api_key(&data, "other-team").await;

    let unknown = Uuid::new_v4();
    let (kind, message) = user_facing(&fixture, &fixture.api_key, unknown).await;
    assert_eq!(kind, UserFacingErrorKind::NotFound);
    // Another team's uid answers exactly like a missing one (only the uid differs).
    let (kind, other_message) = user_facing(&fixture, &fixture.api_key, theirs).await;
    assert_eq!(kind, UserFacingErrorKind::NotFound);
    assert_eq!(
        other_message.replace(&theirs.to_string(), "UID"),
        message.replace(&unknown.to_string(), "UID")
    );
    // …and the other team does see it.
    let config = fixture
        .server
        .client(&other_key)
        .create_managed_mcp_client_config(theirs)
        .await
        .expect("asking for another team's uid answers");
    assert_eq!(config.transport_kind, TransportKind::Command);

    // Only a team's own active uids are listed.
    let list = json!({"query": "{ managedMcpServerUids }"});
    let listed = |key: String| {
        let url = fixture.server.graphql_url();
        let list = list.clone();
        async move {
            let body: Value = raw_graphql(&url, Some(&format!("Bearer {key}")), &list)
                .await
                .json()
                .await
                .expect("the managedMcpServerUids answer is JSON");
            body["data"]["managedMcpServerUids"].clone()
        }
    };
    assert_eq!(
        listed(fixture.api_key.clone()).await,
        json!([ours.to_string()])
    );
    assert_eq!(listed(other_key.clone()).await, json!([theirs.to_string()]));

    admin(&data, &["deactivate", &ours.to_string()], &[]).await;
    let (kind, message) = user_facing(&fixture, &fixture.api_key, ours).await;
    assert_eq!(kind, UserFacingErrorKind::Inactive, "{message}");
    assert!(message.contains("deactivated"), "{message}");
    assert_eq!(listed(fixture.api_key.clone()).await, json!([]));
    // Another team's deactivated uid is still just "not found".
    admin(&data, &["deactivate", &theirs.to_string()], &[]).await;
    let (kind, _) = user_facing(&fixture, &fixture.api_key, theirs).await;
    assert_eq!(kind, UserFacingErrorKind::NotFound);

    // A uid that is not a UUID is not found either (raw: the client only sends UUIDs).
    let body: Value = raw_graphql(
        &fixture.server.graphql_url(),
        Some(&format!("Bearer {}", fixture.api_key)),
        &create_body("not-a-uuid"),
    )
    .await
    .json()
    .await
    .expect("the GraphQL answer is JSON");
    assert_eq!(
        body["data"]["createManagedMcpClientConfig"]["error"]["__typename"],
        "ManagedMcpNotFoundError"
    );
    // Every createManagedMcpClientConfig request counted, whatever its outcome.
    assert_eq!(fixture.server.config_requests(&fixture.api_key).await, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphql_needs_a_known_api_key() {
    let fixture = Fixture::start(&[]).await;
    let url = fixture.server.graphql_url();
    let body = create_body(&Uuid::new_v4().to_string());
    for authorization in [
        None,
        Some("Bearer tsk_unknown"),
        Some("Basic abc"),
        Some("Bearer "),
    ] {
        let response = raw_graphql(&url, authorization, &body).await;
        assert_eq!(response.status(), 401, "{authorization:?}");
        assert!(response.headers().contains_key("www-authenticate"));
    }
    // The workspace's client reports the 401 as an HTTP error, without retrying it.
    match fixture
        .server
        .client("tsk_wrong")
        .create_managed_mcp_client_config(Uuid::new_v4())
        .await
    {
        Err(ManagedMcpError::Http { status: 401, .. }) => {}
        other => panic!("expected HTTP 401, got {other:?}"),
    }
    // The known key works (and a malformed body is a 400, not a crash).
    let ok = raw_graphql(&url, Some(&format!("bearer {}", fixture.api_key)), &body).await;
    assert_eq!(ok.status(), 200);
    let bad = reqwest::Client::new()
        .post(&url)
        .header("Authorization", format!("Bearer {}", fixture.api_key))
        .body("{not json")
        .send()
        .await
        .expect("posting a body that is not JSON");
    assert_eq!(bad.status(), 400);
    // Rejected requests never reached the resolver.
    assert_eq!(fixture.server.config_requests(&fixture.api_key).await, 1);
    assert!(!fixture.server.logs().contains(&fixture.api_key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_graceful_shutdown() {
    let fixture = Fixture::start(&[]).await;
    let health = reqwest::get(format!("{}/healthz", fixture.server.base))
        .await
        .expect("GET /healthz");
    assert_eq!(health.status(), 200);
    let Fixture { server, dir, .. } = fixture;
    let started = std::time::Instant::now();
    let status = server.terminate().await;
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    drop(dir);
}

/// The server takes a batch of 64 aliased `createManagedMcpClientConfig` fields in
/// one request (its documented limit is 128), and answers each alias on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_64_is_answered_per_alias_in_one_request() {
    let fixture = Fixture::start(&[]).await;
    let bin = test_mcp_bin().to_string_lossy().into_owned();
    let spec = format!(r#"{{"command": {}}}"#, json_str(&bin));
    let known = add(&fixture.data(), "batched", &spec, &[], "default", &[]).await;
    let mut uids: Vec<Uuid> = (0..63).map(|_| Uuid::new_v4()).collect();
    uids.insert(17, known);
    let client = tether_graphql::HttpManagedMcpClient::new(tether_graphql::HttpClientSettings {
        api_key: Some(tether_config::SecretValue::from(fixture.api_key.as_str())),
        batch_size: 64,
        ..tether_graphql::HttpClientSettings::new(
            fixture.server.graphql_url().parse().expect("graphql url"),
        )
    })
    .expect("a batching client");
    let results = client.resolve_many(&uids).await;
    assert_eq!(results.len(), 64);
    for (index, result) in results.iter().enumerate() {
        match result {
            Ok(config) => {
                assert_eq!(index, 17);
                assert_eq!(config.transport_kind, TransportKind::Command);
            }
            Err(ManagedMcpError::UserFacing { kind, .. }) => {
                assert_eq!(*kind, UserFacingErrorKind::NotFound);
            }
            Err(other) => panic!("uid {index}: {other}"),
        }
    }
    // Had the server refused the batch, the client would have split it and lowered its limit.
    assert!(
        format!("{client:?}").contains("batch_limit: 64"),
        "{client:?}"
    );
    assert_eq!(fixture.server.config_requests(&fixture.api_key).await, 64);
}
