//! The managed-server settings (the environment variables are declared in `tether-env`).
//!
//! Precedence for the managed server: `--server-url` > `TETHER_SERVER_URL` > `server_url` in
//! `$TETHER_HOME/config.toml`; the API key: `TETHER_API_KEY` / `TETHER_API_KEY_FILE` >
//! `api_key` / `api_key_file` in config.toml. Never from argv. The resolution deadline:
//! `--managed-timeout` > `TETHER_MANAGED_TIMEOUT` > `managed_timeout` in config.toml > 30 s.
//! The registries: `TETHER_REGISTRY_URL` / `TETHER_SMITHERY_URL` > `registry_url` /
//! `smithery_url` in config.toml > the public ones; Smithery's key: `SMITHERY_API_KEY` >
//! `smithery_api_key_file` in config.toml > the secret store (`tether secrets set --registry
//! smithery`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde::Deserialize;
use tether_config::SecretValue;
use tether_env::EnvVars;
use tether_gateway::secret_scan::{SecretScan, SecretScanPolicy};
use tether_graphql::{HttpClientSettings, HttpManagedMcpClient, ManagedMcpClient};

use tether_registry::{ApiKey, NamedRegistry};
use tether_store::{Registry, RegistryKey};

use crate::exit::UsageError;

const TETHER_HOME: &str = EnvVars::TETHER_HOME;
const TETHER_API_KEY: &str = EnvVars::TETHER_API_KEY;
const TETHER_API_KEY_FILE: &str = EnvVars::TETHER_API_KEY_FILE;
const TETHER_SERVER_URL: &str = EnvVars::TETHER_SERVER_URL;
const TETHER_MANAGED_TIMEOUT: &str = EnvVars::TETHER_MANAGED_TIMEOUT;

/// The longest resolution deadline accepted, in seconds (an hour).
const MAX_MANAGED_TIMEOUT: u64 = 3600;

/// The hint shown when a managed UUID needs a server and none is configured (the error
/// itself names the environment variables).
pub fn configure_hint() -> String {
    format!(
        "the server can also be given with --server-url URL, or as server_url (with api_key_file) in ${TETHER_HOME}/config.toml; the key can be {TETHER_API_KEY} or {TETHER_API_KEY_FILE}"
    )
}

/// `$TETHER_HOME/config.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    server_url: Option<String>,
    api_key: Option<String>,
    api_key_file: Option<PathBuf>,
    managed_timeout: Option<u64>,
    registry_url: Option<String>,
    registries: Option<Vec<NamedRegistry>>,
    smithery_url: Option<String>,
    smithery_api_key_file: Option<PathBuf>,
    secret_store: Option<String>,
    oauth_client_metadata_url: Option<String>,
    scan: Option<String>,
    max_result_tokens: Option<u64>,
    wait_for_servers: Option<bool>,
    first_list_grace: Option<u64>,
    task_after: Option<toml::Value>,
    sandbox: Option<String>,
    tool_mode: Option<String>,
    tool_search_budget: Option<u64>,
    always_load: Option<Vec<String>>,
    lazy: Option<bool>,
    code_timeout: Option<u64>,
    code_memory: Option<u64>,
    code_max_calls: Option<u64>,
    secret_scan: Option<String>,
    require_signed_bundles: Option<bool>,
    allow_self_signed_bundles: Option<bool>,
    telemetry: Option<tether_log::telemetry::Settings>,
}

/// `[telemetry]` in config.toml (the `OTEL_*` variables win over it); a config.toml that
/// cannot be read gives none here: the command says why when it reads the file itself.
pub fn telemetry() -> tether_log::telemetry::Settings {
    let file = data_dir().and_then(|dir| config_file(&dir));
    file.ok()
        .and_then(|file| file.telemetry)
        .unwrap_or_default()
}

/// The client-id metadata document URL `tether auth login` uses: the flag, else
/// `oauth_client_metadata_url` in config.toml, else none.
pub fn client_metadata_url(flag: Option<&str>) -> anyhow::Result<Option<String>> {
    match flag {
        Some(url) => Ok(Some(url.to_owned())),
        None => Ok(config_file(&data_dir()?)?.oauth_client_metadata_url),
    }
}

/// The gateway's scan policy for every server from `scan` in config.toml (`off`, `warn`,
/// `block`), if it sets one.
pub fn scan_policy() -> anyhow::Result<Option<tether_gateway::ScanPolicy>> {
    let Some(text) = config_file(&data_dir()?)?.scan else {
        return Ok(None);
    };
    let policy = text
        .parse()
        .map_err(|e| UsageError::new(format!("scan in config.toml: {e}")))?;
    Ok(Some(policy))
}

