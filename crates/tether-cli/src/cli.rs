//! The command line: flags only. Validation and object building happen in `commands/`.

use std::ffi::OsStr;
use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use tether_gateway::tool_search::ToolMode;
use tether_harness::{Format, HARNESSES, Harness};

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  a server or the harness failed
  2  bad input or usage
  3  managed resolution failed";

/// Resolve MCP servers for agent runs: local installations, JSON specs and managed UUIDs,
/// with secrets applied in memory only.
#[derive(Debug, Parser)]
#[command(name = "tether", version, about, after_help = EXIT_CODES, propagate_version = true)]
pub struct Cli {
    /// More logging on stderr: -v info, -vv debug, -vvv trace (RUST_LOG overrides).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Resolve the specs and run: with no command, start every server and report it; with a
    /// command after `--`, hand the servers to that harness and run it.
    #[command(after_help = "Examples:
  tether run --mcp 2f0c…-uuid --secret API_TOKEN=env:API_TOKEN
  tether run --mcp ./mcp.json --strict-mcp -- claude -p 'list my issues'
  tether run --task task.json --harness codex -- codex exec 'fix the bug'
  tether run --mcp ./mcp.json --gateway -- gemini -p 'list my issues'

Exit codes: 0 success (with a command: the command's own code), 1 a server or the harness
failed, 2 bad input or usage, 3 managed resolution failed.")]
    Run(RunArgs),

    /// Print (or write) the rendered config in a harness's own format.
    #[command(after_help = "Examples:
  tether export --mcp ./mcp.json --format claude
  tether export --mcp 2f0c…-uuid --secret TOKEN=prompt --format codex -o codex.toml
  tether export --mcp ./mcp.json --secret TOKEN=env:TOKEN --gateway --format gemini

On stdout, values that came from secrets (and captured env/header values) are masked unless
--show-secrets; a file written with -o holds real values and is created with mode 0600.")]
    Export(ExportArgs),

    /// Start the servers, run initialize and tools/list, report, and shut them down.
    #[command(after_help = "Examples:
  tether test --mcp ./mcp.json
  tether test --mcp 2f0c…-uuid --secret TOKEN=env:TOKEN --timeout 10 --json

Exit code 0 only if every server is ready.")]
    Test(TestArgs),

    /// Call one tool on one server and print its result.
    #[command(after_help = "Examples:
  tether call --mcp ./mcp.json everything echo --args '{\"message\":\"hi\"}'
  tether call --mcp 2f0c…-uuid github list_issues --json")]
    Call(CallArgs),

    /// Serve every resolved server as one MCP server (a gateway): tools and prompts named
    /// SERVER__NAME, results and errors masked, each call audited.
    #[command(after_help = "Examples:
  tether serve --mcp ./mcp.json --secret API_TOKEN=env:API_TOKEN          (stdio)
  tether serve --mcp ./mcp.json --listen 127.0.0.1:8765                    (Streamable HTTP)
  tether serve --mcp ./mcp.json --listen 127.0.0.1:8765 --token env:GATEWAY_TOKEN

Over HTTP the endpoint is http://ADDRESS/mcp; every request needs `Authorization: Bearer
TOKEN` (a token is generated and printed once on stderr unless --token gives one). Only
loopback addresses are accepted. Each call is recorded in an audit log (sizes and SHA-256,
never values): --audit PATH, default $TETHER_HOME/audit/serve-TIME-PID.jsonl.")]
    Serve(ServeArgs),

    /// Read the gateway's audit logs.
    #[command(subcommand)]
    Audit(AuditCommand),

    /// Accept a server's tool definitions as they are now: show what changed since they were
    /// pinned, and pin them again (the gateway withholds a changed tool until then).
    #[command(after_help = "Examples:
  tether trust --mcp ./mcp.json github
  tether trust --mcp ./mcp.json github create_issue

Pins live in $TETHER_HOME/pins.json (SHA-256 of each tool's whole definition).")]
    Trust(TrustArgs),

    /// Store a templatable server locally and print its UUID.
    #[command(after_help = "Examples:
  tether install github --from ./github.json
  tether install github --from '{\"command\":\"npx\",\"args\":[\"--token={{GH_TOKEN}}\"]}'
  tether install --from ./mcp.json                  (every server, each under its own name)
  tether install gh --from ./mcp.json --server github

Placeholders without a --secret value stay variables, filled from each run's secrets.

Values given here (--secret, and literal env/header values of the config) go to the secret
store: the OS credential store when one answers (Secret Service, Keychain, Credential
Manager), else $TETHER_HOME/secrets.json (mode 0600, not encrypted; announced when created).
$TETHER_HOME/tether.db keeps only their names. TETHER_SECRET_STORE=keyring|file pins one.
`tether remove` deletes them. To keep a secret off the disk, leave its placeholder and pass
--secret at run time.")]
    Install(InstallArgs),

    /// Search the MCP registries (the official one, and Smithery when its API key is set).
    #[command(after_help = "Examples:
  tether search filesystem
  tether search github --source smithery --limit 5 --json

One row per server: name, latest version, transports (npm/pypi/oci/nuget/mcpb/remote), source.
Deprecated and deleted entries are hidden unless --all. Answers are cached in
$TETHER_HOME/cache/registry for 10 minutes; offline, the cache answers and says how old it is.")]
    Search(SearchArgs),

    /// Show one registry entry: how each package and remote would launch, and every input.
    #[command(
        after_help = "Examples:
  tether show io.github.modelcontextprotocol/filesystem
  tether show io.github.example/everything --version 2025.9.1 --json
  tether show @smithery-ai/github --source smithery",
        disable_version_flag = true
    )]
    Show(ShowArgs),

    /// Add a server from a registry (or Smithery): build its launch config, test-connect it,
    /// and only then store it as a local installation.
    #[command(
        after_help = "Examples:
  tether add io.github.modelcontextprotocol/filesystem --set target_dir=$HOME/src
  tether add io.github.example/weather --secret WEATHER_API_KEY=env:WEATHER_API_KEY
  tether add com.example/tenant-api --package remote --set tenant_id=acme --secret api_token=prompt

Required inputs come from --set (values) and --secret (secrets); a missing one is asked for
on the terminal (hidden for a secret), or, with --yes or without a terminal, is an error that
lists the flags to pass. The server is test-connected (initialize + tools/list, in a scratch
directory) before anything is stored; then the installation and its secrets are stored
together (secrets in the OS credential store, or $TETHER_HOME/secrets.json where none
answers), so `tether test --mcp NAME` needs no --secret.",
        disable_version_flag = true
    )]
    Add(AddArgs),

    /// Serve the setup tools over MCP (stdio): an agent searches the registry, asks the
    /// person for each secret on a local page, test-connects and installs, and never sees a
    /// secret value.
    #[command(
        name = "setup-mcp",
        after_help = "Examples:
  claude mcp add tether-setup -- tether setup-mcp
  tether setup-mcp --listen 127.0.0.1:8765 --token-file ~/.config/tether-setup.token

Tools: mcp_setup_search, mcp_setup_get, mcp_setup_request_secret, mcp_setup_test_connection,
mcp_setup_install_and_connect. Secrets are typed on http://127.0.0.1:PORT/secret/NONCE (one
single-use page per request) or with `tether secrets submit NONCE`; the agent only holds
secret:// refs, which live in this process's memory for 15 idle minutes."
    )]
    SetupMcp(SetupMcpArgs),

    /// List local installations: names, UUIDs and variable names (never values).
    List(ListArgs),

    /// Remove a local installation and its stored values (from the secret store too; no byte
    /// of them is left in the store's file).
    Remove(RemoveArgs),

    /// The values stored for local installations: list (names and where each lives, never
    /// values), set, rm, and move between the OS credential store and the file.
    #[command(after_help = "Examples:
  tether secrets list
  tether secrets set github GH_TOKEN                 (hidden prompt on a terminal; else stdin)
  tether secrets set github GH_TOKEN --from env:GH_TOKEN
  tether secrets rm github GH_TOKEN
  tether secrets move keyring

Values live in the OS credential store (Secret Service, Keychain, Credential Manager) when one
answers, else in $TETHER_HOME/secrets.json (mode 0600, not encrypted). TETHER_SECRET_STORE
(auto|keyring|file) or secret_store in config.toml decides where new values go.")]
    Secrets(SecretsArgs),

    /// OAuth for remote MCP servers: log in (browser, PKCE), show status, log out. Tokens live
    /// in the secret store and are applied as `Authorization: Bearer` by run, test, call and
    /// export; never printed.
    #[command(after_help = "Examples:
  tether auth login https://mcp.example.com/mcp
  tether auth login https://mcp.example.com/mcp --no-browser   (paste the redirect URL back)
  tether auth status https://mcp.example.com/mcp
  tether auth logout https://mcp.example.com/mcp

The browser step opens $BROWSER when set, else prints the URL; the redirect comes back to a
listener on 127.0.0.1 (random port).")]
    Auth(AuthArgs),

    /// Print shell completions.
    #[command(
        after_help = "Example:\n  tether completions bash > ~/.local/share/bash-completion/completions/tether"
    )]
    Completions(CompletionsArgs),
}

/// Where MCP specs come from.
#[derive(Debug, Args)]
pub struct SpecArgs {
    /// An MCP spec: a config file, inline JSON, an installation's name or UUID, or a harness's
    /// own config (claude:, codex:, …). Repeatable.
    ///
    /// A UUID names a local installation or, when none has it, a managed one on the team's
    /// server. A file is JSON (any tool's MCP config: `mcpServers`, `servers`, `mcp`, …) or
    /// TOML (Codex's `config.toml`). `HARNESS:` reads that harness's own files: claude:,
    /// codex:, gemini:, opencode:, copilot:, vscode:, cursor:, … (see docs/configuration.md).
    #[arg(long = "mcp", value_name = "SPEC")]
    pub mcp: Vec<String>,

    /// A task config (JSON with `mcp_servers`, and optionally `task_id`); its `warp_id`
    /// entries resolve like UUID specs.
    #[arg(long, value_name = "FILE")]
    pub task: Option<PathBuf>,

    /// The managed server's GraphQL endpoint, or tether-server's base URL (overrides
    /// TETHER_SERVER_URL and config.toml).
    #[arg(long, value_name = "URL", hide_short_help = true)]
    pub server_url: Option<String>,

    /// The most time managed resolution may take, retries included, in seconds (overrides
    /// TETHER_MANAGED_TIMEOUT and config.toml; default 30).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=3600), hide_short_help = true)]
    pub managed_timeout: Option<u64>,

    /// Pass the environment variable NAME from tether's environment to every stdio server.
    /// Repeatable.
    ///
    /// Stdio servers get only HOME, LOGNAME, PATH, SHELL, USER, LANG, LC_ALL, TERM, TMPDIR and
    /// TZ otherwise; a server's `passEnv` field does the same for one server.
    #[arg(long = "pass-env", value_name = "NAME", hide_short_help = true)]
    pub pass_env: Vec<String>,
}

/// Where secrets come from. Never from a literal on the command line.
#[derive(Debug, Args)]
pub struct SecretArgs {
    /// A secret: NAME=env:VAR, NAME=file:PATH, NAME=cmd:PROGRAM ARGS…, NAME=- (stdin) or
    /// NAME=prompt. Repeatable.
    ///
    /// env: reads a variable of tether's environment; file: the file's content (one trailing
    /// newline dropped); cmd: a program's stdout (run without a shell); - one line of stdin;
    /// prompt asks on the terminal with hidden input. A literal value is refused: argv is
    /// visible through `ps`.
    #[arg(long = "secret", value_name = "NAME=SOURCE")]
    pub secret: Vec<String>,

    /// A dotenv file of NAME=value lines.
    #[arg(long, value_name = "FILE")]
    pub secrets_file: Vec<PathBuf>,
}

/// The harness `run` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HarnessArg {
    /// tether starts the servers itself.
    Builtin,
    /// A third-party harness tether hands the servers to: a row of
    /// `tether_harness::HARNESSES` that has a `run`.
    Handoff(&'static Harness),
}

impl HarnessArg {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            HarnessArg::Builtin => "builtin",
            HarnessArg::Handoff(harness) => harness.name,
        }
    }
}

/// A value parser over names from the harness table: clap lists, completes and checks the
/// names from `values`, and `lookup` turns the chosen one into the value.
#[derive(Clone)]
pub struct TableParser<T> {
    values: fn() -> Vec<PossibleValue>,
    lookup: fn(&str) -> Option<T>,
}

impl<T: Clone + Send + Sync + 'static> TypedValueParser for TableParser<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        let name = PossibleValuesParser::new((self.values)()).parse_ref(cmd, arg, value)?;
        (self.lookup)(&name).ok_or_else(|| {
            clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                format!("no harness named '{name}'\n"),
            )
            .with_cmd(cmd)
        })
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new((self.values)().into_iter()))
    }
}

/// `--format`: every row of the harness table.
fn format_parser() -> TableParser<Format> {
    TableParser {
        values: || {
            HARNESSES
                .iter()
                .map(|h| PossibleValue::new(h.name).help(h.title))
                .collect()
        },
        lookup: Format::from_name,
    }
}

/// `--harness`: `builtin` and every row of the harness table that `run` can hand servers to.
fn harness_parser() -> TableParser<HarnessArg> {
    TableParser {
        values: || {
            std::iter::once(PossibleValue::new("builtin").help("tether starts the servers itself"))
                .chain(
                    HARNESSES
                        .iter()
                        .filter(|h| h.run.is_some())
                        .map(|h| PossibleValue::new(h.name).help(h.title)),
                )
                .collect()
        },
        lookup: |name| match name {
            "builtin" => Some(HarnessArg::Builtin),
            _ => HARNESSES
                .iter()
                .find(|h| h.name == name && h.run.is_some())
                .map(HarnessArg::Handoff),
        },
    }
}

/// `tether run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub specs: SpecArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,

    /// Fail if any server fails to start (built-in) or ask the harness to be strict.
    #[arg(long)]
    pub strict_mcp: bool,

    /// The harness (default: from the command's name; builtin without a command).
    #[arg(long, value_parser = harness_parser())]
    pub harness: Option<HarnessArg>,

    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,

    /// Per-server startup timeout in seconds (built-in harness and gateway).
    ///
    /// A server launched through npx, uvx or another package runner gets 4× that: its first
    /// start downloads the package.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub timeout: u64,

    #[command(flatten)]
    pub sandbox: SandboxArg,

    /// Built-in harness: keep the servers running (re-minting managed configs before they
    /// expire) until SIGINT or SIGTERM.
    #[arg(long, hide_short_help = true)]
    pub hold: bool,

    /// Refuse to write any secret to a file, even a private temporary one.
    #[arg(long, hide_short_help = true)]
    pub no_secrets_on_disk: bool,

    /// Hand the harness ONE stdio server, tether's gateway (`tether serve` for this run).
    ///
    /// The servers run in this tether process; the harness sees SERVER__NAME tools, masked
    /// results and no value of any server. The default for Gemini CLI (whose environment
    /// expansion would corrupt secret values).
    #[arg(long, conflicts_with = "no_gateway")]
    pub gateway: bool,

    /// Hand the servers to the harness directly even where the gateway is the default
    /// (Gemini CLI).
    #[arg(long)]
    pub no_gateway: bool,

    /// Through the gateway: the audit log to create (default
    /// $TETHER_HOME/audit/serve-TIME-PID.jsonl).
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with = "no_gateway",
        hide_short_help = true
    )]
    pub audit: Option<PathBuf>,

    /// Through the gateway: the client capabilities declared to the servers (a
    /// comma-separated list of sampling, elicitation, roots and apps, or all, or none; default all:
    /// the servers start before the harness connects). A request the harness did not declare
    /// gets an error.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        hide_short_help = true
    )]
    pub client_capabilities: Option<Vec<CapabilityArg>>,

    /// Through the gateway: start every server before the harness starts.
    ///
    /// As `tether serve --wait-for-servers`; --strict-mcp implies it. Default:
    /// `wait_for_servers` in config.toml, else the harness starts at once and each server's
    /// tools join as it becomes ready.
    #[arg(long, conflicts_with = "no_gateway")]
    pub wait_for_servers: bool,

    /// Through the gateway, for a harness that lists tools once (Codex, Copilot CLI): hold
    /// its first tools/list until the servers joined, at most SECS seconds.
    ///
    /// Such a harness ignores notifications/tools/list_changed, so a server that joins after
    /// its first list would stay invisible to it for the whole run. Default:
    /// `first_list_grace` in config.toml, else 5; 0 answers at once. Harnesses that list
    /// again on a change (Claude Code, Gemini CLI, opencode) are never held.
    #[arg(long, value_name = "SECS", conflicts_with = "no_gateway", hide_short_help = true, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub first_list_grace: Option<u64>,

    /// Through the gateway: a tool result larger than N tokens is cut to fit, the whole read
    /// back from a tether://results/ID link (as `tether serve --max-result-tokens`).
    #[arg(long, value_name = "N", value_parser = tether_gateway::budget::parse_max_result_tokens, hide_short_help = true)]
    pub max_result_tokens: Option<usize>,

    #[command(flatten)]
    pub tool_search: ToolSearchArgs,

    /// The harness command and its arguments.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `tether export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub specs: SpecArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,

    /// The output format.
    #[arg(long, value_parser = format_parser())]
    pub format: Format,

    /// Write to FILE (mode 0600, real values) instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Show real secret values on stdout.
    #[arg(long)]
    pub show_secrets: bool,

    /// Write ONE server instead: tether's gateway, `tether serve` with these specs and secret
    /// sources (never values). Specs must be UUIDs, installation names or files; secret
    /// sources env: or file:. Nothing is resolved now: each start of the gateway resolves.
    #[arg(long)]
    pub gateway: bool,
}

