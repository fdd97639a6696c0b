//! Reading the run's secrets from their sources. Never from a literal on the command line.

use std::io::BufRead;
use std::path::Path;

use anyhow::Context;
use tether_config::{SecretValue, Secrets};

use crate::cli::SecretArgs;
use crate::exit::UsageError;

/// Reads every `--secrets-file` (in order) then every `--secret` (later ones win).
pub fn read(args: &SecretArgs) -> anyhow::Result<Secrets> {
    let mut secrets = Secrets::new();
    for file in &args.secrets_file {
        for (name, value) in read_dotenv(file)? {
            secrets.insert(name, value);
        }
    }
    let mut stdin_used = false;
    for spec in &args.secret {
        let (name, value) = read_one(spec, &mut stdin_used)?;
        secrets.insert(name, value);
    }
    Ok(secrets)
}

/// The environment variables `--secret NAME=env:VAR` reads values from: a hand-off's exec shim
/// removes them from every stdio server's environment (they hold secrets meant only for the
/// servers whose config names them).
pub fn env_source_names(args: &SecretArgs) -> Vec<String> {
    args.secret
        .iter()
        .filter_map(|spec| spec.split_once('=').map(|(_, source)| source))
        .filter_map(|source| source.strip_prefix("env:"))
        .map(str::to_owned)
        .collect()
}

fn read_one(spec: &str, stdin_used: &mut bool) -> anyhow::Result<(String, SecretValue)> {
    let Some((name, source)) = spec.split_once('=') else {
        return Err(UsageError::new(
            "--secret needs NAME=SOURCE (got a value without '='); SOURCE is env:VAR, file:PATH, - or prompt",
        )
        .into());
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(UsageError::new("--secret needs a NAME before '='").into());
    }
    let value = if let Some(var) = source.strip_prefix("env:") {
        std::env::var(var).map_err(|_| {
            UsageError::new(format!(
                "secret {name}: the environment variable {var} is not set (or not valid UTF-8)"
            ))
        })?
    } else if let Some(path) = source.strip_prefix("file:") {
        let mut text = std::fs::read_to_string(path)
            .map_err(|e| UsageError::new(format!("secret {name}: cannot read {path}: {e}")))?;
        strip_one_newline(&mut text);
        text
    } else if source == "-" {
        if *stdin_used {
            return Err(UsageError::new(format!(
                "secret {name}: only one --secret can read from stdin (-)"
            ))
            .into());
        }
        *stdin_used = true;
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .with_context(|| format!("secret {name}: cannot read stdin"))?;
        strip_one_newline(&mut line);
        line
    } else if source == "prompt" {
        if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            return Err(UsageError::new(format!(
                "secret {name}: `prompt` needs a terminal; use env:VAR, file:PATH or - instead"
            ))
            .into());
        }
        rpassword::prompt_password(format!("{name}: "))
            .with_context(|| format!("secret {name}: cannot read the hidden input"))?
    } else {
        return Err(UsageError::new(format!(
            "secret {name}: a literal value on the command line is refused, because every user on this machine can read it through `ps`; use {name}=env:VAR, {name}=file:PATH, {name}=- (stdin) or {name}=prompt"
        ))
        .into());
    };
    Ok((name.to_owned(), SecretValue::new(value)))
}

fn strip_one_newline(text: &mut String) {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
}

/// Reads `NAME=value` lines: blank lines and `#` comments are skipped, `export ` is allowed,
/// values may be single-quoted (literal) or double-quoted (`\"`, `\\`, `\n` escapes).
/// Errors name the file and line, never a value.
pub fn read_dotenv(path: &Path) -> anyhow::Result<Vec<(String, SecretValue)>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError::new(format!(
            "cannot read --secrets-file {}: {e}",
            path.display()
        ))
    })?;
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let bad =
            |what: &str| UsageError::new(format!("{} line {}: {what}", path.display(), index + 1));
        let Some((name, raw)) = line.split_once('=') else {
            return Err(bad("expected NAME=value").into());
        };
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(bad("the name before '=' is empty or holds spaces").into());
        }
        let value = unquote(raw.trim()).ok_or_else(|| bad("unterminated quote"))?;
        out.push((name.to_owned(), SecretValue::new(value)));
    }
    Ok(out)
}

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
    use super::*;

    #[test]
    fn literal_values_are_refused_without_echo() {
        let err = read_one("TOKEN=sk-SENTINEL", &mut false)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("ps") && err.contains("TOKEN=env:VAR"), "{err}");
        assert!(!err.contains("SENTINEL"), "{err}");
    }

    #[test]
    fn dotenv_forms() {
        let dir = tempfile::tempdir().expect("creating a temporary directory");
        let path = dir.path().join(".env");
        std::fs::write(
            &path,
            "# comment\n\nA=plain # note\nexport B=\"q\\\"uo\\\\te\\n\"\nC='{{lit}} $x'\nD=\n",
        )
        .expect("writing the .env file");
        let pairs: Vec<(String, String)> = read_dotenv(&path)
            .expect("reading the .env file")
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
        std::fs::write(&path, "OK=1\nBROKEN=\"sk-SENTINEL\n").expect("writing the .env file");
        let err = read_dotenv(&path)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.ends_with("line 2: unterminated quote"), "{err}");
    }
}
