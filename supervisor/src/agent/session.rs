//! A chat session's conversation as the model sees it on the next turn: the newest summary
//! (`/compact`), if any, then each later turn's user text and the assistant's last words, read
//! back from the store ([`hanzo_store::RunStore::session_context`]). The same path serves a live
//! session and one resumed with `chat --resume`, so what a resumed model knows is exactly what
//! was recorded.
//!
//! Tool calls and their results are not replayed: they are on record in each run, and the
//! assistant's final text is what the turn concluded. A turn that ended before the model said
//! anything gets a placeholder answer so that user and assistant messages keep alternating, as
//! the providers require.
//!
//! Compaction on demand ([`plan_compaction`] → [`summarise`] → [`summary_row`]): the model
//! summarises the conversation (the prompt of the automatic compaction in `agent::compact`, no
//! tools), and the summary is stored as a row of its own. Nothing is stored until the summary
//! exists, so a failed one leaves the session as it was; the turns stay on record either way.

use super::compact::{message_tokens, summary_ask, SUMMARY_SYSTEM};
use super::traits::{ApiClient, TurnRequest};
use hanzo_ipc::roles::model::{ContentBlock, Message, MessageRole, StreamEvent, Usage};
use hanzo_store::{NewSessionSummary, RunId, RunStatus, SessionContext, SessionId, SessionTurn};

/// What the summary is introduced with, as the first user message of the next turns.
pub const SUMMARY_NOTE: &str = "[Summary of the earlier conversation]";
/// The assistant's side of the summary's exchange, so that the turns after it still alternate.
pub const SUMMARY_ACK: &str = "[Understood: I continue from this summary.]";
/// `/compact` needs at least this many turns since the last summary.
pub const MIN_COMPACT_TURNS: usize = 2;

/// The assistant's stand-in answer for a turn with no text of its own.
pub fn placeholder(status: RunStatus) -> String {
    match status {
        RunStatus::Cancelled => "[this turn was cancelled by the user before an answer]".into(),
        RunStatus::Succeeded => "[this turn ended without text]".into(),
        other => format!("[this turn ended without an answer: the run {other}]"),
    }
}

/// The messages of `turns`, oldest first: user, assistant, user, assistant, …
pub fn prior_messages(turns: &[SessionTurn]) -> Vec<Message> {
    let mut out = Vec::with_capacity(turns.len() * 2);
    for t in turns {
        out.push(Message::user_text(t.user.clone()));
        let answer = t.answer.clone().unwrap_or_else(|| placeholder(t.status));
        out.push(assistant(answer));
    }
    out
}

/// The conversation the next turn starts from: the summary's exchange, then the turns after
/// it (all the turns when there is no summary).
pub fn context_messages(ctx: &SessionContext) -> Vec<Message> {
    let mut out = Vec::with_capacity(ctx.turns.len() * 2 + 2);
    if let Some(s) = &ctx.summary {
        out.extend(summary_messages(&s.summary));
    }
    out.extend(prior_messages(&ctx.turns));
    out
}

/// A summary as the model is given it: a user message with the note, and the acknowledgement.
pub fn summary_messages(summary: &str) -> [Message; 2] {
    [
        Message::user_text(format!("{SUMMARY_NOTE}\n{summary}")),
        assistant(SUMMARY_ACK.to_string()),
    ]
}

fn assistant(text: String) -> Message {
    Message {
        role: MessageRole::Assistant,
        content: vec![ContentBlock::Text { text }],
    }
}

/// The estimated size of `messages` in tokens (as the automatic compaction counts).
pub fn estimated_tokens(messages: &[Message]) -> u64 {
    messages.iter().map(message_tokens).sum()
}

/// A compaction that may go ahead: what it covers and the text the model summarises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactPlan {
    /// The session being compacted.
    pub session: SessionId,
    /// The last turn the summary will cover.
    pub through_run: RunId,
    /// Turns since the previous summary.
    pub turns: usize,
    /// The estimated size of the context being summarised, in tokens.
    pub tokens_before: u64,
    transcript: String,
}

