//! `@modelcontextprotocol/server-everything` (npm) in `streamableHttp` mode as the upstream of
//! a URL installation, reached through the proxy by the driver's runtime.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tether_config::Secrets;
use tether_testkit::server_everything;

use crate::support::{Fixture, STEP, add, call, launch, ready_tools};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_through_the_proxy() {
    let Some(bin) = server_everything() else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("picking a free port");
    let _everything = tokio::process::Command::new(bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("starting server-everything");
    let ready = async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(STEP, ready)
        .await
        .unwrap_or_else(|_| panic!("server-everything did not listen on {port}"));

    let fixture = Fixture::start(&[]).await;
    let spec = format!(r#"{{"url": "http://127.0.0.1:{port}/mcp"}}"#);
    let uid = add(&fixture.data(), "everything", &spec, &[], "default", &[]).await;
    let config = fixture.mint(uid).await;
    assert!(!config.mcp_config_json.expose().contains(&port.to_string()));
    let runtime = launch(config.mcp_config_json.expose(), &Secrets::new()).await;
    let tools = ready_tools(&runtime);
    assert!(tools.iter().any(|t| t == "echo"), "{tools:?}");
    let out = call(
        &runtime,
        "everything",
        "echo",
        json!({"message": "via proxy"}),
    )
    .await;
    assert!(out.contains("via proxy"), "{out}");
    runtime.shutdown().await;
}
