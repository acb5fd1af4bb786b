//! Secrets for MCP stdio servers: the broker half of `${secret:NAME}` in a server's `env`.
//!
//! The supervisor names, from the user's settings, which secrets each stdio server may have
//! ([`McpSecretGrants`], replaced whole by `AllowMcpSecrets`; names only). As the mcp worker
//! spawns a server it asks, on its direct channel, for that server's names; the broker answers
//! only when every (server, name) pair was granted, and takes each value from its own
//! environment — the secret variables the supervisor removed from its own and handed to the
//! broker alone. Not from `credentials.json`: its entries are bound to their provider's endpoints
//! or their MCP server's URL (`resource`), and handing one to a process would unbind it.

use hanzo_ipc::roles::broker::McpSecretGrant;
use hanzo_ipc::roles::mcphttp::{ResolvedSecret, SecretText};
use std::collections::{BTreeMap, BTreeSet};
use thiserror::Error;

/// Why a grant or a request for secrets is refused. Never holds a value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum McpSecretError {
    /// A grant names a secret that is not an environment variable name.
    #[error(
        "MCP server {server:?}: {name:?} is not a secret's name (letters, digits and `_`, not \
         starting with a digit)"
    )]
    BadName {
        /// The server's name.
        server: String,
        /// The name as given (its first 64 characters).
        name: String,
    },
    /// A grant for a server with no name.
    #[error("a grant of MCP server secrets names no server")]
    NoServer,
    /// The mcp worker asked for a secret the supervisor did not grant that server.
    #[error(
        "MCP server {server:?} was not granted the secret {name:?}: a stdio server gets only the \
         secrets its entry in the user's settings names (`\"env\": {{\"VAR\": \
         \"${{secret:{name}}}\"}}`)"
    )]
    NotGranted {
        /// The server's name.
        server: String,
        /// The secret asked for (its first 64 characters).
        name: String,
    },
}

/// Whether `name` can be an environment variable's name: `[A-Za-z_][A-Za-z0-9_]*`, at most 256
/// bytes.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 256
}

fn cut(s: &str) -> String {
    s.chars().take(64).collect()
}

/// Which secrets each stdio server may be given, by name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct McpSecretGrants {
    by_server: BTreeMap<String, BTreeSet<String>>,
}

impl McpSecretGrants {
    /// The grants of `list`, each name checked; the first bad one is the error.
    pub fn new(list: Vec<McpSecretGrant>) -> Result<McpSecretGrants, McpSecretError> {
        let mut by_server: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for g in list {
            if g.server.is_empty() {
                return Err(McpSecretError::NoServer);
            }
            for name in &g.names {
                if !is_env_name(name) {
                    return Err(McpSecretError::BadName {
                        server: g.server.clone(),
                        name: cut(name),
                    });
                }
            }
            by_server.entry(g.server).or_default().extend(g.names);
        }
        Ok(McpSecretGrants { by_server })
    }

    /// How many (server, name) pairs are granted.
    pub fn len(&self) -> usize {
        self.by_server.values().map(BTreeSet::len).sum()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.by_server.is_empty()
    }

    /// Every granted name (of any server), once.
    pub fn names(&self) -> BTreeSet<&str> {
        self.by_server
            .values()
            .flatten()
            .map(String::as_str)
            .collect()
    }

    /// The values of `names` for `server`, read with `env` (the broker's environment): refused
    /// whole, before any value is read, when one pair was not granted; a name whose variable is
    /// unset or empty answers `None`.
    pub fn resolve(
        &self,
        server: &str,
        names: &[String],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<ResolvedSecret>, McpSecretError> {
        let granted = self.by_server.get(server);
        if let Some(name) = names
            .iter()
            .find(|n| !granted.is_some_and(|g| g.contains(n.as_str())))
        {
            return Err(McpSecretError::NotGranted {
                server: cut(server),
                name: cut(name),
            });
        }
        Ok(names
            .iter()
            .map(|name| ResolvedSecret {
                name: name.clone(),
                value: env(name).filter(|v| !v.is_empty()).map(SecretText::new),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "ghp_broker-held-canary-5d21";

    fn grant(server: &str, names: &[&str]) -> McpSecretGrant {
        McpSecretGrant {
            server: server.into(),
            names: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    fn env(k: &str) -> Option<String> {
        match k {
            "GITHUB_TOKEN" => Some(CANARY.into()),
            "ANTHROPIC_API_KEY" => Some("sk-ant-not-for-servers".into()),
            "EMPTY_TOKEN" => Some(String::new()),
            _ => None,
        }
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_server_gets_exactly_the_secrets_granted_to_it() {
        let g = McpSecretGrants::new(vec![
            grant("gh", &["GITHUB_TOKEN", "MISSING_TOKEN", "EMPTY_TOKEN"]),
            grant("other", &["ANTHROPIC_API_KEY"]),
        ])
        .unwrap();
        assert_eq!(g.len(), 4);
        let got = g
            .resolve(
                "gh",
                &names(&["GITHUB_TOKEN", "MISSING_TOKEN", "EMPTY_TOKEN"]),
                &env,
            )
            .unwrap();
        assert_eq!(got[0].value.as_ref().map(|v| v.expose()), Some(CANARY));
        assert_eq!(
            (got[1].value.is_none(), got[2].value.is_none()),
            (true, true)
        );
        // Another server's grant is not this one's; an unknown server has none; one pair not
        // granted refuses the whole request, and the error names no value.
        for (server, asked) in [
            ("gh", names(&["ANTHROPIC_API_KEY"])),
            ("gh", names(&["GITHUB_TOKEN", "ANTHROPIC_API_KEY"])),
            ("other", names(&["GITHUB_TOKEN"])),
            ("nobody", names(&["GITHUB_TOKEN"])),
        ] {
            let e = g.resolve(server, &asked, &env).unwrap_err();
            assert!(matches!(e, McpSecretError::NotGranted { .. }), "{e}");
            let shown = e.to_string();
            assert!(shown.contains("was not granted"), "{shown}");
            assert!(
                !shown.contains(CANARY) && !shown.contains("sk-ant"),
                "{shown}"
            );
        }
        // Replaced whole: an empty list grants nothing.
        let none = McpSecretGrants::new(Vec::new()).unwrap();
        assert!(none.is_empty());
        assert!(none.resolve("gh", &names(&["GITHUB_TOKEN"]), &env).is_err());
        // Asking for nothing is answered with nothing.
        assert!(none.resolve("gh", &[], &env).unwrap().is_empty());
    }

    #[test]
    fn grants_name_environment_variables_only() {
        for bad in ["", "1TOKEN", "A-B", "A=B", "TOKEN\n", "${secret:X}", "É"] {
            let e = McpSecretGrants::new(vec![grant("gh", &[bad])]).unwrap_err();
            assert!(matches!(e, McpSecretError::BadName { .. }), "{bad:?}: {e}");
        }
        assert_eq!(
            McpSecretGrants::new(vec![grant("", &["A"])]).unwrap_err(),
            McpSecretError::NoServer
        );
        assert!(is_env_name("_X1") && is_env_name("github_token"));
    }
}
