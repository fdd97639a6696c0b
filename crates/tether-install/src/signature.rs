//! mcpb bundle signatures, checked the way `mcpb verify` (`@anthropic-ai/mcpb` 2.1.2) checks
//! them: `mcpb sign` appends `MCPB_SIG_V1`, a little-endian `u32` length, a DER PKCS#7
//! SignedData over the whole original file (detached; SHA-256; signed attributes holding the
//! content's digest) and `MCPB_SIG_END`. The first certificate of the SignedData is the
//! signer; the others are intermediates. A signer whose chain reaches a root the system trusts
//! for code signing is `Signed`; one whose subject is its issuer is `SelfSigned`; anything
//! else with a valid signature is `Untrusted`. A block that is there but does not verify
//! (the bytes were changed after signing, or the block is malformed) is `Invalid`.
//!
//! No I/O but the system's trust store ([`system_roots`]); the DER walk is hand-written (a
//! dozen TLVs), the certificate work is `rustls-webpki`'s.

use std::fmt;

use rustls_pki_types::{CertificateDer, TrustAnchor, UnixTime};
use sha2::{Digest, Sha256};
use webpki::{EndEntityCert, KeyUsage};

const HEADER: &[u8] = b"MCPB_SIG_V1";
const FOOTER: &[u8] = b"MCPB_SIG_END";

/// 1.3.6.1.5.5.7.3.3, id-kp-codeSigning (the value bytes of the OID).
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];
/// 1.2.840.113549.1.7.2, id-signedData.
const SIGNED_DATA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x02];
/// 1.2.840.113549.1.9.4, id-messageDigest.
const MESSAGE_DIGEST: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x04];
/// 2.16.840.1.101.3.4.2.1, id-sha256.
const SHA256: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01];
/// 2.5.4.3, commonName.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// What a bundle's signature says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No signature block.
    Unsigned,
    /// A signature block that does not verify: why (never bytes of the bundle).
    Invalid(String),
    /// A valid signature by a certificate that chains to a root the system trusts.
    Signed(Signer),
    /// A valid signature by a certificate that is its own issuer.
    SelfSigned(Signer),
    /// A valid signature by a certificate that chains to no trusted root: why.
    Untrusted(Signer, String),
}

/// The signing certificate, for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    /// The subject's common name (`Unknown` without one).
    pub publisher: String,
    /// The issuer's common name.
    pub issuer: String,
    /// SHA-256 of the certificate's DER, lowercase hex.
    pub fingerprint: String,
}

/// A certificate's name as shown: quoted, its control and bidirectional characters escaped.
fn shown(name: &str) -> String {
    format!("\"{}\"", tether_config::escape_controls(name))
}

/// Only a chain to a trusted root names a publisher: an untrusted or self-signed certificate
/// says what its subject *claims*, quoted, after the verdict (anyone can make a certificate
/// for "Anthropic, PBC").
impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Unsigned => f.write_str("unsigned"),
            Verdict::Invalid(why) => write!(f, "signed, but the signature does not verify ({why})"),
            Verdict::Signed(s) => write!(
                f,
                "signed by {} (issued by {}, certificate SHA-256 {})",
                shown(&s.publisher),
                shown(&s.issuer),
                s.fingerprint
            ),
            Verdict::SelfSigned(s) => write!(
                f,
                "self-signed by an unverified publisher (the certificate claims {}; SHA-256 {})",
                shown(&s.publisher),
                s.fingerprint
            ),
            Verdict::Untrusted(s, why) => write!(
                f,
                "signed by a certificate this system does not trust ({why}; the certificate claims {}, issued by {}; SHA-256 {})",
                shown(&s.publisher),
                shown(&s.issuer),
                s.fingerprint
            ),
        }
    }
}

