//! The master key, sealing values at rest (AES-256-GCM), random tokens and their hashes.
//!
//! A sealed value is `nonce (12 bytes) || ciphertext || tag (16 bytes)`, with a fresh random
//! nonce per value and associated data that names the row it belongs to, so a sealed value
//! copied into another row (another installation, another secret name) does not open.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::error::KeyError;

/// Bytes in the master key (AES-256).
pub const KEY_BYTES: usize = 32;

/// Bytes in a nonce (the 96 bits AES-GCM is specified for).
const NONCE_BYTES: usize = 12;

/// Random bytes in an API key or a proxy token (256 bits).
pub const TOKEN_BYTES: usize = 32;

/// The prefix of client API keys, so secret scanners and people can tell what one is.
pub const API_KEY_PREFIX: &str = "tsk_";

/// What the insecure development key is derived from. Public by design: anyone can derive it.
const DEV_KEY_SEED: &[u8] = b"tether-server insecure development key; never use in production";

/// The key every value at rest is sealed with. `Debug` never shows it.
///
/// During a key rotation it also holds the previous key: values are sealed under the current
/// key and opened with the current one, else the previous one.
pub struct MasterKey {
    cipher: Aes256Gcm,
    previous: Option<Aes256Gcm>,
    insecure_dev: bool,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterKey")
            .field("insecure_dev", &self.insecure_dev)
            .field("has_previous", &self.previous.is_some())
            .finish_non_exhaustive()
    }
}

impl MasterKey {
    /// Reads a key given as 64 hex digits (`openssl rand -hex 32`) or as standard base64 of 32
    /// bytes (`openssl rand -base64 32`); surrounding whitespace is ignored. The two forms cannot
    /// be confused: 64 hex digits read as base64 would be 48 bytes.
    pub fn from_text(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        let bytes = if text.len() == 2 * KEY_BYTES && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            decode_hex(text)
        } else {
            Zeroizing::new(STANDARD.decode(text).map_err(|_| KeyError::InvalidKey {
                reason: "it is neither 64 hex digits nor valid base64".to_owned(),
            })?)
        };
        if bytes.len() != KEY_BYTES {
            return Err(KeyError::InvalidKey {
                reason: format!("it decodes to {} bytes, not {KEY_BYTES}", bytes.len()),
            });
        }
        check_entropy(&bytes)?;
        Ok(Self::from_bytes(&bytes, false))
    }

    /// The fixed, publicly derivable development key (SHA-256 of a constant). Anyone can open
    /// what it seals: for local experiments only.
    pub fn insecure_dev_key() -> Self {
        let bytes = Zeroizing::new(Sha256::digest(DEV_KEY_SEED).to_vec());
        Self::from_bytes(&bytes, true)
    }

    fn from_bytes(bytes: &[u8], insecure_dev: bool) -> Self {
        let mut key = aes_gcm::Key::<Aes256Gcm>::default();
        key.copy_from_slice(bytes);
        let cipher = Aes256Gcm::new(&key);
        zeroize::Zeroize::zeroize(key.as_mut_slice());
        Self {
            cipher,
            previous: None,
            insecure_dev,
        }
    }

    /// This key, also opening what `previous` sealed (a key rotation in progress).
    pub fn with_previous(self, previous: MasterKey) -> Self {
        Self {
            previous: Some(previous.cipher),
            ..self
        }
    }

    /// Whether a previous key is held (a rotation is in progress).
    pub fn has_previous(&self) -> bool {
        self.previous.is_some()
    }

    /// Whether this is the insecure development key.
    pub fn is_insecure_dev(&self) -> bool {
        self.insecure_dev
    }

    /// Encrypts `plaintext` bound to `aad` (which names the row the value belongs to).
    pub fn seal(&self, plaintext: &[u8], aad: &[u8]) -> Result<Vec<u8>, KeyError> {
        let mut nonce_bytes = [0_u8; NONCE_BYTES];
        fill_random(&mut nonce_bytes)?;
        let nonce = Nonce::from(nonce_bytes);
        let ciphertext = self
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            .map_err(|_| KeyError::Seal)?;
        let mut sealed = Vec::with_capacity(NONCE_BYTES + ciphertext.len());
        sealed.extend_from_slice(&nonce_bytes);
        sealed.extend_from_slice(&ciphertext);
        Ok(sealed)
    }

    /// Decrypts a value sealed by [`MasterKey::seal`] with the same `aad`, with the current key,
    /// else the previous one. Fails when neither key sealed it, the value was altered, or it
    /// belongs to another row.
    pub fn open(&self, sealed: &[u8], aad: &[u8]) -> Result<Zeroizing<Vec<u8>>, KeyError> {
        let (nonce_bytes, ciphertext) = sealed
            .split_first_chunk::<NONCE_BYTES>()
            .ok_or(KeyError::Unseal)?;
        let nonce = Nonce::from(*nonce_bytes);
        let payload = || Payload {
            msg: ciphertext,
            aad,
        };
        self.cipher
            .decrypt(&nonce, payload())
            .or_else(|error| match &self.previous {
                Some(previous) => previous.decrypt(&nonce, payload()),
                None => Err(error),
            })
            .map(Zeroizing::new)
            .map_err(|_| KeyError::Unseal)
    }
}

