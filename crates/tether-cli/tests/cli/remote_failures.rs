//! An HTTP/SSE server that cannot be reached is reported in one line: the
//! (masked) URL, the cause in words, what to try; no Rust type names, no HTML page, and no
//! separate `worker quit…` dump from rmcp at the default log level.

use std::io::{Read, Write};
use std::net::TcpListener;

use crate::support::{Sandbox, text};

/// A loopback server that answers `count` requests with `status` and `body`, then stops.
fn answering(
    count: usize,
    status: &'static str,
    content_type: &'static str,
    body: &'static str,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
    let address = listener.local_addr().expect("the bound address");
    std::thread::spawn(move || {
        for stream in listener.incoming().take(count) {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0_u8; 4096];
            let _ = stream.read(&mut request);
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{address}")
}

/// The `failed` report line for server `name` in `tether test`'s output.
fn failed_line<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find(|line| line.starts_with("failed") && line.contains(name))
        .unwrap_or_else(|| panic!("no failed line for {name}:\n{stdout}"))
}

#[test]
fn each_failure_is_one_line_with_cause_and_hint() {
    let sandbox = Sandbox::new();
    let html = answering(
        4,
        "404 Not Found",
        "text/html",
        "<!DOCTYPE html>\n<html><body><h1>Not Found</h1><p>page</p></body></html>\n",
    );
    let plain = answering(
        4,
        "404 Not Found",
        "text/plain",
        "Cannot POST /mcp\nsecond-line-of-the-body\n",
    );
    let spec = format!(
        r#"{{"refused":{{"url":"http://127.0.0.1:9/mcp?key={{{{TOK}}}}"}},
            "html":{{"url":"{html}/mcp"}},
            "plain":{{"url":"{plain}/mcp"}},
            "sse404":{{"url":"{html}/sse","type":"sse"}},
            "nohost":{{"url":"http://no-such-host.invalid/mcp"}}}}"#
    );
    let out = sandbox
        .tether(&[
            "test",
            "--timeout",
            "10",
            "--mcp",
            &spec,
            "--secret",
            "TOK=env:TETHER_TEST_TOK",
        ])
        .env("TETHER_TEST_TOK", "sk-REMOTE-FAILURE-SENTINEL")
        .output()
        .expect("running tether test");
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");

    let refused = failed_line(&stdout, "refused");
    assert!(
        refused.contains("cannot reach http://127.0.0.1:9/mcp?key=********"),
        "{refused}"
    );
    assert!(
        refused.contains("connection refused; is the server running"),
        "{refused}"
    );

    let html_line = failed_line(&stdout, "html");
    assert!(
        html_line.contains("HTTP 404 Not Found; the URL does not serve Streamable HTTP MCP"),
        "{html_line}"
    );
    assert!(
        failed_line(&stdout, "plain").contains("HTTP 404 Not Found (Cannot POST /mcp)"),
        "{stdout}"
    );
    assert!(
        failed_line(&stdout, "sse404").contains("does not serve an SSE MCP endpoint"),
        "{stdout}"
    );
    assert!(
        failed_line(&stdout, "nohost").contains("the host name could not be resolved"),
        "{stdout}"
    );

    for shown in [&stdout, &stderr] {
        for absent in [
            "<html",
            "<!DOCTYPE",
            "rmcp::",
            "reqwest::",
            "worker quit",
            "SENTINEL",
            "second-line-of-the-body",
        ] {
            assert!(!shown.contains(absent), "{absent:?} shown:\n{shown}");
        }
    }
}
