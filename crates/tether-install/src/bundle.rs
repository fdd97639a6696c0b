//! MCP bundles (`mcpb`): download, verify the registry's `fileSha256`, and unpack into
//! `$TETHER_HOME/bundles/<sha256>/` (content-addressed: the same bundle is unpacked once, and
//! a directory there always holds exactly the bytes that were verified).
//!
//! Unpacking refuses what could write outside the directory or surprise the user: entry names
//! whose `..` climb out of it (zip-slip; an absolute name is taken as relative to it, as the
//! `zip` crate's `enclosed_name` does), symbolic links, more than [`MAX_ENTRIES`]
//! entries, more than [`MAX_UNPACKED`] bytes; the download is cut at [`MAX_DOWNLOAD`]. It
//! goes into a temporary directory beside the final one, which is renamed into place only
//! when everything is written, so a failure or a kill leaves no half-unpacked bundle behind
//! under a name that would be reused (a killed `add` leaves a `.download-*` or `.unpack-*`
//! entry, swept by the next fetch once it is an hour old).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use tether_registry::mcpb::Manifest;

use rustls_pki_types::UnixTime;

use crate::{InstallError, Progress, signature};

/// The largest bundle downloaded, in bytes.
pub const MAX_DOWNLOAD: u64 = 256 * 1024 * 1024;
/// The most bytes a bundle may unpack to.
pub const MAX_UNPACKED: u64 = 1024 * 1024 * 1024;
/// The most entries a bundle may hold.
pub const MAX_ENTRIES: usize = 50_000;

/// How old a leftover download or unpack directory must be before it is swept.
const STALE_AFTER: Duration = Duration::from_secs(3600);

/// An unpacked, verified bundle.
#[derive(Debug)]
pub struct Bundle {
    /// Where it is unpacked.
    pub dir: PathBuf,
    /// Its `manifest.json`.
    pub manifest: Manifest,
    /// Whether this process unpacked it (so a failed install removes it again).
    pub created: bool,
    /// What its signature said when it was downloaded (kept beside it for a reuse).
    pub signature: String,
}

impl Bundle {
    /// Removes the directory when this process created it (the install failed); a bundle that
    /// was already there stays. The error is for a warning: nothing depends on the removal.
    pub fn discard(&self) -> std::io::Result<()> {
        if self.created {
            remove_unpacked(&self.dir)?;
        }
        Ok(())
    }
}

/// Removes an unpacked bundle's directory and its kept signature verdict.
pub fn remove_unpacked(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(verdict_file(dir)) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    std::fs::remove_dir_all(dir)
}

/// `$TETHER_HOME/bundles`, for a data directory.
pub fn bundles_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("bundles")
}

/// Where a bundle's signature verdict is kept: `bundles/<sha256>.signature`, beside its
/// directory (a file inside would be the archive's to forge).
fn verdict_file(dir: &Path) -> PathBuf {
    dir.with_extension("signature")
}

