//! Vim mode (HIP-0301 §11): Insert, Normal, Visual and Command modes; motions `h j k l w b e
//! W B E 0 $ ^ gg G f t F T ; ,` with counts; operators `d c y` composed with motions and text
//! objects (`iw aw iW aW i" a" i' a' i` a` i( a( ib ab i[ a[ i{ a{ iB aB i< a<`), doubled for
//! whole lines (`dd cc yy`); `x X D C Y s S p P i a I A o O u C-r v V`; `:w :q :set`.
//!
//! Multi-key commands go through a pending state (count, operator, `g`, `f`/`t`, `i`/`a`) that
//! expires 500 ms after its last key, measured on the `now` each key carries.

use std::ops::Range;
use std::time::{Duration, Instant};

use crate::buffer::{is_blank, Buffer};
use crate::editor::Editor;
use crate::key::{Action, InputMode, Key, KeyCode};

/// How long a pending operator (or `g`, `f`, a count) waits for its next key.
pub const PENDING_TIMEOUT: Duration = Duration::from_millis(500);

/// Counts are capped (`99999999x` must not stall the input box).
const MAX_COUNT: usize = 10_000;

/// The most text one `p` inserts, in characters.
const MAX_PUT: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VimState {
    Insert,
    Normal,
    Visual { line: bool },
    Command(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Delete,
    Change,
    Yank,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Find {
    /// `f`: onto the next occurrence.
    To,
    /// `t`: just before it.
    Till,
    /// `F`: onto the previous one.
    BackTo,
    /// `T`: just after it.
    BackTill,
}

impl Find {
    fn reversed(self) -> Find {
        match self {
            Find::To => Find::BackTo,
            Find::Till => Find::BackTill,
            Find::BackTo => Find::To,
            Find::BackTill => Find::Till,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prefix {
    G,
    Find(Find),
    Object { inner: bool },
}

#[derive(Debug, Clone, Default)]
struct Pending {
    op: Option<Op>,
    /// The count typed before the operator.
    op_count: Option<usize>,
    count: Option<usize>,
    prefix: Option<Prefix>,
    since: Option<Instant>,
    keys: String,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.op.is_none() && self.count.is_none() && self.prefix.is_none()
    }

    fn total_count(&self) -> usize {
        self.op_count
            .unwrap_or(1)
            .saturating_mul(self.count.unwrap_or(1))
            .min(MAX_COUNT)
    }

    /// A count given at all (for `G`, `gg`, history on `j`/`k`).
    fn explicit_count(&self) -> Option<usize> {
        match (self.op_count, self.count) {
            (None, None) => None,
            _ => Some(self.total_count()),
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Register {
    text: String,
    linewise: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Exclusive,
    Inclusive,
    Linewise,
}

#[derive(Debug, Clone, Copy)]
struct Motion {
    target: usize,
    kind: Kind,
    /// Keeps the column: -1 for k, 1 for j, 0 for every other motion.
    vertical: i8,
}

impl Motion {
    fn new(target: usize, kind: Kind) -> Self {
        Motion {
            target,
            kind,
            vertical: 0,
        }
    }
}

/// Vim's per-editor state: mode, pending command, register, last find.
#[derive(Debug, Clone)]
pub(crate) struct Vim {
    pub state: VimState,
    anchor: usize,
    pending: Pending,
    register: Register,
    last_find: Option<(Find, char)>,
}

impl Default for Vim {
    fn default() -> Self {
        Vim {
            state: VimState::Insert,
            anchor: 0,
            pending: Pending::default(),
            register: Register::default(),
            last_find: None,
        }
    }
}

impl Vim {
    /// Clears a pending command whose last key is 500 ms old or more.
    pub(crate) fn expire(&mut self, now: Instant) -> bool {
        match self.pending.since {
            Some(since)
                if !self.pending.is_empty()
                    && now.saturating_duration_since(since) >= PENDING_TIMEOUT =>
            {
                self.pending = Pending::default();
                true
            }
            _ => false,
        }
    }

    pub(crate) fn pending_keys(&self) -> &str {
        &self.pending.keys
    }

    /// Esc: to Normal mode, the cursor back onto a character.
    pub(crate) fn leave_insert(&mut self, buf: &mut Buffer) {
        if self.state == VimState::Insert && buf.cursor > buf.line_start(buf.cursor) {
            buf.cursor -= 1;
        }
        self.state = VimState::Normal;
        self.pending = Pending::default();
        buf.cursor = buf.clamp_normal(buf.cursor);
    }
}

impl Editor {
    pub(crate) fn vim_selection(&self) -> Option<(Range<usize>, bool)> {
        if self.mode != InputMode::Vim {
            return None;
        }
        let VimState::Visual { line } = self.vim.state else {
            return None;
        };
        let (a, b) = (
            self.vim.anchor.min(self.buf.cursor),
            self.vim.anchor.max(self.buf.cursor),
        );
        if line {
            let start = self.buf.line_start(a);
            let end = self.buf.line_end(b);
            Some((start..end, true))
        } else {
            Some((a..(b + 1).min(self.buf.len()), false))
        }
    }

    pub(crate) fn vim_key(&mut self, key: Key, now: Instant) -> Action {
        match self.vim.state {
            VimState::Insert => self.vim_insert(key),
            VimState::Command(_) => self.vim_command_key(key),
            VimState::Normal | VimState::Visual { .. } => {
                self.vim.expire(now);
                let action = self.vim_normal(key);
                if self.vim.pending.is_empty() {
                    self.vim.pending = Pending::default();
                } else {
                    self.vim.pending.since = Some(now);
                }
                action
            }
        }
    }

    fn vim_insert(&mut self, key: Key) -> Action {
        if key.code == KeyCode::Esc {
            self.typing = false;
            self.vim.leave_insert(&mut self.buf);
            self.want_col = None;
            return Action::None;
        }
        if key.is_newline() {
            self.newline();
            return Action::None;
        }
        if let Some(c) = key.typed() {
            self.type_char(c);
            return Action::None;
        }
        let pos = self.buf.cursor;
        if key.is_ctrl('w') {
            let start = self.buf.unix_word_start(pos).max(self.buf.line_start(pos));
            let start = if start == pos {
                pos.saturating_sub(1)
            } else {
                start
            };
            self.checkpoint();
            self.buf.remove(start..pos);
            return Action::None;
        }
        if key.is_ctrl('u') {
            let start = self.buf.line_start(pos);
            self.checkpoint();
            self.buf.remove(start..pos);
            return Action::None;
        }
        if key.is_ctrl('h') {
            self.backspace();
            return Action::None;
        }
        match key.code {
            KeyCode::Enter => self.enter(),
            KeyCode::Tab => Action::Complete,
            KeyCode::Backspace => {
                self.backspace();
                Action::None
            }
            KeyCode::Delete => {
                self.delete_forward();
                Action::None
            }
            KeyCode::Left => {
                self.left();
                Action::None
            }
            KeyCode::Right => {
                self.right();
                Action::None
            }
            KeyCode::Home => {
                self.move_to(self.buf.line_start(pos));
                Action::None
            }
            KeyCode::End => {
                self.move_to(self.buf.line_end(pos));
                Action::None
            }
            KeyCode::Up => {
                self.up_or_history();
                Action::None
            }
            KeyCode::Down => {
                self.down_or_history();
                Action::None
            }
            _ => Action::None,
        }
    }

    fn vim_command_key(&mut self, key: Key) -> Action {
        let VimState::Command(cmd) = &mut self.vim.state else {
            return Action::None;
        };
        if let Some(c) = key.typed() {
            cmd.push(c);
            return Action::None;
        }
        if key.is_ctrl('u') {
            cmd.clear();
            return Action::None;
        }
        match key.code {
            KeyCode::Esc => {
                self.vim.state = VimState::Normal;
                Action::None
            }
            KeyCode::Backspace => {
                if cmd.pop().is_none() {
                    self.vim.state = VimState::Normal;
                }
                Action::None
            }
            KeyCode::Enter => {
                let cmd = std::mem::take(cmd);
                self.vim.state = VimState::Normal;
                self.buf.cursor = self.buf.clamp_normal(self.buf.cursor);
                self.ex_command(cmd.trim())
            }
            _ => Action::None,
        }
    }

    fn ex_command(&mut self, cmd: &str) -> Action {
        let (name, arg) = match cmd.split_once(char::is_whitespace) {
            Some((n, a)) => (n, a.trim()),
            None => (cmd, ""),
        };
        match name {
            "" => Action::None,
            "w" | "write" => self.submit(),
            "q" | "quit" | "q!" | "quit!" | "qa" | "qa!" | "qall" => Action::Quit,
            "set" | "se" => self.ex_set(arg),
            n if n.bytes().all(|b| b.is_ascii_digit()) => {
                let line = n.parse::<usize>().unwrap_or(usize::MAX).saturating_sub(1);
                let start = self.buf.line_start_of(line);
                self.buf.cursor = self.buf.first_non_blank(start);
                Action::None
            }
            _ => Action::Message(format!("E492: Not an editor command: {cmd}")),
        }
    }

    /// `:set` lists options; `:set mode?` shows one; `:set mode=emacs` changes it.
    fn ex_set(&mut self, arg: &str) -> Action {
        let current = format!("mode={}", self.mode);
        if arg.is_empty() || arg == "all" {
            return Action::Message(format!("--- Options ---\n  {current}"));
        }
        let (name, value) = match arg.split_once('=') {
            Some((n, v)) => (n.trim(), Some(v.trim())),
            None => (arg.trim_end_matches('?'), None),
        };
        if !matches!(name, "mode" | "input_mode" | "inputmode") {
            return Action::Message(format!("E518: Unknown option: {name}"));
        }
        match value {
            None => Action::Message(format!("  {current}")),
            Some(v) => match v.parse::<InputMode>() {
                Ok(mode) => {
                    self.set_mode(mode);
                    Action::ModeChanged(mode)
                }
                Err(_) => Action::Message(format!(
                    "E474: Invalid argument: {arg} (default, emacs or vim)"
                )),
            },
        }
    }

    fn enter_insert(&mut self, at: usize, checkpoint: bool) {
        if checkpoint {
            self.checkpoint();
        }
        self.typing = true;
        self.buf.cursor = at.min(self.buf.len());
        self.vim.state = VimState::Insert;
        self.want_col = None;
    }

    fn in_visual(&self) -> bool {
        matches!(self.vim.state, VimState::Visual { .. })
    }

    /// Normal and Visual mode keys.
    fn vim_normal(&mut self, key: Key) -> Action {
        let count = self.vim.pending.total_count();
        // Keys that are not plain characters.
        if key.code == KeyCode::Esc {
            self.vim.pending = Pending::default();
            if self.in_visual() {
                self.vim.state = VimState::Normal;
            }
            self.buf.cursor = self.buf.clamp_normal(self.buf.cursor);
            return Action::None;
        }
        if key.is_ctrl('r') {
            self.vim.pending = Pending::default();
            self.redo();
            self.buf.cursor = self.buf.clamp_normal(self.buf.cursor);
            return Action::None;
        }
        let c = match (key.code, key.ctrl || key.alt) {
            (KeyCode::Char(c), false) => c,
            (KeyCode::Left | KeyCode::Backspace, _) => 'h',
            (KeyCode::Right, _) => 'l',
            (KeyCode::Up, _) => 'k',
            (KeyCode::Down, _) => 'j',
            (KeyCode::Home, _) => '0',
            (KeyCode::End, _) => '$',
            (KeyCode::Delete, _) => 'x',
            (KeyCode::Enter, _) => {
                self.vim.pending = Pending::default();
                return self.submit();
            }
            (KeyCode::Tab, _) => {
                self.vim.pending = Pending::default();
                return Action::Complete;
            }
            _ => {
                self.vim.pending = Pending::default();
                return Action::None;
            }
        };

        if let Some(prefix) = self.vim.pending.prefix.take() {
            return self.vim_prefixed(prefix, c, count);
        }

        // Counts.
        if c.is_ascii_digit() && (c != '0' || self.vim.pending.count.is_some()) {
            let digit = c as usize - '0' as usize;
            let n = self.vim.pending.count.unwrap_or(0);
            self.vim.pending.count = Some(n.saturating_mul(10).saturating_add(digit).min(99_999));
            self.vim.pending.keys.push(c);
            return Action::None;
        }

        // Operators.
        if let Some(op) = match c {
            'd' => Some(Op::Delete),
            'c' => Some(Op::Change),
            'y' => Some(Op::Yank),
            _ => None,
        } {
            if self.in_visual() {
                return self.visual_op(op);
            }
            match self.vim.pending.op {
                Some(pending) if pending == op => {
                    // dd, cc, yy: whole lines.
                    let from = self.buf.cursor;
                    let last = self.buf.line_index(from) + count - 1;
                    let target = self.buf.line_start_of(last);
                    self.vim.pending = Pending::default();
                    return self.apply_op(op, from, Motion::new(target, Kind::Linewise));
                }
                Some(_) => {
                    self.vim.pending = Pending::default();
                    return Action::None;
                }
                None => {
                    self.vim.pending.op = Some(op);
                    self.vim.pending.op_count = self.vim.pending.count.take();
                    self.vim.pending.keys.push(c);
                    return Action::None;
                }
            }
        }

        // Prefixes.
        let prefix = match c {
            'g' => Some(Prefix::G),
            'f' => Some(Prefix::Find(Find::To)),
            't' => Some(Prefix::Find(Find::Till)),
            'F' => Some(Prefix::Find(Find::BackTo)),
            'T' => Some(Prefix::Find(Find::BackTill)),
            'i' | 'a' if self.vim.pending.op.is_some() || self.in_visual() => {
                Some(Prefix::Object { inner: c == 'i' })
            }
            _ => None,
        };
        if let Some(prefix) = prefix {
            self.vim.pending.prefix = Some(prefix);
            self.vim.pending.keys.push(c);
            return Action::None;
        }

        // Motions. One that cannot move at all makes a pending operator fail, as in vim.
        if self.vim.pending.op.is_some() && self.motion_fails(c) {
            self.vim.pending = Pending::default();
            return Action::None;
        }
        if let Some(motion) = self.simple_motion(c, count) {
            return self.do_motion(motion);
        }

        // Commands; an operator pending before one of these is dropped.
        let had_op = self.vim.pending.op.is_some();
        self.vim.pending = Pending::default();
        if had_op {
            return Action::None;
        }
        if self.in_visual() {
            return self.visual_command(c);
        }
        self.normal_command(c, count)
    }

    /// The second key of `gg`, `f<c>`, `t<c>`, `i<obj>`, `a<obj>`.
    fn vim_prefixed(&mut self, prefix: Prefix, c: char, count: usize) -> Action {
        match prefix {
            Prefix::G => {
                if c != 'g' {
                    self.vim.pending = Pending::default();
                    return Action::None;
                }
                let line = self
                    .vim
                    .pending
                    .explicit_count()
                    .map_or(0, |n| n.saturating_sub(1));
                let target = self.buf.first_non_blank(self.buf.line_start_of(line));
                self.do_motion(Motion::new(target, Kind::Linewise))
            }
            Prefix::Find(kind) => {
                self.vim.last_find = Some((kind, c));
                match self.find(kind, c, count) {
                    Some(motion) => self.do_motion(motion),
                    None => {
                        self.vim.pending = Pending::default();
                        Action::None
                    }
                }
            }
            Prefix::Object { inner } => {
                let range = self.object(c, inner);
                let op = self.vim.pending.op;
                self.vim.pending = Pending::default();
                let Some((range, linewise)) = range else {
                    return Action::None;
                };
                if self.in_visual() {
                    if !range.is_empty() {
                        self.vim.anchor = range.start;
                        self.buf.cursor = range.end - 1;
                    }
                    return Action::None;
                }
                match op {
                    Some(op) if linewise => {
                        let first = self.buf.line_index(range.start);
                        let last = self.buf.line_index(range.end);
                        self.apply_lines(op, first, last)
                    }
                    Some(op) => self.apply_range(op, range),
                    None => Action::None,
                }
            }
        }
    }

    /// `h` at the start of a line, `j`/`k` on the last/first line, `b` at the start.
    fn motion_fails(&self, c: char) -> bool {
        let b = &self.buf;
        let pos = b.cursor;
        match c {
            'h' => pos == b.line_start(pos),
            'j' => b.line_index(pos) + 1 == b.line_count(),
            'k' => b.line_index(pos) == 0,
            'b' | 'B' => pos == 0,
            _ => false,
        }
    }

    /// A text object's range, and whether it is whole lines.
    fn object(&self, c: char, inner: bool) -> Option<(Range<usize>, bool)> {
        let pos = self.buf.cursor;
        let bracket = |open, close| {
            let r = self.buf.enclosing(pos, open, close)?;
            if !inner {
                return Some((r, false));
            }
            let b = &self.buf;
            let mut inside = r.start + 1..r.end - 1;
            if inside.start < inside.end && b.chars[inside.start] == '\n' {
                // A block on lines of its own: `i{` takes the lines between the brackets.
                let close = r.end - 1;
                let close_line = b.line_start(close);
                if (close_line..close).all(|i| is_blank(b.chars[i]))
                    && close_line > inside.start + 1
                {
                    return Some((inside.start + 1..close_line - 1, true));
                }
                inside.start += 1;
            }
            Some((inside, false))
        };
        let charwise = |r: Option<Range<usize>>| r.map(|r| (r, false));
        match c {
            'w' | 'W' => {
                let big = c == 'W';
                charwise(if inner {
                    self.buf.inner_word(pos, big)
                } else {
                    self.buf.a_word(pos, big)
                })
            }
            '"' | '\'' | '`' => {
                let r = self.buf.quoted(pos, c)?;
                if inner {
                    return Some((r.start + 1..r.end - 1, false));
                }
                // `a"` takes the blanks after the closing quote (or before the opening one).
                let end = self.buf.line_end(pos);
                let mut e = r.end;
                while e < end && is_blank(self.buf.chars[e]) {
                    e += 1;
                }
                if e > r.end {
                    return Some((r.start..e, false));
                }
                let start = self.buf.line_start(pos);
                let mut s = r.start;
                while s > start && is_blank(self.buf.chars[s - 1]) {
                    s -= 1;
                }
                Some((s..r.end, false))
            }
            '(' | ')' | 'b' => bracket('(', ')'),
            '[' | ']' => bracket('[', ']'),
            '{' | '}' | 'B' => bracket('{', '}'),
            '<' | '>' => bracket('<', '>'),
            _ => None,
        }
    }

    /// One-key motions; `None` for keys that are not motions.
    fn simple_motion(&self, c: char, count: usize) -> Option<Motion> {
        let b = &self.buf;
        let pos = b.cursor;
        let has_op = self.vim.pending.op.is_some();
        Some(match c {
            'h' => Motion::new(
                pos.saturating_sub(count).max(b.line_start(pos)),
                Kind::Exclusive,
            ),
            'l' | ' ' => {
                let end = b.line_end(pos);
                let limit = if has_op || self.in_visual() {
                    end
                } else {
                    b.last_char(pos)
                };
                Motion::new((pos + count).min(limit.max(pos)), Kind::Exclusive)
            }
            'j' | 'k' => {
                let line = b.line_index(pos);
                let target_line = if c == 'j' {
                    (line + count).min(b.line_count() - 1)
                } else {
                    line.saturating_sub(count)
                };
                let col = self.want_col.unwrap_or_else(|| b.col(pos));
                let start = b.line_start_of(target_line);
                Motion {
                    target: b.at_col(start, col),
                    kind: Kind::Linewise,
                    vertical: if c == 'j' { 1 } else { -1 },
                }
            }
            'w' | 'W' => {
                let big = c == 'W';
                let on_word = pos < b.len() && !b.chars[pos].is_whitespace();
                if self.vim.pending.op == Some(Op::Change) && on_word {
                    // `cw` inside a word is `ce`, except that it stops at this word's end.
                    let mut target = b.run_end(pos, big);
                    for _ in 1..count {
                        let next = b.word_end(target, big);
                        if next == target {
                            break;
                        }
                        target = next;
                    }
                    return Some(Motion::new(target, Kind::Inclusive));
                }
                let mut target = pos;
                let mut before_last = pos;
                for _ in 0..count {
                    before_last = target;
                    target = b.next_word_start(target, big);
                    if target == before_last {
                        break;
                    }
                }
                if has_op && b.line_index(target) > b.line_index(before_last) {
                    // The last word moved over ends its line: the operator stops there.
                    let end = b.line_end(before_last);
                    if end > before_last || count == 1 {
                        target = end.max(pos);
                    }
                }
                Motion::new(target, Kind::Exclusive)
            }
            'b' | 'B' => {
                let mut target = pos;
                for _ in 0..count {
                    let next = b.prev_word_start(target, c == 'B');
                    if next == target {
                        break;
                    }
                    target = next;
                }
                Motion::new(target, Kind::Exclusive)
            }
            'e' | 'E' => {
                let mut target = pos;
                for _ in 0..count {
                    let next = b.word_end(target, c == 'E');
                    if next == target {
                        break;
                    }
                    target = next;
                }
                Motion::new(target, Kind::Inclusive)
            }
            '0' => Motion::new(b.line_start(pos), Kind::Exclusive),
            '^' => Motion::new(b.first_non_blank(pos), Kind::Exclusive),
            '$' => {
                let line = (b.line_index(pos) + count - 1).min(b.line_count() - 1);
                let start = b.line_start_of(line);
                let end = b.line_end(start);
                // Inclusive of the last character; an empty line has none.
                if end > start {
                    Motion::new(end - 1, Kind::Inclusive)
                } else {
                    Motion::new(end, Kind::Exclusive)
                }
            }
            'G' => {
                let line = self
                    .vim
                    .pending
                    .explicit_count()
                    .map_or(b.line_count() - 1, |n| n.saturating_sub(1));
                Motion::new(b.first_non_blank(b.line_start_of(line)), Kind::Linewise)
            }
            ';' | ',' => {
                let (kind, ch) = self.vim.last_find?;
                let kind = if c == ',' { kind.reversed() } else { kind };
                return self.find_repeat(kind, ch, count);
            }
            _ => return None,
        })
    }

    fn find(&self, kind: Find, ch: char, count: usize) -> Option<Motion> {
        self.find_from(self.buf.cursor, kind, ch, count, false)
    }

    /// `;` after `t` must not find the character it stands before.
    fn find_repeat(&self, kind: Find, ch: char, count: usize) -> Option<Motion> {
        Some(
            self.find_from(self.buf.cursor, kind, ch, count, true)
                .unwrap_or(Motion::new(self.buf.cursor, Kind::Exclusive)),
        )
    }

    fn find_from(
        &self,
        pos: usize,
        kind: Find,
        ch: char,
        count: usize,
        repeat: bool,
    ) -> Option<Motion> {
        let b = &self.buf;
        let start = b.line_start(pos);
        let end = b.line_end(pos);
        match kind {
            Find::To | Find::Till => {
                let skip = usize::from(repeat && kind == Find::Till);
                let mut found = pos;
                let mut i = pos + 1 + skip;
                let mut left = count;
                while i < end {
                    if b.chars[i] == ch {
                        found = i;
                        left -= 1;
                        if left == 0 {
                            break;
                        }
                    }
                    i += 1;
                }
                if left > 0 {
                    return None;
                }
                let target = if kind == Find::Till { found - 1 } else { found };
                Some(Motion::new(target, Kind::Inclusive))
            }
            Find::BackTo | Find::BackTill => {
                let skip = usize::from(repeat && kind == Find::BackTill);
                let mut left = count;
                let mut i = pos.checked_sub(1 + skip)?;
                loop {
                    if i < start {
                        return None;
                    }
                    if b.chars[i] == ch {
                        left -= 1;
                        if left == 0 {
                            break;
                        }
                    }
                    i = i.checked_sub(1)?;
                }
                let target = if kind == Find::BackTill { i + 1 } else { i };
                Some(Motion::new(target, Kind::Exclusive))
            }
        }
    }

    /// Moves the cursor, or applies the pending operator over the motion.
    fn do_motion(&mut self, motion: Motion) -> Action {
        let op = self.vim.pending.op;
        let history_ok = op.is_none() && !self.in_visual() && self.vim.pending.count.is_none();
        self.vim.pending = Pending::default();
        let from = self.buf.cursor;
        if let Some(op) = op {
            return self.apply_op(op, from, motion);
        }
        if motion.vertical != 0 {
            let line = self.buf.line_index(from);
            if line == self.buf.line_index(motion.target) && history_ok {
                // j on the last line, k on the first: the history.
                let moved = if motion.vertical > 0 {
                    self.history_next()
                } else {
                    self.history_prev()
                };
                if moved {
                    return Action::None;
                }
            }
            let col = self.want_col.unwrap_or_else(|| self.buf.col(from));
            self.buf.cursor = motion.target;
            self.want_col = Some(col);
        } else {
            self.buf.cursor = motion.target;
            self.want_col = None;
        }
        if !self.in_visual() {
            self.buf.cursor = self.buf.clamp_normal(self.buf.cursor);
        } else if self.buf.cursor >= self.buf.line_end(self.buf.cursor)
            && self.buf.cursor > self.buf.line_start(self.buf.cursor)
        {
            self.buf.cursor -= 1;
        }
        Action::None
    }

    fn apply_op(&mut self, op: Op, from: usize, motion: Motion) -> Action {
        let (a, b) = (from.min(motion.target), from.max(motion.target));
        match motion.kind {
            Kind::Linewise => {
                let first = self.buf.line_index(a);
                let last = self.buf.line_index(b);
                self.apply_lines(op, first, last)
            }
            Kind::Inclusive => {
                let end = (b + 1).min(self.buf.len());
                self.apply_range(op, a..end)
            }
            Kind::Exclusive => self.apply_range(op, a..b),
        }
    }

    /// An operator over whole lines `first..=last`.
    fn apply_lines(&mut self, op: Op, first: usize, last: usize) -> Action {
        let start = self.buf.line_start_of(first);
        let end = self.buf.line_end(self.buf.line_start_of(last));
        let text = self.buf.slice(start..end);
        self.vim.register = Register {
            text,
            linewise: true,
        };
        match op {
            Op::Yank => {
                let col = self.buf.col(self.buf.cursor);
                if self.buf.line_index(self.buf.cursor) > first {
                    self.buf.cursor = self.buf.at_col(start, col);
                }
                Action::None
            }
            Op::Delete => {
                self.checkpoint();
                let range = if end < self.buf.len() {
                    start..end + 1
                } else if start > 0 {
                    start - 1..end
                } else {
                    start..end
                };
                self.buf.remove(range.clone());
                let at = if range.start < start {
                    self.buf.line_start(range.start)
                } else {
                    range.start
                };
                self.buf.cursor = self.buf.first_non_blank(at.min(self.buf.len()));
                self.buf.cursor = self.buf.clamp_normal(self.buf.cursor);
                Action::None
            }
            Op::Change => {
                self.checkpoint();
                // The lines' text goes, one empty line stays for the insert.
                self.buf.remove(start..end);
                self.enter_insert(start, false);
                Action::None
            }
        }
    }

    /// An operator over a character range.
    fn apply_range(&mut self, op: Op, range: Range<usize>) -> Action {
        let range = range.start.min(self.buf.len())..range.end.min(self.buf.len());
        let text = self.buf.slice(range.clone());
        if !text.is_empty() || op != Op::Yank {
            self.vim.register = Register {
                text,
                linewise: false,
            };
        }
        match op {
            Op::Yank => {
                self.buf.cursor = range.start;
                self.buf.cursor = self.buf.clamp_normal(self.buf.cursor);
            }
            Op::Delete => {
                self.checkpoint();
                self.buf.remove(range.clone());
                self.buf.cursor = self.buf.clamp_normal(range.start.min(self.buf.len()));
            }
            Op::Change => {
                self.checkpoint();
                self.buf.remove(range.clone());
                self.enter_insert(range.start, false);
            }
        }
        Action::None
    }

    fn visual_op(&mut self, op: Op) -> Action {
        let Some((range, linewise)) = self.vim_selection() else {
            return Action::None;
        };
        self.vim.pending = Pending::default();
        self.vim.state = VimState::Normal;
        if linewise {
            let first = self.buf.line_index(range.start);
            let last = self.buf.line_index(range.end);
            self.buf.cursor = range.start;
            return self.apply_lines(op, first, last);
        }
        self.apply_range(op, range)
    }

    fn visual_command(&mut self, c: char) -> Action {
        match c {
            'x' => self.visual_op(Op::Delete),
            's' => self.visual_op(Op::Change),
            'Y' => self.visual_op(Op::Yank),
            'v' | 'V' => {
                let line = c == 'V';
                if self.vim.state == (VimState::Visual { line }) {
                    self.vim.state = VimState::Normal;
                } else {
                    self.vim.state = VimState::Visual { line };
                }
                Action::None
            }
            'o' => {
                std::mem::swap(&mut self.vim.anchor, &mut self.buf.cursor);
                Action::None
            }
            'p' | 'P' => self.visual_put(),
            ':' => {
                self.vim.state = VimState::Command(String::new());
                Action::None
            }
            _ => Action::None,
        }
    }

    /// `p` in Visual mode: the selection is replaced by the register (which keeps its text).
    fn visual_put(&mut self) -> Action {
        let register = self.vim.register.clone();
        let Some((range, linewise)) = self.vim_selection() else {
            return Action::None;
        };
        let at_end = range.end >= self.buf.len();
        self.visual_op(Op::Delete);
        self.vim.register = register.clone();
        if linewise || register.linewise {
            return self.put(at_end && !self.buf.is_empty(), 1);
        }
        let chars: Vec<char> = register.text.chars().collect();
        let at = range.start.min(self.buf.len());
        self.buf.insert(at, &chars);
        self.buf.cursor = self.buf.clamp_normal(at + chars.len().saturating_sub(1));
        Action::None
    }

    fn normal_command(&mut self, c: char, count: usize) -> Action {
        let pos = self.buf.cursor;
        let start = self.buf.line_start(pos);
        let end = self.buf.line_end(pos);
        match c {
            'i' => self.enter_insert(pos, true),
            'a' => self.enter_insert(if end > pos { pos + 1 } else { pos }, true),
            'I' => self.enter_insert(self.buf.first_non_blank(pos), true),
            'A' => self.enter_insert(end, true),
            'o' => {
                self.checkpoint();
                self.buf.insert(end, &['\n']);
                self.enter_insert(end + 1, false);
            }
            'O' => {
                self.checkpoint();
                self.buf.insert(start, &['\n']);
                self.enter_insert(start, false);
            }
            'x' if end > pos => {
                return self.apply_range(Op::Delete, pos..(pos + count).min(end));
            }
            'X' if pos > start => {
                return self.apply_range(Op::Delete, pos.saturating_sub(count).max(start)..pos);
            }
            'D' => return self.apply_range(Op::Delete, pos..end),
            'C' => return self.apply_range(Op::Change, pos..end),
            's' => return self.apply_range(Op::Change, pos..(pos + count).min(end)),
            'S' => {
                let line = self.buf.line_index(pos);
                return self.apply_lines(Op::Change, line, line + count - 1);
            }
            'Y' => {
                let line = self.buf.line_index(pos);
                let last = (line + count - 1).min(self.buf.line_count() - 1);
                return self.apply_lines(Op::Yank, line, last);
            }
            'p' => return self.put(true, count),
            'P' => return self.put(false, count),
            'u' => {
                for _ in 0..count {
                    if !self.undo() {
                        break;
                    }
                }
                self.buf.cursor = self.buf.clamp_normal(self.buf.cursor);
            }
            'v' | 'V' => {
                self.vim.anchor = pos;
                self.vim.state = VimState::Visual { line: c == 'V' };
            }
            ':' => self.vim.state = VimState::Command(String::new()),
            _ => {}
        }
        Action::None
    }

    /// `p` (after the cursor, or below for lines) and `P` (before, or above).
    fn put(&mut self, after: bool, count: usize) -> Action {
        let register = self.vim.register.clone();
        if register.text.is_empty() && !register.linewise {
            return Action::None;
        }
        let size = register.text.chars().count().max(1) + 1;
        let count = count.min(MAX_PUT / size).max(1);
        self.checkpoint();
        let pos = self.buf.cursor;
        if register.linewise {
            let mut block = String::new();
            for i in 0..count {
                if i > 0 {
                    block.push('\n');
                }
                block.push_str(&register.text);
            }
            let chars: Vec<char> = if after {
                std::iter::once('\n').chain(block.chars()).collect()
            } else {
                block.chars().chain(std::iter::once('\n')).collect()
            };
            let at = if after {
                self.buf.line_end(pos)
            } else {
                self.buf.line_start(pos)
            };
            self.buf.insert(at, &chars);
            let line_at = if after { at + 1 } else { at };
            self.buf.cursor = self.buf.first_non_blank(line_at);
        } else {
            let text: String = register.text.repeat(count);
            let chars: Vec<char> = text.chars().collect();
            let at = if after && pos < self.buf.line_end(pos) {
                pos + 1
            } else {
                pos
            };
            self.buf.insert(at, &chars);
            self.buf.cursor = at + chars.len().saturating_sub(1);
        }
        self.buf.cursor = self.buf.clamp_normal(self.buf.cursor);
        Action::None
    }
}
