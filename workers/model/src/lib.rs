//! `hanzo-model` is the model worker: it turns a conversation into provider requests (Anthropic
//! Messages, OpenAI Chat Completions and compatibles) and provider streams into HIP-0301 §2 events.
//!
//! It holds no secret, opens no socket and no file: HTTP goes through the broker on the direct
//! channel ([`transport::BrokerTransport`]) or comes from a cassette ([`cassette::ReplayTransport`]),
//! and both feed the same parser ([`turn::run_turn`]).
// The cast lints (issue 11), enforced crate by crate until every member passes them.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]
#![forbid(unsafe_code)]

pub mod anthropic;
pub mod cassette;
pub mod openai;
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
    #[error(
        "the {provider} API refused the credential (HTTP {status}). Set {} in the environment \
         hanzo-dev starts from, or store a key for \"{provider}\" in \
         $XDG_CONFIG_HOME/hanzo/credentials.json; check that it is current and allowed to use \
         this model. The credential itself is never shown.",
        provider.env_var()
    )]
    Auth { provider: ProviderId, status: u16 },
    #[error("the provider rejected the request (HTTP {status}): {message}")]
    BadRequest { status: u16, message: String },
    #[error("the conversation does not fit the model's context window: {message}")]
    ContextOverflow { message: String },
    #[error("HTTP {status}: {message}")]
    Http { status: u16, message: String },
    #[error("the provider stayed unavailable after {attempts} attempt(s): {last}")]
    Unavailable { attempts: u32, last: String },
    #[error("the provider reported {kind}: {message}")]
    ProviderError { kind: String, message: String },
    #[error("{reason}{}", if *after_output { " (after output began; not retried)" } else { "" })]
    Interrupted { reason: String, after_output: bool },
    #[error("the provider's stream is malformed: {0}")]
    Protocol(String),
    #[error("{message}")]
    Transport {
        kind: HttpFailureKind,
        message: String,
    },
    #[error("replay: {0}")]
    Cassette(String),
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
