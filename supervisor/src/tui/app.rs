//! The screen's state and drawing: the transcript, a permission prompt when one is open, the
//! input box and the status line, laid out top to bottom. Keys come in through
//! [`App::on_key`], which says what the session should do ([`Intent`]).

use super::bridge::{Answer, PermissionAsk, UiMsg};
use super::keys::{is_ctrl, to_key};
use super::transcript::{push_wrapped, Transcript};
use crate::agent::events::RunEvent;
use crossterm::event::{KeyCode, KeyEvent};
use hanzo_line_edit::{Action, Editor, InputMode};
use hanzo_md_render::sanitize_line_for_terminal;
use ratatui::layout::{Constraint, Layout, Position};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;
use std::time::{Duration, Instant};

/// A second Ctrl-C within this long exits.
pub const DOUBLE_CTRL_C: Duration = Duration::from_secs(1);
/// The input box's greatest height (borders included); past it, its rows scroll.
pub const INPUT_MAX_HEIGHT: u16 = 10;
/// Lines of a tool's input shown in the permission prompt before the rest is counted.
pub const PROMPT_INPUT_LINES: usize = 12;

/// What the status line shows.
#[derive(Debug, Clone, Default)]
pub struct Status {
    /// The model the next turn uses.
    pub model: String,
    /// The agent's name (`code`, `plan`, `auto`, …).
    pub agent: String,
    /// The isolation tier the tools worker runs in (`A` or `B`, from its attestation).
    pub tier: String,
    /// The approval mode (`prompt`, `allow`, …).
    pub approval: String,
    /// The session's id in the run store.
    pub session: i64,
    /// Input tokens of every model request since the session began.
    pub tokens_in: u64,
    /// Output tokens of every model request since the session began.
    pub tokens_out: u64,
    /// Input tokens of the last model request: how much of the context is in use.
    pub context_used: u64,
    /// The model's context window in tokens (0: unknown, and the status line shows `ctx -`).
    pub max_context: u64,
}

/// What a key asks the session to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// Nothing for the session to do (the key changed only the screen).
    None,
    /// Send this text: a message to the agent, or a slash command.
    Submit(String),
    /// Cancel the running turn.
    CancelTurn,
    /// End the session (a second Ctrl-C in time, Ctrl-D on an empty line, `:q` in vi mode).
    Quit,
}

/// A permission question on screen, and the reason being typed after `n`.
struct Prompt {
    ask: PermissionAsk,
    reason: Option<String>,
}

/// The chat screen: what is shown and the input being typed. Owned by the UI task.
pub struct App {
    /// The conversation as rendered.
    pub transcript: Transcript,
    /// The input box's line editor, with its history.
    pub editor: Editor,
    /// What the status line shows.
    pub status: Status,
    /// A turn is running.
    pub busy: bool,
    /// One line for the status bar (a hint, an error), replaced by the next.
    pub message: Option<String>,
    prompts: std::collections::VecDeque<Prompt>,
    /// Lines scrolled up from the bottom of the transcript.
    scroll: usize,
    last_ctrl_c: Option<Instant>,
}

impl App {
    /// A screen `width` cells wide, in colour unless `color` is false, with the editor in `mode`
    /// (readline-like, emacs or vi keys).
    pub fn new(width: u16, color: bool, mode: InputMode) -> App {
        App {
            transcript: Transcript::new(width, color),
            editor: Editor::new(mode),
            status: Status::default(),
            busy: false,
            message: None,
            prompts: std::collections::VecDeque::new(),
            scroll: 0,
            last_ctrl_c: None,
        }
    }

    /// Whether a permission question is waiting.
    pub fn prompting(&self) -> bool {
        !self.prompts.is_empty()
    }

    /// Take what the loop sent.
    pub fn apply(&mut self, msg: UiMsg) {
        match msg {
            UiMsg::Event(ev) => {
                if let RunEvent::StepFinished {
                    input_tokens,
                    output_tokens,
                    ..
                } = &ev
                {
                    self.status.tokens_in += input_tokens;
                    self.status.tokens_out += output_tokens;
                    self.status.context_used = *input_tokens;
                }
                self.transcript.apply(&ev);
                self.scroll = 0;
            }
            UiMsg::Permission(ask) => self.prompts.push_back(Prompt { ask, reason: None }),
        }
    }

    /// Deny every open question (the turn is being cancelled).
    pub fn deny_open_prompts(&mut self, why: &str) {
        for p in self.prompts.drain(..) {
            let _ = p.ask.reply.send(Answer::Deny(why.to_string()));
        }
    }

