//! Random tokens and their comparison: the one generator and the one constant-time compare.

use tether_secret::SecretValue;

/// The randomness source failed (no `getrandom` answer): nothing can be protected by a token.
/// Returned by [`random_hex`] and [`generate`]; the caller fails the command with it.
#[derive(Debug, thiserror::Error)]
#[error("the system's random number source failed: {0}")]
pub struct NoRandomness(String);

/// `bytes` random bytes as lower-case hex digits (twice as many characters).
pub fn random_hex(bytes: usize) -> Result<String, NoRandomness> {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).map_err(|e| NoRandomness(e.to_string()))?;
    let mut hex = String::with_capacity(bytes * 2);
    for byte in &buffer {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    buffer.fill(0);
    Ok(hex)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A fresh bearer token: 32 random bytes as 64 hex digits, held as a secret from the start.
pub fn generate() -> Result<SecretValue, NoRandomness> {
    random_hex(32).map(SecretValue::new)
}

/// Equal bytes, compared in time that depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_64_hex_digits_and_fresh() {
        let first = generate().expect("a token");
        let second = generate().expect("a token");
        assert_eq!(first.expose().len(), 64);
        assert!(first.expose().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(first.expose(), second.expose());
        assert_eq!(random_hex(20).expect("hex").len(), 40);
    }

    #[test]
    fn comparison_needs_equal_length_and_bytes() {
        assert!(constant_time_eq(b"Bearer ab", b"Bearer ab"));
        assert!(!constant_time_eq(b"Bearer ab", b"Bearer ac"));
        assert!(!constant_time_eq(b"Bearer a", b"Bearer ab"));
        assert!(constant_time_eq(b"", b""));
    }
}
