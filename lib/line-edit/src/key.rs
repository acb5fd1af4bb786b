//! The editor's own key, mode and action types; the UI maps its toolkit's events onto them.

use std::fmt;
use std::str::FromStr;

/// Which key was pressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyCode {
    /// A printable character. With `ctrl`, the letter itself (`Char('a')` for C-a), whatever
    /// the case the terminal reported.
    Char(char),
    /// Return: submits the input (a newline with Shift or Alt).
    Enter,
    /// Escape: in vim mode, back to Normal mode.
    Esc,
    /// Deletes the character before the cursor.
    Backspace,
    /// Deletes the character under the cursor.
    Delete,
    /// Cursor one character back.
    Left,
    /// Cursor one character forward.
    Right,
    /// The line above, or the previous history entry on the first line.
    Up,
    /// The line below, or the next history entry on the last line.
    Down,
    /// Start of the line.
    Home,
    /// End of the line.
    End,
    /// Not an editing key: the editor ignores it, the UI may use it.
    PageUp,
    /// Not an editing key: the editor ignores it, the UI may use it.
    PageDown,
    /// Asks for completion ([`Action::Complete`]).
    Tab,
    /// Shift-Tab.
    BackTab,
    /// Not an editing key: the editor ignores it.
    Insert,
}

/// A key press with its modifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    /// The key itself.
    pub code: KeyCode,
    /// Control was held.
    pub ctrl: bool,
    /// Alt, or Meta (Esc-prefixed keys as terminals send them).
    pub alt: bool,
    /// Shift was held (already applied to a `Char`'s case).
    pub shift: bool,
}

impl Key {
    /// `code` with no modifier.
    pub const fn new(code: KeyCode) -> Self {
        Key {
            code,
            ctrl: false,
            alt: false,
            shift: false,
        }
    }
    /// The character `c` typed alone.
    pub const fn char(c: char) -> Self {
        Key::new(KeyCode::Char(c))
    }
    /// C-`c`.
    pub const fn ctrl(c: char) -> Self {
        Key {
            ctrl: true,
            ..Key::char(c)
        }
    }
    /// M-`c` (Alt, or Esc then `c`).
    pub const fn alt(c: char) -> Self {
        Key {
            alt: true,
            ..Key::char(c)
        }
    }
    /// This key with Shift held too.
    pub const fn with_shift(mut self) -> Self {
        self.shift = true;
        self
    }
    /// This key with Alt held too.
    pub const fn with_alt(mut self) -> Self {
        self.alt = true;
        self
    }
    /// This key with Control held too.
    pub const fn with_ctrl(mut self) -> Self {
        self.ctrl = true;
        self
    }

    /// A character typed as text: no Ctrl or Alt (Shift is already in the character).
    pub(crate) fn typed(&self) -> Option<char> {
        match self.code {
            KeyCode::Char(c) if !self.ctrl && !self.alt => Some(c),
            _ => None,
        }
    }

    /// C-`c` (case-insensitive).
    pub(crate) fn is_ctrl(&self, c: char) -> bool {
        self.ctrl
            && !self.alt
            && matches!(self.code, KeyCode::Char(k) if k.eq_ignore_ascii_case(&c))
    }

    /// Enter with Shift or Alt, or C-j: a newline rather than a submit.
    pub(crate) fn is_newline(&self) -> bool {
        (self.code == KeyCode::Enter && (self.shift || self.alt)) || self.is_ctrl('j')
    }
}

/// The editing mode: `input_mode` in settings (`HANZO_INPUT_MODE` overrides it), as
/// `hanzo_policy` merges them; its names parse with `str::parse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum InputMode {
    /// Readline-like keys that most users expect without configuring anything.
    #[default]
    Default,
    /// Emacs bindings: kill ring, yank, word motion, Meta keys.
    Emacs,
    /// Vim's modal editing: Normal and Insert modes, operators, counts.
    Vim,
}

impl InputMode {
    /// Every mode, in the order settings and help list them.
    pub const ALL: [InputMode; 3] = [InputMode::Default, InputMode::Emacs, InputMode::Vim];

    /// The name settings and `HANZO_INPUT_MODE` use.
    pub fn as_str(&self) -> &'static str {
        match self {
            InputMode::Default => "default",
            InputMode::Emacs => "emacs",
            InputMode::Vim => "vim",
        }
    }
}

impl fmt::Display for InputMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An input mode name that is not `default`, `emacs` or `vim`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown input mode {0:?}: expected \"default\", \"emacs\" or \"vim\"")]
pub struct UnknownInputMode(pub String);

impl FromStr for InputMode {
    type Err = UnknownInputMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "default" => Ok(InputMode::Default),
            "emacs" => Ok(InputMode::Emacs),
            "vim" => Ok(InputMode::Vim),
            _ => Err(UnknownInputMode(s.to_owned())),
        }
    }
}

/// What the UI should do after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing beyond redrawing the input box.
    None,
    /// Send this text (Enter, or `:w` in vim). The buffer is now empty and the text is in the
    /// history.
    Submit(String),
    /// Leave the session (`:q`, or C-d on an empty buffer).
    Quit,
    /// C-c: the buffer was cleared; cancel the running turn, or count towards a double C-c.
    Cancel,
    /// Tab: complete what is typed (slash commands); apply with [`crate::Editor::set_text`].
    Complete,
    /// The input mode changed (`:set mode=emacs`); the UI may save it in settings.
    ModeChanged(InputMode),
    /// A message for the status line (`:set` listing options, an unknown `:` command).
    Message(String),
}