impl Verdict {
    /// The verdict as JSON, kept beside an unpacked bundle (its bytes are gone then).
    pub fn to_json(&self) -> Vec<u8> {
        let (kind, signer, why) = match self {
            Verdict::Unsigned => ("unsigned", None, None),
            Verdict::Invalid(why) => ("invalid", None, Some(why)),
            Verdict::Signed(s) => ("signed", Some(s), None),
            Verdict::SelfSigned(s) => ("self-signed", Some(s), None),
            Verdict::Untrusted(s, why) => ("untrusted", Some(s), Some(why)),
        };
        let signer = signer.map(|s| {
            serde_json::json!({"publisher": s.publisher, "issuer": s.issuer, "fingerprint": s.fingerprint})
        });
        serde_json::json!({"verdict": kind, "signer": signer, "why": why})
            .to_string()
            .into_bytes()
    }

    /// A verdict [`Verdict::to_json`] wrote; `None` for anything else.
    pub fn from_json(bytes: &[u8]) -> Option<Verdict> {
        let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
        let signer = || {
            let s = &value["signer"];
            Some(Signer {
                publisher: text(&s["publisher"])?,
                issuer: text(&s["issuer"])?,
                fingerprint: text(&s["fingerprint"])?,
            })
        };
        Some(match value["verdict"].as_str()? {
            "unsigned" => Verdict::Unsigned,
            "invalid" => Verdict::Invalid(text(&value["why"])?),
            "signed" => Verdict::Signed(signer()?),
            "self-signed" => Verdict::SelfSigned(signer()?),
            "untrusted" => Verdict::Untrusted(signer()?, text(&value["why"])?),
            _ => return None,
        })
    }
}

/// What `tether add` accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policy {
    /// Refuse an unsigned bundle too (a signed one must be `Signed`, or `SelfSigned` /
    /// `Untrusted` with `allow_self_signed`).
    pub require_signature: bool,
    /// Accept a bundle signed by a certificate that chains to no trusted root: self-signed,
    /// or issued by a CA this system does not trust.
    pub allow_self_signed: bool,
}

impl Policy {
    /// Why `verdict` is refused under this policy, for the user; `None`: accepted. A signature
    /// that does not verify is evidence of tampering: refused whatever the policy. A
    /// certificate without a trusted chain is refused unless the user accepts it.
    pub fn refusal(&self, verdict: &Verdict) -> Option<String> {
        match verdict {
            Verdict::Signed(_) => None,
            Verdict::Invalid(_) => Some(format!(
                "the bundle is {verdict}: it was changed after signing or its signature is broken, and tether never installs it"
            )),
            Verdict::SelfSigned(_) | Verdict::Untrusted(..) if self.allow_self_signed => None,
            Verdict::SelfSigned(_) | Verdict::Untrusted(..) => Some(format!(
                "the bundle is {verdict}: install it only if you trust that certificate, with --allow-self-signed"
            )),
            Verdict::Unsigned if self.require_signature => Some(format!(
                "the bundle is {verdict}, and --require-signature (or require_signed_bundles) asks for a valid signature"
            )),
            Verdict::Unsigned => None,
        }
    }
}

/// The file's bytes without a signature block that ends it, and the block's PKCS#7 DER;
/// `None` for the DER when the file ends in no block. `Err`: a block that is cut or whose
/// length does not reach its footer.
pub fn split(bytes: &[u8]) -> Result<(&[u8], Option<&[u8]>), String> {
    let Some(before_footer) = bytes.strip_suffix(FOOTER) else {
        return Ok((bytes, None));
    };
    let header_at = before_footer
        .windows(HEADER.len())
        .rposition(|w| w == HEADER)
        .ok_or("a signature footer without its header")?;
    let rest = &before_footer[header_at + HEADER.len()..];
    let (length, der) = rest
        .split_first_chunk::<4>()
        .ok_or("a signature block cut short")?;
    if usize::try_from(u32::from_le_bytes(*length)).ok() != Some(der.len()) {
        return Err("the signature block's length does not match it".to_owned());
    }
    Ok((&bytes[..header_at], Some(der)))
}