/// The bundle at `url` whose SHA-256 must be `sha256`, unpacked under `data_dir`'s
/// [`bundles_dir`] (reused without a download when that digest's directory is there), its
/// signature checked against `policy` ([`crate::signature`]): the verdict is a progress step.
pub async fn fetch(
    url: &str,
    sha256: Option<&str>,
    data_dir: &Path,
    progress: &dyn Progress,
    policy: signature::Policy,
) -> Result<Bundle, InstallError> {
    let expected = sha256
        .map(str::to_ascii_lowercase)
        .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| InstallError::BundleUnverifiable {
            url: url.to_owned(),
        })?;
    let parsed = reqwest::Url::parse(url).map_err(|_| InstallError::BundleNotUrl {
        url: url.to_owned(),
    })?;
    let loopback = matches!(parsed.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"));
    if parsed.scheme() != "https" && !(parsed.scheme() == "http" && loopback) {
        return Err(InstallError::BundleNotHttps {
            url: url.to_owned(),
        });
    }
    let root = bundles_dir(data_dir);
    let dir = root.join(&expected);
    if dir.join("manifest.json").is_file() {
        // Unpacked before: its verdict was kept (none: unpacked by a tether that kept none).
        let verdict = std::fs::read(verdict_file(&dir))
            .ok()
            .and_then(|bytes| signature::Verdict::from_json(&bytes))
            .unwrap_or(signature::Verdict::Unsigned);
        check_signature(url, &verdict, policy, progress)?;
        let manifest = read_manifest(&dir, url)?;
        return Ok(Bundle {
            dir,
            manifest,
            created: false,
            signature: verdict.to_string(),
        });
    }
    tether_sqlite::private_dir(&root)?;
    sweep_stale(&root);
    let mut download = tempfile::Builder::new()
        .prefix(".download-")
        .tempfile_in(&root)
        .map_err(InstallError::io(format!(
            "creating a file in {}",
            root.display()
        )))?;
    let actual = download_to(url, download.as_file_mut(), progress).await?;
    if actual != expected {
        return Err(InstallError::ChecksumMismatch {
            url: url.to_owned(),
            actual,
            expected,
        });
    }
    // The signature, checked on the verified bytes; the block is cut off before unpacking.
    let bytes = std::fs::read(download.path()).map_err(InstallError::io("reading the bundle"))?;
    let verdict = signature::verify(&bytes, &signature::system_roots(), UnixTime::now());
    check_signature(url, &verdict, policy, progress)?;
    if let Ok((content, Some(_))) = signature::split(&bytes) {
        download
            .as_file_mut()
            .set_len(content.len() as u64)
            .map_err(InstallError::io("cutting the signature off the bundle"))?;
    }
    drop(bytes);
    progress.step(&format!("unpacking the bundle into {}", dir.display()));
    let unpack_root = root.clone();
    let file = download
        .reopen()
        .map_err(InstallError::io("reopening the downloaded bundle"))?;
    let staged = tokio::task::spawn_blocking(move || unpack(file, &unpack_root))
        .await
        .map_err(InstallError::UnpackTask)??;
    let manifest = read_manifest(staged.path(), url)?;
    std::fs::write(verdict_file(&dir), verdict.to_json())
        .map_err(InstallError::io("keeping the bundle's signature verdict"))?;
    let staged = staged.keep();
    match std::fs::rename(&staged, &dir) {
        Ok(()) => Ok(Bundle {
            dir,
            manifest,
            created: true,
            signature: verdict.to_string(),
        }),
        // Another process unpacked the same bytes meanwhile: use its copy.
        Err(_) if dir.join("manifest.json").is_file() => {
            let _ = std::fs::remove_dir_all(&staged);
            Ok(Bundle {
                dir,
                manifest,
                created: false,
                signature: verdict.to_string(),
            })
        }
        Err(error) => {
            let _ = std::fs::remove_dir_all(&staged);
            Err(InstallError::BundleMove { dir, error })
        }
    }
}

