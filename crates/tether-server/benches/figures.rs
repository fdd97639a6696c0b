//! What the server benches print figures with (included by `#[path]`; not a bench itself).

use std::time::Duration;

/// Runs a bench's async body on a multi-threaded runtime.
pub fn run(bench: impl std::future::Future<Output = ()>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("building the runtime: {e}"));
    runtime.block_on(bench);
}

/// The value at quantile `q` of sorted samples.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let last = sorted.len() - 1;
    let index = (f64::from(u32::try_from(last).unwrap_or(u32::MAX)) * q).round();
    sorted[(index as usize).min(last)]
}

/// Milliseconds with two decimals.
pub fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}
