//! `tether-server`: the reference managed MCP server (`serve`) and its admin CLI (`admin`).
//!
//! Exit codes, the same table as `tether`'s (`tether_clikit::exit`; README, "Exit codes"): 0
//! success, 1 failure (the message is on stderr), 2 bad input or usage (clap's own errors,
//! `--secret` arguments and sources, an invalid installation config, name, uid, key or public
//! URL). Decided in one place: [`exit_code`].

use std::io::{IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tether_env::EnvVars;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::sync::Arc;
use tether_clikit::{FAILED, OK, USAGE, UsageError};
use tether_server::store::{self, AuditEvent, DatabaseUrl, Storage};
use tether_server::{
    BoundServer, DEFAULT_TEAM, INSECURE_DEV_KEY_WARNING, InstallationError, KeyError, MasterKey,
    NewInstallation, ServeError, ServeOptions, ServerError, StoreError, crypto,
    master_key_from_env, reseal, validate_team,
};
use uuid::Uuid;

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
    #[command(flatten)]
    database: DatabaseArgs,
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
    #[command(flatten)]
    limits: LimitArgs,
    /// GraphQL requests per second allowed per API key, on this server (a token bucket; 0
    /// turns the limit off). Past it: 429 with Retry-After.
    #[arg(long, value_name = "PER_SEC", default_value_t = tether_server::rate::DEFAULT_RATE_PER_SEC)]
    rate_limit: u32,
    /// Requests an API key may make at once above the rate (the bucket's size).
    #[arg(long, value_name = "N", default_value_t = tether_server::rate::DEFAULT_BURST, value_parser = clap::value_parser!(u32).range(1..))]
    rate_burst: u32,
    /// Also serve GET /metrics (Prometheus text format) on this address, to any peer that
    /// reaches it, for a scraper without an API key; port 0 picks a free port, printed as
    /// `metrics on http://ADDRESS/metrics` after the listening line. Without it, /metrics on
    /// the main listener answers loopback peers only, with an API key.
    #[arg(long, value_name = "ADDRESS")]
    metrics_listen: Option<SocketAddr>,
    /// Serve /metrics on the main listener to loopback peers without an API key (the old
    /// default). Behind a reverse proxy on this host that makes the page public.
    #[arg(long)]
    metrics_public: bool,
}

/// Where the store is: `--data-dir` (SQLite) or `--database-url`.
#[derive(Debug, clap::Args)]
struct DatabaseArgs {
    /// Directory of the SQLite database (created 0700); the same as
    /// `--database-url sqlite://DIR`.
    #[arg(long, value_name = "DIR", conflicts_with = "database_url")]
    data_dir: Option<PathBuf>,
    /// The database: sqlite://DIR or postgres://USER@HOST:PORT/DB (also
    /// TETHER_SERVER_DATABASE_URL). A URL with a password is refused here (the command line is
    /// visible to every user of the machine): give it in TETHER_SERVER_DATABASE_URL.
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,
}

impl DatabaseArgs {
    /// The database URL: `--database-url`, `--data-dir`, else
    /// [`EnvVars::TETHER_SERVER_DATABASE_URL`].
    fn url(&self) -> anyhow::Result<DatabaseUrl> {
        if let Some(text) = &self.database_url {
            let url = DatabaseUrl::parse(text)?;
            if url.has_password() {
                return Err(UsageError::new(format!(
                    "--database-url: a password on the command line is refused, because the \
                     command line is visible to every user on this machine (`ps`, /proc); set \
                     {} instead, or use a Unix socket with peer authentication",
                    EnvVars::TETHER_SERVER_DATABASE_URL
                ))
                .into());
            }
            return Ok(url);
        }
        if let Some(dir) = &self.data_dir {
            return Ok(DatabaseUrl::sqlite(dir));
        }
        match std::env::var(EnvVars::TETHER_SERVER_DATABASE_URL) {
            Ok(text) if !text.trim().is_empty() => Ok(DatabaseUrl::parse(text.trim())?),
            _ => Err(UsageError::new(format!(
                "no database: give --data-dir DIR (SQLite), --database-url URL, or set {}",
                EnvVars::TETHER_SERVER_DATABASE_URL
            ))
            .into()),
        }
    }
}