/// Shows `verdict` as a progress step, and refuses it when `policy` does.
fn check_signature(
    url: &str,
    verdict: &signature::Verdict,
    policy: signature::Policy,
    progress: &dyn Progress,
) -> Result<(), InstallError> {
    progress.step(&format!("the bundle is {verdict}"));
    match policy.refusal(verdict) {
        Some(reason) => Err(InstallError::BundleSignature {
            url: url.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Removes what a killed fetch left in `root`: `.download-*` files and `.unpack-*`
/// directories not touched for an hour (a concurrent fetch keeps writing to its own).
fn sweep_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with(".download-") || name.starts_with(".unpack-")) {
            continue;
        }
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|modified| modified.elapsed().ok())
            .is_some_and(|age| age > STALE_AFTER);
        if stale {
            let path = entry.path();
            // Best effort: what cannot be removed now is tried again by the next fetch.
            let _ = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
    }
}

/// Downloads `url` into `file` (at most [`MAX_DOWNLOAD`] bytes); the SHA-256 in hex.
async fn download_to(
    url: &str,
    file: &mut std::fs::File,
    progress: &dyn Progress,
) -> Result<String, InstallError> {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(15))
        .read_timeout(Duration::from_secs(60))
        .user_agent(concat!("tether/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(InstallError::HttpClient)?;
    progress.step(&format!("downloading the bundle {url}"));
    let mut response = client
        .get(url)
        .send()
        .await
        .map_err(|e| InstallError::Download {
            url: url.to_owned(),
            reason: root_cause(&e),
        })?;
    if !response.status().is_success() {
        return Err(InstallError::Download {
            url: url.to_owned(),
            reason: format!("the server answered {}", response.status()),
        });
    }
    let mut hasher = Sha256::new();
    let mut received: u64 = 0;
    let writing = || InstallError::io("writing the downloaded bundle");
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| InstallError::DownloadBroken {
            url: url.to_owned(),
            reason: root_cause(&e),
        })?
    {
        received += chunk.len() as u64;
        if received > MAX_DOWNLOAD {
            return Err(InstallError::BundleTooLarge {
                url: url.to_owned(),
                mib: MAX_DOWNLOAD / 1024 / 1024,
            });
        }
        hasher.update(&chunk);
        file.write_all(&chunk).map_err(writing())?;
        progress.step(&format!(
            "downloading the bundle {url} ({:.1} MiB)",
            received as f64 / 1024.0 / 1024.0
        ));
    }
    file.flush().map_err(writing())?;
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The innermost error's words (reqwest wraps the cause).
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Unpacks the zip `file` into a new temporary directory under `root`.
fn unpack(file: std::fs::File, root: &Path) -> Result<tempfile::TempDir, InstallError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let staged = tempfile::Builder::new()
        .prefix(".unpack-")
        .tempdir_in(root)
        .map_err(InstallError::io(format!(
            "creating a directory in {}",
            root.display()
        )))?;
    if let Some(entry) = duplicate_entry(&file) {
        return Err(InstallError::DuplicateEntry { entry });
    }
    let mut archive = zip::ZipArchive::new(file).map_err(InstallError::NotZip)?;
    if archive.len() > MAX_ENTRIES {
        return Err(InstallError::TooManyEntries {
            count: archive.len(),
            max: MAX_ENTRIES,
        });
    }
    let creating = |path: &Path| InstallError::io(format!("creating {}", path.display()));
    let mut written: u64 = 0;
    for index in 0..archive.len() {
        let mut entry = archive
            .by_index(index)
            .map_err(|source| InstallError::Zip {
                doing: format!("reading entry {index} of the bundle"),
                source,
            })?;
        let raw = entry
            .name()
            .map(|name| name.into_owned())
            .map_err(|source| InstallError::Zip {
                doing: format!("reading the name of entry {index} of the bundle"),
                source,
            })?;
        let name = entry
            .enclosed_name()
            .ok_or_else(|| InstallError::OutsideBundle { entry: raw.clone() })?;
        if entry.is_symlink() {
            return Err(InstallError::Symlink { entry: raw });
        }
        let target = staged.path().join(&name);
        if entry.is_dir() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&target)
                .map_err(creating(&target))?;
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(creating(parent))?;
        }
        let executable = entry.unix_mode().is_some_and(|mode| mode & 0o111 != 0);
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if executable { 0o700 } else { 0o600 })
            .open(&target)
            .map_err(creating(&target))?;
        let left = MAX_UNPACKED - written;
        let copied = std::io::copy(&mut (&mut entry).take(left + 1), &mut out)
            .map_err(InstallError::io(format!("unpacking {raw:?}")))?;
        written += copied;
        if written > MAX_UNPACKED {
            return Err(InstallError::UnpackedTooLarge {
                mib: MAX_UNPACKED / 1024 / 1024,
            });
        }
    }
    Ok(staged)
}

fn read_manifest(dir: &Path, url: &str) -> Result<Manifest, InstallError> {
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path).map_err(|e| InstallError::ManifestUnreadable {
        url: url.to_owned(),
        reason: e.to_string(),
    })?;
    Manifest::parse(&text).map_err(|reason| InstallError::ManifestInvalid {
        url: url.to_owned(),
        reason,
    })
}

