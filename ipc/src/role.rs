//! The worker roles. One OS process per role; each role has its own channel type.
//!
//! [`with_roles!`](crate::with_roles) is the one list of roles: the [`Role`] enum, its names, the
//! per-role protocol glue in [`roles`](crate::roles), the worker runtime's dispatch, the
//! supervisor's per-role handles and the worker entry in `main.rs` are all generated from it, so a
//! new role is one row here plus its message module and its entry function.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Calls `$callback!` with the table of roles, one row per role:
/// `Variant("name", module, Protocol)`, each row preceded by its doc comment.
///
/// - `Variant` names the [`Role`] variant;
/// - `"name"` is the role's name on command lines, in logs and in JSON;
/// - `module` is its message module under `hanzo_ipc::roles` (and the name of its field in the
///   supervisor and of its entry function in the binary);
/// - `Protocol` is the channel type defined in that module.
///
/// Consumers write a small macro that takes the rows and expands what they need, for example:
///
/// ```
/// macro_rules! names {
///     ($($(#[$doc:meta])* $variant:ident($name:literal, $module:ident, $proto:ident)),* $(,)?) => {
///         [$($name),*]
///     };
/// }
/// assert_eq!(hanzo_ipc::with_roles!(names), ["broker", "model", "tools", "mcp", "lsp"]);
/// ```
#[macro_export]
macro_rules! with_roles {
    ($callback:ident) => {
        $callback! {
            /// Holds every credential; performs authenticated HTTP for other workers.
            Broker("broker", broker, BrokerProtocol),
            /// Provider protocols; parses untrusted model output; no secrets, no network, no files.
            Model("model", model, ModelProtocol),
            /// Built-in tools and command execution in the workspace.
            Tools("tools", tools, ToolsProtocol),
            /// MCP client bridge.
            Mcp("mcp", mcp, McpProtocol),
            /// Language-server client.
            Lsp("lsp", lsp, LspProtocol),
        }
    };
}

macro_rules! define_role {
    ($($(#[$doc:meta])* $variant:ident($name:literal, $module:ident, $proto:ident)),* $(,)?) => {
        /// A worker role: which process, and so which channel type and sandbox profile.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum Role {
            $($(#[$doc])* $variant,)*
        }

        impl Role {
            /// How many roles there are.
            pub const COUNT: usize = [$($name),*].len();

            /// Every role, in the table's order (the order workers start and are reported in).
            pub const ALL: [Role; Role::COUNT] = [$(Role::$variant),*];

            /// The role's name on command lines, in logs and in JSON.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Role::$variant => $name,)*
                }
            }
        }
    };
}

with_roles!(define_role);

impl Role {
    /// The role named `s` (as [`Role::as_str`] writes it).
    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_distinct() {
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Some(r));
        }
        let mut names: Vec<_> = Role::ALL.iter().map(|r| r.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Role::ALL.len());
        assert_eq!(Role::parse("nosuch"), None);
    }
}
