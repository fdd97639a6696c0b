//! The PostgreSQL backend: the store shared by replicas (`tokio-postgres` with a
//! `deadpool-postgres` pool; specs/server-postgres/TECH.md says why not sqlx).
//!
//! Migrations are an ordered list of SQL texts, recorded in `schema_migrations` and applied in
//! one transaction under an advisory lock, so replicas starting together migrate once. Every
//! value is a bound parameter: no stored byte reaches an SQL text or an error message. Errors
//! name the database by [`DatabaseUrl`]'s `Display`, which never shows a password.

use std::time::Duration;

use deadpool_postgres::{
    GenericClient as _, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime,
};
use rustls_pki_types::pem::PemObject as _;
use tokio_postgres::NoTls;
use tokio_postgres::config::SslMode;
use uuid::Uuid;

use super::{
    ApiKeyRecord, ApiKeySummary, AuditEvent, DatabaseUrl, InstallationSummary, ProxyTokenRecord,
    Storage, last_used_is_stale, now_ms, parse_kind, parse_uid, parse_value_kind,
};
use crate::error::StoreError;
use crate::model::{SealedValue, StoredInstallation};

/// Connections per replica. 2 cores serve ~5,000 requests/s with each holding a connection for
/// well under a millisecond; 16 leaves room for slow queries without exhausting PostgreSQL's
/// default `max_connections` (100) with a few replicas.
const POOL_SIZE: usize = 16;

/// How long a request waits for a pooled connection, or for a new one to be made, before the
/// store reports itself unreachable (`/healthz` then answers 503).
const POOL_TIMEOUT: Duration = Duration::from_secs(5);

/// The advisory lock migrations run under (any constant; "tether" in ASCII).
const MIGRATION_LOCK: i64 = 0x7465_7468_6572;

/// Versioned migrations; `schema_migrations` records which have run.
const MIGRATIONS: &[&str] = &[
    // 1: the whole schema of SQLite's migrations 1 and 2.
    "CREATE TABLE meta (
         key   TEXT PRIMARY KEY,
         value BYTEA NOT NULL
     );
     CREATE TABLE installations (
         uid        TEXT PRIMARY KEY,
         name       TEXT NOT NULL,
         team       TEXT NOT NULL,
         kind       TEXT NOT NULL CHECK (kind IN ('URL', 'COMMAND')),
         template   BYTEA NOT NULL,
         active     BOOLEAN NOT NULL DEFAULT TRUE,
         created_at BIGINT NOT NULL,
         seq        BIGSERIAL NOT NULL
     );
     CREATE INDEX installations_team ON installations(team);
     CREATE TABLE installation_values (
         installation_uid TEXT NOT NULL REFERENCES installations(uid) ON DELETE CASCADE,
         kind             TEXT NOT NULL CHECK (kind IN ('captured', 'secret')),
         position         INTEGER NOT NULL,
         name             TEXT NOT NULL,
         sealed           BYTEA NOT NULL,
         PRIMARY KEY (installation_uid, kind, name)
     );
     CREATE TABLE api_keys (
         key_hash     BYTEA PRIMARY KEY,
         id           TEXT NOT NULL UNIQUE,
         team         TEXT NOT NULL,
         created_at   BIGINT NOT NULL,
         last_used_at BIGINT,
         seq          BIGSERIAL NOT NULL
     );
     CREATE TABLE proxy_tokens (
         token_hash       BYTEA PRIMARY KEY,
         installation_uid TEXT NOT NULL REFERENCES installations(uid) ON DELETE CASCADE,
         expires_at_ms    BIGINT NOT NULL,
         created_at_ms    BIGINT NOT NULL
     );
     CREATE INDEX proxy_tokens_expiry ON proxy_tokens(expires_at_ms);
     CREATE INDEX proxy_tokens_installation ON proxy_tokens(installation_uid);
     CREATE TABLE audit_events (
         id     BIGSERIAL PRIMARY KEY,
         at_ms  BIGINT NOT NULL,
         actor  TEXT NOT NULL,
         action TEXT NOT NULL,
         target TEXT NOT NULL,
         detail TEXT NOT NULL
     );",
];

/// The PostgreSQL store: a pool of connections to one database.
pub(super) struct PostgresStore {
    pool: Pool,
    /// The URL without its password, for messages.
    shown: String,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("database", &self.shown)
            .finish_non_exhaustive()
    }
}

/// What went wrong in PostgreSQL's driver or pool.
enum PgError {
    Sql(tokio_postgres::Error),
    Pool(String),
}

