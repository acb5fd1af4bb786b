//! `hanzo-compaction` fits a conversation into a model's context window (HIP-0301 §5): it keeps
//! the system prompt and the most recent turns, and replaces the middle with one summary message.
//!
//! Pure logic with no I/O, so the agent loop, the test-vector runner and other tools share it. The
//! summary comes from a model call the caller makes; to let that call be async without this crate
//! knowing about runtimes, compaction is split into [`SessionCompactor::plan`] (what to summarize)
//! and [`CompactionPlan::apply`] (splice in the summary, or the truncation fallback).
//!
//! Rules:
//! - Compaction triggers only when the *current* context — the sum of `token_count` over the
//!   messages that would be sent — exceeds 90 % of `max_tokens` (`10 · total > 9 · max_tokens`,
//!   exact integer arithmetic). Cumulative usage over the session does not count.
//! - Index 0 (the system prompt) is always kept. A *turn* is one message after it; the last
//!   `reserve_recent` turns are kept.
//! - A tool result is never separated from its call: while a kept message carries a result whose
//!   call would be dropped, the kept range grows backwards to include that call. So a dropped call's
//!   result is always dropped with it.
//! - The dropped middle becomes one `assistant` message with the summarizer's text, or, when the
//!   summarizer fails, the fixed [`truncation_notice`].
//! - The result is not guaranteed to fit: if the kept turns alone exceed the budget, the caller
//!   decides what to do (the loop fails the step with a clear error).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

/// Who sent a message. `Tool` is for providers (OpenAI) that carry a tool result in its own
/// message; Anthropic carries results in a `User` message, which works the same here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The instructions that frame the conversation.
    System,
    /// The person (or the loop on their behalf), and on Anthropic the tool results.
    User,
    /// The model's turns, with the tool calls it makes.
    Assistant,
    /// A tool result carried in a message of its own (OpenAI).
    Tool,
}

/// The minimal message shape compaction needs. The loop's own message type converts into this;
/// content blocks are flattened to text because only the summarizer reads them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who sent it.
    pub role: Role,
    /// The message's text, content blocks flattened.
    pub content: String,
    /// This message's size in the model's tokens, as the provider reported or estimated it.
    pub token_count: u64,
    /// Ids of the tool calls this message makes (`tool_use.id` / `tool_calls[].id`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_uses: Vec<String>,
    /// Ids of the tool calls whose results this message carries (`tool_result.tool_use_id` /
    /// `tool_call_id`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_results: Vec<String>,
}

impl Message {
    /// A message with no tool calls or results.
    pub fn new(role: Role, content: impl Into<String>, token_count: u64) -> Message {
        Message {
            role,
            content: content.into(),
            token_count,
            tool_uses: Vec::new(),
            tool_results: Vec::new(),
        }
    }
}

/// What compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionResult {
    /// The conversation after compaction (unchanged when nothing was compacted).
    pub messages: Vec<Message>,
    /// How many messages the summary replaced (0: nothing was compacted).
    pub compacted_count: usize,
    /// Tokens before minus tokens after (0 if the summary was not smaller than what it replaced).
    pub tokens_saved: u64,
}

/// What the summarizer is shown in place of a tool result: results are usually the bulk of the
/// middle (file contents, command output), and the summarizing call must itself fit the window.
pub const COMPACTED_TOOL_RESULT: &str = "[compacted]";

/// The fallback summary when the summarizer fails: says what happened, carries no dropped content.
pub fn truncation_notice(dropped: usize) -> String {
    format!(
        "[{dropped} earlier messages were removed to fit the context window; no summary is available]"
    )
}

/// A token estimate for text whose real count is unknown (the fallback notice): one token per
/// four bytes, rounded up.
pub fn estimate_tokens(text: &str) -> u64 {
    u64::try_from(text.len().div_ceil(4)).unwrap_or(u64::MAX)
}

/// A summary produced by the model: its text and its size in tokens (the summarizing call's
/// output token count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The summary's text, which replaces the dropped messages.
    pub text: String,
    /// Its size in the model's tokens.
    pub token_count: u64,
}

