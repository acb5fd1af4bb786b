//! The message set of each role. Every role understands the [`CommonRequest`]s (confinement
//! probes and status, plus echo, streaming echo and sleep in test builds) beside its own.

use crate::probe::{Probe, ProbeOutcome};
use crate::proto::Protocol;
use crate::Role;
use serde::{Deserialize, Serialize};

/// Requests every worker answers.
///
/// The variants behind the `test-support` feature exist only in test builds (they let tests hold a
/// request open, stream, or measure a round trip); they come last so that the others encode the
/// same way with and without the feature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommonRequest {
    /// Attempt a forbidden operation and report the kernel's answer.
    Probe(Probe),
    /// Report the worker's pid and memory.
    Status,
    /// Reply with the same bytes.
    #[cfg(feature = "test-support")]
    Echo {
        /// The bytes to send back.
        data: Vec<u8>,
    },
    /// Stream `count` items of `data`, then reply with the count.
    #[cfg(feature = "test-support")]
    EchoStream {
        /// The bytes each item carries.
        data: Vec<u8>,
        /// How many items to send.
        count: u32,
    },
    /// Wait, then reply; used to test cancellation and in-flight failure.
    #[cfg(feature = "test-support")]
    Sleep {
        /// How long to wait.
        ms: u64,
    },
}

/// Answers to [`CommonRequest`]s.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommonResponse {
    /// What the probe did.
    Probe(ProbeOutcome),
    /// The worker's pid and memory.
    Status(WorkerStatus),
    /// The echoed bytes.
    #[cfg(feature = "test-support")]
    Echo {
        /// The bytes the request carried.
        data: Vec<u8>,
    },
    /// The streaming echo sent all its items.
    #[cfg(feature = "test-support")]
    EchoStreamDone {
        /// How many items were sent.
        count: u32,
    },
    /// The sleep is over.
    #[cfg(feature = "test-support")]
    Slept,
}

/// Streamed parts of common responses (only the test-only streaming echo has any).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommonItem {
    /// One item of a streaming echo.
    #[cfg(feature = "test-support")]
    Echo {
        /// Its position, from 0.
        seq: u32,
        /// The request's bytes.
        data: Vec<u8>,
    },
}

/// Unsolicited messages every worker may send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommonEvent {
    /// A log line the worker wants recorded by the supervisor.
    Log {
        /// How serious.
        level: LogLevel,
        /// The line.
        message: String,
    },
}

/// The level of a worker's [`CommonEvent::Log`] line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogLevel {
    /// Something failed.
    Error,
    /// Something looks wrong.
    Warn,
    /// Worth knowing.
    Info,
    /// Detail for debugging.
    Debug,
}

/// A worker's answer to [`CommonRequest::Status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// Its pid (in its own pid namespace).
    pub pid: u32,
    /// Its role.
    pub role: Role,
    /// Resident set size in KiB (`VmRSS`).
    pub rss_kib: u64,
}

pub mod broker;
pub mod http;
pub mod lsp;
pub mod mcp;
pub mod mcphttp;
pub mod model;
pub mod providers;
pub mod tools;

/// Implements [`Protocol`] for a role's marker type over the `Request`, `Response`, `Item` and
/// `Event` enums of the module it is invoked in.
macro_rules! impl_protocol {
    ($proto:ident, $role:expr) => {
        /// The channel type of this role.
        #[derive(Debug)]
        pub struct $proto;

        impl $crate::proto::Protocol for $proto {
            const ROLE: $crate::Role = $role;
            type Request = Request;
            type Response = Response;
            type Item = Item;
            type Event = Event;
        }
    };
}
pub(crate) use impl_protocol;

/// Lets code that serves every role (the worker runtime, the supervisor's worker actor) reach the
/// common requests of any role's message set.
pub trait HasCommon: Protocol {
    /// Wrap a common request in this role's request type.
    fn common_request(req: CommonRequest) -> Self::Request;
    /// The common request inside, if it is one.
    fn as_common_request(req: &Self::Request) -> Option<&CommonRequest>;
    /// Wrap a common response in this role's response type.
    fn common_response(resp: CommonResponse) -> Self::Response;
    /// The common response inside, if it is one.
    fn into_common_response(resp: Self::Response) -> Option<CommonResponse>;
    /// Wrap a common item in this role's item type.
    fn common_item(item: CommonItem) -> Self::Item;
    /// The common item inside, if it is one.
    fn into_common_item(item: Self::Item) -> Option<CommonItem>;
}

macro_rules! has_common {
    ($($(#[$doc:meta])* $variant:ident($name:literal, $module:ident, $proto:ident)),* $(,)?) => {$(
        impl HasCommon for $module::$proto {
            fn common_request(req: CommonRequest) -> $module::Request {
                $module::Request::Common(req)
            }
            fn as_common_request(req: &$module::Request) -> Option<&CommonRequest> {
                match req {
                    $module::Request::Common(c) => Some(c),
                    // Role-specific requests, once the role has them.
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
            fn common_response(resp: CommonResponse) -> $module::Response {
                $module::Response::Common(resp)
            }
            fn into_common_response(resp: $module::Response) -> Option<CommonResponse> {
                match resp {
                    $module::Response::Common(c) => Some(c),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
            fn common_item(item: CommonItem) -> $module::Item {
                $module::Item::Common(item)
            }
            fn into_common_item(item: $module::Item) -> Option<CommonItem> {
                match item {
                    $module::Item::Common(c) => Some(c),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
        }
    )*};
}

crate::with_roles!(has_common);
