//! Compaction between steps (HIP-0301 §5): when the conversation passed 90 % of the context
//! window, the middle is summarized by the model (no tools), or cut with a notice when that
//! fails; the recent turns, and every tool call with its result, are kept.

use super::events::RunEvent;
use super::run::{interrupted, AgentLoop, Conversation, Progress, Stop};
use super::traits::{ApiClient, PermissionPrompter, ToolExecutor, TurnRequest};
use hanzo_compaction::{estimate_tokens, Role as CRole, SessionCompactor, Summary};
use hanzo_ipc::roles::model::{ContentBlock, Message, MessageRole, StreamEvent};
use hanzo_store::AgentDef;
use serde_json::json;

/// The system prompt of a summary request (here, and `/compact` in `agent::session`).
pub(crate) const SUMMARY_SYSTEM: &str =
    "You compress conversation history. Reply with the summary only.";

/// The one user message of a summary request: what to keep, then `transcript`.
pub(crate) fn summary_ask(transcript: &str) -> String {
    format!(
        "Summarize this earlier part of an agent's session for the agent itself, keeping \
         decisions, file paths, commands run and their results, and open questions. Be \
         brief.\n\n{transcript}"
    )
}

impl<A, T, P> AgentLoop<'_, A, T, P>
where
    A: ApiClient,
    T: ToolExecutor,
    P: PermissionPrompter,
{
    /// Compact the conversation when it has grown past 90 % of the context window.
    pub(super) async fn maybe_compact(
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
            let ask = vec![Message::user_text(summary_ask(&transcript))];
            let request = TurnRequest {
                system: SUMMARY_SYSTEM,
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
                        // The model's own words, back to the model: not redacted.
                        text: text.clone(),
                    })
                }
                Ok(end) => {
                    progress.usage.input += end.usage.input_tokens;
                    progress.usage.output += end.usage.output_tokens;
                    None
                }
                Err(e) => {
                    let why = self.scrub(&e.to_string());
                    tracing::warn!("compaction summary failed, truncating instead: {why}");
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
}

pub(super) fn message_tokens(m: &Message) -> u64 {
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
