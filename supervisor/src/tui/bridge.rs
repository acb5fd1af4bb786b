//! The agent loop's seams as the screen sees them: run events and permission questions become
//! [`UiMsg`]s on one channel, which the UI task drains between frames. Nothing here touches the
//! terminal.

use crate::agent::approval::{decide_unattended, ApprovalMode};
use crate::agent::events::{EventSink, RunEvent};
use crate::agent::traits::{PermissionDecision, PermissionPrompter};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Mutex;
use tokio::sync::{mpsc, oneshot};

/// What the loop tells the screen.
#[derive(Debug)]
pub enum UiMsg {
    /// Something happened in the run (text, a tool call, a step's end, …).
    Event(RunEvent),
    /// A tool call waits for the person's answer.
    Permission(PermissionAsk),
}

/// One permission question waiting for the person at the screen.
#[derive(Debug)]
pub struct PermissionAsk {
    /// The tool's name.
    pub tool: String,
    /// The tool's input, secrets redacted, as the person is shown it.
    pub input: Value,
    /// The policy's reason for asking (names the rule that asked, or the default).
    pub why: String,
    /// Where the answer goes; dropping it unanswered denies the call.
    pub reply: oneshot::Sender<Answer>,
}

/// How the person answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Allow this call only.
    Once,
    /// Allow this call, and the same call again (same tool and, for `bash`, the same command;
    /// for other tools, the same input) for the rest of the session.
    Session,
    /// Deny the call, with the reason typed (may be empty); the model sees it.
    Deny(String),
}

/// Run events to the screen.
#[derive(Debug, Clone)]
pub struct ChatEvents(pub mpsc::UnboundedSender<UiMsg>);

impl EventSink for ChatEvents {
    fn emit(&self, event: &RunEvent) {
        // The screen gone means the session is ending; the loop's events have nowhere to go.
        let _ = self.0.send(UiMsg::Event(event.clone()));
    }
}

/// Asks at the screen when the approval mode is `prompt`; otherwise answers as `run` does.
#[derive(Debug)]
pub struct ChatPrompter {
    tx: mpsc::UnboundedSender<UiMsg>,
    mode: ApprovalMode,
    allowed: Mutex<HashSet<String>>,
}

impl ChatPrompter {
    /// A prompter that sends questions to the screen over `tx` when `mode` is `prompt`.
    pub fn new(tx: mpsc::UnboundedSender<UiMsg>, mode: ApprovalMode) -> Self {
        ChatPrompter {
            tx,
            mode,
            allowed: Mutex::new(HashSet::new()),
        }
    }

    /// What "allow for this session" remembers: the tool and its exact input (for `bash`, the
    /// exact command), never a pattern wider than what the person saw.
    pub fn session_key(tool: &str, input: &Value) -> String {
        match (tool, input.get("command").and_then(Value::as_str)) {
            ("bash", Some(cmd)) => format!("bash\u{0}{cmd}"),
            _ => format!("{tool}\u{0}{input}"),
        }
    }

    fn allowed(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.allowed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Forget every "allow for this session" answer (`/clear`).
    pub fn forget(&self) {
        self.allowed().clear();
    }
}

impl PermissionPrompter for ChatPrompter {
    async fn request_permission(
        &self,
        tool_name: &str,
        input: &Value,
        why: &str,
    ) -> PermissionDecision {
        if self.mode != ApprovalMode::Prompt {
            return decide_unattended(self.mode, tool_name, why);
        }
        let key = Self::session_key(tool_name, input);
        if self.allowed().contains(&key) {
            return PermissionDecision::Allow;
        }
        let (reply, answer) = oneshot::channel();
        let ask = PermissionAsk {
            tool: tool_name.to_string(),
            input: input.clone(),
            why: why.to_string(),
            reply,
        };
        if self.tx.send(UiMsg::Permission(ask)).is_err() {
            return PermissionDecision::Deny("the session's screen has closed".into());
        }
        match answer.await {
            Ok(Answer::Once) => PermissionDecision::Allow,
            Ok(Answer::Session) => {
                self.allowed().insert(key);
                PermissionDecision::Allow
            }
            Ok(Answer::Deny(reason)) if reason.trim().is_empty() => {
                PermissionDecision::Deny("the user declined".into())
            }
            Ok(Answer::Deny(reason)) => {
                PermissionDecision::Deny(format!("the user declined: {}", reason.trim()))
            }
            Err(_) => PermissionDecision::Deny("the question was not answered".into()),
        }
    }

    fn mode(&self) -> ApprovalMode {
        self.mode
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn ask_and_answer(
        p: &ChatPrompter,
        rx: &mut mpsc::UnboundedReceiver<UiMsg>,
        a: Option<Answer>,
        input: &Value,
    ) -> PermissionDecision {
        let fut = p.request_permission("bash", input, "no rule matched");
        tokio::pin!(fut);
        loop {
            tokio::select! {
                d = &mut fut => return d,
                Some(UiMsg::Permission(ask)) = rx.recv() => {
                    assert_eq!(ask.tool, "bash");
                    assert_eq!(&ask.input, input);
                    match a.clone() {
                        Some(a) => { let _ = ask.reply.send(a); }
                        None => drop(ask.reply),
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn answers_become_decisions_and_session_allows_only_the_same_command() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let p = ChatPrompter::new(tx, ApprovalMode::Prompt);
        let ls = json!({"command": "ls"});
        let rm = json!({"command": "rm -rf x"});
        assert_eq!(
            ask_and_answer(&p, &mut rx, Some(Answer::Once), &ls).await,
            PermissionDecision::Allow
        );
        assert_eq!(
            ask_and_answer(&p, &mut rx, Some(Answer::Deny("not that".into())), &rm).await,
            PermissionDecision::Deny("the user declined: not that".into())
        );
        assert_eq!(
            ask_and_answer(&p, &mut rx, Some(Answer::Session), &ls).await,
            PermissionDecision::Allow
        );
        // Asked no more for exactly `ls`…
        assert_eq!(
            p.request_permission("bash", &ls, "x").await,
            PermissionDecision::Allow
        );
        assert!(rx.try_recv().is_err(), "asked again for an allowed command");
        // …but still for anything else, and an unanswered question denies.
        assert!(matches!(
            ask_and_answer(&p, &mut rx, None, &rm).await,
            PermissionDecision::Deny(_)
        ));
        p.forget();
        assert!(matches!(
            ask_and_answer(&p, &mut rx, None, &ls).await,
            PermissionDecision::Deny(_)
        ));
    }

    #[tokio::test]
    async fn non_prompt_modes_answer_without_asking() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let p = ChatPrompter::new(tx, ApprovalMode::Deny);
        let d = p
            .request_permission("bash", &json!({"command": "ls"}), "why")
            .await;
        assert!(matches!(d, PermissionDecision::Deny(_)));
        assert!(rx.try_recv().is_err());
    }
}
