//! Credentials that belong to no installation — today a registry's API key — in the secret
//! store under a v5 UUID of their own namespace, so they never share a key with an
//! installation's values (v4 UUIDs) or a server's OAuth tokens (another namespace).
//!
//! No SQLite row records them: each lookup asks the secret store where values are read from
//! (the credential store, or the file when the settings say so), then the file, which holds
//! values written while no credential store answered.

use std::path::Path;

use tether_config::SecretValue;
use tether_store::{Location, Preference, SecretStore};
use uuid::Uuid;

/// The namespace of registry credentials: `uuid v5(NAMESPACE, registry id)`.
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
/// different fixtures never share an entry of the OS credential store.
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

    /// The key the value is stored under: `uuid v5(NAMESPACE, "<id> <url>")`.
    pub fn uid(&self) -> Uuid {
        let text = format!("{} {}", self.registry.id(), self.url);
        Uuid::new_v5(&REGISTRY_NAMESPACE, text.as_bytes())
    }
}

/// Where values not recorded elsewhere are read from first: the file when the settings say
/// so (no probe of the credential store), else wherever new values go.
pub fn read_location(store: &SecretStore) -> Result<Location, tether_store::SecretStoreError> {
    match store.preference() {
        Preference::File => Ok(Location::File),
        _ => store.location(),
    }
}

/// The locations to look in, in order: the read location, then the file.
fn lookup_order(store: &SecretStore) -> Result<Vec<Location>, tether_store::SecretStoreError> {
    Ok(match read_location(store)? {
        Location::Keyring => vec![Location::Keyring, Location::File],
        Location::File => vec![Location::File],
    })
}

/// Whether lookups look in `location` (with `secret_store = file`, never in the credential
/// store).
pub fn looked_in(
    store: &SecretStore,
    location: Location,
) -> Result<bool, tether_store::SecretStoreError> {
    Ok(lookup_order(store)?.contains(&location))
}

/// The stored value of `key` and where it is: the read location first, then the file.
pub fn load(
    store: &SecretStore,
    key: &RegistryKey,
) -> Result<Option<(SecretValue, Location)>, tether_store::SecretStoreError> {
    for location in lookup_order(store)? {
        if let Some(value) = store.get(location, key.uid(), key.variable())? {
            return Ok(Some((value, location)));
        }
    }
    Ok(None)
}

/// Stores `value` for `key` in `to` and deletes a copy in the other place looked in, so a
/// lookup never finds an older value first.
pub fn save(
    store: &SecretStore,
    key: &RegistryKey,
    value: &SecretValue,
    to: Location,
) -> Result<(), tether_store::SecretStoreError> {
    store.set_in(to, key.uid(), key.variable(), value)?;
    for other in lookup_order(store)?.into_iter().filter(|l| *l != to) {
        store.delete(other, key.uid(), key.variable())?;
    }
    Ok(())
}

/// Deletes the stored value of `key` wherever it is looked for; whether there was one.
pub fn delete(
    store: &SecretStore,
    key: &RegistryKey,
) -> Result<bool, tether_store::SecretStoreError> {
    let mut removed = false;
    for location in lookup_order(store)? {
        removed |= store.delete(location, key.uid(), key.variable())?;
    }
    Ok(removed)
}

/// The record of which registry keys are stored (`registry-keys.json` in the data directory,
/// 0600, names and URLs only): a search reads it to know whether Smithery is to be asked
/// without a credential-store round trip, and reads the key itself only when a request
/// needs it.
const RECORD_FILE: &str = "registry-keys.json";

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Record {
    keys: Vec<RecordedKey>,
}

#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct RecordedKey {
    registry: String,
    url: String,
}

impl RecordedKey {
    fn of(key: &RegistryKey) -> Self {
        Self {
            registry: key.registry.id().to_owned(),
            url: key.url.clone(),
        }
    }
}

/// The record; empty when the file is missing or unreadable (a search then skips the
/// registry, as with no key).
fn read_record(dir: &Path) -> Record {
    std::fs::read(dir.join(RECORD_FILE))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// Whether a key is recorded as stored for `key`'s registry and URL.
pub fn recorded(dir: &Path, key: &RegistryKey) -> bool {
    read_record(dir).keys.contains(&RecordedKey::of(key))
}

/// Records that a key is stored (`present`) or not for `key`'s registry and URL.
pub fn record(dir: &Path, key: &RegistryKey, present: bool) -> anyhow::Result<()> {
    let mut record = read_record(dir);
    let entry = RecordedKey::of(key);
    record.keys.retain(|k| *k != entry);
    if present {
        record.keys.push(entry);
    }
    let path = dir.join(RECORD_FILE);
    tether_sqlite::private_dir(dir)?;
    if record.keys.is_empty() {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(anyhow::anyhow!("cannot remove {}: {e}", path.display()));
            }
            _ => return Ok(()),
        }
    }
    let bytes = serde_json::to_vec_pretty(&record)?;
    crate::private_file::write_private(&path, &bytes)
}
