//! The other side of the page: a value POSTed to `/secret/NONCE` as its own form would
//! (`tether secrets submit`), and where the running setup servers announce their pages.
//!
//! A running setup server announces its page in `$TETHER_HOME/setup-mcp/PID` (mode 0600,
//! directory 0700, removed when the server ends): the page's loopback address and a random
//! [`AnnouncementKey`]. A submission goes only to a page announced there and verified
//! ([`announced`], [`post`]): the directory and the file are this user's and private, the
//! announced process is alive, and the listener at the address proves it holds the key (it
//! answers a fresh challenge at [`PROOF_PATH`] with a digest only the key gives) before any
//! byte of the value is sent. A stale file of a dead server, a listener of another user on a
//! reused port, an address typed by hand: none of them gets the value. Nonces and values stay
//! in the server's memory.

use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use sha2::{Digest as _, Sha256};
use tether_config::SecretValue;
use tether_http::token::NoRandomness;
use zeroize::Zeroizing;

use crate::SetupError;

/// How long a submission waits for the page's answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// Where a page answers `?challenge=HEX` with its proof of the announcement's key.
pub const PROOF_PATH: &str = "/announce/proof";

/// The directory under a data directory where running setup servers announce their page.
pub fn pages_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("setup-mcp")
}

/// The secret an announcement file shares with the page it announces (256 random bits): only
/// a reader of the file (this user) and the page know it. Never printed.
#[derive(Clone)]
pub struct AnnouncementKey(Arc<SecretValue>);

impl std::fmt::Debug for AnnouncementKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AnnouncementKey(***)")
    }
}

impl AnnouncementKey {
    /// A fresh key.
    pub fn generate() -> Result<Self, NoRandomness> {
        tether_http::token::generate().map(|key| Self(Arc::new(key)))
    }

    /// The proof for `challenge`: SHA-256 over a domain tag, the key and the challenge, as
    /// hex. It tells nothing of the key, and a fresh challenge makes an old answer useless.
    pub fn proof(&self, challenge: &str) -> String {
        let mut digest = Sha256::new();
        digest.update(b"tether setup-mcp page proof\0");
        digest.update(self.0.expose().as_bytes());
        digest.update(b"\0");
        digest.update(challenge.as_bytes());
        digest
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }
}

/// Whether `challenge` is what a submission sends: 32 hex digits.
pub fn is_challenge(challenge: &str) -> bool {
    challenge.len() == 32 && challenge.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A page's announcement; the file is removed when this is dropped.
#[derive(Debug)]
pub struct Announcement(PathBuf);

impl Announcement {
    /// Announces the page at `address`, holding `key`, for this process under `data_dir`.
    pub fn write(
        data_dir: &Path,
        address: SocketAddr,
        key: &AnnouncementKey,
    ) -> Result<Self, SetupError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = pages_dir(data_dir);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(SetupError::io(format!("creating {}", dir.display())))?;
        let path = dir.join(std::process::id().to_string());
        let writing = || SetupError::io(format!("writing {}", path.display()));
        // A file left by an earlier process of the same pid is replaced, never followed.
        match std::fs::remove_file(&path) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                return Err(writing()(error));
            }
            _ => {}
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(writing())?;
        let mut text = Zeroizing::new(format!("{address}\n"));
        text.push_str(key.0.expose());
        text.push('\n');
        file.write_all(text.as_bytes()).map_err(writing())?;
        Ok(Self(path))
    }
}

impl Drop for Announcement {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A page a running setup server of this user announces, read from its file and checked
/// (owner, mode, a live process); [`post`] still makes it prove the key.
#[derive(Debug, Clone)]
pub struct Announced {
    /// The announcing process.
    pub pid: u32,
    /// The page's loopback address.
    pub address: SocketAddr,
    key: AnnouncementKey,
}

/// Whether `meta` is this user's and neither group nor others may read or write it.
fn private(meta: &std::fs::Metadata, me: u32) -> bool {
    meta.uid() == me && meta.mode() & 0o077 == 0
}

/// Whether the process `pid` is alive and this user's (`kill(pid, 0)`: `EPERM` is another
/// user's process).
fn alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    raw > 0 && nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None).is_ok()
}

