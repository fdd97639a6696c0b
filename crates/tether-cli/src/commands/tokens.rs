//! The stored OAuth tokens as commands use them (not a command of its own): applied to a
//! run's session, renewed for the driver and the hand-off bridge, given to `add`'s and
//! `setup-mcp`'s test-connects, and `needs login` for `tether test`. The OAuth client, the
//! token records and their renewal are `tether-oauth`'s; this is where the settings open its
//! store. See specs/oauth/TECH.md.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use tether_config::RenderedTransport;
use tether_driver::{ServerReport, ServerStatus, Session};
use tether_oauth::{LocalTokens, OAuthClient, StoredTokens, SystemClock, Terminal, Tokens};

use crate::settings;

/// The local store as the settings open it, for the stored tokens.
pub(super) struct SettingsStore;

impl tether_oauth::OpenStore for SettingsStore {
    fn open_existing(&self) -> Result<Option<tether_store::Store>, tether_oauth::OpenError> {
        Ok(settings::open_existing_store()?)
    }

    fn open(&self) -> Result<tether_store::Store, tether_oauth::OpenError> {
        Ok(settings::open_store()?)
    }

    fn written(&self, store: &tether_store::Store) {
        settings::announce(store);
    }
}

/// The stored tokens, with the browser step on this terminal and the system clock.
fn run_tokens() -> StoredTokens {
    StoredTokens::new(
        Arc::new(LocalTokens::new(Arc::new(SettingsStore))),
        Arc::new(Terminal),
        Arc::new(SystemClock),
    )
}

/// Gives each remote server of `session` with a stored token its `Authorization: Bearer`
/// header, refreshing a token near expiry first ([`StoredTokens::apply`]).
pub async fn apply_stored_tokens(session: Session) -> Session {
    run_tokens().apply(session).await
}

/// The driver's and the hand-off bridge's source of fresh bearer tokens.
pub fn bearer_auth() -> Arc<dyn tether_driver::BearerAuth> {
    run_tokens().bearer_auth()
}

pub(super) fn oauth_client() -> anyhow::Result<OAuthClient> {
    Ok(OAuthClient::new(Arc::new(SystemClock))?)
}

/// The tokens stored for `server` (a canonical URL). Without a local store database nothing
/// is recorded, so nothing is read.
pub(super) fn load(server: &str) -> anyhow::Result<Option<Tokens>> {
    let Some(store) = settings::open_existing_store()? else {
        return Ok(None);
    };
    Ok(tether_oauth::store::read(&store, server)?)
}

/// Rewrites the failure of a remote server that answered 401 into what to do about it:
/// `needs login` when it publishes OAuth metadata and no token was sent, and the same when
/// the stored token was refused (revoked, or issued for something else).
pub async fn explain_unauthorized(session: &Session, reports: &mut [ServerReport]) {
    for report in reports {
        let ServerStatus::Failed { reason } = &mut report.status else {
            continue;
        };
        if !(reason.contains("authorization required") || reason.contains("HTTP 401")) {
            continue;
        }
        let Ok(server) = session.server(&report.name) else {
            continue;
        };
        let RenderedTransport::Remote { url, headers, .. } = &server.transport else {
            continue;
        };
        let url = url.expose();
        let Ok(resource) = tether_oauth::canonical_resource(&url) else {
            continue;
        };
        if headers
            .keys()
            .any(|name| name.eq_ignore_ascii_case("authorization"))
            && !stored_tokens(&resource)
        {
            // The config's own credentials were refused: not an OAuth matter.
            continue;
        }
        if stored_tokens(&resource) {
            *reason = tether_log::mask(&format!(
                "needs login: {resource} refused the stored OAuth token; run `tether auth login {resource}`"
            ));
            continue;
        }
        let Ok(client) = oauth_client() else {
            continue;
        };
        if client.discover(&url).await.is_ok() {
            *reason = tether_log::mask(&format!(
                "needs login: {resource} requires OAuth and no token is stored; run `tether auth login {resource}`"
            ));
        }
    }
}

/// Whether tokens are stored for `resource` (an unreadable store counts as none).
fn stored_tokens(resource: &str) -> bool {
    load(resource).ok().flatten().is_some()
}

/// The OAuth tokens `tether auth login` stored, for a remote server's test-connect (`add`'s
/// and `setup-mcp`'s).
pub(crate) struct OauthTokens;

impl tether_install::StoredTokens for OauthTokens {
    fn apply(&self, session: tether_driver::Session) -> BoxFuture<'static, tether_driver::Session> {
        Box::pin(apply_stored_tokens(session))
    }

    fn renewal(&self) -> Arc<dyn tether_driver::BearerAuth> {
        bearer_auth()
    }
}
