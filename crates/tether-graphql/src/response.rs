//! Decoding a 2xx response body into a config or a failure.

use serde::Deserialize;
use uuid::Uuid;

use crate::config::ManagedMcpClientConfig;
use crate::error::{DecodeReason, ManagedMcpError, TransportErrorKind, UserFacingErrorKind};
use crate::operation::UserFacingErrorInterface as Interface;
use crate::operation::{
    CreateManagedMcpClientConfig, CreateManagedMcpClientConfigResult as Result_,
};
use crate::redact;
use tether_secret::SecretValue;

/// How many GraphQL error messages an error keeps.
const MAX_GRAPHQL_MESSAGES: usize = 5;

/// Why one attempt failed; [`Failure::into_error`] adds the uid and the attempt count.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// A non-2xx status.
    Status {
        status: u16,
        retry_after: Option<std::time::Duration>,
        body_excerpt: String,
    },
    /// No usable response.
    Transport(TransportErrorKind),
    /// A top-level `errors` array.
    GraphQl(Vec<String>),
    /// The `UserFacingError` member.
    UserFacing {
        kind: UserFacingErrorKind,
        message: String,
    },
    /// An unknown union member.
    UnknownResult(String),
    /// Undecodable body.
    Decode(DecodeReason),
}

impl Failure {
    /// Whether another attempt may succeed: connect errors, timeouts, 429, 502, 503, 504.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Self::Status { status, .. } => matches!(status, 429 | 502 | 503 | 504),
            Self::Transport(kind) => kind.is_transient(),
            Self::GraphQl(_)
            | Self::UserFacing { .. }
            | Self::UnknownResult(_)
            | Self::Decode(_) => false,
        }
    }

    /// The wait the server asked for, if any.
    pub(crate) fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The status code, for logging.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub(crate) fn into_error(self, uid: Uuid, attempts: u32) -> ManagedMcpError {
        match self {
            Self::Status {
                status,
                body_excerpt,
                ..
            } => ManagedMcpError::Http {
                uid,
                status,
                body_excerpt,
                attempts,
                missing_api_key: false,
            },
            Self::Transport(kind) => ManagedMcpError::Transport {
                uid,
                kind,
                attempts,
            },
            Self::GraphQl(messages) => ManagedMcpError::GraphQl {
                uid,
                messages,
                attempts,
            },
            Self::UserFacing { kind, message } => ManagedMcpError::UserFacing {
                uid,
                kind,
                message,
                attempts,
            },
            Self::UnknownResult(typename) => ManagedMcpError::UnknownResult {
                uid,
                typename,
                attempts,
            },
            Self::Decode(reason) => ManagedMcpError::Decode {
                uid,
                reason,
                attempts,
            },
        }
    }
}

/// Only the `errors` array; `data` is skipped without being copied.
#[derive(Deserialize)]
struct ErrorsOnly {
    #[serde(default)]
    errors: Option<Vec<GraphQlErrorEntry>>,
}

#[derive(Deserialize)]
struct GraphQlErrorEntry {
    #[serde(default)]
    message: Option<String>,
}

/// Only `data`.
#[derive(Deserialize)]
struct DataOnly {
    #[serde(default)]
    data: Option<CreateManagedMcpClientConfig>,
}

/// Decodes a 2xx body. `errors`, when present and non-empty, wins over `data`: a partial
/// result of this single-field mutation is not trusted. Server text that reaches an error is
/// masked for `secrets` and truncated.
pub(crate) fn decode(
    uid: Uuid,
    body: &[u8],
    secrets: &[&SecretValue],
) -> Result<ManagedMcpClientConfig, Failure> {
    let json_failure = |error: serde_json::Error| Failure::Decode(DecodeReason::from_json(&error));

    let ErrorsOnly { errors } = serde_json::from_slice(body).map_err(json_failure)?;
    if let Some(errors) = errors.filter(|errors| !errors.is_empty()) {
        let total = errors.len();
        let mut messages: Vec<String> = errors
            .into_iter()
            .take(MAX_GRAPHQL_MESSAGES)
            .map(|entry| match entry.message {
                Some(message) => redact::excerpt(&message, secrets),
                None => "(no message)".to_owned(),
            })
            .collect();
        if total > MAX_GRAPHQL_MESSAGES {
            messages.push(format!("(+{} more)", total - MAX_GRAPHQL_MESSAGES));
        }
        return Err(Failure::GraphQl(messages));
    }

    let DataOnly { data } = serde_json::from_slice(body).map_err(json_failure)?;
    let data = data.ok_or(Failure::Decode(DecodeReason::MissingData))?;
    match data.create_managed_mcp_client_config {
        Result_::CreateManagedMcpClientConfigOutput(output) => {
            ManagedMcpClientConfig::from_output(uid, output).map_err(Failure::Decode)
        }
        Result_::UserFacingError(user_facing) => {
            let (kind, message) = match user_facing.error {
                Interface::GenericUserFacingError(e) => (UserFacingErrorKind::Generic, e.message),
                Interface::ManagedMcpNotFoundError(e) => (UserFacingErrorKind::NotFound, e.message),
                Interface::ManagedMcpInactiveError(e) => (UserFacingErrorKind::Inactive, e.message),
                Interface::Unrecognised(e) => (UserFacingErrorKind::Unrecognised, e.message),
            };
            Err(Failure::UserFacing {
                kind,
                message: redact::excerpt(&message, secrets),
            })
        }
        Result_::Unknown(typename) => {
            Err(Failure::UnknownResult(redact::excerpt(&typename, secrets)))
        }
    }
}
