//! [`SecretString`]: the one type this crate uses for a secret value.

use std::fmt;

use zeroize::Zeroizing;

/// A secret string: zeroized (length and spare capacity) when dropped, masked by `Debug`, and
/// without `Display`, so it cannot reach a log line or an error message by accident.
///
/// Read it with [`SecretString::expose`] at the one place that must hand the value on.
#[derive(Clone, Default)]
pub struct SecretString(Zeroizing<String>);

impl SecretString {
    /// The mask `Debug` prints in place of the value.
    pub const MASK: &'static str = "***";

    /// Wraps `value`, taking ownership so no unzeroized copy is left behind by this call.
    #[must_use]
    pub fn new(value: String) -> Self {
        Self(Zeroizing::new(value))
    }

    /// The secret value. Do not log it or put it in an error.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the secret is the empty string.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for SecretString {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretString({})", Self::MASK)
    }
}

#[cfg(test)]
mod tests {
    use super::SecretString;

    #[test]
    fn debug_masks_the_value() {
        let secret = SecretString::new("hunter2-sentinel".to_owned());
        let debug = format!("{secret:?} {:#?}", Some(&secret));
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains(SecretString::MASK));
        assert_eq!(secret.expose(), "hunter2-sentinel");
    }
}
