//! The server's store: managed installations, their sealed values, API keys, proxy tokens and
//! the audit log, behind one interface ([`Storage`]) with two backends — SQLite under the data
//! directory ([`sqlite`], the default) and PostgreSQL ([`postgres`], for replicas).
//!
//! The store moves bytes: templates and values arrive sealed (see [`crate::crypto`]) and
//! tokens arrive hashed; it never sees a plaintext secret. In clear: uids, names, teams, kinds,
//! the active flag, value *names*, times, API key ids. Every method is one statement or one
//! transaction, and means the same on both backends (the server suite runs against both).

use std::sync::Arc;

use uuid::Uuid;

use crate::crypto::MasterKey;
use crate::error::{KeyError, StoreError};
use crate::model::{StoredInstallation, TransportKind};

mod postgres;
mod sqlite;
mod url;

pub use sqlite::DATABASE_FILE;
pub use url::DatabaseUrl;

/// What the key check row seals; opening it proves the key is the one the data was sealed with.
const KEY_CHECK_PLAINTEXT: &[u8] = b"tether-server key check v1";
const KEY_CHECK_AAD: &[u8] = b"meta:key_check";
/// The `meta` row holding the key check.
const KEY_CHECK: &str = "key_check";

/// The least room the SQLite database's filesystem must have for the store to be healthy
/// (`/healthz`): less, and a write (a page, its WAL frame) may fail.
pub const MIN_FREE_BYTES: u64 = 1024 * 1024;

/// How long `last_used_at` of an API key may lag: it is written at most this often per key, so
/// authenticating is not a write per request.
pub const LAST_USED_GRANULARITY_MS: i64 = 60_000;

/// What `admin list` shows of an installation: never a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallationSummary {
    /// Its uid.
    pub uid: Uuid,
    /// Its name.
    pub name: String,
    /// URL or COMMAND.
    pub kind: TransportKind,
    /// Its team.
    pub team: String,
    /// Whether clients may use it.
    pub active: bool,
}

/// A proxy token's record, found by the token's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyTokenRecord {
    /// The installation the token was minted for.
    pub uid: Uuid,
    /// When it stops being accepted, Unix milliseconds.
    pub expires_at_ms: i64,
}

/// An API key found by its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    /// Its public id (what `admin api-key list|revoke` show and take).
    pub id: String,
    /// Its team.
    pub team: String,
}

/// What `admin api-key list` shows of a key: never the key or its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeySummary {
    /// Its public id.
    pub id: String,
    /// Its team.
    pub team: String,
    /// When it was created, Unix seconds.
    pub created_at: i64,
    /// When it was last used, Unix seconds (at most [`LAST_USED_GRANULARITY_MS`] late).
    pub last_used_at: Option<i64>,
}

/// One audit log row: who did what to what, when. Never a value, token, key or hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    /// When, Unix milliseconds.
    pub at_ms: i64,
    /// Who: `admin:<OS user>` or `api-key:<id>`.
    pub actor: String,
    /// What: `add`, `deactivate`, `mint`, `api-key create`, …
    pub action: String,
    /// To what: a uid, a key id, a team, `all`.
    pub target: String,
    /// Counts, kinds, teams (never a value).
    pub detail: String,
}

impl AuditEvent {
    /// An event now.
    pub fn now(actor: &str, action: &str, target: &str, detail: &str) -> Self {
        Self {
            at_ms: now_ms(),
            actor: actor.to_owned(),
            action: action.to_owned(),
            target: target.to_owned(),
            detail: detail.to_owned(),
        }
    }
}

