//! Secret values held in memory only.
//!
//! **Invariant:** a [`SecretValue`] never shows its content through `Debug` or `Display`;
//! the only way to read it is [`SecretValue::expose`], and its memory is zeroed on drop.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use hashbrown::HashTable;
use zeroize::Zeroizing;

/// What `Debug` and `Display` print in place of a secret value.
pub const MASK: &str = "********";

/// A string that may hold a credential.
///
/// `Debug` and `Display` print [`MASK`]; the memory is zeroed when the last clone is dropped.
/// A value is a range of a shared, zeroed-on-drop buffer: a value of its own is the whole of a
/// buffer of its own, and the values of a [`Secrets`] are ranges of one buffer they share.
/// Clones share that buffer: rendering puts a secret into every place that uses it, and a copy
/// per place would be an allocation, a copy of the value and another buffer to zero.
#[derive(Clone)]
pub struct SecretValue {
    buffer: Arc<Zeroizing<String>>,
    start: usize,
    end: usize,
}

impl SecretValue {
    /// Wraps a value. The caller's `String` moves in, so no unzeroed copy is left behind.
    pub fn new(value: String) -> Self {
        let end = value.len();
        Self {
            buffer: Arc::new(Zeroizing::new(value)),
            start: 0,
            end,
        }
    }

    /// The value itself. Call this only where the value must really be used
    /// (a child's environment, a rendered file, an HTTP header).
    pub fn expose(&self) -> &str {
        &self.buffer[self.start..self.end]
    }

    /// Whether the value is the empty string.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Whether `self` and `other` are clones of one value (not merely equal text): rendering
    /// places clones, so this tells which secret a rendered piece came from. (Two empty values
    /// of one [`Secrets`] count as clones of each other: they have no bytes to tell apart.)
    pub fn is_clone_of(&self, other: &SecretValue) -> bool {
        Arc::ptr_eq(&self.buffer, &other.buffer)
            && (self.start, self.end) == (other.start, other.end)
    }
}

impl SecretValue {
    /// `{{NAME}}` for each of `names`, in order, sharing one buffer (one allocation and one
    /// buffer to zero for all, neighbours in memory): what stands for a missing value, of which
    /// a large managed config can have tens of thousands.
    pub fn placeholders<'a>(names: &'a [&'a str]) -> impl Iterator<Item = SecretValue> + 'a {
        let mut buffer = String::with_capacity(names.iter().map(|n| n.len() + 4).sum());
        for name in names {
            buffer.push_str("{{");
            buffer.push_str(name);
            buffer.push_str("}}");
        }
        let buffer = Arc::new(Zeroizing::new(buffer));
        let mut start = 0;
        names.iter().map(move |name| {
            let end = start + name.len() + 4;
            let value = SecretValue {
                buffer: Arc::clone(&buffer),
                start,
                end,
            };
            start = end;
            value
        })
    }
}

/// Equal text.
impl PartialEq for SecretValue {
    fn eq(&self, other: &Self) -> bool {
        self.expose() == other.expose()
    }
}

impl Eq for SecretValue {}

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
/// Rendering looks a name up once per placeholder and places a clone of the value, so a
/// lookup must cost the same however many secrets there are and touch as little memory as
/// possible: with tens of thousands of names (a large managed config), a `HashMap<String,
/// SecretValue>` (table slot, then the key's allocation, then the value's) spent most of its
/// time waiting for memory. Names live in one string and values in a few zeroed-on-drop
/// chunks, entries in one vector in insertion order, and the hash table holds 4-byte entry
/// numbers: a lookup reads one small slot, one entry and the name's bytes, and the value it
/// hands out is a range of a shared chunk. A value never moves once stored, so a value handed
/// out stays a clone ([`SecretValue::is_clone_of`]) of what later lookups return. Listing the
/// names sorts them. See `specs/config-and-templating/TECH.md`.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Every name, one after another.
    names: String,
    /// The values, one after another. A chunk is written in place only while nothing else
    /// shares it and within its capacity (a `String` that reallocates leaves its old bytes
    /// unzeroed in freed memory); otherwise a new chunk starts.
    chunks: Vec<Arc<Zeroizing<String>>>,
    /// The bytes in `chunks`, together.
    stored: usize,
    /// Insertion order; a replaced secret keeps its place.
    entries: Vec<Entry>,
    /// Entry numbers, hashed by name.
    index: HashTable<u32>,
    hasher: RandomState,
}

/// Where a secret's name and value are (32-bit offsets keep an entry at 20 bytes).
#[derive(Clone, Copy)]
struct Entry {
    /// A range of `names`.
    name: (u32, u32),
    /// A chunk and a range of it.
    chunk: u32,
    value: (u32, u32),
}