/// The pages the running setup servers of `data_dir` announce, each checked: the directory is
/// a real directory of this user's that no one else may enter, the file a regular file of this
/// user's that no one else may read, named by a live process of this user's, holding a
/// loopback address and a key. A file of a dead process is stale: removed. Anything else is
/// skipped (logged at debug, naming the path).
pub fn announced(data_dir: &Path) -> Vec<Announced> {
    let me = nix::unistd::geteuid().as_raw();
    let dir = pages_dir(data_dir);
    let Ok(dir_meta) = std::fs::symlink_metadata(&dir) else {
        return Vec::new();
    };
    if !dir_meta.is_dir() || !private(&dir_meta, me) {
        tracing::warn!(
            "{} is not a private directory of this user (a symlink, another owner, or open to others); no page announced there is used",
            dir.display()
        );
        return Vec::new();
    }
    let mut pages = Vec::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let skip = |why: &str| tracing::debug!("skipping {}: {why}", path.display());
        let Some(pid) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u32>().ok())
        else {
            skip("not named by a process id");
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_file() || !private(&meta, me) {
            skip("not a private regular file of this user");
            continue;
        }
        if !alive(pid) {
            skip("its process is gone (a stale announcement; removed)");
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path).map(Zeroizing::new) else {
            continue;
        };
        let mut lines = text.lines();
        let address = lines
            .next()
            .and_then(|line| line.trim().parse::<SocketAddr>().ok());
        let key = lines.next().map(str::trim).filter(|key| key.len() == 64);
        match (address, key) {
            (Some(address), Some(key)) if address.ip().is_loopback() => pages.push(Announced {
                pid,
                address,
                key: AnnouncementKey(Arc::new(SecretValue::new(key.to_owned()))),
            }),
            _ => skip("not an announcement (a loopback address and a key)"),
        }
    }
    pages.sort_by_key(|page| page.pid);
    pages
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

/// Asks the page of `page` to prove the announcement's key, and only when it does, POSTs
/// `value` to `http://address/secret/nonce` as the page's own form would (its Host, its
/// Origin, a form body): the status the page answered. The body is held in a buffer that is
/// zeroized once the request is done; no proxy, no redirect is followed.
pub async fn post(page: &Announced, nonce: &str, value: &SecretValue) -> Result<u16, SetupError> {
    let address = page.address;
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(ANSWER_WITHIN)
        .build()
        .map_err(SetupError::Post)?;
    let challenge = tether_http::token::random_hex(16).map_err(|e| SetupError::Unproven {
        address,
        why: e.to_string(),
    })?;
    let answer = client
        .get(format!(
            "http://{address}{PROOF_PATH}?challenge={challenge}"
        ))
        .send()
        .await
        .map_err(SetupError::Post)?;
    let unproven = |why: &str| SetupError::Unproven {
        address,
        why: why.to_owned(),
    };
    if answer.status() != reqwest::StatusCode::OK {
        return Err(unproven("it did not answer the challenge"));
    }
    let proof = answer.text().await.map_err(SetupError::Post)?;
    if !tether_http::token::constant_time_eq(
        proof.trim().as_bytes(),
        page.key.proof(&challenge).as_bytes(),
    ) {
        return Err(unproven("its answer does not prove the announcement's key"));
    }
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

    fn addresses(data_dir: &Path) -> Vec<String> {
        announced(data_dir)
            .iter()
            .map(|page| page.address.to_string())
            .collect()
    }

    #[test]
    fn an_announcement_lives_as_long_as_its_server() {
        let home = tempfile::tempdir().expect("a data directory");
        assert!(announced(home.path()).is_empty());
        let address: SocketAddr = "127.0.0.1:4242".parse().expect("an address");
        let key = AnnouncementKey::generate().expect("a key");
        let announcement = Announcement::write(home.path(), address, &key).expect("announced");
        assert_eq!(addresses(home.path()), vec!["127.0.0.1:4242".to_owned()]);
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

    #[test]
    fn only_private_files_of_live_processes_of_this_user_are_pages() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().expect("a data directory");
        let key = AnnouncementKey::generate().expect("a key");
        let address: SocketAddr = "127.0.0.1:4242".parse().expect("an address");
        let _own = Announcement::write(home.path(), address, &key).expect("announced");
        let dir = pages_dir(home.path());
        let line = format!("127.0.0.1:4343\n{}\n", "a".repeat(64));
        // A dead process (pid_max is below 2^22 on Linux): stale, removed.
        let stale = dir.join("4194303");
        std::fs::write(&stale, &line).expect("a stale file");
        std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o600)).expect("0600");
        // A file others may read, though its process (this one's parent) lives.
        let open = dir.join(std::os::unix::process::parent_id().to_string());
        std::fs::write(&open, &line).expect("an open file");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).expect("0644");
        assert_eq!(addresses(home.path()), vec!["127.0.0.1:4242".to_owned()]);
        assert!(!stale.exists(), "the stale announcement is removed");
        // A directory others may enter: nothing in it is used.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("0755");
        assert!(announced(home.path()).is_empty());
    }

    #[test]
    fn a_proof_depends_on_the_key_and_the_challenge() {
        let key = AnnouncementKey::generate().expect("a key");
        let other = AnnouncementKey::generate().expect("a key");
        let challenge = "0123456789abcdef0123456789abcdef";
        assert!(is_challenge(challenge));
        assert_eq!(key.proof(challenge), key.proof(challenge));
        assert_ne!(key.proof(challenge), other.proof(challenge));
        assert_ne!(
            key.proof(challenge),
            key.proof(&challenge.replace('0', "1"))
        );
        assert!(!key.proof(challenge).contains(key.0.expose()));
        assert_eq!(format!("{key:?}"), "AnnouncementKey(***)");
    }
}