/// The store's operations, the same on every backend. Object safe: the service and the admin
/// CLI hold an `Arc<dyn Storage>` from [`open`].
#[async_trait::async_trait]
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// The database, for messages: a path, or a URL without its password.
    fn describe(&self) -> String;

    /// A `meta` row's value.
    async fn meta(&self, key: &'static str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Writes a `meta` row unless one exists (two replicas starting together on a new
    /// database record one key check, and both then read it).
    async fn insert_meta_if_absent(
        &self,
        key: &'static str,
        value: Vec<u8>,
    ) -> Result<(), StoreError>;

    /// Writes a `meta` row, replacing any.
    async fn replace_meta(&self, key: &'static str, value: Vec<u8>) -> Result<(), StoreError>;

    /// Stores a new installation and its sealed values, in one transaction.
    async fn insert_installation(&self, installation: StoredInstallation)
    -> Result<(), StoreError>;

    /// Replaces an installation's sealed template and values (same names), in one
    /// transaction: what key rotation writes.
    async fn replace_sealed(&self, installation: StoredInstallation) -> Result<(), StoreError>;

    /// Every installation, oldest first, without values.
    async fn list_installations(&self) -> Result<Vec<InstallationSummary>, StoreError>;

    /// The active installations' uids of `team`, oldest first.
    async fn team_uids(&self, team: String) -> Result<Vec<Uuid>, StoreError>;

    /// One installation with its sealed values, if it exists (and belongs to `team`, when
    /// given). Another team's installation reads exactly like a missing one: no row.
    async fn installation(
        &self,
        uid: Uuid,
        team: Option<String>,
    ) -> Result<Option<StoredInstallation>, StoreError>;

    /// Sets an installation's active flag; an unknown uid is
    /// [`StoreError::UnknownInstallation`].
    async fn set_active(&self, uid: Uuid, active: bool) -> Result<(), StoreError>;

    /// Records an API key (by its hash) with its public id for `team`.
    async fn insert_api_key(
        &self,
        key_hash: [u8; 32],
        id: String,
        team: String,
    ) -> Result<(), StoreError>;

    /// The API key with this hash, if there is one; notes its use (at most once a
    /// [`LAST_USED_GRANULARITY_MS`]).
    async fn api_key(&self, key_hash: [u8; 32]) -> Result<Option<ApiKeyRecord>, StoreError>;

    /// Every API key, oldest first: ids, teams, times.
    async fn list_api_keys(&self) -> Result<Vec<ApiKeySummary>, StoreError>;

    /// Deletes the API key with this id; whether there was one.
    async fn revoke_api_key(&self, id: String) -> Result<bool, StoreError>;

    /// Records a proxy token (by its hash) for `uid`, valid until `expires_at_ms`.
    async fn insert_proxy_token(
        &self,
        token_hash: [u8; 32],
        uid: Uuid,
        expires_at_ms: i64,
    ) -> Result<(), StoreError>;

    /// The record of the proxy token with this hash and its installation, read together.
    async fn proxy_token(
        &self,
        token_hash: [u8; 32],
    ) -> Result<Option<(ProxyTokenRecord, StoredInstallation)>, StoreError>;

    /// Deletes the proxy tokens of `uid`, or all of them; returns how many.
    async fn revoke_proxy_tokens(&self, uid: Option<Uuid>) -> Result<u64, StoreError>;

    /// Deletes proxy tokens that expired before `before_ms`; returns how many.
    async fn purge_proxy_tokens(&self, before_ms: i64) -> Result<u64, StoreError>;

    /// Appends an audit event.
    async fn record_audit(&self, event: AuditEvent) -> Result<(), StoreError>;

    /// The newest `limit` audit events, newest first.
    async fn audit_events(&self, limit: i64) -> Result<Vec<AuditEvent>, StoreError>;

    /// For health checks: whether the store answers, and can be written to (on SQLite: room
    /// on its filesystem, and the last write's failure, if any, gone).
    async fn ping(&self) -> Result<(), StoreError>;
}

/// Opens (creating and migrating if needed) the store `url` names.
pub async fn open(url: &DatabaseUrl) -> Result<Arc<dyn Storage>, StoreError> {
    Ok(match url {
        DatabaseUrl::Sqlite { dir } => Arc::new(sqlite::SqliteStore::open(dir).await?),
        DatabaseUrl::Postgres { .. } => Arc::new(postgres::PostgresStore::open(url).await?),
    })
}

/// Checks that `key` is the key this store's values are sealed with (during a rotation, its
/// previous key counts too); a new store records a sealed check value first. A mismatch is
/// [`StoreError::KeyMismatch`].
pub async fn verify_key(store: &dyn Storage, key: &MasterKey) -> Result<(), StoreError> {
    if store.meta(KEY_CHECK).await?.is_none() {
        let sealed = key.seal(KEY_CHECK_PLAINTEXT, KEY_CHECK_AAD)?;
        store.insert_meta_if_absent(KEY_CHECK, sealed).await?;
    }
    let sealed = store.meta(KEY_CHECK).await?.unwrap_or_default();
    let opened = key.open(&sealed, KEY_CHECK_AAD);
    if !opened.is_ok_and(|plain| plain.as_slice() == KEY_CHECK_PLAINTEXT) {
        return Err(StoreError::KeyMismatch {
            database: store.describe(),
        });
    }
    Ok(())
}

/// Records the key check under `key`'s current key alone: the last step of a rotation, after
/// which a server with the old key refuses to start.
pub async fn seal_key_check(store: &dyn Storage, key: &MasterKey) -> Result<(), StoreError> {
    let sealed = key.seal(KEY_CHECK_PLAINTEXT, KEY_CHECK_AAD)?;
    store.replace_meta(KEY_CHECK, sealed).await
}

/// An error inside a backend's operation: its driver's (`E`, given the database's name on the
/// way out by the backend), or one of ours.
enum Failure<E> {
    Driver(E),
    Store(StoreError),
}

impl<E> From<StoreError> for Failure<E> {
    fn from(error: StoreError) -> Self {
        Failure::Store(error)
    }
}

impl<E> From<KeyError> for Failure<E> {
    fn from(error: KeyError) -> Self {
        Failure::Store(StoreError::Key(error))
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn parse_uid(text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|_| StoreError::Corrupt {
        uid: Uuid::nil(),
        reason: "a stored uid is not a UUID".to_owned(),
    })
}

fn parse_kind(uid: Uuid, text: &str) -> Result<TransportKind, StoreError> {
    TransportKind::parse(text).ok_or_else(|| StoreError::Corrupt {
        uid,
        reason: "unknown transport kind".to_owned(),
    })
}

fn parse_value_kind(
    uid: Uuid,
    name: &str,
    text: &str,
) -> Result<crate::model::ValueKind, StoreError> {
    crate::model::ValueKind::parse(text).ok_or_else(|| StoreError::Corrupt {
        uid,
        reason: format!("value '{name}' has an unknown kind"),
    })
}

/// Whether a key last used at `last_used_at` (seconds) should be marked used again at `now_ms`.
fn last_used_is_stale(last_used_at: Option<i64>, now_ms: i64) -> bool {
    last_used_at.is_none_or(|at| at.saturating_mul(1000) + LAST_USED_GRANULARITY_MS <= now_ms)
}
