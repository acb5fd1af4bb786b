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
/// A peer with another major version is refused.
pub const PROTOCOL_MAJOR: u16 = 2;
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
    pub magic: [u8; 4],
    pub major: u16,
    pub minor: u16,
    pub role: Role,
    pub pid: u32,
}

impl Hello {
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

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HandshakeError {
    #[error("peer is not a hanzo-dev process (magic {got:02x?}, expected \"HZDV\")")]
    BadMagic { got: [u8; 4] },
    #[error(
        "protocol major version mismatch: we speak {}.{}, the peer {}.{}; \
         both ends must come from the same hanzo-dev build",
        ours.0, ours.1, theirs.0, theirs.1
    )]
    VersionMismatch {
        ours: (u16, u16),
        theirs: (u16, u16),
    },
    #[error("peer says it is the {got} worker, this channel is for {expected}")]
    WrongRole { expected: Role, got: Role },
    #[error("expected a {expected} frame during the handshake, got type 0x{got:02x}")]
    UnexpectedFrame { expected: &'static str, got: u8 },
    #[error("peer closed the channel during the handshake")]
    Closed,
}

/// An error the worker reports for one request (the request failed; the channel is fine).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Error)]
#[error("{kind:?}: {message}")]
pub struct RemoteError {
    pub kind: RemoteErrorKind,
    pub message: String,
}

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
    const ROLE: Role;
    type Request: Serialize + DeserializeOwned + Debug + Send + Sync + 'static;
    type Response: Serialize + DeserializeOwned + Debug + Send + Sync + 'static;
    type Item: Serialize + DeserializeOwned + Debug + Send + Sync + 'static;
    type Event: Serialize + DeserializeOwned + Debug + Send + Sync + 'static;
}

/// Payload of a `REQUEST` frame.
#[derive(Debug, Serialize, Deserialize)]
pub struct RequestEnvelope<R> {
    pub id: u64,
    pub body: R,
}

/// Payload of an `ITEM` frame.
#[derive(Debug, Serialize, Deserialize)]
pub struct ItemEnvelope<I> {
    pub id: u64,
    pub item: I,
}

/// Payload of a `REPLY` frame.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReplyEnvelope<R> {
    pub id: u64,
    pub result: Result<R, RemoteError>,
}

/// A payload that does not decode as the type its frame type promises.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("malformed {what} payload: {reason}")]
pub struct DecodeError {
    pub what: &'static str,
    pub reason: String,
}

pub fn encode_payload<T: Serialize>(value: &T) -> Vec<u8> {
    // postcard only fails to serialize for types it cannot represent (maps with non-string keys
    // are fine; unsized sequences are not used); our message types are all representable.
    postcard::to_stdvec(value).expect("protocol types are postcard-serializable")
}

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
