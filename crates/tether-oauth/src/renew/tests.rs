//! Tests of renewal: a refresh token spent once, within the margin by the clock, refusals typed
//! and renewed, tokens kept with their authorization server; the other grants and DPoP below.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::{Value, json};
use tether_bearer::BearerAuth as _;

use super::*;
use crate::clock::ManualClock;
use crate::registration::{AuthMethod, ClientRegistration};

/// Tokens in memory.
#[derive(Default)]
struct Memory(Mutex<HashMap<String, Tokens>>);

impl Memory {
    fn get(&self, server: &str) -> Option<Tokens> {
        self.0.lock().expect("the map").get(server).cloned()
    }
}

impl TokenStore for Memory {
    fn load(&self, server: &str) -> Result<Option<Tokens>, OAuthError> {
        Ok(self.get(server))
    }

    fn save(&self, tokens: &Tokens) -> Result<(), OAuthError> {
        self.0
            .lock()
            .expect("the map")
            .insert(tokens.server.clone(), tokens.clone());
        Ok(())
    }
}

/// A prompt no test of renewal reaches.
struct Nobody;

impl Prompt for Nobody {
    fn open(&self, _: &str) {}

    fn paste<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<SecretValue, OAuthError>> {
        Box::pin(async { Err(OAuthError::NoCode) })
    }

    fn tell(&self, _: &str) {}
}

/// What the test token endpoint answers its `n`th request (from 1).
type Answer = fn(u64) -> (StatusCode, Value);

/// A token endpoint on loopback: its URL and how many requests it has had.
async fn token_endpoint(answer: Answer) -> (String, Arc<AtomicU64>) {
    let count = Arc::new(AtomicU64::new(0));
    let router = Router::new()
        .route(
            "/token",
            post(
                |State((count, answer)): State<(Arc<AtomicU64>, Answer)>, body: String| async move {
                    assert!(body.contains("grant_type=refresh_token"), "{body}");
                    assert!(body.contains("resource="), "{body}");
                    let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                    let (status, value) = answer(n);
                    (status, value.to_string())
                },
            ),
        )
        .with_state((Arc::clone(&count), answer));
    let address = serve(router).await;
    (format!("http://{address}/token"), count)
}

