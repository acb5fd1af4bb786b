//! Streaming Markdown to styled spans for a terminal (HIP-0301 §16 `hanzo-md-render`): pure
//! logic, no terminal I/O; the UI maps [`Line`]s and [`Span`]s onto its toolkit.
//!
//! - [`MarkdownStream`] takes text in chunks and returns lines as they become final, with a
//!   [`MarkdownStream::preview`] of the tail; the result never depends on where the chunks were
//!   cut (see [`stream`](MarkdownStream) for why). [`render`] is the same, in one call.
//! - Code fences are buffered until closed and then highlighted in one pass (syntect, pure-Rust
//!   regex engine); an unclosed fence at the end of the stream is code to the end.
//! - Every span is terminal-safe: no control character, C1 control or bidi control survives
//!   (they become visible escapes). [`sanitize_for_terminal`] does the same for any other
//!   untrusted string the supervisor prints.

//!
//! # For the UI
//!
//! - **Streaming a reply.** Keep one `MarkdownStream` per assistant message. On each text delta,
//!   append what [`MarkdownStream::push`] returns to the message's final lines, then replace the
//!   message's tail with [`MarkdownStream::preview`] (recompute it after each push, not each
//!   frame: it re-renders the pending block). Final lines never change once returned; the
//!   preview is replaced wholesale. At the end of the message, append `finish()` and drop the
//!   preview. Keep the message's raw text too: on a resize, re-render it with [`render`] at the
//!   new width (the result is exactly what streaming at that width would have produced).
//! - **Width.** `RenderOptions::width` is the transcript's inner width in cells. Prose and
//!   headings come back already wrapped to it, with quote bars and list indentation repeated on
//!   continuation lines (`Line::indent` is the width of that prefix); tables are shrunk and cut
//!   with `…`; rules span it. Lines of [`LineKind::Code`] are never wrapped, so copied code stays
//!   intact: clip them (or wrap them yourself, indenting by `indent`). Do not let the toolkit
//!   wrap the other kinds again.
//! - **Mapping to ratatui.** `Span { text, style }` → `ratatui::text::Span::styled(text,
//!   style)`, with `Color::Red` → `ratatui::style::Color::Red` (and so on for the sixteen
//!   names; `Color::Rgb(r, g, b)` → `Color::Rgb(r, g, b)`), and each attribute to its
//!   `Modifier` (`BOLD`, `ITALIC`, `UNDERLINED`, `DIM`, `CROSSED_OUT`, `REVERSED`); `Line` →
//!   `ratatui::text::Line::from(spans)`. Set `color: false` when `NO_COLOR` is set (attributes
//!   stay) and `palette: Palette::Ansi16` when the terminal lacks true colour (`COLORTERM` is not
//!   `truecolor`/`24bit`).
//! - **Other untrusted strings** (tool output, commands in approval prompts, file names, error
//!   messages from workers) go through [`sanitize_for_terminal`], or
//!   [`sanitize_line_for_terminal`] where a line break would let text hide below a prompt.
//! - **Cost.** Syntect's syntax and theme sets load on the first highlighted block (tens of
//!   milliseconds in a release build); call [`preload`] on a background thread at start-up to
//!   pay it before the first reply.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod highlight;
mod render;
mod sanitize;
mod stream;
mod style;
mod wrap;

pub use sanitize::{is_unsafe_for_terminal, sanitize_for_terminal, sanitize_line_for_terminal};
pub use stream::MarkdownStream;
pub use style::{compact, Color, Line, LineKind, Palette, RenderOptions, Span, Style, Theme};

/// Loads the syntax and theme sets now rather than on the first highlighted block.
pub fn preload() {
    highlight::preload();
}

/// Renders a whole text: exactly what a [`MarkdownStream`] fed `text` in any chunks returns
/// from its pushes and `finish` together.
pub fn render(text: &str, opts: &RenderOptions) -> Vec<Line> {
    let mut stream = MarkdownStream::new(opts.clone());
    let mut lines = stream.push(text);
    lines.extend(stream.finish());
    lines
}

/// Renders a whole text with a single parse and no block segmentation: the non-streaming
/// baseline the benchmark compares against. It differs from [`render`] only in that a reference
/// definition also resolves links written before it.
pub fn render_document(text: &str, opts: &RenderOptions) -> Vec<Line> {
    // Line endings as the stream sees them (CRs inside HTML and code read the same; the last
    // line is a line even without its LF).
    let mut text = text.replace("\r\n", "\n").replace('\r', "\n");
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    render::render_text(&text, opts, &Default::default(), false, true)
}
