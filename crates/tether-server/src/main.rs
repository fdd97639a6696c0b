//! `tether-server`: the reference managed MCP server (`serve`) and its admin CLI (`admin`).
//!
//! Exit codes: 0 success, 1 failure (the message is on stderr), 2 invalid usage.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tether_env::EnvVars;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use tether_config::{SecretValue, Secrets};
use tether_server::{
    BoundServer, DEFAULT_TEAM, NewInstallation, ServeOptions, Store, crypto, master_key_from_env,
    validate_team,
};
use uuid::Uuid;
use zeroize::Zeroizing;

/// The reference managed MCP server: hands a team's members managed MCP servers without
/// handing them upstream credentials.
#[derive(Debug, Parser)]
#[command(name = "tether-server", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the GraphQL API (POST /graphql) and the MCP proxy (/mcp-proxy/{uid}).
    Serve(ServeArgs),
    /// Manage installations and API keys in a data directory.
    Admin(AdminArgs),
    /// Print the GraphQL schema (SDL) this server serves.
    Schema,
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Address to listen on; port 0 picks a free port. The bound address is printed as
    /// `listening on http://ADDRESS` on stdout.
    #[arg(long, value_name = "ADDRESS", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Directory of the database (created 0700).
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// Base URL clients reach this server at, for proxy URLs (default: http://<listen address>).
    #[arg(long, value_name = "URL")]
    public_url: Option<String>,
    /// Lifetime of minted proxy tokens, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
    proxy_token_ttl: u64,
    /// Use a fixed, publicly known key instead of TETHER_SERVER_KEY. Throwaway setups only:
    /// anyone can decrypt what it protects.
    #[arg(long)]
    insecure_dev_key: bool,
}

#[derive(Debug, clap::Args)]
struct AdminArgs {
    /// Directory of the database (created 0700).
    #[arg(long, value_name = "DIR")]
    data_dir: PathBuf,
    /// Use the insecure development key (as `serve --insecure-dev-key`); needed by `add` when
    /// TETHER_SERVER_KEY is not set.
    #[arg(long)]
    insecure_dev_key: bool,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Debug, Subcommand)]
enum AdminCommand {
    /// Add an installation; prints its uid.
    Add {
        /// The installation's name (the server's name in the configs clients get).
        name: String,
        /// One server in tether's config format: a path to a JSON file, or inline JSON.
        #[arg(long, value_name = "SPEC")]
        from: String,
        /// A server-held secret: NAME=env:VAR, NAME=file:PATH or NAME=- (one line of stdin).
        /// Literal values are refused: the command line is visible in `ps`.
        #[arg(long = "secret", value_name = "NAME=SOURCE")]
        secrets: Vec<String>,
        /// The team whose API keys may use it.
        #[arg(long, default_value = DEFAULT_TEAM)]
        team: String,
    },
    /// List installations (uid, name, kind, team, active); never values.
    List,
    /// Deactivate an installation: clients get ManagedMcpInactiveError, its proxy 403.
    Deactivate {
        /// The installation's uid.
        uid: Uuid,
    },
    /// Manage client API keys.
    #[command(subcommand)]
    ApiKey(ApiKeyCommand),
}

