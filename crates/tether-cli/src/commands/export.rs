//! `tether export`: the rendered config in a harness's own format.
//!
//! To VS Code, the `${input:ID}` references of the user's configs stay references and their
//! `inputs` entries are written back (VS Code prompts for the values); no value is read for
//! them.

use anyhow::Context as _;
use tether_config::{Exposure, RenderedServer, SecretSource};
use tether_harness::ServersConfig;

use crate::cli::ExportArgs;
use crate::exit::{OK, UsageError};
use crate::output::{Progress, print};

pub async fn export(args: &ExportArgs) -> anyhow::Result<u8> {
    if let Some(path) = &args.output {
        // Before anything is resolved (a managed config may be minted for nothing otherwise).
        tether_fs::check_target(path).map_err(refused)?;
    }
    if args.gateway {
        return export_gateway(args);
    }
    let progress = Progress::new();
    let (session, inputs) = if args.format.harness().input_prompts {
        super::session_keeping_inputs(&args.specs, &args.secrets, &progress).await?
    } else {
        (
            super::session(&args.specs, &args.secrets, &progress).await?,
            super::KeptInputs::default(),
        )
    };
    progress.finish();
    super::warn_if_no_servers(&session);
    let mut servers = session.servers().to_vec();
    for server in &mut servers {
        server.declassify(&inputs.references);
    }
    let servers = servers.as_slice();
    let export = |exposure| -> anyhow::Result<ServersConfig> {
        let mut config = tether_harness::export_config(servers, args.format, exposure)?;
        config.set_inputs(&inputs.prompts);
        Ok(config)
    };
    match &args.output {
        Some(path) => {
            let config = export(Exposure::Real)?;
            print_notes(config.notes());
            write_private(path, &config.to_text())?;
            eprintln!(
                "wrote {} ({}, mode 0600, real values)",
                path.display(),
                count(servers.len(), "server", "servers")
            );
        }
        None => {
            let exposure = if args.show_secrets {
                Exposure::Real
            } else {
                Exposure::Masked
            };
            let config = export(exposure)?;
            print_notes(config.notes());
            print(&config.to_text());
            if config.masked() > 0 {
                eprintln!(
                    "note: {} masked as ******** (from secrets, the environment, a managed server, credential-named fields or URL passwords); for the real values write a 0600 file with -o FILE, or print them with --show-secrets",
                    count(config.masked(), "value", "values")
                );
            }
        }
    }
    Ok(OK)
}

/// `--gateway`: one stdio server, `tether serve --mcp … --secret NAME=SOURCE …`, built from the
/// flags alone. What it holds is what the user typed: spec references and secret sources, never
/// a value — so an inline JSON spec (which may hold a credential, and would sit on a command
/// line) and sources a harness cannot answer (`-`, `prompt`) are refused.
fn export_gateway(args: &ExportArgs) -> anyhow::Result<u8> {
    // The harness starts the gateway in a directory of its own choosing.
    let absolute = |path: &str| -> String {
        std::fs::canonicalize(path)
            .map_or_else(|_| path.to_owned(), |p| p.to_string_lossy().into_owned())
    };
    let mut serve: Vec<String> = vec!["serve".to_owned()];
    for (index, value) in args.specs.mcp.iter().enumerate() {
        if value.trim_start().starts_with(['{', '"', '[']) {
            return Err(UsageError::new(format!(
                "--gateway: --mcp value #{} is inline JSON, which would sit on the harness's command line; write it to a file and pass the path",
                index + 1
            ))
            .into());
        }
        serve.extend(["--mcp".to_owned(), absolute(value)]);
    }
    if let Some(task) = &args.specs.task {
        serve.extend(["--task".to_owned(), absolute(&task.to_string_lossy())]);
    }
    if args.specs.mcp.is_empty() && args.specs.task.is_none() {
        return Err(UsageError::new("no MCP spec given: pass --mcp SPEC or --task FILE").into());
    }
    if let Some(url) = &args.specs.server_url {
        serve.extend(["--server-url".to_owned(), url.clone()]);
    }
    for name in &args.specs.pass_env {
        serve.extend(["--pass-env".to_owned(), name.clone()]);
    }
    for arg in tether_config::parse_secret_args(&args.secrets.secret)
        .map_err(|e| UsageError::new(e.to_string()))?
    {
        let source = match &arg.source {
            SecretSource::Env(var) => format!("env:{var}"),
            SecretSource::File(path) => format!("file:{}", absolute(path)),
            SecretSource::Command(words) => SecretSource::command_source(words)
                .ok_or_else(|| UsageError::new(format!("secret {}: cmd: holds a NUL", arg.name)))?,
            SecretSource::Stdin | SecretSource::Prompt => {
                return Err(UsageError::new(format!(
                    "--gateway: secret {}: a harness starts the gateway without a terminal or stdin to read it from; use env:VAR or file:PATH",
                    arg.name
                ))
                .into());
            }
        };
        serve.extend(["--secret".to_owned(), format!("{}={source}", arg.name)]);
    }
    for file in &args.secrets.secrets_file {
        serve.extend([
            "--secrets-file".to_owned(),
            absolute(&file.to_string_lossy()),
        ]);
    }
    let program = std::env::current_exe().context("cannot locate tether's executable")?;
    let serve: Vec<&str> = serve.iter().map(String::as_str).collect();
    let entry = RenderedServer::plain_stdio(
        super::gateway::GATEWAY_NAME,
        &program.to_string_lossy(),
        &serve,
    );
    let config =
        tether_harness::export_config(std::slice::from_ref(&entry), args.format, Exposure::Real)?;
    print_notes(config.notes());
    match &args.output {
        Some(path) => {
            write_private(path, &config.to_text())?;
            eprintln!("wrote {} (1 server: the tether gateway)", path.display());
        }
        None => print(&config.to_text()),
    }
    Ok(OK)
}

/// Writes `text` to `path` as a new 0600 file that replaces `path` in one rename (a symbolic
/// link or a non-regular file is refused: tether never writes real values through a link, nor
/// changes the mode of a file it did not create).
fn write_private(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    tether_fs::write_private(path, text.as_bytes()).map_err(refused)
}

/// A refused target as a usage error (exit 2) in `export`'s words; a failed write as it is.
fn refused(error: tether_fs::WriteError) -> anyhow::Error {
    match error {
        tether_fs::WriteError::Link { path } => UsageError::new(format!(
            "{} is a symbolic link; tether writes real secret values only to a regular file it \
             replaces itself: name the link's target, or a new file",
            path.display()
        ))
        .into(),
        tether_fs::WriteError::NotRegular { .. } => UsageError::new(error.to_string()).into(),
        tether_fs::WriteError::Io { .. } => error.into(),
    }
}

/// `1 server`, `2 servers`.
fn count(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// What the format cannot express, on stderr (names only, never values).
fn print_notes(notes: &[String]) {
    for note in notes {
        eprintln!("note: {note}");
    }
}
