//! Text from elsewhere (a server's stderr, a tool description, an error a server sent) made
//! safe to write on a terminal or into a log line: control characters are shown escaped
//! instead of acting (an `ESC [` sequence recolouring or clearing the screen, an OSC sequence
//! setting the window title or a hyperlink, `BEL`, a carriage return drawing over what was
//! written before it).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Invisible format characters that reorder or hide what a terminal shows: the bidirectional
/// embeddings, overrides and isolates (`U+202A`–`U+202E`, `U+2066`–`U+2069`), the direction
/// marks (`U+200E`, `U+200F`, `U+061C`).
fn reorders(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}')
}

/// `text` with every control character but line feed and tab written as an escape: C0
/// controls and DEL as `\x1b`, `\r`, …; C1 controls (`U+0080`–`U+009F`, which a terminal may
/// read as `ESC` sequences too) and the bidirectional format characters (which reorder what
/// is shown: [`reorders`]) as `\u{9b}`, `\u{202e}`. Text without any is returned as it is.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    let escaped = |c: char| (c.is_control() && c != '\n' && c != '\t') || reorders(c);
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\r' if escaped(c) => out.push_str("\\r"),
            c if escaped(c) && u32::from(c) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if escaped(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_the_rest_kept() {
        assert_eq!(
            escape_controls("\u{1b}]0;title\u{7}\u{1b}[31mred\rX\u{9b}2J\u{7f}"),
            "\\x1b]0;title\\x07\\x1b[31mred\\rX\\u{9b}2J\\x7f"
        );
        assert_eq!(
            escape_controls("a\u{202e}b\u{2066}c\u{200f}d\u{61c}e"),
            "a\\u{202e}b\\u{2066}c\\u{200f}d\\u{61c}e"
        );
        assert!(matches!(
            escape_controls("line one\n\tline two é"),
            Cow::Borrowed("line one\n\tline two é")
        ));
    }
}
