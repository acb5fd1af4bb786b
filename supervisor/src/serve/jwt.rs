//! JWT principals for the agents API: a compact JWS signed RS256 or ES256, verified against the
//! keys of a JWKS ([`super::jwks::KeySource`]: a file, or the issuer's key set fetched through
//! the broker), with the issuer and audience the server was given.
//! The `owner` claim is the org. Everything else is refused: `alg: none`, HMAC algorithms (a
//! public key used as an HMAC secret is the classic confusion), a `kid` not in the set, a key
//! whose type does not match the algorithm, a bad signature, an expired or not-yet-valid token
//! (60 s leeway), the wrong issuer or audience, an owner that is not a valid org name.

use super::tokens::Principal;
use base64::Engine as _;
use ring::signature::{self, UnparsedPublicKey};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

use super::jwks::KeySource;

/// Clock skew allowed on `exp` and `nbf`.
pub const LEEWAY_SECS: u64 = 60;
/// The longest token looked at.
const MAX_TOKEN_LEN: usize = 16 * 1024;

/// What a JWT must satisfy.
#[derive(Debug)]
pub struct JwtConfig {
    /// Where the verifying keys come from.
    pub keys: KeySource,
    /// The `iss` a token must carry (`--jwt-issuer`).
    pub issuer: String,
    /// The `aud` a token must carry, or list (`--jwt-audience`).
    pub audience: String,
}

/// Why a token was refused (for the server's log; the caller only sees 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    /// Not three base64url parts with JSON header and claims.
    #[error("not a compact JWS")]
    Malformed,
    /// The header's `alg` (the value) is not RS256 or ES256: `none` and HMAC are refused.
    #[error("algorithm {0:?} is not accepted (RS256 and ES256 only)")]
    Algorithm(String),
    /// No key of the set has the header's `kid` (the value), even after a refetch.
    #[error("no key with kid {0:?} in the JWKS")]
    UnknownKid(String),
    /// The key with this `kid` is of another type or curve than the algorithm needs.
    #[error("the key for kid {0:?} does not fit the algorithm")]
    KeyMismatch(String),
    /// The signature does not verify with the key.
    #[error("bad signature")]
    Signature,
    /// `exp` is missing or passed (more than [`LEEWAY_SECS`] ago).
    #[error("expired")]
    Expired,
    /// `nbf` is more than [`LEEWAY_SECS`] in the future.
    #[error("not valid yet")]
    NotYetValid,
    /// `iss` is not the configured issuer.
    #[error("wrong issuer")]
    Issuer,
    /// `aud` does not name the configured audience.
    #[error("wrong audience")]
    Audience,
    /// The `owner` claim is missing or not a valid org name.
    #[error("no valid owner claim")]
    Owner,
    /// The JWKS file (the path) could not be read or parsed (the reason).
    #[error("the JWKS file {0} cannot be used: {1}")]
    Jwks(PathBuf, String),
}

#[derive(Debug, Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
}

/// One public key of a set: RSA (`n`, `e`) or EC P-256 (`crv`, `x`, `y`), with its `kid`.
#[derive(Debug, Deserialize)]
pub struct Jwk {
    kty: String,
    kid: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
    n: Option<String>,
    e: Option<String>,
}

/// A JSON Web Key Set (the fields used; private-key members, if an issuer ever published
/// them, are not read).
#[derive(Debug, Deserialize)]
pub struct Jwks {
    /// The keys, in the set's order.
    pub keys: Vec<Jwk>,
}

impl Jwks {
    /// Whether a key of the set has this `kid`.
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }
}

fn b64(s: &str) -> Result<Vec<u8>, JwtError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| JwtError::Malformed)
}

/// Reads and parses the JWKS file at `path`.
pub fn load_jwks(path: &Path) -> Result<Jwks, JwtError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| JwtError::Jwks(path.into(), e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| JwtError::Jwks(path.into(), e.to_string()))
}