/// An error inside an operation: PostgreSQL's or the pool's, or one of ours.
type Failure = super::Failure<PgError>;

impl From<tokio_postgres::Error> for Failure {
    fn from(error: tokio_postgres::Error) -> Self {
        Failure::Driver(PgError::Sql(error))
    }
}

impl Failure {
    fn into_error(self, database: &str) -> StoreError {
        match self {
            Failure::Driver(PgError::Sql(source)) => StoreError::Postgres {
                database: database.to_owned(),
                source,
            },
            Failure::Driver(PgError::Pool(reason)) => StoreError::Unreachable {
                database: database.to_owned(),
                reason,
            },
            Failure::Store(error) => error,
        }
    }
}

/// Runs an async block returning `Result<_, Failure>` and names the database in its error.
macro_rules! run {
    ($self:ident, $body:block) => {{
        let result: Result<_, Failure> = async $body.await;
        result.map_err(|failure| failure.into_error(&$self.shown))
    }};
}

/// `error` and its causes, `: `-separated: a refused TLS handshake says why (an unknown
/// issuer, a name mismatch), not only that it failed.
fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let part = next.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = next.source();
    }
    text
}

/// TLS for `sslmode=require`: rustls, the server's certificate verified against the system's
/// certificate authorities and those in `TETHER_SERVER_DATABASE_CA` (a PEM file), its name
/// against the host the URL names. `Err` says what could not be read.
fn tls_connector() -> Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
    let mut roots = rustls::RootCertStore::empty();
    // The system's store may be absent or partly unreadable: what loads is used.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some(path) = std::env::var_os(tether_env::EnvVars::TETHER_SERVER_DATABASE_CA) {
        let shown = std::path::Path::new(&path).display().to_string();
        let certificates = rustls_pki_types::CertificateDer::pem_file_iter(&path)
            .map_err(|e| {
                format!(
                    "cannot read {}={shown}: {e}",
                    tether_env::EnvVars::TETHER_SERVER_DATABASE_CA
                )
            })?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{shown} is not a PEM certificate file: {e}"))?;
        if certificates.is_empty() {
            return Err(format!("{shown} holds no certificate"));
        }
        for certificate in certificates {
            roots
                .add(certificate)
                .map_err(|e| format!("{shown}: an unusable certificate: {e}"))?;
        }
    }
    if roots.is_empty() {
        return Err(format!(
            "sslmode=require, but no certificate authority is known: the system has none and {} is not set",
            tether_env::EnvVars::TETHER_SERVER_DATABASE_CA
        ));
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

impl PostgresStore {
    /// Connects (lazily, through the pool), checks the database answers and migrates it.
    pub(super) async fn open(url: &DatabaseUrl) -> Result<Self, StoreError> {
        let shown = url.to_string();
        let DatabaseUrl::Postgres { config } = url else {
            return Err(StoreError::InvalidUrl {
                reason: "not a PostgreSQL URL".to_owned(),
            });
        };
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = if config.get_ssl_mode() == SslMode::Require {
            let tls = tls_connector().map_err(|reason| StoreError::Unreachable {
                database: shown.clone(),
                reason,
            })?;
            Manager::from_config((**config).clone(), tls, manager_config)
        } else {
            Manager::from_config((**config).clone(), NoTls, manager_config)
        };
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_TIMEOUT))
            .create_timeout(Some(POOL_TIMEOUT))
            .recycle_timeout(Some(POOL_TIMEOUT))
            .build()
            .map_err(|error| StoreError::Unreachable {
                database: shown.clone(),
                reason: error.to_string(),
            })?;
        let store = Self { pool, shown };
        store.migrate().await?;
        Ok(store)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, Failure> {
        self.pool
            .get()
            .await
            .map_err(|error| Failure::Driver(PgError::Pool(with_causes(&error))))
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        run!(self, {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await?;
            // Not `CREATE TABLE IF NOT EXISTS`: PostgreSQL answers that with a NOTICE, which
            // tokio-postgres logs at INFO on every start.
            let exists: bool = tx
                .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
                .await?
                .get(0);
            if !exists {
                tx.batch_execute(
                    "CREATE TABLE schema_migrations (
                         version       INTEGER PRIMARY KEY,
                         applied_at_ms BIGINT NOT NULL
                     )",
                )
                .await?;
            }
            let version: i32 = tx
                .query_one(
                    "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                    &[],
                )
                .await?
                .get(0);
            let known = i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX);
            if version > known {
                return Err(Failure::Store(StoreError::TooNew {
                    database: self.shown.clone(),
                    found: i64::from(version),
                    known: i64::from(known),
                }));
            }
            for (index, migration) in MIGRATIONS
                .iter()
                .enumerate()
                .skip(usize::try_from(version).unwrap_or(0))
            {
                tx.batch_execute(migration).await?;
                let applied = i32::try_from(index + 1).unwrap_or(i32::MAX);
                tx.execute(
                    "INSERT INTO schema_migrations (version, applied_at_ms) VALUES ($1, $2)",
                    &[&applied, &now_ms()],
                )
                .await?;
                tracing::debug!(version = applied, "applied a store migration");
            }
            tx.commit().await?;
            Ok(())
        })
    }
}

