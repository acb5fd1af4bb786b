//! The MCP server-name contract: a name becomes part of every tool name the model sees
//! (`mcp__<server>__<tool>`, `../shared/test-vectors.md`), so it must keep that name unambiguous.
//! The settings loader checks names here (with the file, line and column); the mcp client
//! (`hanzo_mcp::validate_server_name`) checks names from other sources (an ACP session) with the
//! same function.

use thiserror::Error;

/// A server name that cannot be part of a tool name (`mcp__<server>__<tool>`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("MCP server name {name:?} {why}; use letters, digits, `-` and single `_` (e.g. \"github\", \"my-server\")")]
pub struct InvalidServerName {
    /// The name as configured.
    pub name: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// A server name must be non-empty, made of `[A-Za-z0-9_-]`, and contain no `__` nor start or end
/// with `_` — any of those would make `mcp__<server>__<tool>` ambiguous.
pub fn validate_server_name(name: &str) -> Result<(), InvalidServerName> {
    let bad = |why| {
        Err(InvalidServerName {
            name: name.to_string(),
            why,
        })
    };
    if name.is_empty() {
        return bad("is empty");
    }
    if name
        .chars()
        .any(|c| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
    {
        return bad("contains a character outside [A-Za-z0-9_-]");
    }
    if name.contains("__") {
        return bad("contains `__`, the separator of mcp__<server>__<tool>");
    }
    if name.starts_with('_') || name.ends_with('_') {
        return bad("starts or ends with `_`, which would run into the `__` separator");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_validated() {
        for ok in ["github", "my-server", "a_b", "X9"] {
            assert_eq!(validate_server_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a__b", "_a", "a_", "a.b", "ä", "a b", "a/b"] {
            assert!(validate_server_name(bad).is_err(), "{bad:?}");
        }
        assert!(validate_server_name("a__b")
            .expect_err("separator")
            .to_string()
            .contains("contains `__`"));
    }
}
