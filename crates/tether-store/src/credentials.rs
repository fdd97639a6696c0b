//! Registry API keys: credentials that belong to no installation, kept like a server's OAuth
//! tokens. The value is in the secret store under a v5 UUID of its own namespace (so it never
//! shares a key with an installation's values, v4 UUIDs), and a row of the `credentials` table
//! says what it is for and where it lives (never the value).
//!
//! ```no_run
//! use tether_store::{Registry, RegistryKey, Store};
//! # fn main() -> Result<(), tether_store::StoreError> {
//! let store = Store::open(&tether_store::default_data_dir()?)?;
//! let key = RegistryKey { registry: Registry::Smithery, url: "https://api.smithery.ai".into() };
//! if store.registry_key_recorded(&key)? {
//!     let _value = store.registry_key(&key)?;
//! }
//! # Ok(()) }
//! ```

use tether_config::SecretValue;
use uuid::Uuid;

use crate::{Location, Store, StoreError};

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

impl Store {
    /// Whether a value is recorded as stored for `key` — no credential-store round trip: a
    /// search asks this first and reads the value only when a request needs it.
    pub fn registry_key_recorded(&self, key: &RegistryKey) -> Result<bool, StoreError> {
        Ok(self
            .credential_location(key.uid(), key.variable())?
            .is_some())
    }

    /// The stored value of `key`, if any.
    pub fn registry_key(&self, key: &RegistryKey) -> Result<Option<SecretValue>, StoreError> {
        self.get_credential(key.uid(), key.variable())
    }

    /// Stores `value` for `key` where new values go (replacing one stored elsewhere); where.
    pub fn set_registry_key(
        &self,
        key: &RegistryKey,
        value: &SecretValue,
    ) -> Result<Location, StoreError> {
        self.set_credential(key.uid(), key.variable(), &key.url, value)
    }

    /// Deletes the stored value of `key` and its record; whether there was one.
    pub fn remove_registry_key(&self, key: &RegistryKey) -> Result<bool, StoreError> {
        self.remove_credential(key.uid(), key.variable())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Preference, SecretStore};

    fn smithery(url: &str) -> RegistryKey {
        RegistryKey {
            registry: Registry::Smithery,
            url: url.to_owned(),
        }
    }

    #[test]
    fn a_key_is_bound_to_its_registry_url() {
        let public = smithery("https://api.smithery.ai");
        let other = smithery("http://127.0.0.1:9/smithery");
        assert_eq!(public.uid(), smithery("https://api.smithery.ai").uid());
        assert_ne!(public.uid(), other.uid());
        assert_eq!(public.uid().get_version_num(), 5);
        assert_eq!(public.variable(), "SMITHERY_API_KEY");
        assert_eq!(Registry::parse("smithery"), Some(Registry::Smithery));
        assert_eq!(Registry::parse("official"), None);
    }

    #[test]
    fn a_stored_key_is_recorded_read_and_removed_by_its_url() {
        let home = tempfile::tempdir().expect("a data directory");
        let secrets = SecretStore::new(home.path(), Preference::File);
        let store = Store::open_with(home.path(), secrets).expect("a store");
        let key = smithery("http://127.0.0.1:9/smithery");
        let elsewhere = smithery("https://api.smithery.ai");
        assert!(!store.registry_key_recorded(&key).expect("asked"));
        let value = SecretValue::new("sentinel-registry-key".to_owned());
        assert_eq!(
            store.set_registry_key(&key, &value).expect("stored"),
            Location::File
        );
        assert!(store.registry_key_recorded(&key).expect("asked"));
        assert!(!store.registry_key_recorded(&elsewhere).expect("asked"));
        let read = store.registry_key(&key).expect("read").expect("a value");
        assert_eq!(read.expose(), value.expose());
        assert!(store.registry_key(&elsewhere).expect("read").is_none());
        let listed = store.credentials().expect("listed");
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (
                listed[0].key,
                listed[0].name.as_str(),
                listed[0].server.as_str()
            ),
            (key.uid(), "SMITHERY_API_KEY", key.url.as_str())
        );
        assert!(store.remove_registry_key(&key).expect("removed"));
        assert!(!store.registry_key_recorded(&key).expect("asked"));
        assert!(!store.remove_registry_key(&key).expect("nothing to remove"));
    }
}
