//! OpenAI Chat Completions and compatible servers (Hanzo gateway, Ollama, vLLM, llama.cpp):
//! request building and the streaming parser (`delta.content`, `delta.tool_calls` by index,
//! several calls in parallel, `finish_reason`, the usage chunk, `[DONE]`).

use crate::anthropic::{parse_input, parse_schema};
use crate::wire::{parse_json, str_at, tool_input, u64_at, ProviderRequest, WireError, WireParser};
use crate::ModelError;
use hanzo_ipc::roles::model::{
    CompletionRequest, ContentBlock, MessageRole, StopReason, StreamEvent, Usage,
};
use hanzo_sse::SseEvent;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// `(path, headers, body)` of a streaming chat completion; the credential is added by the broker.
pub fn build_request(req: &CompletionRequest) -> Result<ProviderRequest, ModelError> {
    let mut messages = Vec::new();
    if let Some(system) = &req.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for m in &req.messages {
        let mut text = String::new();
        let mut calls = Vec::new();
        for block in &m.content {
            match block {
                ContentBlock::Text { text: t } => text.push_str(t),
                ContentBlock::ToolUse {
                    id,
                    name,
                    input_json,
                } => {
                    // Validate, then send the arguments as the text the model produced.
                    let args = parse_input(input_json, name)?;
                    calls.push(json!({
                        "id": id, "type": "function",
                        "function": {"name": name, "arguments": args.to_string()},
                    }));
                }
                // Tool results are messages of their own, right after the assistant's calls.
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => {
                    let content = if *is_error {
                        format!("Error: {content}")
                    } else {
                        content.clone()
                    };
                    messages.push(json!({
                        "role": "tool", "tool_call_id": tool_use_id, "content": content,
                    }));
                }
            }
        }
        match m.role {
            MessageRole::User => {
                if !text.is_empty() {
                    messages.push(json!({"role": "user", "content": text}));
                }
            }
            MessageRole::Assistant => {
                let mut msg = Map::new();
                msg.insert("role".into(), json!("assistant"));
                msg.insert(
                    "content".into(),
                    if text.is_empty() {
                        Value::Null
                    } else {
                        json!(text)
                    },
                );
                if !calls.is_empty() {
                    msg.insert("tool_calls".into(), Value::Array(calls));
                }
                messages.push(Value::Object(msg));
            }
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("max_tokens".into(), json!(req.max_tokens));
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        let mut tools = Vec::with_capacity(req.tools.len());
        for t in &req.tools {
            tools.push(json!({
                "type": "function",
                "function": {
                    "name": t.name, "description": t.description,
                    "parameters": parse_schema(&t.input_schema_json, &t.name)?,
                },
            }));
        }
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    let headers = vec![
        ("content-type".into(), "application/json".into()),
        ("accept".into(), "text/event-stream".into()),
    ];
    let bytes = serde_json::to_vec(&Value::Object(body))
        .map_err(|e| ModelError::BadInput(format!("cannot encode the request: {e}")))?;
    Ok(ProviderRequest {
        path: "/chat/completions".into(),
        headers,
        body: bytes,
    })
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Parser state for one chat-completions stream.
#[derive(Default)]
pub struct OpenAiParser {
    /// Tool calls being assembled, by their `index` (parallel calls interleave).
    calls: BTreeMap<u64, PartialCall>,
    usage: Usage,
    finish_reason: Option<StopReason>,
    done: bool,
}

impl OpenAiParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    fn flush_calls(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), WireError> {
        for (_, call) in std::mem::take(&mut self.calls) {
            let input_json = tool_input(&call.arguments, &call.name)?;
            out.push(StreamEvent::ToolUse {
                id: call.id,
                name: call.name,
                input_json,
            });
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), WireError> {
        self.flush_calls(out)?;
        self.done = true;
        out.push(StreamEvent::MessageStop {
            stop_reason: self.finish_reason.clone().unwrap_or(StopReason::EndTurn),
            usage: self.usage,
        });
        Ok(())
    }
}

fn finish_reason(s: &str) -> StopReason {
    match s {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_string()),
    }
}

impl WireParser for OpenAiParser {
    fn on_event(&mut self, ev: &SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), WireError> {
        if self.done {
            return Ok(());
        }
        if ev.data.trim() == "[DONE]" {
            return self.finish(out);
        }
        let v = parse_json(&ev.data, "chat.completion.chunk")?;
        if let Some(err) = v.get("error") {
            let kind = str_at(err, &["type"])
                .or_else(|| str_at(err, &["code"]))
                .unwrap_or("error")
                .to_string();
            let message = str_at(err, &["message"]).unwrap_or_default().to_string();
            let retryable = matches!(
                kind.as_str(),
                "server_error" | "rate_limit_exceeded" | "overloaded" | "overloaded_error"
            );
            return Err(WireError::Provider {
                kind,
                message,
                retryable,
            });
        }
        if let Some(usage) = v.get("usage").filter(|u| !u.is_null()) {
            if let Some(n) = u64_at(usage, &["prompt_tokens"]) {
                self.usage.input_tokens = n;
            }
            if let Some(n) = u64_at(usage, &["completion_tokens"]) {
                self.usage.output_tokens = n;
            }
        }
        let choices = v.get("choices").and_then(Value::as_array);
        // Only the first choice is a turn; `n > 1` is never requested.
        let Some(choice) =
            choices.and_then(|c| c.iter().find(|ch| u64_at(ch, &["index"]).unwrap_or(0) == 0))
        else {
            return Ok(());
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = str_at(delta, &["content"]).filter(|t| !t.is_empty()) {
            out.push(StreamEvent::ContentDelta {
                text: text.to_string(),
            });
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (pos, c) in calls.iter().enumerate() {
                let index = u64_at(c, &["index"]).unwrap_or(pos as u64);
                let call = self.calls.entry(index).or_default();
                if let Some(id) = str_at(c, &["id"]) {
                    call.id = id.to_string();
                }
                if let Some(name) = str_at(c, &["function", "name"]) {
                    call.name.push_str(name);
                }
                if let Some(args) = str_at(c, &["function", "arguments"]) {
                    call.arguments.push_str(args);
                }
            }
        }
        if let Some(r) = str_at(choice, &["finish_reason"]) {
            self.finish_reason = Some(finish_reason(r));
            // Emit the calls as soon as the choice is finished; the usage chunk may follow.
            self.flush_calls(out)?;
        }
        Ok(())
    }

    fn on_end(&mut self, out: &mut Vec<StreamEvent>) -> bool {
        if self.done {
            return true;
        }
        // Some compatible servers end the body after `finish_reason` without `[DONE]`; a body
        // that ends before any finish reason was cut short.
        if self.finish_reason.is_some() && self.finish(out).is_ok() {
            return true;
        }
        false
    }

    fn stop_reason(&self) -> Option<StopReason> {
        self.finish_reason.clone()
    }

    fn usage(&self) -> Usage {
        self.usage
    }
}
