//! The agent loop's seams as ACP: run events become `session/update` notifications
//! ([`AcpEvents`]) and permission questions become `session/request_permission` requests to the
//! client ([`AcpPrompter`]), answered through [`Asks`].

use super::wire;
use crate::agent::approval::{decide_unattended, summarize_input, ApprovalMode};
use crate::agent::events::{EventSink, RunEvent};
use crate::agent::traits::{PermissionDecision, PermissionPrompter};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::{mpsc, oneshot};

/// Where protocol lines go (the stdout writer).
pub type Out = mpsc::UnboundedSender<String>;

pub fn send(out: &Out, v: &Value) {
    // The writer gone means stdout is closed: the client has left.
    let _ = out.send(wire::encode(v));
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The permission requests we sent and not yet had answered.
#[derive(Debug, Default)]
pub struct Asks {
    next: u64,
    open: HashMap<u64, (String, oneshot::Sender<Result<Value, Value>>)>,
}

impl Asks {
    /// A new request id for `session`, and where its answer will arrive.
    fn open(&mut self, session: &str) -> (u64, oneshot::Receiver<Result<Value, Value>>) {
        self.next += 1;
        let (tx, rx) = oneshot::channel();
        self.open.insert(self.next, (session.to_string(), tx));
        (self.next, rx)
    }

    /// Deliver the client's answer to request `id`; false when we never asked it (or it was
    /// answered already): the answer is ignored.
    pub fn answer(&mut self, id: &Value, outcome: Result<Value, Value>) -> bool {
        let Some(n) = id.as_u64() else {
            return false;
        };
        match self.open.remove(&n) {
            Some((_, tx)) => {
                let _ = tx.send(outcome);
                true
            }
            None => false,
        }
    }

    /// Drop the open questions of `session` (cancelled): each counts as a denial.
    pub fn cancel_session(&mut self, session: &str) {
        self.open.retain(|_, (s, _)| s != session);
    }
}

/// The tool call the loop announced last: the one a permission question is about (the loop
/// announces a call, then decides it, one call at a time).
#[derive(Debug, Clone, Default)]
pub struct Current(Arc<Mutex<Option<Value>>>);

/// ACP's `kind` of one of our tools.
pub fn tool_kind(name: &str) -> &'static str {
    match name {
        "read_file" => "read",
        "write_file" | "edit_file" => "edit",
        "list_dir" | "glob" | "grep" => "search",
        "bash" => "execute",
        n if n.starts_with("lsp_") => "read",
        _ => "other",
    }
}

/// The one-line title of a call: the tool and its main argument, made safe to show.
pub fn tool_title(name: &str, input: &Value) -> String {
    format!(
        "{}: {}",
        crate::term::sanitize_line_for_terminal(name),
        summarize_input(name, input)
    )
}

fn text_content(text: &str) -> Value {
    json!([{"type": "content", "content": {"type": "text", "text": text}}])
}

/// A session's updates.
pub fn update(out: &Out, session: &str, update: Value) {
    send(
        out,
        &wire::notification(
            "session/update",
            json!({"sessionId": session, "update": update}),
        ),
    );
}

/// Run events of one turn as `session/update` notifications.
pub struct AcpEvents {
    pub session: String,
    pub out: Out,
    pub current: Current,
    /// The stages of the agent (`auto` has three): shown as the plan.
    pub stages: Vec<String>,
    run: Mutex<i64>,
    stage: Mutex<usize>,
}

impl AcpEvents {
    pub fn new(session: String, out: Out, current: Current, stages: Vec<String>) -> Self {
        AcpEvents {
            session,
            out,
            current,
            stages,
            run: Mutex::new(0),
            stage: Mutex::new(0),
        }
    }

    /// ACP's id of the model's call `id` in this run (the model's ids repeat across turns).
    fn call_id(&self, id: &str) -> String {
        format!("run{}-{id}", *lock(&self.run))
    }

