//! One masking layer for everything tether prints on stderr: every log event of every crate
//! (tether's and its dependencies': rmcp and reqwest print URLs with `Debug`) and every error
//! message passes through [`mask`] before it is written.
//!
//! The run registers its secret values once they are known ([`register`]); the masker built
//! from them (`tether_secret::Masker`) finds each value in every form libraries print it in
//! (percent-encoded, lower- and upper-cased, JSON-, HTML-, shell- and `Debug`-escaped, NFC and
//! NFD) and each long line of a multi-line value.
//!
//! A process-wide registry is right here: a process has one stderr, log events come from
//! threads tether does not control, and a value becomes known wherever it is read or minted —
//! the CLI's secret sources, the OAuth client's tokens, setup-mcp's typed values — so each of
//! those registers it here, once, the moment it exists.
//!
//! ```
//! let secret = tether_secret::SecretValue::from("hunter2-sentinel");
//! tether_log::register([&secret]);
//! assert!(!tether_log::mask("token=hunter2-sentinel").contains("hunter2"));
//! ```

pub mod telemetry;

use std::io::Write;
use std::sync::{PoisonError, RwLock};

use tether_secret::{Masker, SHORT_SECRET_CHARS, SecretValue};
use tracing_subscriber::fmt::MakeWriter;
use zeroize::Zeroize as _;

/// The registered values, and the masker built from them. Registering only records a value;
/// the masker is rebuilt at the next masking after a change, so values registered one at a time
/// (each `--secret` as it is read) cost one build, not one per value.
struct Registry {
    values: Vec<SecretValue>,
    masker: Masker,
    /// Values were added since `masker` was built.
    stale: bool,
}

static REGISTRY: RwLock<Registry> = RwLock::new(Registry {
    values: Vec::new(),
    masker: Masker::EMPTY,
    stale: false,
});

/// Adds secret values to mask from now on.
///
/// A value shorter than [`tether_secret::SHORT_SECRET_CHARS`] characters is masked only where
/// it stands alone (masked inside words it would corrupt every line); each such value is
/// warned about once, when it is registered.
pub fn register<'a>(values: impl IntoIterator<Item = &'a SecretValue>) {
    let mut short = 0;
    {
        let mut registry = REGISTRY.write().unwrap_or_else(PoisonError::into_inner);
        for value in values {
            if !value.is_empty() && !registry.values.contains(value) {
                registry.values.push(value.clone());
                registry.stale = true;
                if value.expose().chars().count() < SHORT_SECRET_CHARS {
                    short += 1;
                }
            }
        }
    }
    // After the lock is released: the warning itself is masked through the registry.
    for _ in 0..short {
        tracing::warn!(
            "a secret value is shorter than {SHORT_SECRET_CHARS} characters: output shows it masked only where it stands alone, not inside words, and a value that short is easy to guess"
        );
    }
}

/// `text` with every registered value, in each of its forms, replaced by the mask.
pub fn mask(text: &str) -> String {
    {
        let registry = REGISTRY.read().unwrap_or_else(PoisonError::into_inner);
        if !registry.stale {
            return registry.masker.mask(text);
        }
    }
    let mut registry = REGISTRY.write().unwrap_or_else(PoisonError::into_inner);
    if registry.stale {
        registry.masker = Masker::new(&registry.values);
        registry.stale = false;
    }
    registry.masker.mask(text)
}

/// `error` and each of its causes, joined by `: ` (as anyhow's `{:#}` prints them): the one
/// line a warning, a tool result or a shim's last word shows. Mask it before it is printed.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

/// The tracing writer: each event is formatted into a buffer, masked as a whole, and written
/// to stderr in one call.
#[derive(Debug, Clone, Copy, Default)]
pub struct MaskedStderr;

impl<'a> MakeWriter<'a> for MaskedStderr {
    type Writer = EventBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        EventBuffer(Vec::new())
    }
}

/// One event's text, written to stderr (masked) when dropped.
#[derive(Debug)]
pub struct EventBuffer(Vec<u8>);

impl Write for EventBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventBuffer {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let text = String::from_utf8_lossy(&self.0);
        let masked = mask(&text);
        // Logging must never fail the run; a closed stderr loses the line.
        let _ = std::io::stderr().lock().write_all(masked.as_bytes());
        // It held the unmasked event text.
        self.0.zeroize();
    }
}

/// `eprintln!` through the mask: for error messages built from library errors.
#[macro_export]
macro_rules! eprintln_masked {
    ($($arg:tt)*) => {
        eprintln!("{}", $crate::mask(&format!($($arg)*)))
    };
}

/// Sets up the process's logging: events at `default` (or `RUST_LOG`'s filter when it is set
/// and `prefer_env`) to stderr through [`MaskedStderr`], and, when the `OTEL_*` variables ask
/// for it, the export of [`telemetry::TARGET`]'s spans and of metrics. Keep what it returns
/// until exit: dropping it flushes the export.
pub fn init(default: &str, prefer_env: bool, ansi: bool) -> Option<telemetry::Telemetry> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = prefer_env
        .then(|| tracing_subscriber::EnvFilter::try_from_env(tether_env::EnvVars::RUST_LOG).ok())
        .flatten()
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default));
    // The exported spans never reach stderr (they would change every log line of `-v`).
    let filter = match format!("{}=off", telemetry::TARGET).parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(MaskedStderr)
        .with_ansi(ansi)
        .with_target(false)
        .with_filter(filter);
    let registry = tracing_subscriber::registry().with(stderr);
    let (export, telemetry) = telemetry::layer();
    registry.with(export).init();
    telemetry
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_values_are_masked_in_every_printed_form() {
        let secret = SecretValue::from("Mask Me\"<x>");
        register([&secret]);
        let url = reqwest::Url::parse("http://127.0.0.1:9/mcp").map(|mut url| {
            url.query_pairs_mut().append_pair("key", secret.expose());
            url
        });
        let url = url.expect("parsing a loopback URL");
        let raw_query = format!("http://127.0.0.1:9/mcp?key={}", secret.expose());
        let by_url_crate = reqwest::Url::parse(&raw_query).expect("parsing the raw query");
        for printed in [
            format!("url: {url:?}"),
            format!("url: {by_url_crate:?}"),
            by_url_crate.to_string(),
            format!("{:?}", secret.expose()),
            serde_json::to_string(secret.expose()).expect("JSON-encoding a string"),
            format!("host {}", secret.expose().to_lowercase()),
        ] {
            let masked = mask(&printed);
            assert!(masked.contains(tether_secret::MASK), "{printed} → {masked}");
            for needle in ["Mask", "mask me", "Me%22", "Me\\\"", "%3Cx"] {
                assert!(!masked.contains(needle), "{needle} left in {masked}");
            }
        }
    }

    #[test]
    fn text_without_secrets_is_unchanged() {
        register([&SecretValue::from("unrelated-sentinel-value")]);
        assert_eq!(mask("ready  echo  3 tools"), "ready  echo  3 tools");
    }
}
