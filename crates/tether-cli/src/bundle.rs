//! MCP bundles (`mcpb`) for `tether add`: download, verify the registry's `fileSha256`, and
//! unpack into `$TETHER_HOME/bundles/<sha256>/` (content-addressed: the same bundle is
//! unpacked once, and a directory there always holds exactly the bytes that were verified).
//!
//! Unpacking refuses what could write outside the directory or surprise the user: entry names
//! that are absolute or hold `..` (zip-slip), symbolic links, more than [`MAX_ENTRIES`]
//! entries, more than [`MAX_UNPACKED`] bytes; the download is cut at [`MAX_DOWNLOAD`]. It
//! goes into a temporary directory beside the final one, which is renamed into place only
//! when everything is written, so a failure or a kill leaves no half-unpacked bundle behind
//! under a name that would be reused (a killed `add` leaves a `.download-*` or `.unpack-*`
//! entry, swept by the next `add` once it is an hour old).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use sha2::{Digest as _, Sha256};
use tether_registry::mcpb::Manifest;

use crate::exit::UsageError;
use crate::output::Progress;

/// The largest bundle downloaded.
const MAX_DOWNLOAD: u64 = 256 * 1024 * 1024;
/// The most bytes a bundle may unpack to.
const MAX_UNPACKED: u64 = 1024 * 1024 * 1024;
/// The most entries a bundle may hold.
const MAX_ENTRIES: usize = 50_000;

/// How old a leftover download or unpack directory must be before it is swept.
const STALE_AFTER: Duration = Duration::from_secs(3600);

/// An unpacked, verified bundle.
pub struct Bundle {
    /// Where it is unpacked.
    pub dir: PathBuf,
    /// Its `manifest.json`.
    pub manifest: Manifest,
    /// Whether this process unpacked it (so a failed `add` removes it again).
    pub created: bool,
}

impl Bundle {
    /// Removes the directory when this process created it (a failed test-connect).
    pub fn discard(&self) {
        if self.created
            && let Err(error) = std::fs::remove_dir_all(&self.dir)
        {
            eprintln!(
                "warning: could not remove the unpacked bundle {}: {error}",
                self.dir.display()
            );
        }
    }
}

/// `$TETHER_HOME/bundles`.
pub fn bundles_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("bundles")
}

/// The bundle at `url` whose SHA-256 must be `sha256`, unpacked under `data_dir`.
pub async fn fetch(
    url: &str,
    sha256: Option<&str>,
    data_dir: &Path,
    progress: &Progress,
) -> anyhow::Result<Bundle> {
    let expected = sha256
        .map(str::to_ascii_lowercase)
        .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            UsageError::new(format!(
                "the registry gives no valid fileSha256 for the bundle {url}; tether installs only bundles it can verify"
            ))
        })?;
    let parsed = reqwest::Url::parse(url)
        .map_err(|_| UsageError::new(format!("the bundle's address {url:?} is not a URL")))?;
    let loopback = matches!(parsed.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"));
    if parsed.scheme() != "https" && !(parsed.scheme() == "http" && loopback) {
        return Err(UsageError::new(format!(
            "the bundle's address {url} is not https; tether downloads bundles over https only"
        ))
        .into());
    }
    let root = bundles_dir(data_dir);
    let dir = root.join(&expected);
    if dir.join("manifest.json").is_file() {
        let manifest = read_manifest(&dir, url)?;
        return Ok(Bundle {
            dir,
            manifest,
            created: false,
        });
    }
    tether_sqlite::private_dir(&root)?;
    sweep_stale(&root);
    let mut download = tempfile::Builder::new()
        .prefix(".download-")
        .tempfile_in(&root)
        .with_context(|| format!("creating a file in {}", root.display()))?;
    let actual = download_to(url, download.as_file_mut(), progress).await?;
    if actual != expected {
        return Err(anyhow::anyhow!(
            "the bundle downloaded from {url} has SHA-256 {actual}, but the registry says {expected}; nothing was installed"
        ));
    }
    progress.step(&format!("unpacking the bundle into {}", dir.display()));
    let unpack_root = root.clone();
    let file = download
        .reopen()
        .context("reopening the downloaded bundle")?;
    let staged = tokio::task::spawn_blocking(move || unpack(file, &unpack_root))
        .await
        .context("unpacking the bundle")??;
    let manifest = read_manifest(staged.path(), url)?;
    let staged = staged.keep();
    match std::fs::rename(&staged, &dir) {
        Ok(()) => Ok(Bundle {
            dir,
            manifest,
            created: true,
        }),
        // Another process unpacked the same bytes meanwhile: use its copy.
        Err(_) if dir.join("manifest.json").is_file() => {
            let _ = std::fs::remove_dir_all(&staged);
            Ok(Bundle {
                dir,
                manifest,
                created: false,
            })
        }
        Err(error) => {
            let _ = std::fs::remove_dir_all(&staged);
            Err(anyhow::anyhow!(
                "cannot move the unpacked bundle to {}: {error}",
                dir.display()
            ))
        }
    }
}

