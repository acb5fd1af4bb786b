//! The model channel (supervisor ↔ model worker): a conversation goes in, HIP-0301 §2 stream events
//! come back as items, then the completion's stop reason and usage.
//!
//! JSON travels as `String` (tool inputs, tool schemas): postcard cannot encode
//! `serde_json::Value`, and the supervisor re-parses what it needs.

use super::{impl_protocol, CommonEvent, CommonItem, CommonRequest, CommonResponse};
use crate::Role;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Common(CommonRequest),
    /// Run one model turn; items are [`Item::Event`] (and [`Item::Recorded`] when recording),
    /// the reply is [`Response::Completed`].
    Complete(CompletionRequest),
    /// Load a cassette (JSONL text, see `workers/model/CASSETTE.md`) for the replay provider;
    /// its exchanges are then played in order. Replies [`Response::CassetteLoaded`].
    LoadCassette {
        jsonl: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Common(CommonResponse),
    Completed(Completion),
    CassetteLoaded { exchanges: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    Common(CommonItem),
    Event(StreamEvent),
    /// One cassette line (one HTTP exchange) for the supervisor to append to the `--record` file;
    /// the model worker has no filesystem.
    Recorded(String),
    /// An attempt failed in a way worth retrying, and the worker waits before the next one (so
    /// the supervisor can say so instead of going silent).
    Retrying(RetryNotice),
}

/// One retry of a model request, announced before the wait.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryNotice {
    /// The attempt that failed (1-based).
    pub attempt: u32,
    /// Attempts allowed in total.
    pub max_attempts: u32,
    /// How long the worker waits before the next attempt.
    pub delay_ms: u64,
    /// Why the attempt failed (no credential, no body: safe to show).
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    Common(CommonEvent),
}

impl_protocol!(ModelProtocol, Role::Model);

/// Which account's credential the broker injects (and whose allow-list it checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ProviderId {
    Hanzo,
    Anthropic,
    OpenAi,
}

impl ProviderId {
    /// Auto-detection order (HIP-0301 §13).
    pub const DETECT_ORDER: [ProviderId; 3] =
        [ProviderId::Hanzo, ProviderId::Anthropic, ProviderId::OpenAi];

    pub fn as_str(self) -> &'static str {
        match self {
            ProviderId::Hanzo => "hanzo",
            ProviderId::Anthropic => "anthropic",
            ProviderId::OpenAi => "openai",
        }
    }

    pub fn parse(s: &str) -> Option<ProviderId> {
        Self::DETECT_ORDER.into_iter().find(|p| p.as_str() == s)
    }

    /// The environment variable that holds this provider's API key (the first of
    /// [`super::providers::ProviderInfo::credential_env`]).
    pub fn env_var(self) -> &'static str {
        self.info().credential_env[0]
    }
}

impl std::fmt::Display for ProviderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The wire protocol spoken to an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireFormat {
    /// Anthropic Messages: `POST {base_url}/v1/messages`.
    AnthropicMessages,
    /// OpenAI Chat Completions and compatibles (Hanzo gateway, Ollama, vLLM, llama.cpp):
    /// `POST {base_url}/chat/completions`, where `base_url` ends in `/v1`.
    OpenAiChat,
}

/// Where a turn goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProviderConfig {
    /// Through the broker to a real endpoint.
    Http {
        wire: WireFormat,
        credential: ProviderId,
        base_url: String,
    },
    /// The loaded cassette, played through the same parser (`wire` says which).
    Replay { wire: WireFormat },
}

/// Retry limits for one turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts in total, the first included.
    pub max_attempts: u32,
    pub base_ms: u64,
    pub max_ms: u64,
    /// Cap on the total time spent waiting between attempts.
    pub budget_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_ms: 500,
            max_ms: 16_000,
            budget_ms: 60_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionRequest {
    pub provider: ProviderConfig,
    pub model: String,
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDef>,
    pub max_tokens: u32,
    pub retry: RetryPolicy,
    /// Stream each HTTP exchange back as a cassette line ([`Item::Recorded`]).
    pub record: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MessageRole {
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: MessageRole,
    pub content: Vec<ContentBlock>,
}

impl Message {
    pub fn user_text(text: impl Into<String>) -> Message {
        Message {
            role: MessageRole::User,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// A tool call the assistant made; `input_json` is a JSON object as text.
    ToolUse {
        id: String,
        name: String,
        input_json: String,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        is_error: bool,
    },
}

/// A tool the model may call (HIP-0301 §2 `ToolDef`); `input_schema_json` is a JSON Schema object
/// as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    pub input_schema_json: String,
}

/// HIP-0301 §2 `StreamEvent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamEvent {
    /// Assistant text, in order.
    ContentDelta { text: String },
    /// One complete tool call; `input_json` is the assembled JSON object as text.
    ToolUse {
        id: String,
        name: String,
        input_json: String,
    },
    /// The turn ended normally.
    MessageStop {
        stop_reason: StopReason,
        usage: Usage,
    },
    /// The turn ended with an error (after which nothing follows).
    Error {
        kind: StreamErrorKind,
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    ContentFilter,
    /// A reason this build does not know, as the provider spelled it.
    Other(String),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamErrorKind {
    /// 401/403: the credential was refused.
    Auth,
    /// 400 and the like: the request itself is wrong.
    BadRequest,
    /// The conversation does not fit the model's context window.
    ContextOverflow,
    /// 429 / 5xx / overloaded, and the retries (or their time budget) ran out.
    Unavailable,
    /// The provider reported an error in the middle of the stream, after output began.
    ProviderError,
    /// The stream ended (or the connection broke) before the message was complete.
    Interrupted,
    /// The provider sent something that is not its protocol.
    Protocol,
    /// The broker refused or failed the HTTP request (not allow-listed, no credential, …).
    Transport,
    /// The replay cassette has no (matching) exchange left.
    Cassette,
}

/// The end of a successful turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    pub stop_reason: StopReason,
    pub usage: Usage,
    /// HTTP attempts made (1 when nothing was retried).
    pub attempts: u32,
}