/// `tether test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    #[command(flatten)]
    pub specs: SpecArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,

    /// Per-server startup timeout in seconds (a server launched through npx, uvx or another package runner gets 4× that: its first start downloads the package).
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub timeout: u64,

    #[command(flatten)]
    pub sandbox: SandboxArg,

    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tether call`.
#[derive(Debug, Args)]
pub struct CallArgs {
    #[command(flatten)]
    pub specs: SpecArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,

    /// The server's name.
    pub server: String,

    /// The tool's name.
    pub tool: String,

    /// The tool's arguments as a JSON object.
    #[arg(long, value_name = "JSON")]
    pub args: Option<String>,

    /// Per-server startup timeout and tool-call timeout, in seconds (a server launched through npx, uvx or another package runner gets 4× that: its first start downloads the package).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub timeout: u64,

    #[command(flatten)]
    pub sandbox: SandboxArg,

    /// Answer the server's questions (elicitation) with the defaults it offers; declined when
    /// a required answer has none. Without it tether answers none.
    #[arg(long)]
    pub accept_elicitation_defaults: bool,

    /// Declare the Tasks extension (SEP-2663): a call the server runs as a task is followed to
    /// its end within --timeout. Without it, only a tool the server runs solely as a task is.
    #[arg(long)]
    pub as_task: bool,

    /// Print the whole MCP result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tether serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub specs: SpecArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,

    /// Serve one client on stdin/stdout (the default).
    #[arg(long, conflicts_with = "listen")]
    pub stdio: bool,

    /// Serve Streamable HTTP at http://ADDRESS/mcp (a loopback address; port 0 picks one,
    /// and the URL is printed on stdout).
    #[arg(long, value_name = "ADDRESS")]
    pub listen: Option<String>,

    /// Where the HTTP bearer token comes from: env:VAR, file:PATH or - (default: a new
    /// random token, printed once on stderr). Repeat it to give each client a token of its
    /// own: 2026-07-28 clients (which have no session) then see only the cut results and tasks
    /// of their own token.
    #[arg(
        long,
        value_name = "SOURCE",
        requires = "listen",
        conflicts_with = "no_auth"
    )]
    pub token: Vec<String>,

    /// Accept HTTP requests without a token (loopback only; for local tools and tests).
    #[arg(long, requires = "listen")]
    pub no_auth: bool,

    /// Close an HTTP session that had no request for SECS seconds and has no call running
    /// (its client then initializes again).
    #[arg(long, value_name = "SECS", requires = "listen",
          default_value_t = tether_gateway::DEFAULT_SESSION_IDLE.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub session_idle: u64,

    /// The most HTTP sessions open at once; an initialize beyond gets 503.
    #[arg(long, value_name = "N", requires = "listen",
          default_value_t = tether_gateway::DEFAULT_MAX_SESSIONS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_sessions: u32,

    /// The audit log to create (must not exist; mode 0600).
    #[arg(long, value_name = "PATH")]
    pub audit: Option<PathBuf>,

    /// Per-server startup timeout in seconds (a server launched through npx, uvx or another package runner gets 4× that: its first start downloads the package).
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub timeout: u64,

    #[command(flatten)]
    pub sandbox: SandboxArg,

    /// The longest a forwarded call may take, in seconds (a call to a server still starting
    /// waits for it within this time).
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub call_timeout: u64,

    /// Start every server before answering the client: a slow server delays `initialize`, and
    /// one that fails is reported and not retried. Default: `wait_for_servers`
    /// in config.toml, else answer at once and add each server's tools as it becomes ready.
    #[arg(long)]
    pub wait_for_servers: bool,

    /// Fail if any server fails to start or misses its startup timeout (implies
    /// --wait-for-servers).
    #[arg(long)]
    pub strict_mcp: bool,

    /// What the prompt-injection scan of tool, prompt and resource descriptions does with a
    /// finding, for every server: report it on stderr (warn), also withhold the entry
    /// (block), or nothing (off). Default: `scan` in config.toml, else block for servers
    /// installed from a registry (`tether add`) and managed ones, warn for hand-written ones.
    #[arg(long, value_name = "off|warn|block", value_parser = str::parse::<tether_gateway::ScanPolicy>)]
    pub scan: Option<tether_gateway::ScanPolicy>,

    /// Do not pin tool definitions (by default a tool whose definition changed since it was
    /// first seen is withheld until `tether trust SERVER TOOL`).
    #[arg(long)]
    pub no_pins: bool,

    /// Offer only the tools whose SERVER__TOOL name matches PATTERN (`*` matches any run of
    /// characters, e.g. `github__*`). Repeatable.
    #[arg(long = "include-tools", value_name = "PATTERN")]
    pub include_tools: Vec<String>,

    /// Never offer the tools whose SERVER__TOOL name matches PATTERN (e.g. `*__delete_*`).
    /// Repeatable; wins over --include-tools.
    #[arg(long = "exclude-tools", value_name = "PATTERN")]
    pub exclude_tools: Vec<String>,

    /// Offer tools and prompts under their own names, without SERVER__ (for clients of one
    /// server that expect its names; a name two servers share gets a _2 suffix).
    #[arg(long)]
    pub bare_names: bool,

    /// The client capabilities declared to the servers (what a server may ask a client for
    /// through the gateway, and may base its offer on): a comma-separated list of sampling,
    /// elicitation, roots and apps (the MCP Apps extension), or all, or none. Default: over
    /// stdio, those the client declares in its initialize (read before the servers start);
    /// over HTTP, all.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub client_capabilities: Option<Vec<CapabilityArg>>,

    /// A tool result larger than N tokens (4 bytes of text count as a token) is cut to fit,
    /// with a note and a link, tether://results/ID, whose resources/read gives the whole
    /// (kept for the session; 256 MiB at most, the oldest dropped first). 256 to 100000000.
    /// Default: `max_result_tokens` in config.toml, else 25000.
    #[arg(long, value_name = "N", value_parser = tether_gateway::budget::parse_max_result_tokens)]
    pub max_result_tokens: Option<usize>,

    #[command(flatten)]
    pub tool_search: ToolSearchArgs,
}

/// The gateway's tool search and secret scan (`serve`, `run --gateway`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ToolSearchArgs {
    /// How tools/list offers the tools: all, search, auto (the default) or code.
    ///
    /// all lists every definition; search lists two tools, tether__find_tools and
    /// tether__call_tool, that find and call the others; auto searches when the definitions
    /// are over --tool-search-budget; code lists tether__run_code, which runs a JavaScript
    /// script that calls the tools, and tether__find_tools, which gives their declarations.
    /// Default: `tool_mode` in config.toml, else auto.
    #[arg(long, value_name = "MODE", value_parser = str::parse::<ToolMode>)]
    pub tool_mode: Option<ToolMode>,

    /// auto's budget for the tool definitions, in tokens (4 bytes of JSON count as a token).
    /// Default: `tool_search_budget` in config.toml, else 10000.
    #[arg(long, value_name = "N", value_parser = tether_gateway::tool_search::parse_budget_tokens, hide_short_help = true)]
    pub tool_search_budget: Option<usize>,

    /// In search mode, list this tool too (SERVER__TOOL), or every tool of this server
    /// (SERVER). Repeatable; adds to `always_load` in config.toml.
    #[arg(long = "always-load", value_name = "NAME", hide_short_help = true)]
    pub always_load: Vec<String>,

    /// Start a server whose tools were pinned before only when one of its tools is found or
    /// called; its pinned definitions are offered until then. Not with --wait-for-servers or
    /// --strict-mcp. Default: `lazy` in config.toml, else off.
    #[arg(long, hide_short_help = true)]
    pub lazy: bool,

    /// Code mode: the longest a script may run, in seconds (never past the call's timeout).
    /// Default: `code_timeout` in config.toml, else 30.
    #[arg(long, value_name = "SECS", value_parser = tether_gateway::tool_search::parse_code_limit, hide_short_help = true)]
    pub code_timeout: Option<u64>,

    /// Code mode: the memory a script may use, in MiB. Default: `code_memory` in config.toml,
    /// else 64.
    #[arg(long, value_name = "MIB", value_parser = tether_gateway::tool_search::parse_code_limit, hide_short_help = true)]
    pub code_memory: Option<u64>,

    /// Code mode: the tool calls a script may make. Default: `code_max_calls` in config.toml,
    /// else 1000.
    #[arg(long, value_name = "N", value_parser = tether_gateway::tool_search::parse_code_limit, hide_short_help = true)]
    pub code_max_calls: Option<u64>,

    /// What the scan for credential shapes (API keys, private keys, JWTs…) does in tool arguments
    /// and results: off, warn, mask or block. Default: `secret_scan`, else warn/mask.
    #[arg(long, value_name = "MODE", value_parser = str::parse::<tether_gateway::secret_scan::SecretScan>, hide_short_help = true)]
    pub secret_scan: Option<tether_gateway::secret_scan::SecretScan>,

    /// A client that declared Tasks (SEP-2663) calling a server that has none: the call runs
    /// as a task the gateway holds, answered in place when it ends within SECS, else with the
    /// task (0: always a task; off: never). Default: `task_after` in config.toml, else 5.
    #[arg(long, value_name = "SECS", value_parser = tether_gateway::parse_task_after, hide_short_help = true)]
    pub task_after: Option<tether_gateway::TaskAfter>,
}

/// One item of `--client-capabilities`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CapabilityArg {
    /// `sampling`: a server may ask for an LLM completion.
    Sampling,
    /// `elicitation` (form and URL): a server may ask the user for input.
    Elicitation,
    /// `roots` (with list changes): a server may ask for the client's roots.
    Roots,
    /// The MCP Apps extension (`io.modelcontextprotocol/ui`): the client's host renders a
    /// tool's `ui://` app.
    Apps,
    /// All four.
    All,
    /// None of them.
    None,
}

