//! Reading secrets from where the user keeps them. Never from a literal on the command line:
//! [`tether_config::parse_secret_args`] refuses one before any source is read.
//!
//! Sources (`--secret NAME=SOURCE`):
//! - `env:VAR` — the variable's value as it is;
//! - `file:PATH` — the file's contents, one trailing newline (`\n` or `\r\n`) dropped;
//! - `-` — one line of stdin, its newline dropped;
//! - `prompt` — hidden input from the terminal (refused without one).
//!
//! Besides: [`read_dotenv`] (`NAME=value` lines, for `--secrets-file`) and [`read_stdin_all`]
//! (a value that may span lines, such as a PEM key).
//!
//! Every source must give a non-empty value (an empty secret renders a config that fails later
//! and far from its cause); dotenv files may list a name with an empty value. Every buffer a
//! value passes through here is zeroed when freed, also when it grows, and every value read is
//! registered with [`tether_log::register`]. Errors name the secret and its source, never a
//! value.

mod command;

use std::io::{BufRead, ErrorKind, Read};
use std::path::{Path, PathBuf};

use tether_config::{SecretArg, SecretArgError, SecretSource, SecretValue, Secrets};
use zeroize::{Zeroize as _, Zeroizing};

/// Why a secret could not be read. No variant holds a value.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A `--secret` argument was refused by [`tether_config::parse_secret_args`] (a literal, an
    /// empty name, a name twice, a second `-`); no source was read. The user fixes the argument.
    #[error(transparent)]
    Arguments(#[from] SecretArgError),
    /// `env:VAR` names a variable that is not set, or holds bytes that are not UTF-8. The user
    /// sets it.
    #[error("secret {name}: the environment variable {var} is not set (or not valid UTF-8)")]
    EnvUnset {
        /// The secret.
        name: String,
        /// The variable.
        var: String,
    },
    /// `file:PATH` could not be read. The user names a readable file.
    #[error("secret {name}: cannot read {path}: {cause}")]
    File {
        /// The secret.
        name: String,
        /// The path as given.
        path: String,
        /// The operating system's error.
        cause: std::io::Error,
    },
    /// `prompt` without a terminal on stdin. The user gives another source.
    #[error("secret {name}: `prompt` needs a terminal; use env:VAR, file:PATH or - instead")]
    NoTerminal {
        /// The secret.
        name: String,
    },
    /// The source gave an empty value. The user gives the secret itself.
    #[error("secret {name}: the value from {from} is empty; an empty secret is refused")]
    Empty {
        /// The secret.
        name: String,
        /// The source: `env:VAR`, `file:PATH`, `stdin` or `the prompt`.
        from: String,
    },
    /// Reading stdin failed (or it is not UTF-8).
    #[error("secret {name}: cannot read stdin")]
    Stdin {
        /// The secret.
        name: String,
        /// The operating system's error.
        #[source]
        cause: std::io::Error,
    },
    /// Reading the hidden input from the terminal failed.
    #[error("secret {name}: cannot read the hidden input")]
    Prompt {
        /// The secret.
        name: String,
        /// The operating system's error.
        #[source]
        cause: std::io::Error,
    },
    /// A dotenv file (`--secrets-file`) could not be read. The user names a readable file.
    #[error("cannot read --secrets-file {}: {cause}", path.display())]
    DotenvFile {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        cause: std::io::Error,
    },
    /// A `cmd:` program could not be started (not found, not executable). The user names a
    /// program on `PATH` or by its path.
    #[error("secret {name}: cannot run {program}: {cause}")]
    CommandStart {
        /// The secret.
        name: String,
        /// The program as given.
        program: String,
        /// The operating system's error.
        cause: std::io::Error,
    },
    /// A `cmd:` program failed: a non-zero exit, a signal, no end within the time allowed, an
    /// output too large or not UTF-8. What it wrote to stdout is never shown (it may be part of
    /// the secret); its stderr went to tether's own stderr as it ran.
    #[error("secret {name}: {program} {problem}")]
    Command {
        /// The secret.
        name: String,
        /// The program as given.
        program: String,
        /// What went wrong ("exited with exit status: 1", …).
        problem: String,
    },
    /// A line of a dotenv file is not `NAME=value`. The user fixes that line.
    #[error("{} line {line}: {problem}", path.display())]
    DotenvLine {
        /// The file.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        problem: &'static str,
    },
}

