//! Every environment variable that tether's programs read, or set for a program they start,
//! declared once as a documented constant.
//!
//! Code names a variable only through [`EnvVars`]; the environment-variable table of
//! `docs/configuration.md` is checked against [`EnvVars::ALL`] by a test (`tests/docs.rs`), so
//! a variable cannot be added or renamed without the documentation following. Variables whose
//! reader is [`Reader::Tests`] are left out of that table, and out of every user document.
//!
//! ```
//! use tether_env::EnvVars;
//! assert_eq!(EnvVars::TETHER_HOME, "TETHER_HOME");
//! assert!(EnvVars::ALL.iter().any(|v| v.name == EnvVars::TETHER_API_KEY));
//! ```

#![deny(missing_docs)]

/// Which program reads (or sets) a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// The `tether` CLI (and the library crates it drives).
    Tether,
    /// The reference server, `tether-server`.
    Server,
    /// Set by `tether run -- <harness>` for the harness it starts; read from the user's
    /// environment to find the harness's own files.
    Harness,
    /// Read by the test suite only (or by shipped code only when a test sets it): documented
    /// for developers (`docs/development.md`), never in the user documentation.
    Tests,
}

/// One variable, for documentation and the documentation check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVarDoc {
    /// The variable's name.
    pub name: &'static str,
    /// Who reads or sets it.
    pub reader: Reader,
    /// One line on what it does.
    pub summary: &'static str,
}

/// The environment variables, as constants.
#[derive(Debug)]
pub struct EnvVars;

impl EnvVars {
    /// tether's data directory: the local store (`tether.db`), `config.toml`, run directories.
    /// Default: the platform data directory (`~/.local/share/tether` on Linux).
    pub const TETHER_HOME: &'static str = "TETHER_HOME";

    /// The managed server's GraphQL endpoint (overridden by `--server-url`; falls back to
    /// `server_url` in `$TETHER_HOME/config.toml`). A URL with no path, as `tether-server`
    /// prints it, means its `/graphql`.
    pub const TETHER_SERVER_URL: &'static str = "TETHER_SERVER_URL";

    /// The most time managed resolution may take, retries and backoff included, in whole
    /// seconds (1 to 3600; default 30). `--managed-timeout` overrides it; falls back to
    /// `managed_timeout` in `$TETHER_HOME/config.toml`.
    pub const TETHER_MANAGED_TIMEOUT: &'static str = "TETHER_MANAGED_TIMEOUT";

    /// The API key sent as `Authorization: Bearer <key>` to the managed server. Surrounding
    /// whitespace is trimmed. Mutually exclusive with [`EnvVars::TETHER_API_KEY_FILE`].
    pub const TETHER_API_KEY: &'static str = "TETHER_API_KEY";

    /// A file holding the API key (contents trimmed), for secret managers that mount files.
    /// Mutually exclusive with [`EnvVars::TETHER_API_KEY`].
    pub const TETHER_API_KEY_FILE: &'static str = "TETHER_API_KEY_FILE";

    /// The official MCP Registry's base URL for `search` and `show` (default
    /// `https://registry.modelcontextprotocol.io`); falls back to `registry_url` in
    /// `$TETHER_HOME/config.toml`.
    pub const TETHER_REGISTRY_URL: &'static str = "TETHER_REGISTRY_URL";

    /// Smithery's API base URL (default `https://api.smithery.ai`); falls back to
    /// `smithery_url` in `$TETHER_HOME/config.toml`.
    pub const TETHER_SMITHERY_URL: &'static str = "TETHER_SMITHERY_URL";

    /// Smithery's API key (a secret: sent only as a Bearer header to Smithery, never shown or
    /// logged). Without it (or `smithery_api_key_file` in config.toml) search skips Smithery.
    pub const SMITHERY_API_KEY: &'static str = "SMITHERY_API_KEY";

    /// Where the values of installed servers' secrets go: `auto` (default: the OS credential
    /// store when one answers, else a 0600 file in `TETHER_HOME`, announced once), `keyring`
    /// (the credential store or an error) or `file`. Falls back to `secret_store` in
    /// `$TETHER_HOME/config.toml`.
    pub const TETHER_SECRET_STORE: &'static str = "TETHER_SECRET_STORE";

