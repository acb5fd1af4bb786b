//! The production seams: the model worker as [`ApiClient`], the tools worker as [`ToolExecutor`].
//! Every request has a deadline (`deadline.rs`); a failure is described as what happened and
//! what to do, not as the layers it passed through.

use super::deadline::{within, Deadlines, Missed};
use super::events::{EventSink, RunEvent};
use super::traits::{ApiClient, ToolExecutor, ToolInvocation, TurnEnd, TurnError, TurnRequest};
use crate::worker::WorkerHandle;
use hanzo_ipc::channel::{CallError, StreamPart};
use hanzo_ipc::roles::mcp::{self, McpCallOutcome, McpFailureKind, McpProtocol, McpToolCall};
use hanzo_ipc::roles::model::{
    self, CompletionRequest, ModelProtocol, ProviderConfig, RetryNotice, RetryPolicy, StreamEvent,
    ToolDef,
};
use hanzo_ipc::roles::tools::{self, HookCall, PreHookReply, ToolCall, ToolResult, ToolsProtocol};
use hanzo_ipc::Role;
use hanzo_policy::hooks::{HookConfig, HookEvent};
use hanzo_store::SecretValues;
use hanzo_store::{McpCallInfo, McpClassification};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Model turns through the model worker (and, for live providers, the broker behind it).
pub struct WorkerApi<'a> {
    /// The model worker's channel.
    pub model: &'a WorkerHandle<ModelProtocol>,
    /// Where turns go: a provider's API (through the broker) or a recording.
    pub provider: ProviderConfig,
    /// The model asked for in each request.
    pub model_name: String,
    /// The most tokens the model may answer with in one turn.
    pub max_output_tokens: u32,
    /// How often, and after what delays, a failed request is tried again.
    pub retry: RetryPolicy,
    /// `Some`: record every exchange as a cassette line (`run --record`).
    pub recorded: Option<Mutex<Vec<String>>>,
    /// How long the model worker may stay silent during a turn before the turn fails.
    pub deadlines: Deadlines,
    /// Where retries are announced (the run's events), with the values to redact from them.
    pub notices: Option<(&'a dyn EventSink, SecretValues)>,
}

impl WorkerApi<'_> {
    /// The cassette lines recorded so far.
    pub fn take_recorded(&self) -> Vec<String> {
        match &self.recorded {
            Some(m) => std::mem::take(&mut *m.lock().unwrap_or_else(|p| p.into_inner())),
            None => Vec::new(),
        }
    }

    fn announce(&self, n: &RetryNotice) {
        let Some((sink, secrets)) = &self.notices else {
            return;
        };
        let reason = secrets.scrub(&n.reason).into_owned();
        tracing::info!(
            attempt = n.attempt,
            max_attempts = n.max_attempts,
            delay_ms = n.delay_ms,
            reason = %reason,
            "the model request failed; retrying"
        );
        sink.emit(&RunEvent::ModelRetry {
            attempt: n.attempt,
            max_attempts: n.max_attempts,
            delay_ms: n.delay_ms,
            reason,
        });
    }
}

/// A model-side failure in words for the user: what happened and what to do.
fn model_failure(e: &CallError) -> String {
    match e {
        CallError::WorkerGone { .. } => format!(
            "the model worker stopped during the request and is being restarted ({e}); run \
             again, and if it keeps happening, `hanzo-dev doctor` checks the workers"
        ),
        CallError::Remote { error, .. } => error.message.clone(),
        CallError::Unavailable { reason, .. } => format!(
            "the model worker is not available ({reason}); `hanzo-dev doctor` checks the workers"
        ),
        CallError::TooLarge(f) => format!(
            "the conversation is too large to send to the model worker ({f}); lower \
             --max-context so it is compacted sooner"
        ),
        CallError::Timeout { .. } => e.to_string(),
    }
}