/// The first name the zip's central directory lists twice, if any. The zip crate keeps the
/// last entry of a name, other tools the first: what a reviewer unpacks would not be what
/// runs. Read from the end-of-central-directory record (the last 64 KiB + 22 bytes); an
/// archive without one is left to the zip crate to refuse.
fn duplicate_entry(file: &std::fs::File) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = file.try_clone().ok()?;
    let length = file.seek(SeekFrom::End(0)).ok()?;
    let tail_start = length.saturating_sub(65_557);
    file.seek(SeekFrom::Start(tail_start)).ok()?;
    let mut tail = Vec::new();
    Read::by_ref(&mut file)
        .take(65_557)
        .read_to_end(&mut tail)
        .ok()?;
    let end = tail.windows(4).rposition(|w| w == b"PK\x05\x06")?;
    let field = |at: usize, len: usize| -> Option<u64> {
        let bytes = tail.get(end + at..end + at + len)?;
        Some(bytes.iter().rev().fold(0, |n, b| (n << 8) | u64::from(*b)))
    };
    let (size, offset) = (field(12, 4)?, field(16, 4)?);
    file.seek(SeekFrom::Start(offset)).ok()?;
    let mut directory = Vec::new();
    Read::by_ref(&mut file)
        .take(size)
        .read_to_end(&mut directory)
        .ok()?;
    let mut seen = std::collections::HashSet::new();
    let mut at = 0usize;
    while directory.get(at..at + 4) == Some(b"PK\x01\x02") {
        let number = |offset: usize| -> Option<usize> {
            let bytes = directory.get(at + offset..at + offset + 2)?;
            Some(usize::from(u16::from_le_bytes([bytes[0], bytes[1]])))
        };
        let (name, extra, comment) = (number(28)?, number(30)?, number(32)?);
        let bytes = directory.get(at + 46..at + 46 + name)?;
        let text = String::from_utf8_lossy(bytes).into_owned();
        if !seen.insert(text.clone()) {
            return Some(text);
        }
        at += 46 + name + extra + comment;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Silent;
    use crate::signature::Policy;

    /// [`fetch`] accepting any signature, showing nothing.
    async fn fetch_any(
        url: &str,
        sha256: Option<&str>,
        home: &Path,
    ) -> Result<Bundle, InstallError> {
        fetch(url, sha256, home, &Silent, Policy::default()).await
    }

    fn zip_bytes(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (name, bytes) in entries {
            writer
                .start_file(*name, zip::write::SimpleFileOptions::default())
                .expect("a zip entry");
            writer.write_all(bytes).expect("writing a zip entry");
        }
        writer.finish().expect("finishing the zip").into_inner()
    }

    fn sha256_hex(bytes: &[u8]) -> String {
        Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    const MANIFEST: &str = r#"{"manifest_version": "0.3", "name": "demo", "version": "1.0.0",
        "author": {"name": "t"}, "server": {"type": "node", "entry_point": "index.js",
        "mcp_config": {"command": "node", "args": ["${__dirname}/index.js"]}}}"#;

    /// Serves `bytes` at `http://127.0.0.1:PORT/bundle.mcpb` until the test ends.
    async fn serve(bytes: Vec<u8>) -> String {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("a loopback port");
        let address = listener.local_addr().expect("its address");
        let app = axum::Router::new().route(
            "/bundle.mcpb",
            axum::routing::get(move || std::future::ready(bytes.clone())),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{address}/bundle.mcpb")
    }

    fn entries_under(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[tokio::test]
    async fn a_bundle_naming_an_entry_twice_is_refused() {
        let home = tempfile::tempdir().expect("a data directory");
        // Two entries of names of one length; the second renamed to the first in its local
        // header and in the central directory.
        let mut bytes = zip_bytes(&[
            ("manifest.json", MANIFEST.as_bytes()),
            ("server/a.py", b"print('reviewed')"),
            ("server/b.py", b"print('runs')"),
        ]);
        let mut at = 0;
        while let Some(found) = bytes[at..].windows(11).position(|w| w == b"server/b.py") {
            bytes[at + found + 7] = b'a';
            at += found + 11;
        }
        let digest = sha256_hex(&bytes);
        let url = serve(bytes).await;
        match fetch_any(&url, Some(&digest), home.path()).await {
            Err(InstallError::DuplicateEntry { entry }) => assert_eq!(entry, "server/a.py"),
            other => panic!("a duplicate entry was not refused: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_bundle_is_verified_unpacked_by_its_digest_and_reused() {
        let home = tempfile::tempdir().expect("a data directory");
        let bytes = zip_bytes(&[("manifest.json", MANIFEST.as_bytes()), ("index.js", b"//")]);
        let digest = sha256_hex(&bytes);
        let url = serve(bytes).await;
        let bundle = fetch_any(&url, Some(&digest.to_uppercase()), home.path())
            .await
            .expect("fetched");
        assert_eq!(bundle.dir, bundles_dir(home.path()).join(&digest));
        assert!(bundle.created);
        assert_eq!(bundle.manifest.name, "demo");
        assert!(bundle.dir.join("index.js").is_file());
        assert_eq!(
            entries_under(&bundles_dir(home.path())),
            vec![digest.clone(), format!("{digest}.signature")]
        );
        let again = fetch_any(&url, Some(&digest), home.path())
            .await
            .expect("reused");
        assert!(!again.created, "the same digest is not unpacked twice");
        again.discard().expect("nothing to remove");
        assert!(
            again.dir.is_dir(),
            "a bundle this process did not unpack stays"
        );
        bundle.discard().expect("removed");
        assert!(!bundle.dir.exists());
    }

    #[tokio::test]
    async fn bytes_that_are_not_the_registrys_are_refused_and_nothing_is_kept() {
        let home = tempfile::tempdir().expect("a data directory");
        let bytes = zip_bytes(&[("manifest.json", MANIFEST.as_bytes())]);
        let actual = sha256_hex(&bytes);
        let claimed = sha256_hex(b"other bytes");
        let url = serve(bytes).await;
        let error = fetch_any(&url, Some(&claimed), home.path())
            .await
            .expect_err("a mismatch");
        assert!(
            matches!(&error, InstallError::ChecksumMismatch { actual: a, expected: e, .. } if *a == actual && *e == claimed),
            "{error}"
        );
        assert_eq!(
            error.to_string(),
            format!(
                "the bundle downloaded from {url} has SHA-256 {actual}, but the registry says {claimed}; nothing was installed"
            )
        );
        assert_eq!(
            entries_under(&bundles_dir(home.path())),
            Vec::<String>::new()
        );
    }

    #[tokio::test]
    async fn an_entry_that_climbs_out_is_refused_and_nothing_is_written() {
        let home = tempfile::tempdir().expect("a data directory");
        for name in ["../evil.txt", "a/../../evil.txt", "a/b/../../../evil.txt"] {
            let bytes = zip_bytes(&[("manifest.json", MANIFEST.as_bytes()), (name, b"outside")]);
            let url = serve(bytes.clone()).await;
            let error = fetch_any(&url, Some(&sha256_hex(&bytes)), home.path())
                .await
                .expect_err(name);
            assert!(
                matches!(&error, InstallError::OutsideBundle { entry } if entry == name),
                "{name}: {error}"
            );
            assert_eq!(
                entries_under(&bundles_dir(home.path())),
                Vec::<String>::new(),
                "{name}"
            );
        }
        assert!(!home.path().join("evil.txt").exists());
    }

    #[tokio::test]
    async fn an_absolute_entry_name_lands_inside_the_bundle() {
        let home = tempfile::tempdir().expect("a data directory");
        let outside = home.path().join("absolute-evil.txt");
        let name = outside.to_string_lossy().into_owned();
        let bytes = zip_bytes(&[("manifest.json", MANIFEST.as_bytes()), (&name, b"inside")]);
        let url = serve(bytes.clone()).await;
        let bundle = fetch_any(&url, Some(&sha256_hex(&bytes)), home.path())
            .await
            .expect("fetched");
        assert!(!outside.exists(), "written outside the bundle");
        let inside = bundle.dir.join(name.trim_start_matches('/'));
        assert_eq!(
            std::fs::read(&inside).expect("inside the bundle"),
            b"inside"
        );
    }

    #[tokio::test]
    async fn only_verifiable_https_bundles_are_fetched() {
        let home = tempfile::tempdir().expect("a data directory");
        let digest = "a".repeat(64);
        let cases = [
            ("http://bundles.example/b.mcpb", Some(digest.as_str())),
            ("https://bundles.example/b.mcpb", Some("not-a-sha")),
            ("https://bundles.example/b.mcpb", None),
            ("not a url", Some(digest.as_str())),
        ];
        for (url, sha) in cases {
            let error = fetch_any(url, sha, home.path()).await.expect_err("refused");
            assert!(error.is_bad_input(), "{url}: {error}");
        }
        assert!(
            !bundles_dir(home.path()).exists(),
            "refused before any write"
        );
    }
}
