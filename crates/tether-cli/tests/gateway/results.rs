//! Large results: cut to the token budget (`--max-result-tokens`) with a `tether://results/…`
//! link to the whole, read back in its own session only.

use super::*;

/// The test server with `big` (and `reflect`, whose instructions end with `GW_BIG=<value>`)
/// and a resource template under the gateway's own scheme, its `GW_BIG` the run's secret.
fn big_spec() -> String {
    format!(
        r#"{{"test": {{"command": {}, "args": ["--big-tool", "--reflect-env", "GW_BIG", "--resource-template", "tether://results/{{id}}"], "env": {{"GW_BIG": "{{{{TOKEN}}}}"}}}}}}"#,
        json_str(&test_server_bin().to_string_lossy())
    )
}

/// `big`'s text of `bytes` bytes with the secret at both ends, as the gateway gives it back
/// whole: the secret masked.
fn masked_big_text_len(bytes: usize) -> usize {
    bytes - 2 * (SECRET.len() - MASK.len())
}

/// The blob `big` adds: `blob_bytes` bytes, `i % 251` each, in base64.
fn big_blob(blob_bytes: usize) -> String {
    use base64::Engine as _;
    let data: Vec<u8> = (0..blob_bytes)
        .map(|i| u8::try_from(i % 251).expect("a byte"))
        .collect();
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// The `tether://results/…` link of a cut result.
fn link_of(result: &Value) -> String {
    let blocks = result["content"].as_array().expect("content");
    let link = blocks.last().expect("a last block");
    assert_eq!(link["type"], json!("resource_link"), "{result}");
    link["uri"].as_str().expect("a URI").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_megabyte_result_comes_back_within_budget_with_a_link_to_the_whole() {
    const BYTES: usize = 10_000_000;
    const BLOB: usize = 3000;
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let (client, stderr) = serve_client(
        dir.path(),
        &big_spec(),
        &["--secret", "TOKEN=env:GW_SECRET"],
    )
    .await;

    // The server's instructions, masked, under its name.
    let info = client.peer_info().expect("the gateway's initialize answer");
    let instructions = info.instructions.clone().unwrap_or_default();
    assert!(instructions.contains("SERVER__NAME"), "{instructions}");
    assert!(
        instructions.contains(&format!("## test\nA test server: echo, env_check and add, plus numbered filler tools. GW_BIG={MASK}")),
        "{instructions}"
    );
    assert!(!instructions.contains(SECRET), "{instructions}");

    let result = call(
        &client,
        "test__big",
        json!({"bytes": BYTES, "blob_bytes": BLOB, "env": "GW_BIG"}),
    )
    .await;
    let budget = tether_gateway::budget::DEFAULT_MAX_RESULT_TOKENS * 4;
    let counted = tether_gateway::budget::result_bytes(&result);
    assert!(counted <= budget, "{counted} > {budget}");
    let blocks = result["content"].as_array().expect("content");
    assert_eq!(blocks.len(), 3, "the first part, the notice, the link");
    let first = blocks[0]["text"].as_str().expect("the first part");
    assert!(
        first.starts_with(&format!("GW_BIG={MASK}\n")),
        "{}",
        &first[..40]
    );
    assert!(first.ends_with('\n'), "cut at a line end");
    assert!(first.len() > budget / 2, "{}", first.len());
    let notice = blocks[1]["text"].as_str().expect("the notice");
    let total = masked_big_text_len(BYTES) + big_blob(BLOB).len();
    assert!(
        notice.contains(&format!("{} of {total} bytes kept", first.len())),
        "{notice}"
    );
    assert!(notice.contains("1 content block(s) left out"), "{notice}");
    let uri = link_of(&result);
    assert!(notice.contains(&uri), "{notice}");
    assert!(!result.to_string().contains(SECRET));

    // The whole, masked, the blob unchanged.
    let contents = read_resource(&client, &uri)
        .await
        .expect("reading the whole");
    let text = contents[0]["text"].as_str().expect("the whole text");
    assert_eq!(text.len(), masked_big_text_len(BYTES));
    assert!(text.starts_with(first));
    assert!(text.ends_with(&format!("\nGW_BIG={MASK}")));
    assert!(!text.contains(SECRET));
    assert_eq!(
        contents[1],
        json!({"uri": "file:///big.bin", "mimeType": "application/octet-stream", "blob": big_blob(BLOB)})
    );

    // The gateway's own scheme is never a server's: not listed, never routed to one.
    let templates = client
        .list_all_resource_templates()
        .await
        .expect("resources/templates/list");
    assert!(templates.is_empty(), "{templates:?}");
    let unknown = read_resource(&client, "tether://results/0123")
        .await
        .expect_err("an unknown id");
    assert!(
        unknown.contains("no result tether://results/0123 in this session"),
        "{unknown}"
    );

    // A small result is untouched.
    let echoed = call(&client, "test__echo", json!({"text": "small"})).await;
    assert_eq!(
        echoed["content"],
        json!([{"type": "text", "text": "small"}])
    );
    let stderr = stderr_of(client, stderr).await;
    assert!(!stderr.contains(SECRET), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_cut_result_is_read_back_in_its_own_session_only() {
    const BYTES: usize = 10_000_000;
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let gateway = http_gateway_for(
        dir.path(),
        &["--big-tool"],
        &["--no-auth", "--max-result-tokens", "1000"],
    );
    let connect = || async {
        let transport =
            rmcp::transport::StreamableHttpClientTransport::from_uri(gateway.url.clone());
        let client: Client = ().serve(transport).await.expect("connecting over HTTP");
        client
    };
    let first = connect().await;
    let second = connect().await;
    let result = call(&first, "test__big", json!({"bytes": BYTES})).await;
    let counted = tether_gateway::budget::result_bytes(&result);
    assert!(counted <= 4000, "{counted}");
    let uri = link_of(&result);
    let contents = read_resource(&first, &uri)
        .await
        .expect("reading the whole");
    let text = contents[0]["text"].as_str().expect("text");
    assert_eq!(text.len(), BYTES);
    assert!(text.starts_with(result["content"][0]["text"].as_str().expect("first part")));

    // Another session is told what it is told of an id that never existed.
    let foreign = read_resource(&second, &uri)
        .await
        .expect_err("another session's");
    let never = format!(
        "{}{}",
        tether_gateway::budget::RESULTS_URI_PREFIX,
        "f".repeat(32)
    );
    let unknown = read_resource(&second, &never)
        .await
        .expect_err("an unknown id");
    assert_eq!(foreign.replace(&uri, "URI"), unknown.replace(&never, "URI"));
    first.cancel().await.expect("closing");
    second.cancel().await.expect("closing");
}

#[test]
fn a_budget_out_of_range_is_refused_in_one_line() {
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let spec = test_servers_spec(&[("test", &[])]);
    let refused = |args: &[&str]| refused_in(dir.path(), args);
    let stderr = refused(&["serve", "--mcp", &spec, "--max-result-tokens", "0"]);
    assert!(
        stderr.contains("0 is out of range: give a whole number of tokens from 256 to 100000000"),
        "{stderr}"
    );
    let stderr = refused(&[
        "run",
        "--mcp",
        &spec,
        "--harness",
        "claude",
        "--max-result-tokens",
        "1000",
        "--",
        "true",
    ]);
    assert!(stderr.contains("add --gateway"), "{stderr}");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("creating TETHER_HOME");
    std::fs::write(home.join("config.toml"), "max_result_tokens = 10\n").expect("writing config");
    let stderr = refused(&["serve", "--mcp", &spec]);
    assert!(
        stderr.contains("max_result_tokens in config.toml: 10 is out of range"),
        "{stderr}"
    );
}
