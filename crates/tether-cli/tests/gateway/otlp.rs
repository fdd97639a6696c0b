//! OpenTelemetry export: spans and metrics over OTLP/HTTP and OTLP/gRPC, never the secret, and
//! `[telemetry]` in config.toml.

use super::*;

/// With `OTEL_EXPORTER_OTLP_ENDPOINT` set, `tether serve` exports a span per client request
/// (method, tool, server, outcome, size) with a child span per upstream call, and its
/// metrics, over OTLP/HTTP, continuing the trace of the client's `_meta.traceparent`; the run's secret, sent as an argument and echoed in the result, is in no byte
/// the receiver gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_metrics_reach_an_otlp_receiver_without_the_secret() {
    let receiver = tether_testkit::otlp::OtlpReceiver::start()
        .await
        .expect("starting the OTLP receiver");
    exports_reach(receiver, "http/protobuf").await;
}

/// The same over OTLP/gRPC (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`), to a tonic collector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_metrics_reach_an_otlp_grpc_collector() {
    let receiver = tether_testkit::otlp::OtlpReceiver::start_grpc()
        .await
        .expect("starting the OTLP/gRPC receiver");
    exports_reach(receiver, "grpc").await;
}

async fn exports_reach(receiver: tether_testkit::otlp::OtlpReceiver, protocol: &str) {
    const SENTINEL: &str = "otel-sentinel-secret-4d7f1b";
    const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const CLIENT_SPAN: &str = "00f067aa0ba902b7";
    // A tool name a client made up (here the hex of some text): no server offers it, so it is
    // exported as `unknown`, never as sent.
    const MADE_UP: &str = "t_6f74656c2d73656e74696e656c2d6e616d65";
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    let config = format!(
        r#"{{"mcpServers": {{"test": {{"command": {test}, "env": {{"GW_TOKEN": "{{{{TOKEN}}}}"}}}}}}}}"#,
        test = json_str(&test_server_bin().to_string_lossy()),
    );
    let spec = dir.path().join("mcp.json");
    std::fs::write(&spec, config).expect("writing the spec");
    let spec_arg = spec.to_string_lossy().into_owned();
    let mut command = tether_command(
        dir.path(),
        &[
            "serve",
            "--mcp",
            &spec_arg,
            "--secret",
            "TOKEN=env:GW_SECRET",
        ],
    );
    command
        .env("GW_SECRET", SENTINEL)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        .env("OTEL_SERVICE_NAME", "tether-under-test")
        // Export each batch within 100 ms instead of 5 s, metrics every 100 ms instead of 60 s.
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "100");
    let transport = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .expect("starting tether serve")
        .0;
    let client: Client = tokio::time::timeout(Duration::from_secs(90), ().serve(transport))
        .await
        .expect("tether serve answered initialize in time")
        .expect("initializing through the gateway");
    // The client's W3C trace context, in `_meta` (2026-07-28's place for it).
    let mut params = CallToolRequestParams::new("test__echo").with_arguments(
        json!({"text": SENTINEL})
            .as_object()
            .cloned()
            .expect("an object"),
    );
    let mut meta = serde_json::Map::new();
    meta.insert(
        "traceparent".to_owned(),
        json!(format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")),
    );
    params.meta = Some(meta.into());
    let echoed = client.call_tool(params).await.expect("calling test__echo");
    let echoed = serde_json::to_value(echoed).expect("serializing a result");
    // The client sees the secret masked; the export must not hold it either.
    assert!(!echoed.to_string().contains(SENTINEL), "{echoed}");
    client.list_all_tools().await.expect("tools/list");
    let made_up = client
        .call_tool(CallToolRequestParams::new(MADE_UP))
        .await
        .expect("a tool error, not a failed request");
    assert_eq!(made_up.is_error, Some(true), "{made_up:?}");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (request, upstream) = loop {
        let spans = receiver.spans();
        let unknown = spans.iter().any(|s| {
            s.name == "tools/call"
                && s.attributes.get("mcp.tool").map(String::as_str) == Some("unknown")
        });
        let request = spans.iter().find(|s| {
            s.name == "tools/call"
                && s.attributes.get("mcp.tool").map(String::as_str) == Some("test__echo")
        });
        let upstream = spans.iter().find(|s| s.name == "tools/call test");
        let listed = spans.iter().any(|s| s.name == "tools/list");
        if let (Some(request), Some(upstream), true, true) = (request, upstream, listed, unknown) {
            break (request.clone(), upstream.clone());
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the spans did not arrive within 30 s: {spans:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The metrics of the same call: counted per tool and outcome, the upstream call timed per
    // server, the server ready, its tools offered.
    let wanted =
        |point: &tether_testkit::otlp::ReceivedPoint, name: &str, pairs: &[(&str, &str)]| {
            point.name == name
                && pairs
                    .iter()
                    .all(|(k, v)| point.attributes.get(*k).map(String::as_str) == Some(*v))
        };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let points = receiver.points();
        let found = |name: &str, pairs: &[(&str, &str)], least: f64| {
            points
                .iter()
                .rev()
                .find(|p| wanted(p, name, pairs))
                .is_some_and(|p| p.value >= least)
        };
        let call = [
            ("mcp.method", "tools/call"),
            ("mcp.tool", "test__echo"),
            ("mcp.outcome", "ok"),
        ];
        let unknown = [
            ("mcp.method", "tools/call"),
            ("mcp.tool", "unknown"),
            ("mcp.outcome", "tool_error"),
        ];
        if found("tether.gateway.requests", &call, 1.0)
            && found("tether.gateway.requests", &unknown, 1.0)
            && found("tether.gateway.request.duration", &call, 1.0)
            && found(
                "tether.gateway.upstream.duration",
                &[
                    ("mcp.server", "test"),
                    ("mcp.method", "tools/call"),
                    ("mcp.outcome", "ok"),
                ],
                1.0,
            )
            && found(
                "tether.gateway.requests",
                &[("mcp.method", "tools/list")],
                1.0,
            )
            && found("tether.gateway.servers", &[("state", "ready")], 1.0)
            && found("tether.gateway.tools", &[("state", "offered")], 3.0)
        {
            let ready = points
                .iter()
                .rev()
                .find(|p| wanted(p, "tether.gateway.servers", &[("state", "failed")]));
            assert_eq!(ready.map(|p| p.value), Some(0.0), "{points:?}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the metrics did not arrive within 30 s: {points:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    client.cancel().await.expect("closing the client");
    assert_eq!(request.service_name, "tether-under-test");
    let attribute = |span: &tether_testkit::otlp::ReceivedSpan, key: &str| {
        span.attributes.get(key).cloned().unwrap_or_default()
    };
    assert_eq!(attribute(&request, "mcp.method"), "tools/call");
    assert_eq!(attribute(&request, "mcp.server"), "test", "{request:?}");
    assert_eq!(attribute(&request, "mcp.outcome"), "ok", "{request:?}");
    assert!(
        attribute(&request, "mcp.response.bytes")
            .parse::<u64>()
            .is_ok_and(|bytes| bytes > 0),
        "{request:?}"
    );
    assert_eq!(attribute(&upstream, "mcp.server"), "test");
    // The request continues the client's trace, under the client's span.
    assert_eq!(request.trace_id, CLIENT_TRACE);
    assert_eq!(request.parent_span_id, CLIENT_SPAN);
    assert_eq!(upstream.trace_id, request.trace_id);
    assert_eq!(upstream.parent_span_id, request.span_id);
    let raw = receiver.raw();
    assert!(!raw.is_empty());
    assert!(
        !raw.windows(SENTINEL.len())
            .any(|w| w == SENTINEL.as_bytes()),
        "the secret reached the OTLP receiver"
    );
    assert!(
        !raw.windows(MADE_UP.len()).any(|w| w == MADE_UP.as_bytes()),
        "a tool name the client made up reached the OTLP receiver"
    );
}

/// `[telemetry]` in config.toml turns export on without the variables (endpoint, protocol,
/// service name; `metrics = false` keeps metrics off), and a variable that is set wins over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_telemetry_section_of_config_toml_turns_export_on_and_the_variables_win() {
    let receiver = tether_testkit::otlp::OtlpReceiver::start_grpc()
        .await
        .expect("starting the OTLP/gRPC receiver");
    let dir = tempfile::tempdir().expect("creating a temporary directory");
    std::fs::create_dir_all(dir.path().join("home")).expect("TETHER_HOME");
    std::fs::write(
        dir.path().join("home/config.toml"),
        format!(
            "[telemetry]\nendpoint = \"{}\"\nprotocol = \"grpc\"\nservice_name = \"from-config\"\nmetrics = false\n",
            receiver.endpoint
        ),
    )
    .expect("writing config.toml");
    let spec = test_spec();
    for (variable, service) in [
        (None, "from-config"),
        (Some("from-variable"), "from-variable"),
    ] {
        let mut command = tether_command(dir.path(), &["serve", "--mcp", &spec]);
        command.env("OTEL_BSP_SCHEDULE_DELAY", "100");
        if let Some(name) = variable {
            command.env("OTEL_SERVICE_NAME", name);
        }
        let transport = TokioChildProcess::builder(command)
            .stderr(Stdio::null())
            .spawn()
            .expect("starting tether serve")
            .0;
        let client: Client = ().serve(transport).await.expect("initializing");
        client.list_all_tools().await.expect("tools/list");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !receiver
            .spans()
            .iter()
            .any(|s| s.name == "tools/list" && s.service_name == service)
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no tools/list span of {service} within 30 s: {:?}",
                receiver.spans()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        client.cancel().await.expect("closing the client");
    }
    assert!(receiver.points().is_empty(), "metrics = false");
}
