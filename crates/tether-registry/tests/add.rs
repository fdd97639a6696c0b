//! Launch configs built from the fixture entries (`crates/tether-test-registry/fixtures`).

#![allow(
    clippy::expect_used,
    reason = "test helpers fail the test with a message when set-up fails"
)]

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tether_registry::add::{Answers, BuildError, MissingInput, package_config, remote_config};
use tether_registry::model::{ServerJson, ServerResponse};

fn entry(name: &str) -> ServerJson {
    let all: Vec<ServerResponse> = serde_json::from_str(include_str!(
        "../../tether-test-registry/fixtures/official.json"
    ))
    .expect("the fixture parses");
    all.into_iter()
        .find(|e| e.server.name == name && e.meta.official.as_ref().is_some_and(|o| o.is_latest))
        .expect("the fixture has the entry")
        .server
}

fn answers(values: &[(&str, &str)], secrets: &[&str]) -> Answers {
    let mut answers = Answers::default();
    for (name, value) in values {
        answers.set(name, value);
    }
    for name in secrets {
        answers.secret(name);
    }
    answers
}

fn check(
    built: Result<tether_registry::add::BuiltConfig, BuildError>,
    server: Value,
    placeholders: &[&str],
) {
    let built = built.expect("the config builds");
    assert_eq!(built.server, server);
    assert_eq!(built.placeholders, placeholders);
}

#[test]
fn packages_pin_their_version_and_fill_arguments_env_and_variables() {
    let filesystem = entry("io.github.modelcontextprotocol/filesystem");
    check(
        package_config(
            &filesystem.packages[0],
            &answers(&[("target_dir", "/a"), ("target_dir", "/b")], &[]),
        ),
        json!({"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem@1.0.2", "/a", "/b"]}),
        &[],
    );
    check(
        package_config(
            &filesystem.packages[1],
            &answers(&[("source_path", "/src"), ("source_path", "/data")], &[]),
        ),
        json!({"command": "docker", "args": [
            "run", "-i", "--rm",
            "--mount", "type=bind,src=/src,dst=/project",
            "--mount", "type=bind,src=/data,dst=/project",
            "docker.io/mcp/filesystem:1.0.2", "/project"
        ]}),
        &[],
    );
    let weather = entry("io.github.example/weather");
    check(
        package_config(
            &weather.packages[0],
            &answers(
                &[("--units", "imperial"), ("--verbose", "true")],
                &["WEATHER_API_KEY"],
            ),
        ),
        json!({
            "command": "uvx",
            "args": ["--python", "3.12", "mcp-weather==0.4.1", "--units", "imperial", "--verbose"],
            "env": {"WEATHER_API_KEY": "{{WEATHER_API_KEY}}"}
        }),
        &["WEATHER_API_KEY"],
    );
    let nuget = entry("io.github.example/nuget-tools");
    check(
        package_config(&nuget.packages[0], &answers(&[("dir", "/srv")], &[])),
        json!({"command": "dnx", "args": ["Example.McpTools@2.1.0", "--yes", "--allow", "/srv"]}),
        &[],
    );
}

#[test]
fn remotes_fill_url_variables_and_headers_and_only_required_inputs_are_asked_for() {
    let tenant = entry("com.example/tenant-api");
    check(
        remote_config(
            &tenant.remotes[0],
            &answers(&[("tenant_id", "acme")], &["api_token"]),
        ),
        json!({
            "type": "http",
            "url": "https://acme.api.example.com/mcp",
            "headers": {"Authorization": "Bearer {{api_token}}"}
        }),
        &["api_token"],
    );
    assert_eq!(
        remote_config(&tenant.remotes[0], &Answers::default()),
        Err(BuildError::Missing(vec![
            MissingInput {
                name: "tenant_id".to_owned(),
                secret: false,
                description: Some("Your tenant".to_owned())
            },
            MissingInput {
                name: "api_token".to_owned(),
                secret: true,
                description: Some("Token from the dashboard".to_owned())
            },
        ]))
    );
    // Optional inputs (WEATHER_CACHE_DIR, --units) are not required; only the secret is.
    let weather = entry("io.github.example/weather");
    assert_eq!(
        package_config(&weather.packages[0], &Answers::default()),
        Err(BuildError::Missing(vec![MissingInput {
            name: "WEATHER_API_KEY".to_owned(),
            secret: true,
            description: Some("API key for the weather service".to_owned())
        }]))
    );
    let everything = entry("io.github.example/everything");
    check(
        remote_config(&everything.remotes[0], &answers(&[], &["X-Api-Key"])),
        json!({
            "type": "http",
            "url": "http://127.0.0.1:3001/mcp",
            "headers": {"X-Api-Key": "{{X-Api-Key}}"}
        }),
        &["X-Api-Key"],
    );
}

#[test]
fn identifiers_a_runner_would_read_as_options_are_refused() {
    let filesystem = entry("io.github.modelcontextprotocol/filesystem");
    let answers = answers(&[("target_dir", "/a")], &[]);
    for (identifier, version, field) in [
        ("--call=touch /tmp/owned", Some("1.0.0"), "identifier"),
        ("-y", None, "identifier"),
        ("", None, "identifier"),
        ("pkg extra", None, "identifier"),
        ("@scope/pkg", Some("--call=x"), "version"),
        ("@scope/pkg", Some("1.0\n2"), "version"),
    ] {
        let mut package = filesystem.packages[0].clone();
        package.identifier = identifier.to_owned();
        package.version = version.map(str::to_owned);
        match package_config(&package, &answers) {
            Err(BuildError::UnsafePackage { field: refused, .. }) => {
                assert_eq!(refused, field, "{identifier:?} {version:?}");
            }
            other => panic!("{identifier:?} {version:?} was not refused: {other:?}"),
        }
    }
    let message = {
        let mut package = filesystem.packages[0].clone();
        package.identifier = "--call=x".to_owned();
        package_config(&package, &answers)
            .expect_err("refused")
            .to_string()
    };
    assert_eq!(
        message,
        r#"the entry's package identifier "--call=x" starts with '-' (the runner would read it as an option); tether does not run it"#
    );
}

