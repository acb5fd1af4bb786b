//! [`Secret`]: the one type that holds a secret value anywhere in hanzo-dev (an API key, a token,
//! a password, an MCP server's header or granted variable). It lives here, in the lowest crate, so
//! that every crate holds secrets the same way: zeroized when dropped, never shown by `Debug` or
//! `Display`, never `Serialize`. A secret that must cross a channel is wrapped in
//! [`crate::roles::mcphttp::SecretText`], the one explicit way to put it on the wire.

use serde::{Deserialize, Deserializer};
use std::fmt;
use zeroize::Zeroizing;

/// A secret string (an API key, a token, a password): zeroized when dropped, printed as
/// `[redacted]` by `Debug` and `Display` so a stray `{:?}` in a log or an error cannot leak it,
/// and deliberately not `Serialize`, so it cannot be written out by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Zeroizing<String>);

impl Secret {
    /// Wraps `value`; from here on it is never printed.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(Zeroizing::new(value.into()))
    }

    /// The value itself, for the one place that uses it (a request header, the broker's hand).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the value is empty (an unset key).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        String::deserialize(d).map(Secret::new)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for Secret {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Secret".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string"})
    }
}

/// What a known secret value is replaced with.
pub const REDACTED: &str = "[redacted]";
