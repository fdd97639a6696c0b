//! Environment references in user-authored configs, in the syntaxes of the tools users copy
//! configs from.
//!
//! Rules (NAME is `[A-Za-z_][A-Za-z0-9_]*`):
//! - `${NAME}` (Claude Code), `${env:NAME}` (VS Code, Cursor, Windsurf), a bare `$NAME`
//!   (Gemini CLI) and `{env:NAME}` (opencode) become the value of NAME.
//! - `${NAME:-default}` becomes the value of NAME when it is set and not empty, else `default`
//!   (the text up to the first `}`, taken literally).
//! - VS Code's `${userHome}` is `$HOME`, and `${workspaceFolder}` the working directory
//!   ([`EnvLookup::working_dir`]).
//! - An unset NAME without a default stays literal (as written) and is reported by name.
//! - `$${` is the escape for a literal `${`.
//! - Anything else (`$1`, `${1X}`, `${}`, `${input:…}` here, an unclosed `${`) is plain text.
//!   (`${input:ID}` is a secret: parsing turns it into the placeholder `{{ID}}`.)
//!
//! **Invariant:** expansion runs only on text a user wrote, never on a managed server's config
//! and never on a value that came from a secret (see `render`).

use std::collections::{BTreeMap, HashMap};

/// Where `${VAR}` values come from.
pub trait EnvLookup {
    /// The value of `name`, if set (and valid Unicode).
    fn get(&self, name: &str) -> Option<String>;

    /// The working directory, for VS Code's `${workspaceFolder}`; `None` leaves it literal.
    fn working_dir(&self) -> Option<String> {
        None
    }
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl EnvLookup for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn working_dir(&self) -> Option<String> {
        std::env::current_dir()
            .ok()
            .and_then(|dir| dir.into_os_string().into_string().ok())
    }
}

/// An environment with nothing set: every `${VAR}` without a default stays literal.
#[derive(Debug, Clone, Copy, Default)]
pub struct EmptyEnv;

impl EnvLookup for EmptyEnv {
    fn get(&self, _name: &str) -> Option<String> {
        None
    }
}

impl EnvLookup for BTreeMap<String, String> {
    fn get(&self, name: &str) -> Option<String> {
        BTreeMap::get(self, name).cloned()
    }
}

impl EnvLookup for HashMap<String, String> {
    fn get(&self, name: &str) -> Option<String> {
        HashMap::get(self, name).cloned()
    }
}

/// One piece of expanded text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expanded<'a> {
    /// Text kept as written (escapes already resolved).
    Text(&'a str),
    /// A value read from the environment: may be a credential.
    Value(String),
    /// The default of `${NAME:-default}`, used because NAME is unset or empty: text the user
    /// wrote.
    Default(&'a str),
    /// A `${NAME}` left literal because NAME is unset.
    Unset { literal: &'a str, name: &'a str },
}

/// Expands `text`, returning its pieces in order.
pub(crate) fn expand<'a>(text: &'a str, env: &dyn EnvLookup) -> Vec<Expanded<'a>> {
    let mut out = Vec::new();
    let mut plain_start = 0;
    let mut i = 0;
    while let Some(offset) = text[i..].find(['$', '{']) {
        let at = i + offset;
        let rest = &text[at..];
        if rest.starts_with("$${") {
            push_text(&mut out, &text[plain_start..at]);
            out.push(Expanded::Text("${"));
            i = at + 3;
            plain_start = i;
            continue;
        }
        let reference = if rest.starts_with('{') {
            opencode_reference_at(rest)
        } else {
            reference_at(rest)
        };
        match reference {
            Some(reference) => {
                push_text(&mut out, &text[plain_start..at]);
                let literal = &rest[..reference.len];
                let value = match reference.kind {
                    Kind::Env => env.get(reference.name),
                    Kind::WorkingDir => env.working_dir(),
                };
                match (value, reference.default) {
                    (Some(value), Some(default)) if value.is_empty() => {
                        out.push(Expanded::Default(default));
                    }
                    (Some(value), _) => out.push(Expanded::Value(value)),
                    (None, Some(default)) => out.push(Expanded::Default(default)),
                    (None, None) => out.push(Expanded::Unset {
                        literal,
                        name: reference.name,
                    }),
                }
                i = at + reference.len;
                plain_start = i;
            }
            None => i = at + 1,
        }
    }
    push_text(&mut out, &text[plain_start..]);
    out
}

fn push_text<'a>(out: &mut Vec<Expanded<'a>>, text: &'a str) {
    if !text.is_empty() {
        out.push(Expanded::Text(text));
    }
}

/// What a reference reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The environment variable `name`.
    Env,
    /// The working directory (`name` is `workspaceFolder`, for reports).
    WorkingDir,
}

struct Reference<'a> {
    name: &'a str,
    kind: Kind,
    default: Option<&'a str>,
    len: usize,
}

/// The length of the NAME at the start of `text` (`[A-Za-z_][A-Za-z0-9_]*`), 0 if none.
fn name_len(text: &str) -> usize {
    let len = text
        .bytes()
        .position(|b| !(b.is_ascii_alphanumeric() || b == b'_'))
        .unwrap_or(text.len());
    if len == 0 || text.as_bytes()[0].is_ascii_digit() {
        0
    } else {
        len
    }
}

/// Parses opencode's `{env:NAME}` at the start of `text` (which starts with `{`).
fn opencode_reference_at(text: &str) -> Option<Reference<'_>> {
    let rest = text.strip_prefix("{env:")?;
    let len = name_len(rest);
    (len > 0 && rest[len..].starts_with('}')).then(|| Reference {
        name: &rest[..len],
        kind: Kind::Env,
        default: None,
        len: 5 + len + 1,
    })
}

