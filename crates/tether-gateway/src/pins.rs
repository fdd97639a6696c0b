//! Tool pinning: the first definition a server offers for a tool is remembered (its SHA-256
//! over a canonical form of the WHOLE definition — name, title, description, input and output
//! schema, annotations, `_meta` — and the canonical text itself, for diffs); a later,
//! different definition under the same name is withheld until the user trusts it
//! (`tether trust SERVER [TOOL]`).
//!
//! Hashing the whole definition matters: a scanner that hashes only the description lets a
//! changed input schema (a new `path` argument, say) through unnoticed.
//!
//! The pins live in one JSON file (`$TETHER_HOME/pins.json`, 0600), keyed by server name then
//! tool name. Every change is a read-modify-write under an exclusive lock on a sibling lock
//! file, written by `tether_fs::write_private` (a fresh 0600 file renamed over the old one; a
//! link in its place is refused), so two gateways never lose each other's pins and a reader
//! never sees half a file.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};

/// One pinned definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// SHA-256 of [`Pin::canonical`], hex.
    pub sha256: String,
    /// The canonical JSON text of the definition.
    pub canonical: String,
}

impl Pin {
    /// The pin of `definition` as a server sent it.
    pub fn of(definition: &Value) -> Self {
        let canonical = canonical_json(definition);
        let sha256 = Sha256::digest(canonical.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Self { sha256, canonical }
    }
}

/// What a definition is, against the pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// First seen: now pinned.
    New,
    /// Same as pinned.
    Same,
    /// Different from the pinned one: withhold it.
    Changed {
        /// What was pinned.
        pinned: Pin,
    },
}

/// The pin file.
#[derive(Debug, Clone)]
pub struct PinStore {
    path: PathBuf,
}

/// Why the pin file could not be used.
#[derive(Debug, thiserror::Error)]
#[error("the tool pin file {}: {message}", path.display())]
pub struct PinError {
    /// The file.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

type Pins = BTreeMap<String, BTreeMap<String, Value>>;

impl PinStore {
    /// The pins in `path` (created on first write).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Where the pins are.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks each `(tool, definition)` of `server`: a tool seen for the first time is
    /// pinned now; returns the verdicts in order.
    pub fn check(
        &self,
        server: &str,
        tools: &[(String, Value)],
    ) -> Result<Vec<(String, Verdict)>, PinError> {
        self.update(|pins| {
            let entry = pins.entry(server.to_owned()).or_default();
            tools
                .iter()
                .map(|(name, definition)| {
                    let pin = Pin::of(definition);
                    let verdict = match entry.get(name).and_then(stored_pin) {
                        None => {
                            entry.insert(name.clone(), pin_json(&pin));
                            Verdict::New
                        }
                        Some(pinned) if pinned.sha256 == pin.sha256 => Verdict::Same,
                        Some(pinned) => Verdict::Changed { pinned },
                    };
                    (name.clone(), verdict)
                })
                .collect()
        })
    }

    /// The definitions pinned under `key` (a server's pin key), by tool name: what a lazy
    /// server offers before it has started (`--lazy`). Read without the lock: a writer
    /// renames a whole new file into place.
    pub fn pinned(&self, key: &str) -> Result<Vec<(String, Value)>, PinError> {
        let failed = |message: String| PinError {
            path: self.path.clone(),
            message,
        };
        let pins: Pins = match std::fs::read_to_string(&self.path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| failed(format!("not valid JSON ({e}); fix or remove it")))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(failed(format!("cannot read it: {e}"))),
        };
        let tools = pins.get(key).into_iter().flatten();
        Ok(tools
            .filter_map(|(name, value)| {
                let pin = stored_pin(value)?;
                let definition = serde_json::from_str(&pin.canonical).ok()?;
                Some((name.clone(), definition))
            })
            .collect())
    }

    /// Carries the pins kept under `former` (a server's name, as pins were keyed before
    /// installations had keys of their own) over to `key`, when `key` has none yet. Returns
    /// whether it did.
    pub fn adopt(&self, key: &str, former: &str) -> Result<bool, PinError> {
        if key == former {
            return Ok(false);
        }
        self.update(|pins| {
            if pins.contains_key(key) {
                return false;
            }
            match pins.get(former).cloned() {
                Some(old) => {
                    pins.insert(key.to_owned(), old);
                    true
                }
                None => false,
            }
        })
    }

    /// Pins `definitions` of `server` as they are now (`tether trust`), replacing what was
    /// pinned; returns, per tool, the previous pin if there was a different one.
    pub fn trust(
        &self,
        server: &str,
        definitions: &[(String, Value)],
    ) -> Result<Vec<(String, Option<Pin>)>, PinError> {
        self.update(|pins| {
            let entry = pins.entry(server.to_owned()).or_default();
            definitions
                .iter()
                .map(|(name, definition)| {
                    let pin = Pin::of(definition);
                    let previous = entry
                        .get(name)
                        .and_then(stored_pin)
                        .filter(|old| old.sha256 != pin.sha256);
                    entry.insert(name.clone(), pin_json(&pin));
                    (name.clone(), previous)
                })
                .collect()
        })
    }

