//! Which values a user wrote into a config are credentials, for masking by provenance.
//!
//! A rendered value is masked when it came from a secret, the environment or a managed server
//! (see `render`). A literal the user typed into the config is shown, except where it is a
//! credential by all appearances: the value of an `env` or header entry whose key names a
//! credential ([`is_credential_name`]), and the password of a URL (`scheme://user:password@`,
//! [`url_passwords`]). Masking itself stays by value (`Masker`); this only decides which values
//! count as secret.

use std::ops::Range;

/// Parts of a key that mark it as a credential wherever they appear in it (lower case).
const CREDENTIAL_PARTS: [&str; 11] = [
    "token",
    "secret",
    "passw",
    "auth",
    "cookie",
    "credential",
    "apikey",
    "session",
    "signature",
    "private",
    "bearer",
];

/// Words that mark a key as a credential when they are a whole word of it (`API_KEY`,
/// `x-api-key`, `githubPat`), so that `PATH` or `KEYBOARD_LAYOUT` are not.
const CREDENTIAL_WORDS: [&str; 5] = ["key", "pat", "pwd", "pass", "jwt"];

/// Whether an env or header key names a credential: it holds `token`, `secret`, `passw`,
/// `auth` (so `Authorization`, `Proxy-Authorization`), `cookie`, `credential`, `apikey`,
/// `session`, `signature`, `private` or `bearer`, or has the word `key`, `pat`, `pwd`, `pass` or
/// `jwt` (words split at `_`, `-`, `.`, spaces and lower-to-upper case changes).
pub fn is_credential_name(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    if CREDENTIAL_PARTS.iter().any(|part| lower.contains(part)) {
        return true;
    }
    words(key).any(|word| CREDENTIAL_WORDS.contains(&word.to_ascii_lowercase().as_str()))
}

/// The words of a key: split at non-alphanumeric characters and where a lower-case letter or
/// digit is followed by an upper-case one (`githubPat` → `github`, `Pat`).
fn words(key: &str) -> impl Iterator<Item = &str> {
    key.split(|c: char| !c.is_ascii_alphanumeric())
        .flat_map(|part| {
            let mut pieces = Vec::new();
            let mut start = 0;
            let bytes = part.as_bytes();
            for i in 1..bytes.len() {
                if bytes[i].is_ascii_uppercase() && !bytes[i - 1].is_ascii_uppercase() {
                    pieces.push(&part[start..i]);
                    start = i;
                }
            }
            pieces.push(&part[start..]);
            pieces
        })
        .filter(|word| !word.is_empty())
}

/// The byte ranges of the passwords in URLs in `text` (`postgresql://user:secret@host/db` →
/// the range of `secret`).
pub fn url_passwords(text: &str) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let start = from + found + 3;
        let end = text[start..]
            .find(|c: char| matches!(c, '/' | '?' | '#' | '"' | '\'') || c.is_whitespace())
            .map_or(text.len(), |offset| start + offset);
        let authority = &text[start..end];
        if let Some(at) = authority.rfind('@')
            && let Some(colon) = authority[..at].find(':')
            && colon + 1 < at
        {
            ranges.push(start + colon + 1..start + at);
        }
        from = end.max(start);
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_names() {
        for key in [
            "GITHUB_PERSONAL_ACCESS_TOKEN",
            "API_KEY",
            "x-api-key",
            "Authorization",
            "Proxy-Authorization",
            "Cookie",
            "SLACK_BOT_TOKEN",
            "CLIENT_SECRET",
            "DB_PASSWORD",
            "githubPat",
            "OPENAI_APIKEY",
            "X-Auth-Token",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "PGPASSWORD",
            "MYSQL_PWD",
        ] {
            assert!(is_credential_name(key), "{key} should be a credential name");
        }
        for key in [
            "SLACK_TEAM_ID",
            "Content-Type",
            "PATH",
            "PYTHONPATH",
            "LOG_LEVEL",
            "KEYBOARD_LAYOUT",
            "BASE_URL",
            "Accept",
            "REGION",
        ] {
            assert!(
                !is_credential_name(key),
                "{key} should not be a credential name"
            );
        }
    }

    #[test]
    fn passwords_in_urls() {
        let text = "postgresql://user:s3cret@localhost:5432/db and https://h/x?a=b:c@d";
        let ranges = url_passwords(text);
        let found: Vec<&str> = ranges.iter().map(|r| &text[r.clone()]).collect();
        assert_eq!(found, ["s3cret"]);
        assert!(url_passwords("https://user@host/path").is_empty());
        assert!(url_passwords("https://host:8443/path").is_empty());
        assert!(url_passwords("no url: here").is_empty());
        let two = "redis://:pw1@h1 mongodb://u:pw2@h2/";
        let found: Vec<&str> = url_passwords(two).iter().map(|r| &two[r.clone()]).collect();
        assert_eq!(found, ["pw1", "pw2"]);
    }
}
