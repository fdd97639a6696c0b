//! Which argument of a launch is the script an interpreter runs: what the sandbox grants with
//! its package (§2 of specs/sandbox/TECH.md), and what a bundle's manifest must keep inside the
//! bundle (`tether-registry`'s mcpb). One rule for both, so that they cannot drift apart.

/// Programs whose first argument that is not a flag (or a `run` verb) is the script they run.
const INTERPRETERS: [&str; 12] = [
    "node", "nodejs", "deno", "bun", "python", "python3", "ruby", "perl", "sh", "bash", "dash",
    "zsh",
];

/// Whether a program named `name` (its file name: `node`, `python3.12`) is an interpreter.
pub fn is_interpreter(name: &str) -> bool {
    INTERPRETERS.contains(&name)
        || name
            .strip_prefix("python3.")
            .is_some_and(|minor| !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit()))
}

/// The index in `args` of the script an interpreter runs: its first argument that is neither a
/// flag nor `run`.
pub fn script_index<A: AsRef<std::ffi::OsStr>>(args: &[A]) -> Option<usize> {
    args.iter().position(|arg| {
        let bytes = arg.as_ref().as_encoded_bytes();
        !bytes.starts_with(b"-") && bytes != b"run"
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpreters_and_their_script_argument() {
        assert!(is_interpreter("node") && is_interpreter("python3.12"));
        assert!(!is_interpreter("python3.") && !is_interpreter("npx"));
        assert_eq!(script_index(&["--inspect", "run", "x.js", "y"]), Some(2));
        assert_eq!(script_index(&["-u"]), None);
    }
}
