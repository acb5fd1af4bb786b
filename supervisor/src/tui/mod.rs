//! The interactive session's screen (`hanzo-dev chat`, HIP-0301 §11): a transcript that streams
//! the model's Markdown (`hanzo-md-render`), tool calls as compact folded lines, a status line,
//! a permission prompt, and an input box driven by `hanzo-line-edit`.
//!
//! - [`bridge`]: what connects the agent loop to the screen — an [`crate::agent::EventSink`]
//!   and a [`crate::agent::PermissionPrompter`] that send to the UI's channel.
//! - [`transcript`]: what the conversation shows, as terminal-safe lines at a width.
//! - [`app`]: the screen's state (transcript, input, prompt, status) and how it draws.
//! - [`keys`]: crossterm's key events as line-edit keys.
//! - [`slash`]: slash commands and their Tab completion.
//! - [`git`]: the git slash commands, run as the user without a shell.
//!
//! Architecture invariant: nothing reaches the terminal unsanitised. Model text goes through
//! md-render (whose spans are terminal-safe), and every other string from outside — tool input
//! and output, reasons, file names, errors — through `sanitize_line_for_terminal` before it
//! becomes a cell. The UI never writes to the terminal except through ratatui.

pub mod app;
pub mod bridge;
pub mod git;
pub mod keys;
pub mod slash;
pub mod transcript;
