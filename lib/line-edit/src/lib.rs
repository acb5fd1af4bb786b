//! The input box's editing model (HIP-0301 §11): a multi-line buffer with a cursor, driven by
//! key events in three modes — `default`, `emacs` (readline keys, a kill ring) and `vim`
//! (Insert/Normal/Visual/Command, motions, operators, a 500 ms pending-operator timeout) — and
//! a per-workspace [`History`] that is saved without following planted symlinks.
//!
//! Pure logic: no terminal I/O. The UI maps its key events to [`Key`], calls
//! [`Editor::handle`] with the time each key arrived, and acts on the returned [`Action`].

//!
//! # For the UI
//!
//! - **Keys from crossterm.** `KeyEvent { code, modifiers, kind }`: ignore `KeyEventKind::Release`;
//!   `KeyCode::Char(c)` → `KeyCode::Char(c)` (with CONTROL, crossterm reports the letter; pass it
//!   as is), `Enter`, `Esc`, `Backspace`, `Delete`, `Left`, `Right`, `Up`, `Down`, `Home`, `End`,
//!   `PageUp`, `PageDown`, `Tab`, `BackTab`, `Insert` map one to one; `ctrl`, `alt`, `shift` from
//!   `KeyModifiers::{CONTROL, ALT, SHIFT}` (many terminals send Alt as an Esc prefix, which
//!   crossterm already folds into ALT). Most terminals cannot tell Shift-Enter from Enter unless
//!   the kitty keyboard protocol is enabled (`PushKeyboardEnhancementFlags`
//!   `DISAMBIGUATE_ESCAPE_CODES`); Alt-Enter, C-j and a trailing `\` always insert a newline.
//!   C-_ arrives as `Char('7')` with CONTROL on some terminals; both undo in emacs mode.
//! - **Pastes** (`Event::Paste`) go to [`Editor::insert_str`], not key by key (so Enter in a
//!   paste does not send).
//! - **Time.** Pass `Instant::now()` with every key, and call [`Editor::tick`] from the UI's
//!   timer so a pending operator's indicator ([`Editor::pending_keys`]) clears after 500 ms
//!   without a key.
//! - **Drawing.** [`Editor::lines`] and [`Editor::cursor_display_col`] give what to draw and
//!   where the terminal cursor goes; [`Editor::selection`] is the range to show reversed;
//!   [`Editor::mode_indicator`] goes in the status line. The text is the user's own, but it may
//!   hold a pasted escape sequence: [`Editor::insert_str`] drops control characters, and the
//!   UI should still print it through `hanzo_md_render::sanitize_line_for_terminal`.
//! - **Actions.** `Submit(text)` sends (the editor already cleared itself and recorded the text
//!   in its history; save it with [`History::save`]); `Cancel` is C-c (cancel the running turn;
//!   a second within 1 s exits); `Quit` is C-d on an empty buffer or `:q`; `Complete` is Tab
//!   (complete slash commands and apply with [`Editor::set_text`]); `ModeChanged` comes from
//!   `:set mode=…` (persist it as `input_mode` if wanted); `Message` is for the status line.
//! - **History location.** One file per workspace under the user's data directory (e.g.
//!   `{data_dir}/history/<hash of the workspace path>`), not inside the workspace; saving refuses
//!   symlinks anyway.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod buffer;
mod editor;
mod history;
mod key;
mod vim;

pub use editor::{Editor, Selection};
pub use history::{History, HistoryError, DEFAULT_MAX_ENTRIES, DEFAULT_MAX_ENTRY_BYTES};
pub use key::{Action, InputMode, Key, KeyCode, UnknownInputMode};
pub use vim::PENDING_TIMEOUT;
