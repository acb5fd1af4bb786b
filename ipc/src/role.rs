//! The worker roles. One OS process per role; each role has its own channel type.
//!
//! [`with_roles!`](crate::with_roles) is the one list of roles: the [`Role`] enum, its names, the
//! per-role protocol glue in [`roles`](crate::roles), the worker runtime's dispatch, the
//! supervisor's per-role handles and the worker entry in `main.rs` are all generated from it, so a
//! new role is one row here plus its message module and its entry function.
//!
//! [`CHANNEL_ENDS`] is the one list of the sockets a role inherits beside its supervisor channel
//! ([`SUPERVISOR_FD`]), with the fd number each end has in its worker: the supervisor places the
//! ends by it, the workers adopt them by it ([`fd`], checked at compile time), and the named
//! numbers in [`transport`](crate::transport) are derived from it.

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

/// The fd number of every worker's channel to the supervisor.
pub const SUPERVISOR_FD: i32 = 3;

/// A socket between two workers, each inheriting one end at a fixed fd number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// model ↔ broker: the model worker's credential-free HTTP ([`crate::roles::http`]).
    ModelBroker,
    /// mcp ↔ broker: exchanges with remote MCP servers ([`crate::roles::mcphttp`]).
    McpBroker,
    /// broker ↔ tools: the egress control socket for sandboxed commands, given when a run allows
    /// them network.
    ToolsEgress,
    /// broker ↔ mcp: the egress control socket for MCP stdio servers, given when a run's servers
    /// ask for network.
    McpEgress,
}

/// One end of a [`Channel`]: the role that holds it and the fd number it has in that worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelEnd {
    /// The channel.
    pub channel: Channel,
    /// The role whose worker holds this end.
    pub role: Role,
    /// The end's fd number in that worker.
    pub fd: i32,
    /// The worker runtime adopts this end and hands it to the role's entry as its direct
    /// channel (at most one per role); the role's own code adopts every other end.
    pub by_runtime: bool,
}

/// Every end of every [`Channel`], two per channel, the first being the channel's side A (the
/// broker's, which serves). Which numbers are free is decided here only: an end's number must
/// not be 0–2 (stdio) or [`SUPERVISOR_FD`], nor another end's of the same role (checked at compile
/// time and by the tests).
pub const CHANNEL_ENDS: [ChannelEnd; 8] = [
    end(Channel::ModelBroker, Role::Broker, 4, true),
    end(Channel::ModelBroker, Role::Model, 4, true),
    end(Channel::McpBroker, Role::Broker, 5, false),
    end(Channel::McpBroker, Role::Mcp, 4, true),
    end(Channel::ToolsEgress, Role::Broker, 6, false),
    end(Channel::ToolsEgress, Role::Tools, 6, false),
    end(Channel::McpEgress, Role::Broker, 7, false),
    end(Channel::McpEgress, Role::Mcp, 6, false),
];

const fn end(channel: Channel, role: Role, fd: i32, by_runtime: bool) -> ChannelEnd {
    ChannelEnd {
        channel,
        role,
        fd,
        by_runtime,
    }
}

// `==` on the enums is not `const`; their discriminants are.
const fn same_role(a: Role, b: Role) -> bool {
    a as u8 == b as u8
}

const fn same_channel(a: Channel, b: Channel) -> bool {
    a as u8 == b as u8
}

/// The fd number of `role`'s end of `channel`, if the table gives `role` one.
pub const fn fd_of(channel: Channel, role: Role) -> Option<i32> {
    let mut i = 0;
    while i < CHANNEL_ENDS.len() {
        let e = CHANNEL_ENDS[i];
        if same_channel(e.channel, channel) && same_role(e.role, role) {
            return Some(e.fd);
        }
        i += 1;
    }
    None
}

/// The fd number of `role`'s end of `channel`. Used in a `const` (as every worker does), a pair
/// the table does not list is a compile error, so no worker can look for an end the supervisor
/// does not pass.
pub const fn fd(channel: Channel, role: Role) -> i32 {
    match fd_of(channel, role) {
        Some(fd) => fd,
        None => panic!("the role table gives this role no end of this channel"),
    }
}

/// The ends `role`'s worker inherits besides its supervisor channel, in table order.
pub fn channel_ends(role: Role) -> impl Iterator<Item = ChannelEnd> {
    CHANNEL_ENDS.into_iter().filter(move |e| e.role == role)
}

/// The end the worker runtime adopts for `role` as its direct channel, if it has one.
pub fn runtime_channel(role: Role) -> Option<ChannelEnd> {
    channel_ends(role).find(|e| e.by_runtime)
}

