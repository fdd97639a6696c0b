//! What the user typed, in messages: a value is echoed when it reads as a name or a path (never
//! when it holds JSON or looks like a credential, which would then reach a terminal or a CI
//! log), the nearest of the accepted words is suggested, and a command to copy is shell-quoted.

/// The longest value echoed: a path or a name, not a document.
const MAX_SHOWN: usize = 120;

/// Prefixes of well-known credential formats (API keys, personal access tokens, JWTs).
const CREDENTIAL_PREFIXES: &[&str] = &[
    "sk-",
    "sk_",
    "pk_",
    "rk_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xoxa-",
    "xoxb-",
    "xoxp-",
    "xoxs-",
    "AKIA",
    "ASIA",
    "AIza",
    "ya29.",
    "eyJ",
    "npm_",
    "pypi-",
    "hf_",
    "dop_v1_",
    "shpat_",
];

/// `value` as a message may show it, or `None` when it must not be echoed: JSON (inline
/// configs hold values), whitespace or control characters, something long, or a word that
/// looks like a credential (a known token prefix, or 20 or more characters of letters and
/// digits mixed with no path in them).
pub fn shown(value: &str) -> Option<&str> {
    let value = value.trim();
    if value.is_empty()
        || value.chars().count() > MAX_SHOWN
        || value.starts_with(['{', '"', '['])
        || value.chars().any(|c| c.is_whitespace() || c.is_control())
        || CREDENTIAL_PREFIXES.iter().any(|p| value.starts_with(p))
    {
        return None;
    }
    let path_like = value.contains(['/', '\\']) || value.starts_with(['.', '~']);
    let mixed =
        value.chars().any(|c| c.is_ascii_digit()) && value.chars().any(|c| c.is_alphabetic());
    if !path_like && mixed && value.chars().count() >= 20 {
        return None;
    }
    Some(value)
}

/// The word of `candidates` nearest to `typed` when it is near enough to be a typo (one edit
/// for short words, two from eight characters on; a swap of neighbours is one edit).
pub fn closest<'a>(typed: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = if typed.chars().count() >= 8 { 2 } else { 1 };
    candidates
        .into_iter()
        .filter(|candidate| *candidate != typed)
        .map(|candidate| (distance(typed, candidate), candidate))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, candidate)| candidate)
}

/// The optimal-string-alignment distance: insertions, deletions, substitutions and swaps of
/// two neighbours, one each.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// `text` as one word for a POSIX shell: unchanged when it holds only characters no shell
/// reads specially, else in single quotes (a `'` inside written `'\''`).
pub fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_are_shown_json_and_credentials_are_not() {
        assert_eq!(shown(" githb "), Some("githb"));
        assert_eq!(shown("./mcp.json"), Some("./mcp.json"));
        assert_eq!(shown("claud:"), Some("claud:"));
        for hidden in [
            r#"{"a":{"command":"x"}}"#,
            "sk-NOT-A-SPEC-SENTINEL",
            "ghp_abcdefghijklmnop",
            "a b",
            "line\nbreak",
            "Abcdef0123456789Abcdef",
            "",
        ] {
            assert_eq!(shown(hidden), None, "{hidden:?}");
        }
    }

    #[test]
    fn a_typo_finds_its_word() {
        assert_eq!(closest("mpc", ["mcp", "task", "secret"]), Some("mcp"));
        assert_eq!(closest("githb", ["github", "gitlab"]), Some("github"));
        assert_eq!(closest("claud:", ["claude:", "codex:"]), Some("claude:"));
        assert_eq!(closest("zzz", ["mcp", "task"]), None);
        assert_eq!(closest("mcp", ["mcp"]), None);
    }

    #[test]
    fn shell_words_are_quoted_when_needed() {
        assert_eq!(shell_quote("./mcp.json"), "./mcp.json");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's $HOME"), r"'it'\''s $HOME'");
        assert_eq!(shell_quote(""), "''");
    }
}
