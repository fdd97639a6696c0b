//! A large secret full of what every printed form changes: JSON specials, `{{X}}` placeholder
//! text, `$HOME` and `${X}`, `%41`, quotes and backslashes, non-ASCII, line breaks.
//! Shared by the `large_secret` bench group and `tests/large_secret.rs`.

/// `bytes` bytes of hostile secret text (cut at a character boundary).
pub fn hostile(bytes: usize) -> String {
    let unit = "{\"a\":\"$HOME\",\"b\":\"{{X}}\",\"c\":\"%41\",\"d\":\"\\\\ \\\"q\\\" ünï ${X} $$ `x`\"}\n";
    let mut text = unit.repeat(bytes / unit.len() + 1);
    let mut end = bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// A one-server config whose secret `TOKEN` goes into an argument and an env value.
pub const CONFIG: &str = r#"{"mcpServers":{"srv":{"command":"/bin/echo","args":["--key","{{TOKEN}}"],"env":{"TOKEN":"{{TOKEN}}"}}}}"#;