/// `tether trust`.
#[derive(Debug, Args)]
pub struct TrustArgs {
    #[command(flatten)]
    pub specs: SpecArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,

    /// The server's name.
    pub server: String,

    /// Only this tool (default: every tool the server offers now).
    pub tool: Option<String>,

    /// Startup timeout in seconds (a server launched through npx, uvx or another package runner gets 4× that: its first start downloads the package).
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub timeout: u64,
}

/// `tether audit`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Print the last lines of an audit log (default: the newest in $TETHER_HOME/audit).
    Tail(AuditTailArgs),
}

/// `tether audit tail`.
#[derive(Debug, Args)]
pub struct AuditTailArgs {
    /// How many lines.
    #[arg(long, short = 'n', value_name = "N", default_value_t = 20)]
    pub lines: usize,

    /// The log to read (default: the newest one).
    #[arg(value_name = "PATH")]
    pub path: Option<PathBuf>,
}

/// `tether install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The installation's name (letters, digits, '-', '_', '.'; unique). Default: the
    /// server's own name in the config; without NAME, a config of several servers installs
    /// each under its own name.
    pub name: Option<String>,

    /// The server's config: a path to a JSON file or inline JSON.
    #[arg(long, value_name = "SPEC")]
    pub from: String,

    /// Install only this server of the config (its key in the server map).
    #[arg(long, value_name = "KEY")]
    pub server: Option<String>,

    #[command(flatten)]
    pub secrets: SecretArgs,
}