/// Verify the signature of `signed` (header.payload) with `key` under `alg`.
fn verify_signature(alg: &str, key: &Jwk, signed: &[u8], sig: &[u8]) -> Result<(), JwtError> {
    let kid = || key.kid.clone().unwrap_or_default();
    match (alg, key.kty.as_str()) {
        ("ES256", "EC") if key.crv.as_deref() == Some("P-256") => {
            let x = b64(key
                .x
                .as_deref()
                .ok_or_else(|| JwtError::KeyMismatch(kid()))?)?;
            let y = b64(key
                .y
                .as_deref()
                .ok_or_else(|| JwtError::KeyMismatch(kid()))?)?;
            if x.len() != 32 || y.len() != 32 {
                return Err(JwtError::KeyMismatch(kid()));
            }
            let mut point = vec![4u8];
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                .verify(signed, sig)
                .map_err(|_| JwtError::Signature)
        }
        ("RS256", "RSA") => {
            let n = b64(key
                .n
                .as_deref()
                .ok_or_else(|| JwtError::KeyMismatch(kid()))?)?;
            let e = b64(key
                .e
                .as_deref()
                .ok_or_else(|| JwtError::KeyMismatch(kid()))?)?;
            signature::RsaPublicKeyComponents { n: &n, e: &e }
                .verify(&signature::RSA_PKCS1_2048_8192_SHA256, signed, sig)
                .map_err(|_| JwtError::Signature)
        }
        _ => Err(JwtError::KeyMismatch(kid())),
    }
}

fn check_claims(cfg: &Expect<'_>, claims: &Value, now: u64) -> Result<String, JwtError> {
    let exp = claims
        .get("exp")
        .and_then(Value::as_u64)
        .ok_or(JwtError::Expired)?;
    if now > exp.saturating_add(LEEWAY_SECS) {
        return Err(JwtError::Expired);
    }
    if let Some(nbf) = claims.get("nbf").and_then(Value::as_u64) {
        if nbf > now.saturating_add(LEEWAY_SECS) {
            return Err(JwtError::NotYetValid);
        }
    }
    if claims.get("iss").and_then(Value::as_str) != Some(cfg.issuer) {
        return Err(JwtError::Issuer);
    }
    let aud_ok = match claims.get("aud") {
        Some(Value::String(a)) => a == cfg.audience,
        Some(Value::Array(all)) => all.iter().any(|a| a.as_str() == Some(cfg.audience)),
        _ => false,
    };
    if !aud_ok {
        return Err(JwtError::Audience);
    }
    let owner = claims
        .get("owner")
        .and_then(Value::as_str)
        .ok_or(JwtError::Owner)?;
    hanzo_store::validate_org(owner).map_err(|_| JwtError::Owner)?;
    Ok(owner.to_string())
}

/// The issuer and audience a token must name.
pub struct Expect<'a> {
    /// The `iss` required.
    pub issuer: &'a str,
    /// The `aud` required (the claim may be a string or a list containing it).
    pub audience: &'a str,
}

/// The header of a token, checked: its algorithm is RS256 or ES256. Returns its `kid` (empty
/// when it has none, which no key matches).
fn header_of(token: &str) -> Result<(Header, [&str; 3]), JwtError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(JwtError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed);
    };
    let header: Header = serde_json::from_slice(&b64(h)?).map_err(|_| JwtError::Malformed)?;
    if header.alg != "RS256" && header.alg != "ES256" {
        return Err(JwtError::Algorithm(header.alg));
    }
    Ok((header, [h, p, s]))
}

/// The principal a JWT stands for, at time `now` (seconds since the epoch). The token's header
/// is checked before any key is looked up (an `alg: none` token causes no JWKS fetch).
pub async fn verify(cfg: &JwtConfig, token: &str, now: u64) -> Result<Principal, JwtError> {
    let (header, _) = header_of(token)?;
    let kid = header.kid.unwrap_or_default();
    let jwks = cfg.keys.keys_for(&kid).await?;
    let expect = Expect {
        issuer: &cfg.issuer,
        audience: &cfg.audience,
    };
    verify_with(&jwks, &expect, token, now)
}

/// [`verify`] against a key set at hand.
pub fn verify_with(
    jwks: &Jwks,
    cfg: &Expect<'_>,
    token: &str,
    now: u64,
) -> Result<Principal, JwtError> {
    let (header, [h, p, s]) = header_of(token)?;
    let kid = header.kid.unwrap_or_default();
    let key = jwks
        .keys
        .iter()
        .find(|k| k.kid.as_deref() == Some(kid.as_str()))
        .ok_or_else(|| JwtError::UnknownKid(kid.clone()))?;
    let signed_len = h.len() + 1 + p.len();
    verify_signature(&header.alg, key, &token.as_bytes()[..signed_len], &b64(s)?)?;
    let claims: Value = serde_json::from_slice(&b64(p)?).map_err(|_| JwtError::Malformed)?;
    let org = check_claims(cfg, &claims, now)?;
    let sub = claims
        .get("sub")
        .and_then(Value::as_str)
        .unwrap_or("")
        .chars()
        .take(64)
        .collect::<String>();
    let expires = claims
        .get("exp")
        .and_then(Value::as_u64)
        .map(|e| e.saturating_add(LEEWAY_SECS));
    Ok(Principal {
        org,
        token_id: format!("jwt:{kid}:{sub}"),
        expires,
        revocable: false,
    })
}

