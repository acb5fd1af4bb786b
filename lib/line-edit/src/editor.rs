//! The editor: buffer, history navigation, undo, and the default and emacs key maps. Vim's
//! key map is in `vim.rs`.

use std::time::Instant;

use unicode_width::UnicodeWidthChar;

use crate::buffer::Buffer;
use crate::history::History;
use crate::key::{Action, InputMode, Key, KeyCode};
use crate::vim::{Vim, VimState};

const UNDO_DEPTH: usize = 200;
/// Undo keeps whole snapshots; beyond this many characters in all, the oldest go.
const UNDO_CHARS: usize = 4 << 20;
const KILL_RING: usize = 16;

/// A selected region in (line, column) coordinates, columns in characters; `end` is exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    /// First selected (line, column).
    pub start: (usize, usize),
    /// Just past the last selected (line, column).
    pub end: (usize, usize),
    /// Whole lines (vim's `V`).
    pub linewise: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    chars: Vec<char>,
    cursor: usize,
}

/// A multi-line input buffer with a cursor, driven by key events.
#[derive(Debug, Clone)]
pub struct Editor {
    pub(crate) mode: InputMode,
    pub(crate) buf: Buffer,
    history: History,
    /// Index of the history entry shown, while navigating.
    nav: Option<usize>,
    /// What was typed before history navigation began.
    draft: String,
    /// The column vertical moves try to keep.
    pub(crate) want_col: Option<usize>,
    kills: Vec<String>,
    last_kill: bool,
    /// The last yank's range and kill-ring index, for M-y.
    yank: Option<(usize, usize, usize)>,
    undo: Vec<Snapshot>,
    redo: Vec<Snapshot>,
    /// The last edit was typing, which groups into one undo step.
    pub(crate) typing: bool,
    pub(crate) vim: Vim,
}

impl Editor {
    /// An empty editor in `mode` with an empty history.
    pub fn new(mode: InputMode) -> Self {
        Editor::with_history(mode, History::new())
    }

    /// An empty editor in `mode` whose Up and Down walk `history`.
    pub fn with_history(mode: InputMode, history: History) -> Self {
        Editor {
            mode,
            buf: Buffer::default(),
            history,
            nav: None,
            draft: String::new(),
            want_col: None,
            kills: Vec::new(),
            last_kill: false,
            yank: None,
            undo: Vec::new(),
            redo: Vec::new(),
            typing: false,
            vim: Vim::default(),
        }
    }

    /// The current editing mode.
    pub fn mode(&self) -> InputMode {
        self.mode
    }

    /// Switches mode, keeping the text. Vim starts in Insert mode.
    pub fn set_mode(&mut self, mode: InputMode) {
        self.mode = mode;
        self.vim = Vim::default();
        self.typing = false;
    }

    /// Handles one key; `now` is the time it arrived (vim's pending operators expire 500 ms
    /// after their last key).
    pub fn handle(&mut self, key: Key, now: Instant) -> Action {
        if key.is_ctrl('c') {
            return self.cancel();
        }
        if key.is_ctrl('d') && self.buf.is_empty() {
            return Action::Quit;
        }
        let kill_before = self.last_kill;
        let yank_before = self.yank.take();
        self.last_kill = false;
        let action = match self.mode {
            InputMode::Default => self.default_key(key),
            InputMode::Emacs => self.emacs_key(key, kill_before, yank_before),
            InputMode::Vim => self.vim_key(key, now),
        };
        self.buf.cursor = self.buf.cursor.min(self.buf.len());
        action
    }

    /// Expires a pending vim operator whose time is up; true when the display changed.
    pub fn tick(&mut self, now: Instant) -> bool {
        self.mode == InputMode::Vim && self.vim.expire(now)
    }

    /// The whole input, lines joined with `\n`.
    pub fn text(&self) -> String {
        self.buf.text()
    }

    /// Whether the input holds no character at all.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The text's lines (at least one).
    pub fn lines(&self) -> Vec<String> {
        self.buf.text().split('\n').map(str::to_owned).collect()
    }

    /// (line, column), the column in characters.
    pub fn cursor(&self) -> (usize, usize) {
        let pos = self.buf.cursor;
        (self.buf.line_index(pos), self.buf.col(pos))
    }

    /// The cursor's column in terminal cells (wide characters count two).
    pub fn cursor_display_col(&self) -> usize {
        let pos = self.buf.cursor;
        let start = self.buf.line_start(pos);
        self.buf.chars[start..pos]
            .iter()
            .map(|c| {
                if *c == '\t' {
                    4
                } else {
                    c.width().unwrap_or(0)
                }
            })
            .sum()
    }