impl ReadError {
    /// Whether what the user gave is wrong or missing (exit 2, `crate::exit::USAGE`), rather
    /// than stdin or the terminal failing (exit 1).
    pub fn is_usage(&self) -> bool {
        match self {
            Self::Stdin { .. } | Self::Prompt { .. } => false,
            Self::Arguments(_)
            | Self::EnvUnset { .. }
            | Self::File { .. }
            | Self::NoTerminal { .. }
            | Self::Empty { .. }
            | Self::DotenvFile { .. }
            | Self::DotenvLine { .. }
            | Self::CommandStart { .. }
            | Self::Command { .. } => true,
        }
    }
}

/// Parses `args` (`NAME=SOURCE` each) with [`tether_config::parse_secret_args`], then reads
/// each value from its source, in order.
pub fn read(args: &[String]) -> Result<Secrets, ReadError> {
    let mut secrets = Secrets::new();
    for arg in tether_config::parse_secret_args(args)? {
        let value = read_source(&arg)?;
        secrets.insert(arg.name, value);
    }
    Ok(secrets)
}

/// Reads the value of `name` from one `SOURCE` as `--secret NAME=SOURCE` would (a literal is
/// refused the same way).
pub fn read_one(name: &str, source: &str) -> Result<SecretValue, ReadError> {
    let parsed = tether_config::parse_secret_args([format!("{name}={source}")])?;
    match parsed.as_slice() {
        [arg] => read_source(arg),
        // One argument parses to one secret or to an error; there is nothing else.
        _ => Err(SecretArgError::MissingEquals.into()),
    }
}

/// Reads one secret's value from its source.
pub fn read_source(arg: &SecretArg) -> Result<SecretValue, ReadError> {
    read_source_from(arg, &mut Process)
}

/// All of stdin as the value of `name` (a PEM key or JSON credentials may span lines), one
/// trailing newline dropped.
pub fn read_stdin_all(name: &str) -> Result<SecretValue, ReadError> {
    read_stdin_all_from(name, &mut Process)
}

/// Reads `NAME=value` lines: blank lines and `#` comments are skipped, `export ` is allowed,
/// values may be single-quoted (literal) or double-quoted (`\"`, `\\`, `\n`, `\t` escapes);
/// unquoted, a ` #` starts a comment. Errors name the file and line, never a value.
pub fn read_dotenv(path: &Path) -> Result<Vec<(String, SecretValue)>, ReadError> {
    let text = std::fs::File::open(path)
        .and_then(|mut file| read_all(&mut file))
        .map_err(|cause| ReadError::DotenvFile {
            path: path.to_owned(),
            cause,
        })?;
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let bad = |problem| ReadError::DotenvLine {
            path: path.to_owned(),
            line: index + 1,
            problem,
        };
        let Some((name, raw)) = line.split_once('=') else {
            return Err(bad("expected NAME=value"));
        };
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(bad("the name before '=' is empty or holds spaces"));
        }
        let value = unquote(raw.trim()).ok_or_else(|| bad("unterminated quote"))?;
        out.push((name.to_owned(), SecretValue::new(value)));
    }
    // Once for the whole file: each registration rebuilds the masker.
    tether_log::register(out.iter().map(|(_, value)| value));
    Ok(out)
}