/// Bounds against hostile or broken clients and upstreams (README, "Limits").
#[derive(Debug, clap::Args)]
struct LimitArgs {
    /// Seconds a client has to send a request's headers; also how long a kept-alive
    /// connection may sit idle between requests.
    #[arg(long, value_name = "SECS", default_value_t = tether_server::limits::DEFAULT_HEADER_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout: u64,
    /// Seconds a client has to send a request's whole body (408 after).
    #[arg(long, value_name = "SECS", default_value_t = tether_server::limits::DEFAULT_BODY_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    body_timeout: u64,
    /// Seconds an upstream has to answer a proxied request (504 after); also the longest
    /// silence inside a proxied POST/DELETE response. GET event streams may stay silent.
    #[arg(long, value_name = "SECS", default_value_t = tether_server::limits::DEFAULT_UPSTREAM_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    upstream_timeout: u64,
    /// Open client connections at most; more are closed on accept. Lowered (with a warning)
    /// to fit the open-file limit.
    #[arg(long, value_name = "N", default_value_t = tether_server::limits::DEFAULT_MAX_CONNECTIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_connections: usize,
    /// Request body bytes held in memory at once over all requests; past it, requests get
    /// 503 (Retry-After).
    #[arg(long, value_name = "BYTES", default_value_t = tether_server::limits::DEFAULT_MAX_BODY_BYTES_IN_FLIGHT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1024..))]
    max_body_bytes_in_flight: usize,
}

impl LimitArgs {
    fn limits(&self) -> tether_server::limits::Limits {
        tether_server::limits::Limits {
            header_timeout: Duration::from_secs(self.header_timeout),
            body_timeout: Duration::from_secs(self.body_timeout),
            upstream_timeout: Duration::from_secs(self.upstream_timeout),
            max_connections: self.max_connections,
            max_body_bytes_in_flight: self.max_body_bytes_in_flight,
        }
    }
}

#[derive(Debug, clap::Args)]
struct AdminArgs {
    #[command(flatten)]
    database: DatabaseArgs,
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
        /// A server-held secret: NAME=env:VAR, NAME=file:PATH, NAME=cmd:PROGRAM ARGS…, NAME=- (one
        /// line of stdin) or NAME=prompt (hidden input). Literal values are refused: the command line is visible
        /// in `ps`. Each name once.
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
    /// Manage proxy tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Re-seal every stored value under TETHER_SERVER_KEY (the new key), opening them with it
    /// or TETHER_SERVER_PREVIOUS_KEY (the old key). Online and safe to interrupt: run it again.
    RotateKey {
        /// Milliseconds to wait between installations, to spread a large rotation's load.
        #[arg(long, value_name = "MS", default_value_t = 0)]
        pause_ms: u64,
    },
    /// Show the audit log (admin actions and mints), newest first.
    Audit {
        /// How many events.
        #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..))]
        limit: i64,
    },
}

#[derive(Debug, Subcommand)]
enum ApiKeyCommand {
    /// Create an API key for a team; prints it once (only its hash is stored).
    Create {
        /// The team the key belongs to.
        #[arg(long, default_value = DEFAULT_TEAM)]
        team: String,
    },
    /// List API keys: id, team, created, last used (never the key).
    List,
    /// Revoke an API key by its id (from `api-key list`): its next request gets 401.
    Revoke {
        /// The key's id.
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Revoke proxy tokens: their next request gets 401, open streams end within a second.
    Revoke {
        /// The installation whose tokens to revoke.
        #[arg(
            long,
            value_name = "UID",
            required_unless_present = "all",
            conflicts_with = "all"
        )]
        installation: Option<Uuid>,
        /// Every proxy token of every installation.
        #[arg(long)]
        all: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::from(OK),
        Err(error) => {
            eprintln!("tether-server: error: {error:#}");
            ExitCode::from(exit_code(&error))
        }
    }
}