    /// The D-Bus session bus the Secret Service is reached on (read by the zbus client of the
    /// secret store; without it the bus at `$XDG_RUNTIME_DIR/bus` is tried).
    pub const DBUS_SESSION_BUS_ADDRESS: &'static str = "DBUS_SESSION_BUS_ADDRESS";

    /// The user's runtime directory: where the D-Bus session bus socket (`bus`) is looked for
    /// when [`EnvVars::DBUS_SESSION_BUS_ADDRESS`] is unset.
    pub const XDG_RUNTIME_DIR: &'static str = "XDG_RUNTIME_DIR";

    /// Tests only: `STEP:PATH` makes the local store stop at STEP of an install (`pending`:
    /// pending rows committed; `values`: values written, installation not committed;
    /// `committed`), create the file PATH and wait until PATH is removed (at most 60 s), so a
    /// test can SIGKILL it there. Read only by builds with tether-store's `test-hooks`
    /// feature (the test builds); a shipped `tether` ignores it.
    pub const TETHER_TEST_STORE_PAUSE: &'static str = "TETHER_TEST_STORE_PAUSE";

    /// Tests: `postgres` runs tether-server's test suite on PostgreSQL (a throwaway cluster
    /// the tests start) instead of SQLite; `postgres-replicas` runs the end-to-end tests
    /// against two replicas on one PostgreSQL database.
    pub const TETHER_TEST_BACKEND: &'static str = "TETHER_TEST_BACKEND";

    /// Tests: set (to anything) in CI, where tests that need a service (the Secret Service)
    /// fail instead of skipping when it is unreachable.
    pub const CI: &'static str = "CI";

    /// The command `tether auth login` opens the authorization URL with (the URL is its last
    /// argument); unset, the platform opener (`xdg-open`, `open`) is run and the URL printed.
    pub const BROWSER: &'static str = "BROWSER";

    /// Disables colour in tether's output when set to anything (<https://no-color.org>).
    pub const NO_COLOR: &'static str = "NO_COLOR";

    /// tether's log filter (tracing-subscriber's `EnvFilter` syntax); `-v`/`-vv`/`-vvv` win.
    pub const RUST_LOG: &'static str = "RUST_LOG";

    /// OpenTelemetry: the OTLP/HTTP base URL (`/v1/traces` is appended); set, tether exports
    /// its gateway spans there (docs/observability.md).
    pub const OTEL_EXPORTER_OTLP_ENDPOINT: &'static str = "OTEL_EXPORTER_OTLP_ENDPOINT";

    /// OpenTelemetry: the OTLP/HTTP URL of traces, used as it is; wins over the base URL.
    pub const OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: &'static str =
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";

    /// OpenTelemetry: the exported `service.name` (default `tether`).
    pub const OTEL_SERVICE_NAME: &'static str = "OTEL_SERVICE_NAME";

    /// OpenTelemetry: more resource attributes, `key=value,key=value`.
    pub const OTEL_RESOURCE_ATTRIBUTES: &'static str = "OTEL_RESOURCE_ATTRIBUTES";

    /// OpenTelemetry: `true` keeps export off whatever else is set.
    pub const OTEL_SDK_DISABLED: &'static str = "OTEL_SDK_DISABLED";

    /// OpenTelemetry: `none` keeps trace export off.
    pub const OTEL_TRACES_EXPORTER: &'static str = "OTEL_TRACES_EXPORTER";

    /// OpenTelemetry: the OTLP/HTTP URL of metrics, used as it is; wins over the base URL.
    pub const OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: &'static str =
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";

    /// OpenTelemetry: `none` keeps metric export off.
    pub const OTEL_METRICS_EXPORTER: &'static str = "OTEL_METRICS_EXPORTER";

    /// OpenTelemetry: milliseconds between metric exports (the SDK's default 60000).
    pub const OTEL_METRIC_EXPORT_INTERVAL: &'static str = "OTEL_METRIC_EXPORT_INTERVAL";

