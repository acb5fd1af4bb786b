//! One turn's tool calls: the caps, then for each call the gate (the agent's tool list, the
//! policy, the approval mode, the pre-hooks), the record as *started*, the execution, the
//! post-hooks and the record as *finished* — in that order, so nothing runs unrecorded.

use super::events::RunEvent;
use super::run::{interrupted, millis, model_text, AgentLoop, Interrupt, Progress, Stop};
use super::traits::{
    ApiClient, PermissionDecision, PermissionPrompter, ToolExecutor, ToolInvocation,
};
use hanzo_ipc::roles::model::ContentBlock;
use hanzo_ipc::roles::tools::ToolResult;
use hanzo_policy::permission::{PermissionMode, RuleRef};
use hanzo_policy::AuditRecord;
use hanzo_store::{CallEnd, DecidedBy, HookResult, StepId, ToolCall};
use serde_json::Value;
use std::time::Instant;
use tracing::Instrument;

/// What the gate decided about one call.
struct Gate {
    mode: PermissionMode,
    rule: Option<RuleRef>,
    allowed: bool,
    decided_by: DecidedBy,
    /// Why, as the model is told (not redacted: the model already knows what it asked for).
    reason: String,
    /// The policy's audit record, written with the call (`None` when the policy was not asked).
    audit: Option<AuditRecord>,
}

fn result_block(call: &ToolInvocation, r: &ToolResult) -> ContentBlock {
    ContentBlock::ToolResult {
        tool_use_id: call.id.clone(),
        content: model_text(r),
        is_error: r.is_error,
    }
}