/// The fewest distinct byte values a key may hold. 32 random bytes hold about 30; fewer than 8
/// happens by chance with a probability below 10^-35, so a key under it was not drawn at
/// random (all zeros, one repeated byte, `abab…`, a placeholder).
const MIN_DISTINCT_KEY_BYTES: usize = 8;

/// Refuses a key that cannot have come from a random generator (too few distinct bytes).
fn check_entropy(bytes: &[u8]) -> Result<(), KeyError> {
    let mut seen = [false; 256];
    for &byte in bytes {
        seen[usize::from(byte)] = true;
    }
    let distinct = seen.iter().filter(|&&s| s).count();
    if distinct < MIN_DISTINCT_KEY_BYTES {
        return Err(KeyError::InvalidKey {
            reason: format!(
                "it has no entropy (only {distinct} distinct byte value{} in {KEY_BYTES}); generate \
                 a random one with `openssl rand -hex 32`",
                if distinct == 1 { "" } else { "s" }
            ),
        });
    }
    Ok(())
}

fn decode_hex(text: &str) -> Zeroizing<Vec<u8>> {
    // Callers pass hex digits only.
    let digit = |b: u8| {
        char::from(b)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
            .unwrap_or(0)
    };
    Zeroizing::new(
        text.as_bytes()
            .chunks_exact(2)
            .map(|pair| (digit(pair[0]) << 4) | digit(pair[1]))
            .collect(),
    )
}

/// Fills `buffer` from the operating system's random number generator.
pub fn fill_random(buffer: &mut [u8]) -> Result<(), KeyError> {
    getrandom::fill(buffer).map_err(|error| KeyError::Random {
        reason: error.to_string(),
    })
}

/// A new random token: 256 bits, base64url without padding (43 characters).
pub fn random_token() -> Result<Zeroizing<String>, KeyError> {
    let mut bytes = Zeroizing::new([0_u8; TOKEN_BYTES]);
    fill_random(bytes.as_mut_slice())?;
    Ok(Zeroizing::new(URL_SAFE_NO_PAD.encode(bytes.as_slice())))
}

/// A new client API key: [`API_KEY_PREFIX`] followed by a [`random_token`].
pub fn new_api_key() -> Result<Zeroizing<String>, KeyError> {
    let token = random_token()?;
    Ok(Zeroizing::new(format!(
        "{API_KEY_PREFIX}{}",
        token.as_str()
    )))
}