/// Serves `router` on loopback: its address.
async fn serve(router: Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding loopback");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

const SERVER: &str = "http://127.0.0.1:1/mcp";
const NOW: i64 = 1_700_000_000;

fn stored(token_endpoint: &str, expires_at: Option<i64>, refresh: bool) -> Tokens {
    Tokens {
        server: SERVER.to_owned(),
        resource: SERVER.to_owned(),
        access_token: "AT-0".into(),
        refresh_token: refresh.then(|| SecretValue::from("RT-0")),
        expires_at,
        token_endpoint: token_endpoint.to_owned(),
        client: ClientRegistration {
            client_id: "client".to_owned(),
            client_secret: None,
            auth_method: AuthMethod::None,
        },
        scope: Some("mcp".to_owned()),
        redirect_uri: None,
        issuer: None,
        grant: crate::token::Grant::AuthorizationCode,
        dpop_key: None,
        dpop_bound: false,
        assertion_file: None,
        idp: None,
    }
}

fn source(store: &Arc<Memory>, clock: &Arc<ManualClock>) -> StoredTokens {
    let store: Arc<dyn TokenStore> = Arc::clone(store) as Arc<dyn TokenStore>;
    let clock: Arc<dyn Clock> = Arc::clone(clock) as Arc<dyn Clock>;
    StoredTokens::new(store, Arc::new(Nobody), clock)
}

fn fresh(n: u64) -> (StatusCode, Value) {
    (
        StatusCode::OK,
        json!({"access_token": format!("AT-{n}"), "refresh_token": format!("RT-{n}"),
            "expires_in": 3600, "token_type": "Bearer"}),
    )
}

#[tokio::test]
async fn a_token_is_refreshed_once_it_is_within_the_margin_by_the_clock() {
    let (endpoint, requests) = token_endpoint(fresh).await;
    let clock = Arc::new(ManualClock::at(NOW));
    let store = Arc::new(Memory::default());
    store
        .save(&stored(&endpoint, Some(NOW + 3600), true))
        .expect("saving");
    let tokens = source(&store, &clock);

    // An hour from expiry: used as it is.
    let token = tokens.current_token(SERVER).await.expect("a token");
    assert_eq!(token.as_ref().map(SecretValue::expose), Some("AT-0"));
    assert_eq!(requests.load(Ordering::SeqCst), 0);

    // 59 minutes on, 60 s are left: refreshed before use, and stored.
    clock.advance(Duration::from_secs(3540));
    let token = tokens.current_token(SERVER).await.expect("a token");
    assert_eq!(token.as_ref().map(SecretValue::expose), Some("AT-1"));
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    let kept = store.get(SERVER).expect("stored tokens");
    assert_eq!(kept.access_token.expose(), "AT-1");
    assert_eq!(
        kept.refresh_token.as_ref().map(SecretValue::expose),
        Some("RT-1")
    );
    assert_eq!(kept.expires_at, Some(NOW + 3540 + 3600), "by the clock");
    assert_eq!(kept.scope.as_deref(), Some("mcp"), "the scope held is kept");

    // The refreshed token is an hour from expiry again.
    let token = tokens.current_token(SERVER).await.expect("a token");
    assert_eq!(token.as_ref().map(SecretValue::expose), Some("AT-1"));
    assert_eq!(requests.load(Ordering::SeqCst), 1);
}

/// [`Memory`] with a lock directory, as the local store has: renewals are shared.
struct Locked(Memory, tempfile::TempDir);

impl TokenStore for Locked {
    fn load(&self, server: &str) -> Result<Option<Tokens>, OAuthError> {
        self.0.load(server)
    }

    fn save(&self, tokens: &Tokens) -> Result<(), OAuthError> {
        self.0.save(tokens)
    }

    fn lock_dir(&self) -> Result<Option<std::path::PathBuf>, OAuthError> {
        Ok(Some(self.1.path().to_owned()))
    }
}

#[tokio::test]
async fn concurrent_renewals_of_one_token_spend_its_refresh_token_once() {
    // The authorization server rotates refresh tokens: the first refresh with RT-0 wins,
    // a second use of RT-0 is refused (reuse).
    let (endpoint, requests) = token_endpoint(|n| {
        if n == 1 {
            fresh(1)
        } else {
            (StatusCode::BAD_REQUEST, json!({"error": "invalid_grant"}))
        }
    })
    .await;
    let clock = Arc::new(ManualClock::at(NOW));
    let store = Arc::new(Locked(
        Memory::default(),
        tempfile::tempdir().expect("a lock directory"),
    ));
    store
        .save(&stored(&endpoint, Some(NOW - 1), true))
        .expect("saving");
    let clock_dyn: Arc<dyn Clock> = Arc::clone(&clock) as Arc<dyn Clock>;
    let runs: Vec<StoredTokens> = (0..4)
        .map(|_| {
            let store: Arc<dyn TokenStore> = Arc::clone(&store) as Arc<dyn TokenStore>;
            StoredTokens::new(store, Arc::new(Nobody), Arc::clone(&clock_dyn))
        })
        .collect();
    let tokens =
        futures_util::future::join_all(runs.iter().map(|run| run.current_token(SERVER))).await;
    for token in tokens {
        let token = token.expect("a renewed token, not invalid_grant");
        assert_eq!(token.as_ref().map(SecretValue::expose), Some("AT-1"));
    }
    assert_eq!(requests.load(Ordering::SeqCst), 1, "one refresh");
}

#[tokio::test]
async fn a_refused_refresh_is_typed_and_never_quotes_the_body() {
    let (endpoint, requests) = token_endpoint(|_| {
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "invalid_grant", "error_description": "SENTINEL-BODY RT-0"}),
        )
    })
    .await;
    let clock = Arc::new(ManualClock::at(NOW));
    let store = Arc::new(Memory::default());
    store
        .save(&stored(&endpoint, Some(NOW - 1), true))
        .expect("saving");
    let tokens = source(&store, &clock);
    let refused = tokens.current_token(SERVER).await;
    let Err(error) = refused else {
        panic!("refreshed against a refusing endpoint: {refused:?}");
    };
    assert!(
        matches!(
            &error,
            OAuthError::TokenRefused { status, code: Some(code), .. }
                if *status == StatusCode::BAD_REQUEST && code == "invalid_grant"
        ),
        "{error:?}"
    );
    let text = format!("{error} {error:?}");
    assert!(
        !text.contains("SENTINEL") && !text.contains("RT-0"),
        "{text}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    assert_eq!(
        store.get(SERVER).map(|t| t.access_token),
        Some(SecretValue::from("AT-0")),
        "nothing stored"
    );
    // The driver's renewal: no token, and the same refusal again.
    assert_eq!(tokens.refresh(SERVER.to_owned()).await, None);
    assert_eq!(requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_expired_token_without_a_refresh_token_is_not_sent() {
    let (endpoint, requests) = token_endpoint(fresh).await;
    let clock = Arc::new(ManualClock::at(NOW));
    let store = Arc::new(Memory::default());
    store
        .save(&stored(&endpoint, Some(NOW + 30), false))
        .expect("saving");
    let tokens = source(&store, &clock);
    assert!(matches!(
        tokens.current_token(SERVER).await,
        Err(OAuthError::ExpiredWithoutRefresh)
    ));
    assert_eq!(requests.load(Ordering::SeqCst), 0);
    assert_eq!(
        tokens.current_token("http://127.0.0.1:1/other").await.ok(),
        Some(None),
        "nothing stored: no token"
    );
}

#[tokio::test]
async fn a_refused_token_is_renewed_whatever_its_expiry() {
    // The answer leaves out the refresh token and the expiry: the old refresh token stays.
    let (endpoint, requests) = token_endpoint(|_| {
        (
            StatusCode::OK,
            json!({"access_token": "AT-new", "scope": "mcp mcp:write"}),
        )
    })
    .await;
    let clock = Arc::new(ManualClock::at(NOW));
    let store = Arc::new(Memory::default());
    store
        .save(&stored(&endpoint, Some(NOW + 3600), true))
        .expect("saving");
    let tokens = source(&store, &clock).bearer_auth();
    let renewed = tokens.refresh(format!("{SERVER}#fragment")).await;
    assert_eq!(renewed, Some(SecretValue::from("AT-new")));
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    let kept = store.get(SERVER).expect("stored tokens");
    assert_eq!(kept.refresh_token, Some(SecretValue::from("RT-0")));
    assert_eq!(kept.expires_at, None);
    assert_eq!(kept.scope.as_deref(), Some("mcp mcp:write"));
    // Nothing stored for another server: nothing to renew with.
    assert_eq!(
        tokens.refresh("http://127.0.0.1:1/other".to_owned()).await,
        None
    );
    // A 403 that asks for no scope the token lacks: no new authorization.
    let challenge = r#"Bearer error="insufficient_scope", scope="mcp""#.to_owned();
    assert_eq!(tokens.step_up(SERVER.to_owned(), challenge).await, None);
    assert_eq!(requests.load(Ordering::SeqCst), 1);
}

#[test]
fn tokens_stay_with_their_authorization_server_and_old_records_learn_theirs_once() {
    let found = |issuer: Option<&str>, token_endpoint: &str| crate::discovery::Discovered {
        server: SERVER.to_owned(),
        resource: SERVER.to_owned(),
        scope: None,
        authorization_endpoint: "http://127.0.0.1:1/authorize".to_owned(),
        token_endpoint: token_endpoint.to_owned(),
        registration_endpoint: None,
        auth_methods: Vec::new(),
        grant_types: Vec::new(),
        client_metadata_documents: false,
        issuer: issuer.map(str::to_owned),
        iss_parameter_supported: false,
        dpop_algs: Vec::new(),
    };
    let old_endpoint = "http://127.0.0.1:1/token";
    let recorded = Tokens {
        issuer: Some("http://127.0.0.1:1".to_owned()),
        ..stored(old_endpoint, None, true)
    };
    assert_eq!(
        moved(&recorded, &found(Some("http://127.0.0.1:1"), old_endpoint)),
        Moved::No
    );
    assert_eq!(
        moved(
            &recorded,
            &found(Some("http://127.0.0.1:2"), "http://127.0.0.1:2/token")
        ),
        Moved::To("http://127.0.0.1:2".to_owned()),
        "the resource names a new authorization server: a new login there"
    );
    // A record stored before issuers were: the same token endpoint is the same server,
    // whose issuer is recorded; another one is a move.
    let old = stored(old_endpoint, None, true);
    assert_eq!(
        moved(&old, &found(Some("http://127.0.0.1:1"), old_endpoint)),
        Moved::Recorded("http://127.0.0.1:1".to_owned())
    );
    assert_eq!(
        moved(
            &old,
            &found(Some("http://127.0.0.1:2"), "http://127.0.0.1:2/token")
        ),
        Moved::To("http://127.0.0.1:2".to_owned())
    );
    // Nothing named (no metadata): nothing to tell by.
    assert_eq!(
        moved(&old, &found(None, "http://127.0.0.1:2/token")),
        Moved::No
    );
    // Once recorded, the record keeps its issuer in the stored form.
    let migrated = Tokens {
        issuer: Some("http://127.0.0.1:1".to_owned()),
        ..old
    };
    assert_eq!(Tokens::from_secret(&migrated.to_secret()), Some(migrated));
}

/// Grants renewed without a refresh token.
mod grants;

/// DPoP-bound tokens.
mod dpop;