/// The gateway's scan for credential shapes: the flag, else `secret_scan` in config.toml (both
/// directions), else warn for arguments and mask for results.
pub fn secret_scan(flag: Option<SecretScan>) -> anyhow::Result<SecretScanPolicy> {
    let file = config_file(&data_dir()?)?.secret_scan;
    SecretScanPolicy::chosen(flag, file.as_deref())
        .map_err(|e| UsageError::new(format!("secret_scan in config.toml: {e}")).into())
}

/// The gateway's budget for tool results, in tokens: the flag, else `max_result_tokens` in
/// config.toml, else the default (25,000).
pub fn max_result_tokens(flag: Option<usize>) -> anyhow::Result<usize> {
    if let Some(tokens) = flag {
        return Ok(tokens);
    }
    match config_file(&data_dir()?)?.max_result_tokens {
        None => Ok(tether_gateway::budget::DEFAULT_MAX_RESULT_TOKENS),
        Some(tokens) => tether_gateway::budget::parse_max_result_tokens(&tokens.to_string())
            .map_err(|e| UsageError::new(format!("max_result_tokens in config.toml: {e}")).into()),
    }
}

/// Whether the gateway starts every server before it serves: the flag (`--wait-for-servers`,
/// or `--strict-mcp`, which implies it), else `wait_for_servers` in config.toml, else no.
pub fn wait_for_servers(flag: bool) -> anyhow::Result<bool> {
    if flag {
        return Ok(true);
    }
    Ok(config_file(&data_dir()?)?.wait_for_servers.unwrap_or(false))
}

/// The default of [`first_list_grace`], in seconds.
pub const FIRST_LIST_GRACE_SECS: u64 = 5;

/// How long `run --gateway` holds the first `tools/list` of a harness that lists tools once:
/// `--first-list-grace`, else `first_list_grace` in config.toml, else
/// [`FIRST_LIST_GRACE_SECS`]; 0 answers at once.
pub fn first_list_grace(flag: Option<u64>) -> anyhow::Result<std::time::Duration> {
    let seconds = match flag {
        Some(seconds) => seconds,
        None => config_file(&data_dir()?)?
            .first_list_grace
            .unwrap_or(FIRST_LIST_GRACE_SECS),
    };
    Ok(std::time::Duration::from_secs(seconds))
}

/// When a Tasks client's call to a server without Tasks becomes a task the gateway holds:
/// `--task-after`, else `task_after` in config.toml, else
/// [`tether_gateway::DEFAULT_TASK_AFTER`]; `None` for off.
pub fn task_after(
    flag: Option<tether_gateway::TaskAfter>,
) -> anyhow::Result<Option<std::time::Duration>> {
    use tether_gateway::{TaskAfter, parse_task_after};
    let chosen = match flag {
        Some(chosen) => chosen,
        None => match config_file(&data_dir()?)?.task_after {
            None => return Ok(Some(tether_gateway::DEFAULT_TASK_AFTER)),
            Some(toml::Value::Integer(seconds)) => {
                TaskAfter(Some(u64::try_from(seconds).map_err(|_| {
                    UsageError::new("task_after in config.toml: seconds must not be negative")
                })?))
            }
            Some(toml::Value::String(text)) => parse_task_after(&text)
                .map_err(|e| UsageError::new(format!("task_after in config.toml: {e}")))?,
            Some(_) => {
                return Err(UsageError::new(
                    "task_after in config.toml: give a number of seconds or \"off\"",
                )
                .into());
            }
        },
    };
    Ok(chosen.0.map(std::time::Duration::from_secs))
}

/// What `add` accepts of an mcpb bundle's signature: each flag, else its key in config.toml.
pub fn bundle_policy(require: bool, allow: bool) -> anyhow::Result<tether_install::Policy> {
    let file = config_file(&data_dir()?)?;
    Ok(tether_install::Policy {
        require_signature: require || file.require_signed_bundles.unwrap_or(false),
        allow_self_signed: allow || file.allow_self_signed_bundles.unwrap_or(false),
    })
}