/// Inserts an installation's sealed values, in their order.
async fn insert_values(
    client: &impl deadpool_postgres::GenericClient,
    uid: &str,
    values: &[SealedValue],
) -> Result<(), Failure> {
    let statement = client
        .prepare_cached(
            "INSERT INTO installation_values (installation_uid, kind, position, name, sealed)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .await?;
    for (position, value) in values.iter().enumerate() {
        let position = i32::try_from(position).unwrap_or(i32::MAX);
        client
            .execute(
                &statement,
                &[
                    &uid,
                    &value.kind.as_str(),
                    &position,
                    &value.name,
                    &value.sealed,
                ],
            )
            .await?;
    }
    Ok(())
}

/// The sealed values of installation `uid`, in their order.
async fn values_of(
    client: &impl deadpool_postgres::GenericClient,
    uid: Uuid,
) -> Result<Vec<SealedValue>, Failure> {
    let statement = client
        .prepare_cached(
            "SELECT kind, name, sealed FROM installation_values
             WHERE installation_uid = $1 ORDER BY position",
        )
        .await?;
    let mut values = Vec::new();
    for row in client.query(&statement, &[&uid.to_string()]).await? {
        let name: String = row.try_get(1)?;
        let kind = parse_value_kind(uid, &name, row.try_get(0)?)?;
        values.push(SealedValue {
            kind,
            name,
            sealed: row.try_get(2)?,
        });
    }
    Ok(values)
}

/// An installation from a row of `name, team, kind, active, template` (from `first` on) and its
/// values.
async fn installation_from(
    client: &impl deadpool_postgres::GenericClient,
    uid: Uuid,
    row: &tokio_postgres::Row,
    first: usize,
) -> Result<StoredInstallation, Failure> {
    let kind: &str = row.try_get(first + 2)?;
    Ok(StoredInstallation {
        uid,
        name: row.try_get(first)?,
        team: row.try_get(first + 1)?,
        kind: parse_kind(uid, kind)?,
        active: row.try_get(first + 3)?,
        template: row.try_get(first + 4)?,
        values: values_of(client, uid).await?,
    })
}

#[async_trait::async_trait]
impl Storage for PostgresStore {
    fn describe(&self) -> String {
        self.shown.clone()
    }

    async fn meta(&self, key: &'static str) -> Result<Option<Vec<u8>>, StoreError> {
        run!(self, {
            let client = self.client().await?;
            let row = client
                .query_opt("SELECT value FROM meta WHERE key = $1", &[&key])
                .await?;
            Ok(row.map(|row| row.try_get(0)).transpose()?)
        })
    }

    async fn insert_meta_if_absent(
        &self,
        key: &'static str,
        value: Vec<u8>,
    ) -> Result<(), StoreError> {
        run!(self, {
            self.client()
                .await?
                .execute(
                    "INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                    &[&key, &value],
                )
                .await?;
            Ok(())
        })
    }

    async fn replace_meta(&self, key: &'static str, value: Vec<u8>) -> Result<(), StoreError> {
        run!(self, {
            self.client()
                .await?
                .execute(
                    "INSERT INTO meta (key, value) VALUES ($1, $2)
                     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    &[&key, &value],
                )
                .await?;
            Ok(())
        })
    }

    async fn insert_installation(
        &self,
        installation: StoredInstallation,
    ) -> Result<(), StoreError> {
        run!(self, {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let uid = installation.uid.to_string();
            tx.execute(
                "INSERT INTO installations (uid, name, team, kind, template, active, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &uid,
                    &installation.name,
                    &installation.team,
                    &installation.kind.as_str(),
                    &installation.template,
                    &installation.active,
                    &(now_ms() / 1000),
                ],
            )
            .await?;
            insert_values(&tx, &uid, &installation.values).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    async fn replace_sealed(&self, installation: StoredInstallation) -> Result<(), StoreError> {
        run!(self, {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let uid = installation.uid.to_string();
            let changed = tx
                .execute(
                    "UPDATE installations SET template = $1 WHERE uid = $2",
                    &[&installation.template, &uid],
                )
                .await?;
            if changed == 0 {
                return Err(Failure::Store(StoreError::UnknownInstallation {
                    uid: installation.uid,
                }));
            }
            tx.execute(
                "DELETE FROM installation_values WHERE installation_uid = $1",
                &[&uid],
            )
            .await?;
            insert_values(&tx, &uid, &installation.values).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    async fn list_installations(&self) -> Result<Vec<InstallationSummary>, StoreError> {
        run!(self, {
            let client = self.client().await?;
            let rows = client
                .query(
                    "SELECT uid, name, team, kind, active FROM installations ORDER BY seq",
                    &[],
                )
                .await?;
            let mut summaries = Vec::with_capacity(rows.len());
            for row in rows {
                let uid = parse_uid(row.try_get(0)?)?;
                summaries.push(InstallationSummary {
                    uid,
                    name: row.try_get(1)?,
                    team: row.try_get(2)?,
                    kind: parse_kind(uid, row.try_get(3)?)?,
                    active: row.try_get(4)?,
                });
            }
            Ok(summaries)
        })
    }

    async fn team_uids(&self, team: String) -> Result<Vec<Uuid>, StoreError> {
        run!(self, {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    "SELECT uid FROM installations WHERE team = $1 AND active ORDER BY seq",
                )
                .await?;
            let mut uids = Vec::new();
            for row in client.query(&statement, &[&team]).await? {
                uids.push(parse_uid(row.try_get(0)?)?);
            }
            Ok(uids)
        })
    }

    async fn installation(
        &self,
        uid: Uuid,
        team: Option<String>,
    ) -> Result<Option<StoredInstallation>, StoreError> {
        run!(self, {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    "SELECT name, team, kind, active, template FROM installations
                     WHERE uid = $1 AND ($2::TEXT IS NULL OR team = $2)",
                )
                .await?;
            let Some(row) = client
                .query_opt(&statement, &[&uid.to_string(), &team])
                .await?
            else {
                return Ok(None);
            };
            Ok(Some(installation_from(&client, uid, &row, 0).await?))
        })
    }

    async fn set_active(&self, uid: Uuid, active: bool) -> Result<(), StoreError> {
        run!(self, {
            let changed = self
                .client()
                .await?
                .execute(
                    "UPDATE installations SET active = $1 WHERE uid = $2",
                    &[&active, &uid.to_string()],
                )
                .await?;
            if changed == 0 {
                return Err(Failure::Store(StoreError::UnknownInstallation { uid }));
            }
            Ok(())
        })
    }

    async fn insert_api_key(
        &self,
        key_hash: [u8; 32],
        id: String,
        team: String,
    ) -> Result<(), StoreError> {
        run!(self, {
            self.client()
                .await?
                .execute(
                    "INSERT INTO api_keys (key_hash, id, team, created_at) VALUES ($1, $2, $3, $4)",
                    &[&key_hash.as_slice(), &id, &team, &(now_ms() / 1000)],
                )
                .await?;
            Ok(())
        })
    }

    async fn api_key(&self, key_hash: [u8; 32]) -> Result<Option<ApiKeyRecord>, StoreError> {
        run!(self, {
            let client = self.client().await?;
            let statement = client
                .prepare_cached("SELECT id, team, last_used_at FROM api_keys WHERE key_hash = $1")
                .await?;
            let Some(row) = client
                .query_opt(&statement, &[&key_hash.as_slice()])
                .await?
            else {
                return Ok(None);
            };
            let now = now_ms();
            if last_used_is_stale(row.try_get(2)?, now) {
                let touch = client
                    .prepare_cached("UPDATE api_keys SET last_used_at = $1 WHERE key_hash = $2")
                    .await?;
                client
                    .execute(&touch, &[&(now / 1000), &key_hash.as_slice()])
                    .await?;
            }
            Ok(Some(ApiKeyRecord {
                id: row.try_get(0)?,
                team: row.try_get(1)?,
            }))
        })
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeySummary>, StoreError> {
        run!(self, {
            let client = self.client().await?;
            let rows = client
                .query(
                    "SELECT id, team, created_at, last_used_at FROM api_keys ORDER BY seq",
                    &[],
                )
                .await?;
            let mut keys = Vec::with_capacity(rows.len());
            for row in rows {
                keys.push(ApiKeySummary {
                    id: row.try_get(0)?,
                    team: row.try_get(1)?,
                    created_at: row.try_get(2)?,
                    last_used_at: row.try_get(3)?,
                });
            }
            Ok(keys)
        })
    }

    async fn revoke_api_key(&self, id: String) -> Result<bool, StoreError> {
        run!(self, {
            let deleted = self
                .client()
                .await?
                .execute("DELETE FROM api_keys WHERE id = $1", &[&id])
                .await?;
            Ok(deleted > 0)
        })
    }

    async fn insert_proxy_token(
        &self,
        token_hash: [u8; 32],
        uid: Uuid,
        expires_at_ms: i64,
    ) -> Result<(), StoreError> {
        run!(self, {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    "INSERT INTO proxy_tokens (token_hash, installation_uid, expires_at_ms, created_at_ms)
                     VALUES ($1, $2, $3, $4)",
                )
                .await?;
            client
                .execute(
                    &statement,
                    &[
                        &token_hash.as_slice(),
                        &uid.to_string(),
                        &expires_at_ms,
                        &now_ms(),
                    ],
                )
                .await?;
            Ok(())
        })
    }

    async fn proxy_token(
        &self,
        token_hash: [u8; 32],
    ) -> Result<Option<(ProxyTokenRecord, StoredInstallation)>, StoreError> {
        run!(self, {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    "SELECT t.installation_uid, t.expires_at_ms,
                            i.name, i.team, i.kind, i.active, i.template
                     FROM proxy_tokens t JOIN installations i ON i.uid = t.installation_uid
                     WHERE t.token_hash = $1",
                )
                .await?;
            let Some(row) = client
                .query_opt(&statement, &[&token_hash.as_slice()])
                .await?
            else {
                return Ok(None);
            };
            let uid = parse_uid(row.try_get(0)?)?;
            let record = ProxyTokenRecord {
                uid,
                expires_at_ms: row.try_get(1)?,
            };
            Ok(Some((
                record,
                installation_from(&client, uid, &row, 2).await?,
            )))
        })
    }

    async fn revoke_proxy_tokens(&self, uid: Option<Uuid>) -> Result<u64, StoreError> {
        run!(self, {
            let client = self.client().await?;
            Ok(match uid {
                Some(uid) => {
                    client
                        .execute(
                            "DELETE FROM proxy_tokens WHERE installation_uid = $1",
                            &[&uid.to_string()],
                        )
                        .await?
                }
                None => client.execute("DELETE FROM proxy_tokens", &[]).await?,
            })
        })
    }

    async fn purge_proxy_tokens(&self, before_ms: i64) -> Result<u64, StoreError> {
        run!(self, {
            Ok(self
                .client()
                .await?
                .execute(
                    "DELETE FROM proxy_tokens WHERE expires_at_ms < $1",
                    &[&before_ms],
                )
                .await?)
        })
    }

    async fn record_audit(&self, event: AuditEvent) -> Result<(), StoreError> {
        run!(self, {
            let client = self.client().await?;
            let statement = client
                .prepare_cached(
                    "INSERT INTO audit_events (at_ms, actor, action, target, detail)
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .await?;
            client
                .execute(
                    &statement,
                    &[
                        &event.at_ms,
                        &event.actor,
                        &event.action,
                        &event.target,
                        &event.detail,
                    ],
                )
                .await?;
            Ok(())
        })
    }

    async fn audit_events(&self, limit: i64) -> Result<Vec<AuditEvent>, StoreError> {
        run!(self, {
            let client = self.client().await?;
            let rows = client
                .query(
                    "SELECT at_ms, actor, action, target, detail FROM audit_events
                     ORDER BY id DESC LIMIT $1",
                    &[&limit],
                )
                .await?;
            let mut events = Vec::with_capacity(rows.len());
            for row in rows {
                events.push(AuditEvent {
                    at_ms: row.try_get(0)?,
                    actor: row.try_get(1)?,
                    action: row.try_get(2)?,
                    target: row.try_get(3)?,
                    detail: row.try_get(4)?,
                });
            }
            Ok(events)
        })
    }

    async fn ping(&self) -> Result<(), StoreError> {
        run!(self, {
            self.client().await?.execute("SELECT 1", &[]).await?;
            Ok(())
        })
    }
}
