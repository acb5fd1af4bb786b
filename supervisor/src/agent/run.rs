//! The loop itself. One [`AgentLoop::run`] is one run: stages (one, or `auto`'s three), each a
//! sequence of steps; a step is one model turn and the tool calls it asked for.
//!
//! Invariants:
//! - Every tool call goes through the policy; its audit record and the call (decision, hook
//!   results, output or error) are written to the store before the next model turn starts.
//! - A tool's failure, a denial or a dead tools worker is a result the model sees; only the
//!   model failing, a limit, cancellation or the store failing ends a run early.
//! - Every string is scrubbed of known secrets before it reaches the model or the store.
//! - The step in progress is the most a crash can lose: steps, calls and events are written as
//!   they happen (the store commits each write).

use super::events::{EventSink, RunEvent};
use super::traits::{
    ApiClient, PermissionDecision, PermissionPrompter, ToolExecutor, ToolInvocation, TurnRequest,
};
use hanzo_compaction::{estimate_tokens, Role as CRole, SessionCompactor, Summary};
use hanzo_ipc::roles::model::{
    ContentBlock, Message, MessageRole, StopReason, StreamEvent, ToolDef,
};
use hanzo_ipc::roles::tools::ToolResult;
use hanzo_policy::permission::{PermissionMode, TieredPolicy};
use hanzo_policy::AuditRecord;
use hanzo_store::{AgentDef, NewRun, RunId, RunStatus, RunStore, StepEnd, StepId, TokenUsage};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::Instrument;

/// When a run must stop even though the model has not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Model turns over the whole run (all stages).
    pub max_steps: u32,
    /// Input plus output tokens over the whole run.
    pub max_total_tokens: Option<u64>,
    /// Wall-clock limit for the whole run.
    pub timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps: 50,
            max_total_tokens: None,
            timeout: None,
        }
    }
}

/// How the loop behaves, independent of what it runs.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// The model's context window in tokens; compaction starts above 90 % of it.
    pub max_context_tokens: u64,
    /// Turns kept verbatim by compaction (HIP-0301 §5 default: 3).
    pub reserve_recent: usize,
    pub limits: Limits,
    /// The configured hooks as JSON text (`None`: no hooks, no hook round trips).
    pub hooks_json: Option<String>,
    /// Values that must never reach the model or the record (scrubbed to `[redacted]`).
    pub known_secrets: Vec<String>,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            max_context_tokens: 200_000,
            reserve_recent: 3,
            limits: Limits::default(),
            hooks_json: None,
            known_secrets: Vec::new(),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub task: String,
    /// The name recorded for the run (`auto` for the pipeline).
    pub agent_name: String,
    /// One agent, or the stages of a pipeline in order.
    pub stages: Vec<AgentDef>,
    pub model: String,
    /// The tier the tools worker attested (`A` or `B`), for the record.
    pub isolation: hanzo_policy::isolation::Tier,
    pub workspace: String,
    pub replay: bool,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    pub run_id: RunId,
    pub status: RunStatus,
    pub outcome: String,
    /// The last stage's final text.
    pub final_text: String,
    pub steps: u32,
    pub usage: TokenUsage,
}

/// Why a stage stopped before the model finished.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stop {
    Failed(String),
    Cancelled,
}

/// What interrupted an await: Ctrl-C (or the caller's cancel) or the wall-clock limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interrupt {
    Cancelled,
    TimedOut,
}

impl Interrupt {
    fn into_stop(self, limit: Option<Duration>) -> Stop {
        match self {
            Interrupt::Cancelled => Stop::Cancelled,
            Interrupt::TimedOut => Stop::Failed(format!(
                "wall-clock limit reached ({} s)",
                limit.map_or(0, |d| d.as_secs())
            )),
        }
    }
}

pub struct AgentLoop<'a, A, T, P> {
    pub api: &'a A,
    pub tools: &'a T,
    pub prompter: &'a P,
    pub policy: &'a TieredPolicy,
    pub store: &'a mut RunStore,
    pub events: &'a dyn EventSink,
    pub config: LoopConfig,
    /// Becomes `true` to cancel the run (Ctrl-C).
    pub cancel: watch::Receiver<bool>,
}

/// Per-run counters.
struct Progress {
    run: RunId,
    session: String,
    steps: u32,
    usage: TokenUsage,
    deadline: Option<Instant>,
}