/// Removes what a killed `add` left in `root`: `.download-*` files and `.unpack-*`
/// directories not touched for an hour (a concurrent `add` keeps writing to its own).
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
            // Best effort: what cannot be removed now is tried again by the next add.
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
    progress: &Progress,
) -> anyhow::Result<String> {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(15))
        .read_timeout(Duration::from_secs(60))
        .user_agent(concat!("tether/", env!("CARGO_PKG_VERSION")))
        .build()
        .context("building the HTTP client")?;
    progress.step(&format!("downloading the bundle {url}"));
    let mut response = client
        .get(url)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("cannot download the bundle {url}: {}", root_cause(&e)))?;
    if !response.status().is_success() {
        return Err(anyhow::anyhow!(
            "cannot download the bundle {url}: the server answered {}",
            response.status()
        ));
    }
    let mut hasher = Sha256::new();
    let mut received: u64 = 0;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| anyhow::anyhow!("downloading the bundle {url}: {}", root_cause(&e)))?
    {
        received += chunk.len() as u64;
        if received > MAX_DOWNLOAD {
            return Err(anyhow::anyhow!(
                "the bundle {url} is larger than {} MiB; not installed",
                MAX_DOWNLOAD / 1024 / 1024
            ));
        }
        hasher.update(&chunk);
        file.write_all(&chunk)
            .context("writing the downloaded bundle")?;
        progress.step(&format!(
            "downloading the bundle {url} ({:.1} MiB)",
            received as f64 / 1024.0 / 1024.0
        ));
    }
    file.flush().context("writing the downloaded bundle")?;
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
fn unpack(file: std::fs::File, root: &Path) -> anyhow::Result<tempfile::TempDir> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let staged = tempfile::Builder::new()
        .prefix(".unpack-")
        .tempdir_in(root)
        .with_context(|| format!("creating a directory in {}", root.display()))?;
    let mut archive = zip::ZipArchive::new(file).context("the bundle is not a zip archive")?;
    if archive.len() > MAX_ENTRIES {
        anyhow::bail!(
            "the bundle holds {} entries (at most {MAX_ENTRIES}); not installed",
            archive.len()
        );
    }
    let mut written: u64 = 0;
    for index in 0..archive.len() {
        let mut entry = archive
            .by_index(index)
            .with_context(|| format!("reading entry {index} of the bundle"))?;
        let raw = entry
            .name()
            .map(|name| name.into_owned())
            .with_context(|| format!("reading the name of entry {index} of the bundle"))?;
        let name = entry.enclosed_name().ok_or_else(|| {
            anyhow::anyhow!("the bundle's entry {raw:?} points outside the bundle; not installed")
        })?;
        if entry.is_symlink() {
            anyhow::bail!("the bundle's entry {raw:?} is a symbolic link; not installed");
        }
        let target = staged.path().join(&name);
        if entry.is_dir() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&target)
                .with_context(|| format!("creating {}", target.display()))?;
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let executable = entry.unix_mode().is_some_and(|mode| mode & 0o111 != 0);
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if executable { 0o700 } else { 0o600 })
            .open(&target)
            .with_context(|| format!("creating {}", target.display()))?;
        let left = MAX_UNPACKED - written;
        let copied = std::io::copy(&mut (&mut entry).take(left + 1), &mut out)
            .with_context(|| format!("unpacking {raw:?}"))?;
        written += copied;
        if written > MAX_UNPACKED {
            anyhow::bail!(
                "the bundle unpacks to more than {} MiB; not installed",
                MAX_UNPACKED / 1024 / 1024
            );
        }
    }
    Ok(staged)
}

fn read_manifest(dir: &Path, url: &str) -> anyhow::Result<Manifest> {
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("the bundle {url} has no readable manifest.json: {e}"))?;
    Manifest::parse(&text)
        .map_err(|e| anyhow::anyhow!("the bundle {url} has an invalid manifest.json: {e}"))
}