    /// A key pressed at `now`.
    pub fn on_key(&mut self, ev: KeyEvent, now: Instant) -> Intent {
        if is_ctrl(&ev, 'c') {
            return self.ctrl_c(now);
        }
        if self.prompting() {
            self.prompt_key(ev);
            return Intent::None;
        }
        if is_ctrl(&ev, 'o') {
            self.transcript.expanded = !self.transcript.expanded;
            return Intent::None;
        }
        match ev.code {
            KeyCode::PageUp => {
                self.scroll += 10;
                return Intent::None;
            }
            KeyCode::PageDown => {
                self.scroll = self.scroll.saturating_sub(10);
                return Intent::None;
            }
            _ => {}
        }
        let Some(key) = to_key(&ev) else {
            return Intent::None;
        };
        match self.editor.handle(key, now) {
            Action::None => Intent::None,
            Action::Submit(text) if self.busy => {
                self.editor.set_text(&text);
                self.message = Some(
                    match super::slash::parse(&text) {
                        Some(super::slash::Slash::Compact) => {
                            "a turn is running: /compact when it has ended (Ctrl-C cancels it)"
                        }
                        _ => "a turn is running: wait for it, or Ctrl-C cancels it",
                    }
                    .into(),
                );
                Intent::None
            }
            Action::Submit(text) if text.trim().is_empty() => Intent::None,
            Action::Submit(text) => Intent::Submit(text),
            Action::Quit => Intent::Quit,
            Action::Cancel => self.ctrl_c(now),
            Action::Complete => {
                self.complete();
                Intent::None
            }
            Action::ModeChanged(m) => {
                self.message = Some(format!("input mode: {m}"));
                Intent::None
            }
            Action::Message(m) => {
                self.message = Some(m);
                Intent::None
            }
        }
    }

    fn ctrl_c(&mut self, now: Instant) -> Intent {
        let double = self
            .last_ctrl_c
            .is_some_and(|t| now.saturating_duration_since(t) < DOUBLE_CTRL_C);
        self.last_ctrl_c = Some(now);
        if double {
            return Intent::Quit;
        }
        if self.busy {
            self.deny_open_prompts("the user cancelled the turn");
            self.message = Some("cancelling the turn… (Ctrl-C again exits)".into());
            return Intent::CancelTurn;
        }
        self.editor.clear();
        self.message = Some("Ctrl-C again (or Ctrl-D) exits".into());
        Intent::None
    }

    fn complete(&mut self) {
        let text = self.editor.text();
        match super::slash::complete(&text) {
            Some(done) => self.editor.set_text(&done),
            None => {
                let c = super::slash::candidates(&text);
                if !c.is_empty() {
                    self.message = Some(c.join("  "));
                }
            }
        }
    }

    fn prompt_key(&mut self, ev: KeyEvent) {
        let Some(p) = self.prompts.front_mut() else {
            return;
        };
        let answer = match (&mut p.reason, ev.code) {
            (None, KeyCode::Char('y' | 'Y')) => Some(Answer::Once),
            (None, KeyCode::Char('a' | 'A')) => Some(Answer::Session),
            (None, KeyCode::Char('n' | 'N')) => {
                p.reason = Some(String::new());
                None
            }
            (None, KeyCode::Esc) => Some(Answer::Deny(String::new())),
            (Some(r), KeyCode::Enter) => Some(Answer::Deny(std::mem::take(r))),
            (Some(_), KeyCode::Esc) => Some(Answer::Deny(String::new())),
            (Some(r), KeyCode::Backspace) => {
                r.pop();
                None
            }
            (Some(r), KeyCode::Char(c)) if !c.is_control() && r.chars().count() < 500 => {
                r.push(c);
                None
            }
            _ => None,
        };
        if let Some(a) = answer {
            if let Some(p) = self.prompts.pop_front() {
                let _ = p.ask.reply.send(a);
            }
        }
    }

    /// Clear a pending operator's indicator once its time is up (vim).
    pub fn tick(&mut self, now: Instant) -> bool {
        self.editor.tick(now)
    }