/// The system's trust anchors for code signing (`rustls-native-certs`: `SSL_CERT_FILE`,
/// `SSL_CERT_DIR`, else the platform store); certificates that do not parse are skipped.
pub fn system_roots() -> Vec<TrustAnchor<'static>> {
    rustls_native_certs::load_native_certs()
        .certs
        .iter()
        .filter_map(|der| {
            webpki::anchor_from_trusted_cert(der)
                .ok()
                .map(|a| a.to_owned())
        })
        .collect()
}

/// The verdict for a bundle file's bytes, with `roots` as the trusted anchors and `now` the
/// time certificates are checked at.
pub fn verify(bytes: &[u8], roots: &[TrustAnchor<'_>], now: UnixTime) -> Verdict {
    let (content, der) = match split(bytes) {
        Ok((_, None)) => return Verdict::Unsigned,
        Ok((content, Some(der))) => (content, der),
        Err(why) => return Verdict::Invalid(why),
    };
    match verify_signed_data(content, der, roots, now) {
        Ok(verdict) => verdict,
        Err(why) => Verdict::Invalid(why.to_owned()),
    }
}

fn verify_signed_data(
    content: &[u8],
    der: &[u8],
    roots: &[TrustAnchor<'_>],
    now: UnixTime,
) -> Result<Verdict, &'static str> {
    const MALFORMED: &str = "malformed PKCS#7";
    // ContentInfo ::= SEQUENCE { contentType OID, [0] EXPLICIT SignedData }
    let mut info = Tlv::read_all(der, 0x30).ok_or(MALFORMED)?.children();
    if info.next_of(0x06).ok_or(MALFORMED)?.value != SIGNED_DATA {
        return Err("not PKCS#7 signed data");
    }
    let wrapped = info.next_of(0xa0).ok_or(MALFORMED)?;
    let mut signed_data = Tlv::read_all(wrapped.value, 0x30)
        .ok_or(MALFORMED)?
        .children();
    signed_data.next_of(0x02).ok_or(MALFORMED)?; // version
    signed_data.next_of(0x31).ok_or(MALFORMED)?; // digestAlgorithms
    signed_data.next_of(0x30).ok_or(MALFORMED)?; // encapContentInfo (detached)
    let mut certificates = Vec::new();
    let mut next = signed_data.next().ok_or(MALFORMED)?;
    if next.tag == 0xa0 {
        let mut certs = next.children();
        while let Some(cert) = certs.next() {
            certificates.push(CertificateDer::from(cert.whole));
        }
        next = signed_data.next().ok_or(MALFORMED)?;
    }
    if next.tag == 0xa1 {
        next = signed_data.next().ok_or(MALFORMED)?; // crls
    }
    if next.tag != 0x31 {
        return Err(MALFORMED);
    }
    let mut signer_infos = next.children();
    let mut signer_info = signer_infos.next_of(0x30).ok_or(MALFORMED)?.children();
    signer_info.next_of(0x02).ok_or(MALFORMED)?; // version
    signer_info.next_of(0x30).ok_or(MALFORMED)?; // issuerAndSerialNumber
    let digest_algorithm = signer_info.next_of(0x30).ok_or(MALFORMED)?;
    if digest_algorithm.children().next_of(0x06).map(|t| t.value) != Some(SHA256) {
        return Err("a digest other than SHA-256");
    }
    let signed_attrs = signer_info.next_of(0xa0).ok_or("no signed attributes")?;
    signer_info.next_of(0x30).ok_or(MALFORMED)?; // signatureAlgorithm
    let signature = signer_info.next_of(0x04).ok_or(MALFORMED)?.value;

    // The content's digest must be the one the signer signed.
    let mut digest_attr = None;
    let mut attrs = signed_attrs.children();
    while let Some(attr) = attrs.next() {
        let mut fields = attr.children();
        if fields.next_of(0x06).map(|t| t.value) == Some(MESSAGE_DIGEST) {
            let mut values = fields.next_of(0x31).ok_or(MALFORMED)?.children();
            digest_attr = Some(values.next_of(0x04).ok_or(MALFORMED)?.value);
        }
    }
    let digest = Sha256::digest(content);
    if digest_attr != Some(digest.as_slice()) {
        return Err("the bundle's bytes are not the bytes that were signed");
    }
    // The signature is over the attributes DER-encoded as a SET (tag 0x31, not [0]).
    let mut signed_message = signed_attrs.whole.to_vec();
    signed_message[0] = 0x31;
    let leaf_der = certificates.first().ok_or("no certificate")?;
    let leaf =
        EndEntityCert::try_from(leaf_der).map_err(|_| "a certificate that does not parse")?;
    leaf.verify_signature(
        webpki::aws_lc_rs::RSA_PKCS1_2048_8192_SHA256,
        &signed_message,
        signature,
    )
    .or_else(|_| {
        leaf.verify_signature(
            webpki::aws_lc_rs::ECDSA_P256_SHA256,
            &signed_message,
            signature,
        )
    })
    .map_err(|_| "the signature does not match the signing certificate")?;

    let signer = Signer {
        publisher: common_name(leaf.subject()),
        issuer: common_name(leaf.issuer()),
        fingerprint: hex(&Sha256::digest(leaf_der.as_ref())),
    };
    let chain = leaf.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        roots,
        &certificates[1..],
        now,
        KeyUsage::required(CODE_SIGNING),
        None,
        None,
    );
    Ok(match chain {
        Ok(_) => Verdict::Signed(signer),
        Err(_) if leaf.subject() == leaf.issuer() => Verdict::SelfSigned(signer),
        Err(error) => Verdict::Untrusted(signer, format!("{error:?}")),
    })
}

