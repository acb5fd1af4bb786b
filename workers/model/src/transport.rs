//! How the model worker reaches an HTTP endpoint without holding a credential or a socket: through
//! the broker on the direct channel, or from a cassette. Both give the parser the same thing: a
//! status, headers and raw body chunks.

use hanzo_ipc::channel::{Client, StreamPart};
use hanzo_ipc::roles::http::{
    self, HttpFailure, HttpFailureKind, HttpHead, HttpProtocol, HttpRequest,
};
use std::future::Future;
use thiserror::Error;
use tokio::io::AsyncWrite;

/// Why an exchange produced no (complete) response.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TransportError {
    /// The broker refused or failed the request.
    #[error("{}", .0.message)]
    Http(HttpFailure),
    /// The cassette has no matching exchange left.
    #[error("cassette: {0}")]
    Cassette(String),
}

impl TransportError {
    pub(crate) fn connect(message: impl Into<String>) -> TransportError {
        TransportError::Http(HttpFailure {
            kind: HttpFailureKind::Connect,
            message: message.into(),
        })
    }

    /// Worth another attempt: the connection or the body broke, not a refusal.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            TransportError::Http(HttpFailure {
                kind: HttpFailureKind::Connect | HttpFailureKind::Body,
                ..
            })
        )
    }
}

/// The raw body of a response, chunk by chunk.
pub trait BodyStream: Send {
    /// The next chunk; `None` at the normal end; an error when the body broke off.
    fn next_chunk(
        &mut self,
    ) -> impl Future<Output = Option<Result<Vec<u8>, TransportError>>> + Send;
}

/// Sends one credential-free request and returns the response head and its body.
pub trait HttpTransport: Send + Sync {
    /// The response body, read chunk by chunk.
    type Body: BodyStream;
    /// Sends `request`; the head arrives first, the body streams after.
    fn send(
        &self,
        request: &HttpRequest,
    ) -> impl Future<Output = Result<(HttpHead, Self::Body), TransportError>> + Send;
}

/// The broker, over the direct channel.
pub struct BrokerTransport<W: AsyncWrite + Unpin + Send + 'static> {
    client: Client<HttpProtocol, W>,
}

impl<W: AsyncWrite + Unpin + Send + 'static> BrokerTransport<W> {
    /// A transport over the model worker's direct channel to the broker.
    pub fn new(client: Client<HttpProtocol, W>) -> Self {
        BrokerTransport { client }
    }
}

/// A body streamed by the broker.
pub struct BrokerBody<W: AsyncWrite + Unpin + Send + 'static> {
    stream: hanzo_ipc::channel::ResponseStream<HttpProtocol, W>,
    ended: bool,
}

impl<W: AsyncWrite + Unpin + Send + 'static> HttpTransport for BrokerTransport<W> {
    type Body = BrokerBody<W>;

    async fn send(
        &self,
        request: &HttpRequest,
    ) -> Result<(HttpHead, BrokerBody<W>), TransportError> {
        let mut stream = self
            .client
            .call_stream(http::Request::Send(request.clone()))
            .await
            .map_err(|e| TransportError::connect(format!("cannot reach the broker: {e}")))?;
        match stream.next().await {
            Some(Ok(StreamPart::Item(http::Item::Head(head)))) => Ok((
                head,
                BrokerBody {
                    stream,
                    ended: false,
                },
            )),
            Some(Ok(StreamPart::Done(http::Response::Failed(f)))) => Err(TransportError::Http(f)),
            Some(Ok(other)) => Err(TransportError::connect(format!(
                "the broker answered out of order ({})",
                part_name(&other)
            ))),
            Some(Err(e)) => Err(TransportError::connect(format!("the broker failed: {e}"))),
            None => Err(TransportError::connect("the broker closed the request")),
        }
    }
}

fn part_name(part: &StreamPart<HttpProtocol>) -> &'static str {
    match part {
        StreamPart::Item(http::Item::Head(_)) => "a second head",
        StreamPart::Item(http::Item::Body(_)) => "a body before the head",
        StreamPart::Done(_) => "an end before the head",
    }
}

impl<W: AsyncWrite + Unpin + Send + 'static> BodyStream for BrokerBody<W> {
    async fn next_chunk(&mut self) -> Option<Result<Vec<u8>, TransportError>> {
        if self.ended {
            return None;
        }
        let part = self.stream.next().await;
        let out = match part {
            Some(Ok(StreamPart::Item(http::Item::Body(b)))) => return Some(Ok(b)),
            Some(Ok(StreamPart::Item(http::Item::Head(_)))) => {
                Some(Err(TransportError::Http(HttpFailure {
                    kind: HttpFailureKind::Body,
                    message: "the broker sent a second response head".into(),
                })))
            }
            Some(Ok(StreamPart::Done(http::Response::Done { .. }))) | None => None,
            Some(Ok(StreamPart::Done(http::Response::Failed(f)))) => {
                Some(Err(TransportError::Http(f)))
            }
            Some(Err(e)) => Some(Err(TransportError::Http(HttpFailure {
                kind: HttpFailureKind::Body,
                message: format!("the broker failed mid-body: {e}"),
            }))),
        };
        self.ended = true;
        out
    }
}
