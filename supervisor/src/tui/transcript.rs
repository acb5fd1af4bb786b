//! What the conversation shows: the user's messages, the assistant's replies streamed through
//! `hanzo-md-render`, each tool call as one compact line with its decision, duration and folded
//! output, and notices. Everything comes out as ratatui lines no wider than the width (code
//! lines are clipped by the widget, never wrapped), every cell terminal-safe.

use crate::agent::events::RunEvent;
use hanzo_md_render::{
    sanitize_line_for_terminal, Color as MdColor, Line as MdLine, MarkdownStream, RenderOptions,
};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthChar;

/// Output lines of a folded tool call; the rest shows when expanded.
pub const FOLDED_LINES: usize = 1;
/// Output lines of an expanded tool call before the rest is counted, not shown.
pub const EXPANDED_LINES: usize = 200;

/// An assistant reply: its raw text (to re-render on a resize) and what streaming made of it.
struct Reply {
    raw: String,
    stream: Option<MarkdownStream>,
    lines: Vec<MdLine>,
    preview: Vec<MdLine>,
}

impl Reply {
    fn new(opts: &RenderOptions) -> Reply {
        Reply {
            raw: String::new(),
            stream: Some(MarkdownStream::new(opts.clone())),
            lines: Vec::new(),
            preview: Vec::new(),
        }
    }

    fn push(&mut self, text: &str) {
        self.raw.push_str(text);
        if let Some(s) = &mut self.stream {
            self.lines.extend(s.push(text));
            self.preview = s.preview();
        }
    }

    fn finish(&mut self) {
        if let Some(s) = self.stream.take() {
            self.lines.extend(s.finish());
            self.preview.clear();
        }
    }

    fn rerender(&mut self, opts: &RenderOptions) {
        if self.stream.is_some() {
            let mut s = MarkdownStream::new(opts.clone());
            self.lines = s.push(&self.raw);
            self.preview = s.preview();
            self.stream = Some(s);
        } else {
            self.lines = hanzo_md_render::render(&self.raw, opts);
        }
    }
}

/// One tool call as the transcript shows it.
struct ToolEntry {
    id: String,
    name: String,
    /// The call's main argument on one line (the command, the path).
    summary: String,
    decision: Option<(bool, String, String)>,
    result: Option<(bool, String, u64)>,
}

enum Entry {
    User(String),
    Reply(Box<Reply>),
    Tool(ToolEntry),
    Notice { text: String, error: bool },
}

/// The whole conversation on screen.
pub struct Transcript {
    entries: Vec<Entry>,
    opts: RenderOptions,
    /// Whether tool outputs are expanded (Ctrl-O toggles).
    pub expanded: bool,
}

impl Transcript {
    /// An empty transcript; `color: false` for `NO_COLOR` (attributes stay, colours go).
    pub fn new(width: u16, color: bool) -> Transcript {
        let mut opts = RenderOptions::new(Some(width.max(10)));
        opts.color = color;
        Transcript {
            entries: Vec::new(),
            opts,
            expanded: false,
        }
    }

    /// Whether colours are drawn (false under `NO_COLOR`).
    pub fn color(&self) -> bool {
        self.opts.color
    }

    /// Re-render at a new width (a resize): replies come out exactly as streaming at that
    /// width would have made them.
    pub fn set_width(&mut self, width: u16) {
        let width = width.max(10);
        if self.opts.width == Some(width) {
            return;
        }
        self.opts.width = Some(width);
        for e in &mut self.entries {
            if let Entry::Reply(r) = e {
                r.rerender(&self.opts);
            }
        }
    }

    /// Forget every entry (`/clear`).
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// A message the person sent, shown as typed (made terminal-safe line by line); it ends the
    /// reply before it.
    pub fn push_user(&mut self, text: &str) {
        self.finish_reply();
        self.entries.push(Entry::User(safe_lines(text)));
    }

    /// A line of the UI's own, which may quote what came from outside (git's output, a
    /// server's tool description, a file name): kept terminal-safe line by line.
    pub fn notice(&mut self, text: &str) {
        self.entries.push(Entry::Notice {
            text: safe_lines(text),
            error: false,
        });
    }

    /// Like [`Transcript::notice`], drawn as an error.
    pub fn error(&mut self, text: &str) {
        self.entries.push(Entry::Notice {
            text: safe_lines(text),
            error: true,
        });
    }

    /// A reply of the assistant's that arrives whole (a resumed session's history).
    pub fn push_reply(&mut self, text: &str) {
        let mut r = Reply::new(&self.opts);
        r.push(text);
        r.finish();
        self.entries.push(Entry::Reply(Box::new(r)));
    }

