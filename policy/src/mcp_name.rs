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

/// Headers a remote MCP server entry (`mcp_servers.*.headers`) or an editor may not set: the
/// connection's own, and the MCP transport's, which the mcp worker sets (another value would
/// break the session). Lower case.
pub const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// The longest header value sent to a remote MCP server.
pub const MAX_HEADER_VALUE: usize = 8 * 1024;

/// Why a header name cannot be sent to a remote MCP server: not an HTTP token (RFC 9110
/// `tchar`s), or one of [`RESERVED_HEADERS`]. `None` when it can.
pub fn header_name_problem(name: &str) -> Option<&'static str> {
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(tchar) {
        return Some("not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)");
    }
    if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Some("it belongs to the connection or the MCP transport");
    }
    None
}

/// Why a header value cannot be sent: longer than [`MAX_HEADER_VALUE`], or holding a character
/// other than visible ASCII, space and tab (a CR or LF would start another header). `None` when
/// it can. Never quotes the value (it may be a credential).
pub fn header_value_problem(value: &str) -> Option<&'static str> {
    if value.len() > MAX_HEADER_VALUE {
        return Some("its value is longer than 8 KiB");
    }
    if !value
        .bytes()
        .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
    {
        return Some("its value holds a character a header cannot carry");
    }
    None
}

/// The secret a settings value names, `${secret:NAME}` → `NAME` (the broker resolves it from
/// its environment); `None` for a plain value.
pub fn secret_reference(value: &str) -> Option<&str> {
    value
        .strip_prefix("${secret:")
        .and_then(|rest| rest.strip_suffix('}'))
        .filter(|name| !name.is_empty())
}

/// Whether `name` is an environment variable's name (`[A-Za-z_][A-Za-z0-9_]*`), as a secret's
/// must be.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_values_and_secret_references_are_checked() {
        for ok in [
            "Authorization",
            "X-Api-Key",
            "x_tenant",
            "a!#$%&'*+-.^_`|~9",
        ] {
            assert_eq!(header_name_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "Bad Name",
            "X:Y",
            "X\r\nY",
            "é",
            "Host",
            "content-length",
            "Transfer-Encoding",
            "Connection",
            "Mcp-Session-Id",
            "MCP-Protocol-Version",
            "Accept",
            "Last-Event-ID",
        ] {
            assert!(header_name_problem(bad).is_some(), "{bad:?}");
        }
        assert_eq!(header_value_problem("Bearer x\ty"), None);
        for bad in ["a\r\nX-Injected: 1", "a\nb", "nul\0", "é"] {
            assert!(header_value_problem(bad).is_some(), "{bad:?}");
        }
        assert!(header_value_problem(&"v".repeat(MAX_HEADER_VALUE + 1)).is_some());
        assert_eq!(header_value_problem(&"v".repeat(MAX_HEADER_VALUE)), None);
        assert_eq!(secret_reference("${secret:GH_TOKEN}"), Some("GH_TOKEN"));
        for plain in ["${secret:}", "Bearer ${secret:X}", "$secret:X", "x"] {
            assert_eq!(secret_reference(plain), None, "{plain}");
        }
        assert!(
            is_env_name("_A1") && !is_env_name("1A") && !is_env_name("A-B") && !is_env_name("")
        );
    }

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
