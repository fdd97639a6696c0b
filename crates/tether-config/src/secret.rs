//! Secret values held in memory only.
//!
//! **Invariant:** a [`SecretValue`] never shows its content through `Debug` or `Display`;
//! the only way to read it is [`SecretValue::expose`], and its memory is zeroed on drop.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use zeroize::Zeroizing;

/// What `Debug` and `Display` print in place of a secret value.
pub const MASK: &str = "********";

/// A string that may hold a credential.
///
/// `Debug` and `Display` print [`MASK`]; the memory is zeroed when the last clone is dropped.
/// Clones share one allocation: rendering puts a secret into every place that uses it, and a
/// copy per place would be an allocation, a copy of the value and another buffer to zero.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(Arc<Zeroizing<String>>);

impl SecretValue {
    /// Wraps a value. The caller's `String` moves in, so no unzeroed copy is left behind.
    pub fn new(value: String) -> Self {
        Self(Arc::new(Zeroizing::new(value)))
    }

    /// The value itself. Call this only where the value must really be used
    /// (a child's environment, a rendered file, an HTTP header).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the value is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `self` and `other` are clones of one value (not merely equal text): rendering
    /// places clones, so this tells which secret a rendered piece came from.
    pub fn is_clone_of(&self, other: &SecretValue) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl From<&str> for SecretValue {
    fn from(value: &str) -> Self {
        Self::new(value.to_owned())
    }
}

impl From<String> for SecretValue {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretValue({MASK})")
    }
}

impl fmt::Display for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

/// The run's secrets, by name. Applied to installations in memory, never persisted.
///
/// A hash map: rendering looks a name up once per placeholder, and a lookup must not cost more
/// as the set grows (a sorted map's string comparisons and pointer chasing did). Listing the
/// names sorts them.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets(HashMap<String, SecretValue>);

impl Secrets {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces the secret `name`.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<SecretValue>) {
        self.0.insert(name.into(), value.into());
    }

    /// The secret named exactly `name`.
    pub fn get(&self, name: &str) -> Option<&SecretValue> {
        self.0.get(name)
    }

    /// The names, in sorted order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        let mut names: Vec<&str> = self.0.keys().map(String::as_str).collect();
        names.sort_unstable();
        names.into_iter()
    }

    /// The values, e.g. to mask them in captured output.
    pub fn values(&self) -> impl Iterator<Item = &SecretValue> {
        self.0.values()
    }

    /// How many secrets there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K: Into<String>, V: Into<SecretValue>> FromIterator<(K, V)> for Secrets {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.names().map(|k| (k, MASK)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_value() {
        let secret = SecretValue::from("hunter2-sentinel");
        assert_eq!(secret.clone().expose(), "hunter2-sentinel");
        assert_eq!(format!("{secret:?}"), "SecretValue(********)");
        assert_eq!(secret.to_string(), MASK);
        let secrets: Secrets = [("TOKEN", "hunter2-sentinel")].into_iter().collect();
        let shown = format!("{secrets:?}");
        assert!(shown.contains("TOKEN"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn names_are_listed_sorted() {
        let secrets: Secrets = [("b", "1"), ("C", "2"), ("a", "3")].into_iter().collect();
        assert_eq!(secrets.names().collect::<Vec<_>>(), ["C", "a", "b"]);
        assert_eq!(
            format!("{secrets:?}"),
            r#"{"C": "********", "a": "********", "b": "********"}"#
        );
    }
}
