//! `tether add` of an MCP bundle (`.mcpb`): downloaded, verified against its hash and signature,
//! unpacked, and run with its stored secret.

use super::*;

/// A zip archive of `entries` (name, bytes, unix mode).
fn zip_bytes(entries: &[(&str, &[u8], u32)]) -> Vec<u8> {
    use std::io::Write;
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes, mode) in entries {
        let options = zip::write::SimpleFileOptions::default().unix_permissions(*mode);
        writer.start_file(*name, options).expect("a zip entry");
        writer.write_all(bytes).expect("writing a zip entry");
    }
    writer.finish().expect("finishing the zip").into_inner()
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An official entry (as `--entry` takes it) whose one mcpb package is at `url` (`{base}` is
/// the fixture registry).
fn bundle_entry(sandbox: &Sandbox, name: &str, url: &str, sha256: &str) -> String {
    let entry = serde_json::json!({
        "server": {
            "name": format!("io.github.example/{name}"),
            "description": "A bundle",
            "version": "1.0.0",
            "packages": [{
                "registryType": "mcpb",
                "identifier": url,
                "version": "1.0.0",
                "fileSha256": sha256,
                "transport": {"type": "stdio"}
            }]
        },
        "_meta": {"io.modelcontextprotocol.registry/official": {
            "status": "active", "publishedAt": "2026-11-01T10:00:00Z",
            "updatedAt": "2026-11-01T10:00:00Z", "isLatest": true
        }}
    });
    let path = sandbox.path(&format!("{name}.json"));
    std::fs::write(&path, entry.to_string()).expect("writing the entry");
    path.display().to_string()
}

/// Every file name under `dir`, recursively (empty when it does not exist).
fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    names
}

