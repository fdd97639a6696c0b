//! The master key lookup (the variables themselves are declared in `tether-env`).

use tether_env::EnvVars;

use crate::crypto::MasterKey;
use crate::error::ServerError;

/// The master key: from [`EnvVars::TETHER_SERVER_KEY`], or the insecure development key when
/// `insecure_dev_key` is set (with a loud warning). Neither, or both, is an error.
pub fn master_key_from_env(insecure_dev_key: bool) -> Result<MasterKey, ServerError> {
    let text = std::env::var(EnvVars::TETHER_SERVER_KEY).ok();
    master_key_from(text.as_deref(), insecure_dev_key)
}

/// [`master_key_from_env`] over a given value, so tests need not touch the process env.
pub fn master_key_from(
    text: Option<&str>,
    insecure_dev_key: bool,
) -> Result<MasterKey, ServerError> {
    let text = text.filter(|t| !t.trim().is_empty());
    match (text, insecure_dev_key) {
        (Some(_), true) => Err(ServerError::ConflictingKeys),
        (Some(text), false) => MasterKey::from_text(text),
        (None, true) => {
            tracing::warn!(
                "USING THE INSECURE DEVELOPMENT KEY (--insecure-dev-key): anyone can decrypt the \
                 secrets stored in this data directory; never use it for real credentials"
            );
            Ok(MasterKey::insecure_dev_key())
        }
        (None, false) => Err(ServerError::MissingKey),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_sources() {
        let hex = "ab".repeat(32);
        assert!(
            !master_key_from(Some(&hex), false)
                .unwrap()
                .is_insecure_dev()
        );
        assert!(master_key_from(None, true).unwrap().is_insecure_dev());
        assert!(master_key_from(Some("  "), true).unwrap().is_insecure_dev());
        assert!(matches!(
            master_key_from(None, false),
            Err(ServerError::MissingKey)
        ));
        assert!(matches!(
            master_key_from(Some(&hex), true),
            Err(ServerError::ConflictingKeys)
        ));
    }
}