    fn finish_reply(&mut self) {
        if let Some(Entry::Reply(r)) = self.entries.last_mut() {
            r.finish();
        }
    }

    fn tool_mut(&mut self, id: &str) -> Option<&mut ToolEntry> {
        self.entries.iter_mut().rev().find_map(|e| match e {
            Entry::Tool(t) if t.id == id => Some(t),
            _ => None,
        })
    }

    /// Take one event of the running turn.
    pub fn apply(&mut self, ev: &RunEvent) {
        match ev {
            RunEvent::Text { text } => {
                if !matches!(self.entries.last(), Some(Entry::Reply(r)) if r.stream.is_some()) {
                    self.entries
                        .push(Entry::Reply(Box::new(Reply::new(&self.opts))));
                }
                if let Some(Entry::Reply(r)) = self.entries.last_mut() {
                    r.push(text);
                }
            }
            RunEvent::ToolCall { id, name, input } => {
                self.finish_reply();
                self.entries.push(Entry::Tool(ToolEntry {
                    id: id.clone(),
                    name: name.clone(),
                    summary: summary(name, input),
                    decision: None,
                    result: None,
                }));
            }
            RunEvent::ToolDecision {
                id,
                allowed,
                decided_by,
                reason,
            } => {
                if let Some(t) = self.tool_mut(id) {
                    t.decision = Some((*allowed, decided_by.to_string(), reason.clone()));
                }
            }
            RunEvent::ToolResult {
                id,
                is_error,
                preview,
                duration_ms,
            } => {
                if let Some(t) = self.tool_mut(id) {
                    t.result = Some((*is_error, preview.clone(), *duration_ms));
                }
            }
            RunEvent::StageStarted { stage } => {
                self.finish_reply();
                self.notice(&format!("stage: {stage}"));
            }
            RunEvent::ModelRetry {
                attempt,
                max_attempts,
                reason,
                ..
            } => self.notice(&format!(
                "model request failed, retrying ({attempt}/{max_attempts}): {reason}"
            )),
            RunEvent::Compacted {
                tokens_before,
                tokens_after,
                ..
            } => self.notice(&format!(
                "conversation compacted: {tokens_before} → {tokens_after} tokens"
            )),
            RunEvent::RunFinished {
                status, outcome, ..
            } => {
                self.finish_reply();
                match status.as_str() {
                    "succeeded" => {}
                    "cancelled" => self.notice("turn cancelled"),
                    _ => self.error(&format!("turn {status}: {outcome}")),
                }
            }
            // Already sanitised and bounded by the recorder; drawn through the cell sanitiser too.
            RunEvent::Egress(e) => self.notice(&format!("egress: {}", e.summary)),
            // Progress is for machines (`--json`, editors); the screen shows the call's result.
            RunEvent::RunStarted { .. }
            | RunEvent::StepStarted { .. }
            | RunEvent::ToolProgress { .. }
            | RunEvent::StepFinished { .. } => {}
        }
    }