    /// OpenTelemetry: `http/protobuf` (the default) or `grpc`, for every signal.
    pub const OTEL_EXPORTER_OTLP_PROTOCOL: &'static str = "OTEL_EXPORTER_OTLP_PROTOCOL";

    /// OpenTelemetry: the protocol of traces; wins over the one for every signal.
    pub const OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: &'static str =
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";

    /// OpenTelemetry: the protocol of metrics; wins over the one for every signal.
    pub const OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: &'static str =
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL";

    /// The reference server's master key: 32 bytes as 64 hex digits or standard base64.
    /// Required unless `--insecure-dev-key` is given. Never on the command line.
    pub const TETHER_SERVER_KEY: &'static str = "TETHER_SERVER_KEY";

    /// During a key rotation, the reference server's old master key: values sealed under it
    /// still open, while new ones are sealed under `TETHER_SERVER_KEY`. Unset once
    /// `tether-server admin rotate-key` has finished.
    pub const TETHER_SERVER_PREVIOUS_KEY: &'static str = "TETHER_SERVER_PREVIOUS_KEY";

    /// The reference server's database: `sqlite://DIR` or `postgres://…` (may hold a
    /// password, which is why it may come from the environment rather than `--database-url`).
    pub const TETHER_SERVER_DATABASE_URL: &'static str = "TETHER_SERVER_DATABASE_URL";

    /// With `sslmode=require` in the PostgreSQL URL: a PEM file of certificate authorities
    /// trusted for the database's certificate, besides the system's.
    pub const TETHER_SERVER_DATABASE_CA: &'static str = "TETHER_SERVER_DATABASE_CA";

    /// The reference server's log filter (`EnvFilter` syntax); default `info`.
    pub const TETHER_SERVER_LOG: &'static str = "TETHER_SERVER_LOG";

    /// The user's home directory: where harness files are found by default.
    pub const HOME: &'static str = "HOME";

    /// W3C trace context: with trace export on, `tether run` sets it for the harness (naming
    /// the run's span) and continues the one it was given.
    pub const TRACEPARENT: &'static str = "TRACEPARENT";

    /// Where `tether run -- PROGRAM` looks `PROGRAM` up (before its supervisor starts it).
    pub const PATH: &'static str = "PATH";

    /// Claude Code's cache root: `tether run -- claude` points it into the run directory
    /// (Claude logs expanded server headers there), read to keep the user's own cache.
    pub const XDG_CACHE_HOME: &'static str = "XDG_CACHE_HOME";

    /// Codex's home: `tether run -- codex` points it at a private copy in the run directory.
    pub const CODEX_HOME: &'static str = "CODEX_HOME";

    /// Gemini CLI's home: `tether run -- gemini` points it at a private one in the run
    /// directory.
    pub const GEMINI_CLI_HOME: &'static str = "GEMINI_CLI_HOME";

    /// GitHub Copilot CLI's home (default `~/.copilot`): `tether run -- copilot` points it at a
    /// private one in the run directory.
    pub const COPILOT_HOME: &'static str = "COPILOT_HOME";

    /// Gemini CLI: `true` trusts the working folder for a run, `false` distrusts it. Read by
    /// `tether run -- gemini`, which refuses a folder Gemini does not trust (Gemini disables
    /// every MCP server there) unless this says `true`.
    pub const GEMINI_CLI_TRUST_WORKSPACE: &'static str = "GEMINI_CLI_TRUST_WORKSPACE";

    /// Gemini CLI: `true` makes every folder untrusted (read like `GEMINI_CLI_TRUST_WORKSPACE`).
    pub const GEMINI_RESTRICTED_MODE: &'static str = "GEMINI_RESTRICTED_MODE";

    /// Gemini CLI's folder trust rules file (default `$GEMINI_CLI_HOME/.gemini/trustedFolders.json`),
    /// read by `tether run -- gemini`.
    pub const GEMINI_CLI_TRUSTED_FOLDERS_PATH: &'static str = "GEMINI_CLI_TRUSTED_FOLDERS_PATH";

