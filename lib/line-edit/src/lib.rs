//! The input box's editing model (HIP-0301 §11): a multi-line buffer with a cursor, driven by
//! key events in three modes — `default`, `emacs` (readline keys, a kill ring) and `vim`
//! (Insert/Normal/Visual/Command, motions, operators, a 500 ms pending-operator timeout) — and
//! a per-workspace [`History`] that is saved without following planted symlinks.
//!
//! Pure logic: no terminal I/O. The UI maps its key events to [`Key`], calls
//! [`Editor::handle`] with the time each key arrived, and acts on the returned [`Action`].

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
