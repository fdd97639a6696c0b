//! `secret://` refs: opaque handles for values a person typed on tether's page, held only in
//! this process's memory (each value a zeroized-on-drop [`SecretValue`]).
//!
//! A ref is 128 random bits in hex (`tether_http::token::random_hex`), with nothing of its
//! value in it. It is bound when it is requested to one [`Binding`] — the registry entry, the
//! launch option tether chose for it (a package or a remote) and the input — and valid for
//! that binding only; it expires after [`IDLE_TTL`] without use, and is gone once an install
//! consumed it. Each pending ref has its own single-use page nonce (another 128
//! random bits): the nonce dies when a value is submitted or the ref goes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tether_config::SecretValue;
use tether_http::token::NoRandomness;

/// How long a ref lives without being used.
pub const IDLE_TTL: Duration = Duration::from_secs(15 * 60);

/// The scheme every ref starts with.
pub const SCHEME: &str = "secret://";

/// 128 random bits as 32 lowercase hex digits: a ref id or a page nonce.
fn random_id() -> Result<String, NoRandomness> {
    tether_http::token::random_hex(16)
}

/// A ref as it may appear in a log: the scheme and its first four digits.
pub fn masked(reference: &str) -> String {
    let id = reference.strip_prefix(SCHEME).unwrap_or(reference);
    let head: String = id.chars().take(4).collect();
    format!("{SCHEME}{head}…")
}

/// What a ref is for: one input of one launch option of one registry entry. Fixed when the
/// ref is requested and shown on its page; every use must name the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The registry entry (`io.github.owner/server`).
    pub server: String,
    /// The launch option tether chose for it, as `Choice::describe` says it (`npm package
    /// web-search-mcp 1.0.0`, `remote https://… (streamable-http)`).
    pub launch: String,
    /// The input (an environment variable, a header, a URL variable).
    pub key: String,
}

impl std::fmt::Display for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {} ({})", self.key, self.server, self.launch)
    }
}

/// Why a ref cannot be used. Every message names the key, never a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    /// Not a ref this process handed out (or not a `secret://` ref at all).
    #[error(
        "{key}: {reference} is not a ref this tether handed out; call mcp_setup_request_secret for {key}"
    )]
    Unknown {
        /// The key it was given for.
        key: String,
        /// The ref, masked.
        reference: String,
    },
    /// It idled past its TTL.
    #[error(
        "{key}: the ref {reference} expired (unused for 15 minutes); call mcp_setup_request_secret for {key} again"
    )]
    Expired {
        /// The key it was given for.
        key: String,
        /// The ref, masked.
        reference: String,
    },
    /// An install already used it.
    #[error(
        "{key}: the ref {reference} was consumed by mcp_setup_install_and_connect; call mcp_setup_request_secret for {key} again"
    )]
    Consumed {
        /// The key it was given for.
        key: String,
        /// The ref, masked.
        reference: String,
    },
    /// It was requested for another key.
    #[error("{key}: the ref {reference} was requested for {requested}, not {key}")]
    WrongKey {
        /// The key it was given for.
        key: String,
        /// The key it was requested for.
        requested: String,
        /// The ref, masked.
        reference: String,
    },
    /// It was requested for another entry, or another launch option of the entry.
    #[error(
        "{key}: the ref {reference} was requested for {requested}, not for {used}; call mcp_setup_request_secret for this server"
    )]
    WrongServer {
        /// The key it was given for.
        key: String,
        /// What it is bound to.
        requested: String,
        /// What it was given for (`ENTRY (LAUNCH)`).
        used: String,
        /// The ref, masked.
        reference: String,
    },
    /// Its value has not been submitted yet.
    #[error(
        "{key}: the value has not been entered yet; ask the user to open {url} and submit it, then try again"
    )]
    Pending {
        /// The key.
        key: String,
        /// The page that takes it.
        url: String,
    },
    /// The user declined or cancelled.
    #[error("{key}: the user did not enter a value ({why})")]
    Declined {
        /// The key.
        key: String,
        /// Declined, cancelled, or timed out.
        why: String,
    },
}

