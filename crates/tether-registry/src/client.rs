//! [`Registries`]: the HTTP side — requests, status mapping, the cache policy.
//!
//! Cache policy for every request: an entry younger than [`FRESH_FOR`] is used as it is; an
//! older one is revalidated (`If-None-Match` with its ETag; for official searches without an
//! ETag, `updated_since` and a merge); when the registry cannot be reached, times out or
//! answers 5xx, a cached entry of any age is used and reported as offline with its age.

use std::sync::OnceLock;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::{AUTHORIZATION, ETAG, HeaderValue, IF_NONE_MATCH};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tether_config::SecretValue;

use crate::cache::{Cache, Entry, now};
use crate::error::RegistryError;

/// The largest answer read from a registry (a list page of 100 entries is a few hundred KiB);
/// a larger one is refused unread past this point, whatever its timing.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// How long a cached answer is used without asking the registry.
pub const FRESH_FOR: Duration = Duration::from_secs(600);

/// The official registry's production base URL.
pub const OFFICIAL_URL: &str = "https://registry.modelcontextprotocol.io";

/// Smithery's API base URL.
pub const SMITHERY_URL: &str = "https://api.smithery.ai";

/// A registry tether can ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The official MCP Registry (`/v0.1`).
    Official,
    /// Smithery.
    Smithery,
}

impl Source {
    /// The name on the command line and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Official => "official",
            Source::Smithery => "smithery",
        }
    }

    /// The name in messages.
    pub fn title(self) -> &'static str {
        match self {
            Source::Official => "the official registry",
            Source::Smithery => "Smithery",
        }
    }
}

/// Where an answer came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "from", rename_all = "kebab-case")]
pub enum Freshness {
    /// Fetched now.
    Network,
    /// Cached, and the registry confirmed it is unchanged (304 or no updates since).
    Revalidated,
    /// Cached less than [`FRESH_FOR`] ago; the registry was not asked.
    Cache {
        /// Seconds since the registry last confirmed it.
        age_secs: u64,
    },
    /// The registry could not answer; this is the cached answer.
    Offline {
        /// Seconds since the registry last confirmed it.
        age_secs: u64,
        /// Why the registry could not answer.
        reason: String,
    },
}

/// Where the registries are and how to reach them.
#[derive(Debug)]
pub struct RegistrySettings {
    /// The official registry's base URL (default [`OFFICIAL_URL`]).
    pub official_url: String,
    /// More registries speaking the official API (`[[registries]]`, `--registry`), asked
    /// after the default one, in this order.
    pub more: Vec<NamedRegistry>,
    /// Smithery's base URL (default [`SMITHERY_URL`]).
    pub smithery_url: String,
    /// Smithery's API key; Smithery is skipped by a search without one.
    pub smithery_key: Option<ApiKey>,
    /// The cache directory (`$TETHER_HOME/cache/registry`); `None` disables caching.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Ignore fresh cache entries: always ask (the cache is still the offline fallback).
    pub refresh: bool,
}

impl Default for RegistrySettings {
    fn default() -> Self {
        Self {
            official_url: OFFICIAL_URL.to_owned(),
            more: Vec::new(),
            smithery_url: SMITHERY_URL.to_owned(),
            smithery_key: None,
            cache_dir: None,
            timeout: Duration::from_secs(10),
            refresh: false,
        }
    }
}

/// Reads a key kept elsewhere (the OS credential store): `Ok(None)` when none is stored,
/// `Err` with what went wrong (never a value).
pub type KeyLookup = Box<dyn Fn() -> Result<Option<SecretValue>, String> + Send + Sync>;

/// A registry's API key: given, or looked up only when a request needs it (an answer from a
/// fresh cache then costs no credential-store round trip, and no access prompt on systems
/// that ask for one).
pub enum ApiKey {
    /// The value (from the environment or a file).
    Given(SecretValue),
    /// Where to read it the first time a request is sent.
    Stored(KeyLookup),
}

