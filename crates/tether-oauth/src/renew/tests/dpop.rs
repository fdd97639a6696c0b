//! DPoP-bound tokens: one key per token, the server's nonce honoured, a proof for each request.

use super::*;

/// The claims and header of a JWT, unverified (the signature is checked in dpop.rs).
fn jwt_parts(jwt: &str) -> (Value, Value) {
    use base64::Engine as _;
    let part = |n: usize| -> Value {
        let text = jwt.split('.').nth(n).expect("a part");
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .expect("base64url");
        serde_json::from_slice(&bytes).expect("JSON")
    };
    (part(0), part(1))
}

/// What the DPoP token endpoint saw: each request's proof (header, claims) and grant.
type Seen = Arc<Mutex<Vec<(Value, Value, String)>>>;

/// An authorization server that takes DPoP proofs and wants its nonce: the code exchange
/// and each refresh are answered `use_dpop_nonce` until their proof carries it; the
/// tokens are `token_type: DPoP`, bound to the proof's key, and a refresh proven with
/// another key is refused.
#[tokio::test]
async fn dpop_tokens_are_bound_to_one_key_the_nonce_is_honoured_and_runs_prove_each_request() {
    let seen: Seen = Arc::default();
    let router = Router::new()
        .route(
            "/token",
            post(
                |State(seen): State<Seen>, headers: axum::http::HeaderMap, body: String| async move {
                    let Some(proof) = headers.get("dpop").and_then(|v| v.to_str().ok()) else {
                        return (StatusCode::BAD_REQUEST, axum::http::HeaderMap::new(), json!({"error": "invalid_dpop_proof"}).to_string());
                    };
                    let (header, claims) = jwt_parts(proof);
                    let grant = if body.contains("grant_type=refresh_token") { "refresh" } else { "code" };
                    let mut seen = seen.lock().expect("the list");
                    let first_key = seen.first().map(|(header, _, _)| header["jwk"].clone());
                    seen.push((header.clone(), claims.clone(), grant.to_owned()));
                    if first_key.is_some_and(|key| key != header["jwk"]) {
                        return (StatusCode::BAD_REQUEST, axum::http::HeaderMap::new(), json!({"error": "invalid_dpop_proof"}).to_string());
                    }
                    if claims["nonce"] != "as-nonce" {
                        let mut nonce = axum::http::HeaderMap::new();
                        nonce.insert("dpop-nonce", axum::http::HeaderValue::from_static("as-nonce"));
                        return (StatusCode::BAD_REQUEST, nonce, json!({"error": "use_dpop_nonce"}).to_string());
                    }
                    let n = seen.len();
                    (
                        StatusCode::OK,
                        axum::http::HeaderMap::new(),
                        json!({"access_token": format!("DP-{n}"), "refresh_token": format!("DR-{n}"),
                            "token_type": "DPoP", "expires_in": 600}).to_string(),
                    )
                },
            ),
        )
        .with_state(Arc::clone(&seen));
    let address = serve(router).await;
    let endpoint = format!("http://{address}/token");

    let clock = Arc::new(ManualClock::at(NOW));
    let discovered = crate::discovery::Discovered {
        server: SERVER.to_owned(),
        resource: SERVER.to_owned(),
        scope: Some("mcp".to_owned()),
        authorization_endpoint: format!("http://{address}/authorize"),
        token_endpoint: endpoint.clone(),
        registration_endpoint: None,
        auth_methods: Vec::new(),
        grant_types: Vec::new(),
        client_metadata_documents: false,
        issuer: None,
        iss_parameter_supported: false,
        dpop_algs: vec!["RS256".to_owned(), "ES256".to_owned()],
    };
    let client = ClientRegistration {
        client_id: "client".to_owned(),
        client_secret: None,
        auth_method: AuthMethod::None,
    };
    let pending = crate::authorization::authorization_request(
        &discovered,
        &client,
        "http://127.0.0.1:9/callback",
    )
    .expect("an authorization request");
    let oauth = OAuthClient::new(Arc::clone(&clock) as Arc<dyn Clock>).expect("a client");
    let tokens = oauth
        .exchange(
            &discovered,
            &client,
            &pending,
            &SecretValue::from("the-code"),
        )
        .await
        .expect("DPoP-bound tokens");
    assert!(tokens.dpop_bound, "token_type DPoP");
    assert!(tokens.dpop_key.is_some(), "the key is kept with the tokens");
    assert_eq!(tokens.access_token.expose(), "DP-2");
    {
        let seen = seen.lock().expect("the list");
        assert_eq!(seen.len(), 2, "once without the nonce, once with it");
        let (header, claims, _) = &seen[1];
        assert_eq!(header["typ"], "dpop+jwt");
        assert!(header["jwk"].get("d").is_none(), "public key only");
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["htu"], endpoint.as_str());
        assert_eq!(claims["iat"], NOW);
        assert!(
            claims.get("ath").is_none(),
            "no token goes with a token request"
        );
        assert_ne!(
            seen[0].1["jti"], claims["jti"],
            "a fresh proof for the retry"
        );
    }
    // The stored form keeps the key and the binding.
    let back = Tokens::from_secret(&tokens.to_secret()).expect("the stored form");
    assert_eq!(back, tokens);

    // A run: every request to the server carries a proof naming it and the token.
    let store = Arc::new(Memory::default());
    store.save(&tokens).expect("saving");
    let run = source(&store, &clock);
    let auth = run.bearer_auth();
    let token = tokens.access_token.clone();
    let proof = auth
        .proof(&format!("{SERVER}#f"), "POST", &token, Some("rs-nonce"))
        .expect("a proof for a bound token");
    let (header, claims) = jwt_parts(proof.expose());
    assert_eq!(
        header["jwk"],
        seen.lock().expect("the list")[1].0["jwk"],
        "the same key"
    );
    assert_eq!(claims["htu"], SERVER);
    assert_eq!(claims["nonce"], "rs-nonce");
    use base64::Engine as _;
    let ath = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA256,
        b"DP-2",
    ));
    assert_eq!(claims["ath"], ath.as_str());
    assert!(
        auth.proof(SERVER, "POST", &SecretValue::from("another"), None)
            .is_none(),
        "a token that is not the stored one gets no proof"
    );

    // Near expiry the refresh is proven with the same key (and the nonce again).
    clock.advance(Duration::from_secs(590));
    let renewed = run.current_token(SERVER).await.expect("a renewed token");
    assert_eq!(renewed.as_ref().map(SecretValue::expose), Some("DP-4"));
    let seen = seen.lock().expect("the list");
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[3].2, "refresh");
    assert_eq!(seen[3].0["jwk"], seen[1].0["jwk"], "one key per server");
    let kept = store.get(SERVER).expect("stored tokens");
    assert!(kept.dpop_bound && kept.dpop_key == tokens.dpop_key);
    // A bearer token (the old kind of record) gets no proof.
    let bearer = stored(&endpoint, None, true);
    store.save(&bearer).expect("saving");
    assert!(
        auth.proof(SERVER, "POST", &SecretValue::from("AT-0"), None)
            .is_none()
    );
}