fn missed(m: &Missed) -> TurnError {
    TurnError {
        kind: None,
        message: format!(
            "{m}. If the model is slow to start answering, raise --model-timeout; \
             `hanzo-dev doctor` checks the workers"
        ),
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
            message: model_failure(&e),
        };
        let idle = self.deadlines.model_idle;
        let mut stream = within(
            Role::Model,
            "the model turn",
            idle,
            self.model.call_stream(model::Request::Complete(req)),
        )
        .await
        .map_err(|m| missed(&m))?
        .map_err(gone)?;
        let mut failed: Option<TurnError> = None;
        loop {
            let part = within(Role::Model, "the model turn", idle, stream.next())
                .await
                .map_err(|m| missed(&m))?;
            let Some(part) = part else { break };
            let part = match part {
                Ok(p) => p,
                // The worker has already streamed the error as an event; that message says
                // what happened, the channel's wrapping of it does not.
                Err(e) => return Err(failed.unwrap_or_else(|| gone(e))),
            };
            match part {
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
                StreamPart::Item(model::Item::Retrying(n)) => self.announce(&n),
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
    /// The tools worker's channel.
    pub tools: &'a WorkerHandle<ToolsProtocol>,
    /// How long each kind of request may take (a tool call: its own limit plus the grace).
    pub deadlines: Deadlines,
    /// The longest the configured pre- (or post-) hooks may take together (their `timeout_ms`
    /// summed); the deadline of a hook request adds [`Deadlines::grace`].
    pub hooks_time: Duration,
    /// The run's MCP servers, in the mcp worker (`None`: no MCP tools are offered).
    pub mcp: Option<McpTools<'a>>,
    /// The lsp worker: its tools are offered, and file-tool results get its diagnostics block
    /// (`agent::lsp`). `None`: no language servers in this run.
    pub lsp: Option<super::lsp::LspLink<'a>>,
    /// The tools worker's own definitions once it has given them (start with
    /// `Default::default()`).
    pub builtin: BuiltinDefs,
}

/// The built-in tools' definitions, asked of the tools worker once per run: they are fixed for
/// the build, while the MCP tools next to them are asked for at every step (a server may change
/// its list). So a tools worker that is stopped or restarting costs the step that needed it, not
/// every later step's tool list.
#[derive(Debug, Default)]
pub struct BuiltinDefs(Mutex<Option<Vec<ToolDef>>>);

/// The tools of the ready MCP servers, offered as `mcp__<server>__<tool>` next to the built-in
/// ones, and their calls through the mcp worker.
pub struct McpTools<'a> {
    /// The mcp worker's channel.
    pub mcp: &'a WorkerHandle<McpProtocol>,
    /// The longest one MCP call may take (the servers' own timeouts are shorter).
    pub call_limit: Duration,
    /// `mcp__<server>__<tool>` → (server, tool), from the last listing.
    names: Mutex<HashMap<String, (String, String)>>,
    /// Where a call's progress notifications go (`None`: dropped).
    events: Option<&'a dyn EventSink>,
    /// By call id, the classification of each call that reached a server's name, until the
    /// loop takes it for the record ([`McpTools::take_call_info`]).
    infos: Mutex<HashMap<String, McpCallInfo>>,
}

impl<'a> McpTools<'a> {
    /// The MCP tools of the mcp worker behind `mcp`, each call allowed `call_limit`.
    pub fn new(mcp: &'a WorkerHandle<McpProtocol>, call_limit: Duration) -> McpTools<'a> {
        McpTools {
            mcp,
            call_limit,
            names: Mutex::new(HashMap::new()),
            events: None,
            infos: Mutex::new(HashMap::new()),
        }
    }

    /// The server, tool and classification of call `call_id`, once (for its record).
    pub fn take_call_info(&self, call_id: &str) -> Option<McpCallInfo> {
        self.infos
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(call_id)
    }

    /// Pass each call's progress notifications on as [`RunEvent::ToolProgress`].
    pub fn with_events(mut self, events: &'a dyn EventSink) -> McpTools<'a> {
        self.events = Some(events);
        self
    }

    fn progress(&self, id: &str, sent: &mut usize, item: mcp::Item) {
        let (
            Some(events),
            mcp::Item::Progress {
                progress,
                total,
                message,
            },
        ) = (self.events, item)
        else {
            return;
        };
        if *sent >= super::events::MAX_PROGRESS_EVENTS {
            return;
        }
        *sent += 1;
        events.emit(&RunEvent::ToolProgress {
            id: id.to_string(),
            progress,
            total,
            message: message.map(|m| {
                m.chars()
                    .take(super::events::MAX_PROGRESS_MESSAGE)
                    .collect()
            }),
        });
    }

    /// The definitions of every ready server's tools (the server's description and schema).
    pub async fn definitions(&self, deadline: Duration) -> Result<Vec<ToolDef>, String> {
        // A restarted worker knows its servers once configured again.
        self.mcp.wait_configured(deadline).await;
        let reply = within(
            Role::Mcp,
            "the request for MCP tools",
            deadline,
            self.mcp.call(mcp::Request::ListTools { server: None }),
        )
        .await
        .map_err(|m| m.to_string())?;
        let tools = match reply {
            Ok(mcp::Response::Tools(t)) => t,
            Ok(other) => return Err(format!("unexpected reply {other:?}")),
            Err(e) => return Err(format!("the mcp worker could not list tools: {e}")),
        };
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        names.clear();
        Ok(tools
            .into_iter()
            .map(|t| {
                names.insert(t.qualified_name.clone(), (t.server.clone(), t.tool.clone()));
                ToolDef {
                    name: t.qualified_name,
                    description: t
                        .description
                        .unwrap_or_else(|| format!("{} (MCP server {})", t.tool, t.server)),
                    input_schema_json: t.input_schema_json,
                }
            })
            .collect())
    }

    /// One call: the classification (allowed / denied / fault) decides the result, and says
    /// which in the error the model and the record see.
    pub async fn execute(&self, call: &ToolInvocation) -> ToolResult {
        let target = self
            .names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&call.name)
            .cloned();
        let Some((server, tool)) = target else {
            return ToolResult::err(format!(
                "{} is not a tool of any ready MCP server (`hanzo-dev mcp list` shows them)",
                call.name
            ));
        };
        let request = mcp::Request::CallTool(McpToolCall {
            server: server.clone(),
            tool: tool.clone(),
            arguments_json: call.input_json.clone(),
            timeout_ms: None,
        });
        let run = async {
            // A restarted worker knows its servers once configured again (a call sent before
            // would find no server).
            self.mcp.wait_configured(self.call_limit).await;
            // Dropping the stream (cancellation, the run's limit) cancels the call in the
            // worker, which sends `notifications/cancelled` to the server.
            let mut stream = match self.mcp.call_stream(request).await {
                Ok(s) => s,
                Err(e) => return Err(format!("the mcp worker could not take the call: {e}")),
            };
            let mut sent = 0;
            while let Some(part) = stream.next().await {
                match part {
                    Ok(StreamPart::Done(mcp::Response::Call(o))) => return Ok(o),
                    Ok(StreamPart::Done(other)) => {
                        return Err(format!("unexpected reply from the mcp worker: {other:?}"))
                    }
                    Ok(StreamPart::Item(item)) => self.progress(&call.id, &mut sent, item),
                    Err(e) => return Err(format!("the mcp worker stopped during the call: {e}")),
                }
            }
            Err("the mcp worker ended the call without an answer".to_string())
        };
        let (outcome, plain_error) =
            match within(Role::Mcp, "the MCP tool call", self.call_limit, run).await {
                Ok(Ok(o)) => (o, None),
                // The worker gave no answer: the model is told what happened to the channel.
                Ok(Err(e)) => (
                    McpCallOutcome::Failed {
                        kind: McpFailureKind::Transport,
                        message: e.clone(),
                    },
                    Some(e),
                ),
                Err(m) => (
                    McpCallOutcome::Failed {
                        kind: McpFailureKind::Timeout,
                        message: m.to_string(),
                    },
                    Some(m.to_string()),
                ),
            };
        self.infos
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(call.id.clone(), mcp_call_info(&server, &tool, &outcome));
        match plain_error {
            Some(e) => ToolResult::err(e),
            None => mcp_result(&server, &tool, outcome),
        }
    }
}

/// The record's fields of a classified MCP answer: server, tool, classification, reason.
pub fn mcp_call_info(server: &str, tool: &str, outcome: &McpCallOutcome) -> McpCallInfo {
    let (classification, reason) = match outcome {
        McpCallOutcome::Allowed { .. } => (McpClassification::Allowed, None),
        McpCallOutcome::Denied { reason } => (McpClassification::Denied, Some(reason.clone())),
        McpCallOutcome::Fault { reason } => (McpClassification::Fault, Some(reason.clone())),
        McpCallOutcome::Failed { kind, message } => (
            McpClassification::Failed,
            Some(format!("{kind:?}: {message}")),
        ),
    };
    McpCallInfo {
        server: server.to_string(),
        tool: tool.to_string(),
        classification,
        reason,
    }
}

/// What the model and the record see of a classified MCP answer.
pub fn mcp_result(server: &str, tool: &str, outcome: McpCallOutcome) -> ToolResult {
    match outcome {
        McpCallOutcome::Allowed {
            result_json,
            is_error,
            truncated,
            bytes,
        } => {
            let v: serde_json::Value =
                serde_json::from_str(&result_json).unwrap_or(serde_json::Value::Null);
            let text: Vec<&str> = v["content"]
                .as_array()
                .map(|c| c.iter().filter_map(|b| b["text"].as_str()).collect())
                .unwrap_or_default();
            let mut output = if text.is_empty() {
                result_json.clone()
            } else {
                text.join("\n")
            };
            if truncated {
                output.push_str(&format!(
                    "\n[hanzo-dev: the MCP result was cut; it had {bytes} bytes]"
                ));
            }
            if is_error {
                ToolResult {
                    output,
                    error: Some(format!(
                        "MCP result (allowed): the tool {tool} of server {server} reported an error"
                    )),
                    is_error: true,
                }
            } else {
                ToolResult::ok(output)
            }
        }
        McpCallOutcome::Denied { reason } => ToolResult::err(format!(
            "MCP policy denial from server {server} (tool {tool}): {reason}"
        )),
        McpCallOutcome::Fault { reason } => ToolResult::err(format!(
            "MCP downstream fault from server {server} (tool {tool}): {reason}"
        )),
        McpCallOutcome::Failed { kind, message } => ToolResult::err(format!(
            "MCP call failed ({kind:?}) for server {server} (tool {tool}): {message}"
        )),
    }
}

fn worker_failed(e: &CallError) -> String {
    match e {
        CallError::WorkerGone { .. } => format!(
            "the tools worker stopped during this call and is being restarted; anything the call \
             started was killed ({e})"
        ),
        CallError::Remote { error, .. } => format!("the tool could not run: {}", error.message),
        other => other.to_string(),
    }
}

/// How long a tool call may take before the worker is considered unresponsive: the command's
/// own limit for `bash`, the request deadline for the file tools, plus the grace to report.
fn call_deadline(call: &ToolInvocation, d: &Deadlines) -> Duration {
    let own = if call.name == hanzo_tools::defs::BASH {
        let asked = serde_json::from_str::<serde_json::Value>(&call.input_json)
            .ok()
            .and_then(|v| v.get("timeout_ms").and_then(serde_json::Value::as_u64))
            .map(Duration::from_millis)
            .unwrap_or(hanzo_tools::exec::DEFAULT_TIMEOUT);
        asked.min(hanzo_tools::exec::MAX_TIMEOUT)
    } else {
        d.request
    };
    own + d.grace
}

impl WorkerTools<'_> {
    /// A call of a tools-worker tool.
    async fn execute_tool(&self, call: &ToolInvocation, _session_id: &str) -> ToolResult {
        let request = tools::Request::Run(ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            input: call.input_json.clone(),
        });
        let run = async {
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
        };
        let limit = call_deadline(call, &self.deadlines);
        match within(Role::Tools, "the tool call", limit, run).await {
            Ok(r) => r,
            Err(m) => ToolResult::err(m.to_string()),
        }
    }
}

