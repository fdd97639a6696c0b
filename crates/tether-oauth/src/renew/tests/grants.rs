//! Renewal by grant other than a refresh token: asking again with the client's credentials, with
//! the JWT of a token file read again, and by an ID-JAG of the enterprise's identity provider.

use super::*;

/// Tokens had with the client's own credentials are renewed by asking again with them:
/// `grant_type=client_credentials`, the secret in HTTP Basic, never in the form.
#[tokio::test]
async fn client_credentials_tokens_are_renewed_by_asking_again() {
    let count = Arc::new(AtomicU64::new(0));
    let router = Router::new()
        .route(
            "/token",
            post(
                |State(count): State<Arc<AtomicU64>>,
                 headers: axum::http::HeaderMap,
                 body: String| async move {
                    assert!(body.contains("grant_type=client_credentials"), "{body}");
                    assert!(body.contains("scope=mcp"), "{body}");
                    assert!(!body.contains("s3cret"), "the secret in the form: {body}");
                    let basic = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    // base64("machine:s3cret")
                    assert_eq!(basic, "Basic bWFjaGluZTpzM2NyZXQ=");
                    let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                    json!({"access_token": format!("CC-{n}"), "expires_in": 600, "token_type": "Bearer"})
                        .to_string()
                },
            ),
        )
        .with_state(Arc::clone(&count));
    let address = serve(router).await;
    let endpoint = format!("http://{address}/token");

    let clock = Arc::new(ManualClock::at(NOW));
    let store = Arc::new(Memory::default());
    let mut machine = stored(&endpoint, Some(NOW + 30), false);
    machine.grant = crate::token::Grant::ClientCredentials;
    machine.client = ClientRegistration {
        client_id: "machine".to_owned(),
        client_secret: Some("s3cret".into()),
        auth_method: AuthMethod::ClientSecretBasic,
    };
    store.save(&machine).expect("saving");
    let tokens = source(&store, &clock);
    // 30 s from expiry, no refresh token: asked for again, and stored.
    let token = tokens.current_token(SERVER).await.expect("a token");
    assert_eq!(token.as_ref().map(SecretValue::expose), Some("CC-1"));
    assert_eq!(count.load(Ordering::SeqCst), 1);
    let kept = store.get(SERVER).expect("stored tokens");
    assert_eq!(kept.grant, crate::token::Grant::ClientCredentials);
    assert_eq!(kept.expires_at, Some(NOW + 600));
    assert!(kept.refresh_token.is_none());
}

/// Tokens had with a workload's JWT are renewed by asking again with the JWT read anew
/// from its file (the platform rotates it); a file gone says so in one line, without
/// what it held.
#[tokio::test]
async fn jwt_bearer_tokens_are_renewed_with_the_token_file_read_again() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let router = Router::new()
        .route(
            "/token",
            post(
                |State(seen): State<Arc<Mutex<Vec<String>>>>, body: String| async move {
                    assert!(
                        body.contains("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"),
                        "{body}"
                    );
                    assert!(body.contains("client_id=workload"), "{body}");
                    let mut seen = seen.lock().expect("the list");
                    seen.push(body);
                    json!({"access_token": format!("WT-{}", seen.len()), "expires_in": 300, "token_type": "Bearer"})
                        .to_string()
                },
            ),
        )
        .with_state(Arc::clone(&seen));
    let endpoint = format!("http://{}/token", serve(router).await);
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("token");
    std::fs::write(&file, "SENTINEL-jwt-1\n").expect("writing the token file");

    let clock = Arc::new(ManualClock::at(NOW));
    let store = Arc::new(Memory::default());
    let mut workload = stored(&endpoint, Some(NOW + 30), false);
    workload.grant = crate::token::Grant::JwtBearer;
    workload.assertion_file = Some(file.to_string_lossy().into_owned());
    workload.client.client_id = "workload".to_owned();
    store.save(&workload).expect("saving");
    let tokens = source(&store, &clock);

    let token = tokens.current_token(SERVER).await.expect("a token");
    assert_eq!(token.as_ref().map(SecretValue::expose), Some("WT-1"));
    // The platform rotates the token: the next renewal sends the new one.
    std::fs::write(&file, "SENTINEL-jwt-2").expect("rotating the token file");
    clock.advance(Duration::from_secs(300));
    let token = tokens.current_token(SERVER).await.expect("a token");
    assert_eq!(token.as_ref().map(SecretValue::expose), Some("WT-2"));
    {
        let seen = seen.lock().expect("the list");
        assert!(seen[0].contains("assertion=SENTINEL-jwt-1&"), "{}", seen[0]);
        assert!(seen[1].contains("assertion=SENTINEL-jwt-2&"), "{}", seen[1]);
    }
    let kept = store.get(SERVER).expect("stored tokens");
    assert_eq!(kept.grant, crate::token::Grant::JwtBearer);
    assert_eq!(
        kept.assertion_file, workload.assertion_file,
        "the path, kept"
    );
    assert!(
        !kept.to_secret().expose().contains("SENTINEL-jwt"),
        "never its contents"
    );

    // The file gone: one line naming it, nothing it held, nothing sent.
    std::fs::remove_file(&file).expect("removing the token file");
    clock.advance(Duration::from_secs(300));
    let error = tokens
        .current_token(SERVER)
        .await
        .expect_err("no token file");
    let text = format!("{error} {error:?}");
    assert!(
        text.contains("workload token file") && text.contains("token"),
        "{text}"
    );
    assert!(!text.contains("SENTINEL"), "{text}");
    assert_eq!(seen.lock().expect("the list").len(), 2);
}