    fn plan(&self, done_through: Option<usize>) {
        if self.stages.len() < 2 {
            return;
        }
        let at = *lock(&self.stage);
        let entries: Vec<Value> = self
            .stages
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let status = match done_through {
                    Some(d) if i <= d => "completed",
                    _ if i < at => "completed",
                    _ if i == at => "in_progress",
                    _ => "pending",
                };
                json!({"content": format!("{s} stage"), "priority": "medium", "status": status})
            })
            .collect();
        update(
            &self.out,
            &self.session,
            json!({"sessionUpdate": "plan", "entries": entries}),
        );
    }
}

impl EventSink for AcpEvents {
    fn emit(&self, event: &RunEvent) {
        let u = |v: Value| update(&self.out, &self.session, v);
        match event {
            RunEvent::RunStarted { run_id, .. } => {
                *lock(&self.run) = *run_id;
                self.plan(None);
            }
            RunEvent::StageStarted { stage } => {
                if let Some(i) = self.stages.iter().position(|s| s == stage) {
                    *lock(&self.stage) = i;
                }
                self.plan(None);
            }
            RunEvent::Text { text } => u(json!({
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": text},
            })),
            RunEvent::ToolCall { id, name, input } => {
                let call = json!({
                    "toolCallId": self.call_id(id),
                    "title": tool_title(name, input),
                    "kind": tool_kind(name),
                    "status": "pending",
                    "rawInput": input,
                });
                *lock(&self.current.0) = Some(call.clone());
                let mut v = call;
                v["sessionUpdate"] = json!("tool_call");
                u(v);
            }
            RunEvent::ToolDecision {
                id,
                allowed,
                decided_by,
                reason,
            } => {
                let mut v = json!({
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": self.call_id(id),
                    "status": if *allowed { "in_progress" } else { "failed" },
                });
                if !allowed {
                    v["content"] = text_content(&format!("denied ({decided_by}): {reason}"));
                }
                u(v);
            }
            RunEvent::ToolResult {
                id,
                is_error,
                preview,
                duration_ms,
            } => u(json!({
                "sessionUpdate": "tool_call_update",
                "toolCallId": self.call_id(id),
                "status": if *is_error { "failed" } else { "completed" },
                "content": text_content(preview),
                "rawOutput": {"output": preview, "isError": is_error, "durationMs": duration_ms},
            })),
            RunEvent::RunFinished { status, .. } if status == "succeeded" => {
                self.plan(Some(self.stages.len()));
            }
            _ => {}
        }
    }
}

/// Asks the client when the approval mode is `prompt`; otherwise answers as `run` does.
pub struct AcpPrompter {
    pub session: String,
    pub out: Out,
    pub asks: Arc<Mutex<Asks>>,
    /// The session's mode (`session/set_mode`), shared so that it can change during a turn; each
    /// call reads it when it needs approval.
    pub mode: ModeHandle,
    pub current: Current,
    /// "Allow always" answers: the tool and its exact input, never a pattern wider than what the
    /// person saw (as chat's "allow for this session").
    always: Mutex<HashSet<String>>,
}

pub const ALLOW_ONCE: &str = "allow_once";
pub const ALLOW_ALWAYS: &str = "allow_always";
pub const REJECT_ONCE: &str = "reject_once";

impl AcpPrompter {
    pub fn new(
        session: String,
        out: Out,
        asks: Arc<Mutex<Asks>>,
        mode: ApprovalMode,
        current: Current,
    ) -> Self {
        AcpPrompter {
            session,
            out,
            asks,
            mode: ModeHandle(Arc::new(Mutex::new(mode))),
            current,
            always: Mutex::new(HashSet::new()),
        }
    }
}

/// An ACP session's approval mode, shared between the turn and the request loop.
#[derive(Clone)]
pub struct ModeHandle(Arc<Mutex<ApprovalMode>>);

impl ModeHandle {
    pub fn get(&self) -> ApprovalMode {
        *lock(&self.0)
    }

    pub fn set(&self, mode: ApprovalMode) {
        *lock(&self.0) = mode;
    }
}