    /// What the mode line shows: `-- INSERT --`, `-- NORMAL --`, `-- VISUAL --`,
    /// `-- VISUAL LINE --`, or `:` and the command being typed; empty outside vim mode.
    pub fn mode_indicator(&self) -> String {
        if self.mode != InputMode::Vim {
            return String::new();
        }
        match &self.vim.state {
            VimState::Insert => "-- INSERT --".to_owned(),
            VimState::Normal => "-- NORMAL --".to_owned(),
            VimState::Visual { line: false } => "-- VISUAL --".to_owned(),
            VimState::Visual { line: true } => "-- VISUAL LINE --".to_owned(),
            VimState::Command(cmd) => format!(":{cmd}"),
        }
    }

    /// The keys of a pending vim command (`2d`, `g`, `df`), for a "showcmd" area.
    pub fn pending_keys(&self) -> &str {
        self.vim.pending_keys()
    }

    /// The visual selection, in vim's Visual mode.
    pub fn selection(&self) -> Option<Selection> {
        let (range, linewise) = self.vim_selection()?;
        let to_lc = |pos: usize| (self.buf.line_index(pos), self.buf.col(pos));
        Some(Selection {
            start: to_lc(range.start),
            end: to_lc(range.end),
            linewise,
        })
    }

    /// Replaces the text (a completion, a recalled message); the cursor goes to the end.
    pub fn set_text(&mut self, text: &str) {
        self.checkpoint();
        self.buf.set(&clean_input(text));
        self.want_col = None;
        self.clamp_for_mode();
    }

    /// Inserts text at the cursor (a paste): CR LF and CR become LF, other control characters
    /// are dropped.
    pub fn insert_str(&mut self, text: &str) {
        self.checkpoint();
        let chars: Vec<char> = clean_input(text).chars().collect();
        self.buf.insert_at_cursor(&chars);
        self.want_col = None;
    }

    /// Empties the input (after a submit); the history stays.
    pub fn clear(&mut self) {
        self.checkpoint();
        self.buf = Buffer::default();
        self.want_col = None;
    }

    /// The history Up and Down walk.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The history, to record a submitted input or save it.
    pub fn history_mut(&mut self) -> &mut History {
        &mut self.history
    }

    // Shared editing.

    pub(crate) fn checkpoint(&mut self) {
        self.typing = false;
        let snap = Snapshot {
            chars: self.buf.chars.clone(),
            cursor: self.buf.cursor,
        };
        self.undo.push(snap);
        let mut total: usize = self.undo.iter().map(|s| s.chars.len()).sum();
        while self.undo.len() > UNDO_DEPTH || (total > UNDO_CHARS && self.undo.len() > 1) {
            total -= self.undo.remove(0).chars.len();
        }
        self.redo.clear();
    }

    fn checkpoint_typing(&mut self) {
        if !self.typing {
            self.checkpoint();
            self.typing = true;
        }
    }

    /// Restores the last change; steps that changed nothing are skipped.
    pub(crate) fn undo(&mut self) -> bool {
        while let Some(snap) = self.undo.pop() {
            if snap.chars == self.buf.chars {
                continue;
            }
            self.redo.push(Snapshot {
                chars: std::mem::take(&mut self.buf.chars),
                cursor: self.buf.cursor,
            });
            self.buf.chars = snap.chars;
            self.buf.cursor = snap.cursor.min(self.buf.len());
            self.typing = false;
            return true;
        }
        false
    }

    pub(crate) fn redo(&mut self) -> bool {
        let Some(snap) = self.redo.pop() else {
            return false;
        };
        self.undo.push(Snapshot {
            chars: std::mem::take(&mut self.buf.chars),
            cursor: self.buf.cursor,
        });
        self.buf.chars = snap.chars;
        self.buf.cursor = snap.cursor.min(self.buf.len());
        self.typing = false;
        true
    }

    pub(crate) fn type_char(&mut self, c: char) {
        if c.is_control() && c != '\t' {
            return;
        }
        self.checkpoint_typing();
        self.buf.insert_at_cursor(&[c]);
        self.want_col = None;
    }

    pub(crate) fn newline(&mut self) {
        self.checkpoint();
        self.buf.insert_at_cursor(&['\n']);
        self.want_col = None;
    }

    /// Enter: a line ending in `\` at the cursor continues on a new line; otherwise submit.
    pub(crate) fn enter(&mut self) -> Action {
        let pos = self.buf.cursor;
        if pos > 0 && pos == self.buf.line_end(pos) && self.buf.chars[pos - 1] == '\\' {
            self.checkpoint();
            self.buf.chars[pos - 1] = '\n';
            self.want_col = None;
            return Action::None;
        }
        self.submit()
    }

