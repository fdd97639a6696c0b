//! A remote server's handshake: connected over Streamable HTTP or the legacy SSE transport,
//! `initialize`, and its tools listed, a refused bearer token renewed at any request.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::service::{ClientServiceExt as _, ServiceExt as _};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tether_config::RemoteTransport;

use super::client::TetherClient;
use super::sse::SseClientTransport;
use super::{BearerAuth, Client, HeadersHelper, bearer, lifecycle};

/// The connected client, its tools, and the slot renewing its bearer token (if any).
pub(super) type Handshake = Result<
    (
        Client,
        Vec<rmcp::model::Tool>,
        Option<Arc<bearer::BearerSlot>>,
    ),
    Box<dyn std::error::Error + Send + Sync>,
>;

/// Where a remote server is and what goes with its requests.
pub(super) struct RemoteTarget<'a> {
    pub(super) url: &'a str,
    pub(super) headers: &'a reqwest::header::HeaderMap,
    pub(super) timeout: Duration,
    pub(super) bearer_auth: Option<Arc<dyn BearerAuth>>,
    pub(super) helper: Option<Arc<HeadersHelper>>,
}

/// Connects to a remote server over `kind`, runs `initialize` and lists its tools. A refused
/// bearer token is renewed through `bearer_auth` at any request.
pub(super) async fn remote_handshake(
    client: TetherClient,
    kind: RemoteTransport,
    http: reqwest::Client,
    target: &RemoteTarget<'_>,
) -> Handshake {
    let RemoteTarget {
        url,
        headers,
        timeout,
        ..
    } = *target;
    let helper = target.helper.clone();
    // A helper's headers are the server's credentials: no OAuth renewal besides.
    let bearer_auth = target.bearer_auth.clone().filter(|_| helper.is_none());
    let slot = bearer::slot_for(url, headers, bearer_auth);
    let kept = slot.clone();
    let client = match kind {
        RemoteTransport::Sse => {
            // The legacy transport takes its headers once, when it connects.
            let mut headers = headers.clone();
            if let Some(helper) = &helper {
                headers.extend(helper.current().await?.1);
            }
            let sse = SseClientTransport::connect(http, url, headers, slot, timeout).await?;
            client.serve(sse).await?
        }
        RemoteTransport::StreamableHttp => {
            let custom: HashMap<HeaderName, HeaderValue> = headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned())
                .custom_headers(custom);
            let http = bearer::BearerHttp::new(http, slot, helper);
            let transport = StreamableHttpClientTransport::with_client(http, config);
            let prefer_legacy = client.notices.is_some();
            let routes = Arc::clone(&client.progress);
            client
                .serve_with_lifecycle(
                    lifecycle::Probing::new(transport, false, prefer_legacy).counting(routes),
                    lifecycle::auto(),
                )
                .await?
        }
    };
    let tools = client.list_all_tools().await?;
    Ok((client, tools, kept))
}
