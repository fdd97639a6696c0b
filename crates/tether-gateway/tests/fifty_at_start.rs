//! Fifty real servers starting at once (the workspace's test server, each with a tool of its
//! own): `tether__find_tools` asked the moment the client connected answers with the same top
//! three as the same questions asked once every server has joined.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

mod support;

use std::time::Duration;

use serde_json::json;
use tether_driver::StartOptions;
use tether_gateway::Gateway;
use tether_gateway::tool_search::{ToolMode, ToolSearch};
use tether_testkit::ManualClock;
use tether_testkit::mcp_client::{answer_of, spawn_call};

const LIMIT: Duration = Duration::from_secs(60);

/// What each server's own tool does: fifty jobs told apart by their words.
const JOBS: [&str; 50] = [
    "Resize a photograph to the given width",
    "Translate a paragraph into French",
    "Convert degrees Celsius to Fahrenheit",
    "Count the words in a document",
    "Compress a folder into a zip archive",
    "Look up the weather forecast for a city",
    "Send an email to a colleague",
    "Create a calendar meeting invitation",
    "Search flight tickets between two airports",
    "Book a table at a restaurant",
    "Transcribe an audio recording to text",
    "Generate a QR code for a link",
    "Check the spelling of an essay",
    "Compute the checksum of a file",
    "List the open pull requests of a repository",
    "Restart a crashed web service",
    "Scale a Kubernetes deployment",
    "Query rows from a Postgres table",
    "Upload an image to cloud storage",
    "Rotate an API credential",
    "Summarize a long meeting transcript",
    "Detect the language of a sentence",
    "Validate a JSON document against a schema",
    "Format a SQL query nicely",
    "Estimate the shipping cost of a parcel",
    "Track a package by its number",
    "Convert a currency amount to euros",
    "Fetch the latest stock price",
    "Play a song on the speaker",
    "Dim the living room lights",
    "Lock the front door of the house",
    "Order groceries for delivery",
    "Find a recipe using chickpeas",
    "Count calories in a meal",
    "Measure the download speed of the network",
    "Ping a remote host",
    "Resolve a domain name to an address",
    "Renew a TLS certificate",
    "Archive old log files",
    "Tail the error log of a service",
    "Open a support ticket",
    "Close a resolved incident",
    "Assign a bug to a developer",
    "Merge two spreadsheets",
    "Draw a bar chart from numbers",
    "Crop a video clip",
    "Extract text from a scanned PDF",
    "Sign a document electronically",
    "Schedule a tweet for tomorrow",
    "Reserve a meeting room",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_servers_a_search_at_start_answers_as_one_once_all_joined() {
    let program = tether_testkit::test_server_bin()
        .to_string_lossy()
        .into_owned();
    let names_of: Vec<String> = (0..JOBS.len()).map(|i| format!("s{i:02}")).collect();
    let args: Vec<[&str; 2]> = JOBS.iter().map(|job| ["--extra-tool", *job]).collect();
    let servers: Vec<(&str, &str, &[&str])> = names_of
        .iter()
        .zip(&args)
        .map(|(name, args)| (name.as_str(), program.as_str(), &args[..]))
        .collect();
    let session = support::session_of_servers(&servers, ManualClock::new()).await;
    let mut options = support::gateway_options(StartOptions::default(), None);
    options.tool_search = ToolSearch {
        mode: ToolMode::Search,
        ..ToolSearch::default()
    };
    let gateway = Gateway::start(session, options);
    let (client, serving) = support::serve_client(&gateway, ()).await;
    let questions = [
        "make my picture smaller",
        "how many words are in this text",
        "what will the weather be like in Paris",
        "show the newest errors a service logged",
        "put this video through a trim",
    ];
    // The moment the client is connected: the servers are still starting.
    let at_start: Vec<_> = questions
        .iter()
        .map(|q| {
            spawn_call(
                &client,
                "tether__find_tools",
                json!({"query": q, "limit": 3}),
            )
        })
        .collect();
    let mut first = Vec::new();
    for call in at_start {
        let answer = answer_of(call, LIMIT).await;
        first.push(support::found_names(
            &answer.structured_content.expect("structured content"),
        ));
    }
    assert!(gateway.ready_within(LIMIT).await, "every server joins");
    for (question, early) in questions.iter().zip(&first) {
        let later = spawn_call(
            &client,
            "tether__find_tools",
            json!({"query": question, "limit": 3}),
        );
        let later = support::found_names(
            &answer_of(later, LIMIT)
                .await
                .structured_content
                .expect("structured content"),
        );
        assert_eq!(early, &later, "{question}");
        assert!(!early.is_empty(), "{question}: nothing found");
    }
    client.cancel().await.expect("closing the client");
    let _ = serving.await;
    gateway.shutdown().await;
}
