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
