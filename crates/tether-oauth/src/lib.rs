//! The OAuth 2.1 client tether logs in to remote MCP servers with (the MCP authorization
//! flow), and the tokens it keeps. specs/oauth/TECH.md describes the flow step by step.
//!
//! - [`OAuthClient`] sends every request: [`OAuthClient::discover`] (an unauthenticated
//!   probe, RFC 9728 protected resource metadata, RFC 8414 / OpenID authorization server
//!   metadata), [`OAuthClient::register`] (RFC 7591; or a pre-registered client, or a
//!   client-id metadata document URL as the client id), [`OAuthClient::authorize`] (code +
//!   PKCE S256 with `state`, `resource` and `scope`; the redirect comes to a
//!   [`RedirectListener`] on loopback or is pasted), [`OAuthClient::exchange`] and
//!   [`OAuthClient::refresh`]; [`OAuthClient::login`] is all of them in order.
//! - [`Tokens`] is what is stored per server; [`LocalTokens`] stores it in the secret store
//!   through the local store, and [`StoredTokens`] uses it at run time: applied to a
//!   the driver's `Session` ([`tether_bearer::BearerTarget`]), refreshed before expiry, and renewed as the driver's
//!   [`tether_bearer::BearerAuth`] (a refresh on 401, a step-up on 403 `insufficient_scope`).
//! - Expiry is decided by a [`Clock`] the caller passes ([`SystemClock`] in a program,
//!   a clock the test moves); the person logging in is reached through a [`Prompt`]
//!   ([`Terminal`]: `$BROWSER` or the platform opener, stderr, stdin).
//!
//! **Invariant:** a token, code, verifier or client secret is only ever a
//! [`tether_config::SecretValue`], from the moment it is parsed or minted, and is registered
//! with [`tether_log::register`] then; no error, log line or `Debug` print holds one, and no
//! error quotes a server's body ([`OAuthError`]).
//!
//! **Invariant:** the redirect listener admits through [`tether_http::Admission`], like every
//! listener of tether's.
//!
//! ```
//! use tether_oauth::{OAuthError, code_from_redirect};
//!
//! let code = code_from_redirect("/callback?code=c0de&state=s1", "s1").unwrap();
//! assert_eq!(code.expose(), "c0de");
//! // A redirect of another login is told apart by its type, not by its message.
//! let forged = code_from_redirect("/callback?code=c0de&state=forged", "s1");
//! assert!(matches!(forged, Err(OAuthError::StateMismatch)));
//! ```
//!
//! A login, then the tokens' use at run time:
//!
//! ```no_run
//! # async fn example(open: std::sync::Arc<dyn tether_oauth::OpenStore>) -> Result<(), tether_oauth::OAuthError> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tether_oauth::{ClientChoice, Login, OAuthClient, Redirect, SystemClock, Terminal};
//!
//! let client = OAuthClient::new(Arc::new(SystemClock))?;
//! let login = Login {
//!     server: "https://mcp.example.com/mcp".to_owned(),
//!     client: ClientChoice::default(),
//!     redirect: Redirect::Listen,
//!     timeout: Duration::from_secs(300),
//! };
//! let tokens = client.login(login, &Terminal).await?;
//! let store = tether_oauth::LocalTokens::new(open);
//! tether_oauth::TokenStore::save(&store, &tokens)?;
//! let stored = tether_oauth::StoredTokens::new(Arc::new(store), Arc::new(Terminal), Arc::new(SystemClock));
//! let bearer_auth = stored.bearer_auth(); // for tether_driver::StartOptions::bearer_auth
//! # let _ = bearer_auth;
//! # Ok(())
//! # }
//! ```

mod assertion;
mod authorization;
mod challenge;
mod client;
mod clock;
mod discovery;
pub mod dpop;
mod error;
mod listener;
mod login;
mod prompt;
mod registration;
mod renew;
mod resource;
mod shared;
pub mod store;
mod token;
mod wire;

pub use authorization::{
    IssCheck, Pending, authorization_request, code_challenge, code_from_redirect,
    code_from_response,
};
pub use challenge::step_up_scope;
pub use client::OAuthClient;
pub use clock::{Clock, SystemClock};
pub use discovery::{Discovered, Probe};
pub use error::{OAuthError, Step};
pub use listener::{ACCEPTED_PAGE, REFUSED_PAGE, RedirectListener};
pub use login::{ClientChoice, Enterprise, Login, Redirect};
pub use prompt::{Prompt, Terminal, read_line};
pub use registration::{AuthMethod, ClientRegistration, client_metadata_url};
pub use renew::{STEP_UP_TIMEOUT, StoredTokens};
pub use resource::canonical_resource;
pub use shared::LoginBy;
pub use store::{LocalTokens, OpenError, OpenStore, TokenStore};
pub use token::{Grant, IdentityProvider, REFRESH_MARGIN, Tokens};
