//! `tether call`: call one tool on one server.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::cli::CallArgs;
use crate::exit::{FAILED, OK, Reported, UsageError};
use crate::output::{Progress, print, print_json};

pub async fn call(args: &CallArgs) -> anyhow::Result<u8> {
    let arguments: Option<Map<String, Value>> = match args.args.as_deref().map(serde_json::from_str)
    {
        None => None,
        Some(Ok(Value::Object(map))) => Some(map),
        Some(Ok(_)) => Err(UsageError::new(
            "--args must be a JSON object, e.g. '{\"text\":\"hi\"}'",
        ))?,
        Some(Err(e)) => Err(UsageError::new(format!("--args is not JSON ({e})")))?,
    };
    let progress = Progress::new();
    let session = super::session(&args.specs, &args.secrets, &progress).await?;
    super::require_servers(&session)?;
    let mut options = super::start_options(args.timeout, false, &args.sandbox)?;
    if args.accept_elicitation_defaults {
        options.client_requests = Some(tether_driver::elicitation::defaults_answerer());
        options.declared = Some(tether_driver::elicitation::form_elicitation());
    }
    super::announce_sandbox("call", &session, &options);
    progress.step("starting 1 MCP server…");
    let started = super::until_signal(session.start_server(&args.server, &options)).await??;
    let runtime = started.inspect_err(|_| progress.finish())?;
    progress.step(&format!("calling {} on {}…", args.tool, args.server));
    let result = session
        .call_declaring(
            &runtime,
            &args.server,
            &args.tool,
            arguments,
            Duration::from_secs(args.timeout.max(1)),
            args.as_task,
        )
        .await;
    runtime.shutdown().await;
    progress.finish();
    let result = result?;
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut text = String::new();
    for item in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match item.get("text").and_then(Value::as_str) {
            Some(t) => text.push_str(t),
            None => text.push_str(&item.to_string()),
        }
        text.push('\n');
    }
    if args.json {
        print_json(&result);
    } else {
        if let Some(structured) = result.get("structuredContent").filter(|_| text.is_empty()) {
            text = serde_json::to_string_pretty(structured).unwrap_or_default() + "\n";
        }
        // The result is masked already (the driver masks every answer, as `serve` does);
        // a tool's text may still hold terminal control sequences.
        print(&tether_config::escape_controls(&text));
    }
    if is_error {
        eprintln!("error: the tool '{}' reported an error", args.tool);
        // A sandboxed server's error may be a denial: name the profile line that allows it.
        let server = session.server(&args.server).ok();
        if let Some(why) = server.and_then(|server| options.explain_denial(server, &text)) {
            tether_log::eprintln_masked!("tether call: {}", tether_config::escape_controls(&why));
        }
        return Err(Reported(FAILED).into());
    }
    Ok(OK)
}
