//! Redaction by known value: text from the server is masked for every secret this client
//! knows (the API key) before it may reach an error.

use tether_secret::SecretValue;

/// How many characters of server text an error keeps.
pub(crate) const EXCERPT_CHARS: usize = 200;

/// `text` with every known secret masked, control characters flattened to spaces, cut to
/// [`EXCERPT_CHARS`] characters (an ellipsis marks the cut). Masking happens before the cut,
/// so no prefix of a secret survives at the edge.
pub(crate) fn excerpt(text: &str, secrets: &[&SecretValue]) -> String {
    let masked = tether_secret::mask_known_values(text, secrets.iter().copied());
    let mut chars = masked
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c });
    let mut out: String = chars.by_ref().take(EXCERPT_CHARS).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{EXCERPT_CHARS, excerpt};
    use tether_secret::SecretValue;

    #[test]
    fn masks_known_secrets_and_truncates() {
        let key = SecretValue::new("k3y-sentinel".to_owned());
        let text = format!("denied for k3y-sentinel\n{}", "x".repeat(500));
        let out = excerpt(&text, &[&key]);
        assert!(
            out.starts_with(&format!("denied for {} x", tether_secret::MASK)),
            "{out}"
        );
        assert!(!out.contains("k3y"));
        assert_eq!(out.chars().count(), EXCERPT_CHARS + 1);
        assert!(out.ends_with('…'));
    }

    #[test]
    fn secret_at_the_cut_is_masked_not_split() {
        let key = SecretValue::new("ABCDEFGHIJ".to_owned());
        let text = format!("{}ABCDEFGHIJ", "y".repeat(EXCERPT_CHARS - 4));
        let out = excerpt(&text, &[&key]);
        assert!(!out.contains("ABCD"), "{out}");
    }

    #[test]
    fn empty_secret_masks_nothing_and_short_text_is_kept() {
        let empty = SecretValue::from("");
        assert_eq!(excerpt("  short body ", &[&empty]), "short body");
    }
}