    /// Reads, changes and writes the pins under the lock.
    fn update<T>(&self, change: impl FnOnce(&mut Pins) -> T) -> Result<T, PinError> {
        let failed = |message: String| PinError {
            path: self.path.clone(),
            message,
        };
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .create(dir)
                .map_err(|e| failed(format!("cannot create its directory: {e}")))?;
        }
        let lock_path = self.path.with_extension("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| failed(format!("cannot open the lock file: {e}")))?;
        lock.lock()
            .map_err(|e| failed(format!("cannot lock it: {e}")))?;
        let mut pins: Pins = match std::fs::read_to_string(&self.path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| failed(format!("not valid JSON ({e}); fix or remove it")))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Pins::new(),
            Err(e) => return Err(failed(format!("cannot read it: {e}"))),
        };
        let before = pins.clone();
        let result = change(&mut pins);
        if pins != before {
            let text = serde_json::to_string_pretty(&pins)
                .map_err(|e| failed(format!("cannot encode: {e}")))?;
            tether_fs::write_private(&self.path, text.as_bytes()).map_err(|e| match e {
                tether_fs::WriteError::Io { cause, .. } => failed(format!("cannot write: {cause}")),
                refused => failed(format!("cannot write: {refused}")),
            })?;
        }
        drop(lock);
        Ok(result)
    }
}

fn pin_json(pin: &Pin) -> Value {
    json!({ "sha256": pin.sha256, "definition": pin.canonical })
}

fn stored_pin(value: &Value) -> Option<Pin> {
    Some(Pin {
        sha256: value.get("sha256")?.as_str()?.to_owned(),
        canonical: value.get("definition")?.as_str()?.to_owned(),
    })
}

/// `value` as compact JSON with every object's keys sorted (recursively): the same definition
/// gives the same text whatever order a server sends its keys in.
pub fn canonical_json(value: &Value) -> String {
    sorted(value).to_string()
}

fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for key in keys {
                out.insert(key.clone(), sorted(&map[key]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// A line diff of two canonical definitions, pretty-printed: `-` lines only in `old`, `+`
/// lines only in `new` (longest common subsequence; definitions are small).
pub fn diff(old: &str, new: &str) -> String {
    let pretty = |text: &str| {
        serde_json::from_str::<Value>(text)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&sorted(&v)).ok())
            .unwrap_or_else(|| text.to_owned())
    };
    let (old, new) = (pretty(old), pretty(new));
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let mut table = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            table[i][j] = if a[i] == b[j] {
                table[i + 1][j + 1] + 1
            } else {
                table[i + 1][j].max(table[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = String::new();
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push_str(&format!("  {}\n", a[i]));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || table[i][j + 1] >= table[i + 1][j]) {
            out.push_str(&format!("+ {}\n", b[j]));
            j += 1;
        } else {
            out.push_str(&format!("- {}\n", a[i]));
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn tool(schema_extra: Option<&str>) -> Value {
        let mut properties = json!({"text": {"type": "string"}});
        if let Some(extra) = schema_extra {
            properties[extra] = json!({"type": "string"});
        }
        json!({"name": "echo", "description": "Echo the text.",
               "inputSchema": {"type": "object", "properties": properties}})
    }

    #[test]
    fn key_order_does_not_change_the_hash_but_any_field_does() {
        let a = json!({"b": 1, "a": {"y": [1, {"d": 2, "c": 3}], "x": null}});
        let b = json!({"a": {"x": null, "y": [1, {"c": 3, "d": 2}]}, "b": 1});
        assert_eq!(Pin::of(&a), Pin::of(&b));
        // Same description, a new argument in the schema: a different pin.
        assert_ne!(
            Pin::of(&tool(None)).sha256,
            Pin::of(&tool(Some("path"))).sha256
        );
        let annotated = {
            let mut t = tool(None);
            t["annotations"] = json!({"destructiveHint": true});
            t
        };
        assert_ne!(Pin::of(&tool(None)).sha256, Pin::of(&annotated).sha256);
    }

    #[test]
    fn first_seen_is_pinned_a_change_is_reported_until_trusted() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = PinStore::new(dir.path().join("pins.json"));
        let first = vec![("echo".to_owned(), tool(None))];
        assert_eq!(store.check("s", &first).expect("check")[0].1, Verdict::New);
        assert_eq!(store.check("s", &first).expect("check")[0].1, Verdict::Same);
        let changed = vec![("echo".to_owned(), tool(Some("path")))];
        let verdict = &store.check("s", &changed).expect("check")[0].1;
        assert!(matches!(verdict, Verdict::Changed { .. }), "{verdict:?}");
        // Still changed: checking never re-pins.
        assert!(matches!(
            store.check("s", &changed).expect("check")[0].1,
            Verdict::Changed { .. }
        ));
        // Another server's tool of the same name is its own pin.
        assert_eq!(
            store.check("t", &changed).expect("check")[0].1,
            Verdict::New
        );
        let trusted = store.trust("s", &changed).expect("trust");
        assert!(trusted[0].1.is_some());
        assert_eq!(
            store.check("s", &changed).expect("check")[0].1,
            Verdict::Same
        );
        // Pins kept under a server's name move to its installation's key once.
        assert!(store.adopt("uid-1", "s").expect("adopt"));
        assert_eq!(
            store.check("uid-1", &changed).expect("check")[0].1,
            Verdict::Same
        );
        assert!(
            !store.adopt("uid-1", "t").expect("adopt"),
            "a key's own pins stay"
        );
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(store.path()).expect("stat").permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn the_diff_shows_what_changed() {
        let old = canonical_json(&tool(None));
        let new = canonical_json(&tool(Some("path")));
        let diff = diff(&old, &new);
        assert!(diff.contains("+       \"path\": {"), "{diff}");
        assert!(!diff.lines().any(|l| l.starts_with('-')), "{diff}");
    }
}