    /// The transcript as lines at the current width.
    pub fn lines(&self) -> Vec<Line<'static>> {
        self.last_lines(usize::MAX)
    }

    /// At least the last `n` lines (all of them when there are fewer): a frame builds only
    /// the entries it can show, whatever the length of the conversation.
    pub fn last_lines(&self, n: usize) -> Vec<Line<'static>> {
        let width = usize::from(self.opts.width.unwrap_or(80));
        let mut chunks: Vec<Vec<Line<'static>>> = Vec::new();
        let mut count = 0;
        for e in self.entries.iter().rev() {
            if count >= n {
                break;
            }
            let mut out = Vec::new();
            self.entry_lines(e, width, n - count, &mut out);
            count += out.len();
            chunks.push(out);
        }
        chunks.into_iter().rev().flatten().collect()
    }

    /// An entry's lines; a reply gives only its last `need` (a long reply streaming must not
    /// cost its whole length every frame).
    fn entry_lines(&self, e: &Entry, width: usize, need: usize, out: &mut Vec<Line<'static>>) {
        match e {
            Entry::User(text) => {
                out.push(Line::default());
                for l in text.lines() {
                    let styled = self.style(Some(Color::Cyan), Modifier::BOLD);
                    push_wrapped(out, "› ", l, styled, width);
                }
            }
            Entry::Reply(r) => {
                let total = r.lines.len() + r.preview.len();
                if total < need {
                    out.push(Line::default());
                }
                let skip = total.saturating_sub(need);
                for l in r.lines.iter().chain(&r.preview).skip(skip) {
                    out.push(self.md_line(l));
                }
            }
            Entry::Tool(t) => self.tool_lines(t, width, out),
            Entry::Notice { text, error } => {
                let style = if *error {
                    self.style(Some(Color::Red), Modifier::empty())
                } else {
                    self.style(None, Modifier::DIM)
                };
                for l in text.lines() {
                    push_wrapped(out, "· ", l, style, width);
                }
            }
        }
    }

    fn style(&self, fg: Option<Color>, m: Modifier) -> Style {
        let s = Style::default().add_modifier(m);
        match fg {
            Some(c) if self.opts.color => s.fg(c),
            _ => s,
        }
    }

    fn tool_lines(&self, t: &ToolEntry, width: usize, out: &mut Vec<Line<'static>>) {
        let (mark, colour, verdict) = match (&t.decision, &t.result) {
            (Some((false, by, _)), _) => ("✗", Color::Red, format!("denied ({by})")),
            (Some((true, by, _)), Some((true, _, _))) => {
                ("✗", Color::Yellow, format!("allowed ({by}), failed"))
            }
            (Some((true, by, _)), Some(_)) => ("✓", Color::Green, format!("allowed ({by})")),
            (Some((true, by, _)), None) => ("…", Color::Yellow, format!("allowed ({by}), running")),
            (None, _) => ("?", Color::Yellow, "waiting for a decision".to_string()),
        };
        let duration = t
            .result
            .as_ref()
            .map(|(_, _, ms)| format!(" · {}", fmt_duration(*ms)))
            .unwrap_or_default();
        let head = format!(
            "{} {} — {verdict}{duration}",
            sanitize_line_for_terminal(&t.name),
            t.summary
        );
        push_wrapped(
            out,
            &format!("{mark} "),
            &head,
            self.style(Some(colour), Modifier::empty()),
            width,
        );
        if let Some((false, _, reason)) = &t.decision {
            push_wrapped(
                out,
                "  └ ",
                &sanitize_line_for_terminal(reason),
                self.style(None, Modifier::DIM),
                width,
            );
        }
        let Some((_, preview, _)) = &t.result else {
            return;
        };
        let lines: Vec<&str> = preview.lines().collect();
        let shown = if self.expanded {
            EXPANDED_LINES
        } else {
            FOLDED_LINES
        };
        let dim = self.style(None, Modifier::DIM);
        for l in lines.iter().take(shown) {
            push_wrapped(out, "  │ ", &sanitize_line_for_terminal(l), dim, width);
        }
        if lines.len() > shown {
            let more = lines.len() - shown;
            let hint = if self.expanded {
                ""
            } else {
                ", Ctrl-O shows them"
            };
            push_wrapped(
                out,
                "  │ ",
                &format!("… {more} more lines{hint}"),
                dim,
                width,
            );
        }
    }

    fn md_line(&self, l: &MdLine) -> Line<'static> {
        let spans: Vec<Span<'static>> = l
            .spans
            .iter()
            .map(|s| Span::styled(s.text.clone(), md_style(&s.style, self.opts.color)))
            .collect();
        Line::from(spans)
    }
}

/// The main argument of a call on one line, sanitised and cut to 120 characters.
fn summary(name: &str, input: &serde_json::Value) -> String {
    let main = ["command", "path", "pattern", "url"]
        .iter()
        .find_map(|k| input.get(*k).and_then(serde_json::Value::as_str))
        .map(str::to_string)
        .unwrap_or_else(|| {
            if name.is_empty() {
                String::new()
            } else {
                input.to_string()
            }
        });
    let one: String = sanitize_line_for_terminal(&main)
        .chars()
        .take(120)
        .collect();
    if main.chars().count() > 120 {
        format!("{one}…")
    } else {
        one
    }
}

