//! Message layer: frame types, the handshake, request envelopes and the per-role protocol trait.
//!
//! Every payload is `postcard`-encoded. A request carries a 64-bit id chosen by the client; the
//! worker answers with zero or more `ITEM` frames for that id and then exactly one `REPLY`, in any
//! order relative to other requests.

use crate::attest::Attestation;
use crate::Role;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use thiserror::Error;

/// The first bytes of every handshake: "HZDV".
pub const MAGIC: [u8; 4] = *b"HZDV";
/// A peer with another major version is refused. 3: the messages changed since 2 without a bump
/// (typed hooks, MCP server status and configuration fields, the lsp worker's
/// `ChangedDiagnostics`), which a peer of another build would misread. 4: a remote MCP server's
/// settings headers (`McpRemote::settings_headers`, in the broker's MCP requests).
pub const PROTOCOL_MAJOR: u16 = 4;
/// Minor versions are compatible; both sides report theirs.
pub const PROTOCOL_MINOR: u16 = 0;

/// The frame type byte of every message.
pub mod frame_type {
    /// Both sides, first: [`Hello`](super::Hello).
    pub const HELLO: u8 = 0x01;
    /// Worker → supervisor after the hellos: [`Attestation`](crate::attest::Attestation).
    pub const READY: u8 = 0x02;
    /// Supervisor → worker: `(id, Request)`.
    pub const REQUEST: u8 = 0x10;
    /// Supervisor → worker: the id to cancel.
    pub const CANCEL: u8 = 0x11;
    /// Supervisor → worker: a nonce.
    pub const PING: u8 = 0x12;
    /// Worker → supervisor: `(id, Result<Response, RemoteError>)`; ends a request.
    pub const REPLY: u8 = 0x20;
    /// Worker → supervisor: `(id, Item)`; one part of a streamed response.
    pub const ITEM: u8 = 0x21;
    /// Worker → supervisor: the ping's nonce.
    pub const PONG: u8 = 0x22;
    /// Worker → supervisor: an unsolicited `Event`.
    pub const EVENT: u8 = 0x23;
}

/// The handshake message, sent by each side before anything else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Always [`MAGIC`]; anything else is not a hanzo-dev peer.
    pub magic: [u8; 4],
    /// The sender's [`PROTOCOL_MAJOR`]; peers must agree on it.
    pub major: u16,
    /// The sender's [`PROTOCOL_MINOR`], reported for diagnostics only.
    pub minor: u16,
    /// The role of the channel as the sender understands it.
    pub role: Role,
    /// The sender's pid as it sees itself.
    pub pid: u32,
}

impl Hello {
    /// Our hello for a channel of `role`, with this build's versions and our pid.
    pub fn new(role: Role) -> Hello {
        Hello {
            magic: MAGIC,
            major: PROTOCOL_MAJOR,
            minor: PROTOCOL_MINOR,
            role,
            pid: std::process::id(),
        }
    }

    /// Check a peer's hello against the role this channel is for.
    pub fn check(&self, expected_role: Role) -> Result<(), HandshakeError> {
        if self.magic != MAGIC {
            return Err(HandshakeError::BadMagic { got: self.magic });
        }
        if self.major != PROTOCOL_MAJOR {
            return Err(HandshakeError::VersionMismatch {
                ours: (PROTOCOL_MAJOR, PROTOCOL_MINOR),
                theirs: (self.major, self.minor),
            });
        }
        if self.role != expected_role {
            return Err(HandshakeError::WrongRole {
                expected: expected_role,
                got: self.role,
            });
        }
        Ok(())
    }
}

/// Why a channel's handshake failed; the channel is then closed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HandshakeError {
    /// The first four bytes of the peer's hello are not `"HZDV"`.
    #[error("peer is not a hanzo-dev process (magic {got:02x?}, expected \"HZDV\")")]
    BadMagic {
        /// The bytes the peer sent instead.
        got: [u8; 4],
    },
    /// The peer speaks another major protocol version (a binary from another build).
    #[error(
        "protocol major version mismatch: we speak {}.{}, the peer {}.{}; \
         both ends must come from the same hanzo-dev build",
        ours.0, ours.1, theirs.0, theirs.1
    )]
    VersionMismatch {
        /// Our (major, minor) version.
        ours: (u16, u16),
        /// The peer's (major, minor) version.
        theirs: (u16, u16),
    },
    /// The peer's hello or attestation names another role than the channel's.
    #[error("peer says it is the {got} worker, this channel is for {expected}")]
    WrongRole {
        /// The role this channel is for.
        expected: Role,
        /// The role the peer claims.
        got: Role,
    },
    /// A frame of another type arrived where the handshake expects `expected`.
    #[error("expected a {expected} frame during the handshake, got type 0x{got:02x}")]
    UnexpectedFrame {
        /// The frame the handshake was waiting for (`"HELLO"`, `"READY"`).
        expected: &'static str,
        /// The frame type byte that arrived.
        got: u8,
    },
    /// The peer closed the channel before the handshake finished.
    #[error("peer closed the channel during the handshake")]
    Closed,
}

