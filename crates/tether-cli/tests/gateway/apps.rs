//! MCP Apps through `tether serve`: two copies of a real App server from npm
//! (`@modelcontextprotocol/server-basic-vanillajs`) behind the gateway. Each copy's tool names
//! its own `ui://` resource, which a host reads straight from the tool's `_meta` without
//! listing first, and `resources/list` shows both; the app's HTML comes back whole with its
//! MCP App MIME type.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_copies_of_a_real_app_server_each_show_their_own_app() {
    let Some(app) = tether_testkit::app_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let app = json_str(&app.to_string_lossy());
    let spec = format!(
        r#"{{"one": {{"command": {app}, "args": ["--stdio"]}}, "two": {{"command": {app}, "args": ["--stdio"]}}}}"#
    );
    let (client, stderr) = serve_client(dir.path(), &spec, &[]).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    let ui = |name: &str| {
        let tool = tools
            .iter()
            .find(|tool| tool.name == name)
            .unwrap_or_else(|| panic!("no {name} in {tools:?}"));
        let meta = serde_json::to_value(tool).expect("JSON")["_meta"].clone();
        (
            meta["ui"]["resourceUri"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            meta["ui/resourceUri"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    };
    let one = ui("one__get-time");
    let two = ui("two__get-time");
    assert_eq!(one.0, "ui://one__get-time/mcp-app.html");
    assert_eq!(two.0, "ui://two__get-time/mcp-app.html");
    assert_eq!(
        (one.1.as_str(), two.1.as_str()),
        (one.0.as_str(), two.0.as_str())
    );

    // Read straight from `_meta`, nothing listed first.
    for uri in [&one.0, &two.0] {
        let contents = read_resource(&client, uri).await.expect("reading the app");
        assert_eq!(contents[0]["uri"], json!(uri), "{contents}");
        assert_eq!(contents[0]["mimeType"], "text/html;profile=mcp-app");
        let html = contents[0]["text"].as_str().unwrap_or_default();
        assert!(
            html.starts_with("<!DOCTYPE html>") && html.contains("Get Time App"),
            "{html:.200}"
        );
    }
    let listed = client.list_all_resources().await.expect("resources/list");
    let mut uris: Vec<String> = listed.iter().map(|r| r.uri.clone()).collect();
    uris.sort();
    assert_eq!(uris, [one.0.clone(), two.0.clone()]);
    // A URI of a server that is not behind the gateway is refused as before.
    let elsewhere = read_resource(&client, "ui://three__get-time/mcp-app.html").await;
    assert!(elsewhere.is_err(), "{elsewhere:?}");
    // The tool itself still answers.
    let time = call(&client, "two__get-time", json!({})).await;
    assert_ne!(time["isError"], json!(true), "{time}");
    drop(stderr_of(client, stderr).await);
}

/// A tool only its app may call (`_meta.ui.visibility: ["app"]`) is not offered to the model —
/// not listed, not found in search mode — but the host calls it by name; an app tool the model
/// sees is found with its `_meta.ui`, its resource named under its server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_only_tool_is_hidden_from_the_model_and_callable_by_the_host() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let server = |visibility: &str| {
        format!(
            r#"{{"command": {}, "args": ["--extra-tool", "Refreshes the clock app's numbers.", "--extra-tool-meta", {}]}}"#,
            json_str(&test_server_bin().to_string_lossy()),
            json_str(&format!(
                r#"{{"ui": {{"resourceUri": "ui://clock/app.html", "visibility": {visibility}}}}}"#
            ))
        )
    };
    let spec = format!(
        r#"{{"hidden": {}, "shown": {}}}"#,
        server(r#"["app"]"#),
        server(r#"["model", "app"]"#)
    );
    for mode in ["all", "search"] {
        let (client, stderr) = serve_client(dir.path(), &spec, &["--tool-mode", mode]).await;
        let names = tool_names(&client).await;
        assert!(!names.contains(&"hidden__extra".to_owned()), "{names:?}");
        if mode == "all" {
            assert!(names.contains(&"shown__extra".to_owned()), "{names:?}");
        } else {
            let found = call(
                &client,
                "tether__find_tools",
                json!({"query": "refresh the clock app numbers", "limit": 5}),
            )
            .await;
            let tools = found["structuredContent"]["tools"].clone();
            let names: Vec<&str> = tools
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|tool| tool["name"].as_str())
                .collect();
            assert!(!names.contains(&"hidden__extra"), "{found}");
            let shown = tools
                .as_array()
                .into_iter()
                .flatten()
                .find(|tool| tool["name"] == "shown__extra")
                .unwrap_or_else(|| panic!("{found}"));
            assert_eq!(
                shown["_meta"]["ui"]["resourceUri"],
                "ui://shown__clock/app.html"
            );
        }
        // The host calls it by name.
        let called = call(&client, "hidden__extra", json!({})).await;
        assert_ne!(called["isError"], json!(true), "{called}");
        drop(stderr_of(client, stderr).await);
    }
}

#[path = "../setup_mcp/browser.rs"]
mod browser;

/// The App's HTML as the gateway serves it renders in a real browser (headless Chromium through
/// WebDriver): served from loopback, it paints its first frame with the app's controls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_html_from_the_gateway_paints_in_a_browser() {
    let Some(app) = tether_testkit::app_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let spec = format!(
        r#"{{"clock": {{"command": {}, "args": ["--stdio"]}}}}"#,
        json_str(&app.to_string_lossy())
    );
    let (client, stderr) = serve_client(dir.path(), &spec, &[]).await;
    let contents = read_resource(&client, "ui://clock__get-time/mcp-app.html")
        .await
        .expect("reading the app");
    let html = contents[0]["text"].as_str().unwrap_or_default().to_owned();
    drop(stderr_of(client, stderr).await);
    let Some(browser) = browser::Driver::start("MAP * ~NOTFOUND, EXCLUDE 127.0.0.1").await else {
        return;
    };
    let url = serve_page(html).await;
    browser.open(&url).await;
    let page = browser.wait_for("get-time-btn").await;
    assert!(page.contains("Get Server Time"), "{page:.500}");
    let painted = browser
        .execute("return performance.getEntriesByType('paint').map(e => e.name);")
        .await;
    browser.quit().await;
    let painted: Vec<&str> = painted
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert!(painted.contains(&"first-paint"), "{painted:?}");
}

/// Serves `html` to every request on a loopback port, from a task that lives with the
/// runtime: the page's URL.
async fn serve_page(html: String) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let url = format!(
        "http://{}/app.html",
        listener.local_addr().expect("its address")
    );
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = vec![0u8; 8192];
            let _ = stream.read(&mut request).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                html.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(html.as_bytes()).await;
        }
    });
    url
}