    /// Draw everything into `f`.
    pub fn draw(&mut self, f: &mut Frame<'_>) {
        let area = f.area();
        let input = wrap_input(
            &self.editor.lines(),
            self.editor.cursor(),
            usize::from(area.width.saturating_sub(2)).max(1),
        );
        let input_h = u16::try_from(input.rows.len())
            .unwrap_or(u16::MAX)
            .saturating_add(2)
            .clamp(3, INPUT_MAX_HEIGHT);
        let rows = usize::from((area.height / 2).saturating_sub(2)).max(4);
        let prompt = self.prompt_lines(area.width.saturating_sub(2), rows);
        let prompt_h = prompt
            .as_ref()
            .map_or(0, |l| u16::try_from(l.len() + 2).unwrap_or(u16::MAX));
        let [top, mid, input_area, status] = Layout::vertical([
            Constraint::Min(1),
            Constraint::Length(prompt_h),
            Constraint::Length(input_h),
            Constraint::Length(1),
        ])
        .areas(area);
        self.transcript.set_width(top.width);
        let h = usize::from(top.height);
        let lines = self.transcript.last_lines(h.saturating_add(self.scroll));
        let max_scroll = lines.len().saturating_sub(h);
        self.scroll = self.scroll.min(max_scroll);
        let end = lines.len() - self.scroll;
        let start = end.saturating_sub(h);
        f.render_widget(Paragraph::new(lines[start..end].to_vec()), top);
        if let Some(p) = prompt {
            let block = Block::default().borders(Borders::ALL).title(" permission ");
            f.render_widget(Paragraph::new(p).block(block), mid);
        }
        self.draw_input(f, input_area, &input);
        f.render_widget(Paragraph::new(self.status_line(status.width)), status);
    }

    fn draw_input(&self, f: &mut Frame<'_>, area: ratatui::layout::Rect, input: &WrappedInput) {
        let title = format!(
            " {}{} ",
            self.editor.mode_indicator(),
            if self.busy { " · running" } else { "" }
        );
        let block = Block::default().borders(Borders::ALL).title(title);
        // The rows that fit, scrolled so that the cursor's row is the last one shown.
        let inner_h = usize::from(area.height.saturating_sub(2)).max(1);
        let (row, col) = input.cursor;
        let first = row.saturating_sub(inner_h - 1);
        let shown: Vec<Line<'static>> = input
            .rows
            .iter()
            .skip(first)
            .take(inner_h)
            .map(|r| Line::from(r.clone()))
            .collect();
        f.render_widget(Paragraph::new(shown).block(block), area);
        if !self.prompting() {
            let x = area.x + 1 + u16::try_from(col).unwrap_or(0);
            let y = area.y + 1 + u16::try_from(row - first).unwrap_or(0);
            f.set_cursor_position(Position::new(x.min(area.right().saturating_sub(2)), y));
        }
    }

    /// The open question in at most `rows` lines: what would not fit is counted, never
    /// silently cut (consent must show what will run).
    fn prompt_lines(&self, width: u16, rows: usize) -> Option<Vec<Line<'static>>> {
        let p = self.prompts.front()?;
        let width = usize::from(width.max(20));
        let bold = Style::default().add_modifier(Modifier::BOLD);
        let plain = Style::default();
        let mut out = Vec::new();
        push_wrapped(
            &mut out,
            "",
            &format!("allow {}?", sanitize_line_for_terminal(&p.ask.tool)),
            bold,
            width,
        );
        push_wrapped(
            &mut out,
            "asked by: ",
            &sanitize_line_for_terminal(&p.ask.why),
            plain,
            width,
        );
        let text = prompt_input_text(&p.ask.tool, &p.ask.input);
        let mut body = Vec::new();
        for l in text.split('\n') {
            push_wrapped(
                &mut body,
                "  │ ",
                &sanitize_line_for_terminal(l),
                plain,
                width,
            );
        }
        let room = rows
            .saturating_sub(out.len() + 2)
            .clamp(1, PROMPT_INPUT_LINES);
        if body.len() > room {
            let hidden = body.len() - (room - 1);
            body.truncate(room - 1);
            push_wrapped(
                &mut body,
                "  │ ",
                &format!("[… {hidden} more lines not shown: deny, and ask for a shorter call]"),
                bold,
                width,
            );
        }
        out.extend(body);
        let keys = match &p.reason {
            None => {
                "[y] allow once   [a] allow for this session   [n] deny with a reason".to_string()
            }
            Some(r) => format!(
                "deny, reason: {}▏ (Enter denies, Esc denies without one)",
                sanitize_line_for_terminal(r)
            ),
        };
        push_wrapped(&mut out, "", &keys, bold, width);
        Some(out)
    }

    /// The status line at `width` cells: the long form when it fits, else a short one with
    /// the model last, so an 80-column terminal shows every other field (the session too) and
    /// as much of a long model name as fits. A message goes first and may push the end out.
    fn status_line(&self, width: u16) -> Line<'static> {
        let s = &self.status;
        let ctx = (s.context_used.saturating_mul(100))
            .checked_div(s.max_context)
            .map_or_else(|| "-".to_string(), |p| format!("{p}%"));
        let model = sanitize_line_for_terminal(&s.model);
        let long = format!(
            "{} · tier {} · approval {} · {}/{} tok · ctx {ctx} · {model} · session {}",
            s.agent, s.tier, s.approval, s.tokens_in, s.tokens_out, s.session
        );
        let mut text = if long.chars().count() <= usize::from(width) {
            long
        } else {
            format!(
                "{} · tier {} · {} · {}/{} tok · ctx {ctx} · #{} · {model}",
                s.agent,
                s.tier,
                s.approval,
                short_count(s.tokens_in),
                short_count(s.tokens_out),
                s.session
            )
        };
        if let Some(m) = &self.message {
            text = format!("{} │ {text}", sanitize_line_for_terminal(m));
        }
        Line::from(Span::styled(
            text,
            Style::default().add_modifier(Modifier::REVERSED),
        ))
    }
}

