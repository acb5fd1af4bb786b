//! The direct channel between the model worker and the broker (fd 4 in both): the model sends an
//! HTTP request *without* credentials; the broker checks the destination against its allow-list,
//! injects the credential, and streams back the status, the headers with every credential-bearing
//! header removed, and the raw body chunks, unparsed.
//!
//! The broker is the serving end, so the protocol's role is [`Role::Broker`].

use super::model::ProviderId;
use crate::Role;
use serde::{Deserialize, Serialize};

/// What the model worker may ask the broker on the direct channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// One HTTP exchange with a provider's API; the parts stream back as [`Item`]s.
    Send(HttpRequest),
}

/// The end of one exchange. Failures the model worker must tell apart (retry or not) are typed
/// here rather than squeezed into a `RemoteError`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The body ended normally after this many bytes.
    Done {
        /// How many body bytes the `Item::Body` chunks carried in all.
        body_bytes: u64,
    },
    /// The exchange failed; the kind says whether a retry may help.
    Failed(HttpFailure),
}

/// The streamed parts of an answered exchange: one head, then body chunks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    /// First item of every answered request.
    Head(HttpHead),
    /// A raw body chunk, as received.
    Body(Vec<u8>),
}

/// The direct channel has no unsolicited events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {}

/// The channel type of the model ↔ broker direct channel.
#[derive(Debug)]
pub struct HttpProtocol;

impl crate::proto::Protocol for HttpProtocol {
    const ROLE: Role = Role::Broker;
    type Request = Request;
    type Response = Response;
    type Item = Item;
    type Event = Event;
}

/// A credential-free request. `credential` names whose key the broker injects and whose
/// allow-list `url` must be on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpRequest {
    /// The provider whose credential the broker injects and whose hosts `url` must be among.
    pub credential: ProviderId,
    /// The HTTP method (`"POST"`, `"GET"`).
    pub method: String,
    /// The absolute `https://` URL, checked against the provider's allow-list.
    pub url: String,
    /// Request headers as (name, value); credential and hop-by-hop headers are dropped by the
    /// broker.
    pub headers: Vec<(String, String)>,
    /// The request body.
    pub body: Vec<u8>,
}

/// The status and headers of a response, sent before its body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpHead {
    /// The HTTP status code.
    pub status: u16,
    /// Response headers as (name, value), with every credential-bearing header removed.
    pub headers: Vec<(String, String)>,
}

/// Why an exchange ended without a complete response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpFailure {
    /// What failed, which decides whether the model worker retries.
    pub kind: HttpFailureKind,
    /// Says what failed and what to do; never contains a secret.
    pub message: String,
}

/// The class of an [`HttpFailure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HttpFailureKind {
    /// The destination is not on the provider's allow-list.
    NotAllowed,
    /// The broker holds no credential for the provider.
    NoCredential,
    /// The request is malformed (bad URL, method or header).
    BadRequest,
    /// Connecting, TLS or sending failed before a response head arrived (retryable).
    Connect,
    /// The body broke off after the head (the model worker decides about retrying).
    Body,
}

/// The direct channel's handshake: each side sends a hello for the broker role and checks the
/// other's, so a wrongly wired fd 4 is an error at once rather than garbage later.
#[cfg(feature = "transport")]
pub async fn direct_handshake<R, W>(
    reader: &mut crate::transport::FrameReader<R>,
    writer: &mut crate::transport::FrameWriter<W>,
) -> Result<crate::proto::Hello, crate::transport::IpcError>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    use crate::proto::{decode_payload, encode_payload, frame_type, HandshakeError, Hello};
    writer
        .send(
            frame_type::HELLO,
            &encode_payload(&Hello::new(Role::Broker)),
        )
        .await?;
    let frame = reader.next().await?.ok_or(HandshakeError::Closed)?;
    if frame.frame_type != frame_type::HELLO {
        return Err(HandshakeError::UnexpectedFrame {
            expected: "HELLO",
            got: frame.frame_type,
        }
        .into());
    }
    let hello: Hello = decode_payload("HELLO", &frame.payload)?;
    hello.check(Role::Broker)?;
    Ok(hello)
}
