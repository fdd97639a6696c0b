//! The run's secrets: every `--secrets-file` and `--secret`, read by `tether_clikit::secrets`
//! (the readers `tether-server` uses too: an empty value is refused, buffers are zeroed, each
//! value is registered for masking), and the prompt for a VS Code input a spec uses (which
//! inputs, the driver's session builder says).
//! Never from a literal on the command line.

use std::io::BufRead;

use anyhow::Context;
use tether_config::{InputPrompt, SecretValue, Secrets, parse_secret_args};

use crate::cli::SecretArgs;

/// Reads every `--secrets-file` (in order; a later file's value for a name replaces an earlier
/// one's), then every `--secret`, which replaces a file's value for its name. `--secret`
/// arguments themselves are checked by [`tether_config::parse_secret_args`], the parser
/// `tether-server admin` uses too: a name given twice, an empty name or a literal value is a
/// usage error before any source is read.
pub fn read(args: &SecretArgs) -> anyhow::Result<Secrets> {
    read_except(args, &[])
}

/// [`read`], leaving out the `--secret` values of the inputs in `skip` (their sources are not
/// read at all: a VS Code export writes `${input:ID}`, so no value is needed or prompted for).
pub fn read_except(args: &SecretArgs, skip: &[InputPrompt]) -> anyhow::Result<Secrets> {
    let mut parsed = parse_secret_args(&args.secret)?;
    parsed.retain(|arg| !skip.iter().any(|input| input.id == arg.name));
    let mut secrets = Secrets::new();
    for file in &args.secrets_file {
        for (name, value) in tether_clikit::secrets::read_dotenv(file)? {
            secrets.insert(name, value);
        }
    }
    for arg in &parsed {
        let value = tether_clikit::secrets::read_source(arg)?;
        secrets.insert(arg.name.clone(), value);
    }
    Ok(secrets)
}

/// Reads the value of `name` from one `SOURCE` as `--secret NAME=SOURCE` would (a literal is
/// refused the same way; so is an empty value).
pub fn read_one(name: &str, source: &str) -> anyhow::Result<SecretValue> {
    Ok(tether_clikit::secrets::read_one(name, source)?)
}

/// All of stdin as one value (a PEM key or JSON credentials may span lines), without one
/// trailing newline; an empty value is refused.
pub fn read_stdin_all(name: &str) -> anyhow::Result<SecretValue> {
    Ok(tether_clikit::secrets::read_stdin_all(name)?)
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

/// Asks for `id` on the terminal as `DESCRIPTION (ID): `: hidden input when `hidden`, else one
/// line (its newline dropped).
pub fn ask(id: &str, description: Option<&str>, hidden: bool) -> anyhow::Result<SecretValue> {
    let label = match description {
        Some(description) => format!("{description} ({id}): "),
        None => format!("{id}: "),
    };
    let value = if hidden {
        rpassword::prompt_password(label).with_context(|| format!("reading the input {id}"))?
    } else {
        eprint!("{label}");
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .with_context(|| format!("reading the input {id}"))?;
        strip_one_newline(&mut line);
        line
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
}