/// Where the sources are read from: this process, or a test's stand-in.
trait Inputs {
    /// The environment variable `var`, when set and UTF-8.
    fn env(&self, var: &str) -> Option<Zeroizing<String>>;
    /// One line of stdin, its newline kept.
    fn stdin_line(&mut self) -> std::io::Result<Zeroizing<String>>;
    /// The rest of stdin.
    fn stdin_all(&mut self) -> std::io::Result<Zeroizing<String>>;
    /// Whether stdin is a terminal.
    fn is_terminal(&self) -> bool;
    /// A hidden line from the terminal, after `label`.
    fn prompt_hidden(&mut self, label: &str) -> std::io::Result<Zeroizing<String>>;
}

/// This process's environment, stdin and terminal.
struct Process;

impl Inputs for Process {
    fn env(&self, var: &str) -> Option<Zeroizing<String>> {
        std::env::var(var).ok().map(Zeroizing::new)
    }

    fn stdin_line(&mut self) -> std::io::Result<Zeroizing<String>> {
        read_line(&mut std::io::stdin().lock())
    }

    fn stdin_all(&mut self) -> std::io::Result<Zeroizing<String>> {
        read_all(&mut std::io::stdin().lock())
    }

    fn is_terminal(&self) -> bool {
        std::io::IsTerminal::is_terminal(&std::io::stdin())
    }

    fn prompt_hidden(&mut self, label: &str) -> std::io::Result<Zeroizing<String>> {
        rpassword::prompt_password(label).map(Zeroizing::new)
    }
}

fn read_source_from(arg: &SecretArg, inputs: &mut impl Inputs) -> Result<SecretValue, ReadError> {
    let name = &arg.name;
    let (mut value, from) = match &arg.source {
        SecretSource::Env(var) => {
            let value = inputs.env(var).ok_or_else(|| ReadError::EnvUnset {
                name: name.clone(),
                var: var.clone(),
            })?;
            (value, format!("env:{var}"))
        }
        SecretSource::File(path) => {
            let mut value = std::fs::File::open(path)
                .and_then(|mut file| read_all(&mut file))
                .map_err(|cause| ReadError::File {
                    name: name.clone(),
                    path: path.clone(),
                    cause,
                })?;
            strip_one_newline(&mut value);
            (value, format!("file:{path}"))
        }
        SecretSource::Command(words) => {
            let value = command::output(name, words, command::TIMEOUT)?;
            (value, format!("cmd:{}", words.join(" ")))
        }
        SecretSource::Stdin => {
            let mut value = inputs.stdin_line().map_err(|cause| ReadError::Stdin {
                name: name.clone(),
                cause,
            })?;
            strip_one_newline(&mut value);
            (value, "stdin".to_owned())
        }
        SecretSource::Prompt => {
            if !inputs.is_terminal() {
                return Err(ReadError::NoTerminal { name: name.clone() });
            }
            let value = inputs
                .prompt_hidden(&format!("{name}: "))
                .map_err(|cause| ReadError::Prompt {
                    name: name.clone(),
                    cause,
                })?;
            (value, "the prompt".to_owned())
        }
    };
    if value.is_empty() {
        return Err(ReadError::Empty {
            name: name.clone(),
            from,
        });
    }
    let value = SecretValue::new(std::mem::take(&mut *value));
    tether_log::register([&value]);
    Ok(value)
}

fn read_stdin_all_from(name: &str, inputs: &mut impl Inputs) -> Result<SecretValue, ReadError> {
    let mut value = inputs.stdin_all().map_err(|cause| ReadError::Stdin {
        name: name.to_owned(),
        cause,
    })?;
    strip_one_newline(&mut value);
    if value.is_empty() {
        return Err(ReadError::Empty {
            name: name.to_owned(),
            from: "stdin".to_owned(),
        });
    }
    let value = SecretValue::new(std::mem::take(&mut *value));
    tether_log::register([&value]);
    Ok(value)
}

fn strip_one_newline(text: &mut String) {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
}

