//! Anthropic Messages: request building and the streaming parser (`message_start`,
//! `content_block_*` with `text_delta` and `input_json_delta`, `message_delta` usage and stop
//! reason, `ping`, mid-stream `error`).

use crate::wire::{parse_json, str_at, tool_input, u64_at, ProviderRequest, WireError, WireParser};
use crate::ModelError;
use hanzo_ipc::roles::model::{
    CompletionRequest, ContentBlock, MessageRole, StopReason, StreamEvent, Usage,
};
use hanzo_sse::SseEvent;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// The API version header value this parser is written against.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `(path, headers, body)` of a streaming Messages request; the credential is added by the broker.
pub fn build_request(req: &CompletionRequest) -> Result<ProviderRequest, ModelError> {
    let mut messages = Vec::with_capacity(req.messages.len());
    for m in &req.messages {
        let role = match m.role {
            MessageRole::User => "user",
            MessageRole::Assistant => "assistant",
        };
        let mut content = Vec::with_capacity(m.content.len());
        for block in &m.content {
            content.push(match block {
                ContentBlock::Text { text } => json!({"type": "text", "text": text}),
                ContentBlock::ToolUse {
                    id,
                    name,
                    input_json,
                } => json!({
                    "type": "tool_use", "id": id, "name": name,
                    "input": parse_input(input_json, name)?,
                }),
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => json!({
                    "type": "tool_result", "tool_use_id": tool_use_id,
                    "content": content, "is_error": is_error,
                }),
            });
        }
        messages.push(json!({"role": role, "content": content}));
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("max_tokens".into(), json!(req.max_tokens));
    if let Some(system) = &req.system {
        body.insert("system".into(), json!(system));
    }
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        let mut tools = Vec::with_capacity(req.tools.len());
        for t in &req.tools {
            tools.push(json!({
                "name": t.name, "description": t.description,
                "input_schema": parse_schema(&t.input_schema_json, &t.name)?,
            }));
        }
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("stream".into(), json!(true));
    let headers = vec![
        ("content-type".into(), "application/json".into()),
        ("accept".into(), "text/event-stream".into()),
        ("anthropic-version".into(), ANTHROPIC_VERSION.into()),
    ];
    let bytes = serde_json::to_vec(&Value::Object(body))
        .map_err(|e| ModelError::BadInput(format!("cannot encode the request: {e}")))?;
    Ok(ProviderRequest {
        path: "/v1/messages".into(),
        headers,
        body: bytes,
    })
}

pub(crate) fn parse_input(input_json: &str, name: &str) -> Result<Value, ModelError> {
    if input_json.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(input_json)
        .map_err(|e| ModelError::BadInput(format!("input of tool call `{name}` is not JSON: {e}")))
}

pub(crate) fn parse_schema(schema: &str, name: &str) -> Result<Value, ModelError> {
    match serde_json::from_str(schema) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(ModelError::BadInput(format!(
            "input schema of tool `{name}` is not a JSON object"
        ))),
        Err(e) => Err(ModelError::BadInput(format!(
            "input schema of tool `{name}` is not JSON: {e}"
        ))),
    }
}

enum Block {
    Text,
    Tool {
        id: String,
        name: String,
        json: String,
    },
    /// Thinking, redacted thinking, server tools: not part of the HIP-0301 event set.
    Other,
}

/// Parser state for one Messages stream.
#[derive(Default)]
pub struct AnthropicParser {
    blocks: HashMap<u64, Block>,
    usage: Usage,
    stop_reason: Option<StopReason>,
    done: bool,
}

impl AnthropicParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }
}

fn stop_reason(s: &str) -> StopReason {
    match s {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "refusal" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_string()),
    }
}

