//! One parse + render of a server with N distinct placeholders (`spread` or `one_string`), or
//! one masking of text holding N distinct secret values (`mask`), for
//! counting instructions and cache misses with valgrind (`bench/placeholders-callgrind.sh`):
//! `cargo run --release --example placeholders -- spread 40000`.

#[path = "../benches/support/wide.rs"]
mod wide;
use wide::{one_string_config, spread_config, wide_secrets};

use tether_config::{
    EmptyEnv, Exposure, Installation, Origin, SecretValue, Secrets, mask_known_values,
    parse_config, render_server_map,
};

fn main() {
    let mut args = std::env::args().skip(1);
    let shape = args.next().unwrap_or_else(|| "spread".to_owned());
    let count: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let text = match shape.as_str() {
        "one_string" => one_string_config(count),
        _ => spread_config(count),
    };
    let secrets = wide_secrets(count);
    if shape == "mask" {
        let values: Vec<SecretValue> = (0..count)
            .map(|i| SecretValue::new(format!("secret-value-{i:06}")))
            .collect();
        let text: String = (0..count)
            .map(|i| format!("line {i} token=secret-value-{i:06} done\n"))
            .collect();
        println!("{}", mask(&text, &values));
        return;
    }
    // A third argument N: time N runs and print the fastest (for quick comparisons; the
    // criterion bench is the reference).
    if let Some(runs) = args.next().and_then(|n| n.parse::<usize>().ok()) {
        let best = (0..runs.max(1))
            .map(|_| {
                let started = std::time::Instant::now();
                std::hint::black_box(parse_and_render(&text, &secrets));
                started.elapsed()
            })
            .min()
            .unwrap_or_default();
        println!(
            "{shape} {count}: best of {runs} {:.2} ms",
            best.as_secs_f64() * 1e3
        );
        return;
    }
    println!("{}", parse_and_render(&text, &secrets));
}

/// What the `mask` criterion bench times.
#[inline(never)]
fn mask(text: &str, values: &[SecretValue]) -> usize {
    mask_known_values(text, values).len()
}

/// What the `placeholders` criterion bench times; the script counts only this function.
#[inline(never)]
fn parse_and_render(text: &str, secrets: &Secrets) -> usize {
    let parsed = match parse_config(text, Origin::Managed) {
        Ok(parsed) => parsed,
        Err(error) => panic!("the config does not parse: {error}"),
    };
    let installations: Vec<Installation> = parsed
        .servers
        .into_iter()
        .map(|s| s.into_installation())
        .collect();
    let rendered: Vec<_> = installations
        .iter()
        .map(|i| i.render(secrets, &EmptyEnv))
        .collect();
    render_server_map(&rendered, Exposure::Real)
        .to_string()
        .len()
}
