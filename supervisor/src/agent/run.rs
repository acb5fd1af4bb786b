//! The loop itself. One [`AgentLoop::run`] is one run: stages (one, or `auto`'s three), each a
//! sequence of steps; a step is one model turn and the tool calls it asked for (`call.rs`), with
//! compaction between steps (`compact.rs`).
//!
//! Invariants:
//! - Every tool call goes through the policy, and is on record as started — input, decision and
//!   pre-hook results, with the policy's audit record — before it executes; what it produced is
//!   recorded when it finishes, before the next call. A failed store write ends the run there.
//! - A tool's failure, a denial, a cap, a dead or silent tools worker is a result the model sees;
//!   only the model failing, a limit, cancellation or the store failing ends a run early.
//! - Known secret values are redacted from everything that leaves the loop — the store, the
//!   events, the logs — and from nothing that goes back to the model: what the model sees is what
//!   the tools produced, so a redaction can never tell it which of its guesses was right
//!   (SECURITY.md, "scrubbing is not an oracle").
//! - The step in progress is the most a crash can lose: steps, calls and events are written as
//!   they happen (the store commits each write).

use super::events::{EventSink, RunEvent};
use super::record::RecordBudget;
use super::traits::{ApiClient, PermissionPrompter, ToolExecutor, ToolInvocation, TurnRequest};
use hanzo_ipc::roles::model::{
    ContentBlock, Message, MessageRole, StopReason, StreamEvent, ToolDef,
};
use hanzo_ipc::roles::tools::ToolResult;
use hanzo_policy::hooks::HookConfig;
use hanzo_policy::permission::ScopedPolicy;
use hanzo_store::{
    AgentDef, NewRun, RunId, RunStatus, RunStore, SecretValues, SessionId, StepEnd, StepId,
    TokenUsage,
};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::Instrument;

/// When a run must stop even though the model has not, and how much one run may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Model turns over the whole run (all stages).
    pub max_steps: u32,
    /// Input plus output tokens over the whole run.
    pub max_total_tokens: Option<u64>,
    /// Wall-clock limit for the whole run.
    pub timeout: Option<Duration>,
    /// Tool calls run from one model turn; the rest of that turn's calls are refused.
    pub max_calls_per_turn: u32,
    /// Tool calls run over the whole run; later ones are refused.
    pub max_calls: u32,
    /// Bytes of tool inputs and outputs written to the store over the whole run.
    pub max_record_bytes: u64,
}

/// The default of `run --max-tool-calls-per-turn`: tool calls run from one model turn.
pub const DEFAULT_MAX_CALLS_PER_TURN: u32 = 64;
/// The default of `run --max-tool-calls`: tool calls run over the whole run.
pub const DEFAULT_MAX_CALLS: u32 = 1000;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_steps: 50,
            max_total_tokens: None,
            timeout: None,
            max_calls_per_turn: DEFAULT_MAX_CALLS_PER_TURN,
            max_calls: DEFAULT_MAX_CALLS,
            max_record_bytes: super::record::DEFAULT_RECORD_BYTES,
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
    /// How much one run may do before it is stopped.
    pub limits: Limits,
    /// The configured hooks, both events, in configuration order (empty: no hook round trips).
    pub hooks: Vec<HookConfig>,
    /// Values that must never reach the record, the events or the logs (replaced by
    /// `[redacted]` there).
    pub secrets: SecretValues,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            max_context_tokens: 200_000,
            reserve_recent: 3,
            limits: Limits::default(),
            hooks: Vec::new(),
            secrets: SecretValues::default(),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The task as the user gave it: the first user message of every stage.
    pub task: String,
    /// The name recorded for the run (`auto` for the pipeline).
    pub agent_name: String,
    /// One agent, or the stages of a pipeline in order.
    pub stages: Vec<AgentDef>,
    /// The model's name, for the record and the events.
    pub model: String,
    /// The tier the tools worker attested (`A` or `B`), for the record.
    pub isolation: hanzo_policy::isolation::Tier,
    /// The workspace's path, for the record.
    pub workspace: String,
    /// Whether the model is a recording (`--replay`, `--demo`), for the record and the events.
    pub replay: bool,
    /// Why the workspace is dangerous, when the user ran anyway (`--allow-dangerous-workspace`);
    /// empty for a safe one. Recorded in the run's configuration.
    pub dangerous_workspace: Vec<String>,
}