/// Whether a presented bearer value looks like a JWT (three dot-separated parts) rather than
/// one of our own tokens.
pub fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3 && !token.starts_with(super::tokens::TOKEN_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, RsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
    use serde_json::json;

    const NOW: u64 = 1_800_000_000;

    fn enc(v: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v)
    }

    struct Keys {
        ec: EcdsaKeyPair,
        rsa: RsaKeyPair,
        dir: tempfile::TempDir,
    }

    fn keys() -> Keys {
        let rng = SystemRandom::new();
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("ec");
        let ec = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("ec key");
        let dir = tempfile::tempdir().expect("tempdir");
        let rsa = rsa_key(dir.path());
        let point = ec.public_key().as_ref();
        let parts: signature::RsaPublicKeyComponents<Vec<u8>> = rsa.public().into();
        let (n, e) = (parts.n, parts.e);
        let jwks = json!({"keys": [
            {"kty": "EC", "crv": "P-256", "kid": "ec1", "x": enc(&point[1..33]), "y": enc(&point[33..65])},
            {"kty": "RSA", "kid": "rsa1", "n": enc(&n), "e": enc(&e)},
        ]});
        std::fs::write(dir.path().join("jwks.json"), jwks.to_string()).expect("jwks");
        Keys { ec, rsa, dir }
    }

    /// A 2048-bit RSA key from `openssl` (ring cannot generate RSA keys), as PKCS#1 DER.
    fn rsa_key(dir: &Path) -> RsaKeyPair {
        let (pem, der) = (dir.join("rsa.pem"), dir.join("rsa.der"));
        let run = |args: &[&str]| {
            let ok = std::process::Command::new("openssl")
                .args(args)
                .stderr(std::process::Stdio::null())
                .status()
                .expect("openssl")
                .success();
            assert!(ok, "openssl {args:?}");
        };
        let (pem_s, der_s) = (pem.display().to_string(), der.display().to_string());
        run(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            &pem_s,
        ]);
        run(&["pkey", "-in", &pem_s, "-outform", "DER", "-out", &der_s]);
        let bytes = std::fs::read(&der).expect("der");
        RsaKeyPair::from_pkcs8(&bytes)
            .or_else(|_| {
                run(&[
                    "rsa",
                    "-in",
                    &pem_s,
                    "-traditional",
                    "-outform",
                    "DER",
                    "-out",
                    &der_s,
                ]);
                RsaKeyPair::from_der(&std::fs::read(&der).expect("der"))
            })
            .expect("rsa key")
    }

    struct Cfg(PathBuf);

    fn cfg(k: &Keys) -> Cfg {
        Cfg(k.dir.path().join("jwks.json"))
    }

    /// The file is read for each token, as `KeySource::File` does.
    fn verify(c: &Cfg, token: &str, now: u64) -> Result<Principal, JwtError> {
        let expect = Expect {
            issuer: "https://id.example",
            audience: "hanzo-dev",
        };
        verify_with(&load_jwks(&c.0)?, &expect, token, now)
    }

    fn claims() -> Value {
        json!({"iss": "https://id.example", "aud": "hanzo-dev", "exp": NOW + 300, "owner": "acme", "sub": "u1"})
    }

    fn sign(k: &Keys, alg: &str, kid: &str, claims: &Value) -> String {
        let head = enc(json!({"alg": alg, "kid": kid, "typ": "JWT"})
            .to_string()
            .as_bytes());
        let body = enc(claims.to_string().as_bytes());
        let msg = format!("{head}.{body}");
        let rng = SystemRandom::new();
        let sig = match alg {
            "ES256" => {
                k.ec.sign(&rng, msg.as_bytes())
                    .expect("sign")
                    .as_ref()
                    .to_vec()
            }
            _ => {
                let mut sig = vec![0; k.rsa.public().modulus_len()];
                k.rsa
                    .sign(&signature::RSA_PKCS1_SHA256, &rng, msg.as_bytes(), &mut sig)
                    .expect("sign");
                sig
            }
        };
        format!("{msg}.{}", enc(&sig))
    }

    #[test]
    fn rs256_and_es256_tokens_give_their_owner_and_every_forgery_is_refused() {
        let k = keys();
        let c = cfg(&k);
        for (alg, kid) in [("ES256", "ec1"), ("RS256", "rsa1")] {
            let p = verify(&c, &sign(&k, alg, kid, &claims()), NOW).expect(alg);
            assert_eq!(p.org, "acme");
        }
        let good = sign(&k, "ES256", "ec1", &claims());
        // A flipped signature byte.
        let (msg, sig) = good.rsplit_once('.').expect("parts");
        let mut raw = b64(sig).expect("sig");
        raw[0] ^= 1;
        assert_eq!(
            verify(&c, &format!("{msg}.{}", enc(&raw)), NOW),
            Err(JwtError::Signature)
        );
        // Claims changed after signing.
        let mut other = claims();
        other["owner"] = json!("victim");
        let (h, _) = msg.split_once('.').expect("header");
        let swapped = format!("{h}.{}.{sig}", enc(other.to_string().as_bytes()));
        assert_eq!(verify(&c, &swapped, NOW), Err(JwtError::Signature));
        // alg none, HS256 with the public key as the secret, a kid not in the set, a key of
        // the other type.
        let none = format!(
            "{}.{}.",
            enc(br#"{"alg":"none","kid":"ec1"}"#),
            enc(claims().to_string().as_bytes())
        );
        assert!(matches!(
            verify(&c, &none, NOW),
            Err(JwtError::Algorithm(_))
        ));
        let hs = format!(
            "{}.{}.{sig}",
            enc(br#"{"alg":"HS256","kid":"ec1"}"#),
            enc(b"{}")
        );
        assert!(matches!(verify(&c, &hs, NOW), Err(JwtError::Algorithm(_))));
        assert!(matches!(
            verify(&c, &sign(&k, "ES256", "ec9", &claims()), NOW),
            Err(JwtError::UnknownKid(_))
        ));
        assert!(matches!(
            verify(&c, &sign(&k, "RS256", "ec1", &claims()), NOW),
            Err(JwtError::KeyMismatch(_))
        ));
        // Time, issuer, audience, owner.
        let mut expired = claims();
        expired["exp"] = json!(NOW - LEEWAY_SECS - 1);
        assert_eq!(
            verify(&c, &sign(&k, "ES256", "ec1", &expired), NOW),
            Err(JwtError::Expired)
        );
        let mut in_leeway = claims();
        in_leeway["exp"] = json!(NOW - 10);
        assert!(verify(&c, &sign(&k, "ES256", "ec1", &in_leeway), NOW).is_ok());
        let mut no_exp = claims();
        no_exp.as_object_mut().expect("obj").remove("exp");
        assert_eq!(
            verify(&c, &sign(&k, "ES256", "ec1", &no_exp), NOW),
            Err(JwtError::Expired)
        );
        let mut early = claims();
        early["nbf"] = json!(NOW + 3600);
        assert_eq!(
            verify(&c, &sign(&k, "ES256", "ec1", &early), NOW),
            Err(JwtError::NotYetValid)
        );
        let mut iss = claims();
        iss["iss"] = json!("https://evil.example");
        assert_eq!(
            verify(&c, &sign(&k, "ES256", "ec1", &iss), NOW),
            Err(JwtError::Issuer)
        );
        let mut aud = claims();
        aud["aud"] = json!("someone-else");
        assert_eq!(
            verify(&c, &sign(&k, "ES256", "ec1", &aud), NOW),
            Err(JwtError::Audience)
        );
        let mut auds = claims();
        auds["aud"] = json!(["x", "hanzo-dev"]);
        assert!(verify(&c, &sign(&k, "ES256", "ec1", &auds), NOW).is_ok());
        for owner in [json!("../etc"), json!(""), json!(7)] {
            let mut o = claims();
            o["owner"] = owner;
            assert_eq!(
                verify(&c, &sign(&k, "ES256", "ec1", &o), NOW),
                Err(JwtError::Owner)
            );
        }
        for junk in ["", "a.b", "a.b.c.d", "!!.!!.!!"] {
            assert!(verify(&c, junk, NOW).is_err(), "{junk}");
        }
    }
}
