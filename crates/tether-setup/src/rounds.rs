//! 2026-07-28 clients get no server-to-client requests: `mcp_setup_request_secret`'s URL
//! elicitation is asked through an `InputRequiredResult` instead (SEP-2322), when the
//! request's `_meta` declares URL elicitation; the page answer (`status: pending`) otherwise.
//!
//! The `requestState` is sealed (`RequestStateCodec`, HMAC-SHA256, a key of 32 random bytes
//! per process), bound to the tool and expiring after the elicitation timeout. It carries a
//! random handle only: the ref and the page's nonce (both masked in the logs) stay here, so
//! the state, which the client echoes and a log may show, holds neither. A handle is good for
//! one retry.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rmcp::model::{InputRequest, InputRequiredResult, RequestStateCodec, SealOptions};

/// The key of the one input request.
pub const INPUT_KEY: &str = "secret";

/// What the tool's `requestState` refers to: a ref whose value the person is asked for.
pub struct Waiting {
    /// `secret://…`.
    pub reference: String,
    /// Its page's nonce.
    pub nonce: String,
    /// The key the value is for.
    pub key: String,
    /// The URL elicitation asked.
    pub request: InputRequest,
}

/// The refs waiting for a 2026-07-28 client's answer. One per setup server.
pub struct SecretRounds {
    /// `None` when the system gave no randomness for a key: such clients get the page answer.
    codec: Option<RequestStateCodec>,
    waiting: Mutex<HashMap<String, (Waiting, Instant)>>,
    limit: Duration,
}

const BIND: &[u8] = b"mcp_setup_request_secret";

impl SecretRounds {
    /// `limit`: how long a state is good for (the elicitation timeout).
    pub fn new(limit: Duration) -> Self {
        let codec = tether_http::token::random_hex(32)
            .ok()
            .and_then(|key| RequestStateCodec::try_new(key.into_bytes()).ok());
        Self {
            codec,
            waiting: Mutex::new(HashMap::new()),
            limit,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, (Waiting, Instant)>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The `InputRequiredResult` that asks for `waiting`'s value; `None` without a key.
    pub fn ask(&self, waiting: Waiting) -> Option<InputRequiredResult> {
        let codec = self.codec.as_ref()?;
        let handle = tether_http::token::random_hex(16).ok()?;
        let options = SealOptions::new().associated_data(BIND).ttl(self.limit);
        let state = codec.seal_with(handle.as_bytes(), &options);
        let requests = [(INPUT_KEY.to_owned(), waiting.request.clone())].into();
        let mut all = self.lock();
        // Those whose client never came back are forgotten (their refs expire on their own).
        let limit = self.limit;
        all.retain(|_, (_, since)| since.elapsed() < limit);
        all.insert(handle, (waiting, Instant::now()));
        Some(InputRequiredResult::new(Some(requests), Some(state)))
    }

    /// What `state` refers to, taken out; the error says why it is refused.
    pub fn resume(&self, state: &str) -> Result<Waiting, String> {
        let codec = self
            .codec
            .as_ref()
            .ok_or("this setup server issued no requestState")?;
        let handle = codec
            .open_with(state, BIND)
            .map_err(|_| "requestState failed its integrity check (tampered with, expired, or issued for another tool)")?;
        let handle = String::from_utf8(handle)
            .map_err(|_| "requestState is not one this setup server issued")?;
        self.lock()
            .remove(&handle)
            .map(|(waiting, _)| waiting)
            .ok_or_else(|| {
                "requestState names no request waiting for an answer (used already, or expired)"
                    .to_owned()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting() -> Waiting {
        let request = serde_json::from_value(serde_json::json!({
            "method": "elicitation/create",
            "params": {"mode": "url", "message": "m", "url": "http://127.0.0.1:1/p", "elicitationId": "n"}
        }))
        .expect("a URL elicitation");
        Waiting {
            reference: "secret://r".to_owned(),
            nonce: "n".to_owned(),
            key: "K".to_owned(),
            request,
        }
    }

    #[test]
    fn a_state_is_refused_tampered_and_after_its_one_use() {
        let rounds = SecretRounds::new(Duration::from_secs(60));
        let asked = rounds.ask(waiting()).expect("a key");
        let state = asked.request_state.expect("a state");
        let tampered = format!("{state}x");
        assert!(
            rounds
                .resume(&tampered)
                .err()
                .expect("refused")
                .contains("integrity")
        );
        let other = SecretRounds::new(Duration::from_secs(60));
        assert!(other.resume(&state).is_err(), "another process's key");
        assert_eq!(
            rounds.resume(&state).expect("the state").reference,
            "secret://r"
        );
        assert!(
            rounds
                .resume(&state)
                .err()
                .expect("refused")
                .contains("used already")
        );
    }
}
