//! The API key lookup (the variables themselves are declared in `tether-env`).
//!
//! The API key is read from the environment or a file, never from the command line (where
//! `ps` would show it).

use std::ffi::OsString;
use std::path::PathBuf;

use zeroize::Zeroizing;

use crate::error::ManagedMcpError;
use tether_env::EnvVars;
use tether_secret::SecretValue;

/// Reads the API key from [`EnvVars::TETHER_API_KEY`] or [`EnvVars::TETHER_API_KEY_FILE`].
///
/// `Ok(None)` when neither is set. Errors (naming the variable, never the value) when both are
/// set, when the file cannot be read, or when the key is empty or not UTF-8.
pub fn api_key_from_env() -> Result<Option<SecretValue>, ManagedMcpError> {
    api_key_from(|name| std::env::var_os(name))
}

/// [`api_key_from_env`] over any variable lookup, so tests need not touch the process env.
pub(crate) fn api_key_from(
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Result<Option<SecretValue>, ManagedMcpError> {
    let config = |reason: String| ManagedMcpError::Config { reason };
    // `export TETHER_API_KEY_FILE=` is how many people unset a variable: empty counts as unset.
    let set = |name: &str| lookup(name).filter(|value| !value.is_empty());
    let (raw, source) = match (
        set(EnvVars::TETHER_API_KEY),
        set(EnvVars::TETHER_API_KEY_FILE),
    ) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(config(format!(
                "both {} and {} are set; set only one",
                EnvVars::TETHER_API_KEY,
                EnvVars::TETHER_API_KEY_FILE
            )));
        }
        (Some(value), None) => {
            let value =
                Zeroizing::new(value.into_string().map_err(|_| {
                    config(format!("{} is not valid UTF-8", EnvVars::TETHER_API_KEY))
                })?);
            (value, EnvVars::TETHER_API_KEY.to_owned())
        }
        (None, Some(path)) => {
            let path = PathBuf::from(path);
            let value = Zeroizing::new(std::fs::read_to_string(&path).map_err(|error| {
                config(format!(
                    "cannot read the API key file {} named by {}: {error}",
                    path.display(),
                    EnvVars::TETHER_API_KEY_FILE
                ))
            })?);
            (
                value,
                format!(
                    "the file {} named by {}",
                    path.display(),
                    EnvVars::TETHER_API_KEY_FILE
                ),
            )
        }
    };
    let key = raw.trim();
    if key.is_empty() {
        return Err(config(format!("the API key in {source} is empty")));
    }
    Ok(Some(SecretValue::new(key.to_owned())))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::ffi::OsString;

    use super::{EnvVars, api_key_from};
    use crate::error::ManagedMcpError;

    fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let vars: HashMap<String, OsString> = vars
            .iter()
            .map(|(name, value)| ((*name).to_owned(), OsString::from(value)))
            .collect();
        move |name| vars.get(name).cloned()
    }

    fn reason(result: Result<Option<crate::SecretValue>, ManagedMcpError>) -> String {
        match result {
            Err(ManagedMcpError::Config { reason }) => reason,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn neither_variable_means_no_key() {
        assert!(matches!(api_key_from(lookup(&[])), Ok(None)));
    }

    #[test]
    fn an_empty_variable_counts_as_unset() {
        assert!(matches!(
            api_key_from(lookup(&[
                (EnvVars::TETHER_API_KEY, ""),
                (EnvVars::TETHER_API_KEY_FILE, "")
            ])),
            Ok(None)
        ));
        let key = api_key_from(lookup(&[
            (EnvVars::TETHER_API_KEY, "k-789"),
            (EnvVars::TETHER_API_KEY_FILE, ""),
        ]))
        .ok()
        .flatten()
        .map(|key| key.expose().to_owned());
        assert_eq!(key.as_deref(), Some("k-789"));
    }

    #[test]
    fn key_from_variable_is_trimmed() {
        let key = api_key_from(lookup(&[(EnvVars::TETHER_API_KEY, "  k-123 \n")]))
            .ok()
            .flatten()
            .map(|key| key.expose().to_owned());
        assert_eq!(key.as_deref(), Some("k-123"));
    }

    #[test]
    fn key_from_file_is_trimmed() {
        let dir = std::env::temp_dir().join(format!("tether-graphql-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        std::fs::write(&path, "file-key-456\n").unwrap();
        let path = path.to_str().unwrap().to_owned();
        let key = api_key_from(lookup(&[(EnvVars::TETHER_API_KEY_FILE, &path)]))
            .unwrap()
            .unwrap();
        assert_eq!(key.expose(), "file-key-456");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn both_variables_are_rejected_without_echoing_the_key() {
        let reason = reason(api_key_from(lookup(&[
            (EnvVars::TETHER_API_KEY, "secret-sentinel"),
            (EnvVars::TETHER_API_KEY_FILE, "/nonexistent"),
        ])));
        assert!(
            reason.contains("both TETHER_API_KEY and TETHER_API_KEY_FILE"),
            "{reason}"
        );
        assert!(!reason.contains("secret-sentinel"));
    }

    #[test]
    fn unreadable_file_and_empty_key_name_the_source() {
        let reason_missing = reason(api_key_from(lookup(&[(
            EnvVars::TETHER_API_KEY_FILE,
            "/nonexistent/tether-key",
        )])));
        assert!(
            reason_missing.contains("/nonexistent/tether-key"),
            "{reason_missing}"
        );
        assert!(reason_missing.contains(EnvVars::TETHER_API_KEY_FILE));

        let reason_empty = reason(api_key_from(lookup(&[(EnvVars::TETHER_API_KEY, "   ")])));
        assert!(
            reason_empty.contains("TETHER_API_KEY is empty"),
            "{reason_empty}"
        );
    }
}
