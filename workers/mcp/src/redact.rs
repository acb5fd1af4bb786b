//! Redacting a stdio server's secrets from what the mcp worker passes on, without keeping them.
//!
//! A server given a secret (`${secret:NAME}`, resolved by the broker at spawn) may echo it: in a
//! tool result, an error, a log message, on stderr. Everything the worker sends on (answers,
//! progress, events, its own stderr) passes [`Redactor::scrub`], which replaces each occurrence
//! with `[redacted]`.
//!
//! The worker zeroes the values once the server is spawned, so the redactor holds *fingerprints*
//! instead: per value, its length, a polynomial hash under a base drawn at random for this
//! process (to find candidates in one pass, Rabin–Karp), and its SHA-256 (to confirm a candidate
//! exactly). A value is matched whole, never in part, so the redaction can at most confirm a
//! whole guess (see SECURITY.md). Values shorter than
//! [`MIN_SECRET_LEN`](hanzo_policy::secret::MIN_SECRET_LEN) are not redacted, as everywhere else.

use hanzo_policy::secret::{MIN_SECRET_LEN, REDACTED};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;

/// One value, as the redactor remembers it.
#[derive(Clone, PartialEq, Eq)]
struct Fingerprint {
    len: usize,
    rolling: u64,
    digest: [u8; 32],
}

/// The fingerprints of the secrets each stdio server was spawned with.
pub struct Redactor {
    /// Odd, random per process: a server cannot aim collisions at it.
    base: u64,
    by_server: Mutex<BTreeMap<String, Vec<Fingerprint>>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} servers)", self.lock().len())
    }
}

impl Default for Redactor {
    fn default() -> Self {
        Redactor::new()
    }
}

