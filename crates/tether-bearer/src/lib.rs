//! The bearer-token seams between the driver (which sends requests to remote servers) and the
//! OAuth client (which has tokens): [`BearerAuth`], where a refused token's replacement comes
//! from, and [`BearerTarget`], what stored tokens are applied to (a driver session).
//!
//! Both sides depend on this crate, so `tether-oauth` needs nothing of `tether-driver` (and the
//! driver nothing of OAuth). `tether-driver` re-exports [`BearerAuth`] under its old path.
//!
//! **Invariant:** nothing here knows about OAuth or HTTP: only "a token for this URL" (and,
//! for a token bound to a key, "a proof for this request").

#![deny(missing_docs)]

use futures_util::future::BoxFuture;
use tether_secret::SecretValue;

/// Where a remote server's fresh bearer tokens come from (the CLI's OAuth client). Asked only
/// for a server that was sent an `Authorization` header; `None` leaves the refusal standing.
pub trait BearerAuth: Send + Sync {
    /// The server at `url` refused the token (401): a new one (an OAuth refresh), or `None`.
    fn refresh(&self, url: String) -> BoxFuture<'static, Option<SecretValue>>;

    /// The server at `url` refused the token with 403 and `challenge` (its
    /// `WWW-Authenticate` value, e.g. `Bearer error="insufficient_scope", scope="…"`): a token
    /// with more access (an OAuth step-up), or `None` when the challenge asks for nothing
    /// that can be had.
    fn step_up(&self, url: String, challenge: String) -> BoxFuture<'static, Option<SecretValue>>;

    /// A proof of possession for a `method` request to `url` carrying `token` (with the
    /// server's `nonce` when it asked for one): `Some` when the token is bound to a key the
    /// caller holds (DPoP, RFC 9449: the token then goes as `Authorization: DPoP` and the
    /// proof in the `DPoP` header), `None` for a plain bearer token. The default: none.
    fn proof(
        &self,
        url: &str,
        method: &str,
        token: &SecretValue,
        nonce: Option<&str>,
    ) -> Option<SecretValue> {
        let _ = (url, method, token, nonce);
        None
    }
}

/// What stored bearer tokens are applied to: a set of remote servers by URL (the driver's
/// session).
pub trait BearerTarget {
    /// The URLs of the remote servers whose config sends no `Authorization` header, in order.
    fn urls_without_authorization(&self) -> Vec<String>;

    /// Gives each of those servers the token `token_for` returns for its URL, as a sensitive
    /// `Authorization: Bearer` header; returns the names of the servers that got one.
    fn give_bearer_tokens(
        &mut self,
        token_for: &mut dyn FnMut(&str) -> Option<SecretValue>,
    ) -> Vec<String>;
}
