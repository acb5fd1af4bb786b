//! The production seams: the model worker as [`ApiClient`], the tools worker as [`ToolExecutor`].

use super::traits::{ApiClient, ToolExecutor, ToolInvocation, TurnEnd, TurnError, TurnRequest};
use crate::worker::WorkerHandle;
use hanzo_ipc::channel::{CallError, StreamPart};
use hanzo_ipc::roles::model::{
    self, CompletionRequest, ModelProtocol, ProviderConfig, RetryPolicy, StreamEvent, ToolDef,
};
use hanzo_ipc::roles::tools::{self, HookCall, PreHookReply, ToolCall, ToolResult, ToolsProtocol};
use std::sync::Mutex;

/// Model turns through the model worker (and, for live providers, the broker behind it).
pub struct WorkerApi<'a> {
    pub model: &'a WorkerHandle<ModelProtocol>,
    pub provider: ProviderConfig,
    pub model_name: String,
    pub max_output_tokens: u32,
    pub retry: RetryPolicy,
    /// `Some`: record every exchange as a cassette line (`run --record`).
    pub recorded: Option<Mutex<Vec<String>>>,
}

impl WorkerApi<'_> {
    /// The cassette lines recorded so far.
    pub fn take_recorded(&self) -> Vec<String> {
        match &self.recorded {
            Some(m) => std::mem::take(&mut *m.lock().unwrap_or_else(|p| p.into_inner())),
            None => Vec::new(),
        }
    }
}

impl ApiClient for WorkerApi<'_> {
    async fn send_message(
        &self,
        request: TurnRequest<'_>,
        on_event: &mut dyn FnMut(&StreamEvent),
    ) -> Result<TurnEnd, TurnError> {
        let req = CompletionRequest {
            provider: self.provider.clone(),
            model: self.model_name.clone(),
            system: (!request.system.is_empty()).then(|| request.system.to_string()),
            messages: request.messages.to_vec(),
            tools: request.tools.to_vec(),
            max_tokens: self.max_output_tokens,
            retry: self.retry,
            record: self.recorded.is_some(),
        };
        let gone = |e: CallError| TurnError {
            kind: None,
            message: e.to_string(),
        };
        let mut stream = self
            .model
            .call_stream(model::Request::Complete(req))
            .await
            .map_err(gone)?;
        let mut failed: Option<TurnError> = None;
        while let Some(part) = stream.next().await {
            match part.map_err(gone)? {
                StreamPart::Item(model::Item::Event(ev)) => {
                    if let StreamEvent::Error { kind, message } = &ev {
                        failed = Some(TurnError {
                            kind: Some(*kind),
                            message: message.clone(),
                        });
                    }
                    on_event(&ev);
                }
                StreamPart::Item(model::Item::Recorded(line)) => {
                    if let Some(m) = &self.recorded {
                        m.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                    }
                }
                StreamPart::Item(_) => {}
                StreamPart::Done(model::Response::Completed(c)) => {
                    if let Some(f) = failed {
                        return Err(f);
                    }
                    return Ok(TurnEnd {
                        stop_reason: c.stop_reason,
                        usage: c.usage,
                    });
                }
                StreamPart::Done(other) => {
                    return Err(TurnError {
                        kind: None,
                        message: format!("unexpected reply from the model worker: {other:?}"),
                    })
                }
            }
        }
        Err(failed.unwrap_or(TurnError {
            kind: None,
            message: "the model worker ended the turn without completing it".to_string(),
        }))
    }
}

/// Tool calls and hooks through the tools worker.
pub struct WorkerTools<'a> {
    pub tools: &'a WorkerHandle<ToolsProtocol>,
}

fn worker_failed(e: &CallError) -> String {
    match e {
        CallError::WorkerGone { .. } => format!(
            "the tools worker stopped during this call and is being restarted; anything the call \
             started was killed ({e})"
        ),
        other => other.to_string(),
    }
}

impl ToolExecutor for WorkerTools<'_> {
    async fn definitions(&self) -> Result<Vec<ToolDef>, String> {
        match self.tools.call(tools::Request::Definitions).await {
            Ok(tools::Response::Definitions(defs)) => Ok(defs
                .into_iter()
                .map(|d| ToolDef {
                    name: d.name,
                    description: d.description,
                    input_schema_json: d.input_schema,
                })
                .collect()),
            Ok(other) => Err(format!("unexpected reply {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn execute(&self, call: &ToolInvocation, _session_id: &str) -> ToolResult {
        let request = tools::Request::Run(ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            input: call.input_json.clone(),
        });
        let mut stream = match self.tools.call_stream(request).await {
            Ok(s) => s,
            Err(e) => return ToolResult::err(worker_failed(&e)),
        };
        while let Some(part) = stream.next().await {
            match part {
                Ok(StreamPart::Done(tools::Response::Result(r))) => return r,
                Ok(StreamPart::Done(other)) => {
                    return ToolResult::err(format!(
                        "unexpected reply from the tools worker: {other:?}"
                    ))
                }
                Ok(StreamPart::Item(_)) => {}
                Err(e) => return ToolResult::err(worker_failed(&e)),
            }
        }
        ToolResult::err("the tools worker ended the call without a result")
    }

    async fn pre_hooks(
        &self,
        hooks_json: &str,
        call: &ToolInvocation,
        session_id: &str,
    ) -> PreHookReply {
        let request = tools::Request::RunPreHooks(HookCall {
            hooks_json: hooks_json.to_string(),
            session_id: session_id.to_string(),
            tool: call.name.clone(),
            input_json: call.input_json.clone(),
            output_json: None,
        });
        match self.tools.call(request).await {
            Ok(tools::Response::PreHooks(reply)) => reply,
            // Fail closed: a hook that could not run cannot have allowed the call.
            Ok(other) => PreHookReply {
                allowed: false,
                reason: Some(format!("unexpected reply to the pre-hooks: {other:?}")),
                decided_by: None,
                failed: true,
            },
            Err(e) => PreHookReply {
                allowed: false,
                reason: Some(format!("the pre-tool-use hooks could not run: {e}")),
                decided_by: None,
                failed: true,
            },
        }
    }

    async fn post_hooks(
        &self,
        hooks_json: &str,
        call: &ToolInvocation,
        session_id: &str,
        result: &ToolResult,
    ) -> Vec<String> {
        let output = serde_json::json!({
            "output": result.output,
            "error": result.error,
            "is_error": result.is_error,
        });
        let request = tools::Request::RunPostHooks(HookCall {
            hooks_json: hooks_json.to_string(),
            session_id: session_id.to_string(),
            tool: call.name.clone(),
            input_json: call.input_json.clone(),
            output_json: Some(output.to_string()),
        });
        match self.tools.call(request).await {
            Ok(tools::Response::PostHooks { failures }) => failures,
            Ok(other) => vec![format!("unexpected reply to the post-hooks: {other:?}")],
            Err(e) => vec![format!("the post-tool-use hooks could not run: {e}")],
        }
    }
}