    pub(crate) fn submit(&mut self) -> Action {
        let text = self.buf.text();
        if text.trim().is_empty() {
            return Action::None;
        }
        self.history.push(&text);
        self.buf = Buffer::default();
        self.nav = None;
        self.draft.clear();
        self.want_col = None;
        self.undo.clear();
        self.redo.clear();
        self.typing = false;
        self.vim = Vim::default();
        Action::Submit(text)
    }

    fn cancel(&mut self) -> Action {
        match self.mode {
            // Vim users leave Insert mode with C-c: keep their text.
            InputMode::Vim => self.vim.leave_insert(&mut self.buf),
            _ => {
                if !self.buf.is_empty() {
                    self.checkpoint();
                }
                self.buf = Buffer::default();
            }
        }
        self.nav = None;
        self.want_col = None;
        Action::Cancel
    }

    pub(crate) fn backspace(&mut self) {
        if self.buf.cursor > 0 {
            self.checkpoint_typing();
            let at = self.buf.cursor;
            self.buf.remove(at - 1..at);
        }
        self.want_col = None;
    }

    pub(crate) fn delete_forward(&mut self) {
        if self.buf.cursor < self.buf.len() {
            self.checkpoint_typing();
            let at = self.buf.cursor;
            self.buf.remove(at..at + 1);
        }
        self.want_col = None;
    }

    pub(crate) fn move_to(&mut self, pos: usize) {
        self.buf.cursor = pos.min(self.buf.len());
        self.want_col = None;
        self.typing = false;
    }

    pub(crate) fn left(&mut self) {
        let pos = self.buf.cursor.saturating_sub(1);
        self.move_to(pos);
    }

    pub(crate) fn right(&mut self) {
        let pos = (self.buf.cursor + 1).min(self.buf.len());
        self.move_to(pos);
    }

    /// Moves `lines` up (negative) or down, keeping the column; false when there is no such
    /// line.
    pub(crate) fn vertical(&mut self, lines: isize) -> bool {
        let pos = self.buf.cursor;
        let line = self.buf.line_index(pos);
        let Some(target) = line
            .checked_add_signed(lines)
            .filter(|&t| t < self.buf.line_count())
        else {
            return false;
        };
        let col = *self.want_col.get_or_insert(self.buf.col(pos));
        let start = self.buf.line_start_of(target);
        self.buf.cursor = self.buf.at_col(start, col);
        self.typing = false;
        true
    }

    pub(crate) fn up_or_history(&mut self) {
        if !self.vertical(-1) {
            self.history_prev();
        }
    }

    pub(crate) fn down_or_history(&mut self) {
        if !self.vertical(1) {
            self.history_next();
        }
    }

    pub(crate) fn history_prev(&mut self) -> bool {
        let entries = self.history.entries();
        if entries.is_empty() {
            return false;
        }
        let index = match self.nav {
            None => {
                self.draft = self.buf.text();
                entries.len() - 1
            }
            Some(0) => return false,
            Some(i) => i - 1,
        };
        let text = entries[index].clone();
        self.nav = Some(index);
        self.show_recalled(&text);
        true
    }

    pub(crate) fn history_next(&mut self) -> bool {
        let Some(i) = self.nav else {
            return false;
        };
        let text = if i + 1 < self.history.len() {
            self.nav = Some(i + 1);
            self.history.entries()[i + 1].clone()
        } else {
            self.nav = None;
            std::mem::take(&mut self.draft)
        };
        self.show_recalled(&text);
        true
    }

    fn show_recalled(&mut self, text: &str) {
        self.buf.set(text);
        self.want_col = None;
        self.typing = false;
        self.clamp_for_mode();
    }

    fn clamp_for_mode(&mut self) {
        if self.mode == InputMode::Vim && !matches!(self.vim.state, VimState::Insert) {
            self.buf.cursor = self.buf.clamp_normal(self.buf.cursor);
        }
    }

    // Default mode.

    fn default_key(&mut self, key: Key) -> Action {
        if key.is_newline() {
            self.newline();
            return Action::None;
        }
        if let Some(c) = key.typed() {
            self.type_char(c);
            return Action::None;
        }
        match key.code {
            KeyCode::Enter => return self.enter(),
            KeyCode::Tab => return Action::Complete,
            KeyCode::Backspace => self.backspace(),
            KeyCode::Delete => self.delete_forward(),
            KeyCode::Left if key.ctrl || key.alt => {
                let pos = self.buf.emacs_word_backward(self.buf.cursor);
                self.move_to(pos);
            }
            KeyCode::Right if key.ctrl || key.alt => {
                let pos = self.buf.emacs_word_forward(self.buf.cursor);
                self.move_to(pos);
            }
            KeyCode::Left => self.left(),
            KeyCode::Right => self.right(),
            KeyCode::Home => self.move_to(self.buf.line_start(self.buf.cursor)),
            KeyCode::End => self.move_to(self.buf.line_end(self.buf.cursor)),
            KeyCode::Up => self.up_or_history(),
            KeyCode::Down => self.down_or_history(),
            KeyCode::Char(_) if key.is_ctrl('d') => self.delete_forward(),
            _ => {}
        }
        Action::None
    }

