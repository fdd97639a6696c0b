//! A whole login: discovery, the client, the browser step (or the pasted redirect) and the
//! code exchange. The tokens it returns are not stored yet.

use std::time::Duration;

use tether_config::SecretValue;

use crate::authorization::{authorization_request, code_from_redirect};
use crate::client::OAuthClient;
use crate::discovery::Discovered;
use crate::error::{OAuthError, Step};
use crate::listener::RedirectListener;
use crate::prompt::Prompt;
use crate::registration::ClientRegistration;
use crate::token::Tokens;

/// Who tether is to the authorization server, as the user chose.
#[derive(Debug, Clone, Default)]
pub struct ClientChoice {
    /// A pre-registered client id (no registration).
    pub client_id: Option<String>,
    /// Its secret (a confidential client).
    pub client_secret: Option<SecretValue>,
    /// A checked client-id metadata document URL ([`crate::client_metadata_url`]): the client
    /// id where the authorization server supports such documents.
    pub client_metadata_url: Option<String>,
}

/// How the redirect comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirect {
    /// To the loopback listener, after [`Prompt::open`].
    Listen,
    /// Pasted by the person ([`Prompt::paste`]): for a browser on another machine.
    Paste,
}

/// What to log in to, and how.
#[derive(Debug, Clone)]
pub struct Login {
    /// The MCP server's URL.
    pub server: String,
    /// Who tether is to its authorization server.
    pub client: ClientChoice,
    /// How the redirect comes back.
    pub redirect: Redirect,
    /// How long to wait for it.
    pub timeout: Duration,
}

impl OAuthClient {
    /// Logs in: discovery (the redirect listener is bound before registration, whose redirect
    /// URI names it), the client as [`ClientChoice`] says — a client id, else the metadata
    /// document URL where supported, else dynamic registration — then
    /// [`OAuthClient::authorize`]. The tokens are returned, not stored.
    pub async fn login(&self, login: Login, prompt: &dyn Prompt) -> Result<Tokens, OAuthError> {
        let Login {
            server,
            client,
            redirect,
            timeout,
        } = login;
        let discovered = self
            .discover(&server)
            .await
            .map_err(|e| e.during(Step::Discovery { server }))?;
        tracing::debug!(
            resource = %discovered.resource,
            authorization_endpoint = %discovered.authorization_endpoint,
            token_endpoint = %discovered.token_endpoint,
            "OAuth discovery"
        );
        let listener = RedirectListener::bind().await?;
        let ClientChoice {
            client_id,
            client_secret,
            client_metadata_url,
        } = client;
        let metadata_document =
            client_metadata_url.filter(|_| discovered.client_metadata_documents);
        let client = match (client_id, metadata_document) {
            (Some(id), _) => ClientRegistration::preregistered(id, client_secret, &discovered),
            (None, Some(url)) => {
                tracing::debug!(%url, "the client-id metadata document URL is the client id");
                ClientRegistration::metadata_document(&url)
            }
            (None, None) => self
                .register(&discovered, listener.redirect_uri())
                .await
                .map_err(|e| e.during(Step::Registration))?,
        };
        self.authorize(&discovered, &client, listener, redirect, timeout, prompt)
            .await
    }

    /// The browser step (or the pasted redirect, the listener then closed unused) bounded by
    /// `timeout`, and the code exchange: the tokens for `discovered` with `client`, not yet
    /// stored.
    pub async fn authorize(
        &self,
        discovered: &Discovered,
        client: &ClientRegistration,
        listener: RedirectListener,
        redirect: Redirect,
        timeout: Duration,
        prompt: &dyn Prompt,
    ) -> Result<Tokens, OAuthError> {
        let pending = authorization_request(discovered, client, listener.redirect_uri())?;
        let code = match redirect {
            Redirect::Paste => {
                drop(listener);
                let pasted = tokio::time::timeout(
                    timeout,
                    prompt.paste(&pending.url, &pending.redirect_uri),
                )
                .await
                .map_err(|_| OAuthError::TimedOut(timeout.as_secs()))??;
                code_from_redirect(pasted.expose().trim(), &pending.state)?
            }
            Redirect::Listen => {
                prompt.open(&pending.url);
                listener.code(&pending.state, timeout).await?
            }
        };
        self.exchange(discovered, client, &pending, &code)
            .await
            .map_err(|e| e.during(Step::CodeExchange))
    }
}
