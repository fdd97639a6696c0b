//! The masker's cost, run by hand (`cargo bench -p tether-secret --bench mask`): building a
//! masker for 20 secret values (tokens of assorted shapes), and masking 100 KB of tool output with it — ASCII prose, the
//! same with non-ASCII words (é, CJK, an emoji: text the masker folds before it searches
//! again), and prose holding one value; then a masker of one value, and one of 20 values
//! sharing their first bytes — p50 of 200 runs each, after 20 unmeasured.

#![allow(clippy::expect_used, reason = "a bench fails loudly")]

use std::time::{Duration, Instant};

use tether_secret::{Masker, SecretValue};

/// Prose of `bytes` bytes made of `line` repeated.
fn prose(line: &str, bytes: usize) -> String {
    let text = line.repeat(bytes / line.len() + 1);
    let mut end = bytes;
    while !text.is_char_boundary(end) {
        end += 1;
    }
    text[..end].to_owned()
}

fn p50(label: &str, runs: usize, mut work: impl FnMut() -> usize) {
    let mut samples = Vec::with_capacity(runs);
    for index in 0..(runs + 20) {
        let started = Instant::now();
        std::hint::black_box(work());
        let took = started.elapsed();
        if index >= 20 {
            samples.push(took);
        }
    }
    samples.sort();
    let median: Duration = samples[samples.len() / 2];
    println!("{label:<44} p50 {:>9.1} µs", median.as_secs_f64() * 1e6);
}

fn main() {
    // Values as a run has them: tokens of assorted shapes, each starting differently.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let prefixes = [
        "ghp_", "sk-", "xoxb-", "AKIA", "glpat-", "", "Bearer-", "pw:",
    ];
    let values: Vec<SecretValue> = (0..20)
        .map(|i| {
            let len = 20 + usize::try_from(next() % 21).unwrap_or(0);
            let body: String = (0..len)
                .map(|_| char::from(ALPHABET[usize::try_from(next() % 62).unwrap_or(0)]))
                .collect();
            SecretValue::new(format!("{}{body}", prefixes[i % prefixes.len()]))
        })
        .collect();
    p50("build a masker of 20 values", 200, || {
        Masker::new(&values).longest()
    });
    let masker = Masker::new(&values);
    let ascii = prose(
        "The build of service-42 finished in 3.2 s; see /var/log/build/2026-12-05.log or https://ci.example.com/runs/8731 for details.\n",
        100_000,
    );
    let unicode = prose(
        "Le déploiement de service-42 a réussi en 3,2 s — 部署成功 ✅; voir https://ci.example.com/runs/8731 pour les détails.\n",
        100_000,
    );
    let mut holding = ascii.clone();
    holding.insert_str(50_000, values[7].expose());
    for (label, text) in [
        ("mask 100 KB of ASCII prose", &ascii),
        ("mask 100 KB of non-ASCII prose", &unicode),
        ("mask 100 KB of ASCII prose holding a value", &holding),
    ] {
        p50(label, 200, || masker.mask(text).len());
    }
    // One value, and 20 sharing their first bytes (the automaton's prefilter then looks for
    // few distinct bytes; a form starting otherwise, as hex does, costs it that).
    let one = Masker::new(&values[..1]);
    p50("one value: mask 100 KB of ASCII prose", 200, || {
        one.mask(&ascii).len()
    });
    let alike: Vec<SecretValue> = (0..20)
        .map(|i| SecretValue::new(format!("tok-{i:02}-Sup3rS3cretValue-9f3a7c21d0e4")))
        .collect();
    let alike = Masker::new(&alike);
    p50("20 alike values: mask 100 KB of ASCII prose", 200, || {
        alike.mask(&ascii).len()
    });
}