    // Emacs mode.

    /// Kills `range`: onto the kill ring, appended to the last kill when the previous key
    /// killed too (`prepend` for kills that go backwards).
    fn kill(&mut self, range: std::ops::Range<usize>, prepend: bool, continuing: bool) {
        if range.is_empty() {
            self.last_kill = continuing;
            return;
        }
        self.checkpoint();
        let text = self.buf.remove(range);
        match self.kills.last_mut() {
            Some(last) if continuing => {
                if prepend {
                    last.insert_str(0, &text);
                } else {
                    last.push_str(&text);
                }
            }
            _ => {
                self.kills.push(text);
                if self.kills.len() > KILL_RING {
                    self.kills.remove(0);
                }
            }
        }
        self.last_kill = true;
        self.want_col = None;
    }

    fn yank_from_ring(&mut self, index: usize) {
        let Some(text) = self.kills.get(index).cloned() else {
            return;
        };
        self.checkpoint();
        let start = self.buf.cursor;
        let chars: Vec<char> = text.chars().collect();
        self.buf.insert_at_cursor(&chars);
        self.yank = Some((start, self.buf.cursor, index));
        self.want_col = None;
    }

    fn emacs_key(
        &mut self,
        key: Key,
        continuing_kill: bool,
        last_yank: Option<(usize, usize, usize)>,
    ) -> Action {
        let pos = self.buf.cursor;
        let line_start = self.buf.line_start(pos);
        let line_end = self.buf.line_end(pos);
        if key.ctrl && !key.alt {
            if let KeyCode::Char(c) = key.code {
                match c.to_ascii_lowercase() {
                    'a' => self.move_to(line_start),
                    'e' => self.move_to(line_end),
                    'b' => self.left(),
                    'f' => self.right(),
                    'd' => self.delete_forward(),
                    'h' => self.backspace(),
                    'k' => {
                        // At the end of a line, C-k kills the line break.
                        let end = if pos == line_end {
                            (pos + 1).min(self.buf.len())
                        } else {
                            line_end
                        };
                        self.kill(pos..end, false, continuing_kill);
                    }
                    'u' => self.kill(line_start..pos, true, continuing_kill),
                    'w' => {
                        let start = self.buf.unix_word_start(pos);
                        self.kill(start..pos, true, continuing_kill);
                    }
                    'y' if !self.kills.is_empty() => {
                        self.yank_from_ring(self.kills.len() - 1);
                    }
                    'p' => self.up_or_history(),
                    'n' => self.down_or_history(),
                    'j' => self.newline(),
                    '_' | '/' | '7' => {
                        self.undo();
                    }
                    _ => {}
                }
                return Action::None;
            }
        }
        if key.alt && !key.ctrl {
            match key.code {
                KeyCode::Char('b') => self.move_to(self.buf.emacs_word_backward(pos)),
                KeyCode::Char('f') => self.move_to(self.buf.emacs_word_forward(pos)),
                KeyCode::Char('d') => {
                    let end = self.buf.emacs_word_forward(pos);
                    self.kill(pos..end, false, continuing_kill);
                }
                KeyCode::Backspace => {
                    let start = self.buf.emacs_word_backward(pos);
                    self.kill(start..pos, true, continuing_kill);
                }
                KeyCode::Char('y') => {
                    // Replace the text just yanked with the previous kill.
                    if let Some((start, end, index)) = last_yank {
                        if !self.kills.is_empty() && end <= self.buf.len() {
                            let prev = (index + self.kills.len() - 1) % self.kills.len();
                            self.buf.remove(start..end);
                            self.buf.cursor = start;
                            self.yank_from_ring(prev);
                        }
                    }
                }
                KeyCode::Char('<') => while self.history_prev() {},
                KeyCode::Char('>') => while self.history_next() {},
                KeyCode::Enter => self.newline(),
                _ => {}
            }
            return Action::None;
        }
        self.default_key(key)
    }
}

/// Pasted or recalled text as the buffer holds it: LF line breaks, no control characters but
/// tabs.
fn clean_input(text: &str) -> String {
    text.replace("\r\n", "\n")
        .replace('\r', "\n")
        .chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect()
}
