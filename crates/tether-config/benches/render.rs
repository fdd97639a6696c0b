//! Rendering throughput: N servers holding 10 placeholders each, secrets applied in memory,
//! serialized to the portable JSON map. Target: 1,000 servers / 10,000 placeholders
//! in ≤ 20 ms on a 2-core machine, and doubling the input at most ×2.3 the time.
//!
//! Scaling in the number of distinct placeholders of one server: parse and
//! render 10,000 vs 40,000 distinct placeholders, spread over args and env values or all in one
//! string, and mask text holding 10,000 vs 40,000 distinct secret values. Target: 40k/10k at
//! most ×4.5 the time (the code was quadratic: ×13 to ×20).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Map, Value, json};
#[path = "support/wide.rs"]
mod wide;
use wide::{one_string_config, spread_config, wide_secrets};
#[path = "support/hostile.rs"]
mod hostile;
use hostile::{CONFIG, hostile};

use tether_config::{
    EmptyEnv, Exposure, Installation, Origin, SecretValue, Secrets, mask_known_values,
    parse_config, render_server_map,
};

/// A config of `servers` stdio servers, each with 6 arg placeholders and 4 captured env values
/// that hold placeholders: 10 placeholders a server.
fn config(servers: usize) -> String {
    let map: Map<String, Value> = (0..servers)
        .map(|i| {
            let server = json!({
                "command": format!("/opt/mcp/server-{i}"),
                "args": (0..6).map(|a| format!("--opt{a}={{{{ARG_{a}}}}}")).collect::<Vec<_>>(),
                "env": (0..4).map(|e| (format!("ENV_{e}"), Value::from(format!("prefix-{{{{SECRET_{e}}}}}")))).collect::<Map<_, _>>(),
            });
            (format!("server-{i}"), server)
        })
        .collect();
    json!({ "mcpServers": map }).to_string()
}

fn secrets() -> Secrets {
    (0..6)
        .map(|a| (format!("ARG_{a}"), format!("arg-value-{a}")))
        .chain((0..4).map(|e| (format!("SECRET_{e}"), format!("s3cr3t\"\\{e}"))))
        .collect()
}

fn installations(servers: usize) -> Vec<Installation> {
    installations_of(&config(servers), Origin::Managed)
}

/// The installations of a config text parsed as `origin` would be.
fn installations_of(text: &str, origin: Origin) -> Vec<Installation> {
    match parse_config(text, origin) {
        Ok(parsed) => parsed
            .servers
            .into_iter()
            .map(|s| s.into_installation())
            .collect(),
        Err(err) => panic!("bench config does not parse: {err}"),
    }
}

fn render_all(installations: &[Installation], secrets: &Secrets) -> String {
    let rendered: Vec<_> = installations
        .iter()
        .map(|i| i.render(secrets, &EmptyEnv))
        .collect();
    render_server_map(&rendered, Exposure::Real).to_string()
}

fn bench(c: &mut Criterion) {
    let secrets = secrets();
    let mut group = c.benchmark_group("render");
    for servers in [1_000, 2_000] {
        let installations = installations(servers);
        group.throughput(Throughput::Elements(servers as u64 * 10));
        group.bench_with_input(
            BenchmarkId::new("servers", servers),
            &installations,
            |b, inst| {
                b.iter(|| black_box(render_all(inst, &secrets)));
            },
        );
    }
    group.finish();

    let mut group = c.benchmark_group("parse_and_render");
    for servers in [1_000, 2_000] {
        let text = config(servers);
        group.bench_with_input(BenchmarkId::new("servers", servers), &text, |b, text| {
            b.iter(|| {
                let parsed = parse_config(text, Origin::Managed).map(|p| {
                    p.servers
                        .into_iter()
                        .map(|s| s.into_installation())
                        .collect::<Vec<_>>()
                });
                black_box(parsed.map(|inst| render_all(&inst, &secrets)).ok())
            });
        });
    }
    group.finish();
}

fn parse_and_render(text: &str, secrets: &Secrets) -> Option<String> {
    let parsed = parse_config(text, Origin::Managed).ok()?;
    let installations: Vec<Installation> = parsed
        .servers
        .into_iter()
        .map(|s| s.into_installation())
        .collect();
    Some(render_all(&installations, secrets))
}

fn bench_wide(c: &mut Criterion) {
    let mut group = c.benchmark_group("placeholders");
    group.sample_size(10);
    for count in [10_000, 40_000] {
        let secrets = wide_secrets(count);
        group.throughput(Throughput::Elements(count as u64));
        for (shape, text) in [
            ("spread", spread_config(count)),
            ("one_string", one_string_config(count)),
        ] {
            group.bench_with_input(BenchmarkId::new(shape, count), &text, |b, text| {
                b.iter(|| black_box(parse_and_render(text, &secrets)));
            });
        }
    }
    group.finish();

    let mut group = c.benchmark_group("mask");
    group.sample_size(10);
    for count in [10_000, 40_000] {
        let values: Vec<SecretValue> = (0..count)
            .map(|i| SecretValue::new(format!("secret-value-{i:06}")))
            .collect();
        let text: String = (0..count)
            .map(|i| format!("line {i} token=secret-value-{i:06} done\n"))
            .collect();
        group.throughput(Throughput::Elements(count as u64));
        group.bench_with_input(BenchmarkId::new("values", count), &text, |b, text| {
            b.iter(|| black_box(mask_known_values(text, &values)));
        });
    }
    group.finish();
}

/// One server whose secret of 16 or 64 KiB (hostile text: JSON specials, `{{X}}`, `$HOME`, `%41`,
/// non-ASCII, line breaks) is in an argument and an env value: parse, render, build the masker
/// for the secret and mask the rendered JSON — what `tether export --show-secrets` does with it.
/// Target: 64 KiB in ≤ 50 ms, 16 → 64 KiB at most ×4.5.
fn bench_large_secret(c: &mut Criterion) {
    let mut group = c.benchmark_group("large_secret");
    group.sample_size(10);
    for kib in [16, 64] {
        let secret = hostile(kib * 1024);
        let secrets: Secrets = [("TOKEN".to_owned(), secret.clone())].into_iter().collect();
        group.throughput(Throughput::Bytes(secret.len() as u64));
        group.bench_with_input(BenchmarkId::new("kib", kib), &secret, |b, secret| {
            b.iter(|| {
                let rendered = parse_and_render_user(CONFIG, &secrets);
                let masker = tether_config::Masker::new([&SecretValue::new(secret.clone())]);
                black_box(masker.mask(&rendered))
            });
        });
    }
    group.finish();
}

fn parse_and_render_user(text: &str, secrets: &Secrets) -> String {
    render_all(&installations_of(text, Origin::User), secrets)
}

criterion_group!(benches, bench, bench_wide, bench_large_secret);
criterion_main!(benches);
