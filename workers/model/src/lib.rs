//! `hanzo-model` is the model worker: it turns a conversation into provider requests (Anthropic
//! Messages, OpenAI Chat Completions and compatibles) and provider streams into HIP-0301 §2 events.
//!
//! It holds no secret, opens no socket and no file: HTTP goes through the broker on the direct
//! channel ([`transport::BrokerTransport`]) or comes from a cassette ([`cassette::ReplayTransport`]),
//! and both feed the same parser ([`turn::run_turn`]).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod anthropic;
pub mod cassette;
pub mod openai;
// The cassette builder: tests, benches and the demo's cassette check only; release builds
// leave it out.
#[cfg(any(test, feature = "test-support"))]
pub mod script;
pub mod transport;
pub mod turn;
pub mod wire;
mod worker;

pub use turn::run_turn;
pub use worker::worker_main;

use hanzo_ipc::roles::http::HttpFailureKind;
use hanzo_ipc::roles::model::{ProviderId, StreamErrorKind};
use thiserror::Error;

/// Why a turn failed. Messages say what to do next and never contain a credential (this process
/// never has one, and provider messages for auth failures are not repeated).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ModelError {
    /// The provider refused the credential (401, 403).
    #[error(
        "the {provider} API refused the credential (HTTP {status}). Set {} in the environment \
         hanzo-dev starts from, or store a key for \"{provider}\" in \
         $XDG_CONFIG_HOME/hanzo/credentials.json; check that it is current and allowed to use \
         this model. The credential itself is never shown.",
        provider.env_var()
    )]
    Auth {
        /// Whose credential it was.
        provider: ProviderId,
        /// The HTTP status.
        status: u16,
    },
    /// Any other failure status: the request itself was rejected, and retrying cannot help.
    #[error("the provider rejected the request (HTTP {status}): {message}")]
    BadRequest {
        /// The HTTP status.
        status: u16,
        /// The provider's message, scrubbed.
        message: String,
    },
    /// The conversation is larger than the model's context window (413, or the provider says so).
    #[error("the conversation does not fit the model's context window: {message}")]
    ContextOverflow {
        /// The provider's message, scrubbed.
        message: String,
    },
    /// A status worth retrying (408, 409, 425, 429, 5xx), as the last attempt saw it.
    #[error("HTTP {status}: {message}")]
    Http {
        /// The HTTP status.
        status: u16,
        /// The provider's message, scrubbed.
        message: String,
    },
    /// The retry budget ran out while the provider kept failing.
    #[error("the provider stayed unavailable after {attempts} attempt(s): {last}")]
    Unavailable {
        /// How many attempts were made.
        attempts: u32,
        /// Why the last one failed.
        last: String,
    },
    /// An error event inside the provider's stream.
    #[error("the provider reported {kind}: {message}")]
    ProviderError {
        /// The provider's error type (`overloaded_error`, …).
        kind: String,
        /// The provider's message, scrubbed.
        message: String,
    },
    /// The stream ended before the response was complete.
    #[error("{reason}{}", if *after_output { " (after output began; not retried)" } else { "" })]
    Interrupted {
        /// What cut it off.
        reason: String,
        /// Whether output had already reached the caller, which makes a retry unsafe.
        after_output: bool,
    },
    /// The stream is not what the wire format says (a parse failure).
    #[error("the provider's stream is malformed: {0}")]
    Protocol(String),
    /// The request did not get through the broker (refused, timed out, connection failed).
    #[error("{message}")]
    Transport {
        /// Which kind of failure.
        kind: HttpFailureKind,
        /// What the broker said.
        message: String,
    },
    /// A replayed cassette has no exchange left, or a malformed one.
    #[error("replay: {0}")]
    Cassette(String),
    /// The caller's request cannot be sent (before anything reached the network).
    #[error("invalid request: {0}")]
    BadInput(String),
}

impl ModelError {
    /// The HIP-0301 error kind this failure is reported as.
    pub fn kind(&self) -> StreamErrorKind {
        match self {
            ModelError::Auth { .. } => StreamErrorKind::Auth,
            ModelError::BadRequest { .. } | ModelError::BadInput(_) => StreamErrorKind::BadRequest,
            ModelError::ContextOverflow { .. } => StreamErrorKind::ContextOverflow,
            ModelError::Http { .. } | ModelError::Unavailable { .. } => {
                StreamErrorKind::Unavailable
            }
            ModelError::ProviderError { .. } => StreamErrorKind::ProviderError,
            ModelError::Interrupted { .. } => StreamErrorKind::Interrupted,
            ModelError::Protocol(_) => StreamErrorKind::Protocol,
            ModelError::Transport { .. } => StreamErrorKind::Transport,
            ModelError::Cassette(_) => StreamErrorKind::Cassette,
        }
    }
}
