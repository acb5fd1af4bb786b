//! Secrets, in one place for every crate: [`Secret`] (defined in `hanzo-ipc`, the lowest crate,
//! and re-exported here), the one type that holds a secret value (zeroized when dropped, never
//! shown by `Debug` or `Display`, never `Serialize`), and
//! [`SecretValues`], the one scrubber — it redacts known values from what leaves the agent loop
//! (text, JSON, the broker's error bodies as bytes) and refuses to store a record that still
//! holds one.

use serde_json::Value;
use std::borrow::Cow;
use std::fmt;

pub use hanzo_ipc::secret::{Secret, REDACTED};

/// Values shorter than this are not treated as secrets: recognising `0` or `yes` would redact
/// ordinary text everywhere, and a value this short is guessed, not stolen. They are still kept
/// from every worker but the broker (by variable name, not by value).
pub const MIN_SECRET_LEN: usize = 4;

/// A set of secret values (API keys, passwords, tokens taken from the environment). Never
/// printed: `Debug` shows only how many there are.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretValues {
    /// Longest first, so a secret that contains another is redacted whole.
    values: Vec<String>,
}

impl fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretValues({} values)", self.values.len())
    }
}

impl SecretValues {
    /// The values worth recognising (at least [`MIN_SECRET_LEN`] characters), deduplicated.
    pub fn new<I, S>(values: I) -> SecretValues
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut values: Vec<String> = values
            .into_iter()
            .map(Into::into)
            .filter(|v| v.chars().count() >= MIN_SECRET_LEN)
            .collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        SecretValues { values }
    }

    /// Whether no value is long enough to be worth scrubbing.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// How many distinct values are scrubbed.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether `text` contains any of the values.
    pub fn found_in(&self, text: &str) -> bool {
        self.values.iter().any(|v| text.contains(v.as_str()))
    }

    /// Whether any string (or key) inside `value` contains one of the values, or its compact
    /// serialization does (serialization escapes a secret holding `"` or `\`, so both are
    /// checked).
    pub fn found_in_json(&self, value: &Value) -> bool {
        if self.values.is_empty() {
            return false;
        }
        fn walk(v: &Value, f: &dyn Fn(&str) -> bool) -> bool {
            match v {
                Value::String(s) => f(s),
                Value::Array(items) => items.iter().any(|i| walk(i, f)),
                Value::Object(map) => map.iter().any(|(k, i)| f(k) || walk(i, f)),
                _ => false,
            }
        }
        walk(value, &|s| self.found_in(s))
            || self.found_in(&serde_json::to_string(value).expect("a Value always serializes"))
    }

    /// `text` with every value replaced by [`REDACTED`]; borrows when nothing matched.
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for v in &self.values {
            if out.contains(v.as_str()) {
                out = Cow::Owned(out.replace(v.as_str(), REDACTED));
            }
        }
        out
    }

    /// [`SecretValues::scrub`] over raw bytes (a body that may not be UTF-8).
    pub fn scrub_bytes(&self, mut bytes: Vec<u8>) -> Vec<u8> {
        for v in &self.values {
            let needle = v.as_bytes();
            let mut from = 0;
            while let Some(i) = find(&bytes[from..], needle) {
                let at = from + i;
                bytes.splice(at..at + needle.len(), REDACTED.bytes());
                from = at + REDACTED.len();
            }
        }
        bytes
    }

    /// [`SecretValues::scrub`] over every string and key of a JSON value.
    pub fn scrub_json(&self, value: Value) -> Value {
        if self.values.is_empty() {
            return value;
        }
        match value {
            Value::String(s) => Value::String(self.scrub(&s).into_owned()),
            Value::Array(a) => Value::Array(a.into_iter().map(|x| self.scrub_json(x)).collect()),
            Value::Object(o) => Value::Object(
                o.into_iter()
                    .map(|(k, x)| (self.scrub(&k).into_owned(), self.scrub_json(x)))
                    .collect(),
            ),
            other => other,
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_never_shown_and_bytes_are_scrubbed_whole() {
        let s = Secret::new("sk-live-abcdef");
        assert_eq!(format!("{s:?} {s}"), "[redacted] [redacted]");
        assert_eq!(s.expose(), "sk-live-abcdef");
        let parsed: Secret = serde_json::from_str(r#""sk-live-abcdef""#).expect("parse");
        assert_eq!(parsed, s);
        let v = SecretValues::new(["sk-live-abcdef", "sk-live"]);
        let body = b"\xff key=sk-live-abcdef, again sk-live-abcdef and sk-live!".to_vec();
        assert_eq!(
            v.scrub_bytes(body),
            b"\xff key=[redacted], again [redacted] and [redacted]!".to_vec()
        );
        // A value that reappears inside the replacement is not looped on.
        let v = SecretValues::new(["dact"]);
        assert_eq!(
            v.scrub_bytes(b"dact dact".to_vec()),
            b"[redacted] [redacted]".to_vec()
        );
    }
    use serde_json::json;

    #[test]
    fn short_and_empty_values_are_not_secrets() {
        let s = SecretValues::new(["", "0", "yes", "abcd", "abcd"]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.scrub("0 yes abcd"), "0 yes [redacted]");
    }

    #[test]
    fn the_longest_value_is_redacted_whole() {
        let s = SecretValues::new(["token", "token-with-suffix"]);
        assert_eq!(s.scrub("x token-with-suffix y"), "x [redacted] y");
        assert_eq!(s.scrub("just token"), "just [redacted]");
        assert!(matches!(s.scrub("nothing here"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_is_searched_and_scrubbed_in_keys_values_and_escaped_form() {
        let s = SecretValues::new(["se\"cret"]);
        let v = json!({"se\"cret": ["a se\"cret b", 1]});
        assert!(s.found_in_json(&v));
        assert_eq!(
            s.scrub_json(v),
            json!({"[redacted]": ["a [redacted] b", 1]})
        );
        assert!(!s.found_in_json(&json!({"k": "clean"})));
        assert_eq!(format!("{s:?}"), "SecretValues(1 values)");
    }
}