/// The exit code for an error: 2 when what the operator typed or gave is wrong, else 1. The
/// errors both binaries share (`tether_clikit::exit::shared_code`) are asked first.
fn exit_code(error: &anyhow::Error) -> u8 {
    if let Some(code) = error.chain().find_map(tether_clikit::exit::shared_code) {
        return code;
    }
    let usage = |cause: &(dyn std::error::Error + 'static)| {
        if let Some(error) = cause.downcast_ref::<KeyError>() {
            return matches!(
                error,
                KeyError::MissingKey
                    | KeyError::ConflictingKeys
                    | KeyError::InvalidKey { .. }
                    | KeyError::InvalidPreviousKey { .. }
            );
        }
        if let Some(error) = cause.downcast_ref::<InstallationError>() {
            return !matches!(
                error,
                InstallationError::Key(_) | InstallationError::Template { .. }
            );
        }
        if let Some(error) = cause.downcast_ref::<ServeError>() {
            return matches!(error, ServeError::InvalidPublicUrl { .. });
        }
        if let Some(error) = cause.downcast_ref::<StoreError>() {
            return matches!(
                error,
                StoreError::UnknownInstallation { .. } | StoreError::InvalidUrl { .. }
            );
        }
        false
    };
    let layer = |error: &ServerError| -> bool {
        // Transparent: its `source()` skips the layer's error, so look inside.
        match error {
            ServerError::Key(error) => usage(error),
            ServerError::Installation(error) => usage(error),
            ServerError::Serve(error) => usage(error),
            ServerError::Store(error) => usage(error),
            _ => false,
        }
    };
    let is_usage = |cause: &(dyn std::error::Error + 'static)| {
        cause
            .downcast_ref::<ServerError>()
            .map_or_else(|| usage(cause), layer)
    };
    if error.chain().any(is_usage) {
        USAGE
    } else {
        FAILED
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => {
            // Kept until the runtime has ended: dropping it flushes the export.
            let _telemetry = init_logging("info");
            serve(args)
        }
        Command::Admin(args) => {
            let _telemetry = init_logging("warn");
            admin(args)
        }
        Command::Schema => {
            print!("{}", tether_server::sdl());
            Ok(())
        }
    }
}

/// Logs to stderr at `default` (or `TETHER_SERVER_LOG`'s filter) and, when the `OTEL_*`
/// variables ask for it, exports the request spans (docs/observability.md).
fn init_logging(default: &str) -> Option<tether_log::telemetry::Telemetry> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env(EnvVars::TETHER_SERVER_LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // The exported spans are not log lines.
    let filter = match format!("{}=off", tether_log::telemetry::TARGET).parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter);
    let (export, telemetry) = tether_log::telemetry::layer();
    tracing_subscriber::registry()
        .with(stderr)
        .with(export)
        .init();
    telemetry
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let ServeArgs {
        listen,
        database,
        public_url,
        proxy_token_ttl,
        insecure_dev_key,
        limits,
        rate_limit,
        rate_burst,
        metrics_listen,
        metrics_public,
    } = args;
    let database = database.url()?;
    let limits = limits.limits();
    let key = master_key(insecure_dev_key)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the async runtime")?;
    runtime.block_on(async move {
        let server = BoundServer::bind(ServeOptions {
            listen,
            database: database.clone(),
            public_url,
            proxy_token_ttl: Duration::from_secs(proxy_token_ttl),
            key,
            limits,
            rate: tether_server::rate::RateSettings {
                per_sec: rate_limit,
                burst: rate_burst,
            },
            metrics_listen,
            metrics_public,
        })
        .await
        .with_context(|| format!("starting with the database {database}"))?;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on http://{}", server.local_addr())
            .and_then(|()| match server.metrics_addr() {
                Some(address) => writeln!(stdout, "metrics on http://{address}/metrics"),
                None => Ok(()),
            })
            .and_then(|()| stdout.flush())
            .context("writing the listening line")?;
        drop(stdout);
        tracing::info!(
            address = %server.local_addr(),
            public_base = %server.public_base(),
            proxy_token_ttl_secs = proxy_token_ttl,
            limits = ?server.limits(),
            "serving"
        );
        server.run(shutdown_signal()).await?;
        Ok(())
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

fn admin(args: AdminArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building the async runtime")?;
    runtime.block_on(admin_async(args))
}

/// Who the audit log names for an admin command: `admin:<OS user name>` (or the uid).
fn admin_actor() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => format!("admin:{}", user.name),
        _ => format!("admin:uid {uid}"),
    }
}

/// Appends an admin action to the audit log.
async fn audit(
    store: &dyn Storage,
    action: &str,
    target: &str,
    detail: &str,
) -> anyhow::Result<()> {
    store
        .record_audit(AuditEvent::now(&admin_actor(), action, target, detail))
        .await
        .context("recording the action in the audit log")
}

