//! Credentials that belong to no installation — today a registry's API key — kept like a
//! server's OAuth tokens: the value in the secret store under a v5 UUID of their own namespace
//! (so it never shares a key with an installation's values, v4 UUIDs), and a row in the local
//! store's `credentials` table saying what it is for and where it lives (never the value).

use tether_config::SecretValue;
use tether_store::{Location, Store};
use uuid::Uuid;

/// The namespace of registry credentials: `uuid v5(NAMESPACE, "<registry id> <base URL>")`.
const REGISTRY_NAMESPACE: Uuid = Uuid::from_u128(0x3b7e_91c2_5f04_4d8a_b6e1_0c9d_2a4f_7e13);

/// A registry that takes an API key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    /// Smithery: its key is sent as a bearer token on every request.
    Smithery,
}

impl Registry {
    /// Every registry that takes a key.
    pub const ALL: [Self; 1] = [Self::Smithery];

    /// The registry's id on the command line (`--registry smithery`).
    pub fn id(self) -> &'static str {
        match self {
            Self::Smithery => "smithery",
        }
    }

    /// The variable the key is stored under (and read from in the environment).
    pub fn variable(self) -> &'static str {
        match self {
            Self::Smithery => tether_env::EnvVars::SMITHERY_API_KEY,
        }
    }

    /// The registry named `text` (`smithery`).
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|key| key.id() == text)
    }
}

/// The API key of one registry at one base URL: a key stored for the public Smithery is
/// never sent to another `TETHER_SMITHERY_URL`, and two data directories that point at
/// different registries never share an entry of the OS credential store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryKey {
    /// Which registry.
    pub registry: Registry,
    /// Its API base URL.
    pub url: String,
}

impl RegistryKey {
    /// The variable the key is stored under.
    pub fn variable(&self) -> &'static str {
        self.registry.variable()
    }

    /// The key the value is stored under.
    pub fn uid(&self) -> Uuid {
        let text = format!("{} {}", self.registry.id(), self.url);
        Uuid::new_v5(&REGISTRY_NAMESPACE, text.as_bytes())
    }
}

/// Whether a key is recorded as stored for `key` (no credential-store round trip: a search
/// asks this first and reads the value only when a request needs it).
pub fn recorded(store: &Store, key: &RegistryKey) -> anyhow::Result<bool> {
    Ok(store
        .credential_location(key.uid(), key.variable())?
        .is_some())
}

/// The stored value of `key`, if any.
pub fn load(store: &Store, key: &RegistryKey) -> anyhow::Result<Option<SecretValue>> {
    Ok(store.get_credential(key.uid(), key.variable())?)
}

/// Stores `value` for `key` where new values go; returns where.
pub fn save(store: &Store, key: &RegistryKey, value: &SecretValue) -> anyhow::Result<Location> {
    Ok(store.set_credential(key.uid(), key.variable(), &key.url, value)?)
}

/// Deletes the stored value of `key`; whether there was one.
pub fn delete(store: &Store, key: &RegistryKey) -> anyhow::Result<bool> {
    Ok(store.remove_credential(key.uid(), key.variable())?)
}