impl ApiKey {
    /// The value: the given one, or the stored one read now (`Ok(None)`: none stored).
    pub fn read(&self) -> Result<Option<SecretValue>, String> {
        match self {
            Self::Given(value) => Ok(Some(value.clone())),
            Self::Stored(lookup) => lookup(),
        }
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Given(_) => "ApiKey::Given(..)",
            Self::Stored(_) => "ApiKey::Stored(..)",
        })
    }
}

/// The registry clients. The HTTP client is built on first use, so an answer from a fresh
/// cache costs no TLS set-up.
#[derive(Debug)]
pub struct Registries {
    /// The official-API registries: the default one (`official`) first.
    pub(crate) officials: Vec<Endpoint>,
    pub(crate) smithery: Endpoint,
    smithery_key: Option<ApiKey>,
    /// The stored key, once read.
    smithery_stored: OnceLock<Result<Option<SecretValue>, String>>,
    cache: Option<Cache>,
    timeout: Duration,
    refresh: bool,
    http: OnceLock<Result<reqwest::Client, String>>,
}

/// A raw answer.
pub(crate) struct Reply {
    pub status: u16,
    pub etag: Option<String>,
    pub body: Vec<u8>,
}

fn base_url(name: &str, text: &str) -> Result<Url, RegistryError> {
    let bad = || RegistryError::BadUrl {
        registry: registry_title(name),
        url: text.to_owned(),
    };
    let url = Url::parse(text).map_err(|_| bad())?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() {
        return Err(bad());
    }
    Ok(url)
}

/// The default official-API registry's name.
pub const OFFICIAL_NAME: &str = "official";

/// Smithery's name.
pub const SMITHERY_NAME: &str = "smithery";

/// A further registry speaking the official API: `[[registries]]` in config.toml, or
/// `--registry [NAME=]URL`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedRegistry {
    /// What rows are tagged with and `NAME:server` picks (letters, digits, `.`, `_`, `-`).
    pub name: String,
    /// Its base URL (the one under which `/v0.1/servers` is served).
    pub url: String,
}

impl NamedRegistry {
    /// `NAME=URL`, or a bare `URL` named after its host (and port: `127.0.0.1-8080`).
    pub fn parse(text: &str) -> Result<Self, RegistryError> {
        let (name, url) = match text.split_once('=') {
            Some((name, url)) if !name.contains(':') && !name.contains('/') => {
                (name.to_owned(), url)
            }
            _ => {
                let url = Url::parse(text).map_err(|_| RegistryError::BadUrl {
                    registry: format!("the registry {text:?}"),
                    url: text.to_owned(),
                })?;
                let host = url
                    .host_str()
                    .unwrap_or_default()
                    .replace([':', '[', ']'], "-");
                let name = match url.port() {
                    Some(port) => format!("{host}-{port}"),
                    None => host,
                };
                (name, text)
            }
        };
        Ok(Self {
            name,
            url: url.to_owned(),
        })
    }
}

/// A registry name: non-empty, letters, digits, `.`, `_`, `-` (never `:` or `/`, which
/// `NAME:server` relies on), and not a built-in one.
fn check_name(name: &str) -> Result<(), RegistryError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(RegistryError::BadRegistry(format!(
            "{name:?} cannot name a registry: use letters, digits, '.', '_' and '-'"
        )));
    }
    if name == OFFICIAL_NAME || name == SMITHERY_NAME {
        return Err(RegistryError::BadRegistry(format!(
            "{name:?} is a built-in registry's name; give this one another (NAME=URL)"
        )));
    }
    Ok(())
}

/// How messages call the registry named `name`.
pub fn registry_title(name: &str) -> String {
    match name {
        OFFICIAL_NAME => Source::Official.title().to_owned(),
        SMITHERY_NAME => Source::Smithery.title().to_owned(),
        other => format!("the registry {other}"),
    }
}