#[test]
fn a_runtime_hint_outside_the_runners_and_arguments_past_the_package_are_refused() {
    let filesystem = entry("io.github.modelcontextprotocol/filesystem");
    let answers = answers(&[("target_dir", "/a")], &[]);
    let positional = |value: &str| -> tether_registry::model::Argument {
        serde_json::from_value(json!({"type": "positional", "value": value})).expect("argument")
    };
    let refused =
        |package: &tether_registry::model::Package| match package_config(package, &answers) {
            Err(BuildError::UnsafePackage { field, value, .. }) => (field, value),
            other => panic!("{package:?} was not refused: {other:?}"),
        };
    // Any program as the runner: `sh -c …` ran unsandboxed as an `oci` package.
    // A Python interpreter runs a PyPI package only.
    for (kind, hint) in [("oci", "sh"), ("npm", "/bin/sh"), ("npm", "python3")] {
        let mut package = filesystem.packages[0].clone();
        package.registry_type = kind.to_owned();
        package.runtime_hint = Some(hint.to_owned());
        package.runtime_arguments = vec![positional("-c"), positional("id > /tmp/owned")];
        assert_eq!(refused(&package), ("runtimeHint", hint.to_owned()));
    }
    // A Python interpreter: its flags that run nothing, then the package's own module.
    let python = |arguments: &[&str]| {
        let mut package = filesystem.packages[0].clone();
        package.registry_type = "pypi".to_owned();
        package.identifier = "Mcp-Server.Fetch".to_owned();
        package.runtime_hint = Some("python3".to_owned());
        package.runtime_arguments = arguments.iter().map(|a| positional(a)).collect();
        package
    };
    for (arguments, bad) in [
        (&["-c", "import os"][..], "-c"),
        (&["-m", "pip", "install", "evil"], "pip"),
        (&["-m", "http.server"], "http.server"),
        (&["-m", "mcp_server_fetchx"], "mcp_server_fetchx"),
        (&["-X", "importtime", "-m", "mcp_server_fetch"], "-X"),
        (&["-m", "mcp_server_fetch", "extra"], "extra"),
        (&["/tmp/evil.py"], "/tmp/evil.py"),
    ] {
        assert_eq!(
            refused(&python(arguments)),
            ("runtime argument", bad.to_owned())
        );
    }
    for (arguments, expected) in [
        (&[][..], json!(["-m", "mcp_server_fetch"])),
        (&["-u"], json!(["-u", "-m", "mcp_server_fetch"])),
        (
            &["-I", "-m", "mcp_server_fetch.cli"],
            json!(["-I", "-m", "mcp_server_fetch.cli"]),
        ),
    ] {
        let built = package_config(&python(arguments), &answers).expect("a module run passes");
        assert_eq!(built.server["command"], "python3");
        let args = built.server["args"].as_array().expect("args");
        // Then the package's own arguments (the filesystem entry's directory).
        let expected = expected.as_array().expect("expected");
        assert_eq!(&args[..expected.len()], &expected[..], "{arguments:?}");
        assert!(
            !args
                .iter()
                .any(|a| a.as_str().is_some_and(|a| a.contains('@')))
        );
    }
    // A container's runtime arguments: only an environment variable and tether's own flags.
    for bad in [
        "--privileged",
        "--pid=host",
        "--network",
        "--cap-add=ALL",
        "--device",
    ] {
        let mut package = filesystem.packages[0].clone();
        package.registry_type = "oci".to_owned();
        package.runtime_hint = None;
        package.identifier = "ghcr.io/example/img".to_owned();
        package.runtime_arguments = vec![positional(bad), positional("/:/host")];
        assert_eq!(refused(&package), ("runtime argument", bad.to_owned()));
    }
    // A mount the registry chose, not the user.
    for (flag, value) in [("-v", "/:/host"), ("--mount", "type=bind,src=/,dst=/host")] {
        let mut package = filesystem.packages[0].clone();
        package.registry_type = "oci".to_owned();
        package.identifier = "ghcr.io/example/img".to_owned();
        package.runtime_arguments = vec![positional(flag), positional(value)];
        assert_eq!(refused(&package), ("runtime argument", value.to_owned()));
    }
    let mut package = filesystem.packages[0].clone();
    package.registry_type = "oci".to_owned();
    package.identifier = "ghcr.io/example/img".to_owned();
    package.runtime_arguments = vec![positional("-e"), positional("LOG=1"), positional("--init")];
    let built = package_config(&package, &answers).expect("plain options pass");
    assert_eq!(built.server["command"], "docker");
    // A package runner's options that run something else than the package.
    for bad in ["--call=touch /tmp/owned", "--package=evil", "-c"] {
        let mut package = filesystem.packages[0].clone();
        package.runtime_arguments = vec![positional(bad)];
        assert_eq!(refused(&package), ("runtime argument", bad.to_owned()));
    }
}