/// Compaction settings (HIP-0301 §5). Compaction is opt-in: a loop with no budget holds no
/// compactor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionCompactor {
    /// The context window to stay under, in tokens.
    pub max_tokens: u64,
    /// How many of the latest messages are always kept verbatim.
    pub reserve_recent: usize,
}

/// The part of a conversation to replace with a summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionPlan {
    messages: Vec<Message>,
    /// The dropped messages are `messages[1..keep_from]`.
    keep_from: usize,
}

impl SessionCompactor {
    /// HIP-0301's default `reserve_recent` is 3.
    pub fn new(max_tokens: u64) -> SessionCompactor {
        SessionCompactor {
            max_tokens,
            reserve_recent: 3,
        }
    }

    /// Whether a context of `total` tokens exceeds 90 % of the budget.
    pub fn needs_compaction(&self, total: u64) -> bool {
        u128::from(total) * 10 > u128::from(self.max_tokens) * 9
    }

    /// Decide what to compact. `None`: nothing to do — the context is within 90 % of the budget,
    /// or every message is the system prompt or a protected recent turn.
    pub fn plan(&self, messages: &[Message]) -> Option<CompactionPlan> {
        if !self.needs_compaction(total_tokens(messages)) || messages.len() < 2 {
            return None;
        }
        let mut keep_from = messages.len().saturating_sub(self.reserve_recent).max(1);
        // Grow the kept range backwards until no kept result's call lies in the dropped middle.
        while keep_from > 1 {
            let dropped_calls = |id: &String| {
                messages[1..keep_from]
                    .iter()
                    .any(|m| m.tool_uses.iter().any(|u| u == id))
            };
            let orphaned = messages[keep_from..]
                .iter()
                .any(|m| m.tool_results.iter().any(dropped_calls));
            if !orphaned {
                break;
            }
            keep_from -= 1;
        }
        if keep_from <= 1 {
            return None;
        }
        Some(CompactionPlan {
            messages: messages.to_vec(),
            keep_from,
        })
    }

    /// Compact with a synchronous summarizer (tests, vectors, non-async callers). The summarizer
    /// gets [`CompactionPlan::to_summarize`]; `None` means it failed.
    pub fn compact<F>(&self, messages: &[Message], summarize: F) -> CompactionResult
    where
        F: FnOnce(&[Message]) -> Option<Summary>,
    {
        match self.plan(messages) {
            None => CompactionResult {
                messages: messages.to_vec(),
                compacted_count: 0,
                tokens_saved: 0,
            },
            Some(plan) => {
                let summary = summarize(&plan.to_summarize());
                plan.apply(summary)
            }
        }
    }
}

impl CompactionPlan {
    /// How many messages will be replaced.
    pub fn dropped_count(&self) -> usize {
        self.keep_from - 1
    }

    /// The messages to summarize, tool-result contents replaced by [`COMPACTED_TOOL_RESULT`].
    pub fn to_summarize(&self) -> Vec<Message> {
        self.messages[1..self.keep_from]
            .iter()
            .map(|m| {
                let mut m = m.clone();
                if !m.tool_results.is_empty() || m.role == Role::Tool {
                    m.content = COMPACTED_TOOL_RESULT.to_string();
                }
                m
            })
            .collect()
    }

    /// Splice in the summary (`None`: the summarizer failed, use the truncation notice).
    pub fn apply(self, summary: Option<Summary>) -> CompactionResult {
        let dropped = self.dropped_count();
        let summary = summary.unwrap_or_else(|| {
            let text = truncation_notice(dropped);
            Summary {
                token_count: estimate_tokens(&text),
                text,
            }
        });
        let before = total_tokens(&self.messages);
        let mut out = Vec::with_capacity(self.messages.len() - dropped + 1);
        let mut iter = self.messages.into_iter();
        out.extend(iter.next());
        out.push(Message::new(
            Role::Assistant,
            summary.text,
            summary.token_count,
        ));
        out.extend(iter.skip(dropped));
        let after = total_tokens(&out);
        CompactionResult {
            messages: out,
            compacted_count: dropped,
            tokens_saved: before.saturating_sub(after),
        }
    }
}