/// Bytes in memory that is zeroed when freed, also when the buffer grows (a `Vec` growing by
/// itself would free its old copy as it is).
struct Buffer(Zeroizing<Vec<u8>>);

impl Buffer {
    fn new() -> Self {
        Self(Zeroizing::new(Vec::with_capacity(1024)))
    }

    fn extend(&mut self, bytes: &[u8]) {
        let needed = self.0.len() + bytes.len();
        if needed > self.0.capacity() {
            let mut bigger = Vec::with_capacity(needed.max(self.0.capacity() * 2));
            bigger.extend_from_slice(&self.0);
            // The old buffer is zeroed as it is dropped.
            self.0 = Zeroizing::new(bigger);
        }
        self.0.extend_from_slice(bytes);
    }

    fn into_string(mut self) -> std::io::Result<Zeroizing<String>> {
        match String::from_utf8(std::mem::take(&mut *self.0)) {
            Ok(text) => Ok(Zeroizing::new(text)),
            Err(error) => {
                error.into_bytes().zeroize();
                Err(std::io::Error::new(
                    ErrorKind::InvalidData,
                    "stream did not contain valid UTF-8",
                ))
            }
        }
    }
}

/// The rest of `reader`, as text.
fn read_all(reader: &mut impl Read) -> std::io::Result<Zeroizing<String>> {
    let mut buffer = Buffer::new();
    let mut chunk = Zeroizing::new([0u8; 4096]);
    loop {
        match reader.read(&mut chunk[..]) {
            Ok(0) => break,
            Ok(n) => buffer.extend(&chunk[..n]),
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    buffer.into_string()
}

/// One line of `reader`, its newline kept (none at the end of the input).
fn read_line(reader: &mut impl BufRead) -> std::io::Result<Zeroizing<String>> {
    let mut buffer = Buffer::new();
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            break;
        }
        match available.iter().position(|&b| b == b'\n') {
            Some(end) => {
                buffer.extend(&available[..=end]);
                reader.consume(end + 1);
                break;
            }
            None => {
                let n = available.len();
                buffer.extend(available);
                reader.consume(n);
            }
        }
    }
    buffer.into_string()
}

