//! PKCE (RFC 7636), S256 only: a `code_verifier` of 64 characters of the unreserved set drawn from
//! the operating system's CSPRNG, and its challenge `BASE64URL-NOPAD(SHA-256(ASCII(verifier)))`.
//! There is deliberately no `plain` method: OAuth 2.1 forbids it for clients that can hash.

use crate::secret::Secret;
use base64::Engine;
use sha2::{Digest, Sha256};
use thiserror::Error;

/// The only challenge method this client ever sends.
pub const METHOD: &str = "S256";
/// RFC 7636 §4.1 bounds on the verifier's length.
pub const MIN_VERIFIER: usize = 43;
/// The longest verifier RFC 7636 allows, in characters.
pub const MAX_VERIFIER: usize = 128;
/// Length of the verifiers we generate (each character carries 6 bits: 384 bits of entropy).
pub const GENERATED_VERIFIER: usize = 64;

/// The unreserved characters of RFC 3986, the alphabet of a verifier.
const UNRESERVED: &[u8; 66] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~";

/// Why a PKCE verifier cannot be used or made.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PkceError {
    /// The verifier is not 43 to 128 characters long; holds its length.
    #[error("code_verifier must be 43 to 128 characters long (it has {0})")]
    Length(usize),
    /// The verifier has a character outside RFC 3986's unreserved set.
    #[error("code_verifier may contain only A-Z a-z 0-9 - . _ ~")]
    Charset,
    /// The system's random number generator failed; holds its error.
    #[error("the operating system's random number generator failed: {0}")]
    Random(String),
}

/// A verifier and its S256 challenge. The verifier is a secret until the token exchange.
#[derive(Debug, Clone)]
pub struct PkcePair {
    /// The verifier, sent with the token request.
    pub verifier: Secret,
    /// Its S256 challenge (base64url of its SHA-256), sent with the authorization request.
    pub challenge: String,
}

/// Check a verifier against RFC 7636 §4.1.
pub fn validate_verifier(verifier: &str) -> Result<(), PkceError> {
    // Counted in characters, so a multi-byte character is one (and then refused as out of set).
    let len = verifier.chars().count();
    if !(MIN_VERIFIER..=MAX_VERIFIER).contains(&len) {
        return Err(PkceError::Length(len));
    }
    if !verifier.bytes().all(|b| UNRESERVED.contains(&b)) {
        return Err(PkceError::Charset);
    }
    Ok(())
}

/// The S256 challenge of a valid verifier.
pub fn challenge_s256(verifier: &str) -> Result<String, PkceError> {
    validate_verifier(verifier)?;
    let digest = Sha256::digest(verifier.as_bytes());
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest))
}

/// `n` random bytes from the kernel (`getrandom(2)`).
pub fn random_bytes(n: usize) -> Result<Vec<u8>, PkceError> {
    let mut buf = vec![0u8; n];
    getrandom::getrandom(&mut buf).map_err(|e| PkceError::Random(e.to_string()))?;
    Ok(buf)
}

/// A random string of `len` unreserved characters, without modulo bias (bytes ≥ 198 = 3·66 are
/// redrawn).
pub fn random_unreserved(len: usize) -> Result<String, PkceError> {
    let mut out = String::with_capacity(len);
    while out.len() < len {
        for b in random_bytes(len * 2)? {
            if b < 198 && out.len() < len {
                out.push(UNRESERVED[usize::from(b) % UNRESERVED.len()] as char);
            }
        }
    }
    Ok(out)
}

/// An opaque random token (for `state`): 32 bytes, base64url.
pub fn random_token() -> Result<String, PkceError> {
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes(32)?))
}

impl PkcePair {
    /// A fresh pair from the CSPRNG.
    pub fn generate() -> Result<PkcePair, PkceError> {
        let verifier = random_unreserved(GENERATED_VERIFIER)?;
        let challenge = challenge_s256(&verifier)?;
        Ok(PkcePair {
            verifier: Secret::new(verifier),
            challenge,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_7636_appendix_b() {
        assert_eq!(
            challenge_s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk").expect("valid"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn bounds_and_charset() {
        assert_eq!(
            validate_verifier(&"a".repeat(42)),
            Err(PkceError::Length(42))
        );
        assert!(validate_verifier(&"a".repeat(43)).is_ok());
        assert!(validate_verifier(&"a".repeat(128)).is_ok());
        assert_eq!(
            validate_verifier(&"a".repeat(129)),
            Err(PkceError::Length(129))
        );
        assert_eq!(
            validate_verifier(&format!("{}+", "a".repeat(43))),
            Err(PkceError::Charset)
        );
        assert_eq!(
            validate_verifier(&format!("{}é", "a".repeat(42))),
            Err(PkceError::Charset)
        );
    }

    #[test]
    fn generated_pairs_are_valid_and_distinct() {
        let a = PkcePair::generate().expect("rng");
        let b = PkcePair::generate().expect("rng");
        assert_eq!(a.verifier.expose().len(), GENERATED_VERIFIER);
        assert_ne!(a.verifier.expose(), b.verifier.expose());
        assert_eq!(
            challenge_s256(a.verifier.expose()).expect("valid"),
            a.challenge
        );
        assert_eq!(a.challenge.len(), 43);
    }
}