/// The sandbox of stdio servers: `--sandbox`, else `sandbox` in config.toml, else none.
pub fn sandbox(flag: Option<&str>) -> anyhow::Result<Option<tether_sandbox::Policy>> {
    let (text, source) = match flag {
        Some(text) => (text.to_owned(), "--sandbox"),
        None => match config_file(&data_dir()?)?.sandbox {
            Some(text) => (text, "sandbox in config.toml"),
            None => return Ok(None),
        },
    };
    tether_sandbox::Mode::parse(&text)
        .and_then(|mode| mode.policy())
        .map_err(|e| UsageError::new(format!("{source}: {e}")).into())
}

/// The gateway's tool search: each flag, else its key in config.toml (`tool_mode`,
/// `tool_search_budget`, `always_load`: the flags' names add to the file's), else the default.
pub fn tool_search(
    flags: &crate::cli::ToolSearchArgs,
) -> anyhow::Result<tether_gateway::tool_search::ToolSearch> {
    let file = config_file(&data_dir()?)?;
    let defaults = tether_gateway::tool_search::ToolSearch::default();
    let mode = match (flags.tool_mode, file.tool_mode) {
        (Some(mode), _) => mode,
        (None, Some(text)) => text
            .parse()
            .map_err(|e| UsageError::new(format!("tool_mode in config.toml: {e}")))?,
        (None, None) => defaults.mode,
    };
    let budget_tokens = match (flags.tool_search_budget, file.tool_search_budget) {
        (Some(tokens), _) => tokens,
        (None, Some(tokens)) => {
            tether_gateway::tool_search::parse_budget_tokens(&tokens.to_string())
                .map_err(|e| UsageError::new(format!("tool_search_budget in config.toml: {e}")))?
        }
        (None, None) => defaults.budget_tokens,
    };
    let mut names = file.always_load.unwrap_or_default();
    names.extend(flags.always_load.iter().cloned());
    let limit = |flag: Option<u64>, key: &str, value: Option<u64>| -> anyhow::Result<Option<u64>> {
        match (flag, value) {
            (Some(flag), _) => Ok(Some(flag)),
            (None, Some(value)) => {
                tether_gateway::tool_search::parse_code_limit(&value.to_string())
                    .map(Some)
                    .map_err(|e| UsageError::new(format!("{key} in config.toml: {e}")).into())
            }
            (None, None) => Ok(None),
        }
    };
    let mut code = defaults.code;
    if let Some(seconds) = limit(flags.code_timeout, "code_timeout", file.code_timeout)? {
        code.time = std::time::Duration::from_secs(seconds);
    }
    if let Some(mib) = limit(flags.code_memory, "code_memory", file.code_memory)? {
        code.memory = usize::try_from(mib.saturating_mul(1024 * 1024)).unwrap_or(usize::MAX);
    }
    if let Some(calls) = limit(flags.code_max_calls, "code_max_calls", file.code_max_calls)? {
        code.calls = usize::try_from(calls).unwrap_or(usize::MAX);
    }
    Ok(tether_gateway::tool_search::ToolSearch {
        mode,
        budget_tokens,
        always_load: names,
        lazy: flags.lazy || file.lazy.unwrap_or(false),
        code,
    })
}

/// The data directory.
pub fn data_dir() -> anyhow::Result<PathBuf> {
    Ok(tether_store::default_data_dir()?)
}

/// Where new secret values go: `TETHER_SECRET_STORE` > `secret_store` in config.toml > auto.
fn secret_preference(dir: &Path) -> anyhow::Result<tether_store::Preference> {
    let (text, source) = match env_text(EnvVars::TETHER_SECRET_STORE) {
        Some(text) => (text, EnvVars::TETHER_SECRET_STORE.to_owned()),
        None => match config_file(dir)?.secret_store {
            Some(text) => (text, "secret_store in config.toml".to_owned()),
            None => return Ok(tether_store::Preference::Auto),
        },
    };
    text.parse()
        .map_err(|e| UsageError::new(format!("{source}: {e}")).into())
}

/// The local store in the data directory, its values in the secret store the settings
/// choose. Prints the secret store's one-time notice when opening it created the file (an
/// older store's values moved there).
pub fn open_store() -> anyhow::Result<tether_store::Store> {
    let dir = data_dir()?;
    let secrets = tether_store::SecretStore::new(&dir, secret_preference(&dir)?);
    let store = tether_store::Store::open_with(&dir, secrets)
        .with_context(|| format!("opening the local store in {}", dir.display()))?;
    announce(&store);
    Ok(store)
}

/// The local store when its database exists; `None` (nothing created) when it does not.
pub fn open_existing_store() -> anyhow::Result<Option<tether_store::Store>> {
    if !data_dir()?.join(tether_store::DATABASE_FILE).exists() {
        return Ok(None);
    }
    open_store().map(Some)
}

