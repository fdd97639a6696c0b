//! The master key lookup (the variables themselves are declared in `tether-env`).

use tether_env::EnvVars;

use crate::crypto::MasterKey;
use crate::error::KeyError;

/// What a program using the insecure development key must print on stderr, whatever its log
/// level (`tether-server` does, for `serve` and `admin`).
pub const INSECURE_DEV_KEY_WARNING: &str = "WARNING: USING THE INSECURE DEVELOPMENT KEY \
     (--insecure-dev-key): anyone can decrypt the secrets stored in this data directory; never \
     use it for real credentials";

/// The master key: from [`EnvVars::TETHER_SERVER_KEY`], or the insecure development key when
/// `insecure_dev_key` is set (the caller prints [`INSECURE_DEV_KEY_WARNING`]). Neither, or both,
/// is an error.
///
/// With [`EnvVars::TETHER_SERVER_PREVIOUS_KEY`] set too (a key rotation), the key also opens
/// what the previous key sealed.
pub fn master_key_from_env(insecure_dev_key: bool) -> Result<MasterKey, KeyError> {
    let text = std::env::var(EnvVars::TETHER_SERVER_KEY).ok();
    let key = master_key_from(text.as_deref(), insecure_dev_key)?;
    let previous = std::env::var(EnvVars::TETHER_SERVER_PREVIOUS_KEY).ok();
    match previous.as_deref().filter(|t| !t.trim().is_empty()) {
        None => Ok(key),
        Some(previous) => {
            let previous = MasterKey::from_text(previous).map_err(|error| match error {
                KeyError::InvalidKey { reason } => KeyError::InvalidPreviousKey { reason },
                other => other,
            })?;
            Ok(key.with_previous(previous))
        }
    }
}

/// [`master_key_from_env`] over a given value, so tests need not touch the process env.
pub fn master_key_from(text: Option<&str>, insecure_dev_key: bool) -> Result<MasterKey, KeyError> {
    let text = text.filter(|t| !t.trim().is_empty());
    match (text, insecure_dev_key) {
        (Some(_), true) => Err(KeyError::ConflictingKeys),
        (Some(text), false) => MasterKey::from_text(text),
        (None, true) => Ok(MasterKey::insecure_dev_key()),
        (None, false) => Err(KeyError::MissingKey),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_sources() {
        let hex = "5f0c9e1ab27d4c83e6f1a09b3d5c7e21f4a8b6c0d2e4f6a8b0c2d4e6f8a0b2c4";
        assert!(!master_key_from(Some(hex), false).unwrap().is_insecure_dev());
        assert!(master_key_from(None, true).unwrap().is_insecure_dev());
        assert!(master_key_from(Some("  "), true).unwrap().is_insecure_dev());
        assert!(matches!(
            master_key_from(None, false),
            Err(KeyError::MissingKey)
        ));
        assert!(matches!(
            master_key_from(Some(hex), true),
            Err(KeyError::ConflictingKeys)
        ));
    }
}
