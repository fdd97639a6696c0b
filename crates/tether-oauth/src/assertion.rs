//! Client assertions (RFC 7523 §2.2, `private_key_jwt`): a client proves who it is to the token
//! endpoint with a short JWT signed by its private key, instead of a shared secret.
//!
//! The key is a PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), P-256 (signed ES256) or RSA (RS256),
//! held as a secret like a client secret; the assertion names the client as `iss` and `sub`,
//! the authorization server (its issuer, else the token endpoint) as `aud`, lives 60 s and has
//! a random `jti`. Signing is aws-lc-rs's, which rustls already builds on.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, RSA_PKCS1_SHA256, RsaKeyPair,
};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rustls_pki_types::PrivatePkcs8KeyDer;
use rustls_pki_types::pem::PemObject as _;
use serde_json::json;
use tether_config::SecretValue;

use crate::error::OAuthError;

/// `client_assertion_type` of a JWT assertion.
pub const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// How long an assertion is good for.
const LIFETIME_SECS: i64 = 60;

/// A signed assertion of `client_id` for `audience` at `now` (Unix seconds), by `key`.
pub fn client_assertion(
    key: &SecretValue,
    client_id: &str,
    audience: &str,
    now: i64,
) -> Result<SecretValue, OAuthError> {
    let signer = Signer::from_pem(key)?;
    let header = json!({"alg": signer.alg(), "typ": "JWT"});
    let claims = json!({
        "iss": client_id,
        "sub": client_id,
        "aud": audience,
        "iat": now,
        "exp": now.saturating_add(LIFETIME_SECS),
        "jti": uuid::Uuid::new_v4().simple().to_string(),
    });
    let assertion = signer.jwt(&header, &claims)?;
    tether_log::register([&assertion]);
    Ok(assertion)
}

/// A private key that signs JWTs: P-256 (ES256) or RSA (RS256).
pub(crate) enum Signer {
    Es256(EcdsaKeyPair),
    Rs256(RsaKeyPair),
}

impl Signer {
    /// The key of a PKCS#8 PEM.
    pub(crate) fn from_pem(key: &SecretValue) -> Result<Self, OAuthError> {
        let der = PrivatePkcs8KeyDer::from_pem_slice(key.expose().as_bytes()).map_err(|_| {
            OAuthError::ClientKey(
                "it is not a PKCS#8 PEM private key (-----BEGIN PRIVATE KEY-----)",
            )
        })?;
        match EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der.secret_pkcs8_der()) {
            Ok(pair) => Ok(Self::Es256(pair)),
            Err(_) => match RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()) {
                Ok(pair) => Ok(Self::Rs256(pair)),
                Err(_) => Err(OAuthError::ClientKey(
                    "it is neither a P-256 nor an RSA private key",
                )),
            },
        }
    }

    /// The compact JWS of `header` and `claims`, signed by this key.
    pub(crate) fn jwt(
        &self,
        header: &serde_json::Value,
        claims: &serde_json::Value,
    ) -> Result<SecretValue, OAuthError> {
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .ok_or(OAuthError::ClientKey("signing with it failed"))?;
        Ok(SecretValue::new(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature)
        )))
    }

    pub(crate) fn alg(&self) -> &'static str {
        match self {
            Self::Es256(_) => "ES256",
            Self::Rs256(_) => "RS256",
        }
    }

    fn sign(&self, random: &SystemRandom, message: &[u8]) -> Option<Vec<u8>> {
        match self {
            Self::Es256(pair) => pair.sign(random, message).ok().map(|s| s.as_ref().to_vec()),
            Self::Rs256(pair) => {
                let mut signature = vec![0u8; pair.public_modulus_len()];
                pair.sign(&RSA_PKCS1_SHA256, random, message, &mut signature)
                    .ok()
                    .map(|()| signature)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, KeyPair as _, UnparsedPublicKey};

    use super::*;

    #[test]
    fn an_es256_assertion_verifies_with_the_public_key_and_names_the_client() {
        let random = SystemRandom::new();
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &random).expect("a key");
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref())
        );
        let public = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref())
            .expect("the pair")
            .public_key()
            .as_ref()
            .to_vec();
        let assertion = client_assertion(
            &SecretValue::new(pem),
            "machine",
            "https://as.example",
            1_000,
        )
        .expect("an assertion");
        let parts: Vec<&str> = assertion.expose().split('.').collect();
        assert_eq!(parts.len(), 3);
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).expect("base64"))
                .expect("JSON");
        assert_eq!(claims["iss"], "machine");
        assert_eq!(claims["sub"], "machine");
        assert_eq!(claims["aud"], "https://as.example");
        assert_eq!(claims["exp"], 1_060);
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).expect("base64"))
                .expect("JSON");
        assert_eq!(header["alg"], "ES256");
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).expect("base64");
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &public)
            .verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &signature)
            .expect("the signature verifies");
    }

    #[test]
    fn a_key_that_is_not_one_says_so_without_its_text() {
        let key = SecretValue::new("not a key $HOME {{x}}".to_owned());
        let error = client_assertion(&key, "c", "a", 0).expect_err("refused");
        assert!(error.to_string().contains("PKCS#8"), "{error}");
        assert!(!error.to_string().contains("$HOME"), "{error}");
    }
}