#[test]
fn add_an_mcpb_bundle_downloads_verifies_unpacks_and_runs_it_with_its_stored_secret() {
    let sandbox = Sandbox::new();
    let manifest = serde_json::json!({
        "manifest_version": "0.3", "name": "demo", "version": "1.0.0", "author": {"name": "t"},
        "server": {"type": "binary", "entry_point": "server/run.sh", "mcp_config": {
            "command": "${__dirname}/server/run.sh",
            "args": ["--tools", "${user_config.tools}", "--expect-env-file", "API_KEY=${user_config.expect_file}"],
            "env": {"API_KEY": "${user_config.api_key}"}
        }},
        "user_config": {
            "api_key": {"type": "string", "title": "API key", "sensitive": true, "required": true},
            "tools": {"type": "number", "default": 2, "min": 0, "max": 10},
            "expect_file": {"type": "file", "required": true}
        }
    });
    let script = format!(
        "#!/bin/sh\nexec {} \"$@\"\n",
        tether_testkit::test_server_bin().display()
    );
    let good = zip_bytes(&[
        ("manifest.json", manifest.to_string().as_bytes(), 0o644),
        ("server/run.sh", script.as_bytes(), 0o755),
    ]);
    let slip = zip_bytes(&[
        ("manifest.json", manifest.to_string().as_bytes(), 0o644),
        ("../evil.txt", b"outside", 0o644),
    ]);
    std::fs::write(sandbox.path("demo.mcpb"), &good).expect("writing the bundle");
    std::fs::write(sandbox.path("slip.mcpb"), &slip).expect("writing the bundle");
    let entries = [
        bundle_entry(
            &sandbox,
            "demo",
            "{base}/_files/demo.mcpb",
            &sha256_hex(&good),
        ),
        bundle_entry(
            &sandbox,
            "tampered",
            "{base}/_files/demo.mcpb",
            &sha256_hex(b"other bytes"),
        ),
        bundle_entry(
            &sandbox,
            "slip",
            "{base}/_files/slip.mcpb",
            &sha256_hex(&slip),
        ),
        bundle_entry(
            &sandbox,
            "plain",
            "http://bundles.example/demo.mcpb",
            &sha256_hex(&good),
        ),
        bundle_entry(
            &sandbox,
            "unverified",
            "{base}/_files/demo.mcpb",
            "not-a-sha",
        ),
    ];
    let demo_file = format!("demo.mcpb={}", sandbox.path("demo.mcpb").display());
    let slip_file = format!("slip.mcpb={}", sandbox.path("slip.mcpb").display());
    let mut args = vec!["--file", &demo_file, "--file", &slip_file];
    for entry in &entries {
        args.extend(["--entry", entry.as_str()]);
    }
    let registry = FixtureRegistry::start(&args);
    let secret = "p@$$w0rd \"q\" \\ {{x}} $HOME %s ü";
    let expect = sandbox.path("expected-key");
    std::fs::write(&expect, secret).expect("writing the expected value");
    let set_expect = format!("expect_file={}", expect.display());
    // The bundle's launcher runs the test server from outside the bundle: a permission
    // profile grants it (the bundle itself is granted by every sandbox).
    let profile =
        serde_json::json!({"read": [tether_testkit::test_server_bin(), &expect], "network": {}});
    std::fs::write(sandbox.path("profile.json"), profile.to_string()).expect("the profile");
    let add = |name: &str| {
        sandbox
            .tether(&[
                "-vvv",
                "add",
                &format!("io.github.example/{name}"),
                "--secret",
                "api_key=env:BUNDLE_KEY",
                "--set",
                &set_expect,
                "--yes",
                // Relative: stored as an absolute path.
                "--sandbox",
                "profile.json",
            ])
            .env("TETHER_REGISTRY_URL", &registry.url)
            .env("TETHER_SECRET_STORE", "file")
            .env("BUNDLE_KEY", secret)
            .output()
            .expect("running tether add")
    };
    let bundles = sandbox.home().join("bundles");

    // Only https (or loopback http), and only with a checksum: refused before any download.
    let out = add("plain");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("error: the bundle's address http://bundles.example/demo.mcpb is not https; tether downloads bundles over https only"),
        "{}",
        text(&out.stderr)
    );
    let out = add("unverified");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("gives no valid fileSha256 for the bundle"),
        "{}",
        text(&out.stderr)
    );

    // A bundle whose bytes are not the registry's: nothing stored, nothing unpacked.
    let out = add("tampered");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "has SHA-256 {}, but the registry says {}; nothing was installed",
            sha256_hex(&good),
            sha256_hex(b"other bytes")
        )),
        "{stderr}"
    );
    assert_eq!(files_under(&bundles), Vec::<String>::new());
    // An entry that climbs out of the bundle: refused, nothing written outside.
    let out = add("slip");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "the bundle's entry \"../evil.txt\" points outside the bundle; not installed"
        ),
        "{stderr}"
    );
    assert_eq!(files_under(&bundles), Vec::<String>::new());
    assert!(!sandbox.home().join("evil.txt").exists());
    assert_eq!(
        installations(&sandbox)["installations"],
        serde_json::json!([])
    );

    let out = add("demo");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !stderr.contains(secret) && !stderr.contains("p@$$w0rd"),
        "{stderr}"
    );
    assert!(stderr.contains("test-connect: ready"), "{stderr}");
    let sha = sha256_hex(&good);
    assert_eq!(
        files_under(&bundles),
        vec![sha.clone(), format!("{sha}.signature")]
    );
    assert!(stderr.contains("(unsigned) into"), "{stderr}");
    let unpacked = bundles.join(&sha);
    let mode = std::fs::metadata(unpacked.join("server/run.sh"))
        .expect("the unpacked script")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    let listed = installations(&sandbox);
    let stored = listed["installations"][0]["stored"]
        .as_array()
        .expect("stored values");
    assert!(
        stored.contains(&serde_json::json!({"name": "api_key", "location": "file"})),
        "{listed}"
    );
    let db = std::fs::read(sandbox.home().join("tether.db")).expect("the store");
    assert!(!String::from_utf8_lossy(&db).contains("p@$$w0rd"));

    // Runs by name with no --secret: the server checks API_KEY byte for byte.
    let out = sandbox
        .tether(&["test", "--mcp", "demo"])
        .env("TETHER_SECRET_STORE", "file")
        .output()
        .expect("running tether test");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("ready"), "{}", text(&out.stdout));

    // Removing the installation removes the bundle no other installation runs.
    let uid = listed["installations"][0]["uid"]
        .as_str()
        .expect("a uid")
        .to_owned();
    let out = sandbox.run(&["remove", &uid]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!(
            "removed the unpacked bundle {}",
            unpacked.display()
        )),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(files_under(&bundles), Vec::<String>::new());
}

/// `cmd ARGS` in `dir` (split on spaces), which must succeed.
fn run_in(dir: &std::path::Path, program: &std::path::Path, args: &str) {
    let out = Command::new(program)
        .args(args.split(' '))
        .current_dir(dir)
        .env("HOME", dir)
        .output()
        .expect("running a setup command");
    assert!(out.status.success(), "{args}: {}", text(&out.stderr));
}