impl WorkerTools<'_> {
    /// The tools worker's definitions of the built-in tools.
    async fn builtin_definitions(&self) -> Result<Vec<ToolDef>, String> {
        let reply = within(
            Role::Tools,
            "the request for tool definitions",
            self.deadlines.request,
            self.tools.call(tools::Request::Definitions),
        )
        .await
        .map_err(|m| m.to_string())?;
        match reply {
            Ok(tools::Response::Definitions(defs)) => Ok(defs
                .into_iter()
                .map(|d| ToolDef {
                    name: d.name,
                    description: d.description,
                    input_schema_json: d.input_schema,
                })
                .collect()),
            Ok(other) => Err(format!("unexpected reply {other:?}")),
            Err(e) => Err(worker_failed(&e)),
        }
    }
}

impl ToolExecutor for WorkerTools<'_> {
    async fn definitions(&self) -> Result<Vec<ToolDef>, String> {
        let cached = self
            .builtin
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let builtin = match cached {
            Some(defs) => defs,
            None => {
                let defs = self
                    .builtin_definitions()
                    .await
                    .map_err(|e| format!("the tools worker: {e}"))?;
                *self.builtin.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(defs.clone());
                defs
            }
        };
        let mut all: Vec<ToolDef> = builtin
            .into_iter()
            .chain(self.lsp.iter().flat_map(|_| super::lsp::tool_defs()))
            .collect();
        if let Some(m) = &self.mcp {
            // A server whose tools cannot be listed is left out by the mcp worker; what fails
            // here is the listing as a whole (the worker is gone or does not answer).
            all.extend(m.definitions(self.deadlines.request).await?);
        }
        Ok(all)
    }

    fn mcp_call_info(&self, call_id: &str) -> Option<McpCallInfo> {
        self.mcp.as_ref()?.take_call_info(call_id)
    }

    async fn execute(&self, call: &ToolInvocation, session_id: &str) -> ToolResult {
        if let (Some(m), true) = (&self.mcp, is_mcp_tool(&call.name)) {
            return m.execute(call).await;
        }
        if super::lsp::is_lsp_tool(&call.name) {
            return match &self.lsp {
                Some(lsp) => lsp.call_tool(&call.name, &call.input_json).await,
                None => ToolResult::err(format!(
                    "{}: no language servers run in this session",
                    call.name
                )),
            };
        }
        let mut result = self.execute_tool(call, session_id).await;
        if let Some(lsp) = &self.lsp {
            lsp.enrich(&call.name, &call.input_json, &mut result).await;
        }
        result
    }

    async fn pre_hooks(
        &self,
        hooks: &[HookConfig],
        call: &ToolInvocation,
        session_id: &str,
    ) -> PreHookReply {
        let request = tools::Request::RunPreHooks(HookCall {
            hooks: wire_hooks(hooks, HookEvent::PreToolUse),
            session_id: session_id.to_string(),
            tool: call.name.clone(),
            input_json: call.input_json.clone(),
            output_json: None,
        });
        let limit = self.hooks_time + self.deadlines.grace;
        // Fail closed: a hook that could not run cannot have allowed the call.
        let refuse = |reason: String| PreHookReply {
            allowed: false,
            reason: Some(reason),
            decided_by: None,
            failed: true,
        };
        match within(
            Role::Tools,
            "the pre-tool-use hooks",
            limit,
            self.tools.call(request),
        )
        .await
        {
            Ok(Ok(tools::Response::PreHooks(reply))) => reply,
            Ok(Ok(other)) => refuse(format!("unexpected reply to the pre-hooks: {other:?}")),
            Ok(Err(e)) => refuse(format!("the pre-tool-use hooks could not run: {e}")),
            Err(m) => refuse(m.to_string()),
        }
    }

    async fn post_hooks(
        &self,
        hooks: &[HookConfig],
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
            hooks: wire_hooks(hooks, HookEvent::PostToolUse),
            session_id: session_id.to_string(),
            tool: call.name.clone(),
            input_json: call.input_json.clone(),
            output_json: Some(output.to_string()),
        });
        let limit = self.hooks_time + self.deadlines.grace;
        match within(
            Role::Tools,
            "the post-tool-use hooks",
            limit,
            self.tools.call(request),
        )
        .await
        {
            Ok(Ok(tools::Response::PostHooks { failures })) => failures,
            Ok(Ok(other)) => vec![format!("unexpected reply to the post-hooks: {other:?}")],
            Ok(Err(e)) => vec![format!("the post-tool-use hooks could not run: {e}")],
            Err(m) => vec![m.to_string()],
        }
    }
}

/// The hooks of `hooks` that run on `event`, in their order, as the tools channel carries them
/// (the request names the event).
fn wire_hooks(hooks: &[HookConfig], event: HookEvent) -> Vec<tools::Hook> {
    hooks
        .iter()
        .filter(|h| h.event == event)
        .map(|h| tools::Hook {
            command: h.command.clone(),
            tool_pattern: h.tool_pattern.clone(),
            timeout_ms: h.timeout_ms,
        })
        .collect()
}

/// Whether `name` is an MCP tool's (`mcp__<server>__<tool>`).
pub fn is_mcp_tool(name: &str) -> bool {
    name.starts_with("mcp__")
}