/// `tether search`.
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Text to look for in names (and descriptions, where the registry supports it).
    #[arg(default_value = "")]
    pub query: String,

    /// Only the registry of this name (official, smithery, a configured or --registry one).
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
    /// Also ask this registry (the official API; after the configured ones): [NAME=]URL.
    #[arg(long = "registry", value_name = "[NAME=]URL")]
    pub registries: Vec<String>,

    /// At most N rows (1 to 100).
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub limit: u16,

    /// Show deprecated and deleted entries too.
    #[arg(long)]
    pub all: bool,

    /// Ask the registries even when the cache is fresh.
    #[arg(long)]
    pub refresh: bool,

    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tether show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The server's name (`io.github.owner/name`, Smithery's `@owner/name`; `REGISTRY:NAME`
    /// for one registry's entry).
    pub name: String,

    /// This version instead of the latest (official registry).
    #[arg(long, value_name = "V")]
    pub version: Option<String>,

    /// Only this registry (default: the official-API ones in order, then Smithery with a key).
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
    /// Also ask this registry (the official API; after the configured ones): [NAME=]URL.
    #[arg(long = "registry", value_name = "[NAME=]URL")]
    pub registries: Vec<String>,

    /// Ask the registry even when the cache is fresh.
    #[arg(long)]
    pub refresh: bool,

    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tether add --package`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PackageArg {
    /// An npm package (npx).
    Npm,
    /// A PyPI package (uvx).
    Pypi,
    /// An OCI image (docker).
    Oci,
    /// A NuGet package (dnx).
    Nuget,
    /// An MCP bundle.
    Mcpb,
    /// A hosted endpoint.
    Remote,
}

impl PackageArg {
    /// The registry's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            PackageArg::Npm => "npm",
            PackageArg::Pypi => "pypi",
            PackageArg::Oci => "oci",
            PackageArg::Nuget => "nuget",
            PackageArg::Mcpb => "mcpb",
            PackageArg::Remote => "remote",
        }
    }
}

/// `tether add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The server's name (`REGISTRY:NAME` for one registry's entry).
    pub name: String,
    /// Also ask this registry (the official API; after the configured ones): [NAME=]URL.
    #[arg(long = "registry", value_name = "[NAME=]URL")]
    pub registries: Vec<String>,

    /// Which package or the remote (default: the first package whose runner is on PATH,
    /// else the first remote).
    #[arg(long, value_enum)]
    pub package: Option<PackageArg>,

    /// This version instead of the latest.
    #[arg(long, value_name = "V")]
    pub version: Option<String>,

    /// A value for a non-secret input: NAME=VALUE (repeat for a repeatable input).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,

    #[command(flatten)]
    pub secrets: SecretArgs,

    /// The local installation's name (default: the last part of the registry name).
    #[arg(long = "name", id = "local_name", value_name = "LOCAL")]
    pub local_name: Option<String>,

    /// Test-connect timeout in seconds (a first npx/uvx/docker run downloads the package).
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout: u64,

    /// The sandbox it runs under, its test-connect too (stored with it): none, default,
    /// strict or a permission profile's path. Default: default (see docs/sandbox.md).
    #[arg(long, value_name = "MODE")]
    pub sandbox: Option<String>,

    /// Never ask: a missing required input is an error that names it (as without a terminal).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// mcpb: refuse a bundle without a valid, trusted signature (`require_signed_bundles`).
    #[arg(long)]
    pub require_signature: bool,
    /// mcpb: accept a bundle signed by a certificate that chains to no trusted root: self-signed
    /// or from an untrusted CA (`allow_self_signed_bundles` in config.toml). A signature that
    /// does not verify is refused whatever this says.
    #[arg(long)]
    pub allow_self_signed: bool,
}