/// One stage's conversation: messages and the estimated size of each.
struct Conversation {
    messages: Vec<Message>,
    tokens: Vec<u64>,
}

impl Conversation {
    fn push(&mut self, m: Message) {
        self.tokens.push(message_tokens(&m));
        self.messages.push(m);
    }
}

impl<A, T, P> AgentLoop<'_, A, T, P>
where
    A: ApiClient,
    T: ToolExecutor,
    P: PermissionPrompter,
{
    /// Run to the end. `Err` only when the run could not be recorded (the store failed); the
    /// run is then closed as failed if the store still allows it.
    pub async fn run(&mut self, spec: &RunSpec) -> anyhow::Result<RunReport> {
        let run = self.store.begin_run(&NewRun {
            agent: Some(spec.agent_name.clone()),
            input: self.scrub(&spec.task),
            model: spec.model.clone(),
            isolation: spec.isolation,
        })?;
        let span = tracing::info_span!("agent.run", run_id = run.0, agent = %spec.agent_name);
        let started = Instant::now();
        self.events.emit(&RunEvent::RunStarted {
            run_id: run.0,
            agent: spec.agent_name.clone(),
            model: spec.model.clone(),
            isolation: spec.isolation,
            approval: self.prompter.describe(),
            workspace: spec.workspace.clone(),
            replay: spec.replay,
        });
        self.store.record_event(
            run,
            None,
            "run_config",
            &json!({
                "approval": self.prompter.describe(),
                "max_steps": self.config.limits.max_steps,
                "max_total_tokens": self.config.limits.max_total_tokens,
                "timeout_s": self.config.limits.timeout.map(|d| d.as_secs()),
                "max_context_tokens": self.config.max_context_tokens,
                "workspace": spec.workspace,
                "replay": spec.replay,
                "trusted_workspace": self.policy.is_trusted(),
            }),
        )?;
        let mut progress = Progress {
            run,
            session: format!("run-{}", run.0),
            steps: 0,
            usage: TokenUsage::default(),
            deadline: self.config.limits.timeout.map(|d| Instant::now() + d),
        };
        let result = self.run_stages(spec, &mut progress).instrument(span).await;
        let (status, outcome, final_text) = match result {
            Ok(Ok(text)) => (RunStatus::Succeeded, summarize_outcome(&text), text),
            Ok(Err(Stop::Cancelled)) => (
                RunStatus::Cancelled,
                "cancelled by the user".to_string(),
                String::new(),
            ),
            Ok(Err(Stop::Failed(why))) => (RunStatus::Failed, why, String::new()),
            Err(store_error) => {
                let why = format!("the run store failed: {store_error:#}");
                let _ = self
                    .store
                    .finish_run(run, RunStatus::Failed, Some(&why), progress.usage);
                return Err(store_error);
            }
        };
        let outcome = self.scrub(&outcome);
        tracing::info!(
            run_id = run.0,
            status = status.as_str(),
            steps = progress.steps,
            "run finished"
        );
        self.store
            .finish_run(run, status, Some(&outcome), progress.usage)?;
        self.events.emit(&RunEvent::RunFinished {
            run_id: run.0,
            status: status.as_str().to_string(),
            outcome: outcome.clone(),
            steps: progress.steps,
            input_tokens: progress.usage.input,
            output_tokens: progress.usage.output,
            duration_ms: millis(started.elapsed()),
        });
        Ok(RunReport {
            run_id: run,
            status,
            outcome,
            final_text,
            steps: progress.steps,
            usage: progress.usage,
        })
    }

    async fn run_stages(
        &mut self,
        spec: &RunSpec,
        progress: &mut Progress,
    ) -> anyhow::Result<Result<String, Stop>> {
        let mut input = spec.task.clone();
        let mut last = String::new();
        for (i, agent) in spec.stages.iter().enumerate() {
            if spec.stages.len() > 1 {
                self.events.emit(&RunEvent::StageStarted {
                    stage: agent.name.clone(),
                });
                self.store.record_event(
                    progress.run,
                    None,
                    "stage_started",
                    &json!({"stage": agent.name, "index": i + 1, "of": spec.stages.len()}),
                )?;
                if i > 0 {
                    input = format!(
                        "{}\n\n--- Output of the previous stage ({}) ---\n{}",
                        spec.task,
                        spec.stages[i - 1].name,
                        last
                    );
                }
            }
            match self.run_stage(agent, &input, progress).await? {
                Ok(text) => last = text,
                Err(stop) => return Ok(Err(stop)),
            }
        }
        Ok(Ok(last))
    }

    async fn run_stage(
        &mut self,
        agent: &AgentDef,
        input: &str,
        progress: &mut Progress,
    ) -> anyhow::Result<Result<String, Stop>> {
        let tools = if agent.tools.is_empty() {
            Vec::new()
        } else {
            match self.tools.definitions().await {
                Ok(all) => all
                    .into_iter()
                    .filter(|d| agent.tools.contains(&d.name))
                    .collect(),
                Err(e) => {
                    return Ok(Err(Stop::Failed(format!(
                        "cannot get the tool definitions from the tools worker: {e}"
                    ))))
                }
            }
        };
        let mut conv = Conversation {
            messages: Vec::new(),
            tokens: Vec::new(),
        };
        conv.push(Message::user_text(self.scrub(input)));
        loop {
            if progress.steps >= self.config.limits.max_steps {
                return Ok(Err(Stop::Failed(format!(
                    "step limit reached ({} steps; raise it with --max-steps)",
                    self.config.limits.max_steps
                ))));
            }
            if let Some(budget) = self.config.limits.max_total_tokens {
                let used = progress.usage.input + progress.usage.output;
                if used >= budget {
                    return Ok(Err(Stop::Failed(format!(
                        "token budget exhausted ({used} of {budget} tokens used)"
                    ))));
                }
            }
            if let Some(stop) = self.maybe_compact(agent, &mut conv, progress).await? {
                return Ok(Err(stop));
            }
            progress.steps += 1;
            let step_no = progress.steps;
            let span = tracing::info_span!("agent.step", run_id = progress.run.0, step = step_no);
            let step = self
                .step(agent, &tools, &mut conv, progress, step_no)
                .instrument(span)
                .await?;
            match step {
                StepOutcome::Continue => {}
                StepOutcome::Finished(text) => return Ok(Ok(text)),
                StepOutcome::Stopped(stop) => return Ok(Err(stop)),
            }
        }
    }

    async fn step(
        &mut self,
        agent: &AgentDef,
        tools: &[ToolDef],
        conv: &mut Conversation,
        progress: &mut Progress,
        step_no: u32,
    ) -> anyhow::Result<StepOutcome> {
        let step = self.store.begin_step(progress.run)?;
        tracing::info!("step started");
        self.events.emit(&RunEvent::StepStarted { step: step_no });
        let mut text = String::new();
        let mut uses: Vec<ToolInvocation> = Vec::new();
        let events = self.events;
        let turn = {
            let mut on_event = |ev: &StreamEvent| match ev {
                StreamEvent::ContentDelta { text: t } => {
                    text.push_str(t);
                    events.emit(&RunEvent::Text { text: t.clone() });
                }
                StreamEvent::ToolUse {
                    id,
                    name,
                    input_json,
                } => uses.push(ToolInvocation {
                    id: id.clone(),
                    name: name.clone(),
                    input_json: input_json.clone(),
                }),
                StreamEvent::MessageStop { .. } | StreamEvent::Error { .. } => {}
            };
            let request = TurnRequest {
                system: &agent.system_prompt,
                messages: &conv.messages,
                tools,
            };
            let mut cancel = self.cancel.clone();
            let deadline = progress.deadline;
            tokio::select! {
                r = self.api.send_message(request, &mut on_event) => Ok(r),
                i = interrupted(&mut cancel, deadline) => Err(i),
            }
        };
        let text = self.scrub(&text);
        let turn = match turn {
            Err(interrupt) => {
                self.end_step(step, &text, TokenUsage::default())?;
                return Ok(StepOutcome::Stopped(
                    interrupt.into_stop(self.config.limits.timeout),
                ));
            }
            Ok(Err(e)) => {
                self.end_step(step, &text, TokenUsage::default())?;
                let message = self.scrub(&e.message);
                self.store.record_event(
                    progress.run,
                    Some(step),
                    "model_error",
                    &json!({"kind": e.kind.map(|k| format!("{k:?}")), "message": message}),
                )?;
                return Ok(StepOutcome::Stopped(Stop::Failed(format!(
                    "the model request failed: {message}"
                ))));
            }
            Ok(Ok(end)) => end,
        };
        let usage = TokenUsage {
            input: turn.usage.input_tokens,
            output: turn.usage.output_tokens,
        };
        progress.usage.input += usage.input;
        progress.usage.output += usage.output;

        let mut content = Vec::new();
        if !text.is_empty() {
            content.push(ContentBlock::Text { text: text.clone() });
        }
        for u in &uses {
            content.push(ContentBlock::ToolUse {
                id: u.id.clone(),
                name: u.name.clone(),
                input_json: self.scrub(&u.input_json),
            });
        }
        if !content.is_empty() {
            conv.push(Message {
                role: MessageRole::Assistant,
                content,
            });
        }
        if uses.is_empty() {
            self.end_step(step, &text, usage)?;
            self.events.emit(&RunEvent::StepFinished {
                step: step_no,
                input_tokens: usage.input,
                output_tokens: usage.output,
            });
            if turn.stop_reason == StopReason::MaxTokens {
                self.store.record_event(
                    progress.run,
                    Some(step),
                    "max_tokens",
                    &json!({"note": "the model's answer was cut at the output token limit"}),
                )?;
            }
            return Ok(StepOutcome::Finished(text));
        }

        let mut results = Vec::with_capacity(uses.len());
        let mut stopped = None;
        for call in &uses {
            if stopped.is_some() {
                // The run is stopping: the remaining calls are answered without running, so the
                // conversation stays well-formed and the record complete.
                let result = ToolResult::err("not run: the run was stopped before this call");
                self.record_unrun(step, call, &result)?;
                results.push(result_block(call, &result));
                continue;
            }
            let span = tracing::info_span!(
                "agent.tool",
                run_id = progress.run.0,
                step = step_no,
                tool = %call.name
            );
            let (result, interrupt) = self
                .tool(agent, step, call, progress)
                .instrument(span)
                .await?;
            results.push(result_block(call, &result));
            if let Some(i) = interrupt {
                stopped = Some(i.into_stop(self.config.limits.timeout));
            }
        }
        conv.push(Message {
            role: MessageRole::User,
            content: results,
        });
        self.end_step(step, &text, usage)?;
        self.events.emit(&RunEvent::StepFinished {
            step: step_no,
            input_tokens: usage.input,
            output_tokens: usage.output,
        });
        Ok(match stopped {
            Some(stop) => StepOutcome::Stopped(stop),
            None => StepOutcome::Continue,
        })
    }

    fn end_step(&mut self, step: StepId, text: &str, usage: TokenUsage) -> anyhow::Result<()> {
        self.store.finish_step(
            step,
            &StepEnd {
                text: (!text.is_empty()).then(|| text.to_string()),
                usage,
            },
        )?;
        Ok(())
    }

    /// One tool call: gate (agent, policy, approval, pre-hooks) → execute → post-hooks → record.
    async fn tool(
        &mut self,
        agent: &AgentDef,
        step: StepId,
        call: &ToolInvocation,
        progress: &Progress,
    ) -> anyhow::Result<(ToolResult, Option<Interrupt>)> {
        let started = Instant::now();
        let input: Value = serde_json::from_str(&call.input_json).unwrap_or(Value::Null);
        let input = self.scrub_value(input);
        self.events.emit(&RunEvent::ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            input: input.clone(),
        });
        let gate = self.gate(agent, call, &input, progress).await?;
        let mut hook_results = Vec::new();
        let mut allowed = gate.allowed;
        let mut decided_by = gate.decided_by.clone();
        let mut reason = gate.reason.clone();
        if allowed {
            if let Some(hooks) = &self.config.hooks_json {
                let pre = self.tools.pre_hooks(hooks, call, &progress.session).await;
                hook_results.push(json!({
                    "phase": "pre",
                    "allowed": pre.allowed,
                    "failed": pre.failed,
                    "reason": pre.reason.as_deref().map(|r| self.scrub(r)),
                    "decided_by": pre.decided_by,
                }));
                if !pre.allowed {
                    allowed = false;
                    decided_by = "hook".to_string();
                    reason = format!(
                        "a pre-tool-use hook {} it: {}",
                        if pre.failed {
                            "failed, which blocks"
                        } else {
                            "denied"
                        },
                        pre.reason.as_deref().unwrap_or("no reason given")
                    );
                }
            }
        }
        let reason = self.scrub(&reason);
        tracing::info!(tool = %call.name, allowed, decided_by = %decided_by, "tool call decided");
        self.events.emit(&RunEvent::ToolDecision {
            id: call.id.clone(),
            allowed,
            decided_by: decided_by.clone(),
            reason: reason.clone(),
        });
        let mut interrupt = None;
        let result = if !allowed {
            ToolResult::err(format!("permission denied: {reason}"))
        } else if input.is_null() {
            ToolResult::err("the tool input is not valid JSON")
        } else {
            let mut cancel = self.cancel.clone();
            let r = tokio::select! {
                r = self.tools.execute(call, &progress.session) => r,
                i = interrupted(&mut cancel, progress.deadline) => {
                    interrupt = Some(i);
                    ToolResult::err(match i {
                        Interrupt::Cancelled => "cancelled: the run was stopped; the call's commands were killed",
                        Interrupt::TimedOut => "stopped: the run's wall-clock limit was reached; the call's commands were killed",
                    })
                }
            };
            if interrupt.is_none() {
                if let Some(hooks) = &self.config.hooks_json {
                    let failures = self
                        .tools
                        .post_hooks(hooks, call, &progress.session, &r)
                        .await;
                    hook_results.push(json!({
                        "phase": "post",
                        "failures": failures.iter().map(|f| self.scrub(f)).collect::<Vec<_>>(),
                    }));
                }
            }
            r
        };
        let result = ToolResult {
            output: self.scrub(&result.output),
            error: result.error.as_deref().map(|e| self.scrub(e)),
            is_error: result.is_error,
        };
        let duration_ms = millis(started.elapsed());
        tracing::info!(
            is_error = result.is_error,
            duration_ms,
            "tool call finished"
        );
        self.store.record_tool_call(
            step,
            &hanzo_store::ToolCall {
                tool_use_id: Some(call.id.clone()),
                name: call.name.clone(),
                input,
                permission: gate.mode,
                rule: gate.rule,
                allowed,
                decision_reason: reason,
                hook_results: Value::Array(hook_results),
                output: (!result.output.is_empty() || !result.is_error)
                    .then(|| result.output.clone()),
                error: result.error.clone(),
                duration_ms,
            },
        )?;
        self.events.emit(&RunEvent::ToolResult {
            id: call.id.clone(),
            is_error: result.is_error,
            preview: super::approval::cut(&model_text(&result), 2000),
            duration_ms,
        });
        Ok((result, interrupt))
    }

    /// The agent's tool list, the policy and, when the policy asks, the prompter.
    async fn gate(
        &mut self,
        agent: &AgentDef,
        call: &ToolInvocation,
        input: &Value,
        progress: &Progress,
    ) -> anyhow::Result<Gate> {
        if !agent.tools.contains(&call.name) {
            let reason = if call.name.starts_with("mcp__") {
                format!(
                    "{} is an MCP tool, and MCP tools are not available to runs in this build",
                    call.name
                )
            } else {
                format!(
                    "the {} agent has no tool named {:?} (its tools: {})",
                    agent.name,
                    call.name,
                    if agent.tools.is_empty() {
                        "none".to_string()
                    } else {
                        agent.tools.join(", ")
                    }
                )
            };
            return Ok(Gate {
                mode: PermissionMode::Deny,
                rule: None,
                allowed: false,
                decided_by: "agent".to_string(),
                reason,
            });
        }
        let decision = self.policy.evaluate(&call.name, input);
        self.store.record_audit(
            Some(progress.run),
            &AuditRecord::now(&progress.session, &call.name, input, &decision),
        )?;
        let by_rule = if decision.rule_matched.is_some() {
            "rule"
        } else {
            "default"
        };
        Ok(match decision.mode {
            PermissionMode::Allow => Gate {
                mode: decision.mode,
                rule: decision.rule_matched,
                allowed: true,
                decided_by: by_rule.to_string(),
                reason: decision.reason,
            },
            PermissionMode::Deny => Gate {
                mode: decision.mode,
                rule: decision.rule_matched,
                allowed: false,
                decided_by: by_rule.to_string(),
                reason: decision.reason,
            },
            PermissionMode::Prompt => {
                let answer = self
                    .prompter
                    .request_permission(&call.name, input, &decision.reason)
                    .await;
                let decided_by = format!("approval:{}", self.prompter.describe());
                let (allowed, reason) = match answer {
                    PermissionDecision::Allow => (
                        true,
                        format!("{} — approved ({decided_by})", decision.reason),
                    ),
                    PermissionDecision::Deny(why) => (false, why),
                    PermissionDecision::Escalate => (
                        false,
                        "the request was escalated and nobody is here to decide".to_string(),
                    ),
                };
                Gate {
                    mode: decision.mode,
                    rule: decision.rule_matched,
                    allowed,
                    decided_by,
                    reason,
                }
            }
        })
    }

    /// Record a call that was never attempted (the run stopped first).
    fn record_unrun(
        &mut self,
        step: StepId,
        call: &ToolInvocation,
        result: &ToolResult,
    ) -> anyhow::Result<()> {
        let input: Value = serde_json::from_str(&call.input_json).unwrap_or(Value::Null);
        self.store.record_tool_call(
            step,
            &hanzo_store::ToolCall {
                tool_use_id: Some(call.id.clone()),
                name: call.name.clone(),
                input: self.scrub_value(input),
                permission: PermissionMode::Deny,
                rule: None,
                allowed: false,
                decision_reason: "the run stopped before this call".to_string(),
                hook_results: Value::Array(Vec::new()),
                output: None,
                error: result.error.clone(),
                duration_ms: 0,
            },
        )?;
        Ok(())
    }

    /// Compact the conversation when it has grown past 90 % of the context window: the middle
    /// is summarized by the model (no tools), or cut with a notice when that fails.
    async fn maybe_compact(
        &mut self,
        agent: &AgentDef,
        conv: &mut Conversation,
        progress: &mut Progress,
    ) -> anyhow::Result<Option<Stop>> {
        let compactor = SessionCompactor {
            max_tokens: self.config.max_context_tokens,
            reserve_recent: self.config.reserve_recent,
        };
        let mut cmsgs = Vec::with_capacity(conv.messages.len() + 1);
        cmsgs.push(hanzo_compaction::Message::new(
            CRole::System,
            agent.system_prompt.clone(),
            estimate_tokens(&agent.system_prompt),
        ));
        for (m, t) in conv.messages.iter().zip(&conv.tokens) {
            cmsgs.push(to_compaction(m, *t));
        }
        let before = hanzo_compaction::total_tokens(&cmsgs);
        let Some(plan) = compactor.plan(&cmsgs) else {
            return Ok(None);
        };
        let dropped = plan.dropped_count();
        let transcript = plan
            .to_summarize()
            .iter()
            .map(|m| format!("[{:?}] {}", m.role, m.content))
            .collect::<Vec<_>>()
            .join("\n\n");
        let summary = {
            let mut text = String::new();
            let ask = vec![Message::user_text(format!(
                "Summarize this earlier part of an agent's session for the agent itself, keeping \
                 decisions, file paths, commands run and their results, and open questions. Be \
                 brief.\n\n{transcript}"
            ))];
            let request = TurnRequest {
                system: "You compress conversation history. Reply with the summary only.",
                messages: &ask,
                tools: &[],
            };
            let mut on_event = |ev: &StreamEvent| {
                if let StreamEvent::ContentDelta { text: t } = ev {
                    text.push_str(t);
                }
            };
            let mut cancel = self.cancel.clone();
            let r = tokio::select! {
                r = self.api.send_message(request, &mut on_event) => r,
                i = interrupted(&mut cancel, progress.deadline) => {
                    return Ok(Some(i.into_stop(self.config.limits.timeout)));
                }
            };
            match r {
                Ok(end) if !text.trim().is_empty() => {
                    progress.usage.input += end.usage.input_tokens;
                    progress.usage.output += end.usage.output_tokens;
                    Some(Summary {
                        token_count: end.usage.output_tokens.max(estimate_tokens(&text)),
                        text: self.scrub(&text),
                    })
                }
                Ok(end) => {
                    progress.usage.input += end.usage.input_tokens;
                    progress.usage.output += end.usage.output_tokens;
                    None
                }
                Err(e) => {
                    tracing::warn!("compaction summary failed, truncating instead: {e}");
                    None
                }
            }
        };
        let summarized = summary.is_some();
        let result = plan.apply(summary);
        let summary_text = result.messages[1].content.clone();
        // The model sees the summary as user-side context: a conversation must start with a
        // user turn, and the kept part may start with the assistant's.
        let note = format!("[Summary of the earlier conversation]\n{summary_text}");
        let kept_msgs = conv.messages.split_off(dropped);
        let kept_tokens = conv.tokens.split_off(dropped);
        conv.messages.clear();
        conv.tokens.clear();
        let mut kept = kept_msgs.into_iter().zip(kept_tokens).peekable();
        match kept.peek_mut() {
            Some((first, tokens)) if first.role == MessageRole::User => {
                first
                    .content
                    .insert(0, ContentBlock::Text { text: note.clone() });
                *tokens += estimate_tokens(&note);
            }
            _ => conv.push(Message::user_text(note)),
        }
        for (m, t) in kept {
            conv.messages.push(m);
            conv.tokens.push(t);
        }
        let after = estimate_tokens(&agent.system_prompt) + conv.tokens.iter().sum::<u64>();
        self.store.record_event(
            progress.run,
            None,
            "compacted",
            &json!({
                "dropped_messages": dropped,
                "summarized": summarized,
                "tokens_before": before,
                "tokens_after": after,
            }),
        )?;
        self.events.emit(&RunEvent::Compacted {
            dropped_messages: dropped,
            summarized,
            tokens_before: before,
            tokens_after: after,
        });
        Ok(None)
    }

    fn scrub(&self, text: &str) -> String {
        scrub(&self.config.known_secrets, text)
    }

    fn scrub_value(&self, v: Value) -> Value {
        scrub_value(&self.config.known_secrets, v)
    }
}

