//! What the server does for a request, apart from the wire: authenticate an API key, mint a
//! client config, authorize a proxy token.
//!
//! The store is a [`Storage`] (SQLite or PostgreSQL); nothing read from it is cached, so a
//! change made through another process or replica counts from the next request.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tether_clock::Clock;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;
use zeroize::Zeroizing;

use crate::crypto::{self, MasterKey};
use crate::error::{ServerError, StoreError};
use crate::installation::{OpenedInstallation, Upstream};
use crate::metrics::ServerMetrics;
use crate::model::TransportKind;
use crate::store::{AuditEvent, Storage};

/// Default lifetime of a proxy token.
pub const DEFAULT_PROXY_TOKEN_TTL: Duration = Duration::from_secs(3600);

/// The header a client sends its proxy token in.
pub const PROXY_AUTHORIZATION_HEADER: &str = "Authorization";

/// The path proxied installations are served under: `<public base>/mcp-proxy/<uid>`.
pub const PROXY_PATH_PREFIX: &str = "/mcp-proxy/";

/// How long `/healthz` waits for the store.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// Settings of a running server.
#[derive(Debug, Clone)]
pub struct ServiceSettings {
    /// The base URL clients reach this server at (no trailing slash), for proxy URLs.
    pub public_base: String,
    /// How long a minted proxy token is accepted.
    pub proxy_token_ttl: Duration,
}

/// Who is calling, from a valid API key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The API key's public id (rate limits and the audit log count by it).
    pub key_id: String,
    /// The API key's team: the only team whose installations the caller sees.
    pub team: String,
}

/// A minted client config.
pub enum ClientConfig {
    /// A COMMAND installation: the rendered config.
    Command {
        /// `{"mcpServers": {NAME: {...}}}` with server-held values in place.
        mcp_config_json: Zeroizing<String>,
    },
    /// A URL installation: a proxy URL and a fresh run-scoped token.
    Url {
        /// `{"mcpServers": {NAME: {"url": <proxy url>, "headers": {"Authorization": ...}}}}`.
        mcp_config_json: Zeroizing<String>,
        /// `<public base>/mcp-proxy/<uid>`.
        proxy_url: String,
        /// The token (256 random bits, base64url).
        proxy_token: Zeroizing<String>,
        /// When the token stops being accepted.
        expires_at: OffsetDateTime,
    },
    /// No installation with this uid in the caller's team (whether or not another team has it).
    NotFound,
    /// The installation exists in the caller's team but is deactivated.
    Inactive,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClientConfig::Command { .. } => "ClientConfig::Command(..)",
            ClientConfig::Url { .. } => "ClientConfig::Url(..)",
            ClientConfig::NotFound => "ClientConfig::NotFound",
            ClientConfig::Inactive => "ClientConfig::Inactive",
        })
    }
}

/// What the proxy may do with a request.
pub enum ProxyDecision {
    /// Forward to this upstream; the token stops being accepted at `expires_at_ms`.
    Forward {
        /// Where to, with which credentials.
        upstream: Upstream,
        /// The token's expiry, milliseconds since the Unix epoch.
        expires_at_ms: i64,
    },
    /// No such token, or it was minted for another uid: 401.
    InvalidToken,
    /// The token expired: 401 saying so.
    Expired,
    /// The installation was deactivated: 403.
    Inactive,
}

/// The server's shared state.
#[derive(Debug)]
pub struct Service {
    store: Arc<dyn Storage>,
    key: Arc<MasterKey>,
    settings: ServiceSettings,
    /// What token lifetimes are measured on (the system clock; a test's own in tests).
    clock: Arc<dyn Clock>,
    /// What `/metrics` exports.
    pub metrics: Arc<ServerMetrics>,
}