/// `tether list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tether remove`.
#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The installation's name or UUID.
    #[arg(value_name = "NAME|UUID")]
    pub installation: String,
}

/// `tether completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `tether secrets`.
#[derive(Debug, Args)]
pub struct SecretsArgs {
    #[command(subcommand)]
    pub command: SecretsCommand,
}

/// What `tether secrets` does.
#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// List stored values: installation, variable, where it lives. Never a value.
    List {
        /// Only this installation (its name or UUID).
        installation: Option<String>,
        /// Only this variable.
        name: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Store a value for one variable of an installation (replacing a stored one), or a
    /// registry's API key with --registry.
    Set {
        /// The installation's name or UUID.
        #[arg(required_unless_present = "registry")]
        installation: Option<String>,
        /// The variable.
        #[arg(required_unless_present = "registry")]
        name: Option<String>,
        /// Store this registry's API key instead (read by `search`, `show` and `add` when
        /// SMITHERY_API_KEY is not set).
        #[arg(long, value_parser = ["smithery"], conflicts_with_all = ["installation", "name"])]
        registry: Option<String>,
        /// Where the value comes from: env:VAR, file:PATH, - (stdin) or prompt. Default: a
        /// hidden prompt on a terminal, else all of stdin (one trailing newline removed).
        #[arg(long, value_name = "SOURCE")]
        from: Option<String>,
    },
    /// Delete the stored value of one variable (each run then passes it with --secret), or a
    /// registry's API key with --registry.
    Rm {
        /// The installation's name or UUID.
        #[arg(required_unless_present = "registry")]
        installation: Option<String>,
        /// The variable.
        #[arg(required_unless_present = "registry")]
        name: Option<String>,
        /// Delete this registry's stored API key instead.
        #[arg(long, value_parser = ["smithery"], conflicts_with_all = ["installation", "name"])]
        registry: Option<String>,
    },
    /// Move every stored value into the OS credential store (`keyring`) or the file (`file`).
    Move {
        /// Where to.
        #[arg(value_parser = ["keyring", "file"])]
        to: String,
    },
    /// Enter a value `tether setup-mcp` asked for, on this terminal instead of its page. The
    /// value goes only to a page a running `tether setup-mcp` of this user announces under
    /// this TETHER_HOME, once that page proved it is the announced one; never to another
    /// address.
    Submit {
        /// The page's nonce (the last part of its URL), or the whole URL the agent passed on
        /// (it only picks one of the announced pages).
        nonce: String,
        /// Where the value comes from: env:VAR, file:PATH, - (stdin) or prompt. Default: a
        /// hidden prompt on a terminal, else all of stdin (one trailing newline removed).
        #[arg(long, value_name = "SOURCE")]
        from: Option<String>,
    },
}