/// The decision an answer to `session/request_permission` stands for: only a selected allow
/// option allows; a reject, "cancelled", an error or anything unrecognised denies.
pub fn decision(
    answer: Result<Result<Value, Value>, oneshot::error::RecvError>,
) -> (PermissionDecision, bool) {
    let deny = |why: &str| (PermissionDecision::Deny(why.to_string()), false);
    let result = match answer {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => return deny("the editor answered the permission request with an error"),
        Err(_) => return deny("the permission request was cancelled"),
    };
    let outcome = &result["outcome"];
    match (outcome["outcome"].as_str(), outcome["optionId"].as_str()) {
        (Some("selected"), Some(ALLOW_ONCE)) => (PermissionDecision::Allow, false),
        (Some("selected"), Some(ALLOW_ALWAYS)) => (PermissionDecision::Allow, true),
        (Some("selected"), Some(REJECT_ONCE)) => deny("the user declined"),
        (Some("cancelled"), _) => deny("the user cancelled the permission request"),
        _ => deny("the editor's answer to the permission request was not understood"),
    }
}

impl PermissionPrompter for AcpPrompter {
    async fn request_permission(
        &self,
        tool_name: &str,
        input: &Value,
        why: &str,
    ) -> PermissionDecision {
        let mode = self.mode.get();
        if mode != ApprovalMode::Prompt {
            return decide_unattended(mode, tool_name, why);
        }
        let key = crate::tui::bridge::ChatPrompter::session_key(tool_name, input);
        if lock(&self.always).contains(&key) {
            return PermissionDecision::Allow;
        }
        let mut call = lock(&self.current.0).clone().unwrap_or_else(
            || json!({"toolCallId": "unknown", "title": tool_title(tool_name, input)}),
        );
        call["content"] = text_content(&format!("needs approval: {why}"));
        let (id, answer) = lock(&self.asks).open(&self.session);
        let options = json!([
            {"optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once"},
            {"optionId": ALLOW_ALWAYS, "name": "Allow this exact call for the session", "kind": "allow_always"},
            {"optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once"},
        ]);
        send(
            &self.out,
            &wire::request(
                id,
                "session/request_permission",
                json!({"sessionId": self.session, "toolCall": call, "options": options}),
            ),
        );
        let (d, always) = decision(answer.await);
        if always {
            lock(&self.always).insert(key);
        }
        d
    }

    fn mode(&self) -> ApprovalMode {
        self.mode.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_selected_allow_option_allows() {
        let sel = |o: &str| {
            Ok(Ok(
                json!({"outcome": {"outcome": "selected", "optionId": o}}),
            ))
        };
        assert_eq!(
            decision(sel(ALLOW_ONCE)),
            (PermissionDecision::Allow, false)
        );
        assert_eq!(
            decision(sel(ALLOW_ALWAYS)),
            (PermissionDecision::Allow, true)
        );
        for denied in [
            sel(REJECT_ONCE),
            sel("allow_everything"),
            Ok(Ok(json!({"outcome": {"outcome": "cancelled"}}))),
            Ok(Ok(json!("yes"))),
            Ok(Err(json!({"code": -32603, "message": "x"}))),
        ] {
            assert!(matches!(decision(denied).0, PermissionDecision::Deny(_)));
        }
    }

    #[test]
    fn an_answer_to_a_question_never_asked_is_ignored() {
        let mut asks = Asks::default();
        let (id, mut rx) = asks.open("s1");
        assert!(!asks.answer(&json!(id + 1), Ok(json!({}))));
        assert!(!asks.answer(&json!("1"), Ok(json!({}))));
        assert!(rx.try_recv().is_err(), "still open");
        assert!(asks.answer(&json!(id), Ok(json!({"ok": 1}))));
        assert_eq!(rx.try_recv().unwrap(), Ok(json!({"ok": 1})));
        assert!(!asks.answer(&json!(id), Ok(json!({}))), "answered twice");
        let (_, mut rx2) = asks.open("s2");
        asks.cancel_session("s2");
        assert!(rx2.try_recv().is_err(), "closed: counts as a denial");
    }
}
