//! The OS credential store through the `keyring` crate, every call bounded in time.
//!
//! A call runs on a thread of its own and is given up after [`crate::OPERATION_TIMEOUT`]
//! ([`crate::PROBE_TIMEOUT`] for the probe): a Secret Service that is not running fails fast
//! (no socket), but a locked one can wait for a prompt nobody answers, and tether must not.

use std::sync::mpsc;
use std::time::Duration;

use tether_secret::SecretValue;

use crate::{OPERATION_TIMEOUT, PROBE_TIMEOUT, SecretStoreError};

/// The service name every entry is stored under.
const SERVICE: &str = "tether";

/// The account the probe reads (it never exists; "no entry" means the store answered).
const PROBE_ACCOUNT: &str = "probe/reachable";

/// Runs `work` on its own thread; `None` when it has not finished within `timeout` (the thread
/// is left to finish or to die with the process).
fn bounded<T: Send + 'static>(
    timeout: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("tether-keyring".to_owned())
        .spawn(move || {
            let _ = tx.send(work());
        });
    if spawned.is_err() {
        return None;
    }
    rx.recv_timeout(timeout).ok()
}

#[cfg(any(target_os = "linux", target_os = "macos", target_os = "windows"))]
mod platform {
    use super::*;

    fn entry(account: &str) -> Result<keyring::Entry, keyring::Error> {
        keyring::Entry::new(SERVICE, account)
    }

    /// Whether the credential store answers; the reason when it does not.
    pub(crate) fn probe() -> Result<(), String> {
        match bounded(PROBE_TIMEOUT, || {
            entry(PROBE_ACCOUNT)
                .and_then(|e| e.get_password())
                .map(drop)
        }) {
            Some(Ok(())) | Some(Err(keyring::Error::NoEntry)) => Ok(()),
            Some(Err(error)) => Err(error.to_string()),
            None => Err(format!(
                "it did not answer within {} s",
                PROBE_TIMEOUT.as_secs()
            )),
        }
    }

    fn call<T: Send + 'static>(
        operation: &'static str,
        account: &str,
        work: impl FnOnce(keyring::Entry) -> Result<T, keyring::Error> + Send + 'static,
    ) -> Result<Result<T, keyring::Error>, SecretStoreError> {
        let name = account.to_owned();
        match bounded(OPERATION_TIMEOUT, move || entry(&name).and_then(work)) {
            Some(result) => Ok(result),
            None => Err(SecretStoreError::Keyring {
                operation,
                account: account.to_owned(),
                reason: format!(
                    "no answer within {} s (is the keyring locked?)",
                    OPERATION_TIMEOUT.as_secs()
                ),
            }),
        }
    }

    fn failed(operation: &'static str, account: &str, error: &keyring::Error) -> SecretStoreError {
        match error {
            keyring::Error::NoStorageAccess(_) | keyring::Error::PlatformFailure(_) => {
                SecretStoreError::KeyringUnavailable {
                    reason: format!("{operation} {account}: {error}"),
                }
            }
            _ => SecretStoreError::Keyring {
                operation,
                account: account.to_owned(),
                reason: error.to_string(),
            },
        }
    }

    pub(crate) fn set(account: &str, value: &SecretValue) -> Result<(), SecretStoreError> {
        let value = value.clone();
        call("store", account, move |e| e.set_password(value.expose()))?
            .map_err(|error| failed("store", account, &error))
    }

    pub(crate) fn get(account: &str) -> Result<Option<SecretValue>, SecretStoreError> {
        match call("read", account, |e| e.get_password().map(SecretValue::new))? {
            Ok(value) => Ok(Some(value)),
            Err(keyring::Error::NoEntry) => Ok(None),
            Err(error) => Err(failed("read", account, &error)),
        }
    }

    pub(crate) fn delete(account: &str) -> Result<bool, SecretStoreError> {
        match call("delete", account, |e| e.delete_credential())? {
            Ok(()) => Ok(true),
            Err(keyring::Error::NoEntry) => Ok(false),
            Err(error) => Err(failed("delete", account, &error)),
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos", target_os = "windows")))]
mod platform {
    use super::*;

    const NONE: &str = "this platform has no credential store tether supports";

    pub(crate) fn probe() -> Result<(), String> {
        let _ = (
            SERVICE,
            PROBE_ACCOUNT,
            PROBE_TIMEOUT,
            OPERATION_TIMEOUT,
            bounded::<()>,
        );
        Err(NONE.to_owned())
    }

    fn unavailable() -> SecretStoreError {
        SecretStoreError::KeyringUnavailable {
            reason: NONE.to_owned(),
        }
    }

    pub(crate) fn set(_: &str, _: &SecretValue) -> Result<(), SecretStoreError> {
        Err(unavailable())
    }

    pub(crate) fn get(_: &str) -> Result<Option<SecretValue>, SecretStoreError> {
        Err(unavailable())
    }

    pub(crate) fn delete(_: &str) -> Result<bool, SecretStoreError> {
        Err(unavailable())
    }
}

pub(crate) use platform::{delete, get, probe, set};