/// Prints the secret store's one-time notice (the 0600 file was just created), if any.
pub fn announce(store: &tether_store::Store) {
    if let Some(notice) = store.secret_store().take_notice() {
        eprintln!("{notice}");
    }
}

fn config_file(dir: &Path) -> anyhow::Result<ConfigFile> {
    let path = dir.join("config.toml");
    match std::fs::read_to_string(&path) {
        Ok(text) => toml::from_str(&text).map_err(|e| {
            UsageError::new(format!("{} is invalid: {}", path.display(), e.message())).into()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ConfigFile::default()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// The resolution deadline in seconds: the flag, else the environment, else config.toml.
fn managed_timeout(flag: Option<u64>, file: Option<u64>) -> anyhow::Result<Option<u64>> {
    if flag.is_some() {
        return Ok(flag);
    }
    let from_env = match std::env::var(TETHER_MANAGED_TIMEOUT) {
        Ok(text) if !text.trim().is_empty() => Some(text.trim().parse::<u64>().map_err(|_| {
            UsageError::new(format!(
                "{TETHER_MANAGED_TIMEOUT} must be a whole number of seconds from 1 to {MAX_MANAGED_TIMEOUT}"
            ))
        })?),
        _ => None,
    };
    let (seconds, source) = match (from_env, file) {
        (Some(seconds), _) => (seconds, TETHER_MANAGED_TIMEOUT),
        (None, Some(seconds)) => (seconds, "managed_timeout in config.toml"),
        (None, None) => return Ok(None),
    };
    if !(1..=MAX_MANAGED_TIMEOUT).contains(&seconds) {
        return Err(UsageError::new(format!(
            "{source} must be from 1 to {MAX_MANAGED_TIMEOUT} seconds (it is {seconds})"
        ))
        .into());
    }
    Ok(Some(seconds))
}

/// The managed client, when a server is configured. `timeout_secs` is `--managed-timeout`.
pub fn managed_client(
    server_url: Option<&str>,
    timeout_secs: Option<u64>,
) -> anyhow::Result<Option<Arc<dyn ManagedMcpClient>>> {
    let file = config_file(&data_dir()?)?;
    let url = server_url
        .map(str::to_owned)
        .or_else(|| {
            std::env::var(TETHER_SERVER_URL)
                .ok()
                .filter(|v| !v.is_empty())
        })
        .or(file.server_url.clone());
    let Some(url) = url else {
        return Ok(None);
    };
    let endpoint = url.parse().map_err(|_| {
        UsageError::new(format!(
            "the managed server URL is not a valid URL; set {TETHER_SERVER_URL} or --server-url to e.g. https://mcp.example.com/graphql"
        ))
    })?;
    let mut settings = HttpClientSettings::new(endpoint);
    with_graphql_path(&mut settings);
    if let Some(seconds) = managed_timeout(timeout_secs, file.managed_timeout)? {
        settings.deadline = std::time::Duration::from_secs(seconds);
    }
    settings.api_key =
        match tether_graphql::api_key_from_env().map_err(|e| UsageError::new(e.to_string()))? {
            Some(key) => Some(key),
            None => match (&file.api_key, &file.api_key_file) {
                (Some(_), Some(_)) => {
                    return Err(UsageError::new(
                        "config.toml sets both api_key and api_key_file; keep one",
                    )
                    .into());
                }
                (Some(key), None) => Some(SecretValue::new(key.clone())),
                (None, Some(path)) => {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        UsageError::new(format!("cannot read api_key_file {}: {e}", path.display()))
                    })?;
                    Some(SecretValue::new(text.trim().to_owned()))
                }
                (None, None) => None,
            },
        };
    let client = HttpManagedMcpClient::new(settings).map_err(|e| UsageError::new(e.to_string()))?;
    Ok(Some(Arc::new(client)))
}

/// The GraphQL endpoint for a managed server URL. tether-server prints its base URL
/// (`listening on http://127.0.0.1:PORT`) and serves GraphQL at `/graphql`: a URL with no path
/// is taken as such a base and gets `/graphql`; any other path is used as given.
fn with_graphql_path(settings: &mut HttpClientSettings) {
    if matches!(settings.endpoint.path(), "" | "/") {
        settings.endpoint.set_path("/graphql");
    }
}

/// A non-empty environment variable.
fn env_text(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Smithery's API base URL: `TETHER_SMITHERY_URL` > `smithery_url` in config.toml > the
/// public one.
fn smithery_url(file: &ConfigFile) -> String {
    env_text(EnvVars::TETHER_SMITHERY_URL)
        .or_else(|| file.smithery_url.clone())
        .unwrap_or_else(|| tether_registry::RegistrySettings::default().smithery_url)
}

/// The stored-key entry of `registry` at the URL the settings give it.
pub fn registry_key(registry: Registry) -> anyhow::Result<RegistryKey> {
    let file = config_file(&data_dir()?)?;
    Ok(RegistryKey {
        registry,
        url: match registry {
            Registry::Smithery => smithery_url(&file),
        },
    })
}

/// Where the registries are (`[[registries]]`, then `flags`' `[NAME=]URL`s, after the default
/// one), Smithery's key, and the cache in `$TETHER_HOME/cache/registry`.
pub fn registry_settings(
    refresh: bool,
    flags: &[String],
) -> anyhow::Result<tether_registry::RegistrySettings> {
    let dir = data_dir()?;
    let file = config_file(&dir)?;
    let defaults = tether_registry::RegistrySettings::default();
    Ok(tether_registry::RegistrySettings {
        official_url: env_text(EnvVars::TETHER_REGISTRY_URL)
            .or(file.registry_url.clone())
            .unwrap_or(defaults.official_url),
        more: (file
            .registries
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(Ok))
        .chain(flags.iter().map(|flag| NamedRegistry::parse(flag)))
        .collect::<Result<_, _>>()?,
        smithery_url: smithery_url(&file),
        smithery_key: smithery_key(&file)?,
        cache_dir: Some(dir.join("cache").join("registry")),
        timeout: defaults.timeout,
        refresh,
    })
}

/// Smithery's key, read now (for `add` of a Smithery-hosted server).
pub fn smithery_api_key() -> anyhow::Result<Option<SecretValue>> {
    let key = smithery_key(&config_file(&data_dir()?)?)?;
    Ok(key
        .map(|k| k.read())
        .transpose()
        .map_err(anyhow::Error::msg)?
        .flatten())
}

/// Smithery's key: `SMITHERY_API_KEY` > `smithery_api_key_file` > the secret store (read
/// only when a request needs it). An empty value is no key.
fn smithery_key(file: &ConfigFile) -> anyhow::Result<Option<ApiKey>> {
    let given = |text: String| {
        let value = SecretValue::new(text.trim().to_owned());
        (!value.is_empty()).then_some(ApiKey::Given(value))
    };
    if let Some(key) = env_text(EnvVars::SMITHERY_API_KEY) {
        return Ok(given(key));
    }
    if let Some(path) = &file.smithery_api_key_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            UsageError::new(format!(
                "cannot read smithery_api_key_file {}: {e}",
                path.display()
            ))
        })?;
        return Ok(given(text));
    }
    let key = RegistryKey {
        registry: Registry::Smithery,
        url: smithery_url(file),
    };
    // Recorded in the local store, when there is one (a search never creates it).
    let Some(store) = open_existing_store()? else {
        return Ok(None);
    };
    if !store.registry_key_recorded(&key)? {
        return Ok(None);
    }
    drop(store);
    let lookup = move || {
        let store = open_existing_store().map_err(|e| e.to_string())?;
        match store {
            Some(store) => store.registry_key(&key).map_err(|e| e.to_string()),
            None => Ok(None),
        }
    };
    Ok(Some(ApiKey::Stored(Box::new(lookup))))
}

#[cfg(test)]
mod tests {
    use super::{HttpClientSettings, with_graphql_path};

    fn endpoint(url: &str) -> String {
        let mut settings = HttpClientSettings::new(url.parse().expect("a URL"));
        with_graphql_path(&mut settings);
        settings.endpoint.to_string()
    }

    #[test]
    fn a_base_url_gets_the_graphql_path_and_any_other_path_is_kept() {
        assert_eq!(
            endpoint("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/graphql"
        );
        assert_eq!(
            endpoint("http://127.0.0.1:8080/"),
            "http://127.0.0.1:8080/graphql"
        );
        assert_eq!(
            endpoint("https://mcp.example.com/graphql"),
            "https://mcp.example.com/graphql"
        );
        assert_eq!(
            endpoint("https://example.com/team/api"),
            "https://example.com/team/api"
        );
        assert_eq!(
            endpoint("https://example.com/?x=1"),
            "https://example.com/graphql?x=1"
        );
    }
}