/// One registry: what API it speaks, its name and base URL.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub source: Source,
    pub name: String,
    pub base: Url,
}

impl Endpoint {
    fn new(source: Source, name: &str, url: &str) -> Result<Self, RegistryError> {
        Ok(Self {
            source,
            name: name.to_owned(),
            base: base_url(name, url)?,
        })
    }

    /// How messages call it.
    pub fn title(&self) -> String {
        registry_title(&self.name)
    }
}

impl Registries {
    /// Clients for `settings`; fails only on a malformed base URL.
    pub fn new(settings: RegistrySettings) -> Result<Self, RegistryError> {
        let mut officials = vec![Endpoint::new(
            Source::Official,
            OFFICIAL_NAME,
            &settings.official_url,
        )?];
        for more in &settings.more {
            check_name(&more.name)?;
            if officials.iter().any(|e| e.name == more.name) {
                return Err(RegistryError::BadRegistry(format!(
                    "two registries are named {:?}; give each a name of its own (NAME=URL)",
                    more.name
                )));
            }
            officials.push(Endpoint::new(Source::Official, &more.name, &more.url)?);
        }
        Ok(Self {
            officials,
            smithery: Endpoint::new(Source::Smithery, SMITHERY_NAME, &settings.smithery_url)?,
            smithery_key: settings.smithery_key,
            smithery_stored: OnceLock::new(),
            cache: settings.cache_dir.map(Cache::new),
            timeout: settings.timeout,
            refresh: settings.refresh,
            http: OnceLock::new(),
        })
    }

    /// Smithery's key: the given one, or the stored one read now (once a process).
    fn smithery_key(&self) -> Result<&SecretValue, RegistryError> {
        match &self.smithery_key {
            None => Err(RegistryError::NoSmitheryKey),
            Some(ApiKey::Given(value)) => Ok(value),
            Some(ApiKey::Stored(lookup)) => match self.smithery_stored.get_or_init(lookup) {
                Ok(Some(value)) => Ok(value),
                Ok(None) => Err(RegistryError::NoSmitheryKey),
                Err(reason) => Err(RegistryError::Client(format!(
                    "cannot read Smithery's stored API key: {reason}"
                ))),
            },
        }
    }

    /// Whether Smithery can be asked (an API key is set or stored).
    pub fn smithery_enabled(&self) -> bool {
        self.smithery_key.is_some()
    }

    /// The base URL of `source` (the default registry for [`Source::Official`]).
    pub fn base(&self, source: Source) -> &Url {
        match source {
            Source::Official => &self.officials[0].base,
            Source::Smithery => &self.smithery.base,
        }
    }

    /// The names of the registries, in the order they are asked (`official` first, `smithery`
    /// last).
    pub fn names(&self) -> Vec<&str> {
        self.officials
            .iter()
            .chain([&self.smithery])
            .map(|e| e.name.as_str())
            .collect()
    }

    /// The registry called `name`.
    pub(crate) fn endpoint(&self, name: &str) -> Result<&Endpoint, RegistryError> {
        self.officials
            .iter()
            .chain([&self.smithery])
            .find(|e| e.name == name)
            .ok_or_else(|| {
                RegistryError::BadRegistry(format!(
                    "no registry is named {name:?}; the registries are {}",
                    self.names().join(", ")
                ))
            })
    }