impl Entry {
    fn name<'a>(&self, names: &'a str) -> &'a str {
        &names[self.name.0 as usize..self.name.1 as usize]
    }
}

/// The largest new chunk started for values; a longer value gets a chunk of its own length.
const CHUNK_MAX: usize = 64 * 1024;

impl Secrets {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    fn value_of(&self, entry: Entry) -> SecretValue {
        SecretValue {
            buffer: Arc::clone(&self.chunks[entry.chunk as usize]),
            start: entry.value.0 as usize,
            end: entry.value.1 as usize,
        }
    }

    /// Stores `text` and returns its chunk and range: at the end of the last chunk when
    /// nothing else shares it and it has room, else in a new chunk sized for what is stored
    /// so far (at most [`CHUNK_MAX`] unless `text` is longer).
    fn append_value(&mut self, text: &str) -> (usize, usize, usize) {
        let last = self.chunks.len().wrapping_sub(1);
        if let Some(chunk) = self.chunks.last_mut().and_then(Arc::get_mut)
            && chunk.capacity() - chunk.len() >= text.len()
        {
            let start = chunk.len();
            chunk.push_str(text);
            self.stored += text.len();
            return (last, start, chunk.len());
        }
        let mut chunk = String::with_capacity(self.stored.clamp(256, CHUNK_MAX).max(text.len()));
        self.stored += text.len();
        chunk.push_str(text);
        let end = chunk.len();
        self.chunks.push(Arc::new(Zeroizing::new(chunk)));
        (self.chunks.len() - 1, 0, end)
    }

    /// Adds or replaces the secret `name`. The value's text is copied in (to hand out clones of
    /// the stored one, take it back with [`Secrets::get`]); a replaced value's bytes stay in
    /// their chunk, never shown again, until it is zeroed with the rest.
    ///
    /// # Panics
    /// When the names or the values together pass 4 GiB.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<SecretValue>) {
        let name = name.into();
        let value = value.into();
        let (chunk, value_start, value_end) = self.append_value(value.expose());
        drop(value);
        let (Ok(chunk), Ok(value_start), Ok(value_end), Ok(number), Ok(name_start), Ok(name_end)) = (
            u32::try_from(chunk),
            u32::try_from(value_start),
            u32::try_from(value_end),
            u32::try_from(self.entries.len()),
            u32::try_from(self.names.len()),
            u32::try_from(self.names.len() + name.len()),
        ) else {
            panic!("the run's secrets pass 4 GiB");
        };
        let value = (value_start, value_end);
        let hash = self.hasher.hash_one(name.as_str());
        let (names, entries) = (&self.names, &mut self.entries);
        if let Some(&found) = self
            .index
            .find(hash, |&i| entries[i as usize].name(names) == name)
        {
            entries[found as usize].chunk = chunk;
            entries[found as usize].value = value;
            return;
        }
        self.names.push_str(&name);
        self.entries.push(Entry {
            name: (name_start, name_end),
            chunk,
            value,
        });
        let hasher = &self.hasher;
        let (names, entries) = (&self.names, &self.entries);
        self.index.insert_unique(hash, number, |&i| {
            hasher.hash_one(entries[i as usize].name(names))
        });
    }

    /// The secret named exactly `name` (a clone: the value is shared, not copied).
    pub fn get(&self, name: &str) -> Option<SecretValue> {
        let hash = self.hasher.hash_one(name);
        self.index
            .find(hash, |&i| {
                self.entries[i as usize].name(&self.names) == name
            })
            .map(|&i| self.value_of(self.entries[i as usize]))
    }

    /// Whether there is a secret named exactly `name`.
    pub fn contains(&self, name: &str) -> bool {
        let hash = self.hasher.hash_one(name);
        self.index
            .find(hash, |&i| {
                self.entries[i as usize].name(&self.names) == name
            })
            .is_some()
    }

    /// The names, in sorted order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        let mut names: Vec<&str> = self.entries.iter().map(|e| e.name(&self.names)).collect();
        names.sort_unstable();
        names.into_iter()
    }

    /// The values, e.g. to mask them in captured output.
    pub fn values(&self) -> impl Iterator<Item = SecretValue> + '_ {
        self.entries.iter().map(|&e| self.value_of(e))
    }

    /// How many secrets there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The same names with equal values, in any order.
impl PartialEq for Secrets {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .entries
                .iter()
                .all(|&e| other.get(e.name(&self.names)) == Some(self.value_of(e)))
    }
}

impl Eq for Secrets {}

impl<K: Into<String>, V: Into<SecretValue>> FromIterator<(K, V)> for Secrets {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut secrets = Self::new();
        for (name, value) in iter {
            secrets.insert(name, value);
        }
        secrets
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