    /// Gemini CLI's system settings file (default `/etc/gemini-cli/settings.json`), where
    /// `security.folderTrust.enabled` may turn folder trust off; read by `tether run -- gemini`.
    pub const GEMINI_CLI_SYSTEM_SETTINGS_PATH: &'static str = "GEMINI_CLI_SYSTEM_SETTINGS_PATH";

    /// opencode's inline config: `tether run -- opencode` hands the servers over in it.
    pub const OPENCODE_CONFIG_CONTENT: &'static str = "OPENCODE_CONFIG_CONTENT";

    /// Tests: where npm packages the tests need are installed (default `.cache/npm` in the
    /// workspace).
    pub const TETHER_NPM_PREFIX: &'static str = "TETHER_NPM_PREFIX";

    /// Tests: the shared config vectors to check against (default: the copy vendored in
    /// `crates/tether-config/tests/`).
    pub const TETHER_VECTORS: &'static str = "TETHER_VECTORS";

    /// Every variable above, with who reads it and a one-line summary.
    pub const ALL: &'static [EnvVarDoc] = &[
        doc(
            Self::TETHER_HOME,
            Reader::Tether,
            "data directory: local store, config.toml, run directories",
        ),
        doc(
            Self::TETHER_SERVER_URL,
            Reader::Tether,
            "the managed server's GraphQL endpoint",
        ),
        doc(
            Self::TETHER_MANAGED_TIMEOUT,
            Reader::Tether,
            "deadline for managed resolution, in seconds",
        ),
        doc(
            Self::TETHER_API_KEY,
            Reader::Tether,
            "API key for the managed server",
        ),
        doc(
            Self::TETHER_API_KEY_FILE,
            Reader::Tether,
            "file holding the API key",
        ),
        doc(
            Self::TETHER_REGISTRY_URL,
            Reader::Tether,
            "the official MCP Registry's base URL",
        ),
        doc(
            Self::TETHER_SMITHERY_URL,
            Reader::Tether,
            "Smithery's API base URL",
        ),
        doc(Self::SMITHERY_API_KEY, Reader::Tether, "Smithery's API key"),
        doc(
            Self::TETHER_SECRET_STORE,
            Reader::Tether,
            "where stored secrets go: auto, keyring or file",
        ),
        doc(
            Self::DBUS_SESSION_BUS_ADDRESS,
            Reader::Tether,
            "the D-Bus session bus of the Secret Service",
        ),
        doc(
            Self::XDG_RUNTIME_DIR,
            Reader::Tether,
            "where the D-Bus session bus socket is looked for",
        ),
        doc(
            Self::BROWSER,
            Reader::Tether,
            "the command `tether auth login` opens the authorization URL with (unset: `xdg-open` or `open`)",
        ),
        doc(Self::NO_COLOR, Reader::Tether, "no colour in output"),
        doc(
            Self::RUST_LOG,
            Reader::Tether,
            "log filter when no -v is given",
        ),
        doc(
            Self::OTEL_EXPORTER_OTLP_ENDPOINT,
            Reader::Tether,
            "OTLP/HTTP base URL: set, `tether serve` exports traces and metrics there",
        ),
        doc(
            Self::OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
            Reader::Tether,
            "OTLP/HTTP traces URL, used as it is",
        ),
        doc(
            Self::OTEL_SERVICE_NAME,
            Reader::Tether,
            "exported service.name (default tether)",
        ),
        doc(
            Self::OTEL_RESOURCE_ATTRIBUTES,
            Reader::Tether,
            "more exported resource attributes",
        ),
        doc(
            Self::OTEL_SDK_DISABLED,
            Reader::Tether,
            "`true`: no OpenTelemetry export",
        ),
        doc(
            Self::OTEL_TRACES_EXPORTER,
            Reader::Tether,
            "`none`: no trace export",
        ),
        doc(
            Self::OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
            Reader::Tether,
            "OTLP/HTTP metrics URL, used as it is",
        ),
        doc(
            Self::OTEL_METRICS_EXPORTER,
            Reader::Tether,
            "`none`: no metric export",
        ),
        doc(
            Self::OTEL_METRIC_EXPORT_INTERVAL,
            Reader::Tether,
            "milliseconds between metric exports (default 60000)",
        ),
        doc(
            Self::OTEL_EXPORTER_OTLP_PROTOCOL,
            Reader::Tether,
            "`http/protobuf` (default) or `grpc`",
        ),
        doc(
            Self::OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
            Reader::Tether,
            "protocol of traces (wins over the general one)",
        ),
        doc(
            Self::OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
            Reader::Tether,
            "protocol of metrics (wins over the general one)",
        ),
        doc(
            Self::TETHER_SERVER_KEY,
            Reader::Server,
            "master key sealing values at rest",
        ),
        doc(
            Self::TETHER_SERVER_PREVIOUS_KEY,
            Reader::Server,
            "old master key, during a key rotation",
        ),
        doc(
            Self::TETHER_SERVER_DATABASE_URL,
            Reader::Server,
            "database URL (sqlite:// or postgres://)",
        ),
        doc(
            Self::TETHER_SERVER_DATABASE_CA,
            Reader::Server,
            "CA file for the database's TLS certificate",
        ),
        doc(Self::TETHER_SERVER_LOG, Reader::Server, "log filter"),
        doc(
            Self::TRACEPARENT,
            Reader::Harness,
            "set with trace export on: the run's span, for harnesses that trace",
        ),
        doc(
            Self::HOME,
            Reader::Harness,
            "where harness files are found by default",
        ),
        doc(
            Self::PATH,
            Reader::Harness,
            "where the harness command is looked up",
        ),
        doc(
            Self::XDG_CACHE_HOME,
            Reader::Harness,
            "Claude Code's cache, moved into the run directory",
        ),
        doc(
            Self::CODEX_HOME,
            Reader::Harness,
            "Codex's home, a private copy for the run",
        ),
        doc(
            Self::COPILOT_HOME,
            Reader::Harness,
            "GitHub Copilot CLI's home, a private one for the run",
        ),
        doc(
            Self::GEMINI_CLI_HOME,
            Reader::Harness,
            "Gemini CLI's home, a private one for the run",
        ),
        doc(
            Self::GEMINI_CLI_TRUST_WORKSPACE,
            Reader::Harness,
            "Gemini CLI: `true` trusts the working folder for a run",
        ),
        doc(
            Self::GEMINI_RESTRICTED_MODE,
            Reader::Harness,
            "Gemini CLI: `true` trusts no folder",
        ),
        doc(
            Self::GEMINI_CLI_TRUSTED_FOLDERS_PATH,
            Reader::Harness,
            "Gemini CLI's folder trust rules file",
        ),
        doc(
            Self::GEMINI_CLI_SYSTEM_SETTINGS_PATH,
            Reader::Harness,
            "Gemini CLI's system settings file",
        ),
        doc(
            Self::OPENCODE_CONFIG_CONTENT,
            Reader::Harness,
            "opencode's servers, handed over inline",
        ),
        doc(
            Self::TETHER_NPM_PREFIX,
            Reader::Tests,
            "where the tests' npm packages are installed",
        ),
        doc(
            Self::TETHER_TEST_STORE_PAUSE,
            Reader::Tests,
            "stop an install at a step, for kill tests",
        ),
        doc(
            Self::TETHER_TEST_BACKEND,
            Reader::Tests,
            "postgres / postgres-replicas: server suite or e2e on PostgreSQL",
        ),
        doc(
            Self::CI,
            Reader::Tests,
            "in CI: service-backed tests fail instead of skipping",
        ),
        doc(
            Self::TETHER_VECTORS,
            Reader::Tests,
            "the config vectors file the tests check",
        ),
    ];
}

const fn doc(name: &'static str, reader: Reader, summary: &'static str) -> EnvVarDoc {
    EnvVarDoc {
        name,
        reader,
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_upper_case() {
        for (i, var) in EnvVars::ALL.iter().enumerate() {
            assert!(
                var.name
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
                "{} is not an upper-case variable name",
                var.name
            );
            assert!(
                !EnvVars::ALL[..i].iter().any(|v| v.name == var.name),
                "{} is listed twice",
                var.name
            );
        }
    }
}
