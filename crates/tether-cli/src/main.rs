//! `tether`: resolve MCP servers for agent runs. This binary holds only the command line and
//! glue; the work is in the library crates (`tether-driver` and below).

mod cli;
mod commands;
mod exit;
mod handoff;
mod output;
mod secrets;
mod settings;
mod typed;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command};

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(rest) = internal_subcommand(&argv, tether_driver::supervisor::SUBCOMMAND) {
        return ExitCode::from(tether_driver::supervisor::main(rest));
    }
    if let Some(rest) = internal_subcommand(&argv, tether_handoff::exec_shim::SUBCOMMAND) {
        return ExitCode::from(tether_handoff::exec_shim::main(rest));
    }
    if let Some(rest) = internal_subcommand(&argv, tether_handoff::gateway_relay::SUBCOMMAND) {
        return ExitCode::from(tether_handoff::gateway_relay::main(rest));
    }
    // Every process tether starts goes through tether itself as its supervisor, so that none
    // outlives this one.
    if let Ok(exe) = std::env::current_exe() {
        tether_driver::supervisor::install(exe);
    }
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|error| suggest_flag(error, &argv).exit());
    let telemetry = init_logging(cli.verbose);
    let code = match run(&cli) {
        Ok(code) => code,
        Err(err) => {
            if err.downcast_ref::<exit::Reported>().is_none() {
                // A cause whose text the lines above already hold (an error that prints its
                // source in its own message) is not printed again.
                let mut printed = err.to_string();
                tether_log::eprintln_masked!("error: {printed}");
                for cause in err.chain().skip(1) {
                    let text = cause.to_string();
                    if !printed.contains(&text) {
                        tether_log::eprintln_masked!("  caused by: {text}");
                        printed.push_str(&text);
                    }
                }
                if err.chain().any(|c| {
                    matches!(
                        c.downcast_ref(),
                        Some(tether_driver::DriverError::ServerNotFound(_))
                    )
                }) {
                    eprintln!("hint: {}", settings::configure_hint());
                }
            }
            exit::code(&err)
        }
    };
    drop(telemetry);
    ExitCode::from(code)
}

/// A clap error for an unknown `--flag` with the command's nearest long flag suggested when
/// clap found none: clap's own similarity measure misses swapped letters in short names
/// (`--mpc` for `--mcp`). With a suggestion, clap's tip to pass the flag after `--` as the
/// harness's argument is dropped: the typo is the likelier reading.
fn suggest_flag(mut error: clap::Error, argv: &[std::ffi::OsString]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() != ErrorKind::UnknownArgument || error.get(ContextKind::SuggestedArg).is_some()
    {
        return error;
    }
    let Some(ContextValue::String(invalid)) = error.get(ContextKind::InvalidArg) else {
        return error;
    };
    let Some(typed) = invalid.strip_prefix("--") else {
        return error;
    };
    let typed = typed.split('=').next().unwrap_or_default().to_owned();
    // The subcommand the flag was given to: follow argv down the command tree.
    let mut command = Cli::command();
    for arg in argv.iter().skip(1) {
        let Some(arg) = arg.to_str() else { break };
        if arg == "--" {
            break;
        }
        match command.find_subcommand(arg) {
            Some(sub) => command = sub.clone(),
            None => continue,
        }
    }
    let longs: Vec<String> = command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set())
        .filter_map(|arg| arg.get_long().map(str::to_owned))
        .chain(["verbose".to_owned(), "help".to_owned()])
        .collect();
    if let Some(near) = typed::closest(&typed, longs.iter().map(String::as_str)) {
        error.insert(
            ContextKind::SuggestedArg,
            ContextValue::String(format!("--{near}")),
        );
        error.insert(ContextKind::Suggested, ContextValue::StyledStrs(Vec::new()));
    }
    error
}

/// The arguments after `argv[1]` when `argv[1]` is the hidden internal subcommand `name`
/// (never shown in help: tether runs it for itself).
fn internal_subcommand<'a>(
    argv: &'a [std::ffi::OsString],
    name: &str,
) -> Option<&'a [std::ffi::OsString]> {
    match argv {
        [_, first, rest @ ..] if first == name => Some(rest),
        _ => None,
    }
}

/// Logging to stderr, and trace export when `OTEL_*` asks for it (kept until exit).
fn init_logging(verbose: u8) -> Option<tether_log::telemetry::Telemetry> {
    let default = match verbose {
        // rmcp logs each transport failure itself (`worker quit with fatal: …`, with Rust type
        // names); tether reports the same failure in one line, so rmcp speaks from -v on.
        // The gateway's servers joining (pending, ready) are said at info.
        0 => "warn,rmcp=off,tether_gateway::supervise=info",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let ansi = std::env::var_os(tether_env::EnvVars::NO_COLOR).is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    tether_log::telemetry::configure(settings::telemetry());
    tether_log::init(default, true, ansi)
}

fn run(cli: &Cli) -> anyhow::Result<u8> {
    match &cli.command {
        Command::Install(args) => commands::install(args),
        Command::List(args) => commands::list(args),
        Command::Remove(args) => commands::remove(args),
        Command::Secrets(args) => commands::secrets(args),
        Command::Audit(command) => commands::audit(command),
        Command::Completions(args) => {
            clap_complete::generate(
                args.shell,
                &mut Cli::command(),
                "tether",
                &mut std::io::stdout(),
            );
            Ok(exit::OK)
        }
        command => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            runtime.block_on(async {
                match command {
                    Command::Run(args) => commands::run(args).await,
                    Command::Export(args) => commands::export(args).await,
                    Command::Test(args) => commands::test(args).await,
                    Command::Call(args) => commands::call(args).await,
                    Command::Search(args) => commands::search(args).await,
                    Command::Show(args) => commands::show(args).await,
                    Command::Add(args) => commands::add(args).await,
                    Command::SetupMcp(args) => commands::setup_mcp(args).await,
                    Command::Auth(args) => commands::auth(args).await,
                    Command::Serve(args) => commands::serve(args).await,
                    Command::Trust(args) => commands::trust(args).await,
                    Command::Install(_)
                    | Command::List(_)
                    | Command::Remove(_)
                    | Command::Secrets(_)
                    | Command::Audit(_)
                    | Command::Completions(_) => Ok(exit::OK),
                }
            })
        }
    }
}