/// `tether add` of mcpb bundles packed and signed by the real `mcpb` CLI: with a certificate a
/// test CA issued (trusted through `SSL_CERT_FILE`, as the system's store would), self-signed,
/// changed after signing, and unsigned; `--require-signature` and `--allow-self-signed` decide.
#[test]
fn add_checks_an_mcpb_bundles_signature() {
    let Some(mcpb) = tether_testkit::npm_bin("mcpb") else {
        return;
    };
    let openssl = std::path::Path::new("openssl");
    if Command::new(openssl).arg("version").output().is_err() {
        return;
    }
    let sandbox = Sandbox::new();
    let work = sandbox.path("signing");
    std::fs::create_dir_all(work.join("src")).expect("mkdir");
    let manifest = serde_json::json!({
        "manifest_version": "0.3", "name": "signed", "version": "1.0.0", "description": "x",
        "author": {"name": "t"},
        "server": {"type": "node", "entry_point": "server.js",
                   "mcp_config": {"command": "node", "args": ["${__dirname}/server.js"]}}
    });
    std::fs::write(work.join("src/manifest.json"), manifest.to_string()).expect("write");
    let server = format!(
        "require('child_process').spawn({}, [], {{stdio: 'inherit'}}).on('exit', c => process.exit(c));\n",
        serde_json::Value::from(tether_testkit::test_server_bin().display().to_string())
    );
    std::fs::write(work.join("src/server.js"), server).expect("write");
    run_in(&work, &mcpb, "pack src unsigned.mcpb");
    run_in(
        &work,
        openssl,
        "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 -subj /CN=TetherTestCA -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign",
    );
    run_in(
        &work,
        openssl,
        "req -newkey rsa:2048 -nodes -keyout leaf.key -out leaf.csr -subj /CN=ExamplePublisher",
    );
    std::fs::write(
        work.join("leaf.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning\n",
    )
    .expect("write");
    run_in(
        &work,
        openssl,
        "x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem -days 30 -extfile leaf.ext",
    );
    let unsigned = std::fs::read(work.join("unsigned.mcpb")).expect("read");
    std::fs::write(work.join("signed.mcpb"), &unsigned).expect("write");
    run_in(
        &work,
        &mcpb,
        "sign signed.mcpb --cert leaf.pem --key leaf.key",
    );
    std::fs::write(work.join("self.mcpb"), &unsigned).expect("write");
    run_in(&work, &mcpb, "sign self.mcpb --self-signed");
    let mut tampered = std::fs::read(work.join("signed.mcpb")).expect("read");
    tampered[unsigned.len() / 2] ^= 1;
    std::fs::write(work.join("tampered.mcpb"), &tampered).expect("write");

    let mut args = Vec::new();
    let mut entries = Vec::new();
    for name in ["unsigned", "signed", "self", "tampered"] {
        let bytes = std::fs::read(work.join(format!("{name}.mcpb"))).expect("read");
        let url = format!("{{base}}/_files/{name}.mcpb");
        entries.push(bundle_entry(&sandbox, name, &url, &sha256_hex(&bytes)));
        args.push("--file".to_owned());
        args.push(format!(
            "{name}.mcpb={}",
            work.join(format!("{name}.mcpb")).display()
        ));
    }
    for entry in &entries {
        args.extend(["--entry".to_owned(), entry.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let registry = FixtureRegistry::start(&args);
    // A store that does not hold the test CA: its chain then reaches no trusted root.
    std::fs::write(work.join("none.pem"), "").expect("write");
    let trusting = std::cell::Cell::new("ca.pem");
    let add = |name: &str, flags: &[&str]| {
        let entry = format!("io.github.example/{name}");
        let mut all = vec!["add", entry.as_str(), "--yes", "--sandbox", "none"];
        all.extend_from_slice(flags);
        sandbox
            .tether(&all)
            .env("TETHER_REGISTRY_URL", &registry.url)
            .env("SSL_CERT_FILE", work.join(trusting.get()))
            .output()
            .expect("running tether add")
    };
    let refused = |name: &str, flags: &[&str], says: &str| {
        let out = add(name, flags);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(says), "{name}: {stderr}");
    };
    refused(
        "unsigned",
        &["--require-signature"],
        "the bundle is unsigned, and --require-signature",
    );
    refused(
        "tampered",
        &["--require-signature"],
        "signature does not verify (the bundle's bytes are not the bytes that were signed)",
    );
    refused(
        "self",
        &["--require-signature"],
        "install it only if you trust that certificate, with --allow-self-signed",
    );
    // Self-signed is refused without the flag even when signatures are not required.
    refused("self", &[], "self-signed by an unverified publisher");
    // A signature that does not verify is refused whatever the flags say.
    for flags in [&[][..], &["--allow-self-signed"]] {
        refused("tampered", flags, "tether never installs it");
    }
    // The CA-signed bundle where its CA is not trusted names no publisher and is refused by
    // default, as self-signed is (before it is installed: an unpacked bundle keeps its verdict).
    trusting.set("none.pem");
    refused(
        "signed",
        &[],
        "signed by a certificate this system does not trust (",
    );
    let out = add("signed", &[]);
    assert!(
        !text(&out.stderr).contains("signed by \"ExamplePublisher"),
        "{}",
        text(&out.stderr)
    );
    trusting.set("ca.pem");
    let installed = |name: &str, flags: &[&str], says: &str| {
        let out = add(name, flags);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{name}: {stderr}");
        assert!(stderr.contains(says), "{name}: {stderr}");
    };
    installed(
        "signed",
        &["--require-signature"],
        "(signed by \"ExamplePublisher\" (issued by \"TetherTestCA\", certificate SHA-256 ",
    );
    installed("self", &["--allow-self-signed"], "(self-signed by ");

    // The config's key asks for signatures as the flag does.
    std::fs::write(
        sandbox.home().join("config.toml"),
        "require_signed_bundles = true\n",
    )
    .expect("writing config.toml");
    refused(
        "unsigned",
        &[],
        "the bundle is unsigned, and --require-signature (or require_signed_bundles)",
    );
}