/// The size of a context: the sum of its messages' token counts.
pub fn total_tokens(messages: &[Message]) -> u64 {
    messages
        .iter()
        .fold(0u64, |acc, m| acc.saturating_add(m.token_count))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: Role, content: &str, tokens: u64) -> Message {
        Message::new(role, content, tokens)
    }

    fn summary(text: &str, tokens: u64) -> Option<Summary> {
        Some(Summary {
            text: text.into(),
            token_count: tokens,
        })
    }

    #[test]
    fn below_threshold_is_untouched_and_exact_90_percent_does_not_trigger() {
        let c = SessionCompactor {
            max_tokens: 100,
            reserve_recent: 1,
        };
        let msgs = vec![
            msg(Role::System, "sys", 10),
            msg(Role::User, "a", 40),
            msg(Role::Assistant, "b", 40),
        ];
        assert!(!c.needs_compaction(90));
        assert!(c.needs_compaction(91));
        let r = c.compact(&msgs, |_| panic!("must not summarize"));
        assert_eq!(r.messages, msgs);
        assert_eq!(r.compacted_count, 0);
        assert_eq!(r.tokens_saved, 0);
    }

    #[test]
    fn middle_becomes_one_summary_and_ends_are_kept() {
        let c = SessionCompactor {
            max_tokens: 100,
            reserve_recent: 2,
        };
        let msgs = vec![
            msg(Role::System, "sys", 10),
            msg(Role::User, "old q", 30),
            msg(Role::Assistant, "old a", 30),
            msg(Role::User, "new q", 10),
            msg(Role::Assistant, "new a", 20),
        ];
        let mut seen = Vec::new();
        let r = c.compact(&msgs, |m| {
            seen = m.iter().map(|m| m.content.clone()).collect();
            summary("S", 5)
        });
        assert_eq!(seen, vec!["old q", "old a"]);
        assert_eq!(r.compacted_count, 2);
        assert_eq!(r.tokens_saved, 55);
        assert_eq!(r.messages.len(), 4);
        assert_eq!(r.messages[0], msgs[0]);
        assert_eq!(r.messages[1], msg(Role::Assistant, "S", 5));
        assert_eq!(&r.messages[2..], &msgs[3..]);
    }

    #[test]
    fn kept_result_pulls_its_call_into_the_kept_range() {
        let c = SessionCompactor {
            max_tokens: 100,
            reserve_recent: 1,
        };
        let mut call = msg(Role::Assistant, "calling", 10);
        call.tool_uses = vec!["t1".into()];
        let mut result = msg(Role::Tool, "file contents", 50);
        result.tool_results = vec!["t1".into()];
        let msgs = vec![
            msg(Role::System, "sys", 10),
            msg(Role::User, "q", 40),
            call,
            result,
        ];
        let r = c.compact(&msgs, |_| None);
        assert_eq!(r.compacted_count, 1);
        assert_eq!(&r.messages[2..], &msgs[2..]);
        assert_eq!(r.messages[1].content, truncation_notice(1));
    }

    #[test]
    fn summarizer_sees_tool_results_as_compacted() {
        let c = SessionCompactor {
            max_tokens: 10,
            reserve_recent: 1,
        };
        let mut call = msg(Role::Assistant, "calling", 1);
        call.tool_uses = vec!["t1".into()];
        let mut result = msg(Role::User, "SECRET FILE BODY", 50);
        result.tool_results = vec!["t1".into()];
        let msgs = vec![
            msg(Role::System, "sys", 1),
            call,
            result,
            msg(Role::User, "next", 1),
        ];
        let plan = c.plan(&msgs).expect("plan");
        let shown = plan.to_summarize();
        assert_eq!(shown[1].content, COMPACTED_TOOL_RESULT);
        assert_eq!(shown[0].content, "calling");
    }

    #[test]
    fn nothing_to_drop_returns_none() {
        let c = SessionCompactor {
            max_tokens: 1,
            reserve_recent: 5,
        };
        let msgs = vec![msg(Role::System, "s", 10), msg(Role::User, "u", 10)];
        assert_eq!(c.plan(&msgs), None);
        assert_eq!(c.plan(&msgs[..1]), None);
        assert_eq!(c.plan(&[]), None);
    }
}