/// The compaction of `ctx` (the session's context now), or why there is none to do: fewer
/// than [`MIN_COMPACT_TURNS`] turns since the last summary, or a turn still running.
pub fn plan_compaction(session: SessionId, ctx: &SessionContext) -> Result<CompactPlan, String> {
    let since = if ctx.summary.is_some() {
        "the last /compact"
    } else {
        "the session began"
    };
    let n = ctx.turns.len();
    if n < MIN_COMPACT_TURNS {
        return Err(format!(
            "nothing to compact: {n} turn{} since {since}; /compact needs at least \
             {MIN_COMPACT_TURNS}",
            if n == 1 { "" } else { "s" }
        ));
    }
    let last = ctx.turns.last().expect("at least two turns");
    if last.status == RunStatus::Running {
        return Err(format!(
            "turn {} of this session is still running: /compact when it has ended",
            last.run
        ));
    }
    let messages = context_messages(ctx);
    let transcript = messages
        .iter()
        .map(|m| {
            let text: Vec<&str> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            format!("[{:?}] {}", m.role, text.join("\n"))
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    Ok(CompactPlan {
        session,
        through_run: last.run,
        turns: n,
        tokens_before: estimated_tokens(&messages),
        transcript,
    })
}

/// Ask the model for the summary of `plan` (no tools). `Err` says why there is none: the
/// request failed, or the model answered with nothing.
pub async fn summarise<A: ApiClient>(
    api: &A,
    plan: &CompactPlan,
) -> Result<(String, Usage), String> {
    let ask = [Message::user_text(summary_ask(&plan.transcript))];
    let request = TurnRequest {
        system: SUMMARY_SYSTEM,
        messages: &ask,
        tools: &[],
    };
    let mut text = String::new();
    let mut on_event = |ev: &StreamEvent| {
        if let StreamEvent::ContentDelta { text: t } = ev {
            text.push_str(t);
        }
    };
    let end = api
        .send_message(request, &mut on_event)
        .await
        .map_err(|e| e.message)?;
    let text = text.trim().to_string();
    if text.is_empty() {
        return Err("the model answered with an empty summary".into());
    }
    Ok((text, end.usage))
}

/// The row that records `summary` as the compaction of `plan`.
pub fn summary_row(plan: &CompactPlan, summary: &str) -> NewSessionSummary {
    NewSessionSummary {
        session: plan.session,
        through_run: plan.through_run,
        summary: summary.to_string(),
        turns: u32::try_from(plan.turns).unwrap_or(u32::MAX),
        tokens_before: plan.tokens_before,
        tokens_after: estimated_tokens(&summary_messages(summary)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::traits::{TurnEnd, TurnError};
    use hanzo_ipc::roles::model::StopReason;
    use hanzo_store::SessionSummary;
    use std::sync::Mutex;

    fn text_of(m: &Message) -> String {
        match &m.content[0] {
            ContentBlock::Text { text } => text.clone(),
            other => panic!("not text: {other:?}"),
        }
    }

    fn turn(run: i64, user: &str, answer: Option<&str>) -> SessionTurn {
        SessionTurn {
            run: RunId(run),
            status: RunStatus::Succeeded,
            user: user.into(),
            answer: answer.map(str::to_string),
        }
    }

    fn stored(through: i64, text: &str) -> SessionSummary {
        SessionSummary {
            id: 1,
            session: SessionId(1),
            through_run: RunId(through),
            summary: text.into(),
            turns: 2,
            tokens_before: 0,
            tokens_after: 0,
            created_ms: 0,
        }
    }

    #[test]
    fn turns_become_alternating_messages_with_placeholders() {
        let turns = [
            turn(1, "hi", Some("hello")),
            SessionTurn {
                run: RunId(2),
                status: RunStatus::Cancelled,
                user: "run it".into(),
                answer: None,
            },
        ];
        let m = prior_messages(&turns);
        let roles: Vec<MessageRole> = m.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                MessageRole::User,
                MessageRole::Assistant,
                MessageRole::User,
                MessageRole::Assistant
            ]
        );
        assert_eq!(text_of(&m[1]), "hello");
        assert!(text_of(&m[3]).contains("cancelled"), "{}", text_of(&m[3]));
    }

    #[test]
    fn the_context_starts_with_the_summary_then_the_later_turns() {
        let ctx = SessionContext {
            summary: Some(stored(2, "they asked one and two")),
            turns: vec![turn(3, "three", Some("answer three"))],
        };
        let m = context_messages(&ctx);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].role, MessageRole::User);
        assert_eq!(
            text_of(&m[0]),
            format!("{SUMMARY_NOTE}\nthey asked one and two")
        );
        assert_eq!(
            (m[1].role, text_of(&m[1]).as_str()),
            (MessageRole::Assistant, SUMMARY_ACK)
        );
        assert_eq!(text_of(&m[2]), "three");
        assert_eq!(text_of(&m[3]), "answer three");
        // Without a summary: exactly the turns.
        let plain = SessionContext {
            summary: None,
            turns: ctx.turns.clone(),
        };
        assert_eq!(context_messages(&plain), prior_messages(&ctx.turns));
    }

    #[test]
    fn fewer_than_two_turns_or_a_running_one_is_refused() {
        let none = plan_compaction(SessionId(1), &SessionContext::default()).expect_err("empty");
        assert_eq!(
            none,
            "nothing to compact: 0 turns since the session began; /compact needs at least 2"
        );
        let one = SessionContext {
            summary: Some(stored(2, "s")),
            turns: vec![turn(3, "x", Some("y"))],
        };
        let why = plan_compaction(SessionId(1), &one).expect_err("one turn");
        assert!(why.contains("1 turn since the last /compact"), "{why}");
        let mut running = SessionContext {
            summary: None,
            turns: vec![turn(1, "a", Some("b")), turn(2, "c", None)],
        };
        running.turns[1].status = RunStatus::Running;
        let why = plan_compaction(SessionId(1), &running).expect_err("running");
        assert!(
            why.contains("turn 2 of this session is still running"),
            "{why}"
        );
    }

    /// A model that answers with `reply` (or fails) and keeps the request it was sent.
    struct Model {
        reply: Result<Vec<&'static str>, &'static str>,
        seen: Mutex<Vec<(String, Vec<Message>, usize)>>,
    }

    impl ApiClient for Model {
        async fn send_message(
            &self,
            request: TurnRequest<'_>,
            on_event: &mut dyn FnMut(&StreamEvent),
        ) -> Result<TurnEnd, TurnError> {
            self.seen.lock().expect("lock").push((
                request.system.to_string(),
                request.messages.to_vec(),
                request.tools.len(),
            ));
            match &self.reply {
                Ok(chunks) => {
                    for c in chunks {
                        on_event(&StreamEvent::ContentDelta {
                            text: (*c).to_string(),
                        });
                    }
                    Ok(TurnEnd {
                        stop_reason: StopReason::EndTurn,
                        usage: Usage {
                            input_tokens: 70,
                            output_tokens: 9,
                        },
                    })
                }
                Err(why) => Err(TurnError {
                    kind: None,
                    message: (*why).to_string(),
                }),
            }
        }
    }

    fn two_turns() -> SessionContext {
        SessionContext {
            summary: Some(stored(1, "an older summary")),
            turns: vec![
                turn(
                    2,
                    "what is in pages.py?",
                    Some(&"It splits pages. ".repeat(40)),
                ),
                turn(3, "and the tests?", Some("They pass.")),
            ],
        }
    }

    #[tokio::test]
    async fn the_summary_request_has_no_tools_and_the_whole_context() {
        let ctx = two_turns();
        let plan = plan_compaction(SessionId(1), &ctx).expect("plan");
        assert_eq!((plan.through_run, plan.turns), (RunId(3), 2));
        assert_eq!(
            plan.tokens_before,
            estimated_tokens(&context_messages(&ctx))
        );
        let model = Model {
            reply: Ok(vec!["  Pages split; ", "tests pass.\n"]),
            seen: Mutex::new(Vec::new()),
        };
        let (text, usage) = summarise(&model, &plan).await.expect("summary");
        assert_eq!(text, "Pages split; tests pass.");
        assert_eq!(usage.output_tokens, 9);
        let seen = model.seen.lock().expect("lock");
        let (system, messages, tools) = &seen[0];
        assert_eq!(system, SUMMARY_SYSTEM);
        assert_eq!(*tools, 0);
        assert_eq!(messages.len(), 1);
        let ask = text_of(&messages[0]);
        for part in [
            "an older summary",
            "[User] what is in pages.py?",
            "[Assistant] They pass.",
        ] {
            assert!(ask.contains(part), "{part}: {ask}");
        }
        let row = summary_row(&plan, &text);
        assert_eq!(row.through_run, RunId(3));
        assert_eq!(row.tokens_before, plan.tokens_before);
        assert_eq!(row.tokens_after, estimated_tokens(&summary_messages(&text)));
        assert!(row.tokens_after < row.tokens_before, "{row:?}");
    }

    #[tokio::test]
    async fn a_failed_or_empty_summary_is_an_error() {
        let plan = plan_compaction(SessionId(1), &two_turns()).expect("plan");
        let failing = Model {
            reply: Err("provider said 400: bad request"),
            seen: Mutex::new(Vec::new()),
        };
        assert_eq!(
            summarise(&failing, &plan).await.expect_err("failed"),
            "provider said 400: bad request"
        );
        let empty = Model {
            reply: Ok(vec![" \n "]),
            seen: Mutex::new(Vec::new()),
        };
        let why = summarise(&empty, &plan).await.expect_err("empty");
        assert!(why.contains("empty summary"), "{why}");
    }
}