#[derive(Debug, Subcommand)]
enum ApiKeyCommand {
    /// Create an API key for a team; prints it once (only its hash is stored).
    Create {
        /// The team the key belongs to.
        #[arg(long, default_value = DEFAULT_TEAM)]
        team: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("tether-server: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve(args) => {
            init_logging("info");
            serve(args)
        }
        Command::Admin(args) => {
            init_logging("warn");
            admin(args)
        }
        Command::Schema => {
            print!("{}", tether_server::sdl());
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env(EnvVars::TETHER_SERVER_LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let ServeArgs {
        listen,
        data_dir,
        public_url,
        proxy_token_ttl,
        insecure_dev_key,
    } = args;
    let key = master_key_from_env(insecure_dev_key)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the async runtime")?;
    runtime.block_on(async move {
        let server = BoundServer::bind(ServeOptions {
            listen,
            data_dir: data_dir.clone(),
            public_url,
            proxy_token_ttl: Duration::from_secs(proxy_token_ttl),
            key,
        })
        .await
        .with_context(|| format!("starting with data directory {}", data_dir.display()))?;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on http://{}", server.local_addr())
            .and_then(|()| stdout.flush())
            .context("writing the listening line")?;
        drop(stdout);
        tracing::info!(
            address = %server.local_addr(),
            public_base = %server.public_base(),
            proxy_token_ttl_secs = proxy_token_ttl,
            "serving"
        );
        server.run(shutdown_signal()).await?;
        Ok(ExitCode::SUCCESS)
    })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
                _ = terminate.recv() => tracing::info!("SIGTERM received"),
            }
        }
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the server");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn admin(args: AdminArgs) -> anyhow::Result<ExitCode> {
    let AdminArgs {
        data_dir,
        insecure_dev_key,
        command,
    } = args;
    let open = || {
        Store::open(&data_dir)
            .with_context(|| format!("opening the data directory {}", data_dir.display()))
    };
    match command {
        AdminCommand::Add {
            name,
            from,
            secrets,
            team,
        } => {
            // Validate everything before reading secrets or touching the store.
            validate_team(&team)?;
            let spec = read_spec(&from)?;
            let secrets = read_secrets(&secrets)?;
            let key = master_key_from_env(insecure_dev_key)?;
            let new = NewInstallation::from_spec(&name, &team, &spec, secrets)
                .with_context(|| format!("adding installation '{name}'"))?;
            let store = open()?;
            store.verify_key(&key)?;
            store
                .insert_installation(&new.seal(&key)?)
                .with_context(|| format!("storing installation {}", new.uid))?;
            println!("{}", new.uid);
        }
        AdminCommand::List => {
            let installations = open()?.list_installations()?;
            let rows: Vec<[String; 5]> = installations
                .into_iter()
                .map(|i| {
                    [
                        i.uid.to_string(),
                        i.name,
                        i.kind.as_str().to_owned(),
                        i.team,
                        if i.active { "yes" } else { "no" }.to_owned(),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(["UID", "NAME", "KIND", "TEAM", "ACTIVE"], &rows)
            );
        }
        AdminCommand::Deactivate { uid } => {
            open()?
                .set_active(uid, false)
                .with_context(|| format!("deactivating {uid}"))?;
            println!("deactivated {uid}");
        }
        AdminCommand::ApiKey(ApiKeyCommand::Create { team }) => {
            validate_team(&team)?;
            let store = open()?;
            let key = crypto::new_api_key()?;
            store.insert_api_key(&crypto::token_hash(&key), &team)?;
            println!("{}", key.as_str());
            eprintln!("API key for team '{team}' created; it is shown only once");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Aligned columns, header first, two spaces apart.
fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let text: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(text.join("  ").trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// `--from`: inline JSON (starts with `{` or `"`), else a file's contents.
fn read_spec(from: &str) -> anyhow::Result<String> {
    let trimmed = from.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('"') {
        return Ok(from.to_owned());
    }
    let path = Path::new(from);
    if !path.is_file() {
        bail!(
            "--from: not inline JSON (it does not start with '{{') and not a file ({} bytes given)",
            from.len()
        );
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// `--secret NAME=SOURCE` values, read from their sources.
fn read_secrets(args: &[String]) -> anyhow::Result<Secrets> {
    read_secrets_from(
        args,
        |var| std::env::var(var).ok(),
        || {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .context("reading a secret from stdin")?;
            Ok(line)
        },
    )
}

fn read_secrets_from(
    args: &[String],
    env: impl Fn(&str) -> Option<String>,
    mut stdin_line: impl FnMut() -> anyhow::Result<String>,
) -> anyhow::Result<Secrets> {
    let mut secrets = Secrets::new();
    let mut stdin_used = false;
    for arg in args {
        let Some((name, source)) = arg.split_once('=') else {
            bail!("--secret needs NAME=SOURCE (SOURCE: env:VAR, file:PATH or -)");
        };
        if name.is_empty() {
            bail!("--secret: the name before '=' is empty");
        }
        if secrets.get(name).is_some() {
            bail!("--secret {name} is given twice");
        }
        let value = Zeroizing::new(if let Some(var) = source.strip_prefix("env:") {
            env(var).with_context(|| {
                format!("--secret {name}: environment variable {var} is not set (or not UTF-8)")
            })?
        } else if let Some(path) = source.strip_prefix("file:") {
            std::fs::read_to_string(path)
                .with_context(|| format!("--secret {name}: reading {path}"))?
        } else if source == "-" {
            if stdin_used {
                bail!("--secret {name}: only one secret can come from stdin ('-')");
            }
            stdin_used = true;
            stdin_line()?
        } else {
            bail!(
                "--secret {name}: a literal value is refused because the command line is visible \
                 to other users (ps, /proc); use {name}=env:VAR, {name}=file:PATH or {name}=- \
                 (one line of stdin)"
            );
        });
        let value = value.strip_suffix('\n').unwrap_or(&value);
        let value = value.strip_suffix('\r').unwrap_or(value);
        if value.is_empty() {
            bail!("--secret {name}: the value is empty");
        }
        secrets.insert(name, SecretValue::from(value));
    }
    Ok(secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_stdin() -> anyhow::Result<String> {
        panic!("stdin read")
    }

    #[test]
    fn secret_sources() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s");
        std::fs::write(&file, "from-file\n").unwrap();
        let args = vec![
            "A=env:VAR_A".to_owned(),
            format!("B=file:{}", file.display()),
            "C=-".to_owned(),
        ];
        let secrets = read_secrets_from(
            &args,
            |var| (var == "VAR_A").then(|| "from-env".to_owned()),
            || Ok("from-stdin\r\n".to_owned()),
        )
        .unwrap();
        assert_eq!(secrets.get("A").unwrap().expose(), "from-env");
        assert_eq!(secrets.get("B").unwrap().expose(), "from-file");
        assert_eq!(secrets.get("C").unwrap().expose(), "from-stdin");
    }

    #[test]
    fn literal_and_bad_sources_are_refused() {
        let refuse = |arg: &str| {
            read_secrets_from(&[arg.to_owned()], |_| None, no_stdin)
                .unwrap_err()
                .to_string()
        };
        let literal = refuse("TOKEN=hunter2");
        assert!(literal.contains("visible"), "{literal}");
        assert!(!literal.contains("hunter2"), "{literal}");
        assert!(refuse("TOKEN=env:UNSET").contains("UNSET"));
        assert!(refuse("TOKEN").contains("NAME=SOURCE"));
        assert!(refuse("=env:X").contains("empty"));
        let twice = read_secrets_from(
            &["A=-".to_owned(), "B=-".to_owned()],
            |_| None,
            || Ok("x".to_owned()),
        )
        .unwrap_err();
        assert!(twice.to_string().contains("only one"), "{twice}");
    }

    #[test]
    fn table_aligns() {
        let rows = [["a".to_owned(), "long-name".to_owned()]];
        assert_eq!(table(["UID", "NAME"], &rows), "UID  NAME\na    long-name\n");
    }
}