impl Service {
    /// A service over an opened store whose key has been verified, telling token expiry by
    /// `clock`.
    pub fn new(
        store: Arc<dyn Storage>,
        key: Arc<MasterKey>,
        settings: ServiceSettings,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            key,
            settings,
            clock,
            metrics: Arc::new(ServerMetrics::new()),
        }
    }

    /// The caller an API key belongs to, or `None` for an unknown key.
    pub async fn authenticate(&self, api_key: &str) -> Result<Option<Caller>, ServerError> {
        let hash = crypto::token_hash(api_key);
        let record = self.store.api_key(hash).await?;
        Ok(record.map(|record| Caller {
            key_id: record.id,
            team: record.team,
        }))
    }

    /// The active installations' uids of the caller's team.
    pub async fn visible_uids(&self, caller: &Caller) -> Result<Vec<Uuid>, ServerError> {
        Ok(self.store.team_uids(caller.team.clone()).await?)
    }

    /// `createManagedMcpClientConfig`: mints a config for `uid` if the caller's team has it and
    /// it is active, and counts the resolution by outcome.
    pub async fn create_client_config(
        &self,
        caller: &Caller,
        uid: &str,
    ) -> Result<ClientConfig, ServerError> {
        let span = tracing::info_span!(
            target: "tether_telemetry",
            "tether.resolution",
            otel.kind = "internal",
            otel.status_code = tracing::field::Empty,
            tether.outcome = tracing::field::Empty,
        );
        let result = tracing::Instrument::instrument(self.resolve(caller, uid), span.clone()).await;
        let outcome = match &result {
            Ok(ClientConfig::NotFound) => "not_found",
            Ok(ClientConfig::Inactive) => "inactive",
            Ok(_) => "config",
            Err(_) => "error",
        };
        span.record("tether.outcome", outcome);
        if result.is_err() {
            span.record("otel.status_code", "ERROR");
        }
        self.metrics.resolution(outcome);
        result
    }

    async fn resolve(&self, caller: &Caller, uid: &str) -> Result<ClientConfig, ServerError> {
        let Ok(uid) = Uuid::parse_str(uid) else {
            return Ok(ClientConfig::NotFound);
        };
        // Another team's installation answers exactly like a missing one: the query finds no
        // row either way.
        let stored = self
            .store
            .installation(uid, Some(caller.team.clone()))
            .await?;
        let Some(stored) = stored else {
            return Ok(ClientConfig::NotFound);
        };
        if !stored.active {
            return Ok(ClientConfig::Inactive);
        }
        let config = match stored.kind {
            TransportKind::Command => ClientConfig::Command {
                mcp_config_json: OpenedInstallation::open(&stored, &self.key)?.client_config_json(),
            },
            // The upstream's values stay sealed: minting a token does not need them.
            TransportKind::Url => self.mint_proxy_config(uid, &stored.name).await?,
        };
        let event = AuditEvent::now(
            &format!("api-key:{}", caller.key_id),
            "mint",
            &uid.to_string(),
            &format!("team {} kind {}", caller.team, stored.kind.as_str()),
        );
        // The config is minted (and a token committed); a failed audit write is logged, not
        // turned into a failed mint.
        if let Err(error) = self.store.record_audit(event).await {
            tracing::warn!(%uid, "recording a mint in the audit log failed: {error}");
        }
        Ok(config)
    }

    async fn mint_proxy_config(&self, uid: Uuid, name: &str) -> Result<ClientConfig, ServerError> {
        let token = crypto::random_token()?;
        let hash = crypto::token_hash(&token);
        let ttl_ms = i64::try_from(self.settings.proxy_token_ttl.as_millis()).unwrap_or(i64::MAX);
        let expires_at_ms = self.clock.unix_ms().saturating_add(ttl_ms);
        self.store
            .insert_proxy_token(hash, uid, expires_at_ms)
            .await?;
        self.metrics.token_minted();
        let proxy_url = format!("{}{PROXY_PATH_PREFIX}{uid}", self.settings.public_base);
        let bearer = Zeroizing::new(format!("Bearer {}", token.as_str()));
        let mcp_config_json = Zeroizing::new(
            json!({"mcpServers": {name: {
                "url": proxy_url,
                "headers": {PROXY_AUTHORIZATION_HEADER: bearer.as_str()},
                "type": "http",
            }}})
            .to_string(),
        );
        Ok(ClientConfig::Url {
            mcp_config_json,
            proxy_url,
            proxy_token: token,
            expires_at: time_from_ms(expires_at_ms),
        })
    }

    /// Decides what the proxy does with a request for `uid` carrying `token`.
    pub async fn authorize_proxy(
        &self,
        uid: &str,
        token: &str,
    ) -> Result<ProxyDecision, ServerError> {
        let Ok(uid) = Uuid::parse_str(uid) else {
            return Ok(ProxyDecision::InvalidToken);
        };
        let hash = crypto::token_hash(token);
        let found = self.store.proxy_token(hash).await?;
        let Some((record, stored)) = found.filter(|(record, _)| record.uid == uid) else {
            return Ok(ProxyDecision::InvalidToken);
        };
        if record.expires_at_ms <= self.clock.unix_ms() {
            return Ok(ProxyDecision::Expired);
        }
        if !stored.active {
            return Ok(ProxyDecision::Inactive);
        }
        let upstream = OpenedInstallation::open(&stored, &self.key)?.upstream()?;
        Ok(ProxyDecision::Forward {
            upstream,
            expires_at_ms: record.expires_at_ms,
        })
    }

    /// Whether a proxy token (by hash) is still accepted for `uid`: known, minted for it,
    /// unexpired, its installation active. Open proxied streams ask this periodically.
    pub async fn proxy_token_still_valid(
        &self,
        uid: Uuid,
        token_hash: [u8; 32],
    ) -> Result<bool, ServerError> {
        let found = self.store.proxy_token(token_hash).await?;
        let now_ms = self.clock.unix_ms();
        Ok(found.is_some_and(|(record, stored)| {
            record.uid == uid && record.expires_at_ms > now_ms && stored.active
        }))
    }

    /// Deletes proxy tokens that expired more than `keep_expired` ago (until then a request
    /// with one is told the token expired, rather than that it is unknown).
    pub async fn purge_expired_tokens(&self, keep_expired: Duration) -> Result<u64, ServerError> {
        let keep_ms = i64::try_from(keep_expired.as_millis()).unwrap_or(i64::MAX);
        let before = self.clock.unix_ms().saturating_sub(keep_ms);
        let purged = self.store.purge_proxy_tokens(before).await?;
        self.metrics.tokens_purged(purged);
        Ok(purged)
    }

    /// Whether the store answers within [`HEALTH_TIMEOUT`] and can be written to; else why,
    /// in words fit for an unauthenticated client (no path: the log has the details).
    pub async fn health(&self) -> Result<(), &'static str> {
        match tokio::time::timeout(HEALTH_TIMEOUT, self.store.ping()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => {
                tracing::warn!("health check: {error}");
                Err(match error {
                    StoreError::NoSpace { .. } => "the store's disk is full",
                    StoreError::WritesFail { .. } => "the store cannot be written to",
                    _ => "the store does not answer",
                })
            }
            Err(_) => {
                tracing::warn!("health check: the store did not answer within {HEALTH_TIMEOUT:?}");
                Err("the store does not answer")
            }
        }
    }
}

/// RFC 3339 text of a time (what the schema's `Time` carries).
pub fn rfc3339(time: OffsetDateTime) -> String {
    time.format(&Rfc3339).unwrap_or_default()
}

fn time_from_ms(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}