impl WireParser for AnthropicParser {
    fn on_event(&mut self, ev: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), WireError> {
        if self.done {
            return Ok(());
        }
        match ev.event_type.as_str() {
            "ping" => {}
            "message_start" => {
                let v = parse_json(&ev.data, "message_start")?;
                if let Some(n) = u64_at(&v, &["message", "usage", "input_tokens"]) {
                    self.usage.input_tokens = n;
                }
                if let Some(n) = u64_at(&v, &["message", "usage", "output_tokens"]) {
                    self.usage.output_tokens = n;
                }
            }
            "content_block_start" => {
                let v = parse_json(&ev.data, "content_block_start")?;
                let index = u64_at(&v, &["index"]).ok_or_else(|| {
                    WireError::Protocol("content_block_start without index".into())
                })?;
                let block = v.get("content_block").unwrap_or(&Value::Null);
                let b = match str_at(block, &["type"]) {
                    Some("text") => {
                        if let Some(t) = str_at(block, &["text"]).filter(|t| !t.is_empty()) {
                            out.push(StreamEvent::ContentDelta {
                                text: t.to_string(),
                            });
                        }
                        Block::Text
                    }
                    Some("tool_use") => Block::Tool {
                        id: str_at(block, &["id"]).unwrap_or_default().to_string(),
                        name: str_at(block, &["name"]).unwrap_or_default().to_string(),
                        json: String::new(),
                    },
                    _ => Block::Other,
                };
                self.blocks.insert(index, b);
            }
            "content_block_delta" => {
                let v = parse_json(&ev.data, "content_block_delta")?;
                let index = u64_at(&v, &["index"]).ok_or_else(|| {
                    WireError::Protocol("content_block_delta without index".into())
                })?;
                let delta = v.get("delta").unwrap_or(&Value::Null);
                match (self.blocks.get_mut(&index), str_at(delta, &["type"])) {
                    (Some(Block::Text), Some("text_delta")) => {
                        let text = str_at(delta, &["text"]).unwrap_or_default();
                        if !text.is_empty() {
                            out.push(StreamEvent::ContentDelta {
                                text: text.to_string(),
                            });
                        }
                    }
                    (Some(Block::Tool { json, .. }), Some("input_json_delta")) => {
                        json.push_str(str_at(delta, &["partial_json"]).unwrap_or_default());
                    }
                    (None, _) => {
                        return Err(WireError::Protocol(format!(
                            "delta for content block {index}, which was never started"
                        )))
                    }
                    _ => {} // thinking, signatures, citations: not stream events here
                }
            }
            "content_block_stop" => {
                let v = parse_json(&ev.data, "content_block_stop")?;
                let index = u64_at(&v, &["index"]).unwrap_or(u64::MAX);
                if let Some(Block::Tool { id, name, json }) = self.blocks.remove(&index) {
                    let input_json = tool_input(&json, &name)?;
                    out.push(StreamEvent::ToolUse {
                        id,
                        name,
                        input_json,
                    });
                }
            }
            "message_delta" => {
                let v = parse_json(&ev.data, "message_delta")?;
                if let Some(r) = str_at(&v, &["delta", "stop_reason"]) {
                    self.stop_reason = Some(stop_reason(r));
                }
                // Usage in message_delta is cumulative.
                if let Some(n) = u64_at(&v, &["usage", "output_tokens"]) {
                    self.usage.output_tokens = n;
                }
                if let Some(n) = u64_at(&v, &["usage", "input_tokens"]) {
                    self.usage.input_tokens = n;
                }
            }
            "message_stop" => {
                self.done = true;
                out.push(StreamEvent::MessageStop {
                    stop_reason: self.stop_reason.clone().unwrap_or(StopReason::EndTurn),
                    usage: self.usage,
                });
            }
            "error" => {
                let v = parse_json(&ev.data, "error")?;
                let kind = str_at(&v, &["error", "type"])
                    .unwrap_or("error")
                    .to_string();
                let message = str_at(&v, &["error", "message"])
                    .unwrap_or_default()
                    .to_string();
                let retryable = matches!(
                    kind.as_str(),
                    "overloaded_error" | "rate_limit_error" | "api_error"
                );
                return Err(WireError::Provider {
                    kind,
                    message,
                    retryable,
                });
            }
            _ => {} // new event types are ignored, as the API documents
        }
        Ok(())
    }

    fn on_end(&mut self, _out: &mut Vec<StreamEvent>) -> bool {
        self.done
    }

    fn stop_reason(&self) -> Option<StopReason> {
        self.stop_reason.clone()
    }

    fn usage(&self) -> Usage {
        self.usage
    }
}
