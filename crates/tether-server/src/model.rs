//! What an installation is at rest: the types the store reads and writes and
//! [`crate::installation`] seals and opens. Plain data: no I/O, no key.

use uuid::Uuid;

/// How a client uses an installation (the schema's `ManagedMcpTransportKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// A remote server: the client gets a proxy URL and a run-scoped token; upstream URL and
    /// credentials stay on the server.
    Url,
    /// A stdio server: the client gets the rendered config and runs the command itself.
    Command,
}

impl TransportKind {
    /// `URL` or `COMMAND`, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Url => "URL",
            TransportKind::Command => "COMMAND",
        }
    }

    /// The inverse of [`TransportKind::as_str`].
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "URL" => Some(TransportKind::Url),
            "COMMAND" => Some(TransportKind::Command),
            _ => None,
        }
    }
}

/// Which kind of value a sealed row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// A value captured from the config's `env` or `headers` (may itself be a credential).
    Captured,
    /// A server-held secret given with `--secret NAME=SOURCE`.
    Secret,
}

impl ValueKind {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ValueKind::Captured => "captured",
            ValueKind::Secret => "secret",
        }
    }

    /// The inverse of [`ValueKind::as_str`].
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "captured" => Some(ValueKind::Captured),
            "secret" => Some(ValueKind::Secret),
            _ => None,
        }
    }
}

/// One sealed value of an installation.
#[derive(Clone, PartialEq, Eq)]
pub struct SealedValue {
    /// Captured or secret.
    pub kind: ValueKind,
    /// The variable or secret name.
    pub name: String,
    /// `nonce || ciphertext || tag`, bound to (uid, kind, name).
    pub sealed: Vec<u8>,
}

impl std::fmt::Debug for SealedValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedValue")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("sealed_bytes", &self.sealed.len())
            .finish()
    }
}

/// An installation as stored: the template (placeholders only) and its sealed values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredInstallation {
    /// Its uid.
    pub uid: Uuid,
    /// Its name (the server's name in returned configs).
    pub name: String,
    /// The team whose API keys may use it.
    pub team: String,
    /// URL (proxied) or COMMAND (config handed out).
    pub kind: TransportKind,
    /// The template (JSON of a `tether_config::TemplatableServer`: placeholders, no values),
    /// sealed too: a URL or a command line may itself be sensitive.
    pub template: Vec<u8>,
    /// Whether clients may use it.
    pub active: bool,
    /// Captured values and secrets, sealed, in their original order.
    pub values: Vec<SealedValue>,
}