/// What the page shows for a nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageInfo {
    /// What the value is for: the key, the entry and its launch option.
    pub binding: Binding,
    /// The agent's prompt.
    pub prompt: String,
}

/// What a submission did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// Stored; the nonce is dead.
    Accepted,
    /// No live nonce of that name (never issued, used, or expired).
    Unknown,
}

enum Gone {
    Expired,
    Consumed,
}

struct Entry {
    binding: Binding,
    prompt: String,
    value: Option<SecretValue>,
    nonce: Option<String>,
    url: String,
    touched: Instant,
}

#[derive(Default)]
struct Inner {
    /// By ref id (the hex after `secret://`).
    entries: HashMap<String, Entry>,
    /// Live nonce → ref id.
    nonces: HashMap<String, String>,
    /// Ids that expired or were consumed (so the error can say which).
    gone: HashMap<String, Gone>,
}

/// The refs of one `tether setup-mcp` process.
pub struct Refs {
    inner: Mutex<Inner>,
    changed: tokio::sync::Notify,
    ttl: Duration,
}

/// A new pending ref.
#[derive(Debug, Clone)]
pub struct Requested {
    /// `secret://…`.
    pub reference: String,
    /// The single-use nonce of its page.
    pub nonce: String,
}

impl Refs {
    /// Refs that idle out after `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            changed: tokio::sync::Notify::new(),
            ttl,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves maps that are still consistent.
        let mut inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ttl = self.ttl;
        let now = Instant::now();
        let expired: Vec<String> = inner
            .entries
            .iter()
            .filter(|(_, e)| now.duration_since(e.touched) > ttl)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            if let Some(entry) = inner.entries.remove(&id)
                && let Some(nonce) = entry.nonce
            {
                inner.nonces.remove(&nonce);
            }
            inner.gone.insert(id, Gone::Expired);
        }
        inner
    }

    /// A pending ref for `binding`, its page at `base` + `/secret/NONCE`.
    pub fn request(
        &self,
        binding: Binding,
        prompt: &str,
        base: &str,
    ) -> Result<(Requested, String), NoRandomness> {
        let id = random_id()?;
        let nonce = random_id()?;
        let url = format!("{base}/secret/{nonce}");
        let mut inner = self.lock();
        inner.nonces.insert(nonce.clone(), id.clone());
        inner.entries.insert(
            id.clone(),
            Entry {
                binding,
                prompt: prompt.to_owned(),
                value: None,
                nonce: Some(nonce.clone()),
                url: url.clone(),
                touched: Instant::now(),
            },
        );
        Ok((
            Requested {
                reference: format!("{SCHEME}{id}"),
                nonce,
            },
            url,
        ))
    }

    /// What the page for `nonce` shows; `None` when the nonce is not live.
    pub fn page(&self, nonce: &str) -> Option<PageInfo> {
        let inner = self.lock();
        let id = inner.nonces.get(nonce)?;
        let entry = inner.entries.get(id)?;
        Some(PageInfo {
            binding: entry.binding.clone(),
            prompt: entry.prompt.clone(),
        })
    }

    /// Gives the pending ref of `nonce` its value; the nonce dies.
    pub fn submit(&self, nonce: &str, value: SecretValue) -> Submitted {
        let mut inner = self.lock();
        let Some(id) = inner.nonces.remove(nonce) else {
            return Submitted::Unknown;
        };
        let Some(entry) = inner.entries.get_mut(&id) else {
            return Submitted::Unknown;
        };
        entry.value = Some(value);
        entry.nonce = None;
        entry.touched = Instant::now();
        drop(inner);
        self.changed.notify_waiters();
        Submitted::Accepted
    }

    fn id_of(reference: &str) -> Option<&str> {
        reference
            .strip_prefix(SCHEME)
            .filter(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
    }

    fn check<'a>(
        inner: &'a mut Inner,
        used: &Binding,
        reference: &str,
    ) -> Result<&'a mut Entry, RefError> {
        let key = used.key.as_str();
        let shown = masked(reference);
        let Some(id) = Self::id_of(reference) else {
            return Err(RefError::Unknown {
                key: key.to_owned(),
                reference: shown,
            });
        };
        if let Some(gone) = inner.gone.get(id) {
            return Err(match gone {
                Gone::Expired => RefError::Expired {
                    key: key.to_owned(),
                    reference: shown,
                },
                Gone::Consumed => RefError::Consumed {
                    key: key.to_owned(),
                    reference: shown,
                },
            });
        }
        let entry = inner.entries.get_mut(id).ok_or_else(|| RefError::Unknown {
            key: key.to_owned(),
            reference: shown.clone(),
        })?;
        if entry.binding.key != key {
            return Err(RefError::WrongKey {
                key: key.to_owned(),
                requested: entry.binding.key.clone(),
                reference: shown,
            });
        }
        if entry.binding.server != used.server || entry.binding.launch != used.launch {
            return Err(RefError::WrongServer {
                key: key.to_owned(),
                requested: entry.binding.to_string(),
                used: format!("{} ({})", used.server, used.launch),
                reference: shown,
            });
        }
        if entry.value.is_none() {
            return Err(RefError::Pending {
                key: key.to_owned(),
                url: entry.url.clone(),
            });
        }
        Ok(entry)
    }

    /// The value of `reference` for `binding` (a copy, zeroized when dropped); the ref stays.
    /// A ref bound to anything else is refused.
    pub fn resolve(&self, binding: &Binding, reference: &str) -> Result<SecretValue, RefError> {
        let mut inner = self.lock();
        let entry = Self::check(&mut inner, binding, reference)?;
        entry.touched = Instant::now();
        entry.value.clone().ok_or_else(|| RefError::Pending {
            key: binding.key.clone(),
            url: entry.url.clone(),
        })
    }

    /// The value of `reference` for `binding`, removing the ref (whatever happens next). A
    /// ref that cannot be used is removed too, unless it is bound to something else (then it
    /// stays for its own use).
    pub fn consume(&self, binding: &Binding, reference: &str) -> Result<SecretValue, RefError> {
        let key = binding.key.as_str();
        let mut inner = self.lock();
        let outcome = Self::check(&mut inner, binding, reference).map(|entry| entry.value.take());
        if let Some(id) = Self::id_of(reference)
            && !matches!(
                outcome,
                Err(RefError::WrongKey { .. } | RefError::WrongServer { .. })
            )
            && let Some(entry) = inner.entries.remove(id)
        {
            if let Some(nonce) = entry.nonce {
                inner.nonces.remove(&nonce);
            }
            inner.gone.insert(id.to_owned(), Gone::Consumed);
        }
        match outcome {
            Ok(Some(value)) => Ok(value),
            Ok(None) => Err(RefError::Consumed {
                key: key.to_owned(),
                reference: masked(reference),
            }),
            Err(error) => Err(error),
        }
    }

    /// Marks `reference` consumed if it is bound to the entry `server` (whatever its key or
    /// launch option): what an install does with every ref it was given, whatever the outcome.
    /// A ref bound to another entry is left alone.
    pub fn spend(&self, server: &str, reference: &str) {
        let mut inner = self.lock();
        let Some(id) = Self::id_of(reference) else {
            return;
        };
        if inner
            .entries
            .get(id)
            .is_some_and(|entry| entry.binding.server == server)
            && let Some(entry) = inner.entries.remove(id)
        {
            if let Some(nonce) = entry.nonce {
                inner.nonces.remove(&nonce);
            }
            inner.gone.insert(id.to_owned(), Gone::Consumed);
        }
    }

    /// Forgets a ref (a declined request).
    pub fn discard(&self, reference: &str) {
        let mut inner = self.lock();
        if let Some(id) = Self::id_of(reference)
            && let Some(entry) = inner.entries.remove(id)
            && let Some(nonce) = entry.nonce
        {
            inner.nonces.remove(&nonce);
        }
    }

    /// Makes every entry look unused for `idle` longer than it was (tests of the TTL).
    #[cfg(test)]
    fn idle_for(&self, idle: Duration) {
        let mut inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for entry in inner.entries.values_mut() {
            if let Some(earlier) = entry.touched.checked_sub(idle) {
                entry.touched = earlier;
            }
        }
    }

    /// Waits until the page of `nonce` has taken a value (true) or `timeout` passed (false).
    pub async fn wait_submitted(&self, nonce: &str, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.lock().nonces.contains_key(nonce) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return !self.lock().nonces.contains_key(nonce);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "http://127.0.0.1:9";

    fn bound(key: &str) -> Binding {
        Binding {
            server: "io.x/y".into(),
            launch: "npm package y 1.0.0".into(),
            key: key.into(),
        }
    }

    fn submitted(refs: &Refs, key: &str, value: &str) -> String {
        let (requested, _) = refs.request(bound(key), "the token", BASE).expect("a ref");
        assert_eq!(
            refs.submit(&requested.nonce, SecretValue::from(value)),
            Submitted::Accepted
        );
        requested.reference
    }

    #[test]
    fn a_ref_is_128_random_bits_and_says_nothing_of_its_value() {
        let refs = Refs::new(IDLE_TTL);
        let (a, url) = refs.request(bound("TOKEN"), "p", BASE).expect("a ref");
        let (b, _) = refs.request(bound("TOKEN"), "p", BASE).expect("a ref");
        let id = a.reference.strip_prefix(SCHEME).expect("the scheme");
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a.reference, b.reference);
        assert_ne!(a.nonce, id, "the page nonce is not the ref");
        assert_eq!(url, format!("{BASE}/secret/{}", a.nonce));
    }

    #[test]
    fn a_ref_resolves_for_its_key_only_and_stays_until_consumed() {
        let refs = Refs::new(IDLE_TTL);
        let reference = submitted(&refs, "TOKEN", "s3cret");
        assert_eq!(
            refs.resolve(&bound("TOKEN"), &reference)
                .expect("resolves")
                .expose(),
            "s3cret"
        );
        let wrong = refs
            .resolve(&bound("OTHER"), &reference)
            .expect_err("another key");
        assert!(matches!(wrong, RefError::WrongKey { ref requested, .. } if requested == "TOKEN"));
        assert!(!wrong.to_string().contains("s3cret"));
        // Still there after a failed use (a failed test keeps refs).
        assert!(refs.resolve(&bound("TOKEN"), &reference).is_ok());
        assert_eq!(
            refs.consume(&bound("TOKEN"), &reference)
                .expect("consumed")
                .expose(),
            "s3cret"
        );
        let again = refs
            .resolve(&bound("TOKEN"), &reference)
            .expect_err("consumed");
        assert!(matches!(again, RefError::Consumed { .. }), "{again}");
        assert!(again.to_string().starts_with("TOKEN: "), "{again}");
    }

    #[test]
    fn a_ref_is_refused_for_another_entry_or_launch_option_and_stays_for_its_own() {
        let refs = Refs::new(IDLE_TTL);
        let reference = submitted(&refs, "TOKEN", "x");
        let other_entry = Binding {
            server: "io.x/other".into(),
            ..bound("TOKEN")
        };
        let other_launch = Binding {
            launch: "remote https://evil.example/mcp (streamable-http)".into(),
            ..bound("TOKEN")
        };
        for used in [&other_entry, &other_launch] {
            for error in [
                refs.resolve(used, &reference).expect_err("another server"),
                refs.consume(used, &reference).expect_err("another server"),
            ] {
                assert!(matches!(error, RefError::WrongServer { .. }), "{error}");
                let text = error.to_string();
                assert!(
                    text.contains("io.x/y") && text.contains(&used.launch),
                    "{text}"
                );
                assert!(!text.contains(&reference), "{text}");
            }
        }
        // Neither misuse consumed it: it still serves its own binding, once.
        assert_eq!(
            refs.consume(&bound("TOKEN"), &reference)
                .expect("its own binding")
                .expose(),
            "x"
        );
    }

    #[test]
    fn a_pending_ref_names_its_key_and_page_and_its_nonce_is_single_use() {
        let refs = Refs::new(IDLE_TTL);
        let (requested, url) = refs
            .request(bound("TOKEN"), "the token", BASE)
            .expect("a ref");
        let pending = refs
            .resolve(&bound("TOKEN"), &requested.reference)
            .expect_err("pending");
        assert_eq!(
            pending,
            RefError::Pending {
                key: "TOKEN".into(),
                url
            }
        );
        assert_eq!(
            refs.page(&requested.nonce),
            Some(PageInfo {
                binding: bound("TOKEN"),
                prompt: "the token".into(),
            })
        );
        assert_eq!(
            refs.submit(&requested.nonce, SecretValue::from("v")),
            Submitted::Accepted
        );
        assert_eq!(
            refs.submit(&requested.nonce, SecretValue::from("w")),
            Submitted::Unknown
        );
        assert_eq!(refs.page(&requested.nonce), None);
        assert_eq!(
            refs.resolve(&bound("TOKEN"), &requested.reference)
                .expect("ready")
                .expose(),
            "v"
        );
    }

    #[test]
    fn an_idle_ref_expires_and_its_page_dies() {
        let refs = Refs::new(Duration::from_secs(60));
        let reference = submitted(&refs, "TOKEN", "v");
        let (pending, _) = refs.request(bound("OTHER"), "p", BASE).expect("a ref");
        // Used just under the TTL ago: still there, and the use renews it.
        refs.idle_for(Duration::from_secs(59));
        assert!(refs.resolve(&bound("TOKEN"), &reference).is_ok());
        assert!(refs.page(&pending.nonce).is_some());
        refs.idle_for(Duration::from_secs(61));
        let error = refs
            .resolve(&bound("TOKEN"), &reference)
            .expect_err("expired");
        assert!(matches!(error, RefError::Expired { .. }), "{error}");
        assert_eq!(refs.page(&pending.nonce), None);
        assert_eq!(
            refs.submit(&pending.nonce, SecretValue::from("v")),
            Submitted::Unknown
        );
    }

    #[test]
    fn unknown_and_malformed_refs_name_the_key() {
        let refs = Refs::new(IDLE_TTL);
        for reference in [
            "secret://0123456789abcdef0123456789abcdef",
            "not-a-ref",
            "secret://zz",
        ] {
            let error = refs
                .resolve(&bound("API_KEY"), reference)
                .expect_err("unknown");
            assert!(matches!(error, RefError::Unknown { .. }), "{error}");
            assert!(error.to_string().starts_with("API_KEY: "), "{error}");
        }
    }

    #[tokio::test]
    async fn a_waiter_wakes_when_the_value_arrives() {
        use std::future::Future as _;
        use std::task::{Context, Poll, Waker};
        let refs = Refs::new(IDLE_TTL);
        let (requested, _) = refs.request(bound("TOKEN"), "p", BASE).expect("a ref");
        assert!(
            !refs
                .wait_submitted(&requested.nonce, Duration::from_millis(30))
                .await,
            "nothing was submitted"
        );
        // A waiter that is already waiting when the value arrives.
        let waiting = refs.wait_submitted(&requested.nonce, Duration::from_secs(30));
        tokio::pin!(waiting);
        let mut context = Context::from_waker(Waker::noop());
        assert!(waiting.as_mut().poll(&mut context).is_pending());
        assert_eq!(
            refs.submit(&requested.nonce, SecretValue::from("v")),
            Submitted::Accepted
        );
        assert_eq!(waiting.as_mut().poll(&mut context), Poll::Ready(true));
    }
}