enum StepOutcome {
    Continue,
    Finished(String),
    Stopped(Stop),
}

struct Gate {
    mode: PermissionMode,
    rule: Option<hanzo_policy::permission::RuleRef>,
    allowed: bool,
    decided_by: String,
    reason: String,
}

/// Resolves when the run is cancelled or its deadline passes; never, otherwise. A dropped
/// cancel sender means nobody can cancel any more, not that the run is cancelled.
async fn interrupted(cancel: &mut watch::Receiver<bool>, deadline: Option<Instant>) -> Interrupt {
    let cancelled = async {
        if cancel.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let timed_out = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d.into()).await,
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = cancelled => Interrupt::Cancelled,
        () = timed_out => Interrupt::TimedOut,
    }
}

/// The text the model is given for a result.
pub fn model_text(r: &ToolResult) -> String {
    match (&r.error, r.output.is_empty()) {
        (Some(e), true) => e.clone(),
        (Some(e), false) => format!("{e}\n{}", r.output),
        (None, _) => r.output.clone(),
    }
}

fn result_block(call: &ToolInvocation, r: &ToolResult) -> ContentBlock {
    ContentBlock::ToolResult {
        tool_use_id: call.id.clone(),
        content: model_text(r),
        is_error: r.is_error,
    }
}

