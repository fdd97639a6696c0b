//! `--secret NAME=cmd:PROGRAM ARGS…`: the value is what the program writes to stdout — `op
//! read …`, `pass show …`, `vault kv get -field=… …`, `gcloud auth print-access-token` — so it
//! never touches a command line or a file.
//!
//! The program runs once per command that reads the secret, without a shell (the words were
//! split by [`tether_config::parse_secret_args`]; nothing is expanded), with tether's
//! environment, stdin closed (a password manager asks through its own terminal or desktop
//! prompt) and stderr passed through (its messages are the user's to read; the value is on
//! stdout). Its exit status is checked, its output is at most [`MAX_BYTES`], UTF-8, with one
//! trailing newline (`\n` or `\r\n`) dropped; it must end within [`TIMEOUT`], or it is killed.
//! Nothing it wrote to stdout is ever shown in an error.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wait_timeout::ChildExt as _;
use zeroize::Zeroizing;

use super::{ReadError, read_all, strip_one_newline};

/// How long a `cmd:` program may run (a password manager may wait for the user to unlock it).
pub(super) const TIMEOUT: Duration = Duration::from_secs(60);

/// The most a `cmd:` program may write to stdout: a secret, not a download.
pub(super) const MAX_BYTES: u64 = 1 << 20;

/// Runs `words` (a program and its arguments) and returns its stdout as the value of the
/// secret `name`, within `timeout`.
pub(super) fn output(
    name: &str,
    words: &[String],
    timeout: Duration,
) -> Result<Zeroizing<String>, ReadError> {
    let Some((program, args)) = words.split_first() else {
        return Err(failed(name, "", "is no program (nothing after cmd:)"));
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|cause| ReadError::CommandStart {
            name: name.to_owned(),
            program: program.clone(),
            cause,
        })?;
    let started = Instant::now();
    // Read in a thread: a program that fills the pipe would otherwise never exit.
    let Some(mut stdout) = child.stdout.take() else {
        return Err(failed(name, program, "gave no output pipe"));
    };
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let read = read_all(&mut (&mut stdout).take(MAX_BYTES + 1));
        // Closing the pipe ends a program still writing past the limit (SIGPIPE).
        drop(stdout);
        let _ = sender.send(read);
    });
    let status = match child.wait_timeout(timeout) {
        Ok(Some(status)) => status,
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            let problem = format!(
                "did not finish within {} s; it was stopped",
                timeout.as_secs()
            );
            return Err(failed(name, program, &problem));
        }
        Err(error) => {
            return Err(failed(
                name,
                program,
                &format!("could not be waited for: {error}"),
            ));
        }
    };
    if !status.success() {
        return Err(failed(name, program, &format!("exited with {status}")));
    }
    // It exited; a child of its own may still hold the pipe open: wait for the rest of the time.
    let left = timeout.saturating_sub(started.elapsed());
    let mut value = match receiver.recv_timeout(left) {
        Ok(Ok(value)) => value,
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::InvalidData => {
            return Err(failed(
                name,
                program,
                "wrote something that is not UTF-8 text",
            ));
        }
        Ok(Err(error)) => {
            return Err(failed(
                name,
                program,
                &format!("output could not be read: {error}"),
            ));
        }
        Err(_) => {
            let problem =
                "exited, but its output did not end (a process it started still holds it)";
            return Err(failed(name, program, problem));
        }
    };
    if value.len() as u64 > MAX_BYTES {
        return Err(failed(
            name,
            program,
            &format!("wrote more than {MAX_BYTES} bytes"),
        ));
    }
    strip_one_newline(&mut value);
    Ok(value)
}

fn failed(name: &str, program: &str, problem: &str) -> ReadError {
    ReadError::Command {
        name: name.to_owned(),
        program: program.to_owned(),
        problem: problem.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    fn run(command: &[&str], timeout: Duration) -> Result<Zeroizing<String>, ReadError> {
        output("T", &words(command), timeout)
    }

    fn problem(command: &[&str], timeout: Duration) -> String {
        match run(command, timeout) {
            Err(error) => error.to_string(),
            Ok(_) => panic!("{command:?} was accepted"),
        }
    }

    #[test]
    fn the_value_is_stdout_with_one_newline_dropped() {
        let value = run(&["printf", "a b\\n\\n"], TIMEOUT).expect("printf runs");
        assert_eq!(value.as_str(), "a b\n");
        let value = run(&["printf", "x\\r\\n"], TIMEOUT).expect("printf runs");
        assert_eq!(value.as_str(), "x");
    }

    /// A program that does not end is stopped at the deadline, and says so.
    #[test]
    fn a_program_that_does_not_end_is_stopped() {
        let said = problem(&["sleep", "30"], Duration::from_millis(200));
        assert!(
            said.contains("sleep did not finish within 0 s; it was stopped"),
            "{said}"
        );
    }

    #[test]
    fn too_much_or_not_text_is_refused_without_being_shown() {
        let said = problem(&["head", "-c", "1048577", "/dev/zero"], TIMEOUT);
        assert!(said.contains("wrote more than 1048576 bytes"), "{said}");
        let said = problem(&["printf", "sk-BIN-SENTINEL\\377"], TIMEOUT);
        assert!(said.contains("not UTF-8"), "{said}");
        assert!(!said.contains("SENTINEL"), "{said}");
    }

    /// A program that exits while a child of its own keeps the output open is not waited for
    /// past the deadline.
    #[test]
    fn output_held_open_by_a_grandchild_ends_at_the_deadline() {
        let said = problem(
            &["sh", "-c", "sleep 30 & echo x"],
            Duration::from_millis(500),
        );
        assert!(said.contains("its output did not end"), "{said}");
    }
}