    /// `REGISTRY:NAME` → that registry and `NAME`; a name without `:` → `None` and itself.
    /// Registry names never hold `:`, and the official registry's server names never do
    /// (`^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$`), nor Smithery's (`@owner/name`), so the prefix is
    /// unambiguous where a `/` would not be.
    pub(crate) fn split<'a>(
        &self,
        name: &'a str,
    ) -> Result<(Option<&Endpoint>, &'a str), RegistryError> {
        match name.split_once(':') {
            Some((registry, rest)) => Ok((Some(self.endpoint(registry)?), rest)),
            None => Ok((None, name)),
        }
    }

    /// `base` + path segments (each percent-encoded, `/` included) + query pairs.
    pub(crate) fn url(&self, at: &Endpoint, segments: &[&str], query: &[(&str, &str)]) -> Url {
        let mut url = at.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        url
    }

    fn http(&self) -> Result<&reqwest::Client, RegistryError> {
        let timeout = self.timeout;
        self.http
            .get_or_init(|| {
                reqwest::Client::builder()
                    .timeout(timeout)
                    .connect_timeout(timeout)
                    .user_agent(concat!("tether/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| RegistryError::Client(e.clone()))
    }

    /// One GET. Transport failures become [`RegistryError::Timeout`] or
    /// [`RegistryError::Unreachable`]; any status is returned as it is.
    pub(crate) async fn send(
        &self,
        at: &Endpoint,
        url: &Url,
        etag: Option<&str>,
    ) -> Result<Reply, RegistryError> {
        let mut request = self
            .http()?
            .get(url.clone())
            .header("Accept", "application/json");
        if at.source == Source::Smithery {
            let key = self.smithery_key()?;
            let mut value =
                HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
                    RegistryError::Client(
                        "the Smithery API key is not a valid header value".to_owned(),
                    )
                })?;
            value.set_sensitive(true);
            request = request.header(AUTHORIZATION, value);
        }
        if let Some(etag) = etag.and_then(|e| HeaderValue::from_str(e).ok()) {
            request = request.header(IF_NONE_MATCH, etag);
        }
        let transport = |e: reqwest::Error| {
            if e.is_timeout() {
                RegistryError::Timeout {
                    registry: at.title(),
                    seconds: self.timeout.as_secs().max(1),
                    url: url.to_string(),
                }
            } else {
                RegistryError::Unreachable {
                    registry: at.title(),
                    url: url.to_string(),
                    reason: root_cause(&e),
                }
            }
        };
        let response = request.send().await.map_err(transport)?;
        let status = response.status().as_u16();
        let etag = response
            .headers()
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let too_large = || RegistryError::TooLarge {
            registry: at.title(),
            url: url.to_string(),
            limit_mib: MAX_RESPONSE_BYTES / (1024 * 1024),
        };
        if response
            .content_length()
            .is_some_and(|length| length > MAX_RESPONSE_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut response = response;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(transport)? {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Reply { status, etag, body })
    }

    /// The error for a status other than 200/304/404.
    pub(crate) fn status_error(
        at: &Endpoint,
        url: &Url,
        status: u16,
        body: &[u8],
    ) -> RegistryError {
        let detail = String::from_utf8_lossy(body)
            .trim()
            .chars()
            .take(200)
            .collect::<String>();
        RegistryError::Status {
            registry: at.title(),
            status,
            url: url.to_string(),
            detail: (!detail.is_empty()).then_some(detail),
        }
    }

    pub(crate) fn decode<T: DeserializeOwned>(
        at: &Endpoint,
        url: &Url,
        body: &[u8],
    ) -> Result<T, RegistryError> {
        serde_json::from_slice(body).map_err(|e| RegistryError::Decode {
            registry: at.title(),
            url: url.to_string(),
            reason: format!(
                "{} at line {}, column {}",
                classify(&e),
                e.line(),
                e.column()
            ),
        })
    }

    /// The cached entry for `key` when it is fresh enough to use without asking.
    pub(crate) fn fresh<T: DeserializeOwned>(&self, key: &str) -> (Option<Entry<T>>, bool) {
        let entry = self.cache.as_ref().and_then(|c| c.load::<T>(key));
        let fresh = !self.refresh && entry.as_ref().is_some_and(|e| e.age() < FRESH_FOR);
        (entry, fresh)
    }

    pub(crate) fn store<T: Serialize>(&self, key: &str, etag: Option<String>, body: &T) {
        if let Some(cache) = &self.cache {
            cache.store(
                key,
                &Entry {
                    fetched_at: now(),
                    etag,
                    body,
                },
            );
        }
    }

    /// GET one JSON document through the cache. `not_found` is the error for a 404.
    pub(crate) async fn fetch<T: DeserializeOwned + Serialize>(
        &self,
        at: &Endpoint,
        url: Url,
        not_found: impl FnOnce() -> RegistryError,
    ) -> Result<(T, Freshness), RegistryError> {
        // Keyed by the registry's name as well as the URL: two registries never share an entry.
        let key = format!("GET {} {url}", at.name);
        let (cached, fresh) = self.fresh::<T>(&key);
        match cached {
            Some(entry) if fresh => {
                let age_secs = entry.age().as_secs();
                Ok((entry.body, Freshness::Cache { age_secs }))
            }
            cached => {
                let etag = cached.as_ref().and_then(|e| e.etag.as_deref());
                match (self.send(at, &url, etag).await, cached) {
                    (Ok(reply), Some(entry)) if reply.status == 304 => {
                        self.store(&key, entry.etag.clone(), &entry.body);
                        Ok((entry.body, Freshness::Revalidated))
                    }
                    (Ok(reply), _) if reply.status == 200 => {
                        let body: T = Self::decode(at, &url, &reply.body)?;
                        self.store(&key, reply.etag, &body);
                        Ok((body, Freshness::Network))
                    }
                    (Ok(reply), _) if reply.status == 404 => Err(not_found()),
                    (Ok(reply), cached) => {
                        let error = Self::status_error(at, &url, reply.status, &reply.body);
                        offline_or(error, cached, reply.status >= 500)
                    }
                    (Err(error), cached) => offline_or(error, cached, true),
                }
            }
        }
    }
}

/// The cached answer, reported as offline, when `fall_back` and one exists; else `error`.
pub(crate) fn offline_or<T>(
    error: RegistryError,
    cached: Option<Entry<T>>,
    fall_back: bool,
) -> Result<(T, Freshness), RegistryError> {
    match cached {
        Some(entry) if fall_back => {
            let age_secs = entry.age().as_secs();
            Ok((
                entry.body,
                Freshness::Offline {
                    age_secs,
                    reason: error.to_string(),
                },
            ))
        }
        _ => Err(error),
    }
}

fn classify(e: &serde_json::Error) -> &'static str {
    match e.classify() {
        serde_json::error::Category::Io => "read error",
        serde_json::error::Category::Syntax => "not JSON",
        serde_json::error::Category::Data => "unexpected shape",
        serde_json::error::Category::Eof => "truncated JSON",
    }
}

/// The innermost cause of a transport error (`Connection refused`, a DNS failure), which is
/// what a user can act on.
fn root_cause(e: &reqwest::Error) -> String {
    let mut source: &dyn std::error::Error = e;
    while let Some(next) = source.source() {
        source = next;
    }
    source.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_flag_is_name_equals_url_or_a_url_named_after_its_host() {
        let named = NamedRegistry::parse("corp=https://mcp.example.com/reg").expect("parsing");
        assert_eq!(
            (named.name.as_str(), named.url.as_str()),
            ("corp", "https://mcp.example.com/reg")
        );
        let bare = NamedRegistry::parse("http://127.0.0.1:8080/?a=b").expect("parsing");
        assert_eq!(bare.name, "127.0.0.1-8080");
        assert_eq!(bare.url, "http://127.0.0.1:8080/?a=b");
        assert!(NamedRegistry::parse("not a url").is_err());
        for bad in ["", "a:b", "official", "smithery", "x y"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        let twice = Registries::new(RegistrySettings {
            more: vec![named.clone(), named],
            ..RegistrySettings::default()
        });
        assert!(matches!(twice, Err(RegistryError::BadRegistry(_))));
    }
}