/// Parses a reference at the start of `text` (which starts with `$`).
fn reference_at(text: &str) -> Option<Reference<'_>> {
    let Some(body) = text.strip_prefix("${") else {
        // Gemini's bare `$NAME`.
        let name = &text[1..1 + name_len(&text[1..])];
        return (!name.is_empty()).then_some(Reference {
            name,
            kind: Kind::Env,
            default: None,
            len: 1 + name.len(),
        });
    };
    // VS Code's `${env:NAME}`.
    if let Some(rest) = body.strip_prefix("env:") {
        let len = name_len(rest);
        return (len > 0 && rest[len..].starts_with('}')).then(|| Reference {
            name: &rest[..len],
            kind: Kind::Env,
            default: None,
            len: 2 + 4 + len + 1,
        });
    }
    let name_len = name_len(body);
    let name = &body[..name_len];
    if name.is_empty() {
        return None;
    }
    let after = &body[name_len..];
    if after.starts_with('}') {
        // VS Code's predefined variables.
        let (name, kind) = match name {
            "userHome" => ("HOME", Kind::Env),
            "workspaceFolder" => (name, Kind::WorkingDir),
            _ => (name, Kind::Env),
        };
        return Some(Reference {
            name,
            kind,
            default: None,
            len: 2 + name_len + 1,
        });
    }
    let default_text = after.strip_prefix(":-")?;
    let close = default_text.find('}')?;
    Some(Reference {
        name,
        kind: Kind::Env,
        default: Some(&default_text[..close]),
        len: 2 + name_len + 2 + close + 1,
    })
}

#[cfg(test)]
mod tests {
    use super::Expanded::{Default, Text, Unset, Value};
    use super::*;
    use pretty_assertions::assert_eq;

    fn env() -> BTreeMap<String, String> {
        [("HOME", "/home/u"), ("EMPTY", ""), ("TOKEN", "t0k")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn expands_set_unset_and_defaults() {
        let env = env();
        assert_eq!(
            expand("${HOME}/x", &env),
            vec![Value("/home/u".into()), Text("/x")]
        );
        assert_eq!(
            expand("a ${NOPE} b", &env),
            vec![
                Text("a "),
                Unset {
                    literal: "${NOPE}",
                    name: "NOPE"
                },
                Text(" b")
            ]
        );
        assert_eq!(expand("${NOPE:-d}", &env), vec![Default("d")]);
        assert_eq!(expand("${EMPTY:-d}", &env), vec![Default("d")]);
        assert_eq!(expand("${EMPTY}", &env), vec![Value(String::new())]);
        assert_eq!(
            expand("Bearer ${TOKEN:-}", &env),
            vec![Text("Bearer "), Value("t0k".into())]
        );
    }

    #[test]
    fn other_tools_syntaxes_are_environment_references() {
        let env = env();
        // Gemini CLI's bare `$NAME`, up to the first character that cannot be in a name.
        assert_eq!(
            expand("$HOME/x $TOKEN-y", &env),
            vec![
                Value("/home/u".into()),
                Text("/x "),
                Value("t0k".into()),
                Text("-y")
            ]
        );
        // VS Code's `${env:NAME}`; unset, it stays as written and is reported by name.
        assert_eq!(
            expand("${env:TOKEN}|${env:NOPE}|$NOPE", &env),
            vec![
                Value("t0k".into()),
                Text("|"),
                Unset {
                    literal: "${env:NOPE}",
                    name: "NOPE"
                },
                Text("|"),
                Unset {
                    literal: "$NOPE",
                    name: "NOPE"
                }
            ]
        );
        // VS Code's `${userHome}` and `${workspaceFolder}`.
        assert_eq!(
            expand("${userHome}/a:${workspaceFolder}", &env),
            vec![
                Value("/home/u".into()),
                Text("/a:"),
                Unset {
                    literal: "${workspaceFolder}",
                    name: "workspaceFolder"
                }
            ]
        );
        // opencode's `{env:NAME}`; other braces are text.
        assert_eq!(
            expand("Bearer {env:TOKEN} {envy} {env:NOPE}", &env),
            vec![
                Text("Bearer "),
                Value("t0k".into()),
                Text(" {envy} "),
                Unset {
                    literal: "{env:NOPE}",
                    name: "NOPE"
                }
            ]
        );
        struct InProject;
        impl EnvLookup for InProject {
            fn get(&self, _name: &str) -> Option<String> {
                None
            }
            fn working_dir(&self) -> Option<String> {
                Some("/src/project".to_owned())
            }
        }
        assert_eq!(
            expand("${workspaceFolder}/db", &InProject),
            vec![Value("/src/project".into()), Text("/db")]
        );
    }

    #[test]
    fn escape_and_non_references_stay() {
        let env = env();
        assert_eq!(expand("$${HOME}", &env), vec![Text("${"), Text("HOME}")]);
        for text in [
            "$1",
            "${1X}",
            "${}",
            "${HOME",
            "${A-B}",
            "$",
            "cost: 5$",
            "${X:-",
            "${env:}",
            "${env:HOME",
            "${input:tok}",
            "$-x",
        ] {
            let joined: String = expand(text, &env)
                .into_iter()
                .map(|p| match p {
                    Text(t) => t.to_owned(),
                    other => panic!("{text:?} expanded to {other:?}"),
                })
                .collect();
            assert_eq!(joined, text);
        }
    }
}