fn rolling(base: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |h, &b| {
        h.wrapping_mul(base).wrapping_add(u64::from(b))
    })
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl Redactor {
    /// A redactor holding nothing.
    pub fn new() -> Redactor {
        // `RandomState` is seeded from the OS's randomness; its hasher's output is 64 random bits.
        let base = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
            | 1;
        Redactor {
            base,
            by_server: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<Fingerprint>>> {
        self.by_server.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remember `values` as `server`'s secrets (replacing what it had): each value, and its form
    /// inside a JSON string when that differs (a value holding `"`, `\` or a control character).
    /// Only fingerprints are kept; the caller zeroes the values.
    pub fn set(&self, server: &str, values: &[&str]) {
        let mut prints = Vec::new();
        for v in values
            .iter()
            .filter(|v| v.chars().count() >= MIN_SECRET_LEN)
        {
            let escaped = serde_json::to_string(v).unwrap_or_default();
            let inner = escaped
                .strip_prefix('"')
                .and_then(|e| e.strip_suffix('"'))
                .unwrap_or_default();
            let forms: &[&[u8]] = if inner == *v {
                &[v.as_bytes()]
            } else {
                &[v.as_bytes(), inner.as_bytes()]
            };
            for form in forms {
                let p = Fingerprint {
                    len: form.len(),
                    rolling: rolling(self.base, form),
                    digest: digest(form),
                };
                if !prints.contains(&p) {
                    prints.push(p);
                }
            }
            // The escaped copy is not a secret's value, but it holds one: gone with the scope.
            drop(escaped);
        }
        let mut all = self.lock();
        if prints.is_empty() {
            all.remove(server);
        } else {
            all.insert(server.to_string(), prints);
        }
    }

    /// Forget every server not in `keep`.
    pub fn retain(&self, keep: &[&str]) {
        self.lock().retain(|name, _| keep.contains(&name.as_str()));
    }

    /// Whether any secret is held.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The byte ranges of `text` that are one of the held values, left to right, not
    /// overlapping (the longer first where two start at the same place).
    fn matches(&self, text: &[u8]) -> Vec<(usize, usize)> {
        let all = self.lock();
        let mut by_len: BTreeMap<usize, Vec<&Fingerprint>> = BTreeMap::new();
        for p in all.values().flatten() {
            by_len.entry(p.len).or_default().push(p);
        }
        let mut found = Vec::new();
        for (len, prints) in by_len {
            if len == 0 || len > text.len() {
                continue;
            }
            // base^(len-1), to take the leaving byte out of the window's hash.
            let top = (1..len).fold(1u64, |acc, _| acc.wrapping_mul(self.base));
            let mut h = rolling(self.base, &text[..len]);
            let mut start = 0;
            loop {
                if prints.iter().any(|p| p.rolling == h) {
                    let d = digest(&text[start..start + len]);
                    if prints.iter().any(|p| p.rolling == h && p.digest == d) {
                        found.push((start, start + len));
                    }
                }
                if start + len >= text.len() {
                    break;
                }
                h = h
                    .wrapping_sub(u64::from(text[start]).wrapping_mul(top))
                    .wrapping_mul(self.base)
                    .wrapping_add(u64::from(text[start + len]));
                start += 1;
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut out: Vec<(usize, usize)> = Vec::new();
        for m in found {
            if out.last().is_none_or(|last| m.0 >= last.1) {
                out.push(m);
            }
        }
        out
    }

    /// Whether `text` holds one of the values.
    pub fn found_in(&self, text: &str) -> bool {
        !self.is_empty() && !self.matches(text.as_bytes()).is_empty()
    }

    /// `text` with every held value replaced by `[redacted]`.
    pub fn scrub(&self, text: &str) -> String {
        if self.is_empty() {
            return text.to_string();
        }
        let ranges = self.matches(text.as_bytes());
        if ranges.is_empty() {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (start, end) in ranges {
            // A match is a whole UTF-8 string's bytes, so its ends are character boundaries.
            out.push_str(text.get(at..start).unwrap_or_default());
            out.push_str(REDACTED);
            at = end;
        }
        out.push_str(text.get(at..).unwrap_or_default());
        out
    }

    /// [`Redactor::scrub`] in place.
    pub fn scrub_in_place(&self, text: &mut String) {
        if !self.is_empty() && self.found_in(text) {
            *text = self.scrub(text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "ghp_fingerprinted-canary-77";

    #[test]
    fn held_values_are_redacted_whole_wherever_they_are() {
        let r = Redactor::new();
        assert!(r.is_empty());
        assert_eq!(r.scrub(SECRET), SECRET);
        r.set("gh", &[SECRET, "abc"]);
        for (text, want) in [
            (SECRET.to_string(), "[redacted]".to_string()),
            (
                format!("token={SECRET}; again {SECRET}!"),
                "token=[redacted]; again [redacted]!".to_string(),
            ),
            (format!("{SECRET}{SECRET}"), "[redacted][redacted]".into()),
            (format!("é{SECRET}ü"), "é[redacted]ü".into()),
            // A part of it, or a near miss, is left alone (no oracle on prefixes).
            (SECRET[..10].to_string(), SECRET[..10].to_string()),
            (SECRET.replace('7', "8"), SECRET.replace('7', "8")),
            // Too short to be treated as a secret.
            ("abc abc".into(), "abc abc".into()),
        ] {
            assert_eq!(r.scrub(&text), want, "{text}");
            assert!(!r.scrub(&text).contains(SECRET));
        }
        // Another server's values, and a value holding a quote: raw and as JSON escapes it.
        let quoted = "pa\"ss\\word-1234";
        r.set("db", &[quoted]);
        let json = serde_json::json!({"text": format!("x{quoted}y")}).to_string();
        assert!(json.contains("pa\\\"ss"), "{json}");
        let scrubbed = r.scrub(&json);
        assert_eq!(scrubbed, r#"{"text":"x[redacted]y"}"#);
        assert_eq!(r.scrub(&format!("<{quoted}>")), "<[redacted]>");
        // Setting one server's values leaves another's.
        assert_eq!(r.scrub(SECRET), "[redacted]");
        // Forgetting a server forgets its values.
        r.retain(&["db"]);
        assert_eq!(r.scrub(SECRET), SECRET);
        r.set("db", &[]);
        assert!(r.is_empty());
    }

    #[test]
    fn overlapping_values_are_redacted_as_the_longest() {
        let r = Redactor::new();
        r.set("a", &["secret-one", "secret-one-and-more", "one-and"]);
        assert_eq!(
            r.scrub("[secret-one-and-more] secret-one-and"),
            "[[redacted]] [redacted]-and"
        );
    }

    #[test]
    fn nothing_of_the_value_is_kept_but_its_fingerprint() {
        let r = Redactor::new();
        r.set("gh", &[SECRET]);
        let shown = format!("{r:?}");
        assert!(!shown.contains(SECRET), "{shown}");
        let all = r.lock();
        let p = &all["gh"][0];
        assert_eq!(p.len, SECRET.len());
        assert_ne!(p.digest.as_slice(), SECRET.as_bytes());
    }
}
