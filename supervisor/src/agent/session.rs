//! A chat session's conversation as the model sees it on the next turn: each earlier turn's
//! user text and the assistant's last words, read back from the store
//! ([`hanzo_store::RunStore::session_turns`]). The same path serves a live session and one
//! resumed with `chat --resume`, so what a resumed model knows is exactly what was recorded.
//!
//! Tool calls and their results are not replayed: they are on record in each run, and the
//! assistant's final text is what the turn concluded. A turn that ended before the model said
//! anything gets a placeholder answer so that user and assistant messages keep alternating, as
//! the providers require.

use hanzo_ipc::roles::model::{ContentBlock, Message, MessageRole};
use hanzo_store::{RunStatus, SessionTurn};

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
        out.push(Message {
            role: MessageRole::Assistant,
            content: vec![ContentBlock::Text { text: answer }],
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hanzo_store::RunId;

    #[test]
    fn turns_become_alternating_messages_with_placeholders() {
        let turns = [
            SessionTurn {
                run: RunId(1),
                status: RunStatus::Succeeded,
                user: "hi".into(),
                answer: Some("hello".into()),
            },
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
        let text = |i: usize| match &m[i].content[0] {
            ContentBlock::Text { text } => text.clone(),
            other => panic!("not text: {other:?}"),
        };
        assert_eq!(text(1), "hello");
        assert!(text(3).contains("cancelled"), "{}", text(3));
    }
}