/// Enterprise-managed authorization: the person's ID token goes to the identity provider
/// (found by its metadata) in an RFC 8693 exchange for an ID-JAG naming the authorization
/// server and the resource; the ID-JAG goes to the authorization server as a JWT bearer
/// assertion, the client authenticated by Basic; a renewal does both again. An ID token
/// the provider refuses says which endpoint refused and never what was sent.
#[tokio::test]
async fn enterprise_managed_tokens_come_of_an_id_jag_and_are_renewed_the_same_way() {
    type Forms = Arc<Mutex<Vec<(String, HashMap<String, String>, String)>>>;
    let forms: Forms = Arc::default();
    let record = |forms: &Forms, at: &str, form: HashMap<String, String>, basic: String| {
        forms
            .lock()
            .expect("the list")
            .push((at.to_owned(), form, basic));
    };
    let router = Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(|headers: axum::http::HeaderMap| async move {
                let host = headers
                    .get("host")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                json!({"issuer": format!("http://{host}"), "token_endpoint": format!("http://{host}/idp/token")})
                    .to_string()
            }),
        )
        .route(
            "/idp/token",
            post(
                move |State(forms): State<Forms>,
                      axum::extract::Form(form): axum::extract::Form<HashMap<String, String>>| async move {
                    let refused = form.get("subject_token").map(String::as_str) == Some("expired");
                    let n = forms.lock().expect("the list").len();
                    record(&forms, "idp", form, String::new());
                    if refused {
                        return (
                            StatusCode::BAD_REQUEST,
                            json!({"error": "invalid_grant", "error_description": "SENTINEL-BODY"}).to_string(),
                        );
                    }
                    (
                        StatusCode::OK,
                        json!({"access_token": format!("SENTINEL-JAG-{n}"),
                            "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag", "token_type": "N_A"})
                        .to_string(),
                    )
                },
            ),
        )
        .route(
            "/token",
            post(
                move |State(forms): State<Forms>,
                      headers: axum::http::HeaderMap,
                      axum::extract::Form(form): axum::extract::Form<HashMap<String, String>>| async move {
                    let basic = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    let n = forms.lock().expect("the list").len();
                    record(&forms, "as", form, basic);
                    json!({"access_token": format!("EM-{n}"), "expires_in": 600, "token_type": "Bearer"})
                        .to_string()
                },
            ),
        )
        .with_state(Arc::clone(&forms));
    let address = serve(router).await;
    let issuer = format!("http://{address}");
    let clock = Arc::new(ManualClock::at(NOW));
    let oauth = OAuthClient::new(Arc::clone(&clock) as Arc<dyn Clock>).expect("a client");
    let idp = crate::token::IdentityProvider {
        token_endpoint: oauth
            .idp_token_endpoint(&issuer)
            .await
            .expect("the IdP's metadata"),
        issuer: issuer.clone(),
        client_id: "tether-at-idp".to_owned(),
        id_token: SecretValue::from("SENTINEL-ID-TOKEN $HOME"),
    };
    assert_eq!(idp.token_endpoint, format!("{issuer}/idp/token"));
    let discovered = crate::discovery::Discovered {
        server: SERVER.to_owned(),
        resource: SERVER.to_owned(),
        scope: None,
        authorization_endpoint: String::new(),
        token_endpoint: format!("{issuer}/token"),
        registration_endpoint: None,
        auth_methods: vec!["client_secret_basic".to_owned()],
        grant_types: vec![crate::token::JWT_BEARER_GRANT.to_owned()],
        client_metadata_documents: false,
        issuer: Some("https://as.example".to_owned()),
        iss_parameter_supported: false,
        dpop_algs: Vec::new(),
    };
    let client = ClientRegistration::preregistered(
        "mcp-client".to_owned(),
        Some("s3cret".into()),
        &discovered,
    );
    let tokens = oauth
        .enterprise_managed(&discovered, &client, &idp)
        .await
        .expect("tokens");
    assert_eq!(tokens.access_token.expose(), "EM-1");
    assert_eq!(tokens.grant, crate::token::Grant::EnterpriseManaged);
    {
        let forms = forms.lock().expect("the list");
        let (at, exchange, _) = &forms[0];
        assert_eq!(at, "idp");
        for (name, value) in [
            (
                "grant_type",
                "urn:ietf:params:oauth:grant-type:token-exchange",
            ),
            (
                "requested_token_type",
                "urn:ietf:params:oauth:token-type:id-jag",
            ),
            ("subject_token", "SENTINEL-ID-TOKEN $HOME"),
            (
                "subject_token_type",
                "urn:ietf:params:oauth:token-type:id_token",
            ),
            ("audience", "https://as.example"),
            ("resource", SERVER),
            ("client_id", "tether-at-idp"),
        ] {
            assert_eq!(
                exchange.get(name).map(String::as_str),
                Some(value),
                "{name}"
            );
        }
        let (at, grant, basic) = &forms[1];
        assert_eq!(at, "as");
        assert_eq!(
            grant.get("grant_type").map(String::as_str),
            Some(crate::token::JWT_BEARER_GRANT)
        );
        assert_eq!(
            grant.get("assertion").map(String::as_str),
            Some("SENTINEL-JAG-0")
        );
        // base64("mcp-client:s3cret")
        assert_eq!(basic, "Basic bWNwLWNsaWVudDpzM2NyZXQ=");
    }
    // The stored form keeps the provider and the ID token (a secret like the others).
    assert_eq!(
        Tokens::from_secret(&tokens.to_secret()),
        Some(tokens.clone())
    );

    // Near expiry: both steps again, with the stored ID token.
    let store = Arc::new(Memory::default());
    store.save(&tokens).expect("saving");
    let run = source(&store, &clock);
    clock.advance(Duration::from_secs(590));
    let renewed = run.current_token(SERVER).await.expect("a renewed token");
    assert_eq!(renewed.as_ref().map(SecretValue::expose), Some("EM-3"));
    assert_eq!(forms.lock().expect("the list").len(), 4);

    // An ID token the provider refuses: which endpoint, its status and code; nothing sent.
    let expired = crate::token::IdentityProvider {
        id_token: SecretValue::from("expired"),
        ..idp
    };
    let error = oauth
        .enterprise_managed(&discovered, &client, &expired)
        .await
        .expect_err("refused");
    let text = format!("{error} {error:?}");
    assert!(
        text.contains("/idp/token") && text.contains("invalid_grant"),
        "{text}"
    );
    assert!(!text.contains("SENTINEL"), "{text}");
    assert_eq!(
        forms.lock().expect("the list").len(),
        5,
        "no grant without an ID-JAG"
    );
}
