//! `tether`: resolve MCP servers for agent runs. This binary holds only the command line and
//! glue; the work is in the library crates (`tether-driver` and below).

mod cli;
mod commands;
mod exit;
mod handoff;
mod output;
mod secrets;
mod settings;
mod shorthand;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use tracing_subscriber::EnvFilter;

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
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let code = match run(&cli) {
        Ok(code) => code,
        Err(err) => {
            if err.downcast_ref::<exit::Reported>().is_none() {
                tether_log::eprintln_masked!("error: {err}");
                for cause in err.chain().skip(1) {
                    tether_log::eprintln_masked!("  caused by: {cause}");
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
    ExitCode::from(code)
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

fn init_logging(verbose: u8) {
    let default = match verbose {
        // rmcp logs each transport failure itself (`worker quit with fatal: …`, with Rust type
        // names); tether reports the same failure in one line, so rmcp speaks from -v on.
        0 => "warn,rmcp=off",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_env(tether_env::EnvVars::RUST_LOG)
        .unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(tether_log::MaskedStderr)
        .with_ansi(
            std::env::var_os(tether_env::EnvVars::NO_COLOR).is_none()
                && std::io::IsTerminal::is_terminal(&std::io::stderr()),
        )
        .with_target(false)
        .init();
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
