//! Search: each registry paged and cached on its own, then fanned out concurrently and merged.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cache::Entry;
use crate::client::{Endpoint, Freshness, Registries, SMITHERY_NAME, Source, offline_or};
use crate::error::RegistryError;
use crate::model::{ServerList, ServerResponse, SmitheryList, SmitheryServer, Status};

/// The most pages one search follows, whatever the limit.
const MAX_PAGES: usize = 20;

/// What to search for.
#[derive(Debug, Clone)]
pub struct SearchQuery {
    /// Text to match (the official registry matches names, newer versions also descriptions;
    /// Smithery does its own ranking).
    pub text: String,
    /// Rows wanted in all (1 to 100).
    pub limit: usize,
    /// Only the registry of this name (`official`, `smithery`, a configured one; `None`:
    /// every enabled one).
    pub source: Option<String>,
    /// Show deprecated and deleted entries too.
    pub include_hidden: bool,
}

/// One row of a search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchRow {
    /// The name to give `tether show`.
    pub name: String,
    /// Human title, when the entry has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// One line.
    pub description: String,
    /// `npm`, `pypi`, `oci`, `nuget`, `mcpb`, `remote` (Smithery: `remote` or `local`).
    pub transports: Vec<String>,
    /// The latest version (Smithery has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Which API it came through.
    pub source: Source,
    /// The name of the registry it came from (`official`, `smithery`, a configured one).
    pub registry: String,
    /// Lifecycle status.
    pub status: Status,
}

/// How one registry answered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceReport {
    /// Which API.
    pub source: Source,
    /// Which registry.
    pub registry: String,
    /// Where its rows came from; `None` when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freshness: Option<Freshness>,
    /// Why it failed, when it did (the other registry's rows are still shown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A merged search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchResults {
    /// The rows, the registries' lists interleaved (each in its own order).
    pub rows: Vec<SearchRow>,
    /// One report per registry asked.
    pub sources: Vec<SourceReport>,
}

impl SearchResults {
    /// The table `tether search` prints: name, version, transports, the registry, then
    /// `title: description` (`[deprecated]`/`[deleted]` first for hidden entries).
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let width = |text: &dyn Fn(&SearchRow) -> String, least: usize| {
            let widest = self.rows.iter().map(|r| text(r).chars().count()).max();
            widest.unwrap_or(0).max(least)
        };
        let name = width(&|r| r.name.clone(), 4);
        let version = width(&|r| r.version.clone().unwrap_or_else(|| "-".into()), 7);
        let transports = width(&|r| r.transports.join(","), 10);
        let registry = width(&|r| r.registry.clone(), 8);
        let mut out = format!(
            "{:name$}  {:version$}  {:transports$}  {:registry$}  DESCRIPTION\n",
            "NAME", "VERSION", "TRANSPORTS", "SOURCE"
        );
        for row in &self.rows {
            let mut description = match &row.title {
                Some(title) if !title.is_empty() => format!("{title}: {}", row.description),
                _ => row.description.clone(),
            };
            if row.status.is_hidden() {
                description = format!("[{}] {description}", row.status.as_str());
            }
            let _ = writeln!(
                out,
                "{:name$}  {:version$}  {:transports$}  {:registry$}  {description}",
                row.name,
                row.version.as_deref().unwrap_or("-"),
                row.transports.join(","),
                row.registry,
            );
        }
        out
    }
}

fn official_row(registry: &str, response: &ServerResponse) -> SearchRow {
    let server = &response.server;
    SearchRow {
        name: server.name.clone(),
        title: server.title.clone(),
        description: server.description.clone(),
        transports: server.transports(),
        version: (!server.version.is_empty()).then(|| server.version.clone()),
        source: Source::Official,
        registry: registry.to_owned(),
        status: response.status(),
    }
}

fn smithery_row(server: &SmitheryServer) -> SearchRow {
    SearchRow {
        name: server.qualified_name.clone(),
        title: server.display_name.clone(),
        description: server.description.clone(),
        transports: vec![if server.remote { "remote" } else { "local" }.to_owned()],
        version: None,
        source: Source::Smithery,
        registry: SMITHERY_NAME.to_owned(),
        status: Status::Active,
    }
}