impl<A, T, P> AgentLoop<'_, A, T, P>
where
    A: ApiClient,
    T: ToolExecutor,
    P: PermissionPrompter,
{
    /// Answer every tool call of one turn, in order; returns the results for the model and why
    /// the run stops, if it does.
    pub(super) async fn answer_calls(
        &mut self,
        agent: &hanzo_store::AgentDef,
        step: StepId,
        step_no: u32,
        uses: &[ToolInvocation],
        progress: &mut Progress,
    ) -> anyhow::Result<(Vec<ContentBlock>, Option<Stop>)> {
        let mut results = Vec::with_capacity(uses.len());
        let mut stopped: Option<Stop> = None;
        let mut refused = Vec::new();
        for (i, call) in uses.iter().enumerate() {
            if stopped.is_some() {
                // The run is stopping: the remaining calls are answered without running, so the
                // conversation stays well-formed and the record complete.
                let result = ToolResult::err("not run: the run was stopped before this call");
                self.record_unrun(step, call, &result, progress)?;
                results.push(result_block(call, &result));
                continue;
            }
            if let Some(why) = self.cap(i, uses.len(), progress) {
                let (result, record) = self.refuse_by_cap(call, &why, progress);
                refused.push(record);
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
            } else if progress.budget.exhausted() {
                stopped = Some(Stop::Failed(progress.budget.stop_reason()));
            }
        }
        // Refused calls ran nothing: one write for all of them (a turn may ask for thousands).
        if !refused.is_empty() {
            self.store.record_refused_calls(step, &refused)?;
        }
        Ok((results, stopped))
    }

    /// Why call `index` of a turn of `count` calls may not run, if a cap says so.
    fn cap(&self, index: usize, count: usize, progress: &Progress) -> Option<String> {
        let limits = &self.config.limits;
        if index >= usize::try_from(limits.max_calls_per_turn).unwrap_or(usize::MAX) {
            return Some(format!(
                "not run: this turn asked for {count} tool calls and at most {} run per turn \
                 (--max-tool-calls-per-turn); ask for fewer at a time",
                limits.max_calls_per_turn
            ));
        }
        if progress.calls >= limits.max_calls {
            return Some(format!(
                "not run: this run has made {} tool calls, its limit (--max-tool-calls)",
                limits.max_calls
            ));
        }
        None
    }

    /// A call refused by a cap: its events, the result the model sees and its record.
    fn refuse_by_cap(
        &mut self,
        call: &ToolInvocation,
        why: &str,
        progress: &mut Progress,
    ) -> (ToolResult, ToolCall) {
        let input: Value = serde_json::from_str(&call.input_json).unwrap_or(Value::Null);
        let shown = self.config.secrets.scrub_json(input);
        self.events.emit(&RunEvent::ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            input: shown.clone(),
        });
        self.events.emit(&RunEvent::ToolDecision {
            id: call.id.clone(),
            allowed: false,
            decided_by: DecidedBy::Limit,
            reason: why.to_string(),
        });
        let result = ToolResult::err(why.to_string());
        self.events.emit(&RunEvent::ToolResult {
            id: call.id.clone(),
            is_error: true,
            preview: why.to_string(),
            duration_ms: 0,
        });
        progress.calls += 1;
        progress.denied += 1;
        let record = ToolCall {
            tool_use_id: Some(call.id.clone()),
            name: call.name.clone(),
            input: progress.budget.input(shown),
            permission: PermissionMode::Deny,
            rule: None,
            decided_by: DecidedBy::Limit,
            allowed: false,
            decision_reason: why.to_string(),
            hook_results: Vec::new(),
            output: None,
            error: Some(why.to_string()),
            duration_ms: 0,
        };
        (result, record)
    }

    /// One tool call: gate → record as started → execute → post-hooks → record as finished.
    async fn tool(
        &mut self,
        agent: &hanzo_store::AgentDef,
        step: StepId,
        call: &ToolInvocation,
        progress: &mut Progress,
    ) -> anyhow::Result<(ToolResult, Option<Interrupt>)> {
        let started = Instant::now();
        let input: Value = serde_json::from_str(&call.input_json).unwrap_or(Value::Null);
        let shown = self.config.secrets.scrub_json(input.clone());
        self.events.emit(&RunEvent::ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            input: shown.clone(),
        });
        let mut gate = self.gate(agent, call, &input, &shown, progress).await;
        let mut hooks = Vec::new();
        if gate.allowed {
            self.pre_hooks(call, progress, &mut gate, &mut hooks).await;
        }
        tracing::info!(
            tool = %call.name,
            allowed = gate.allowed,
            decided_by = %gate.decided_by,
            "tool call decided"
        );
        let reason = self.scrub(&gate.reason);
        self.events.emit(&RunEvent::ToolDecision {
            id: call.id.clone(),
            allowed: gate.allowed,
            decided_by: gate.decided_by,
            reason: reason.clone(),
        });
        progress.calls += 1;
        let mut record = ToolCall {
            tool_use_id: Some(call.id.clone()),
            name: call.name.clone(),
            input: progress.budget.input(shown),
            permission: gate.mode,
            rule: gate.rule.clone(),
            decided_by: gate.decided_by,
            allowed: gate.allowed,
            decision_reason: reason,
            hook_results: hooks,
            output: None,
            error: None,
            duration_ms: 0,
        };
        let refusal = if !gate.allowed {
            Some(format!("permission denied: {}", gate.reason))
        } else if input.is_null() {
            Some("the tool input is not valid JSON".to_string())
        } else if progress.budget.exhausted() {
            // Its input did not fit the record, so it does not run.
            record.allowed = false;
            record.decided_by = DecidedBy::Limit;
            Some(format!("not run: {}", progress.budget.stop_reason()))
        } else {
            None
        };
        let (result, interrupt) = match refusal {
            Some(message) => {
                if !record.allowed {
                    progress.denied += 1;
                }
                record.error = Some(progress.budget.text(self.scrub(&message)));
                self.store
                    .record_refused_call(step, gate.audit.as_ref(), &record)?;
                (ToolResult::err(message), None)
            }
            None => {
                let id = self.store.start_call(step, gate.audit.as_ref(), &record)?;
                let (result, interrupt) = self.execute(call, progress).await;
                let mcp = self.tools.mcp_call_info(&call.id).map(|mut m| {
                    m.reason = m.reason.map(|r| progress.budget.text(self.scrub(&r)));
                    m.server = self.scrub(&m.server);
                    m.tool = self.scrub(&m.tool);
                    m
                });
                let more_hook_results = match interrupt {
                    None => self.post_hooks(call, progress, &result).await,
                    Some(_) => Vec::new(),
                };
                let end = CallEnd {
                    output: (!result.output.is_empty() || !result.is_error)
                        .then(|| progress.budget.text(self.scrub(&result.output))),
                    error: result
                        .error
                        .as_deref()
                        .map(|e| progress.budget.text(self.scrub(e))),
                    duration_ms: millis(started.elapsed()),
                    more_hook_results,
                    mcp,
                };
                self.store.finish_call(id, &end)?;
                (result, interrupt)
            }
        };
        let duration_ms = millis(started.elapsed());
        tracing::info!(
            is_error = result.is_error,
            duration_ms,
            "tool call finished"
        );
        self.events.emit(&RunEvent::ToolResult {
            id: call.id.clone(),
            is_error: result.is_error,
            preview: super::approval::cut(&self.scrub(&model_text(&result)), 2000),
            duration_ms,
        });
        Ok((result, interrupt))
    }

    /// The call in the tools worker, raced against cancellation and the wall-clock limit.
    async fn execute(
        &self,
        call: &ToolInvocation,
        progress: &Progress,
    ) -> (ToolResult, Option<Interrupt>) {
        let mut cancel = self.cancel.clone();
        // Biased, the interrupt first: a cancelled run starts no command (see `model_turn`).
        tokio::select! {
            biased;
            i = interrupted(&mut cancel, progress.deadline) => {
                let why = match i {
                    Interrupt::Cancelled => {
                        "cancelled: the run was stopped; the call's commands were killed"
                    }
                    Interrupt::TimedOut => {
                        "stopped: the run's wall-clock limit was reached; the call's commands \
                         were killed"
                    }
                };
                (ToolResult::err(why), Some(i))
            }
            r = self.tools.execute(call, &progress.session) => (r, None),
        }
    }

    /// The pre-tool-use hooks' verdict, which may turn an allowed call into a denied one.
    async fn pre_hooks(
        &self,
        call: &ToolInvocation,
        progress: &Progress,
        gate: &mut Gate,
        hooks: &mut Vec<HookResult>,
    ) {
        if self.config.hooks.is_empty() {
            return;
        }
        let pre = self
            .tools
            .pre_hooks(&self.config.hooks, call, &progress.session)
            .await;
        hooks.push(HookResult::Pre {
            allowed: pre.allowed,
            failed: pre.failed,
            reason: pre.reason.as_deref().map(|r| self.scrub(r)),
            decided_by: pre.decided_by.clone(),
        });
        if !pre.allowed {
            gate.allowed = false;
            gate.decided_by = DecidedBy::Hook;
            gate.reason = format!(
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

    /// Post-tool-use hooks (they never block); their failures, for the record.
    async fn post_hooks(
        &self,
        call: &ToolInvocation,
        progress: &Progress,
        result: &ToolResult,
    ) -> Vec<HookResult> {
        if self.config.hooks.is_empty() {
            return Vec::new();
        }
        let failures = self
            .tools
            .post_hooks(&self.config.hooks, call, &progress.session, result)
            .await;
        vec![HookResult::Post {
            failures: failures.iter().map(|f| self.scrub(f)).collect(),
        }]
    }

    /// The agent's tool list, the policy and, when the policy asks, the prompter. The policy
    /// judges the input as the model sent it; the record and the person asked see it redacted.
    async fn gate(
        &self,
        agent: &hanzo_store::AgentDef,
        call: &ToolInvocation,
        input: &Value,
        shown: &Value,
        progress: &Progress,
    ) -> Gate {
        if !agent_may_call(agent, &call.name) {
            return Gate {
                mode: PermissionMode::Deny,
                rule: None,
                allowed: false,
                decided_by: DecidedBy::Agent,
                reason: not_in_agent(agent, &call.name),
                audit: None,
            };
        }
        let decision = self.policy.evaluate(&call.name, input);
        let mut audit = AuditRecord::now(&progress.session, &call.name, shown, &decision);
        audit.reason = self.scrub(&audit.reason);
        let by_rule = if decision.rule_matched.is_some() {
            DecidedBy::Rule
        } else {
            DecidedBy::Default
        };
        let (allowed, decided_by, reason) = match decision.mode {
            PermissionMode::Allow => (true, by_rule, decision.reason.clone()),
            PermissionMode::Deny => (false, by_rule, decision.reason.clone()),
            PermissionMode::Prompt => {
                let mode = self.prompter.mode();
                let answer = self
                    .prompter
                    .request_permission(&call.name, shown, &decision.reason)
                    .await;
                let decided_by = DecidedBy::Approval(mode);
                match answer {
                    PermissionDecision::Allow => (
                        true,
                        decided_by,
                        format!("{} — approved ({decided_by})", decision.reason),
                    ),
                    PermissionDecision::Deny(why) => (false, decided_by, why),
                    PermissionDecision::Escalate => (
                        false,
                        decided_by,
                        "the request was escalated and nobody is here to decide".to_string(),
                    ),
                }
            }
        };
        Gate {
            mode: decision.mode,
            rule: decision.rule_matched,
            allowed,
            decided_by,
            reason,
            audit: Some(audit),
        }
    }

    /// Record a call that was never attempted (the run stopped first).
    fn record_unrun(
        &mut self,
        step: StepId,
        call: &ToolInvocation,
        result: &ToolResult,
        progress: &mut Progress,
    ) -> anyhow::Result<()> {
        let input: Value = serde_json::from_str(&call.input_json).unwrap_or(Value::Null);
        let input = progress.budget.input(self.config.secrets.scrub_json(input));
        self.store.record_refused_call(
            step,
            None,
            &ToolCall {
                tool_use_id: Some(call.id.clone()),
                name: call.name.clone(),
                input,
                permission: PermissionMode::Deny,
                rule: None,
                decided_by: DecidedBy::NotRun,
                allowed: false,
                decision_reason: "the run stopped before this call".to_string(),
                hook_results: Vec::new(),
                output: None,
                error: result.error.clone(),
                duration_ms: 0,
            },
        )?;
        Ok(())
    }
}

/// Whether `agent` may be offered (and call) `name`: a tool on its list, or an MCP tool
/// (`mcp__*`, of a configured server) for an agent that may change things (a tool beyond the
/// read-only set on its list): an MCP tool can do anything its server does, so the read-only
/// agents (`solve`, `review`) and agents without tools get none. MCP tools are then judged by the
/// permission policy like any other (`mcp__github__*` rules).
pub(crate) fn agent_may_call(agent: &hanzo_store::AgentDef, name: &str) -> bool {
    agent.tools.iter().any(|t| t == name)
        || (super::workers::is_mcp_tool(name) && may_change_things(agent))
}

fn may_change_things(agent: &hanzo_store::AgentDef) -> bool {
    agent
        .tools
        .iter()
        .any(|t| !super::defs::READ_ONLY_TOOLS.contains(&t.as_str()))
}

fn not_in_agent(agent: &hanzo_store::AgentDef, name: &str) -> String {
    if name.starts_with("mcp__") {
        return format!(
            "{name} is an MCP tool, and MCP tools are not available to the {} agent: it has only \
             read-only tools, and an MCP tool can change anything its server reaches",
            agent.name
        );
    }
    format!(
        "the {} agent has no tool named {:?} (its tools: {})",
        agent.name,
        name,
        if agent.tools.is_empty() {
            "none".to_string()
        } else {
            agent.tools.join(", ")
        }
    )
}
