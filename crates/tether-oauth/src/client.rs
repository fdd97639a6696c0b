//! [`OAuthClient`]: the HTTP client every OAuth request goes through, with the clock token
//! expiry is read from. Its requests are defined by the modules of each step (discovery,
//! registration, tokens, login).

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::error::OAuthError;

/// How long one OAuth request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends OAuth's requests: no redirects followed (a token endpoint that redirects is not
/// followed with a code in hand), each request bounded by 30 s; the time of a token answer
/// (which its `expires_in` counts from) comes from the clock it was built with.
#[derive(Clone)]
pub struct OAuthClient {
    pub(crate) http: reqwest::Client,
    pub(crate) clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClient").finish_non_exhaustive()
    }
}

impl OAuthClient {
    /// A client reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Result<Self, OAuthError> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("tether/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| OAuthError::HttpClient {
                reason: e.to_string(),
            })?;
        Ok(Self { http, clock })
    }

    /// Seconds since the Unix epoch, by this client's clock.
    pub(crate) fn now(&self) -> i64 {
        crate::clock::now_unix(self.clock.as_ref())
    }
}