/// Whether `role` holds side A of `channel` (the first of its two ends in the table).
pub fn is_side_a(channel: Channel, role: Role) -> bool {
    CHANNEL_ENDS
        .iter()
        .find(|e| e.channel == channel)
        .is_some_and(|e| e.role == role)
}

// The rules of `CHANNEL_ENDS`, checked while compiling: every channel has exactly two ends, of
// two different roles; no end uses stdio or `SUPERVISOR_FD`; no role has two ends on one number
// or more than one end adopted by the runtime. (A block, not a `const fn`: Rust 1.88 calls a
// function used only here dead code.)
const _: () = {
    let mut i = 0;
    while i < CHANNEL_ENDS.len() {
        let a = CHANNEL_ENDS[i];
        assert!(
            a.fd > 2 && a.fd != SUPERVISOR_FD,
            "an end on stdio or the supervisor's fd"
        );
        let mut ends_of_channel = 1;
        let mut j = 0;
        while j < CHANNEL_ENDS.len() {
            let b = CHANNEL_ENDS[j];
            if j != i {
                if same_channel(a.channel, b.channel) {
                    ends_of_channel += 1;
                    assert!(
                        !same_role(a.role, b.role),
                        "a channel with both ends in one role"
                    );
                }
                if same_role(a.role, b.role) {
                    assert!(a.fd != b.fd, "two ends of one role on one fd number");
                    assert!(
                        !(a.by_runtime && b.by_runtime),
                        "two runtime ends in one role"
                    );
                }
            }
            j += 1;
        }
        assert!(ends_of_channel == 2, "a channel without exactly two ends");
        i += 1;
    }
};

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

    /// The table's rules hold for every role (the same rules the compile-time check applies; this
    /// test says which role and numbers break them).
    #[test]
    fn no_role_has_two_ends_on_one_fd_and_every_channel_joins_two_roles() {
        for role in Role::ALL {
            let mut fds = vec![SUPERVISOR_FD];
            for e in channel_ends(role) {
                assert!(e.fd > 2, "{role}: {:?} on stdio fd {}", e.channel, e.fd);
                assert!(!fds.contains(&e.fd), "{role}: fd {} used twice", e.fd);
                fds.push(e.fd);
            }
            assert!(channel_ends(role).filter(|e| e.by_runtime).count() <= 1);
        }
        for e in CHANNEL_ENDS {
            let ends: Vec<Role> = CHANNEL_ENDS
                .iter()
                .filter(|o| o.channel == e.channel)
                .map(|o| o.role)
                .collect();
            assert_eq!(ends.len(), 2, "{:?}", e.channel);
            assert_ne!(ends[0], ends[1], "{:?}", e.channel);
            assert_eq!(fd_of(e.channel, e.role), Some(e.fd));
        }
    }

    /// The numbers the named constants and the workers use are the table's, unchanged from before
    /// the table existed (a renumbering would break a worker binary of the same build only if the
    /// table were bypassed, but the documentation and `doctor` name these numbers).
    #[test]
    fn the_table_keeps_the_documented_numbers() {
        let by_role = |role: Role| -> Vec<(Channel, i32)> {
            channel_ends(role).map(|e| (e.channel, e.fd)).collect()
        };
        assert_eq!(
            by_role(Role::Broker),
            [
                (Channel::ModelBroker, 4),
                (Channel::McpBroker, 5),
                (Channel::ToolsEgress, 6),
                (Channel::McpEgress, 7)
            ]
        );
        assert_eq!(by_role(Role::Model), [(Channel::ModelBroker, 4)]);
        assert_eq!(by_role(Role::Tools), [(Channel::ToolsEgress, 6)]);
        assert_eq!(
            by_role(Role::Mcp),
            [(Channel::McpBroker, 4), (Channel::McpEgress, 6)]
        );
        assert_eq!(by_role(Role::Lsp), []);
        assert_eq!(runtime_channel(Role::Lsp), None);
        assert_eq!(runtime_channel(Role::Tools), None);
        for role in [Role::Broker, Role::Model, Role::Mcp] {
            assert_eq!(runtime_channel(role).map(|e| e.fd), Some(4), "{role}");
        }
        assert!(is_side_a(Channel::McpEgress, Role::Broker));
        assert!(!is_side_a(Channel::McpEgress, Role::Mcp));
    }

    /// Asking for an end the table does not give a role fails (at compile time in a `const`,
    /// which is how every worker asks).
    #[test]
    #[should_panic(expected = "gives this role no end")]
    fn an_end_the_table_does_not_list_is_refused() {
        let role = std::hint::black_box(Role::Tools);
        let _ = fd(Channel::ModelBroker, role);
    }
}