/// `tether setup-mcp`.
#[derive(Debug, Args)]
pub struct SetupMcpArgs {
    /// Test-connect timeout in seconds (a first npx/uvx/docker run downloads the package).
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout: u64,

    /// Serve Streamable HTTP at http://ADDRESS/mcp instead of stdio (a loopback address only;
    /// port 0 picks a free one, printed on stderr). The entry pages share the port. Needs
    /// --token-file.
    #[arg(long, value_name = "127.0.0.1:PORT", requires = "token_file")]
    pub listen: Option<std::net::SocketAddr>,

    /// With --listen: the file holding the bearer token every MCP request must carry
    /// (`Authorization: Bearer TOKEN`).
    #[arg(long, value_name = "PATH", requires = "listen")]
    pub token_file: Option<std::path::PathBuf>,

    /// How long a URL elicitation waits for the person to submit the value, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub elicitation_timeout: u64,
    /// Also ask this registry (the official API; after the configured ones): [NAME=]URL.
    #[arg(long = "registry", value_name = "[NAME=]URL")]
    pub registries: Vec<String>,
}

/// `tether auth`.
#[derive(Debug, Args)]
pub struct AuthArgs {
    #[command(subcommand)]
    pub command: AuthCommand,
}

/// What `tether auth` does.
#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Log in to a remote MCP server: discovery, client registration, the browser step,
    /// tokens stored in the secret store.
    // Boxed: its many options would make every `tether auth` command as large.
    Login(Box<LoginArgs>),
    /// Whether a server needs OAuth, and whether a token is stored (with its expiry; never a
    /// value).
    Status {
        /// The server's URL, or a local installation's name. Without one: every installed
        /// remote server and every server with stored tokens.
        server: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete the stored tokens of a server.
    Logout {
        /// The server's URL, or a local installation's name.
        server: String,
    },
}

