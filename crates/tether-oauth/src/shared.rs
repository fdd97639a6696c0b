//! One login per server at a time, across tether processes: two runs that need the same
//! login at once (two terminals, two agents starting the same server) share one browser flow
//! instead of opening two that clobber each other's stored tokens.
//!
//! The lock is an exclusive `flock` on `oauth-<key>.lock` in the store's directory (`<key>`
//! as the tokens' storage key, so no URL reaches a file name). The first process takes it and
//! logs in; a second finds it held, says so on the terminal, and waits (bounded by the
//! login's timeout) for it to be released. It then uses the tokens the first one stored,
//! when they are new since it began waiting; otherwise (the first login failed) it logs in
//! itself, holding the lock. The kernel releases a lock whose holder dies.

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};

use crate::client::OAuthClient;
use crate::error::OAuthError;
use crate::login::Login;
use crate::prompt::Prompt;
use crate::resource::canonical_resource;
use crate::store::TokenStore;
use crate::token::Tokens;

/// How often a waiting process looks at the lock again.
const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// Who did the login [`OAuthClient::login_once`] returns the tokens of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginBy {
    /// This process (the browser step was its own).
    This,
    /// Another tether process, whose login this one waited for.
    Another,
}

impl std::fmt::Display for LoginBy {
    /// What a program says once the login is done.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::This => "logged in",
            Self::Another => "logged in by the other tether process",
        })
    }
}

/// The exclusive lock on one server's logins (and renewals), held until dropped.
pub(crate) struct LoginLock {
    _held: Flock<File>,
}

/// Takes the lock of `server`'s logins in `dir` without waiting; `Ok(None)` when another
/// process holds it.
fn try_lock(dir: &Path, server: &str) -> Result<Option<LoginLock>, OAuthError> {
    let path = dir.join(format!("oauth-{}.lock", crate::store::key(server)));
    let mut options = OpenOptions::new();
    options.create(true).truncate(false).write(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(&path).map_err(|e| OAuthError::Lock {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(held) => Ok(Some(LoginLock { _held: held })),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, errno)) => Err(OAuthError::Lock {
            path: path.display().to_string(),
            reason: errno.desc().to_owned(),
        }),
    }
}

/// The lock of `server`'s logins and renewals in `dir`, waiting for another process to release
/// it (at most `wait`): a renewal takes it so that two runs refreshing one token do not both
/// spend its refresh token (the second would get `invalid_grant`, and an authorization server
/// that detects reuse revokes the whole grant).
pub(crate) async fn lock_waiting(
    dir: &Path,
    server: &str,
    wait: Duration,
) -> Result<LoginLock, OAuthError> {
    let deadline = Instant::now() + wait;
    loop {
        if let Some(lock) = try_lock(dir, server)? {
            return Ok(lock);
        }
        if Instant::now() >= deadline {
            return Err(OAuthError::TimedOut(wait.as_secs()));
        }
        tokio::time::sleep(LOOK_AGAIN).await;
    }
}

impl OAuthClient {
    /// [`OAuthClient::login`] under the store's lock of the server's logins, the tokens
    /// saved in `store` before the lock is released; or, when another tether process is
    /// logging in to the same server, its tokens once it is done (see the module's doc).
    /// Without a lock directory ([`TokenStore::lock_dir`]) it is a plain login, then saved.
    pub async fn login_once(
        &self,
        login: Login,
        prompt: &dyn Prompt,
        store: &dyn TokenStore,
    ) -> Result<(Tokens, LoginBy), OAuthError> {
        let server = canonical_resource(&login.server)?;
        let Some(dir) = store.lock_dir()? else {
            let tokens = self.login(login, prompt).await?;
            store.save(&tokens)?;
            return Ok((tokens, LoginBy::This));
        };
        let before = store.load(&server)?;
        let (lock, waited) = match try_lock(&dir, &server)? {
            Some(lock) => (lock, false),
            None => {
                prompt.tell(&format!(
                    "another tether process is logging in to {server}: waiting for it to finish (at most {} s)",
                    login.timeout.as_secs()
                ));
                let deadline = Instant::now() + login.timeout;
                let lock = loop {
                    if let Some(lock) = try_lock(&dir, &server)? {
                        break lock;
                    }
                    if Instant::now() >= deadline {
                        return Err(OAuthError::TimedOut(login.timeout.as_secs()));
                    }
                    tokio::time::sleep(LOOK_AGAIN).await;
                };
                (lock, true)
            }
        };
        // New tokens since this process looked (another one logged in while it waited, or
        // finished just before the lock was taken): theirs, no second browser step.
        if let Some(tokens) = store.load(&server)?
            && before
                .as_ref()
                .is_none_or(|old| old.access_token != tokens.access_token)
        {
            drop(lock);
            return Ok((tokens, LoginBy::Another));
        }
        if waited {
            prompt.tell(&format!(
                "the other login to {server} stored nothing: logging in here"
            ));
        }
        let tokens = self.login(login, prompt).await?;
        store.save(&tokens)?;
        drop(lock);
        Ok((tokens, LoginBy::This))
    }
}
