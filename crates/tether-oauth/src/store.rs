//! Where tokens are kept: one entry per server URL in the secret store, written and read
//! through the local store (`Store::set_oauth`/`get_oauth`/`remove_oauth`, which record the
//! entry's key, server URL and location in `credentials`, never its value), keyed by
//! `uuid v5(NAMESPACE, canonical server URL)`.
//!
//! [`TokenStore`] is what renewal needs; [`LocalTokens`] is it over the local store, opened
//! by the caller's [`OpenStore`] for each read and write (a `Store` is not `Sync`, and renewal
//! runs inside the driver's `Send` futures).

use std::sync::Arc;

use tether_store::{Store, StoreError};
use uuid::Uuid;

use crate::error::OAuthError;
use crate::token::Tokens;

/// The namespace of the UUIDs tokens are stored under: `uuid v5(NAMESPACE, server)`, so a
/// server's tokens never share a key with an installation's secrets (v4 UUIDs).
const NAMESPACE: Uuid = Uuid::from_u128(0x6f1c_5d3e_8a2b_4c7d_9e0f_1a2b_3c4d_5e6f);

/// The key the tokens of `server` (a canonical URL) are stored under.
pub fn key(server: &str) -> Uuid {
    Uuid::new_v5(&NAMESPACE, server.as_bytes())
}

/// The tokens stored in `store` for `server` (a canonical URL); `None` when there are none or
/// the entry is not a token record. Their secrets are registered for log masking.
pub fn read(store: &Store, server: &str) -> Result<Option<Tokens>, StoreError> {
    let value = store.get_oauth(key(server))?;
    Ok(value.as_ref().and_then(Tokens::from_secret))
}

/// Stores `tokens` in `store` under their server. The server URL is recorded masked (a
/// secret in its query, a rendered config's value, never reaches the database); the key is
/// derived from the real one.
pub fn write(store: &Store, tokens: &Tokens) -> Result<(), StoreError> {
    let shown = tether_log::mask(&tokens.server);
    store.set_oauth(key(&tokens.server), &shown, &tokens.to_secret())?;
    Ok(())
}

/// Deletes the tokens of `server` from `store`; whether there were any.
pub fn remove(store: &Store, server: &str) -> Result<bool, StoreError> {
    store.remove_oauth(key(server))
}

/// Where renewal reads and writes tokens.
pub trait TokenStore: Send + Sync {
    /// The tokens stored for `server` (a canonical URL), if any.
    fn load(&self, server: &str) -> Result<Option<Tokens>, OAuthError>;

    /// Stores `tokens` under their server, replacing what was there.
    fn save(&self, tokens: &Tokens) -> Result<(), OAuthError>;

    /// Where the locks of logins live ([`crate::OAuthClient::login_once`]), created if need
    /// be; `None` (the default): logins are not shared.
    fn lock_dir(&self) -> Result<Option<std::path::PathBuf>, OAuthError> {
        Ok(None)
    }
}

/// The error type of an [`OpenStore`].
pub type OpenError = Box<dyn std::error::Error + Send + Sync>;

/// Opens the local store as the program's settings say (data directory, secret store).
pub trait OpenStore: Send + Sync {
    /// The store when its database exists; `None` (nothing created) when it does not.
    fn open_existing(&self) -> Result<Option<Store>, OpenError>;

    /// The store, created if need be.
    fn open(&self) -> Result<Store, OpenError>;

    /// Called after a write to `store` (a program prints the secret store's one-time notice
    /// here).
    fn written(&self, store: &Store) {
        let _ = store;
    }
}

/// [`TokenStore`] over the local store. Without a local store database nothing is recorded,
/// so nothing is read: a run of inline specs creates no database.
#[derive(Clone)]
pub struct LocalTokens {
    open: Arc<dyn OpenStore>,
}

impl LocalTokens {
    /// Tokens in the local store `open` opens.
    pub fn new(open: Arc<dyn OpenStore>) -> Self {
        Self { open }
    }
}

impl TokenStore for LocalTokens {
    fn load(&self, server: &str) -> Result<Option<Tokens>, OAuthError> {
        let Some(store) = self.open.open_existing().map_err(OAuthError::Store)? else {
            return Ok(None);
        };
        read(&store, server).map_err(OAuthError::store)
    }

    /// The store's own directory (the store is created if need be).
    fn lock_dir(&self) -> Result<Option<std::path::PathBuf>, OAuthError> {
        let store = self.open.open().map_err(OAuthError::Store)?;
        Ok(store.path().parent().map(std::path::Path::to_path_buf))
    }

    fn save(&self, tokens: &Tokens) -> Result<(), OAuthError> {
        let store = self.open.open().map_err(OAuthError::Store)?;
        write(&store, tokens).map_err(OAuthError::store)?;
        self.open.written(&store);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_v5_of_the_server_url() {
        let a = key("http://127.0.0.1:1/mcp");
        assert_eq!(a.get_version_num(), 5);
        // The key tokens stored by earlier versions are found under.
        assert_eq!(a.to_string(), "28e6e8ba-10a7-5e85-8180-fcc039ca54b9");
        assert_eq!(a, key("http://127.0.0.1:1/mcp"));
        assert_ne!(a, key("http://127.0.0.1:2/mcp"));
    }
}