/// `tether auth login`'s arguments.
#[derive(Debug, Args)]
pub struct LoginArgs {
    /// The server's URL (its Streamable HTTP endpoint), or a local installation's name.
    pub server: String,
    /// Print the authorization URL and read the redirect URL pasted back on stdin.
    #[arg(long)]
    pub no_browser: bool,
    /// A pre-registered client id (skips dynamic client registration).
    #[arg(long, value_name = "ID")]
    pub client_id: Option<String>,
    /// With --client-id: the client's secret, from env:VAR, file:PATH, - (stdin) or prompt
    /// (never a literal).
    #[arg(long, value_name = "SOURCE", requires = "client_id")]
    pub client_secret: Option<String>,
    /// With --client-id: the client's private key (a PKCS#8 PEM, P-256 or RSA), from
    /// env:VAR, file:PATH, - (stdin) or prompt: it signs a short JWT for each token request
    /// (private_key_jwt) instead of a secret.
    #[arg(
        long,
        value_name = "SOURCE",
        requires = "client_id",
        conflicts_with = "client_secret"
    )]
    pub client_key: Option<String>,
    /// The URL of tether's client-id metadata document (an https URL you host): the client
    /// id when the authorization server supports such documents, instead of dynamic
    /// registration. Default: `oauth_client_metadata_url` in config.toml.
    #[arg(long, value_name = "URL", conflicts_with = "client_id")]
    pub client_metadata_url: Option<String>,
    /// Log in as the client itself, with no person and no browser (OAuth client
    /// credentials; for task workers and CI): needs --client-id and --client-secret.
    /// Without it, this is what tether does when the authorization server offers client
    /// credentials and not the browser's grant. The tokens are renewed the same way.
    #[arg(long, requires = "client_id")]
    pub client_credentials: bool,
    /// With --client-id: log in as a workload with the JWT its platform puts in PATH
    /// (workload identity federation, e.g. a Kubernetes projected service-account token):
    /// sent as an RFC 7523 assertion, no person and no browser. The file is read again at
    /// each renewal; its path is stored, never its contents.
    #[arg(
        long,
        value_name = "PATH",
        requires = "client_id",
        conflicts_with = "client_credentials"
    )]
    pub workload_token_file: Option<std::path::PathBuf>,
    /// With --client-id (and its --client-secret or --client-key): log in by
    /// enterprise-managed authorization — the identity provider at this issuer URL
    /// exchanges the person's ID token (--idp-id-token) for an ID-JAG, which the MCP
    /// server's authorization server takes instead of a browser login (SEP-990). Renewals
    /// exchange the stored ID token again while it is good.
    #[arg(
        long,
        value_name = "ISSUER",
        requires_all = ["client_id", "idp_client_id", "idp_id_token"],
        conflicts_with_all = ["client_credentials", "workload_token_file"]
    )]
    pub idp: Option<String>,
    /// With --idp: tether's client id at the identity provider.
    #[arg(long, value_name = "ID", requires = "idp")]
    pub idp_client_id: Option<String>,
    /// With --idp: the person's ID token from the identity provider, from env:VAR,
    /// file:PATH, cmd:PROGRAM, - (stdin) or prompt (never a literal).
    #[arg(long, value_name = "SOURCE", requires = "idp")]
    pub idp_id_token: Option<String>,
    /// How long to wait for the browser's redirect, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub timeout: u64,
}

/// `--sandbox`, on every command that starts stdio servers.
#[derive(Debug, Default, Args)]
pub struct SandboxArg {
    /// Sandbox for stdio servers: none, default, strict, or a permission profile's path.
    ///
    /// default: Landlock, seccomp, limits, and says what it cannot enforce; strict refuses to
    /// start unless all is enforced; a path names a permission profile (ToolHive's JSON
    /// format). Default: `sandbox` in config.toml, else none. See docs/sandbox.md.
    #[arg(long, value_name = "MODE")]
    pub sandbox: Option<String>,
}