/// A new API key id: 16 hex digits from 64 random bits. Public (shown by `admin api-key
/// list`); it names a key without revealing anything of it.
pub fn new_api_key_id() -> Result<String, KeyError> {
    let mut bytes = [0_u8; 8];
    fill_random(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// SHA-256 of a token, as stored. API keys and proxy tokens carry 256 random bits, so a fast
/// hash is enough: a slow password hash buys time against guessing low-entropy secrets, and
/// there is nothing to guess here.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key with entropy (the old test key, `ab` × 32, is now refused as having none).
    const OTHER_KEY: &str = "5f0c9e1ab27d4c83e6f1a09b3d5c7e21f4a8b6c0d2e4f6a8b0c2d4e6f8a0b2c4";

    #[test]
    fn seal_and_open_round_trip_and_bind_the_row() {
        let key = MasterKey::insecure_dev_key();
        let sealed = key.seal(b"s3cret", b"row-1").unwrap();
        assert!(!sealed.windows(6).any(|w| w == b"s3cret"));
        assert_eq!(key.open(&sealed, b"row-1").unwrap().as_slice(), b"s3cret");
        assert!(matches!(key.open(&sealed, b"row-2"), Err(KeyError::Unseal)));
        let other = MasterKey::from_text(OTHER_KEY).unwrap();
        assert!(matches!(
            other.open(&sealed, b"row-1"),
            Err(KeyError::Unseal)
        ));
        let mut tampered = sealed.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert!(matches!(
            key.open(&tampered, b"row-1"),
            Err(KeyError::Unseal)
        ));
        assert!(matches!(
            key.open(&sealed[..5], b"row-1"),
            Err(KeyError::Unseal)
        ));
    }

    #[test]
    fn two_seals_of_one_value_differ() {
        let key = MasterKey::insecure_dev_key();
        assert_ne!(key.seal(b"x", b"a").unwrap(), key.seal(b"x", b"a").unwrap());
    }

    #[test]
    fn a_previous_key_opens_what_it_sealed_while_new_values_use_the_current_one() {
        let old = MasterKey::from_text(&"5f0c9e1ab27d4c83e6f1a09b3d5c7e21".repeat(2)).unwrap();
        let sealed_old = old.seal(b"v", b"row").unwrap();
        let new = || MasterKey::from_text(&"a1b2c3d4e5f60718293a4b5c6d7e8f90".repeat(2)).unwrap();
        assert!(matches!(
            new().open(&sealed_old, b"row"),
            Err(KeyError::Unseal)
        ));
        let old_again =
            MasterKey::from_text(&"5f0c9e1ab27d4c83e6f1a09b3d5c7e21".repeat(2)).unwrap();
        let ring = new().with_previous(old_again);
        assert_eq!(ring.open(&sealed_old, b"row").unwrap().as_slice(), b"v");
        let sealed_new = ring.seal(b"w", b"row").unwrap();
        assert_eq!(new().open(&sealed_new, b"row").unwrap().as_slice(), b"w");
        assert!(matches!(
            old.open(&sealed_new, b"row"),
            Err(KeyError::Unseal)
        ));
    }

    #[test]
    fn key_text_forms() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        let from_hex = MasterKey::from_text(hex).unwrap();
        let base64 = STANDARD.encode(decode_hex(hex).as_slice());
        let from_base64 = MasterKey::from_text(&format!("  {base64}\n")).unwrap();
        let sealed = from_hex.seal(b"v", b"").unwrap();
        assert_eq!(from_base64.open(&sealed, b"").unwrap().as_slice(), b"v");

        for bad in [
            "",
            "zz",
            &"ab".repeat(31),
            &STANDARD.encode([1_u8; 16]),
            "not base64!",
            &"00".repeat(32),
            &"ab".repeat(32),
            &"01020304".repeat(8),
            &STANDARD.encode([7_u8; 32]),
        ] {
            let error = MasterKey::from_text(bad).unwrap_err();
            assert!(matches!(error, KeyError::InvalidKey { .. }), "{bad:?}");
            assert!(bad.len() < 4 || !error.to_string().contains(bad), "{error}");
        }
    }

    #[test]
    fn keys_without_entropy_are_refused_without_echo() {
        let error = MasterKey::from_text(&"00".repeat(32)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "TETHER_SERVER_KEY is not a valid key: it has no entropy (only 1 distinct byte value \
             in 32); generate a random one with `openssl rand -hex 32`; give 32 bytes as 64 hex \
             digits or base64"
        );
        assert!(MasterKey::from_text(OTHER_KEY).is_ok());
        // Every random key passes: 1,000 drawn from the system generator.
        for _ in 0..1000 {
            let mut bytes = [0_u8; KEY_BYTES];
            fill_random(&mut bytes).unwrap();
            assert!(MasterKey::from_text(&STANDARD.encode(bytes)).is_ok());
        }
    }

    #[test]
    fn tokens_are_256_bit_base64url() {
        let token = random_token().unwrap();
        assert_eq!(token.len(), 43);
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_ne!(*token, *random_token().unwrap());
        assert!(new_api_key().unwrap().starts_with(API_KEY_PREFIX));
        assert_eq!(token_hash("a"), token_hash("a"));
        assert_ne!(token_hash("a"), token_hash("b"));
    }

    #[test]
    fn debug_hides_the_key() {
        let text = format!("{:?}", MasterKey::insecure_dev_key());
        assert!(text.contains("insecure_dev: true"), "{text}");
    }
}