/// The first common name in a Name's DER contents (a sequence of RDN sets), else `Unknown`.
fn common_name(name: &[u8]) -> String {
    let mut rdns = Children(name);
    while let Some(rdn) = rdns.next() {
        let mut atvs = rdn.children();
        while let Some(atv) = atvs.next() {
            let mut fields = atv.children();
            if fields.next_of(0x06).map(|t| t.value) == Some(COMMON_NAME)
                && let Some(value) = fields.next()
            {
                return String::from_utf8_lossy(value.value).into_owned();
            }
        }
    }
    "Unknown".to_owned()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One DER TLV (definite lengths only, as DER has).
#[derive(Clone, Copy)]
struct Tlv<'a> {
    tag: u8,
    value: &'a [u8],
    /// Tag, length and value.
    whole: &'a [u8],
}

impl<'a> Tlv<'a> {
    /// The TLV at the start of `bytes` and what follows it.
    fn read(bytes: &'a [u8]) -> Option<(Tlv<'a>, &'a [u8])> {
        let (&tag, rest) = bytes.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (length, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 || rest.len() < count {
                return None;
            }
            let length = rest[..count]
                .iter()
                .fold(0usize, |n, &b| (n << 8) | usize::from(b));
            (length, &rest[count..])
        };
        let value = rest.get(..length)?;
        let header = bytes.len() - rest.len();
        let tlv = Tlv {
            tag,
            value,
            whole: &bytes[..header + length],
        };
        Some((tlv, &rest[length..]))
    }

    /// `bytes` as exactly one TLV with tag `tag`.
    fn read_all(bytes: &'a [u8], tag: u8) -> Option<Tlv<'a>> {
        match Tlv::read(bytes)? {
            (tlv, []) if tlv.tag == tag => Some(tlv),
            _ => None,
        }
    }

    fn children(&self) -> Children<'a> {
        Children(self.value)
    }
}

/// The TLVs inside a constructed value, in order.
struct Children<'a>(&'a [u8]);

