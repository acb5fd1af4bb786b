//! `oauth-pkce` vectors: each verifier goes through the broker's own `hanzo_broker::pkce`
//! (`challenge_s256`, which validates first). Every case also generates 100 pairs with
//! `PkcePair::generate` — the function logins use — and checks each: a valid verifier of the
//! generated length, and a challenge that is the S256 of it computed independently here.
use super::str_field;
use hanzo_broker::pkce::{challenge_s256, PkcePair, GENERATED_VERIFIER};
use serde_json::Value;
use sha2::{Digest, Sha256};

const GENERATED: usize = 100;

/// BASE64URL-NOPAD, written out here so the check does not reuse the code it checks.
fn base64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn check_generated() -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for i in 0..GENERATED {
        let pair = PkcePair::generate().map_err(|e| format!("generated pair {i}: {e}"))?;
        let v = pair.verifier.expose();
        if v.len() != GENERATED_VERIFIER
            || !v
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
        {
            return Err(format!("generated pair {i}: the verifier is not {GENERATED_VERIFIER} unreserved characters"));
        }
        let want = base64url(&Sha256::digest(v.as_bytes()));
        if pair.challenge != want {
            return Err(format!(
                "generated pair {i}: challenge {} is not S256 of its verifier ({want})",
                pair.challenge
            ));
        }
        if !seen.insert(v.to_string()) {
            return Err(format!("generated pair {i}: a verifier repeated"));
        }
    }
    Ok(())
}

pub fn run(case: &Value) -> Result<(), String> {
    let verifier = str_field(case, "verifier")?;
    let got = challenge_s256(verifier);
    match (
        case.get("challenge").and_then(Value::as_str),
        case.get("error").and_then(Value::as_str),
    ) {
        (Some(want), None) => match got {
            Ok(c) if c == want => {}
            Ok(c) => return Err(format!("challenge {c:?}, expected {want:?}")),
            Err(e) => return Err(format!("refused ({e}), expected challenge {want:?}")),
        },
        (None, Some("invalid_verifier")) => {
            if let Ok(c) = got {
                return Err(format!(
                    "accepted with challenge {c:?}, expected invalid_verifier"
                ));
            }
        }
        (None, Some(other)) => return Err(format!("malformed case: unknown error {other:?}")),
        _ => return Err("malformed case: exactly one of \"challenge\" and \"error\"".into()),
    }
    check_generated()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_independent_base64url_matches_the_rfc_example() {
        use sha2::Digest;
        let d = sha2::Sha256::digest(b"dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk");
        assert_eq!(
            super::base64url(&d),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        assert_eq!(super::base64url(b"f"), "Zg");
        assert_eq!(super::base64url(b"fo"), "Zm8");
        assert_eq!(super::base64url(b"foo"), "Zm9v");
    }
}
