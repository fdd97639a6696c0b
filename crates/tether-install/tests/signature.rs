//! mcpb signatures checked against bundles packed and signed by the real `mcpb` CLI
//! (`@anthropic-ai/mcpb`, pinned in `tether-testkit/npm-packages.txt`), with certificates made
//! by `openssl`: one issued by a test CA for code signing, one `mcpb sign --self-signed` made,
//! a signed bundle changed after signing, and an unsigned one.

#![allow(
    clippy::expect_used,
    reason = "a test binary: helpers outside #[test] functions panic on setup failure too"
)]

use std::path::Path;
use std::process::Command;

use rustls_pki_types::{CertificateDer, UnixTime};
use tether_install::signature::{Verdict, verify};
use tether_testkit::npm_bin;

fn run(program: &Path, args: &[&str], dir: &Path) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .output()
        .expect("running a setup command");
    assert!(
        out.status.success(),
        "{} {args:?}: {}{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn openssl(args: &str, dir: &Path) {
    let args: Vec<&str> = args.split(' ').collect();
    run(Path::new("openssl"), &args, dir);
}

#[test]
fn bundles_signed_by_the_real_mcpb_verify_as_mcpb_verify_would() {
    let Some(mcpb) = npm_bin("mcpb") else {
        return;
    };
    if Command::new("openssl").arg("version").output().is_err() {
        tether_testkit::missing("openssl", "apt-get install openssl");
        return;
    }
    let tmp = tempfile::tempdir().expect("a temp dir");
    let dir = tmp.path();
    std::fs::create_dir(dir.join("src")).expect("mkdir");
    std::fs::write(
        dir.join("src/manifest.json"),
        r#"{"manifest_version": "0.3", "name": "sig-test", "version": "1.0.0", "description": "x",
            "author": {"name": "t"},
            "server": {"type": "node", "entry_point": "server.js",
                       "mcp_config": {"command": "node", "args": ["${__dirname}/server.js"]}}}"#,
    )
    .expect("write");
    std::fs::write(dir.join("src/server.js"), "process.exit(0)\n").expect("write");
    run(&mcpb, &["pack", "src", "unsigned.mcpb"], dir);

    // A test CA, and a code-signing certificate it issued (subjects without spaces: the
    // arguments are split on spaces).
    openssl(
        "req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 \
         -subj /CN=TetherTestCA -addext basicConstraints=critical,CA:TRUE \
         -addext keyUsage=critical,keyCertSign,cRLSign",
        dir,
    );
    openssl(
        "req -newkey rsa:2048 -nodes -keyout leaf.key -out leaf.csr -subj /CN=ExamplePublisher",
        dir,
    );
    std::fs::write(
        dir.join("leaf.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning\n",
    )
    .expect("write");
    openssl(
        "x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem \
         -days 30 -extfile leaf.ext",
        dir,
    );
    openssl("x509 -in ca.pem -outform DER -out ca.der", dir);

    let unsigned = std::fs::read(dir.join("unsigned.mcpb")).expect("read");
    std::fs::write(dir.join("ca-signed.mcpb"), &unsigned).expect("write");
    run(
        &mcpb,
        &[
            "sign",
            "ca-signed.mcpb",
            "--cert",
            "leaf.pem",
            "--key",
            "leaf.key",
        ],
        dir,
    );
    std::fs::write(dir.join("self.mcpb"), &unsigned).expect("write");
    run(&mcpb, &["sign", "self.mcpb", "--self-signed"], dir);

    let ca_der = CertificateDer::from(std::fs::read(dir.join("ca.der")).expect("read"));
    let ca = webpki::anchor_from_trusted_cert(&ca_der).expect("the CA as a trust anchor");
    let roots = [ca];
    let now = UnixTime::now();
    let read = |name: &str| std::fs::read(dir.join(name)).expect("read");

    let signed = read("ca-signed.mcpb");
    assert!(signed.len() > unsigned.len() && signed.starts_with(&unsigned));
    match verify(&signed, &roots, now) {
        Verdict::Signed(signer) => {
            assert_eq!(signer.publisher, "ExamplePublisher");
            assert_eq!(signer.issuer, "TetherTestCA");
            assert_eq!(signer.fingerprint.len(), 64);
        }
        other => panic!("a CA-signed bundle: {other:?}"),
    }
    // The same bundle where the CA is not trusted.
    let untrusted = verify(&signed, &[], now);
    assert!(matches!(untrusted, Verdict::Untrusted(..)), "{untrusted:?}");
    // Self-signed, shown as such whatever the roots.
    let self_signed = verify(&read("self.mcpb"), &roots, now);
    assert!(
        matches!(self_signed, Verdict::SelfSigned(_)),
        "{self_signed:?}"
    );
    // One byte of the archive changed after signing.
    let mut tampered = signed.clone();
    tampered[unsigned.len() / 2] ^= 0x01;
    assert_eq!(
        verify(&tampered, &roots, now),
        Verdict::Invalid("the bundle's bytes are not the bytes that were signed".to_owned())
    );
    // A byte of the signature itself changed: refused too.
    let mut bad_signature = signed.clone();
    let at = signed.len() - b"MCPB_SIG_END".len() - 10;
    bad_signature[at] ^= 0x01;
    let bad = verify(&bad_signature, &roots, now);
    assert!(matches!(bad, Verdict::Invalid(_)), "{bad:?}");
    assert_eq!(verify(&unsigned, &roots, now), Verdict::Unsigned);
}
