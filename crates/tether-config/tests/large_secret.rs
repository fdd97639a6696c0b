//! A large secret full of characters that every printed form changes (JSON specials, `{{X}}`
//! placeholder text, `$HOME`, `%41`, non-ASCII, line breaks) renders and is masked in time
//! linear in its size. The bound is generous (a debug build on a loaded 2-core machine); the
//! `large_secret` group of `benches/render.rs` measures the time and the scaling.

#![allow(clippy::expect_used, reason = "tests")]

use std::time::{Duration, Instant};

use tether_config::{
    EmptyEnv, Exposure, Masker, Origin, SecretValue, Secrets, parse_config, render_server_map,
};

#[path = "../benches/support/hostile.rs"]
mod hostile;
use hostile::{CONFIG, hostile};

fn render_with(secret: &str) -> (String, Duration) {
    let started = Instant::now();
    let parsed = parse_config(CONFIG, Origin::User).expect("the config parses");
    let secrets: Secrets = [("TOKEN".to_owned(), secret.to_owned())]
        .into_iter()
        .collect();
    let rendered: Vec<_> = parsed
        .servers
        .into_iter()
        .map(|s| s.into_installation().render(&secrets, &EmptyEnv))
        .collect();
    let text = render_server_map(&rendered, Exposure::Real).to_string();
    let masker = Masker::new([&SecretValue::new(secret.to_owned())]);
    let masked = masker.mask(&text);
    (masked, started.elapsed())
}

#[test]
fn a_64_kib_hostile_secret_renders_and_is_masked_quickly() {
    let secret = hostile(64 * 1024);
    let (masked, took) = render_with(&secret);
    assert!(
        !masked.contains("ünï"),
        "the secret is masked in the rendered JSON"
    );
    assert!(
        took < Duration::from_secs(5),
        "rendering and masking took {took:?}"
    );
}

#[test]
fn a_one_character_secret_renders_too() {
    let (masked, _) = render_with("x");
    assert!(masked.contains("/bin/echo"));
}