impl<'a> Children<'a> {
    fn next(&mut self) -> Option<Tlv<'a>> {
        let (tlv, rest) = Tlv::read(self.0)?;
        self.0 = rest;
        Some(tlv)
    }

    /// The next TLV if its tag is `tag`.
    fn next_of(&mut self, tag: u8) -> Option<Tlv<'a>> {
        self.next().filter(|tlv| tlv.tag == tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_trusted_chain_names_a_publisher_and_tampering_is_always_refused() {
        let signer = Signer {
            publisher: "Evil\u{1b}[2K\rVerified Publisher".to_owned(),
            issuer: "Anthropic, PBC\u{202e}".to_owned(),
            fingerprint: "ab".repeat(32),
        };
        let untrusted = Verdict::Untrusted(signer.clone(), "UnknownIssuer".to_owned());
        let shown = untrusted.to_string();
        assert!(
            shown.starts_with("signed by a certificate this system does not trust"),
            "{shown}"
        );
        assert!(!shown.contains(['\u{1b}', '\r', '\u{202e}']), "{shown:?}");
        assert!(
            shown.contains("\"Evil\\x1b[2K\\rVerified Publisher\""),
            "{shown}"
        );
        let default = Policy::default();
        let lenient = Policy {
            require_signature: false,
            allow_self_signed: true,
        };
        let invalid =
            Verdict::Invalid("the bundle's bytes are not the bytes that were signed".to_owned());
        for policy in [default, lenient] {
            assert!(policy.refusal(&invalid).is_some(), "{policy:?}");
            assert!(policy.refusal(&Verdict::Signed(signer.clone())).is_none());
        }
        assert!(default.refusal(&untrusted).is_some());
        assert!(
            default
                .refusal(&Verdict::SelfSigned(signer.clone()))
                .is_some()
        );
        assert!(lenient.refusal(&untrusted).is_none());
        assert!(default.refusal(&Verdict::Unsigned).is_none());
    }

    #[test]
    fn a_file_without_a_block_is_unsigned_and_a_cut_block_is_invalid() {
        assert_eq!(
            split(b"PK\x03\x04zip").ok(),
            Some((&b"PK\x03\x04zip"[..], None))
        );
        assert_eq!(verify(b"zip", &[], UnixTime::now()), Verdict::Unsigned);
        let mut cut = b"zipMCPB_SIG_V1".to_vec();
        cut.extend_from_slice(&100u32.to_le_bytes());
        cut.extend_from_slice(b"short");
        cut.extend_from_slice(FOOTER);
        assert!(matches!(
            verify(&cut, &[], UnixTime::now()),
            Verdict::Invalid(_)
        ));
        let mut garbage = b"zipMCPB_SIG_V1".to_vec();
        garbage.extend_from_slice(&3u32.to_le_bytes());
        garbage.extend_from_slice(b"abc");
        garbage.extend_from_slice(FOOTER);
        assert_eq!(
            verify(&garbage, &[], UnixTime::now()),
            Verdict::Invalid("malformed PKCS#7".to_owned())
        );
    }

    #[test]
    fn the_policy_refuses_what_it_should() {
        let signer = Signer {
            publisher: "P".into(),
            issuer: "P".into(),
            fingerprint: "f".into(),
        };
        let lax = Policy::default();
        let strict = Policy {
            require_signature: true,
            allow_self_signed: false,
        };
        let allow = Policy {
            require_signature: true,
            allow_self_signed: true,
        };
        assert!(lax.refusal(&Verdict::Unsigned).is_none());
        assert!(strict.refusal(&Verdict::Unsigned).is_some());
        assert!(strict.refusal(&Verdict::Invalid("x".into())).is_some());
        assert!(lax.refusal(&Verdict::SelfSigned(signer.clone())).is_some());
        assert!(
            allow
                .refusal(&Verdict::SelfSigned(signer.clone()))
                .is_none()
        );
        assert!(strict.refusal(&Verdict::Signed(signer)).is_none());
    }
}