/// What makes a run the next turn of a chat session (`hanzo-dev chat`): the session it is
/// recorded under and the conversation so far. The default is a run on its own.
#[derive(Debug, Clone, Default)]
pub struct Continuation {
    /// The chat session the run is recorded under (`None`: a run on its own).
    pub session: Option<SessionId>,
    /// Earlier turns as messages, oldest first (`agent::session::prior_messages`); every stage's
    /// conversation starts with them, then the task.
    pub prior: Vec<Message>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// The run's id in the store.
    pub run_id: RunId,
    /// How it ended: succeeded, failed (also when every tool call was refused) or cancelled.
    pub status: RunStatus,
    /// One line saying how it ended: the first line of the final text, or why it failed.
    pub outcome: String,
    /// The last stage's final text.
    pub final_text: String,
    /// Model turns taken, over all stages.
    pub steps: u32,
    /// Tokens used, over all stages.
    pub usage: TokenUsage,
    /// Tool calls the model asked for that were answered (run, or refused).
    pub tool_calls: u32,
    /// Of those, the ones refused (a rule, the default, the approval mode, a hook, the agent's
    /// tool list, a cap).
    pub denied_calls: u32,
}

/// Why a stage stopped before the model finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Stop {
    Failed(String),
    Cancelled,
}

/// What interrupted an await: Ctrl-C (or the caller's cancel) or the wall-clock limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Interrupt {
    Cancelled,
    TimedOut,
}

impl Interrupt {
    pub(super) fn into_stop(self, limit: Option<Duration>) -> Stop {
        match self {
            Interrupt::Cancelled => Stop::Cancelled,
            Interrupt::TimedOut => Stop::Failed(format!(
                "wall-clock limit reached ({} s)",
                limit.map_or(0, |d| d.as_secs())
            )),
        }
    }
}

/// The agent loop (HIP-0301 §2): model turns, each tool call through the gate (agent, policy,
/// approval, hooks) to its executor, and everything on record. Build one per run or chat turn.
pub struct AgentLoop<'a, A, T, P> {
    /// The model.
    pub api: &'a A,
    /// Where tool calls and hooks run.
    pub tools: &'a T,
    /// Who answers when the policy says `prompt`.
    pub prompter: &'a P,
    /// The permission rules, by scope.
    pub policy: &'a ScopedPolicy,
    /// Where the run, its steps, calls and audit records are written.
    pub store: &'a mut RunStore,
    /// Where the run's events go as they happen (the terminal view, `--json`, a chat screen).
    pub events: &'a dyn EventSink,
    /// How the loop behaves.
    pub config: LoopConfig,
    /// Becomes `true` to cancel the run (Ctrl-C).
    pub cancel: watch::Receiver<bool>,
}

/// Per-run counters.
pub(super) struct Progress {
    pub(super) run: RunId,
    pub(super) session: String,
    pub(super) steps: u32,
    pub(super) usage: TokenUsage,
    pub(super) deadline: Option<Instant>,
    /// Tool calls answered so far, and how many of them were refused.
    pub(super) calls: u32,
    pub(super) denied: u32,
    pub(super) budget: RecordBudget,
    /// Earlier turns of the session, put before the task in every stage.
    pub(super) prior: Vec<Message>,
}

/// One stage's conversation: messages and the estimated size of each.
pub(super) struct Conversation {
    pub(super) messages: Vec<Message>,
    pub(super) tokens: Vec<u64>,
}

impl Conversation {
    pub(super) fn push(&mut self, m: Message) {
        self.tokens.push(super::compact::message_tokens(&m));
        self.messages.push(m);
    }
}

/// A model turn that completed.
struct Turn {
    text: String,
    uses: Vec<ToolInvocation>,
    usage: TokenUsage,
    stop_reason: StopReason,
}

