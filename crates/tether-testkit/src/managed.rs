//! A managed client for tests: answers `createManagedMcpClientConfig` from a table (no
//! network), counts its calls, can delay each answer, and can change an answer mid-test (a
//! re-mint).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tether_graphql::{
    ManagedMcpClient, ManagedMcpClientConfig, ManagedMcpError, SecretValue, TransportKind,
};
use uuid::Uuid;

/// What the fake managed client answers for one uid.
#[derive(Clone)]
pub enum Answer {
    /// A COMMAND config: the `mcpConfigJson` text and when it expires.
    Config {
        /// The config's JSON.
        json: String,
        /// Its expiry, if any.
        expires_at: Option<time::OffsetDateTime>,
    },
    /// A user-facing error (not found) with this message.
    UserFacing(String),
    /// A result of this unknown `__typename`.
    Unknown(String),
}

/// A managed client that answers from a table, counts calls and can delay every answer.
pub struct FakeManaged {
    answers: Mutex<Vec<(Uuid, Answer)>>,
    /// How many requests it answered.
    pub calls: AtomicUsize,
    /// How long it waits before each answer.
    pub delay: Duration,
}

impl FakeManaged {
    /// A client answering `answers` (uid → answer); any other uid is "not found".
    pub fn new(answers: Vec<(Uuid, Answer)>) -> Self {
        Self {
            answers: Mutex::new(answers),
            calls: AtomicUsize::new(0),
            delay: Duration::ZERO,
        }
    }

    /// Replaces what the fake answers for `uid` (e.g. a re-minted config).
    pub fn set_answer(&self, uid: Uuid, answer: Answer) {
        let mut answers = self
            .answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        answers.retain(|(u, _)| *u != uid);
        answers.push((uid, answer));
    }

    /// How many requests it answered.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl ManagedMcpClient for FakeManaged {
    async fn create_managed_mcp_client_config(
        &self,
        uid: Uuid,
    ) -> Result<ManagedMcpClientConfig, ManagedMcpError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let answer = self
            .answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find(|(u, _)| *u == uid)
            .map(|(_, a)| a.clone());
        match answer {
            Some(Answer::Config { json, expires_at }) => Ok(ManagedMcpClientConfig {
                uid,
                transport_kind: TransportKind::Command,
                mcp_config_json: SecretValue::from(json),
                proxy_url: None,
                proxy_token: None,
                authorization_header: None,
                expires_at,
            }),
            Some(Answer::UserFacing(message)) => Err(ManagedMcpError::UserFacing {
                uid,
                kind: tether_graphql::UserFacingErrorKind::NotFound,
                message,
                attempts: 1,
            }),
            Some(Answer::Unknown(typename)) => Err(ManagedMcpError::UnknownResult {
                uid,
                typename,
                attempts: 1,
            }),
            None => Err(ManagedMcpError::UserFacing {
                uid,
                kind: tether_graphql::UserFacingErrorKind::NotFound,
                message: "MCP server not found".to_owned(),
                attempts: 1,
            }),
        }
    }
}
