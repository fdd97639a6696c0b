//! What the gateway's tests share.

#![allow(dead_code, reason = "each test binary uses a part")]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tether_clock::Clock;
use tether_config::{EmptyEnv, Secrets};
use tether_driver::{McpSpec, NoLocalInstallations, Resolver, Session, SpecSource, StartOptions};
use tether_gateway::names::ToolFilter;
use tether_gateway::{GatewayOptions, ScanPolicy, Upstream};
use tether_testkit::json_str;

/// The options a test's gateway runs with: a 60 s call timeout, no audit log, pins or filter,
/// the scan warning; `upstream` when `start` was wired with it.
pub fn gateway_options(start: StartOptions, upstream: Option<Upstream>) -> GatewayOptions {
    GatewayOptions {
        call_timeout: Duration::from_secs(60),
        audit: None,
        start,
        pins: None,
        scan: ScanPolicy::Warn,
        policies: HashMap::new(),
        filter: ToolFilter::default(),
        upstream,
        masking_hook: None,
        budget: tether_gateway::ResultBudget::default(),
        tool_search: tether_gateway::tool_search::ToolSearch::default(),
        secret_scan: tether_gateway::secret_scan::SecretScanPolicy::default(),
        first_list_grace: None,
        task_after: None,
    }
}

/// A session of one stdio server `name` running `program`, on `clock`.
pub async fn session_of(name: &str, program: &str, clock: Arc<dyn Clock>) -> Session {
    session_of_servers(&[(name, program, &[])], clock).await
}

/// A session of stdio servers, each `(name, program, arguments)`, in this order, on `clock`.
pub async fn session_of_servers(
    servers: &[(&str, &str, &[&str])],
    clock: Arc<dyn Clock>,
) -> Session {
    let entries: Vec<String> = servers
        .iter()
        .map(|(name, program, args)| {
            format!(
                r#"{}:{{"command":{},"args":{}}}"#,
                json_str(name),
                json_str(program),
                serde_json::json!(args)
            )
        })
        .collect();
    let spec = McpSpec::json(
        format!(r#"{{"mcpServers":{{{}}}}}"#, entries.join(",")),
        SpecSource::Inline,
    )
    .expect("a valid spec");
    let resolver = Resolver::new(Arc::new(NoLocalInstallations), None);
    Session::resolve(resolver, vec![spec], Secrets::new(), EmptyEnv)
        .await
        .expect("resolving the spec")
        .with_clock(clock)
}

/// A client of `gateway` with `handler`, over an in-process pipe (the stdio framing), and the
/// task serving it.
pub async fn serve_client<H: rmcp::ClientHandler>(
    gateway: &tether_gateway::Gateway,
    handler: H,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, H>,
    tokio::task::JoinHandle<()>,
) {
    use rmcp::ServiceExt as _;
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (reader, writer) = tokio::io::split(ours);
    let serving = {
        let gateway = gateway.clone();
        tokio::spawn(async move {
            let _ = gateway.serve_io(reader, writer).await;
        })
    };
    let client = handler
        .serve(tokio::io::split(theirs))
        .await
        .expect("initializing through the gateway");
    (client, serving)
}

/// The test server twice: `fast`, and `slow`, held back until the file `release` exists, then
/// `more` servers `(name, arguments)` of the test server, in this order.
pub async fn fast_and_held_back(
    release: &std::path::Path,
    more: &[(&str, &[&str])],
    clock: Arc<dyn Clock>,
) -> Session {
    let program = tether_testkit::test_server_bin()
        .to_string_lossy()
        .into_owned();
    let release = release.to_string_lossy().into_owned();
    let held: [&str; 2] = ["--start-when-file", &release];
    let mut servers: Vec<(&str, &str, &[&str])> =
        vec![("fast", &program, &[]), ("slow", &program, &held)];
    servers.extend(
        more.iter()
            .map(|(name, args)| (*name, program.as_str(), *args)),
    );
    session_of_servers(&servers, clock).await
}

/// The names in a `tether__find_tools` answer, best first.
pub fn found_names(answer: &serde_json::Value) -> Vec<String> {
    answer["tools"]
        .as_array()
        .expect("a tools array")
        .iter()
        .map(|tool| tool["name"].as_str().expect("a name").to_owned())
        .collect()
}