async fn admin_async(args: AdminArgs) -> anyhow::Result<()> {
    let AdminArgs {
        database,
        insecure_dev_key,
        command,
    } = args;
    let database = database.url()?;
    let open = || async {
        store::open(&database)
            .await
            .with_context(|| format!("opening the database {database}"))
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
            let secrets = tether_clikit::secrets::read(&secrets)?;
            let key = master_key(insecure_dev_key)?;
            let new = NewInstallation::from_spec(&name, &team, &spec, secrets)
                .with_context(|| format!("adding installation '{name}'"))?;
            let store = open().await?;
            store::verify_key(&*store, &key).await?;
            let sealed = new.seal(&key)?;
            let detail = format!("name {name} team {team} kind {}", sealed.kind.as_str());
            store
                .insert_installation(sealed)
                .await
                .with_context(|| format!("storing installation {}", new.uid))?;
            audit(&*store, "add", &new.uid.to_string(), &detail).await?;
            println!("{}", new.uid);
        }
        AdminCommand::List => {
            let installations = open().await?.list_installations().await?;
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
            let store = open().await?;
            store
                .set_active(uid, false)
                .await
                .with_context(|| format!("deactivating {uid}"))?;
            audit(&*store, "deactivate", &uid.to_string(), "").await?;
            println!("deactivated {uid}");
        }
        AdminCommand::ApiKey(ApiKeyCommand::Create { team }) => {
            validate_team(&team)?;
            let store = open().await?;
            let key = crypto::new_api_key()?;
            let id = crypto::new_api_key_id()?;
            store
                .insert_api_key(crypto::token_hash(&key), id.clone(), team.clone())
                .await?;
            audit(&*store, "api-key create", &id, &format!("team {team}")).await?;
            println!("{}", key.as_str());
            eprintln!("API key {id} for team '{team}' created; it is shown only once");
        }
        AdminCommand::ApiKey(ApiKeyCommand::List) => {
            let keys = open().await?.list_api_keys().await?;
            let rows: Vec<[String; 4]> = keys
                .into_iter()
                .map(|key| {
                    [
                        key.id,
                        key.team,
                        rfc3339_secs(key.created_at),
                        key.last_used_at
                            .map_or_else(|| "never".to_owned(), rfc3339_secs),
                    ]
                })
                .collect();
            print!("{}", table(["ID", "TEAM", "CREATED", "LAST-USED"], &rows));
        }
        AdminCommand::ApiKey(ApiKeyCommand::Revoke { id }) => {
            let store = open().await?;
            if !store.revoke_api_key(id.clone()).await? {
                return Err(UsageError::new(format!(
                    "no API key {id:?}; `tether-server admin api-key list` shows the ids"
                ))
                .into());
            }
            audit(&*store, "api-key revoke", &id, "").await?;
            println!("revoked API key {id}");
        }
        AdminCommand::Token(TokenCommand::Revoke {
            installation,
            // clap requires --installation or --all: without an installation it is all.
            all: _,
        }) => {
            let store = open().await?;
            let target = installation.map_or_else(|| "all".to_owned(), |uid| uid.to_string());
            let revoked = store.revoke_proxy_tokens(installation).await?;
            audit(
                &*store,
                "token revoke",
                &target,
                &format!("{revoked} tokens"),
            )
            .await?;
            println!("revoked {revoked} proxy tokens ({target})");
        }
        AdminCommand::RotateKey { pause_ms } => {
            let key = master_key(insecure_dev_key)?;
            if !key.has_previous() {
                return Err(UsageError::new(format!(
                    "rotate-key needs the new key in {} and the old one in {}",
                    EnvVars::TETHER_SERVER_KEY,
                    EnvVars::TETHER_SERVER_PREVIOUS_KEY
                ))
                .into());
            }
            let store = open().await?;
            rotate_key(&store, &key, Duration::from_millis(pause_ms)).await?;
        }
        AdminCommand::Audit { limit } => {
            let events = open().await?.audit_events(limit).await?;
            let rows: Vec<[String; 5]> = events
                .into_iter()
                .map(|event| {
                    [
                        rfc3339_ms(event.at_ms),
                        event.actor,
                        event.action,
                        event.target,
                        event.detail,
                    ]
                })
                .collect();
            print!(
                "{}",
                table(["WHEN", "WHO", "ACTION", "TARGET", "DETAIL"], &rows)
            );
        }
    }
    Ok(())
}

