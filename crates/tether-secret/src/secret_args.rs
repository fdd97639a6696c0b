//! `--secret NAME=SOURCE`: the one parser both binaries (`tether`, `tether-server admin`) use,
//! so they accept and refuse the same arguments with the same messages.
//!
//! Pure: it reads no variable, file or stdin; it says where each value is to come from, and
//! the binary reads it. A literal value is refused (the command line is visible to every user
//! through `ps` and `/proc`), and so are an empty name, a name given twice and two secrets from
//! stdin. No message holds the text after `=`, which may be a literal secret.

use std::collections::HashSet;

/// Where a secret's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `env:VAR`: the environment variable `VAR`.
    Env(String),
    /// `file:PATH`: the file's contents, one trailing newline dropped.
    File(String),
    /// `-`: one line of stdin (at most one secret per command).
    Stdin,
    /// `prompt`: hidden input from the terminal.
    Prompt,
    /// `cmd:PROGRAM ARGS…`: what the program writes to stdout, one trailing newline dropped.
    /// The words are split as a POSIX shell splits them (quotes, backslashes) but nothing is
    /// expanded and no shell runs: `PROGRAM` is looked up on `PATH` and run with `ARGS`.
    Command(Vec<String>),
}

impl SecretSource {
    /// `cmd:` and `words` as one `SOURCE` again, quoted so that it parses to the same words
    /// (`None` when a word holds a NUL, which no command line can carry).
    pub fn command_source(words: &[String]) -> Option<String> {
        Some(format!("cmd:{}", shell_line(words)?))
    }
}

/// `words` as one line a POSIX shell splits back into the same words, nothing expanded (`None`
/// when a word holds a NUL, which no command line can carry).
pub fn shell_line(words: &[String]) -> Option<String> {
    shlex::try_join(words.iter().map(String::as_str)).ok()
}

/// One parsed `--secret NAME=SOURCE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretArg {
    /// The secret's name (surrounding whitespace removed).
    pub name: String,
    /// Where its value comes from.
    pub source: SecretSource,
}

/// Why a `--secret` argument was refused. Returned by [`parse_secret_args`]; the binaries
/// report it as a usage error (exit 2). Messages never hold the text after `=`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretArgError {
    /// No `=`: the user gives `NAME=SOURCE`.
    #[error(
        "--secret needs NAME=SOURCE (got a value without '='); SOURCE is env:VAR, file:PATH, cmd:PROGRAM ARGS…, - or prompt"
    )]
    MissingEquals,
    /// Nothing (or only spaces) before `=`.
    #[error("--secret needs a NAME before '=' (the name is empty)")]
    EmptyName,
    /// The same name twice: which one was meant is unclear, so neither wins.
    #[error("--secret {name} is given twice; give each secret once")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// `env:`, `file:` or `cmd:` with nothing after it.
    #[error("secret {name}: {prefix} needs a {what} after it")]
    EmptySource {
        /// The name.
        name: String,
        /// `env:`, `file:` or `cmd:`.
        prefix: &'static str,
        /// `variable name`, `path` or `program`.
        what: &'static str,
    },
    /// A literal value: the user moves it to a variable, a file, stdin or the prompt.
    #[error(
        "secret {name}: a literal value on the command line is refused, because the command line is visible to every user on this machine (`ps`, /proc); use {name}=env:VAR, {name}=file:PATH, {name}=cmd:PROGRAM ARGS…, {name}=- (stdin) or {name}=prompt"
    )]
    Literal {
        /// The name.
        name: String,
    },
    /// `SCHEME:` of another tool's secret references (`vault:`, `op:`, …): tether reads none
    /// of them itself; the user runs that tool's CLI through `cmd:`. Only a scheme from
    /// [`OTHER_SCHEMES`] is named: any other `word:` may be the start of a literal value.
    #[error(
        "secret {name}: {scheme}: is not a source tether reads; the sources are env:VAR, file:PATH, cmd:PROGRAM ARGS… (to run a secret manager's own CLI, e.g. {name}=cmd:vault kv get -field=token secret/x), - (stdin) and prompt"
    )]
    UnknownScheme {
        /// The name.
        name: String,
        /// The scheme, one of [`OTHER_SCHEMES`].
        scheme: &'static str,
    },
    /// `cmd:` words a shell could not split (an unclosed quote, a trailing backslash).
    #[error(
        "secret {name}: cmd: cannot be split into a program and its arguments (an unclosed quote or a trailing backslash?)"
    )]
    CommandWords {
        /// The name.
        name: String,
    },
    /// A second `-`: stdin gives one value per command.
    #[error("secret {name}: only one --secret can read from stdin (-)")]
    StdinTwice {
        /// The name of the second one.
        name: String,
    },
}

/// Secret-reference schemes of other tools (secret managers, password stores, other agents'
/// configs) that a user may try as a source: named in [`SecretArgError::UnknownScheme`].
pub const OTHER_SCHEMES: [&str; 20] = [
    "vault",
    "op",
    "aws",
    "awssm",
    "aws-sm",
    "ssm",
    "gcp",
    "gsm",
    "azure",
    "akv",
    "keyring",
    "keychain",
    "pass",
    "bw",
    "bitwarden",
    "doppler",
    "infisical",
    "sops",
    "secret",
    "secrets",
];

/// Parses every `--secret` argument, in order; the first refusal wins.
pub fn parse_secret_args<I, S>(args: I) -> Result<Vec<SecretArg>, SecretArgError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut parsed = Vec::new();
    let mut names = HashSet::new();
    let mut stdin_used = false;
    for arg in args {
        let arg = parse_one(arg.as_ref())?;
        if !names.insert(arg.name.clone()) {
            return Err(SecretArgError::Duplicate { name: arg.name });
        }
        if arg.source == SecretSource::Stdin {
            if stdin_used {
                return Err(SecretArgError::StdinTwice { name: arg.name });
            }
            stdin_used = true;
        }
        parsed.push(arg);
    }
    Ok(parsed)
}

fn parse_one(arg: &str) -> Result<SecretArg, SecretArgError> {
    let (name, source) = arg.split_once('=').ok_or(SecretArgError::MissingEquals)?;
    let name = name.trim();
    if name.is_empty() {
        return Err(SecretArgError::EmptyName);
    }
    let empty = |prefix, what| SecretArgError::EmptySource {
        name: name.to_owned(),
        prefix,
        what,
    };
    let source = if let Some(var) = source.strip_prefix("env:") {
        if var.is_empty() {
            return Err(empty("env:", "variable name"));
        }
        SecretSource::Env(var.to_owned())
    } else if let Some(path) = source.strip_prefix("file:") {
        if path.is_empty() {
            return Err(empty("file:", "path"));
        }
        SecretSource::File(path.to_owned())
    } else if let Some(command) = source.strip_prefix("cmd:") {
        let words = shlex::split(command).ok_or_else(|| SecretArgError::CommandWords {
            name: name.to_owned(),
        })?;
        if words.is_empty() {
            return Err(empty("cmd:", "program"));
        }
        SecretSource::Command(words)
    } else if source == "-" {
        SecretSource::Stdin
    } else if source == "prompt" {
        SecretSource::Prompt
    } else if let Some(scheme) = source
        .split_once(':')
        .and_then(|(scheme, _)| OTHER_SCHEMES.iter().find(|known| **known == scheme))
    {
        return Err(SecretArgError::UnknownScheme {
            name: name.to_owned(),
            scheme,
        });
    } else {
        return Err(SecretArgError::Literal {
            name: name.to_owned(),
        });
    };
    Ok(SecretArg {
        name: name.to_owned(),
        source,
    })
}