/// The first line of the final text, as the run's outcome.
fn summarize_outcome(text: &str) -> String {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if first.is_empty() {
        "completed".to_string()
    } else {
        super::approval::cut(first.trim(), 200)
    }
}

fn message_tokens(m: &Message) -> u64 {
    m.content
        .iter()
        .map(|b| match b {
            ContentBlock::Text { text } => estimate_tokens(text),
            ContentBlock::ToolUse {
                name, input_json, ..
            } => estimate_tokens(name) + estimate_tokens(input_json),
            ContentBlock::ToolResult { content, .. } => estimate_tokens(content),
        })
        .sum::<u64>()
        .max(1)
}

fn to_compaction(m: &Message, tokens: u64) -> hanzo_compaction::Message {
    let role = match m.role {
        MessageRole::User => CRole::User,
        MessageRole::Assistant => CRole::Assistant,
    };
    let mut out = hanzo_compaction::Message::new(role, String::new(), tokens);
    let mut text = Vec::new();
    for b in &m.content {
        match b {
            ContentBlock::Text { text: t } => text.push(t.clone()),
            ContentBlock::ToolUse {
                id,
                name,
                input_json,
            } => {
                out.tool_uses.push(id.clone());
                text.push(format!("(called {name} with {input_json})"));
            }
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                ..
            } => {
                out.tool_results.push(tool_use_id.clone());
                text.push(content.clone());
            }
        }
    }
    out.content = text.join("\n");
    out
}

/// `text` with every known secret replaced by `[redacted]`.
pub fn scrub(secrets: &[String], text: &str) -> String {
    let mut out = text.to_string();
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "[redacted]");
        }
    }
    out
}

/// [`scrub`] over every string (and key) of a JSON value.
pub fn scrub_value(secrets: &[String], v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(scrub(secrets, &s)),
        Value::Array(a) => Value::Array(a.into_iter().map(|x| scrub_value(secrets, x)).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, x)| (scrub(secrets, &k), scrub_value(secrets, x)))
                .collect(),
        ),
        other => other,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
