//! The server over Streamable HTTP, driven by rmcp's reqwest client.

use std::{collections::HashMap, time::Duration};

use anyhow::bail;
use reqwest::{
    StatusCode,
    header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue},
};
use rmcp::{
    ServiceExt as _,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};

use crate::support::{expect_echo, kill, spawn_http, within};

const TOKEN_ENV: &str = "TETHER_TEST_UPSTREAM_TOKEN";
const TOKEN: &str = "upstream-token-1234";

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

#[tokio::test]
async fn streamable_http_lists_and_calls_tools() -> anyhow::Result<()> {
    let (server, url) = spawn_http(&[], &[]).await?;

    let transport = StreamableHttpClientTransport::from_uri(url.as_str());
    let client = within("the HTTP handshake", ().serve(transport)).await??;
    let tools = within("tools/list", client.list_all_tools()).await??;
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(names, ["add", "echo", "env_check"]);
    expect_echo(&client, "over HTTP").await?;

    within("closing the client", client.cancel()).await??;
    kill(server).await
}

#[tokio::test]
async fn require_bearer_env_answers_401_without_the_token() -> anyhow::Result<()> {
    let (server, url) =
        spawn_http(&["--require-bearer-env", TOKEN_ENV], &[(TOKEN_ENV, TOKEN)]).await?;

    let http = reqwest::Client::new();
    let post = || {
        http.post(url.as_str())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .body(INITIALIZE)
    };
    let bare = within("a bare POST", post().send()).await??;
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
    let wrong = within("a wrong token", post().bearer_auth("wrong").send()).await??;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let right = within("the right token", post().bearer_auth(TOKEN).send()).await??;
    assert_eq!(right.status(), StatusCode::OK);

    // rmcp without credentials: the handshake fails and says authorization is required.
    let transport = StreamableHttpClientTransport::from_uri(url.as_str());
    let error = match within("an unauthorised handshake", ().serve(transport)).await? {
        Ok(_) => bail!("the handshake succeeded without a token"),
        Err(error) => error,
    };
    assert!(error.is_authorization_required(), "{error:?}");
    assert_eq!(
        error.auth_challenge(),
        Some("Bearer realm=\"tether-test-mcp\"")
    );

    // `auth_header` takes the bare token; rmcp sends `Authorization: Bearer <token>`.
    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(TOKEN);
    let client = within(
        "a handshake with auth_header",
        ().serve(StreamableHttpClientTransport::from_config(config)),
    )
    .await??;
    let tools = within("tools/list", client.list_all_tools()).await??;
    assert_eq!(tools.len(), 3);
    within("closing the client", client.cancel()).await??;

    // Any header, Authorization included (whatever its scheme), can go in custom_headers.
    let headers = HashMap::from([
        (
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {TOKEN}"))?,
        ),
        (
            HeaderName::from_static("x-tether-test"),
            HeaderValue::from_static("1"),
        ),
    ]);
    let config =
        StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(headers);
    let client = within(
        "a handshake with custom headers",
        ().serve(StreamableHttpClientTransport::from_config(config)),
    )
    .await??;
    expect_echo(&client, "ok").await?;
    within("closing the client", client.cancel()).await??;

    // Headers the transport manages itself are refused.
    let headers = HashMap::from([(
        HeaderName::from_static("mcp-session-id"),
        HeaderValue::from_static("forged"),
    )]);
    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
        .auth_header(TOKEN)
        .custom_headers(headers);
    match within(
        "a handshake with a reserved header",
        ().serve(StreamableHttpClientTransport::from_config(config)),
    )
    .await?
    {
        Ok(_) => bail!("a reserved header was accepted"),
        Err(error) => assert!(
            format!("{error:?}").contains("ReservedHeaderConflict"),
            "{error:?}"
        ),
    }

    kill(server).await
}

#[tokio::test]
async fn hang_accepts_but_never_answers_initialize() -> anyhow::Result<()> {
    let (server, url) = spawn_http(&["--hang"], &[]).await?;
    let transport = StreamableHttpClientTransport::from_uri(url.as_str());
    let attempt = tokio::time::timeout(Duration::from_millis(500), ().serve(transport)).await;
    assert!(attempt.is_err(), "a hung server answered");
    kill(server).await
}