/// A token count in at most five characters: `950`, `4.8k`, `120k`, `3.4M`.
fn short_count(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=99_999 => format!("{}.{}k", n / 1000, n % 1000 / 100),
        100_000..=999_999 => format!("{}k", n / 1000),
        _ => format!("{}.{}M", n / 1_000_000, n % 1_000_000 / 100_000),
    }
}

/// The input box's text as screen rows of at most `width` cells, and where its cursor is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrappedInput {
    /// Terminal-safe rows: each logical line, broken wherever the next character would not
    /// fit (a wide character never straddles two rows).
    pub rows: Vec<String>,
    /// The cursor's (row, cell column) in `rows`.
    pub cursor: (usize, usize),
}

/// Wrap `lines` (the editor's, at least one) at `width` cells; `cursor` is the editor's
/// (line, character column). A character the terminal must not see (a tab, a bidi control)
/// takes the width of its visible escape. A cursor at the end of a full row goes to the start
/// of the next one, as a terminal puts it.
pub fn wrap_input(lines: &[String], cursor: (usize, usize), width: usize) -> WrappedInput {
    use unicode_width::UnicodeWidthChar as _;
    let width = width.max(1);
    let mut rows = Vec::new();
    let mut at = (0, 0);
    for (li, line) in lines.iter().enumerate() {
        let mut row = String::new();
        let mut used = 0;
        let mut glyph = String::new();
        let chars: Vec<char> = line.chars().collect();
        for (ci, c) in chars.iter().enumerate() {
            glyph.clear();
            if hanzo_md_render::is_unsafe_for_terminal(*c) {
                glyph.push_str(&sanitize_line_for_terminal(&c.to_string()));
            } else {
                glyph.push(*c);
            }
            for (gi, g) in glyph.chars().enumerate() {
                let w = g.width().unwrap_or(0);
                if used + w > width && used > 0 {
                    rows.push(std::mem::take(&mut row));
                    used = 0;
                }
                if gi == 0 && (li, ci) == cursor {
                    at = (rows.len(), used);
                }
                row.push(g);
                used += w;
            }
        }
        if li == cursor.0 && cursor.1 >= chars.len() {
            if used >= width {
                rows.push(std::mem::take(&mut row));
                used = 0;
            }
            at = (rows.len(), used);
        }
        rows.push(row);
    }
    WrappedInput { rows, cursor: at }
}