fn fmt_duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// `text` with each of its lines terminal-safe (the line breaks kept).
fn safe_lines(text: &str) -> String {
    text.split('\n')
        .map(sanitize_line_for_terminal)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` (already terminal-safe) after `prefix`, wrapped by display width, continuations
/// indented under the prefix.
pub fn push_wrapped(
    out: &mut Vec<Line<'static>>,
    prefix: &str,
    text: &str,
    style: Style,
    width: usize,
) {
    let indent = " ".repeat(prefix.chars().count());
    let room = width.saturating_sub(prefix.chars().count()).max(1);
    let mut first = true;
    let mut rest: &str = text;
    loop {
        let (piece, tail) = split_at_width(rest, room);
        let lead = if first {
            prefix.to_string()
        } else {
            indent.clone()
        };
        out.push(Line::from(vec![
            Span::styled(lead, style),
            Span::styled(piece.to_string(), style),
        ]));
        first = false;
        if tail.is_empty() {
            break;
        }
        rest = tail;
    }
}

fn split_at_width(s: &str, room: usize) -> (&str, &str) {
    let mut used = 0;
    for (i, c) in s.char_indices() {
        let w = c.width().unwrap_or(0);
        if used + w > room {
            return (&s[..i], &s[i..]);
        }
        used += w;
    }
    (s, "")
}

fn md_color(c: MdColor) -> Color {
    match c {
        MdColor::Black => Color::Black,
        MdColor::Red => Color::Red,
        MdColor::Green => Color::Green,
        MdColor::Yellow => Color::Yellow,
        MdColor::Blue => Color::Blue,
        MdColor::Magenta => Color::Magenta,
        MdColor::Cyan => Color::Cyan,
        MdColor::White => Color::Gray,
        MdColor::BrightBlack => Color::DarkGray,
        MdColor::BrightRed => Color::LightRed,
        MdColor::BrightGreen => Color::LightGreen,
        MdColor::BrightYellow => Color::LightYellow,
        MdColor::BrightBlue => Color::LightBlue,
        MdColor::BrightMagenta => Color::LightMagenta,
        MdColor::BrightCyan => Color::LightCyan,
        MdColor::BrightWhite => Color::White,
        MdColor::Rgb(r, g, b) => Color::Rgb(r, g, b),
    }
}

fn md_style(s: &hanzo_md_render::Style, color: bool) -> Style {
    let mut out = Style::default();
    if let (Some(c), true) = (s.fg, color) {
        out = out.fg(md_color(c));
    }
    for (on, m) in [
        (s.bold, Modifier::BOLD),
        (s.italic, Modifier::ITALIC),
        (s.underline, Modifier::UNDERLINED),
        (s.dim, Modifier::DIM),
        (s.strikethrough, Modifier::CROSSED_OUT),
        (s.reversed, Modifier::REVERSED),
    ] {
        if on {
            out = out.add_modifier(m);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(lines: &[Line<'static>]) -> Vec<String> {
        lines.iter().map(|l| l.to_string()).collect()
    }

    /// Notices quote what came from outside (git's stderr, a branch name, a tool's
    /// description): their escapes are shown, never kept raw.
    #[test]
    fn notices_errors_and_user_lines_are_terminal_safe() {
        let mut t = Transcript::new(80, true);
        t.notice("pushed to /r\u{1b}]2;pwned\u{7}.git\nline two \u{9b}31m");
        t.error("git failed: \u{1b}[2J");
        t.push_user("me \u{1b}[31m");
        let all = texts(&t.lines()).join("\n");
        assert!(all.contains("· pushed to /r␛]2;pwned␇.git"), "{all}");
        assert!(all.contains("· line two "), "the line break is kept: {all}");
        assert!(all.contains("· git failed: ␛[2J"), "{all}");
        assert!(all.contains("› me ␛[31m"), "{all}");
        assert!(
            !all.chars()
                .any(|c| c != '\n' && hanzo_md_render::is_unsafe_for_terminal(c)),
            "{all:?}"
        );
    }

    #[test]
    fn the_last_lines_are_the_tail_of_all_lines() {
        let mut t = Transcript::new(60, true);
        for i in 0..20 {
            t.push_user(&format!("question {i}"));
            t.apply(&RunEvent::Text {
                text: format!("answer **{i}** with\n\n- a list\n- of items\n"),
            });
        }
        let all = texts(&t.lines());
        for n in [0, 1, 7, 30, 10_000] {
            let tail = texts(&t.last_lines(n));
            assert!(tail.len() >= n.min(all.len()), "n = {n}");
            assert_eq!(tail[..], all[all.len() - tail.len()..], "n = {n}");
        }
    }

    #[test]
    fn a_resize_rewraps_replies_as_streaming_at_that_width_would() {
        let text = "word ".repeat(40);
        let mut narrow = Transcript::new(30, true);
        narrow.apply(&RunEvent::Text { text: text.clone() });
        let mut wide = Transcript::new(90, true);
        wide.apply(&RunEvent::Text { text });
        wide.set_width(30);
        assert_eq!(texts(&wide.lines()), texts(&narrow.lines()));
        assert!(texts(&wide.lines()).iter().all(|l| l.chars().count() <= 30));
    }
}