/// An error the worker reports for one request (the request failed; the channel is fine).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Error)]
#[error("{kind:?}: {message}")]
pub struct RemoteError {
    /// What kind of failure it was.
    pub kind: RemoteErrorKind,
    /// The worker's explanation, for the log and the user.
    pub message: String,
}

/// The class of a [`RemoteError`], which decides how the supervisor reacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoteErrorKind {
    /// The request was well-formed but cannot be done (a path outside the workspace, …).
    Refused,
    /// The request made no sense to this worker.
    BadRequest,
    /// Cancelled by the supervisor.
    Cancelled,
    /// The worker failed doing it.
    Internal,
}

impl RemoteError {
    /// A remote error of `kind` with `message`.
    pub fn new(kind: RemoteErrorKind, message: impl Into<String>) -> RemoteError {
        RemoteError {
            kind,
            message: message.into(),
        }
    }
}

/// A role's message set. Channels are generic over it, so a channel can carry only its role's
/// messages: the tools channel has no way to express a credential request.
pub trait Protocol: Send + Sync + 'static {
    /// The role whose channel carries these messages; the handshake checks it.
    const ROLE: Role;
    /// What the supervisor asks of the worker.
    type Request: Serialize + DeserializeOwned + Debug + Send + Sync + 'static;
    /// The worker's one final answer to a request.
    type Response: Serialize + DeserializeOwned + Debug + Send + Sync + 'static;
    /// One part of a streamed answer, sent before the final [`Protocol::Response`].
    type Item: Serialize + DeserializeOwned + Debug + Send + Sync + 'static;
    /// What the worker reports unasked (a log line, a record for the store).
    type Event: Serialize + DeserializeOwned + Debug + Send + Sync + 'static;
}

/// Payload of a `REQUEST` frame.
#[derive(Debug, Serialize, Deserialize)]
pub struct RequestEnvelope<R> {
    /// The client's request id, echoed in every item and the reply.
    pub id: u64,
    /// The role's request.
    pub body: R,
}

/// Payload of an `ITEM` frame.
#[derive(Debug, Serialize, Deserialize)]
pub struct ItemEnvelope<I> {
    /// The id of the request this item belongs to.
    pub id: u64,
    /// The streamed part.
    pub item: I,
}

/// Payload of a `REPLY` frame.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReplyEnvelope<R> {
    /// The id of the request this reply ends.
    pub id: u64,
    /// The response, or the worker's error for this request.
    pub result: Result<R, RemoteError>,
}

/// A payload that does not decode as the type its frame type promises.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("malformed {what} payload: {reason}")]
pub struct DecodeError {
    /// The frame's name (`"REQUEST"`, `"READY"`, …), for the message.
    pub what: &'static str,
    /// postcard's complaint, or the count of trailing bytes.
    pub reason: String,
}

/// Encode a message as a frame payload (postcard).
pub fn encode_payload<T: Serialize>(value: &T) -> Vec<u8> {
    // postcard only fails to serialize for types it cannot represent (maps with non-string keys
    // are fine; unsized sequences are not used); our message types are all representable.
    postcard::to_stdvec(value).expect("protocol types are postcard-serializable")
}

/// Decode a frame payload named `what` as `T`; trailing bytes are an error, so a payload holds
/// exactly one value.
pub fn decode_payload<T: DeserializeOwned>(
    what: &'static str,
    bytes: &[u8],
) -> Result<T, DecodeError> {
    let (value, rest) = postcard::take_from_bytes(bytes).map_err(|e| DecodeError {
        what,
        reason: e.to_string(),
    })?;
    if !rest.is_empty() {
        return Err(DecodeError {
            what,
            reason: format!("{} trailing bytes", rest.len()),
        });
    }
    Ok(value)
}

/// The `Ready` payload.
pub type Ready = Attestation;