/// The input as the prompt shows it: the command for `bash`, the path or pattern for the file
/// tools, then the other fields as JSON.
fn prompt_input_text(tool: &str, input: &serde_json::Value) -> String {
    let key = match tool {
        "bash" => "command",
        _ if input.get("path").is_some() => "path",
        _ => "pattern",
    };
    let main = input.get(key).and_then(serde_json::Value::as_str);
    let rest: serde_json::Map<String, serde_json::Value> = input
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| main.is_none() || k.as_str() != key)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let mut text = main.unwrap_or_default().to_string();
    if !rest.is_empty() {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&serde_json::Value::Object(rest).to_string());
    } else if !input.is_object() {
        text = input.to_string();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::bridge::PermissionAsk;
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use serde_json::json;

    fn draw(app: &mut App, w: u16, h: u16) -> ratatui::buffer::Buffer {
        let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
        t.draw(|f| app.draw(f)).expect("draw");
        t.backend().buffer().clone()
    }

    fn text(buf: &ratatui::buffer::Buffer) -> String {
        let area = buf.area;
        let mut out = String::new();
        for y in 0..area.height {
            for x in 0..area.width {
                out.push_str(buf[(x, y)].symbol());
            }
            out.push('\n');
        }
        out
    }

    fn ev(app: &mut App, e: RunEvent) {
        app.apply(UiMsg::Event(e));
    }

    fn ask(app: &mut App, command: &str) -> tokio::sync::oneshot::Receiver<Answer> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        app.apply(UiMsg::Permission(PermissionAsk {
            tool: "bash".into(),
            input: json!({"command": command}),
            why: "rule bash(*) (project, #2) says prompt".into(),
            reply,
        }));
        rx
    }

    fn key(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
    }

    fn tool(app: &mut App, id: &str, command: &str, output: &str) {
        ev(
            app,
            RunEvent::ToolCall {
                id: id.into(),
                name: "bash".into(),
                input: json!({"command": command}),
            },
        );
        ev(
            app,
            RunEvent::ToolDecision {
                id: id.into(),
                allowed: true,
                decided_by: hanzo_store::DecidedBy::Rule,
                reason: "allowed".into(),
            },
        );
        ev(
            app,
            RunEvent::ToolResult {
                id: id.into(),
                is_error: false,
                preview: output.into(),
                duration_ms: 1200,
            },
        );
    }

    /// No cell holds a C0 or C1 control character, whatever the model, a command or a prompt
    /// carried.
    #[test]
    fn hostile_text_never_becomes_a_raw_control_in_a_cell() {
        let mut app = App::new(80, true, InputMode::Default);
        let hostile = "a\u{1b}]52;c;Y2xpcA==\u{7}b\u{1b}[2Jc\u{9b}31md\r\u{8}e\u{202e}f";
        ev(
            &mut app,
            RunEvent::Text {
                text: format!("reply {hostile}\n\n```\ncode {hostile}\n```\n"),
            },
        );
        tool(
            &mut app,
            "t1",
            &format!("echo {hostile}"),
            &format!("out {hostile}\nline2"),
        );
        let _rx = ask(&mut app, &format!("rm {hostile}"));
        app.message = Some(format!("msg {hostile}"));
        app.transcript
            .notice(&format!("notice {hostile}\nsecond {hostile}"));
        app.transcript.error(&format!("git failed: {hostile}"));
        app.transcript.push_user(&format!("user {hostile}"));
        app.editor.insert_str(&format!("typed {hostile}"));
        let buf = draw(&mut app, 80, 24);
        for cell in buf.content() {
            for c in cell.symbol().chars() {
                let code = u32::from(c);
                assert!(
                    code >= 0x20 && code != 0x7f && !(0x80..=0x9f).contains(&code),
                    "a raw control {code:#x} in a cell"
                );
            }
        }
        let screen = text(&buf);
        assert!(screen.contains("␛]52;c;Y2xpcA==␇"), "{screen}");
        assert!(screen.contains("allow bash?"), "{screen}");
        assert!(
            screen.contains("asked by: rule bash(*) (project, #2) says prompt"),
            "{screen}"
        );
    }

    #[test]
    fn a_long_command_in_the_prompt_is_counted_not_silently_cut() {
        let mut app = App::new(80, true, InputMode::Default);
        let command: Vec<String> = (1..=100).map(|i| format!("echo line{i}")).collect();
        let _rx = ask(&mut app, &command.join("\n"));
        let screen = text(&draw(&mut app, 80, 24));
        assert!(screen.contains("│ echo line1 "), "{screen}");
        assert!(screen.contains("more lines not shown"), "{screen}");
        assert!(screen.contains("[y] allow once"), "{screen}");
    }

    #[test]
    fn prompt_keys_answer_once_for_the_session_or_deny_with_a_reason() {
        let mut app = App::new(80, true, InputMode::Default);
        let now = Instant::now();
        let mut rx = ask(&mut app, "ls");
        app.on_key(key('y'), now);
        assert_eq!(rx.try_recv(), Ok(Answer::Once));
        let mut rx = ask(&mut app, "ls");
        app.on_key(key('a'), now);
        assert_eq!(rx.try_recv(), Ok(Answer::Session));
        let mut rx = ask(&mut app, "rm -rf /");
        for c in "nno way".chars() {
            app.on_key(key(c), now);
        }
        assert!(rx.try_recv().is_err(), "answered before Enter");
        app.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE), now);
        assert_eq!(rx.try_recv(), Ok(Answer::Deny("no way".into())));
        assert!(!app.prompting());
        // Keys while asked never reach the input box.
        assert!(app.editor.is_empty());
    }

    #[test]
    fn ctrl_c_cancels_a_turn_and_a_second_within_a_second_exits() {
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        let t0 = Instant::now();
        let mut app = App::new(80, true, InputMode::Default);
        app.busy = true;
        assert_eq!(app.on_key(ctrl_c, t0), Intent::CancelTurn);
        assert_eq!(
            app.on_key(ctrl_c, t0 + Duration::from_millis(900)),
            Intent::Quit
        );
        let mut idle = App::new(80, true, InputMode::Default);
        idle.editor.insert_str("draft");
        assert_eq!(idle.on_key(ctrl_c, t0), Intent::None);
        assert!(idle.editor.is_empty(), "Ctrl-C clears the line");
        assert_eq!(
            idle.on_key(ctrl_c, t0 + Duration::from_millis(1500)),
            Intent::None
        );
        let ctrl_d = KeyEvent::new(KeyCode::Char('d'), KeyModifiers::CONTROL);
        assert_eq!(
            idle.on_key(ctrl_d, t0 + Duration::from_secs(5)),
            Intent::Quit
        );
    }

    #[test]
    fn tool_output_is_folded_and_ctrl_o_expands_it() {
        let mut app = App::new(80, true, InputMode::Default);
        tool(&mut app, "t1", "cargo test", "l1\nl2\nl3\nl4\nl5");
        let screen = text(&draw(&mut app, 80, 24));
        assert!(
            screen.contains("✓ bash cargo test — allowed (rule) · 1.2 s"),
            "{screen}"
        );
        assert!(
            screen.contains("│ l1") && !screen.contains("│ l3"),
            "{screen}"
        );
        assert!(
            screen.contains("4 more lines, Ctrl-O shows them"),
            "{screen}"
        );
        app.on_key(
            KeyEvent::new(KeyCode::Char('o'), KeyModifiers::CONTROL),
            Instant::now(),
        );
        let screen = text(&draw(&mut app, 80, 24));
        assert!(screen.contains("│ l5"), "{screen}");
    }

    fn rows(lines: &[&str], cursor: (usize, usize), width: usize) -> WrappedInput {
        let lines: Vec<String> = lines.iter().map(|l| (*l).to_string()).collect();
        wrap_input(&lines, cursor, width)
    }

    #[test]
    fn wrapping_breaks_lines_at_the_width_and_places_the_cursor() {
        let w = rows(&[&"a".repeat(25)], (0, 25), 10);
        assert_eq!(w.rows, ["a".repeat(10), "a".repeat(10), "a".repeat(5)]);
        assert_eq!(w.cursor, (2, 5));
        assert_eq!(rows(&[&"a".repeat(25)], (0, 10), 10).cursor, (1, 0));
        assert_eq!(rows(&[&"a".repeat(25)], (0, 9), 10).cursor, (0, 9));
        // A full row with the cursor after it: the cursor starts the next row, as a terminal's.
        let full = rows(&["0123456789"], (0, 10), 10);
        assert_eq!(full.rows, ["0123456789", ""]);
        assert_eq!(full.cursor, (1, 0));
        assert_eq!(rows(&["0123456789"], (0, 9), 10).rows, ["0123456789"]);
        // Later lines count the rows of the earlier ones.
        let multi = rows(&["first", "xxxxxxxxxxxx"], (1, 7), 5);
        assert_eq!(multi.rows, ["first", "xxxxx", "xxxxx", "xx"]);
        assert_eq!(multi.cursor, (2, 2));
        assert_eq!(rows(&["", ""], (1, 0), 5).cursor, (1, 0));
        // A wide character never straddles two rows; its width is two cells.
        let wide = rows(&["ab你好c"], (0, 3), 3);
        assert_eq!(wide.rows, ["ab", "你", "好c"]);
        assert_eq!(wide.cursor, (2, 0));
        assert_eq!(rows(&["ab你好c"], (0, 4), 3).cursor, (2, 2));
        // A tab and a bidi override take their visible escapes' cells, never raw.
        let esc = rows(&["a\tb\u{202e}c"], (0, 4), 40);
        assert_eq!(esc.rows, ["a␉b<U+202E>c"]);
        assert_eq!(esc.cursor, (0, 11));
    }

    fn cursor_after_draw(app: &mut App, w: u16, h: u16) -> (String, Position) {
        let mut t = Terminal::new(TestBackend::new(w, h)).expect("terminal");
        t.draw(|f| app.draw(f)).expect("draw");
        let at = t.get_cursor_position().expect("cursor");
        (text(t.backend().buffer()), at)
    }

    /// The rows of the input box on `screen` (between its borders), trimmed.
    fn box_rows(screen: &str) -> Vec<String> {
        let lines: Vec<&str> = screen.lines().collect();
        let top = lines
            .iter()
            .rposition(|l| l.starts_with('┌'))
            .expect("the box's top border");
        lines[top + 1..]
            .iter()
            .take_while(|l| !l.starts_with('└'))
            .map(|l| {
                l.trim_start_matches('│')
                    .trim_end()
                    .trim_end_matches('│')
                    .trim_end()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn a_long_input_line_wraps_in_the_box_which_grows_then_scrolls() {
        let mut app = App::new(40, true, InputMode::Default);
        // 103 characters in 38 columns: three rows, the box five high with its borders.
        app.editor.insert_str(&format!("{}END", "x".repeat(100)));
        let (screen, at) = cursor_after_draw(&mut app, 40, 12);
        assert_eq!(
            box_rows(&screen),
            [
                "x".repeat(38),
                "x".repeat(38),
                format!("{}END", "x".repeat(24))
            ]
        );
        let lines: Vec<&str> = screen.lines().collect();
        assert!(
            lines[6].starts_with('┌') && lines[10].starts_with('└'),
            "{screen}"
        );
        assert_eq!(at, Position::new(1 + 27, 9), "after END on the third row");
        for l in &lines {
            assert_eq!(l.chars().count(), 40, "nothing runs sideways: {l:?}");
        }
        // Longer than the box: it stops at its greatest height and shows the cursor's rows.
        let mut long = App::new(40, true, InputMode::Default);
        long.editor
            .insert_str(&format!("START{}END", "y".repeat(610)));
        let (screen, at) = cursor_after_draw(&mut long, 40, 24);
        let shown = box_rows(&screen);
        assert_eq!(shown.len(), usize::from(INPUT_MAX_HEIGHT - 2), "{screen}");
        assert!(shown.last().is_some_and(|r| r.ends_with("END")), "{screen}");
        assert!(
            !screen.contains("START"),
            "scrolled to the cursor: {screen}"
        );
        assert_eq!(at.y, 21, "the cursor on the box's last row");
        // Home: the first rows come back into view, the cursor at the very start.
        long.on_key(
            KeyEvent::new(KeyCode::Home, KeyModifiers::NONE),
            Instant::now(),
        );
        let (screen, at) = cursor_after_draw(&mut long, 40, 24);
        assert!(box_rows(&screen)[0].starts_with("STARTy"), "{screen}");
        assert!(!screen.contains("END"), "{screen}");
        assert_eq!(at, Position::new(1, 14));
    }

    #[test]
    fn the_cursor_follows_wrapped_rows_in_emacs_and_vim_modes() {
        let ctrl = |c| KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL);
        let alt = |c| KeyEvent::new(KeyCode::Char(c), KeyModifiers::ALT);
        let now = Instant::now();
        // 20 columns: 18 inside the box. "alpha beta gamma delta epsilon" wraps after 18.
        let text_in = "alpha beta gamma delta epsilon";
        let mut emacs = App::new(20, true, InputMode::Emacs);
        emacs.editor.insert_str(text_in);
        let (screen, at) = cursor_after_draw(&mut emacs, 20, 12);
        assert_eq!(box_rows(&screen), ["alpha beta gamma d", "elta epsilon"]);
        assert_eq!((at.x, at.y), (1 + 12, 9));
        emacs.on_key(ctrl('a'), now);
        assert_eq!(cursor_after_draw(&mut emacs, 20, 12).1, Position::new(1, 8));
        // M-f three times: after "gamma", on the first row; once more: after "delta".
        for _ in 0..3 {
            emacs.on_key(alt('f'), now);
        }
        assert_eq!(
            cursor_after_draw(&mut emacs, 20, 12).1,
            Position::new(1 + 16, 8)
        );
        emacs.on_key(alt('f'), now);
        assert_eq!(
            cursor_after_draw(&mut emacs, 20, 12).1,
            Position::new(1 + 4, 9)
        );
        emacs.on_key(ctrl('e'), now);
        assert_eq!(
            cursor_after_draw(&mut emacs, 20, 12).1,
            Position::new(1 + 12, 9)
        );

        let mut vim = App::new(20, true, InputMode::Vim);
        vim.editor.insert_str(text_in);
        vim.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE), now);
        // Normal mode: the cursor on the last character, "n" of "epsilon".
        assert_eq!(
            cursor_after_draw(&mut vim, 20, 12).1,
            Position::new(1 + 11, 9)
        );
        vim.on_key(key('0'), now);
        assert_eq!(cursor_after_draw(&mut vim, 20, 12).1, Position::new(1, 8));
        // f then d: onto the "d" that ends the first row; then l: the start of the second.
        vim.on_key(key('f'), now);
        vim.on_key(key('d'), now);
        assert_eq!(
            cursor_after_draw(&mut vim, 20, 12).1,
            Position::new(1 + 17, 8)
        );
        vim.on_key(key('l'), now);
        assert_eq!(cursor_after_draw(&mut vim, 20, 12).1, Position::new(1, 9));
        vim.on_key(key('$'), now);
        assert_eq!(
            cursor_after_draw(&mut vim, 20, 12).1,
            Position::new(1 + 11, 9)
        );
    }

    #[test]
    fn at_80x24_a_long_input_keeps_the_layout() {
        let mut app = App::new(80, true, InputMode::Default);
        app.transcript.notice("earlier");
        app.editor.insert_str(&"word ".repeat(400));
        let (screen, at) = cursor_after_draw(&mut app, 80, 24);
        let lines: Vec<&str> = screen.lines().collect();
        assert_eq!(lines.len(), 24);
        let h = usize::from(INPUT_MAX_HEIGHT);
        assert!(
            lines[23 - h].starts_with('┌') && lines[22].starts_with('└'),
            "{screen}"
        );
        assert!(lines.iter().all(|l| l.chars().count() == 80), "{screen}");
        assert_eq!(at.y, 21, "the cursor on the box's last row");
        assert!(
            screen.contains("earlier"),
            "the transcript keeps its rows: {screen}"
        );
    }

    #[test]
    fn compact_while_a_turn_runs_is_refused_and_kept_in_the_box() {
        let mut app = App::new(80, true, InputMode::Default);
        app.busy = true;
        app.editor.insert_str("/compact");
        let got = app.on_key(
            KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE),
            Instant::now(),
        );
        assert_eq!(got, Intent::None);
        assert_eq!(app.editor.text(), "/compact");
        assert_eq!(
            app.message.as_deref(),
            Some("a turn is running: /compact when it has ended (Ctrl-C cancels it)")
        );
    }

    #[test]
    fn a_hostile_summary_is_shown_inert() {
        let mut app = App::new(80, true, InputMode::Default);
        app.transcript
            .push_reply("summary \u{1b}]2;pwned\u{7} and \u{1b}[2J done");
        let buf = draw(&mut app, 80, 24);
        for cell in buf.content() {
            for c in cell.symbol().chars() {
                let code = u32::from(c);
                assert!(code >= 0x20 && code != 0x7f, "a raw control {code:#x}");
            }
        }
        assert!(text(&buf).contains("␛]2;pwned␇"), "{}", text(&buf));
    }

    #[test]
    fn the_status_line_keeps_every_field_at_80_columns() {
        let mut app = App::new(80, true, InputMode::Default);
        app.status = Status {
            model: "claude-sonnet-4-20250514".into(),
            agent: "code".into(),
            tier: "B".into(),
            approval: "prompt".into(),
            session: 12,
            tokens_in: 48_213,
            tokens_out: 1_234,
            context_used: 20_000,
            max_context: 200_000,
        };
        let screen = text(&draw(&mut app, 80, 24));
        let last = screen.lines().last().expect("a status line").trim_end();
        assert_eq!(
            last,
            "code · tier B · prompt · 48.2k/1.2k tok · ctx 10% · #12 · claude-sonnet-4-202505"
        );
        let screen = text(&draw(&mut app, 160, 24));
        assert!(
            screen.contains(
                "code · tier B · approval prompt · 48213/1234 tok · ctx 10% · \
                 claude-sonnet-4-20250514 · session 12"
            ),
            "{screen}"
        );
        assert_eq!(short_count(999_999), "999k");
        assert_eq!(short_count(3_456_789), "3.4M");
    }

    #[test]
    fn tab_completes_a_slash_command_in_the_box() {
        let mut app = App::new(80, true, InputMode::Default);
        app.editor.insert_str("/perm");
        app.on_key(
            KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE),
            Instant::now(),
        );
        assert_eq!(app.editor.text(), "/permissions ");
    }
}
