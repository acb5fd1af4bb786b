//! The model channel (supervisor ↔ model worker): a conversation goes in, HIP-0301 §2 stream events
//! come back as items, then the completion's stop reason and usage.
//!
//! JSON travels as `String` (tool inputs, tool schemas): postcard cannot encode
//! `serde_json::Value`, and the supervisor re-parses what it needs.

use super::{impl_protocol, CommonEvent, CommonItem, CommonRequest, CommonResponse};
use crate::Role;
use serde::{Deserialize, Serialize};

/// What the supervisor may ask the model worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// A request every worker answers (probes, status).
    Common(CommonRequest),
    /// Run one model turn; items are [`Item::Event`] (and [`Item::Recorded`] when recording),
    /// the reply is [`Response::Completed`].
    Complete(CompletionRequest),
    /// Load a cassette (JSONL text, see `workers/model/CASSETTE.md`) for the replay provider;
    /// its exchanges are then played in order. Replies [`Response::CassetteLoaded`].
    LoadCassette {
        /// The cassette file's text.
        jsonl: String,
    },
}

/// The model worker's answers, one variant per request kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The answer to a common request.
    Common(CommonResponse),
    /// The answer to [`Request::Complete`]: how the turn ended.
    Completed(Completion),
    /// The answer to [`Request::LoadCassette`].
    CassetteLoaded {
        /// How many exchanges the cassette holds.
        exchanges: u32,
    },
}

/// Streamed parts of the model worker's answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    /// A part of a common request's answer.
    Common(CommonItem),
    /// One HIP-0301 stream event of the turn, in order.
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

/// What the model worker reports unasked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// An event every worker may send (a log line).
    Common(CommonEvent),
}

impl_protocol!(ModelProtocol, Role::Model);

/// Which account's credential the broker injects (and whose allow-list it checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ProviderId {
    /// Hanzo's gateway (OpenAI wire format).
    Hanzo,
    /// Anthropic's Messages API.
    Anthropic,
    /// OpenAI's Chat Completions API.
    OpenAi,
}

impl ProviderId {
    /// Auto-detection order (HIP-0301 §13).
    pub const DETECT_ORDER: [ProviderId; 3] =
        [ProviderId::Hanzo, ProviderId::Anthropic, ProviderId::OpenAi];

    /// The provider's name in settings, flags and records (`hanzo`, `anthropic`, `openai`).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderId::Hanzo => "hanzo",
            ProviderId::Anthropic => "anthropic",
            ProviderId::OpenAi => "openai",
        }
    }

    /// The provider named `s` (as [`ProviderId::as_str`] spells it), if any.
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
        /// The wire format to speak.
        wire: WireFormat,
        /// Whose credential the broker injects, and whose allow-list the URL must pass.
        credential: ProviderId,
        /// The API's base URL (for the OpenAI format, ending in `/v1`).
        base_url: String,
    },
    /// The loaded cassette, played through the same parser (`wire` says which).
    Replay {
        /// The wire format the cassette's exchanges are parsed as.
        wire: WireFormat,
    },
}

/// Retry limits for one turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts in total, the first included.
    pub max_attempts: u32,
    /// The backoff's first delay, in milliseconds (full jitter, doubling per attempt).
    pub base_ms: u64,
    /// The longest single delay between attempts, in milliseconds.
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

/// One model turn: the conversation so far and how to send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionRequest {
    /// Where the turn goes.
    pub provider: ProviderConfig,
    /// The model's name as the provider knows it.
    pub model: String,
    /// The system prompt.
    pub system: Option<String>,
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// The tools the model may call in this turn.
    pub tools: Vec<ToolDef>,
    /// The most tokens the model may produce in this turn.
    pub max_tokens: u32,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
    /// Stream each HTTP exchange back as a cassette line ([`Item::Recorded`]).
    pub record: bool,
}

/// Who said a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MessageRole {
    /// The user, or tool results sent on the user's behalf.
    User,
    /// The model.
    Assistant,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who said it.
    pub role: MessageRole,
    /// Its parts, in order.
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message holding only `text`.
    pub fn user_text(text: impl Into<String>) -> Message {
        Message {
            role: MessageRole::User,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }
}

/// One part of a [`Message`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call the assistant made; `input_json` is a JSON object as text.
    ToolUse {
        /// The model's id for the call, which the result must name.
        id: String,
        /// The tool's name.
        name: String,
        /// The input, a JSON object as text.
        input_json: String,
    },
    /// The result of a tool call, sent back to the model in a user message.
    ToolResult {
        /// The id of the [`ContentBlock::ToolUse`] it answers.
        tool_use_id: String,
        /// The tool's output (or error), as text.
        content: String,
        /// Whether the call failed.
        is_error: bool,
    },
}

/// A tool the model may call (HIP-0301 §2 `ToolDef`); `input_schema_json` is a JSON Schema object
/// as text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolDef {
    /// The tool's name, as the model calls it.
    pub name: String,
    /// What the tool does and when to use it, for the model.
    pub description: String,
    /// JSON Schema of the input, as text.
    pub input_schema_json: String,
}

/// HIP-0301 §2 `StreamEvent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamEvent {
    /// Assistant text, in order.
    ContentDelta {
        /// The next piece of text.
        text: String,
    },
    /// One complete tool call; `input_json` is the assembled JSON object as text.
    ToolUse {
        /// The model's id for the call.
        id: String,
        /// The tool's name.
        name: String,
        /// The input, a JSON object as text.
        input_json: String,
    },
    /// The turn ended normally.
    MessageStop {
        /// Why the model stopped.
        stop_reason: StopReason,
        /// Tokens the turn used.
        usage: Usage,
    },
    /// The turn ended with an error (after which nothing follows).
    Error {
        /// What failed, which decides what the agent loop does next.
        kind: StreamErrorKind,
        /// What happened, without any credential or response body.
        message: String,
    },
}

/// Why the model ended its turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// It finished its answer.
    EndTurn,
    /// It wants the tool calls it made run.
    ToolUse,
    /// It reached the `max_tokens` limit.
    MaxTokens,
    /// It produced one of the request's stop sequences.
    StopSequence,
    /// The provider's content filter cut the output.
    ContentFilter,
    /// A reason this build does not know, as the provider spelled it.
    Other(String),
}

/// Token counts of one turn, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of input (prompt and conversation).
    pub input_tokens: u64,
    /// Tokens the model produced.
    pub output_tokens: u64,
}

/// The class of a failed turn ([`StreamEvent::Error`]).
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
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// Tokens the turn used, as the provider reported them.
    pub usage: Usage,
    /// HTTP attempts made (1 when nothing was retried).
    pub attempts: u32,
}
