//! The worker roles. One OS process per role; each role has its own channel type.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Role {
    /// Holds every credential; performs authenticated HTTP for other workers.
    Broker,
    /// Provider protocols; parses untrusted model output; no secrets, no network, no files.
    Model,
    /// Built-in tools and command execution in the workspace.
    Tools,
    /// MCP client bridge.
    Mcp,
    /// Language-server client.
    Lsp,
}

impl Role {
    pub const ALL: [Role; 5] = [Role::Broker, Role::Model, Role::Tools, Role::Mcp, Role::Lsp];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Broker => "broker",
            Role::Model => "model",
            Role::Tools => "tools",
            Role::Mcp => "mcp",
            Role::Lsp => "lsp",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