/// `admin rotate-key`: each installation re-sealed in its own transaction (so a kill leaves
/// each wholly under one key or the other, all readable with the pair), then the key check.
/// Installations added meanwhile (by an admin still on the old key) are found by listing again
/// until a pass finds none new.
async fn rotate_key(
    store: &Arc<dyn Storage>,
    key: &MasterKey,
    pause: Duration,
) -> anyhow::Result<()> {
    store::verify_key(&**store, key).await?;
    let mut done = std::collections::HashSet::new();
    loop {
        let pending: Vec<Uuid> = store
            .list_installations()
            .await?
            .into_iter()
            .map(|summary| summary.uid)
            .filter(|uid| !done.contains(uid))
            .collect();
        if pending.is_empty() {
            break;
        }
        let total = done.len() + pending.len();
        for uid in pending {
            if let Some(stored) = store.installation(uid, None).await? {
                let resealed = reseal(&stored, key).with_context(|| format!("re-sealing {uid}"))?;
                store
                    .replace_sealed(resealed)
                    .await
                    .with_context(|| format!("storing the re-sealed {uid}"))?;
            }
            done.insert(uid);
            eprintln!("re-sealed {}/{total}: {uid}", done.len());
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    }
    store::seal_key_check(&**store, key).await?;
    let total = done.len();
    audit(
        &**store,
        "rotate-key",
        "all",
        &format!("{total} installations"),
    )
    .await?;
    println!(
        "re-sealed {total} installations under the new key; restart the servers without {}",
        EnvVars::TETHER_SERVER_PREVIOUS_KEY
    );
    Ok(())
}

/// RFC 3339 (UTC, seconds) of Unix seconds: `2026-12-01T09:41:31Z`.
fn rfc3339_secs(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// RFC 3339 (UTC, three decimals) of Unix milliseconds: `2026-12-01T09:41:31.400Z`.
fn rfc3339_ms(ms: i64) -> String {
    let secs = rfc3339_secs(ms.div_euclid(1000));
    format!("{}.{:03}Z", secs.trim_end_matches('Z'), ms.rem_euclid(1000))
}

/// The master key; with `--insecure-dev-key`, [`INSECURE_DEV_KEY_WARNING`] goes to stderr
/// whatever `TETHER_SERVER_LOG` says: an insecure key is never run silently.
fn master_key(insecure_dev_key: bool) -> anyhow::Result<MasterKey> {
    let key = master_key_from_env(insecure_dev_key)?;
    if key.is_insecure_dev() {
        // Not through tracing: a log filter must not be able to hide it.
        eprintln!("tether-server: {INSECURE_DEV_KEY_WARNING}");
    }
    Ok(key)
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
        return Err(UsageError::new(format!(
            "--from: not inline JSON (it does not start with '{{') and not a file ({} bytes given)",
            from.len()
        ))
        .into());
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `admin add --secret` reads through `tether_clikit::secrets`, as `tether` does; what
    /// it refuses is a usage error here too.
    #[test]
    fn secret_sources_and_their_refusals() {
        let dir = tempfile::tempdir().expect("creating a temp dir");
        let file = dir.path().join("s");
        std::fs::write(&file, "from-file\n").expect("writing the secret file");
        let read = |args: &[String]| tether_clikit::secrets::read(args).map_err(anyhow::Error::new);
        let secrets = read(&[format!("B=file:{}", file.display())]).expect("reading a file");
        assert_eq!(secrets.get("B").expect("B").expose(), "from-file");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").expect("writing the empty file");
        let refusals = [
            vec!["TOKEN=hunter2".to_owned()],
            vec!["A=-".to_owned(), "B=-".to_owned()],
            vec!["A=env:X".to_owned(), "A=env:Y".to_owned()],
            vec![format!("A=file:{}", dir.path().join("missing").display())],
            vec![format!("A=file:{}", empty.display())],
        ];
        for args in &refusals {
            let error = read(args).expect_err("refused");
            assert!(!error.to_string().contains("hunter2"), "{error}");
            assert_eq!(exit_code(&error), USAGE, "{error:#}");
        }
        let error = read(&refusals[4]).expect_err("refused");
        assert!(error.to_string().contains("is empty"), "{error}");
    }

    #[test]
    fn exit_codes() {
        let usage = [
            anyhow::Error::new(ServerError::from(KeyError::MissingKey)),
            anyhow::Error::new(KeyError::InvalidKey {
                reason: "x".to_owned(),
            }),
            anyhow::Error::new(InstallationError::Reference).context("adding installation 'x'"),
            anyhow::Error::new(ServerError::from(InstallationError::SseUpstream)),
        ];
        for error in &usage {
            assert_eq!(exit_code(error), USAGE, "{error:#}");
        }
        let failed = [
            anyhow::Error::new(ServerError::from(KeyError::Unseal)),
            anyhow::Error::new(InstallationError::Key(KeyError::Seal)),
            anyhow::anyhow!("reading a file"),
        ];
        for error in &failed {
            assert_eq!(exit_code(error), FAILED, "{error:#}");
        }
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339_secs(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_ms(1_796_118_091_400), "2026-12-01T09:41:31.400Z");
        assert_eq!(rfc3339_ms(5), "1970-01-01T00:00:00.005Z");
    }

    #[test]
    fn table_aligns() {
        let rows = [["a".to_owned(), "long-name".to_owned()]];
        assert_eq!(table(["UID", "NAME"], &rows), "UID  NAME\na    long-name\n");
    }
}