/// `updated_since` for an entry fetched at `fetched_at` (a minute of slack for clock skew).
fn rfc3339(fetched_at: u64) -> String {
    let seconds = i64::try_from(fetched_at.saturating_sub(60)).unwrap_or(0);
    time::OffsetDateTime::from_unix_timestamp(seconds)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

/// Every page of a list: the rows, the first page's ETag and where they came from; or the
/// error and whether the cache may stand in for it.
type Pages<T> = Result<(Vec<T>, Option<String>, Freshness), (RegistryError, bool)>;

/// The cached rows, confirmed by a 304 (asked for only with a cached entry's ETag).
fn unchanged<T: Clone>(cached: Option<&Entry<Vec<T>>>) -> Pages<T> {
    cached
        .map(|entry| {
            (
                entry.body.clone(),
                entry.etag.clone(),
                Freshness::Revalidated,
            )
        })
        .ok_or_else(|| {
            (
                RegistryError::Client(
                    "a registry answered 304 to a request without an ETag".to_owned(),
                ),
                false,
            )
        })
}

/// One page of a list.
enum Page<L> {
    /// 304: the cached entry holds.
    NotModified,
    /// 200.
    Fresh {
        /// The page.
        list: L,
        /// Its ETag.
        etag: Option<String>,
    },
}

impl Registries {
    /// One page; the error says whether the cache may stand in (transport errors and 5xx).
    async fn page<L: DeserializeOwned>(
        &self,
        at: &Endpoint,
        url: &reqwest::Url,
        etag: Option<&str>,
    ) -> Result<Page<L>, (RegistryError, bool)> {
        let reply = self.send(at, url, etag).await.map_err(|e| (e, true))?;
        match reply.status {
            304 if etag.is_some() => Ok(Page::NotModified),
            200 => Ok(Page::Fresh {
                list: Self::decode(at, url, &reply.body).map_err(|e| (e, false))?,
                etag: reply.etag,
            }),
            status => Err((
                Self::status_error(at, url, status, &reply.body),
                status >= 500,
            )),
        }
    }

    /// Searches every registry `query` names (Smithery only with an API key), concurrently,
    /// and merges. Fails only when every registry asked failed.
    pub async fn search(&self, query: &SearchQuery) -> Result<SearchResults, RegistryError> {
        let asked: Vec<&Endpoint> = match query.source.as_deref() {
            Some(name) => {
                let at = self.endpoint(name)?;
                if at.source == Source::Smithery && !self.smithery_enabled() {
                    return Err(RegistryError::NoSmitheryKey);
                }
                vec![at]
            }
            None => self
                .officials
                .iter()
                .chain(self.smithery_enabled().then_some(&self.smithery))
                .collect(),
        };
        let outcomes = futures_util::future::join_all(asked.iter().map(|at| async move {
            match at.source {
                Source::Official => self.search_official(at, query).await,
                Source::Smithery => self.search_smithery(at, query).await,
            }
        }))
        .await;

        let mut lists = Vec::new();
        let mut sources = Vec::new();
        let mut errors = Vec::new();
        for (at, outcome) in asked.into_iter().zip(outcomes) {
            let mut report = SourceReport {
                source: at.source,
                registry: at.name.clone(),
                freshness: None,
                error: None,
            };
            match outcome {
                Ok((rows, freshness)) => {
                    lists.push(rows);
                    report.freshness = Some(freshness);
                }
                Err(error) => {
                    report.error = Some(error.to_string());
                    errors.push(error);
                }
            }
            sources.push(report);
        }
        if lists.is_empty()
            && let Some(error) = errors.into_iter().next()
        {
            return Err(error);
        }
        let mut rows = Vec::new();
        let mut iters: Vec<_> = lists
            .into_iter()
            .map(|rows| {
                rows.into_iter()
                    .filter(|row: &SearchRow| query.include_hidden || !row.status.is_hidden())
            })
            .collect();
        'merge: loop {
            let mut any = false;
            for iter in &mut iters {
                if rows.len() == query.limit {
                    break 'merge;
                }
                if let Some(row) = iter.next() {
                    rows.push(row);
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        Ok(SearchResults { rows, sources })
    }

    /// A list through the cache: a fresh entry as it is; else `pages` (given the stale entry,
    /// for revalidation) and stored; when `pages` fails in a way that allows it, the cached
    /// entry of any age, reported offline.
    async fn cached_list<T>(
        &self,
        key: &str,
        pages: impl AsyncFnOnce(Option<&Entry<Vec<T>>>) -> Pages<T>,
    ) -> Result<(Vec<T>, Freshness), RegistryError>
    where
        T: Serialize + DeserializeOwned,
    {
        let (cached, fresh) = self.fresh::<Vec<T>>(key);
        match cached {
            Some(entry) if fresh => {
                let age_secs = entry.age().as_secs();
                Ok((entry.body, Freshness::Cache { age_secs }))
            }
            cached => match pages(cached.as_ref()).await {
                Ok((rows, etag, freshness)) => {
                    self.store(key, etag, &rows);
                    Ok((rows, freshness))
                }
                Err((error, fall_back)) => offline_or(error, cached, fall_back),
            },
        }
    }

    async fn search_official(
        &self,
        at: &Endpoint,
        query: &SearchQuery,
    ) -> Result<(Vec<SearchRow>, Freshness), RegistryError> {
        let key = format!(
            "official search {} {} {:?} {} {}",
            at.name, at.base, query.text, query.limit, query.include_hidden
        );
        let (servers, freshness) = self
            .cached_list(&key, async |cached| {
                self.official_pages(at, query, cached).await
            })
            .await?;
        let rows = servers.iter().map(|s| official_row(&at.name, s)).collect();
        Ok((rows, freshness))
    }

    /// Pages through `/v0.1/servers`. With a cached entry: `If-None-Match` on the first page
    /// when it has an ETag (304 → unchanged), else `updated_since` and a merge by name.
    async fn official_pages(
        &self,
        at: &Endpoint,
        query: &SearchQuery,
        cached: Option<&Entry<Vec<ServerResponse>>>,
    ) -> Pages<ServerResponse> {
        let since = cached
            .filter(|e| e.etag.is_none())
            .map(|e| rfc3339(e.fetched_at));
        let page_size = query.limit.clamp(1, 100).to_string();
        let mut cursor: Option<String> = None;
        let mut servers: Vec<ServerResponse> = Vec::new();
        let mut first_etag = None;
        for page in 0..MAX_PAGES {
            let mut params: Vec<(&str, &str)> = vec![
                ("search", &query.text),
                ("version", "latest"),
                ("limit", &page_size),
            ];
            if query.include_hidden || since.is_some() {
                params.push(("include_deleted", "true"));
            }
            if let Some(since) = &since {
                params.push(("updated_since", since));
            }
            if let Some(cursor) = &cursor {
                params.push(("cursor", cursor));
            }
            let url = self.url(at, &["v0.1", "servers"], &params);
            let etag = if page == 0 {
                cached.and_then(|e| e.etag.as_deref())
            } else {
                None
            };
            let list: ServerList = match self.page(at, &url, etag).await? {
                Page::NotModified => return unchanged(cached),
                Page::Fresh { list, etag } => {
                    if page == 0 {
                        first_etag = etag;
                    }
                    list
                }
            };
            servers.extend(list.servers);
            let visible = servers
                .iter()
                .filter(|s| query.include_hidden || !s.status().is_hidden())
                .count();
            cursor = list.metadata.next_cursor;
            if cursor.is_none() || (since.is_none() && visible >= query.limit) {
                break;
            }
        }
        match (since, cached) {
            (Some(_), Some(entry)) => {
                let changed = !servers.is_empty();
                let mut merged = entry.body.clone();
                for update in servers {
                    match merged
                        .iter_mut()
                        .find(|s| s.server.name == update.server.name)
                    {
                        Some(slot) => *slot = update,
                        None => merged.push(update),
                    }
                }
                let freshness = if changed {
                    Freshness::Network
                } else {
                    Freshness::Revalidated
                };
                Ok((merged, first_etag, freshness))
            }
            _ => Ok((servers, first_etag, Freshness::Network)),
        }
    }

    async fn search_smithery(
        &self,
        at: &Endpoint,
        query: &SearchQuery,
    ) -> Result<(Vec<SearchRow>, Freshness), RegistryError> {
        let key = format!(
            "smithery search {} {:?} {}",
            at.base, query.text, query.limit
        );
        let (servers, freshness) = self
            .cached_list(&key, async |cached| {
                self.smithery_pages(at, query, cached).await
            })
            .await?;
        let rows = servers.iter().take(query.limit).map(smithery_row).collect();
        Ok((rows, freshness))
    }

    async fn smithery_pages(
        &self,
        at: &Endpoint,
        query: &SearchQuery,
        cached: Option<&Entry<Vec<SmitheryServer>>>,
    ) -> Pages<SmitheryServer> {
        let page_size = query.limit.clamp(1, 100).to_string();
        let mut servers = Vec::new();
        let mut first_etag = None;
        for page in 1..=MAX_PAGES {
            let number = page.to_string();
            let url = self.url(
                at,
                &["servers"],
                &[
                    ("q", &query.text),
                    ("page", &number),
                    ("pageSize", &page_size),
                ],
            );
            let etag = if page == 1 {
                cached.and_then(|e| e.etag.as_deref())
            } else {
                None
            };
            let list: SmitheryList = match self.page(at, &url, etag).await? {
                Page::NotModified => return unchanged(cached),
                Page::Fresh { list, etag } => {
                    if page == 1 {
                        first_etag = etag;
                    }
                    list
                }
            };
            let last = list.servers.is_empty()
                || u64::try_from(page).unwrap_or(u64::MAX) >= list.pagination.total_pages;
            servers.extend(list.servers);
            if last || servers.len() >= query.limit {
                break;
            }
        }
        Ok((servers, first_etag, Freshness::Network))
    }
}
