//! The other side of the page: a value POSTed to `/secret/NONCE` as its own form would
//! (`tether secrets submit`), and where the running setup servers announce their pages.
//!
//! A running setup server announces its page's address in `$TETHER_HOME/setup-mcp/PID`
//! (mode 0600, directory 0700, removed when the server ends), so a submission that has only a
//! nonce can find it. The file holds the address only; nonces and values stay in the server's
//! memory.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::body::Bytes;
use tether_config::SecretValue;
use zeroize::Zeroizing;

use crate::SetupError;

/// How long a submission waits for the page's answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// The directory under a data directory where running setup servers announce their page.
pub fn pages_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("setup-mcp")
}

/// A page's announcement; the file is removed when this is dropped.
#[derive(Debug)]
pub struct Announcement(PathBuf);

impl Announcement {
    /// Announces the page at `address` for this process under `data_dir`.
    pub fn write(data_dir: &Path, address: SocketAddr) -> Result<Self, SetupError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = pages_dir(data_dir);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(SetupError::io(format!("creating {}", dir.display())))?;
        let path = dir.join(std::process::id().to_string());
        let writing = || SetupError::io(format!("writing {}", path.display()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(writing())?;
        writeln!(file, "{address}").map_err(writing())?;
        Ok(Self(path))
    }
}

impl Drop for Announcement {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The page addresses (`127.0.0.1:PORT`) the running setup servers of `data_dir` announce.
pub fn announced(data_dir: &Path) -> Vec<String> {
    let mut addresses = Vec::new();
    if let Ok(entries) = std::fs::read_dir(pages_dir(data_dir)) {
        for entry in entries.flatten() {
            if let Ok(text) = std::fs::read_to_string(entry.path()) {
                addresses.push(text.trim().to_owned());
            }
        }
    }
    addresses
}

/// Percent-encodes `text` for a form body (everything but unreserved characters).
fn form_encode(text: &str) -> Zeroizing<Vec<u8>> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Zeroizing::new(Vec::with_capacity(text.len() * 3));
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte);
        } else {
            out.extend([
                b'%',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0x0f)],
            ]);
        }
    }
    out
}

/// POSTs `value` to `http://address/secret/nonce` as the page's own form would (its Host, its
/// Origin, a form body); the status the page answered. The body is held in a buffer that is
/// zeroized once the request is done; no proxy, no redirect is followed.
pub async fn post(address: &str, nonce: &str, value: &SecretValue) -> Result<u16, SetupError> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(ANSWER_WITHIN)
        .build()
        .map_err(SetupError::Post)?;
    let mut body = Zeroizing::new(b"value=".to_vec());
    body.extend_from_slice(&form_encode(value.expose()));
    let response = client
        .post(format!("http://{address}/secret/{nonce}"))
        .header(reqwest::header::ORIGIN, format!("http://{address}"))
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(Bytes::from_owner(body))
        .send()
        .await
        .map_err(SetupError::Post)?;
    Ok(response.status().as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_encoding_keeps_unreserved_characters_only() {
        assert_eq!(
            form_encode("a b&c=%ü-._~").as_slice(),
            b"a%20b%26c%3D%25%C3%BC-._~"
        );
    }

    #[test]
    fn an_announcement_lives_as_long_as_its_server() {
        let home = tempfile::tempdir().expect("a data directory");
        assert!(announced(home.path()).is_empty());
        let address: SocketAddr = "127.0.0.1:4242".parse().expect("an address");
        let announcement = Announcement::write(home.path(), address).expect("announced");
        assert_eq!(announced(home.path()), vec!["127.0.0.1:4242".to_owned()]);
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path| {
            std::fs::metadata(path)
                .expect("metadata")
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(&pages_dir(home.path())), 0o700);
        assert_eq!(mode(&announcement.0), 0o600);
        drop(announcement);
        assert!(announced(home.path()).is_empty());
    }
}
