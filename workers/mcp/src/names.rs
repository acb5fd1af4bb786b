//! Tool names as the model sees them: `mcp__<server>__<tool>` (`../shared/test-vectors.md`,
//! domain `mcp-normalization`), server-name validation, and collision detection.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use thiserror::Error;

/// The longest name a model provider accepts for a tool.
pub const MAX_TOOL_NAME_BYTES: usize = 64;
/// Bytes kept before the hash suffix when a name is too long.
const KEEP_BYTES: usize = 55;

/// Why a server name or a server's tool list cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NameError {
    /// A server name that cannot be part of a tool name (`mcp__<server>__<tool>`).
    #[error(transparent)]
    InvalidServerName(#[from] hanzo_policy::mcp_name::InvalidServerName),
    /// Two of a server's tools normalise to the same qualified name.
    #[error("MCP server {server:?}: tools {first:?} and {second:?} both become {name:?}; rename one on the server, or disable one of them")]
    Collision {
        /// The server's name.
        server: String,
        /// The first tool's own name.
        first: String,
        /// The second tool's own name.
        second: String,
        /// The qualified name both become.
        name: String,
    },
}

/// Every Unicode scalar outside `[A-Za-z0-9_-]` becomes one `_`.
pub fn normalize_component(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The model-facing name of `tool` on `server`, at most 64 bytes: a longer name becomes its first
/// 55 bytes, `_`, and the first 8 hex digits of the SHA-256 of the whole normalized name.
pub fn qualified_tool_name(server: &str, tool: &str) -> String {
    let full = format!(
        "mcp__{}__{}",
        normalize_component(server),
        normalize_component(tool)
    );
    if full.len() <= MAX_TOOL_NAME_BYTES {
        return full;
    }
    let digest = Sha256::digest(full.as_bytes());
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    // The normalized name is ASCII, so any byte index is a character boundary.
    format!("{}_{hex}", &full[..KEEP_BYTES])
}

/// A server name must be non-empty, made of `[A-Za-z0-9_-]`, and contain no `__` nor start or end
/// with `_` — any of those would make `mcp__<server>__<tool>` ambiguous. The contract lives in
/// [`hanzo_policy::mcp_name`], which the settings loader also checks names with.
pub fn validate_server_name(name: &str) -> Result<(), NameError> {
    Ok(hanzo_policy::mcp_name::validate_server_name(name)?)
}

/// The model-facing names of a server's tools, in order; an error names the first two tools that
/// normalise to the same name.
pub fn qualified_names<'a>(
    server: &str,
    tools: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<String>, NameError> {
    let mut seen: HashMap<String, &'a str> = HashMap::new();
    let mut out = Vec::new();
    for tool in tools {
        let name = qualified_tool_name(server, tool);
        if let Some(first) = seen.get(&name) {
            return Err(NameError::Collision {
                server: server.to_string(),
                first: (*first).to_string(),
                second: tool.to_string(),
                name,
            });
        }
        seen.insert(name.clone(), tool);
        out.push(name);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_contract() {
        assert_eq!(
            qualified_tool_name("github", "create_issue"),
            "mcp__github__create_issue"
        );
        assert_eq!(qualified_tool_name("my.srv", "a b/ü"), "mcp__my_srv__a_b__");
        let long = qualified_tool_name("s", &"x".repeat(80));
        assert_eq!(long.len(), 64);
        assert_eq!(&long[55..56], "_");
        let exactly = format!("mcp__s__{}", "y".repeat(56));
        assert_eq!(exactly.len(), 64);
        assert_eq!(qualified_tool_name("s", &"y".repeat(56)), exactly);
    }

    #[test]
    fn server_names_are_validated() {
        for ok in ["github", "my-server", "a_b", "X9"] {
            assert_eq!(validate_server_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a__b", "_a", "a_", "a.b", "ä", "a b", "a/b"] {
            assert!(validate_server_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn collisions_name_both_tools() {
        let err = qualified_names("s", ["a.b", "ok", "a b"]).unwrap_err();
        assert_eq!(
            err,
            NameError::Collision {
                server: "s".into(),
                first: "a.b".into(),
                second: "a b".into(),
                name: "mcp__s__a_b".into()
            }
        );
        assert!(err.to_string().contains("\"a.b\"") && err.to_string().contains("\"a b\""));
        assert_eq!(qualified_names("s", ["a", "b"]).unwrap().len(), 2);
    }
}