pub(super) enum StepOutcome {
    Continue,
    Finished(String),
    Stopped(Stop),
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
        self.run_continuing(spec, &Continuation::default()).await
    }

    /// As [`AgentLoop::run`], as the next turn of a session: recorded under it, with the
    /// conversation so far before the task.
    pub async fn run_continuing(
        &mut self,
        spec: &RunSpec,
        continuation: &Continuation,
    ) -> anyhow::Result<RunReport> {
        let new = NewRun {
            agent: Some(spec.agent_name.clone()),
            input: self.scrub(&spec.task),
            model: spec.model.clone(),
            isolation: spec.isolation,
        };
        let run = match continuation.session {
            Some(session) => self.store.begin_session_run(session, &new)?,
            None => self.store.begin_run(&new)?,
        };
        // `status` and the token counts are recorded when the run ends (trace export reads them).
        let span = tracing::info_span!(
            "agent.run",
            run_id = run.0,
            agent = %spec.agent_name,
            model = %spec.model,
            status = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
        );
        let started = Instant::now();
        self.events.emit(&RunEvent::RunStarted {
            run_id: run.0,
            agent: spec.agent_name.clone(),
            model: spec.model.clone(),
            isolation: spec.isolation,
            approval: self.prompter.mode().as_str().to_string(),
            workspace: spec.workspace.clone(),
            replay: spec.replay,
            dangerous_workspace: (!spec.dangerous_workspace.is_empty())
                .then(|| spec.dangerous_workspace.clone()),
        });
        self.record_config(run, spec)?;
        let mut progress = Progress {
            run,
            session: format!("run-{}", run.0),
            steps: 0,
            usage: TokenUsage::default(),
            deadline: self.config.limits.timeout.map(|d| Instant::now() + d),
            calls: 0,
            denied: 0,
            budget: RecordBudget::new(self.config.limits.max_record_bytes),
            prior: continuation.prior.clone(),
        };
        let result = self
            .run_stages(spec, &mut progress)
            .instrument(span.clone())
            .await;
        let (status, outcome, final_text) = match result {
            Ok(Ok(text)) => conclude(&text, &progress),
            Ok(Err(Stop::Cancelled)) => (
                RunStatus::Cancelled,
                "cancelled by the user".to_string(),
                String::new(),
            ),
            Ok(Err(Stop::Failed(why))) => (RunStatus::Failed, why, String::new()),
            Err(store_error) => {
                let why = self.scrub(&format!("the run store failed: {store_error:#}"));
                tracing::error!(run_id = run.0, "{why}");
                let _ = self
                    .store
                    .finish_run(run, RunStatus::Failed, Some(&why), progress.usage);
                return Err(store_error);
            }
        };
        let outcome = self.scrub(&outcome);
        span.record("status", status.as_str());
        span.record("gen_ai.usage.input_tokens", progress.usage.input);
        span.record("gen_ai.usage.output_tokens", progress.usage.output);
        drop(span);
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
            tool_calls: progress.calls,
            denied_calls: progress.denied,
        });
        Ok(RunReport {
            run_id: run,
            status,
            outcome,
            final_text,
            steps: progress.steps,
            usage: progress.usage,
            tool_calls: progress.calls,
            denied_calls: progress.denied,
        })
    }

    fn record_config(&mut self, run: RunId, spec: &RunSpec) -> anyhow::Result<()> {
        let limits = self.config.limits;
        let mut config = json!({
            "approval": self.prompter.mode().as_str(),
            "max_steps": limits.max_steps,
            "max_total_tokens": limits.max_total_tokens,
            "timeout_s": limits.timeout.map(|d| d.as_secs()),
            "max_context_tokens": self.config.max_context_tokens,
            "max_tool_calls_per_turn": limits.max_calls_per_turn,
            "max_tool_calls": limits.max_calls,
            "max_record_bytes": limits.max_record_bytes,
            "workspace": spec.workspace,
            "replay": spec.replay,
            "trusted_workspace": self.policy.is_trusted(),
        });
        if !spec.dangerous_workspace.is_empty() {
            config["dangerous_workspace"] = json!(spec.dangerous_workspace);
        }
        let config = self.config.secrets.scrub_json(config);
        self.store.record_event(run, None, "run_config", &config)?;
        Ok(())
    }

    async fn run_stages(
        &mut self,
        spec: &RunSpec,
        progress: &mut Progress,
    ) -> anyhow::Result<Result<String, Stop>> {
        // The task is the user's; redacting it for the model reveals nothing the model chose.
        let task = self.scrub(&spec.task);
        let mut input = task.clone();
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
                        "{task}\n\n--- Output of the previous stage ({}) ---\n{last}",
                        spec.stages[i - 1].name,
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
        let mut conv = Conversation {
            messages: Vec::new(),
            tokens: Vec::new(),
        };
        for m in &progress.prior {
            conv.push(m.clone());
        }
        conv.push(Message::user_text(input));
        loop {
            if let Some(stop) = self.limit_reached(progress) {
                return Ok(Err(stop));
            }
            if let Some(stop) = self.maybe_compact(agent, &mut conv, progress).await? {
                return Ok(Err(stop));
            }
            // Asked again at every step: an MCP server may have changed its tools
            // (`notifications/tools/list_changed`) since the last one.
            let tools = match self.offered_tools(agent).await {
                Ok(t) => t,
                Err(why) => return Ok(Err(Stop::Failed(why))),
            };
            progress.steps += 1;
            let step_no = progress.steps;
            let span = tracing::info_span!(
                "agent.step",
                run_id = progress.run.0,
                step = step_no,
                gen_ai.usage.input_tokens = tracing::field::Empty,
                gen_ai.usage.output_tokens = tracing::field::Empty,
            );
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

    /// The tools of the agent's list the tools worker offers.
    async fn offered_tools(&self, agent: &AgentDef) -> Result<Vec<ToolDef>, String> {
        if agent.tools.is_empty() {
            return Ok(Vec::new());
        }
        // The executor's error names what failed (the tools worker, or the MCP listing).
        let all = self
            .tools
            .definitions()
            .await
            .map_err(|e| format!("cannot get the tool definitions: {e}"))?;
        Ok(all
            .into_iter()
            .filter(|d| super::call::agent_may_call(agent, &d.name))
            .collect())
    }

    /// A limit that ends the run before the next step.
    fn limit_reached(&self, progress: &Progress) -> Option<Stop> {
        let limits = &self.config.limits;
        if progress.steps >= limits.max_steps {
            return Some(Stop::Failed(format!(
                "step limit reached ({} steps; raise it with --max-steps)",
                limits.max_steps
            )));
        }
        if let Some(budget) = limits.max_total_tokens {
            let used = progress.usage.input + progress.usage.output;
            if used >= budget {
                return Some(Stop::Failed(format!(
                    "token budget exhausted ({used} of {budget} tokens used)"
                )));
            }
        }
        None
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
        let turn = match self.model_turn(agent, tools, conv, progress, step).await? {
            Ok(turn) => turn,
            Err(stop) => return Ok(StepOutcome::Stopped(stop)),
        };
        progress.usage.input += turn.usage.input;
        progress.usage.output += turn.usage.output;
        let span = tracing::Span::current();
        span.record("gen_ai.usage.input_tokens", turn.usage.input);
        span.record("gen_ai.usage.output_tokens", turn.usage.output);
        push_assistant(conv, &turn);
        if turn.uses.is_empty() {
            self.end_step(step, step_no, &turn.text, turn.usage)?;
            if turn.stop_reason == StopReason::MaxTokens {
                self.store.record_event(
                    progress.run,
                    Some(step),
                    "max_tokens",
                    &json!({"note": "the model's answer was cut at the output token limit"}),
                )?;
            }
            return Ok(StepOutcome::Finished(turn.text));
        }
        let (results, stopped) = self
            .answer_calls(agent, step, step_no, &turn.uses, progress)
            .await?;
        conv.push(Message {
            role: MessageRole::User,
            content: results,
        });
        self.end_step(step, step_no, &turn.text, turn.usage)?;
        Ok(match stopped {
            Some(stop) => StepOutcome::Stopped(stop),
            None => StepOutcome::Continue,
        })
    }

    /// One model turn, raced against cancellation and the wall-clock limit. `Err(stop)` when the
    /// turn did not complete (the step is closed and the failure recorded).
    async fn model_turn(
        &mut self,
        agent: &AgentDef,
        tools: &[ToolDef],
        conv: &Conversation,
        progress: &Progress,
        step: StepId,
    ) -> anyhow::Result<Result<Turn, Stop>> {
        let mut text = String::new();
        let mut uses: Vec<ToolInvocation> = Vec::new();
        let events = self.events;
        let secrets = &self.config.secrets;
        let turn = {
            let mut on_event = |ev: &StreamEvent| match ev {
                StreamEvent::ContentDelta { text: t } => {
                    text.push_str(t);
                    events.emit(&RunEvent::Text {
                        text: secrets.scrub(t).into_owned(),
                    });
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
            // Biased, the interrupt first: a run cancelled already (say while a permission
            // question was open) must not send another model request. An unbiased select polls
            // its branches in random order, and polling the request first sends it.
            tokio::select! {
                biased;
                i = interrupted(&mut cancel, progress.deadline) => Err(i),
                r = self.api.send_message(request, &mut on_event) => Ok(r),
            }
        };
        match turn {
            Err(interrupt) => {
                self.close_step(step, &text)?;
                Ok(Err(interrupt.into_stop(self.config.limits.timeout)))
            }
            Ok(Err(e)) => {
                self.close_step(step, &text)?;
                let message = self.scrub(&e.message);
                self.store.record_event(
                    progress.run,
                    Some(step),
                    "model_error",
                    &json!({"kind": e.kind.map(|k| format!("{k:?}")), "message": message}),
                )?;
                Ok(Err(Stop::Failed(format!(
                    "the model request failed: {message}"
                ))))
            }
            Ok(Ok(end)) => Ok(Ok(Turn {
                text,
                uses,
                usage: TokenUsage {
                    input: end.usage.input_tokens,
                    output: end.usage.output_tokens,
                },
                stop_reason: end.stop_reason,
            })),
        }
    }

    /// Close a step whose turn did not complete, keeping the text that had streamed.
    fn close_step(&mut self, step: StepId, text: &str) -> anyhow::Result<()> {
        let text = self.scrub(text);
        self.store.finish_step(
            step,
            &StepEnd {
                text: (!text.is_empty()).then_some(text),
                usage: TokenUsage::default(),
            },
        )?;
        Ok(())
    }

    fn end_step(
        &mut self,
        step: StepId,
        step_no: u32,
        text: &str,
        usage: TokenUsage,
    ) -> anyhow::Result<()> {
        let text = self.scrub(text);
        self.store.finish_step(
            step,
            &StepEnd {
                text: (!text.is_empty()).then_some(text),
                usage,
            },
        )?;
        self.events.emit(&RunEvent::StepFinished {
            step: step_no,
            input_tokens: usage.input,
            output_tokens: usage.output,
        });
        Ok(())
    }

    pub(super) fn scrub(&self, text: &str) -> String {
        self.config.secrets.scrub(text).into_owned()
    }
}

/// The assistant's turn as the model will see it next time: its own text and tool calls,
/// exactly as it produced them.
fn push_assistant(conv: &mut Conversation, turn: &Turn) {
    let mut content = Vec::new();
    if !turn.text.is_empty() {
        content.push(ContentBlock::Text {
            text: turn.text.clone(),
        });
    }
    for u in &turn.uses {
        content.push(ContentBlock::ToolUse {
            id: u.id.clone(),
            name: u.name.clone(),
            input_json: u.input_json.clone(),
        });
    }
    if !content.is_empty() {
        conv.push(Message {
            role: MessageRole::Assistant,
            content,
        });
    }
}

/// How a run whose model finished ended: succeeded, unless every tool call it made was refused —
/// then the task cannot have been done, whatever the model's last words claim.
fn conclude(text: &str, progress: &Progress) -> (RunStatus, String, String) {
    let words = summarize_outcome(text);
    if progress.calls > 0 && progress.denied == progress.calls {
        let n = progress.calls;
        return (
            RunStatus::Failed,
            format!("every tool call was denied ({n} of {n}); the model's last words: {words}"),
            text.to_string(),
        );
    }
    (RunStatus::Succeeded, words, text.to_string())
}

/// Resolves when the run is cancelled or its deadline passes; never, otherwise. A dropped
/// cancel sender means nobody can cancel any more, not that the run is cancelled.
pub(super) async fn interrupted(
    cancel: &mut watch::Receiver<bool>,
    deadline: Option<Instant>,
) -> Interrupt {
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

/// The first line of the final text, as the run's outcome.
fn summarize_outcome(text: &str) -> String {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if first.is_empty() {
        "completed".to_string()
    } else {
        super::approval::cut(first.trim(), 200)
    }
}

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
