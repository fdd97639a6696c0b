//! DPoP (RFC 9449): tokens bound to a key tether holds, proven with a fresh signed JWT on
//! every request that uses them.
//!
//! The key is made at login when the authorization server lists `ES256` in
//! `dpop_signing_alg_values_supported` (a P-256 key, kept as a PKCS#8 PEM in the token record,
//! which is itself a secret in the secret store); it proves every token request of the
//! record (the code exchange, each refresh or renewal) and, when the token answer says
//! `token_type: DPoP`, every MCP request that carries the access token. A proof names the
//! request's method (`htm`) and URL without query or fragment (`htu`), has a random `jti` and
//! the time (`iat`), the server's `nonce` when it asked for one (`use_dpop_nonce`), and the
//! access token's hash (`ath`) when it goes with one; its header holds the public key only.

use aws_lc_rs::digest::{SHA256, digest};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use reqwest::Url;
use serde_json::json;
use tether_config::SecretValue;

use crate::assertion::Signer;
use crate::error::OAuthError;

/// The HTTP header a proof goes in, and the one a server's nonce comes in.
pub const DPOP: &str = "DPoP";
/// The header of a server's nonce.
pub const DPOP_NONCE: &str = "DPoP-Nonce";
/// The one signing algorithm tether proves with.
const ES256: &str = "ES256";

/// Whether an authorization server whose `dpop_signing_alg_values_supported` is `algs` takes
/// tether's proofs (it lists ES256).
pub(crate) fn offered(algs: &[String]) -> bool {
    algs.iter().any(|alg| alg == ES256)
}

/// A new P-256 key, as a PKCS#8 PEM, registered for log masking.
pub(crate) fn new_key() -> Result<SecretValue, OAuthError> {
    let pkcs8 =
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
            .map_err(|_| OAuthError::DpopKey("no P-256 key could be made"))?;
    let key = SecretValue::new(format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        STANDARD.encode(pkcs8.as_ref())
    ));
    tether_log::register([&key]);
    Ok(key)
}

/// A proof by `key` for a `method` request to `url` at `now` (Unix seconds), with the
/// server's `nonce` and, for a request that carries it, the hash of `access_token`.
pub fn proof(
    key: &SecretValue,
    method: &str,
    url: &str,
    now: i64,
    nonce: Option<&str>,
    access_token: Option<&SecretValue>,
) -> Result<SecretValue, OAuthError> {
    let Signer::Es256(pair) = Signer::from_pem(key)
        .map_err(|_| OAuthError::DpopKey("the stored key is not a P-256 PKCS#8 PEM"))?
    else {
        return Err(OAuthError::DpopKey("the stored key is not a P-256 key"));
    };
    // An uncompressed point: 0x04, then x and y, 32 bytes each.
    let point = pair.public_key().as_ref();
    let (Some(x), Some(y)) = (point.get(1..33), point.get(33..65)) else {
        return Err(OAuthError::DpopKey("its public key is not a P-256 point"));
    };
    let header = json!({
        "typ": "dpop+jwt",
        "alg": ES256,
        "jwk": {"kty": "EC", "crv": "P-256", "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y)},
    });
    let mut claims = json!({
        "jti": uuid::Uuid::new_v4().simple().to_string(),
        "htm": method,
        "htu": htu(url),
        "iat": now,
    });
    if let Some(nonce) = nonce {
        claims["nonce"] = json!(nonce);
    }
    if let Some(token) = access_token {
        claims["ath"] = json!(URL_SAFE_NO_PAD.encode(digest(&SHA256, token.expose().as_bytes())));
    }
    Signer::Es256(pair)
        .jwt(&header, &claims)
        .map_err(|_| OAuthError::DpopKey("signing with it failed"))
}

/// `url` without its query and fragment (RFC 9449 §4.2).
fn htu(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut parsed) => {
            parsed.set_query(None);
            parsed.set_fragment(None);
            parsed.to_string()
        }
        Err(_) => url.split(['?', '#']).next().unwrap_or_default().to_owned(),
    }
}

/// Whether a `WWW-Authenticate` value (or an OAuth `error` code) asks for a DPoP nonce.
pub fn asks_for_nonce(challenge: &str) -> bool {
    challenge.contains("use_dpop_nonce")
}

#[cfg(test)]
mod tests {
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};
    use serde_json::Value;

    use super::*;

    fn part(jwt: &str, n: usize) -> Value {
        let part = jwt.split('.').nth(n).expect("a part");
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).expect("base64")).expect("JSON")
    }

    #[test]
    fn a_proof_names_the_request_carries_the_public_key_only_and_verifies() {
        let key = new_key().expect("a key");
        let token = SecretValue::from("the-access-token");
        let first = proof(
            &key,
            "POST",
            "https://mcp.example/mcp?x=1#f",
            1_000,
            Some("n-1"),
            Some(&token),
        )
        .expect("a proof");
        let jwt = first.expose();
        let header = part(jwt, 0);
        assert_eq!(header["typ"], "dpop+jwt");
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["jwk"]["kty"], "EC");
        assert!(
            header["jwk"].get("d").is_none(),
            "no private part: {header}"
        );
        let claims = part(jwt, 1);
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["htu"], "https://mcp.example/mcp");
        assert_eq!(claims["iat"], 1_000);
        assert_eq!(claims["nonce"], "n-1");
        // base64url(SHA-256("the-access-token"))
        let ath = URL_SAFE_NO_PAD.encode(digest(&SHA256, b"the-access-token"));
        assert_eq!(claims["ath"], ath.as_str());
        // The signature verifies with the key in the header.
        let x = URL_SAFE_NO_PAD
            .decode(header["jwk"]["x"].as_str().expect("x"))
            .expect("x");
        let y = URL_SAFE_NO_PAD
            .decode(header["jwk"]["y"].as_str().expect("y"))
            .expect("y");
        let point = [&[4u8][..], &x, &y].concat();
        let (input, signature) = jwt.rsplit_once('.').expect("a signature");
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &point)
            .verify(
                input.as_bytes(),
                &URL_SAFE_NO_PAD.decode(signature).expect("base64"),
            )
            .expect("the proof verifies");
        // Each proof is fresh; one for a token request has neither nonce nor ath.
        let second =
            proof(&key, "POST", "https://as.example/token", 1_000, None, None).expect("a proof");
        let claims2 = part(second.expose(), 1);
        assert_ne!(claims2["jti"], claims["jti"]);
        assert!(claims2.get("nonce").is_none() && claims2.get("ath").is_none());
    }

    #[test]
    fn a_stored_key_that_is_not_one_says_so_without_its_text() {
        let error = proof(
            &SecretValue::from("SENTINEL-KEY $HOME"),
            "POST",
            "https://a.example/",
            0,
            None,
            None,
        )
        .expect_err("refused");
        let text = format!("{error} {error:?}");
        assert!(text.contains("DPoP key"), "{text}");
        assert!(!text.contains("SENTINEL"), "{text}");
    }
}
