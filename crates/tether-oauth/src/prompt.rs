//! How a login reaches the person at the keyboard: the browser step, the pasted redirect of
//! `--no-browser`, and the lines that say what is happening. [`Prompt`] is what the flow asks
//! for; [`Terminal`] is the one a command-line program uses.

use futures_util::future::BoxFuture;
use tether_config::SecretValue;
use tether_env::EnvVars;
use tokio::io::AsyncReadExt as _;

use crate::error::OAuthError;

/// The person logging in, as the flow sees them.
pub trait Prompt: Send + Sync {
    /// Shows the authorization page at `url` (opens a browser, or says to open it).
    fn open(&self, url: &str);

    /// Asks the person to open `url` themselves and paste the URL the browser is then sent to
    /// (it starts with `redirect_uri`); that pasted line, a secret (it holds the code).
    fn paste<'a>(
        &'a self,
        url: &'a str,
        redirect_uri: &'a str,
    ) -> BoxFuture<'a, Result<SecretValue, OAuthError>>;

    /// Tells the person something (a server asks for more access).
    fn tell(&self, line: &str);
}

/// The terminal: the browser through `$BROWSER` or the platform's opener, lines on stderr,
/// the pasted redirect from stdin.
#[derive(Debug, Clone, Copy, Default)]
pub struct Terminal;

/// The platform's opener of URLs in the default browser, run when `$BROWSER` is unset.
const PLATFORM_OPENER: Option<&str> = if cfg!(target_os = "macos") {
    Some("open")
} else if cfg!(any(
    target_os = "linux",
    target_os = "freebsd",
    target_os = "openbsd",
    target_os = "netbsd"
)) {
    Some("xdg-open")
} else {
    None
};

impl Prompt for Terminal {
    /// `$BROWSER URL` (through `sh -c`, the URL as `$1`) when `$BROWSER` is set, else the
    /// platform opener (`xdg-open`, `open`) with the URL also on stderr (the opener may find no
    /// browser), else the URL on stderr. Nothing waits for the browser to exit.
    fn open(&self, url: &str) {
        // Only a web page is handed to an opener (discovery refuses the rest already; this
        // holds for any caller of `open`).
        if let Err(refused) = crate::resource::web_endpoint("authorization_endpoint", url) {
            eprintln!("not opening the authorization page: {refused}");
            return;
        }
        let quiet = |command: &mut std::process::Command| {
            command
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
        };
        match std::env::var(EnvVars::BROWSER) {
            Ok(browser) if !browser.trim().is_empty() => {
                eprintln!("opening the authorization page with $BROWSER…");
                let spawned = quiet(
                    std::process::Command::new("sh")
                        .arg("-c")
                        .arg(format!("{browser} \"$1\""))
                        .arg("sh")
                        .arg(url),
                );
                if let Err(e) = spawned {
                    eprintln!("cannot run $BROWSER ({e}); open this URL yourself:\n{url}");
                }
            }
            _ => match PLATFORM_OPENER
                .map(|opener| (opener, quiet(std::process::Command::new(opener).arg(url))))
            {
                Some((opener, Ok(_))) => eprintln!(
                    "opening the authorization page with {opener}; if no browser opens, open this URL:\n{url}"
                ),
                Some((opener, Err(e))) => {
                    tracing::debug!("cannot run {opener}: {e}");
                    eprintln!("Open this URL in a browser to log in:\n{url}");
                }
                None => eprintln!("Open this URL in a browser to log in:\n{url}"),
            },
        }
    }

    /// The URL and what to do on stderr, then one line from stdin.
    fn paste<'a>(
        &'a self,
        url: &'a str,
        redirect_uri: &'a str,
    ) -> BoxFuture<'a, Result<SecretValue, OAuthError>> {
        eprintln!(
            "Open this URL in a browser, log in, then paste the URL the browser was sent to (it starts with {redirect_uri}):\n{url}"
        );
        Box::pin(read_line(tokio::io::stdin()))
    }

    fn tell(&self, line: &str) {
        eprintln!("{line}");
    }
}

/// One line of `input` (without its newline) into a secret.
pub async fn read_line(
    input: impl tokio::io::AsyncRead + Unpin,
) -> Result<SecretValue, OAuthError> {
    let mut line = String::with_capacity(4096);
    let mut input = tokio::io::BufReader::new(input);
    let mut byte = [0u8; 1];
    loop {
        let read = input.read(&mut byte).await.map_err(|e| {
            zeroize::Zeroize::zeroize(&mut line);
            OAuthError::Paste {
                reason: e.to_string(),
            }
        })?;
        if read == 0 || byte[0] == b'\n' {
            break;
        }
        line.push(char::from(byte[0]));
    }
    Ok(SecretValue::new(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_line_is_read() {
        let line = read_line(&b"http://127.0.0.1:1/callback?code=c&state=s\nmore"[..])
            .await
            .expect("a line");
        assert_eq!(line.expose(), "http://127.0.0.1:1/callback?code=c&state=s");
        let last = read_line(&b"no newline"[..]).await.expect("a line");
        assert_eq!(last.expose(), "no newline");
    }
}
