//! Reading the run's secrets from their sources. Never from a literal on the command line.

use std::io::BufRead;
use std::path::Path;

use anyhow::Context;
use tether_config::placeholder::placeholder_names;
use tether_config::{
    InputPrompt, Origin, SecretArg, SecretSource, SecretValue, Secrets, parse_config,
    parse_secret_args,
};
use tether_driver::McpSpec;

use crate::cli::SecretArgs;
use crate::exit::UsageError;

/// Reads every `--secrets-file` (in order; a later file's value for a name replaces an earlier
/// one's), then every `--secret`, which replaces a file's value for its name. `--secret`
/// arguments themselves are checked by [`tether_config::parse_secret_args`], the parser
/// `tether-server admin` uses too: a name given twice, an empty name or a literal value is a
/// usage error before any source is read.
pub fn read(args: &SecretArgs) -> anyhow::Result<Secrets> {
    let parsed = parse_secret_args(&args.secret).map_err(|e| UsageError::new(e.to_string()))?;
    let mut secrets = Secrets::new();
    for file in &args.secrets_file {
        for (name, value) in read_dotenv(file)? {
            secrets.insert(name, value);
        }
    }
    for arg in &parsed {
        let value = read_source(arg)?;
        secrets.insert(arg.name.clone(), value);
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

/// The VS Code inputs (`${input:ID}`) that a JSON spec's servers use and `secrets` lacks, once
/// each, in spec order.
pub fn missing_inputs(specs: &[McpSpec], secrets: &Secrets) -> Vec<InputPrompt> {
    let mut missing: Vec<InputPrompt> = Vec::new();
    for spec in specs {
        let McpSpec::Json { text, .. } = spec else {
            continue;
        };
        let Ok(parsed) = parse_config(text, Origin::User) else {
            continue;
        };
        for input in parsed.inputs {
            // In a template string (a variable) or inside a captured env/header value.
            let used = parsed.servers.iter().any(|server| {
                server.server.has_variable(&input.id)
                    || server.captured.values().any(|value| {
                        placeholder_names(value.value.expose()).contains(&input.id.as_str())
                    })
            });
            if used && secrets.get(&input.id).is_none() && !missing.iter().any(|m| m.id == input.id)
            {
                missing.push(input);
            }
        }
    }
    missing
}

/// When stdin is a terminal, asks for each input a spec uses and no `--secret` gave, as VS Code
/// would: with its description, hidden when `password: true`. Without a terminal nothing is
/// asked, and the run stops later naming the missing secret.
pub fn prompt_for_inputs(specs: &[McpSpec], secrets: &mut Secrets) -> anyhow::Result<()> {
    let missing = missing_inputs(specs, secrets);
    if missing.is_empty() || !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return Ok(());
    }
    for input in missing {
        let label = match &input.description {
            Some(description) => format!("{description} ({}): ", input.id),
            None => format!("{}: ", input.id),
        };
        let value = if input.password {
            rpassword::prompt_password(label)
                .with_context(|| format!("reading the input {}", input.id))?
        } else {
            eprint!("{label}");
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .with_context(|| format!("reading the input {}", input.id))?;
            strip_one_newline(&mut line);
            line
        };
        secrets.insert(input.id, SecretValue::new(value));
    }
    Ok(())
}

/// Reads a single value from `source` (`env:VAR`, `file:PATH`, `-`, `prompt`), as a
/// `--secret` source; `what` names it in errors. A literal is refused.
pub fn read_one(what: &str, source: &str) -> anyhow::Result<SecretValue> {
    let parsed = tether_config::parse_secret_args([format!("{what}={source}")])
        .map_err(|e| UsageError::new(e.to_string()))?;
    match parsed.as_slice() {
        [arg] => read_source(arg),
        _ => Err(UsageError::new(format!("{what}: expected one source")).into()),
    }
}

/// Reads one secret's value from its source.
fn read_source(arg: &SecretArg) -> anyhow::Result<SecretValue> {
    let name = &arg.name;
    let value = match &arg.source {
        SecretSource::Env(var) => std::env::var(var).map_err(|_| {
            UsageError::new(format!(
                "secret {name}: the environment variable {var} is not set (or not valid UTF-8)"
            ))
        })?,
        SecretSource::File(path) => {
            let mut text = std::fs::read_to_string(path)
                .map_err(|e| UsageError::new(format!("secret {name}: cannot read {path}: {e}")))?;
            strip_one_newline(&mut text);
            text
        }
        SecretSource::Stdin => {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .with_context(|| format!("secret {name}: cannot read stdin"))?;
            strip_one_newline(&mut line);
            line
        }
        SecretSource::Prompt => {
            if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                return Err(UsageError::new(format!(
                    "secret {name}: `prompt` needs a terminal; use env:VAR, file:PATH or - instead"
                ))
                .into());
            }
            rpassword::prompt_password(format!("{name}: "))
                .with_context(|| format!("secret {name}: cannot read the hidden input"))?
        }
    };
    Ok(SecretValue::new(value))
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

    fn secret_args(secret: &[&str]) -> SecretArgs {
        SecretArgs {
            secret: secret.iter().map(|s| (*s).to_owned()).collect(),
            secrets_file: Vec::new(),
        }
    }

    fn refusal(secret: &[&str]) -> anyhow::Error {
        read(&secret_args(secret)).expect_err("the arguments are refused")
    }

    #[test]
    fn missing_inputs_are_the_used_ones_without_a_secret() {
        let spec = |text: &str| McpSpec::parse(text).unwrap_or_else(|e| panic!("{e}"));
        let specs = [
            spec(
                r#"{"inputs": [{"id": "a", "description": "Token A", "password": true}, {"id": "b"}, {"id": "unused"}],
                    "servers": {"s": {"url": "https://h/mcp", "headers": {"Authorization": "Bearer ${input:a}"}, "type": "http"},
                                "t": {"command": "x", "args": ["${input:b}"]}}}"#,
            ),
            spec(
                r#"{"inputs": [{"id": "a"}], "servers": {"u": {"command": "y", "env": {"K": "${input:a}"}}}}"#,
            ),
        ];
        let ids = |secrets: &Secrets| -> Vec<String> {
            missing_inputs(&specs, secrets)
                .into_iter()
                .map(|input| input.id)
                .collect()
        };
        assert_eq!(ids(&Secrets::new()), ["a", "b"]);
        let given: Secrets = [("b", "value")].into_iter().collect();
        assert_eq!(ids(&given), ["a"]);
        let first = &missing_inputs(&specs, &given)[0];
        assert_eq!(first.description.as_deref(), Some("Token A"));
        assert!(first.password);
    }

    #[test]
    fn literal_values_are_refused_without_echo() {
        let error = refusal(&["TOKEN=sk-SENTINEL"]);
        let err = error.to_string();
        assert!(err.contains("ps") && err.contains("TOKEN=env:VAR"), "{err}");
        assert!(!err.contains("SENTINEL"), "{err}");
        assert_eq!(crate::exit::code(&error), crate::exit::USAGE);
    }

    /// A name given twice is refused (it used to be the later one winning), before any source
    /// is read: the variable below is never looked up.
    #[test]
    fn duplicate_and_empty_names_are_usage_errors() {
        for args in [
            &["A=env:TETHER_TEST_UNSET_1", "A=env:TETHER_TEST_UNSET_2"][..],
            &["=env:TETHER_TEST_UNSET_1"][..],
        ] {
            let error = refusal(args);
            assert!(!error.to_string().contains("UNSET"), "{error}");
            assert_eq!(crate::exit::code(&error), crate::exit::USAGE, "{error}");
        }
    }

    #[test]
    fn dotenv_forms() {
        let dir = tempfile::tempdir().expect("creating a temp dir");
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
        let err = read_dotenv(&path)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.ends_with("line 2: unterminated quote"), "{err}");
    }
}
