//! The message set of each role. Every role understands the [`CommonRequest`]s (echo, streaming
//! echo, sleep, confinement probes, status); later work adds each role's own requests beside them.

use crate::probe::{Probe, ProbeOutcome};
use crate::proto::Protocol;
use crate::Role;
use serde::{Deserialize, Serialize};

/// Requests every worker answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommonRequest {
    /// Reply with the same bytes.
    Echo { data: Vec<u8> },
    /// Stream `count` items of `data`, then reply with the count.
    EchoStream { data: Vec<u8>, count: u32 },
    /// Wait, then reply; used to test cancellation and in-flight failure.
    Sleep { ms: u64 },
    /// Attempt a forbidden operation and report the kernel's answer.
    Probe(Probe),
    /// Report the worker's pid and memory.
    Status,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommonResponse {
    Echo { data: Vec<u8> },
    EchoStreamDone { count: u32 },
    Slept,
    Probe(ProbeOutcome),
    Status(WorkerStatus),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommonItem {
    Echo { seq: u32, data: Vec<u8> },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommonEvent {
    /// A log line the worker wants recorded by the supervisor.
    Log { level: LogLevel, message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub pid: u32,
    pub role: Role,
    /// Resident set size in KiB (`VmRSS`).
    pub rss_kib: u64,
}

pub mod broker;
pub mod http;
pub mod lsp;
pub mod mcp;
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
    fn common_request(req: CommonRequest) -> Self::Request;
    fn as_common_request(req: &Self::Request) -> Option<&CommonRequest>;
    fn common_response(resp: CommonResponse) -> Self::Response;
    fn into_common_response(resp: Self::Response) -> Option<CommonResponse>;
    fn common_item(item: CommonItem) -> Self::Item;
    fn into_common_item(item: Self::Item) -> Option<CommonItem>;
}

macro_rules! has_common {
    ($module:ident :: $proto:ident) => {
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
    };
}

has_common!(broker::BrokerProtocol);
has_common!(model::ModelProtocol);
has_common!(tools::ToolsProtocol);
has_common!(mcp::McpProtocol);
has_common!(lsp::LspProtocol);