/// A dotenv value without its quotes; `None` for an unterminated quote. The result is never
/// longer than `raw`, so it is written without growing.
fn unquote(raw: &str) -> Option<String> {
    if let Some(rest) = raw.strip_prefix('\'') {
        return rest.strip_suffix('\'').map(str::to_owned);
    }
    let Some(rest) = raw.strip_prefix('"') else {
        // Unquoted: a trailing ` # comment` is not part of the value.
        let value = raw.split(" #").next().unwrap_or_default();
        return Some(value.trim_end().to_owned());
    };
    let inner = rest.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Stand-in inputs: given variables, given stdin, a terminal or not, a given typed line.
    #[derive(Default)]
    struct Given {
        env: HashMap<&'static str, &'static str>,
        stdin: std::io::Cursor<Vec<u8>>,
        terminal: bool,
        typed: Option<&'static str>,
    }

    impl Given {
        fn stdin(text: &str) -> Self {
            Self {
                stdin: std::io::Cursor::new(text.as_bytes().to_vec()),
                ..Self::default()
            }
        }
    }

    impl Inputs for Given {
        fn env(&self, var: &str) -> Option<Zeroizing<String>> {
            self.env.get(var).map(|v| Zeroizing::new((*v).to_owned()))
        }
        fn stdin_line(&mut self) -> std::io::Result<Zeroizing<String>> {
            read_line(&mut self.stdin)
        }
        fn stdin_all(&mut self) -> std::io::Result<Zeroizing<String>> {
            read_all(&mut self.stdin)
        }
        fn is_terminal(&self) -> bool {
            self.terminal
        }
        fn prompt_hidden(&mut self, _label: &str) -> std::io::Result<Zeroizing<String>> {
            self.typed
                .map(|t| Zeroizing::new(t.to_owned()))
                .ok_or_else(|| std::io::Error::other("no terminal input"))
        }
    }

    /// Reads every `args` from `inputs`, as [`read`] does from the process.
    fn read_from(args: &[&str], inputs: &mut Given) -> Result<Secrets, ReadError> {
        let mut secrets = Secrets::new();
        for arg in tether_config::parse_secret_args(args)? {
            let value = read_source_from(&arg, inputs)?;
            secrets.insert(arg.name, value);
        }
        Ok(secrets)
    }

    fn value(secrets: &Secrets, name: &str) -> String {
        secrets
            .get(name)
            .map(|v| v.expose().to_owned())
            .unwrap_or_else(|| panic!("no value for {name}"))
    }

    #[test]
    fn every_source_gives_its_value() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("s");
        std::fs::write(&file, "from-file \"x\"\r\n").expect("writing the secret file");
        let mut inputs = Given::stdin("from-stdin\nnext line\n");
        inputs.env.insert("VAR_A", "from-env\n");
        inputs.terminal = true;
        inputs.typed = Some("typed");
        let file_arg = format!("B=file:{}", file.display());
        let secrets = read_from(&["A=env:VAR_A", &file_arg, "C=-", "D=prompt"], &mut inputs)
            .expect("reading every source");
        // A variable's value is taken as it is; a file and a line lose one newline.
        assert_eq!(value(&secrets, "A"), "from-env\n");
        assert_eq!(value(&secrets, "B"), "from-file \"x\"");
        assert_eq!(value(&secrets, "C"), "from-stdin");
        assert_eq!(value(&secrets, "D"), "typed");
        // Each value read is masked in whatever the process prints from now on.
        assert!(!tether_log::mask("token=from-stdin").contains("from-stdin"));
    }

    /// Values longer than the first buffer and than one read arrive whole (the buffer grows by
    /// copying into a new zeroed-on-drop one). Read directly: registering long values for
    /// masking is slow in a debug build.
    #[test]
    fn a_value_longer_than_any_buffer_arrives_whole() {
        let long: String = "0123456789abcdef".repeat(1000);
        let text = format!("{long}\n{long}\n");
        let line = read_line(&mut std::io::Cursor::new(text.as_bytes())).expect("a line");
        assert_eq!(*line, format!("{long}\n"));
        let all = read_all(&mut std::io::Cursor::new(text.as_bytes())).expect("everything");
        assert_eq!(*all, text);
        // A reader that hands out a few bytes at a time.
        let mut trickle = std::io::BufReader::with_capacity(7, text.as_bytes());
        let line = read_line(&mut trickle).expect("a line");
        assert_eq!(*line, format!("{long}\n"));
        let rest = read_all(&mut trickle).expect("the rest");
        assert_eq!(*rest, format!("{long}\n"));
        let mut inputs = Given::stdin("multi\nline\n");
        let value = read_stdin_all_from("PEM", &mut inputs).expect("reading all of stdin");
        assert_eq!(value.expose(), "multi\nline");
    }

    #[test]
    fn an_empty_value_is_refused_naming_the_secret_and_source() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("empty");
        std::fs::write(&file, "\n").expect("writing the secret file");
        let file_arg = format!("T=file:{}", file.display());
        let mut inputs = Given::stdin("\n");
        inputs.env.insert("EMPTY", "");
        inputs.terminal = true;
        inputs.typed = Some("");
        for (arg, from) in [
            ("T=env:EMPTY", "env:EMPTY".to_owned()),
            (file_arg.as_str(), format!("file:{}", file.display())),
            ("T=-", "stdin".to_owned()),
            ("T=prompt", "the prompt".to_owned()),
        ] {
            let error = read_from(&[arg], &mut inputs).expect_err("an empty value is refused");
            assert_eq!(
                error.to_string(),
                format!("secret T: the value from {from} is empty; an empty secret is refused")
            );
            assert!(error.is_usage());
        }
        let error = read_stdin_all_from("T", &mut Given::stdin("\r\n")).expect_err("empty");
        assert!(matches!(error, ReadError::Empty { .. }), "{error:?}");
    }

    #[test]
    fn refusals_name_the_source_never_a_value() {
        let refuse = |args: &[&str], inputs: &mut Given| {
            read_from(args, inputs).expect_err("the arguments are refused")
        };
        let literal = refuse(&["TOKEN=hunter2"], &mut Given::default());
        assert!(literal.to_string().contains("visible"), "{literal}");
        assert!(!literal.to_string().contains("hunter2"), "{literal}");
        assert!(literal.is_usage());
        let unset = refuse(&["A=env:UNSET_VAR"], &mut Given::default());
        assert_eq!(
            unset.to_string(),
            "secret A: the environment variable UNSET_VAR is not set (or not valid UTF-8)"
        );
        let no_terminal = refuse(&["A=prompt"], &mut Given::default());
        assert!(
            no_terminal.to_string().contains("needs a terminal"),
            "{no_terminal}"
        );
        assert!(no_terminal.is_usage());
        let missing = refuse(&["A=file:/nonexistent/secret"], &mut Given::default());
        assert!(
            missing
                .to_string()
                .starts_with("secret A: cannot read /nonexistent/secret: "),
            "{missing}"
        );
        // Every argument is checked before any source is read: the variable is never asked.
        let mut inputs = Given::default();
        inputs.env.insert("X", "x");
        let twice = refuse(&["A=env:X", "A=env:Y"], &mut inputs);
        assert_eq!(
            twice.to_string(),
            "--secret A is given twice; give each secret once"
        );
        let stdin_twice = refuse(&["A=-", "B=-"], &mut Given::stdin("x\n"));
        assert!(
            stdin_twice.to_string().contains("only one"),
            "{stdin_twice}"
        );
        let mut broken = Given {
            terminal: true,
            ..Given::default()
        };
        let failed = refuse(&["A=prompt"], &mut broken);
        assert!(!failed.is_usage());
    }

    #[test]
    fn stdin_that_is_not_text_is_refused() {
        let mut inputs = Given {
            stdin: std::io::Cursor::new(vec![0xff, 0xfe, b'\n']),
            ..Given::default()
        };
        let error = read_from(&["A=-"], &mut inputs).expect_err("not UTF-8");
        assert!(matches!(error, ReadError::Stdin { .. }), "{error:?}");
    }

    #[test]
    fn one_source_reads_as_a_secret_argument_does() {
        let error = read_one("T", "sk-SENTINEL").expect_err("a literal is refused");
        assert!(!error.to_string().contains("SENTINEL"), "{error}");
        assert!(error.is_usage());
    }

    #[test]
    fn dotenv_forms() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join(".env");
        std::fs::write(
            &path,
            "# comment\n\nA=plain # note\nexport B=\"q\\\"uo\\\\te\\n\"\nC='{{lit}} $x'\nD=\n",
        )
        .expect("writing the dotenv file");
        let pairs: Vec<(String, String)> = read_dotenv(&path)
            .expect("reading the dotenv file")
            .into_iter()
            .map(|(k, v)| (k, v.expose().to_owned()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("A".to_owned(), "plain".to_owned()),
                ("B".to_owned(), "q\"uo\\te\n".to_owned()),
                ("C".to_owned(), "{{lit}} $x".to_owned()),
                ("D".to_owned(), String::new()),
            ]
        );
        std::fs::write(&path, "OK=1\nBROKEN=\"sk-SENTINEL\n").expect("writing the dotenv file");
        let error = read_dotenv(&path).expect_err("an unterminated quote");
        assert!(
            error.to_string().ends_with("line 2: unterminated quote"),
            "{error}"
        );
        assert!(!error.to_string().contains("SENTINEL"), "{error}");
        assert!(error.is_usage());
    }
}