    /// Hostile values: shell and template syntax, quotes, backslashes, newlines, non-ASCII.
    const HOSTILE: [&str; 6] = [
        "$HOME $$ %41 ${X}",
        "\"q\" 'q' \\",
        "{{x}}",
        "line one\nline two",
        "ünï €",
        "",
    ];

    #[test]
    fn values_handed_out_stay_as_they_were_while_more_are_added() {
        let mut secrets = Secrets::new();
        secrets.insert("A", HOSTILE[0]);
        secrets.insert("B", HOSTILE[1]);
        let a = secrets.get("A").expect("A");
        let b = secrets.get("B").expect("B");
        // Enough inserts to outgrow the buffer several times while `a` shares it.
        for i in 0..2_000 {
            secrets.insert(
                format!("N{i}"),
                format!("{}-{i}", HOSTILE[i % HOSTILE.len()]),
            );
        }
        secrets.insert("A", "replaced");
        assert_eq!(a.expose(), HOSTILE[0]);
        assert_eq!(secrets.get("A").expect("A").expose(), "replaced");
        assert_eq!(secrets.len(), 2_002);
        // Stored values never move: what was handed out is still a clone of the stored one.
        assert!(b.is_clone_of(&secrets.get("B").expect("B")));
        assert!(!a.is_clone_of(&secrets.get("A").expect("A")));
        for i in (0..2_000).step_by(97) {
            assert_eq!(
                secrets.get(&format!("N{i}")).expect("N").expose(),
                format!("{}-{i}", HOSTILE[i % HOSTILE.len()])
            );
        }
    }

    #[test]
    fn a_clone_of_the_set_changes_apart_from_the_original() {
        let original: Secrets = [("A", "1"), ("B", "2")].into_iter().collect();
        let mut copy = original.clone();
        assert_eq!(copy, original);
        copy.insert("A", "changed");
        copy.insert("C", "3");
        assert_eq!(original.get("A").expect("A").expose(), "1");
        assert!(original.get("C").is_none());
        assert_ne!(copy, original);
    }

    #[test]
    fn clones_are_told_apart_from_equal_text() {
        let secrets: Secrets = [("A", "same"), ("B", "same")].into_iter().collect();
        let (a, b) = (secrets.get("A").expect("A"), secrets.get("B").expect("B"));
        assert_eq!(a, b);
        assert!(!a.is_clone_of(&b));
        assert!(a.is_clone_of(&secrets.get("A").expect("A")));
        assert!(a.clone().is_clone_of(&a));
        let own = SecretValue::from("same");
        assert!(!own.is_clone_of(&a));
        assert_eq!(own, a);
    }

    #[test]
    fn missing_value_placeholders_share_a_buffer_and_read_back() {
        let values: Vec<SecretValue> = SecretValue::placeholders(&["A", "ünï", "x-y"]).collect();
        let texts: Vec<&str> = values.iter().map(SecretValue::expose).collect();
        assert_eq!(texts, ["{{A}}", "{{ünï}}", "{{x-y}}"]);
        assert!(!values[0].is_clone_of(&values[1]));
    }

    mod model {
        use super::super::*;
        use proptest::prelude::*;
        use std::collections::HashMap;

        proptest! {
            /// Any sequence of inserts (names from a small alphabet, so that many replace)
            /// leaves the set answering like a `HashMap` would.
            #[test]
            fn behaves_like_a_map(ops in proptest::collection::vec(("[a-c]{1,2}", any::<String>()), 0..60)) {
                let mut secrets = Secrets::new();
                let mut model: HashMap<String, String> = HashMap::new();
                let mut handed_out = Vec::new();
                for (name, value) in &ops {
                    secrets.insert(name.clone(), value.clone());
                    model.insert(name.clone(), value.clone());
                    handed_out.push((secrets.get(name).expect("just inserted"), value.clone()));
                }
                prop_assert_eq!(secrets.len(), model.len());
                for (name, value) in &model {
                    prop_assert_eq!(secrets.get(name).map(|v| v.expose().to_owned()), Some(value.clone()));
                    prop_assert!(secrets.contains(name));
                }
                prop_assert!(secrets.get("zz").is_none());
                let mut names: Vec<&str> = model.keys().map(String::as_str).collect();
                names.sort_unstable();
                prop_assert_eq!(secrets.names().collect::<Vec<_>>(), names);
                let mut values: Vec<String> = secrets.values().map(|v| v.expose().to_owned()).collect();
                let mut expected: Vec<String> = model.values().cloned().collect();
                values.sort();
                expected.sort();
                prop_assert_eq!(values, expected);
                for (value, text) in handed_out {
                    prop_assert_eq!(value.expose(), text);
                }
                let rebuilt: Secrets = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                prop_assert_eq!(rebuilt, secrets);
            }
        }
    }
}
