//! How `run` shows a run as it goes: one JSON event per line (`--json`), or the live view — the
//! model's text on stdout as it streams; tool calls, decisions, retries and a spinner on stderr;
//! a summary at the end. The split holds off a terminal too, so `hanzo-dev run … > answer.txt`
//! keeps the model's answer apart from the progress lines.
//!
//! Everything the live view prints that a model, a tool or a file could have shaped goes through
//! `crate::term` first: no escape sequence from them reaches the terminal.

use crate::agent::approval::summarize_input;
use crate::agent::events::{EventSink, RunEvent};
use crate::term::{sanitize_for_terminal, sanitize_line_for_terminal};
use hanzo_store::DecidedBy;
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `--json`: one event per line on stdout.
pub struct JsonLines;

impl EventSink for JsonLines {
    fn emit(&self, event: &RunEvent) {
        let line = serde_json::to_string(event).expect("run events always serialize");
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// The live view.
pub struct TerminalView {
    spinner: Option<Spinner>,
    names: Mutex<HashMap<String, String>>,
    /// The model's text on stdout does not end in a newline yet.
    mid_line: AtomicBool,
    /// Calls of the current step refused by a cap, shown as one line at the step's end.
    capped: AtomicU32,
}

impl Default for TerminalView {
    fn default() -> Self {
        Self::new()
    }
}

impl TerminalView {
    /// A view on stderr, with a spinner when stderr is a terminal.
    pub fn new() -> TerminalView {
        TerminalView {
            spinner: std::io::stderr().is_terminal().then(Spinner::start),
            names: Mutex::new(HashMap::new()),
            mid_line: AtomicBool::new(false),
            capped: AtomicU32::new(0),
        }
    }

    /// End the model's text line before anything else is shown.
    fn end_text_line(&self) {
        if self.mid_line.swap(false, Ordering::Relaxed) {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(b"\n");
            let _ = out.flush();
        }
    }

    fn spin(&self, label: Option<String>) {
        if let Some(s) = &self.spinner {
            s.set(label);
        }
    }

    fn name_of(&self, id: &str) -> String {
        self.names
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
            .unwrap_or_default()
    }

    fn flush_capped(&self, err: &mut dyn Write) {
        let n = self.capped.swap(0, Ordering::Relaxed);
        if n > 1 {
            let _ = writeln!(err, "  … and {} more calls refused by the same cap", n - 1);
        }
    }
}

impl EventSink for TerminalView {
    fn emit(&self, event: &RunEvent) {
        if !matches!(event, RunEvent::Text { .. } | RunEvent::StepFinished { .. }) {
            self.end_text_line();
        }
        let mut err = std::io::stderr().lock();
        match event {
            RunEvent::Text { text } => {
                self.spin(None);
                let mut out = std::io::stdout().lock();
                let shown = sanitize_for_terminal(text);
                let _ = out.write_all(shown.as_bytes());
                let _ = out.flush();
                self.mid_line
                    .store(!text.ends_with('\n'), Ordering::Relaxed);
            }
            RunEvent::StepStarted { .. } => self.spin(Some("thinking".into())),
            RunEvent::ToolCall { id, name, input } => {
                self.spin(None);
                self.names
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id.clone(), name.clone());
                // A call refused by a cap is shown once per step, not once per call.
                if self.capped.load(Ordering::Relaxed) == 0 {
                    let _ = writeln!(
                        err,
                        "\n● {}  {}",
                        sanitize_line_for_terminal(name),
                        summarize_input(name, input)
                    );
                }
            }
            RunEvent::ToolDecision {
                id,
                allowed,
                decided_by,
                reason,
            } => {
                if *allowed {
                    self.spin(Some(format!(
                        "running {}",
                        sanitize_line_for_terminal(&self.name_of(id))
                    )));
                } else if *decided_by == DecidedBy::Limit {
                    if self.capped.fetch_add(1, Ordering::Relaxed) == 0 {
                        let _ = writeln!(
                            err,
                            "  ✗ refused ({decided_by}): {}",
                            sanitize_line_for_terminal(reason)
                        );
                    }
                } else {
                    let _ = writeln!(
                        err,
                        "  ✗ denied ({decided_by}): {}",
                        sanitize_line_for_terminal(reason)
                    );
                }
            }
            RunEvent::ToolResult {
                is_error,
                preview,
                duration_ms,
                ..
            } => {
                self.spin(Some("thinking".into()));
                if self.capped.load(Ordering::Relaxed) == 0 {
                    let _ = writeln!(err, "{}", result_line(*is_error, preview, *duration_ms));
                }
            }
            RunEvent::StepFinished { .. } => self.flush_capped(&mut err),
            other => {
                self.spin(None);
                if let Some(text) = describe(other) {
                    let _ = writeln!(err, "{text}");
                }
            }
        }
    }
}

/// `  ✓ 12 ms, 3 lines` or `  ✗ 5 ms, 1 line: the error's first line`.
fn result_line(is_error: bool, preview: &str, duration_ms: u64) -> String {
    let first = preview.lines().next().unwrap_or("");
    let lines = preview.lines().count();
    format!(
        "  {} {duration_ms} ms, {lines} line{}{}",
        if is_error { "✗" } else { "✓" },
        if lines == 1 { "" } else { "s" },
        if is_error && !first.is_empty() {
            format!(": {}", sanitize_line_for_terminal(first))
        } else {
            String::new()
        }
    )
}

/// The stderr lines of the events that are not about the model's text or a tool call.
pub fn describe(event: &RunEvent) -> Option<String> {
    Some(match event {
        RunEvent::RunStarted {
            run_id,
            agent,
            model,
            isolation,
            approval,
            dangerous_workspace,
            ..
        } => {
            let mut s = format!(
                "run {run_id}: agent {}, model {}, isolation tier {isolation}, approval {approval}",
                sanitize_line_for_terminal(agent),
                sanitize_line_for_terminal(model)
            );
            if dangerous_workspace.is_some() {
                s.push_str(" (dangerous workspace: allowed by --allow-dangerous-workspace)");
            }
            s
        }
        RunEvent::StageStarted { stage } => {
            format!("\n== stage: {} ==", sanitize_line_for_terminal(stage))
        }
        RunEvent::ModelRetry {
            attempt,
            max_attempts,
            delay_ms,
            reason,
        } => format!(
            "  model request attempt {attempt} of {max_attempts} failed ({}); retrying in {:.1} s",
            sanitize_line_for_terminal(reason),
            *delay_ms as f64 / 1000.0
        ),
        RunEvent::Compacted {
            dropped_messages,
            summarized,
            tokens_before,
            tokens_after,
        } => format!(
            "\n(compacted {dropped_messages} messages, {} : {tokens_before} → {tokens_after} \
             tokens)",
            if *summarized {
                "summarized"
            } else {
                "truncated"
            }
        ),
        RunEvent::RunFinished {
            run_id,
            status,
            outcome,
            steps,
            input_tokens,
            output_tokens,
            duration_ms,
            tool_calls,
            denied_calls,
        } => {
            let denied = if *denied_calls > 0 {
                format!(", {denied_calls} of {tool_calls} tool calls denied")
            } else {
                String::new()
            };
            format!(
                "\n\nrun {run_id} {status}: {}\n{steps} steps{denied}, {input_tokens} tokens in / \
                 {output_tokens} out, {:.1} s. The record: hanzo-dev runs show {run_id}",
                sanitize_line_for_terminal(outcome),
                *duration_ms as f64 / 1000.0
            )
        }
        RunEvent::Egress(e) => format!("  ⇄ egress: {}", e.summary),
        RunEvent::Text { .. }
        | RunEvent::StepStarted { .. }
        | RunEvent::ToolCall { .. }
        | RunEvent::ToolDecision { .. }
        | RunEvent::ToolProgress { .. }
        | RunEvent::ToolResult { .. }
        | RunEvent::StepFinished { .. } => return None,
    })
}

/// A one-line spinner on stderr, drawn by its own thread while a label is set.
struct Spinner {
    label: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
}

impl Spinner {
    fn start() -> Spinner {
        let label: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (label.clone(), stop.clone());
        std::thread::spawn(move || {
            const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
            let mut i = 0usize;
            while !s.load(Ordering::Relaxed) {
                if let Some(text) = l.lock().unwrap_or_else(|p| p.into_inner()).as_deref() {
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r{} {text}\x1b[K", FRAMES[i % FRAMES.len()]);
                    let _ = err.flush();
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Spinner { label, stop }
    }

    fn set(&self, label: Option<String>) {
        let mut l = self.label.lock().unwrap_or_else(|p| p.into_inner());
        if l.is_some() && label.is_none() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
        *l = label;
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.set(None);
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_of_model_shaped_text_are_inert() {
        let finished = RunEvent::RunFinished {
            run_id: 3,
            status: "failed".into(),
            outcome: "done\x1b]52;c;cm0gLXJm\x07\x1b[2J".into(),
            steps: 2,
            input_tokens: 1,
            output_tokens: 2,
            duration_ms: 1500,
            tool_calls: 7,
            denied_calls: 7,
        };
        let text = describe(&finished).expect("shown");
        assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
        assert!(text.contains("done␛]52;c;cm0gLXJm␇␛[2J"), "{text}");
        assert!(text.contains("2 steps, 7 of 7 tool calls denied"), "{text}");
        let retry = RunEvent::ModelRetry {
            attempt: 2,
            max_attempts: 5,
            delay_ms: 1200,
            reason: "connection refused".into(),
        };
        assert_eq!(
            describe(&retry).expect("shown"),
            "  model request attempt 2 of 5 failed (connection refused); retrying in 1.2 s"
        );
        assert_eq!(
            result_line(true, "error: \x1b[31mbad\nmore", 4),
            "  ✗ 4 ms, 2 lines: error: ␛[31mbad"
        );
    }
}
