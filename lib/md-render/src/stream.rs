//! Streaming: text arrives in chunks; blocks become final as soon as nothing that follows can
//! change them.
//!
//! **Why the output cannot depend on chunk boundaries.** Chunks only feed a line splitter. The
//! stream acts on complete lines, one at a time, and every decision it takes (whether to look
//! for finished blocks, where to cut) is a function of the lines seen so far — never of how
//! many arrived in one call. `render` is `push` of the whole text then `finish`, so it takes the
//! same decisions. CR LF and a lone CR end lines as LF does; a CR at the end of a chunk ends its
//! line at once and a LF right after it is dropped, so no lookahead is needed.
//!
//! **Which blocks are final.** After certain lines (one at column 0 that could start a new
//! block, the closing line of a fence, or every 256 lines at the latest) the pending text is
//! parsed; in CommonMark a top-level block followed by another top-level block is closed and
//! nothing later can reopen it, so every top-level block but the last is final — and the last
//! too when it is a fenced code block with its closing fence. Final blocks are rendered from
//! that parse and dropped from the pending text, which always starts at a top-level block. The
//! one difference from parsing the whole document at once: a reference definition resolves
//! links in blocks after it, and in blocks before it only while they are still pending.

use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, Event, Tag};

use crate::render::{self, fence_is_closed, fence_run, RefMap, Renderer};
use crate::style::{Line, RenderOptions};

/// Lines since the last look for final blocks after which the stream looks anyway, so that no
/// heuristic can leave a long document pending (and previews quadratic).
const CHECK_AT_LEAST_EVERY: usize = 256;

/// How a complete line starts, as far as block segmentation cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineClass {
    Blank,
    /// Starts with whitespace.
    Indented,
    Heading,
    Quote,
    Table,
    Html,
    Setext,
    Rule,
    Fence,
    Bullet(u8),
    Ordered(u8),
    Other,
}

fn classify(line: &str) -> LineClass {
    let b = line.as_bytes();
    if line.trim().is_empty() {
        return LineClass::Blank;
    }
    match b[0] {
        b' ' | b'\t' => LineClass::Indented,
        b'#' => {
            let n = b.iter().take_while(|&&c| c == b'#').count();
            if n <= 6 && matches!(b.get(n), None | Some(b' ' | b'\t')) {
                LineClass::Heading
            } else {
                LineClass::Other
            }
        }
        b'>' => LineClass::Quote,
        b'|' => LineClass::Table,
        b'<' => LineClass::Html,
        b'=' if line.trim_end().bytes().all(|c| c == b'=') => LineClass::Setext,
        b'`' | b'~' if fence_run(line, Some(0)).is_some() => LineClass::Fence,
        c @ (b'-' | b'*' | b'_') if is_thematic_break(line, c) => LineClass::Rule,
        c @ (b'-' | b'*' | b'+') if matches!(b.get(1), None | Some(b' ' | b'\t')) => {
            LineClass::Bullet(c)
        }
        b'0'..=b'9' => {
            let n = b.iter().take_while(|c| c.is_ascii_digit()).count();
            match (b.get(n), b.get(n + 1)) {
                (Some(&d @ (b'.' | b')')), None | Some(b' ' | b'\t')) if n <= 9 => {
                    LineClass::Ordered(d)
                }
                _ => LineClass::Other,
            }
        }
        _ => LineClass::Other,
    }
}

fn is_thematic_break(line: &str, c: u8) -> bool {
    let mut n = 0;
    for b in line.bytes() {
        match b {
            b' ' | b'\t' => {}
            x if x == c => n += 1,
            _ => return false,
        }
    }
    n >= 3
}

/// Whether a column-0 line of class `class` surely continues the pending block, so looking for
/// final blocks can wait. Being wrong here only delays finalisation.
fn continues(prev: LineClass, first: Option<LineClass>, class: LineClass) -> bool {
    match class {
        LineClass::Bullet(_) | LineClass::Ordered(_) => first == Some(class),
        LineClass::Quote | LineClass::Table => first == Some(class) && prev != LineClass::Blank,
        LineClass::Other => matches!(
            prev,
            LineClass::Other
                | LineClass::Bullet(_)
                | LineClass::Ordered(_)
                | LineClass::Quote
                | LineClass::Table
        ),
        _ => false,
    }
}

/// A Markdown renderer fed in chunks. See the module documentation for what becomes final when.
///
/// ```
/// use hanzo_md_render::{MarkdownStream, RenderOptions};
/// let mut stream = MarkdownStream::new(RenderOptions::new(Some(80)));
/// let mut shown = stream.push("# Title\n\nSome **bold");
/// assert!(shown.is_empty()); // nothing is final until a line completes after the heading
/// let tail = stream.preview(); // what the UI shows meanwhile
/// assert_eq!(tail.last().map(|l| l.plain_text()), Some("Some **bold".to_owned()));
/// shown.extend(stream.push("** text\n"));
/// assert_eq!(shown.len(), 1); // the heading: a paragraph has begun after it
/// shown.extend(stream.finish());
/// assert_eq!(shown.last().map(|l| l.plain_text()), Some("Some bold text".to_owned()));
/// ```
#[derive(Debug)]
pub struct MarkdownStream {
    opts: RenderOptions,
    /// The start of a UTF-8 sequence cut by a chunk boundary (`push_bytes`).
    utf8_tail: Vec<u8>,
    /// The current line, not yet terminated.
    partial: String,
    /// The last character seen was a CR (which ended its line); a LF right after it is dropped.
    after_cr: bool,
    /// Complete lines not yet final, each ending in `\n`; starts at a top-level block.
    pending: String,
    /// Class of the first non-blank line of `pending`.
    first_class: Option<LineClass>,
    prev_class: LineClass,
    /// The fence the pending text seems to be inside (resynchronised from the parser at every
    /// look); only decides when to look.
    fence: Option<OpenFence>,
    lines_since_check: usize,
    refs: RefMap,
    /// Some line has been returned, so the next block is preceded by a blank line.
    emitted_any: bool,
    /// How many times the pending text was parsed to look for final blocks.
    looks: u64,
}

impl MarkdownStream {
    /// A stream with nothing pending, rendering with `opts`.
    pub fn new(opts: RenderOptions) -> Self {
        MarkdownStream {
            opts,
            utf8_tail: Vec::new(),
            partial: String::new(),
            after_cr: false,
            pending: String::new(),
            first_class: None,
            prev_class: LineClass::Blank,
            fence: None,
            lines_since_check: 0,
            refs: RefMap::new(),
            emitted_any: false,
            looks: 0,
        }
    }

    /// The options this stream renders with.
    pub fn options(&self) -> &RenderOptions {
        &self.opts
    }

    /// Feeds a chunk; returns the lines that became final (to append to the transcript).
    pub fn push(&mut self, chunk: &str) -> Vec<Line> {
        let mut out = Vec::new();
        if !self.utf8_tail.is_empty() {
            // Bytes of a cut sequence cannot be completed by a `&str`: they were invalid.
            self.utf8_tail.clear();
            self.feed('\u{fffd}'.encode_utf8(&mut [0; 4]), &mut out);
        }
        self.feed(chunk, &mut out);
        out
    }

    /// Feeds raw bytes, which may cut a UTF-8 sequence anywhere; invalid sequences become
    /// U+FFFD exactly as `String::from_utf8_lossy` of the whole input would.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> Vec<Line> {
        let mut out = Vec::new();
        let mut buf = std::mem::take(&mut self.utf8_tail);
        buf.extend_from_slice(bytes);
        let mut rest: &[u8] = &buf;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    self.feed(s, &mut out);
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // `valid_up_to` marks valid UTF-8.
                    self.feed(std::str::from_utf8(valid).unwrap_or(""), &mut out);
                    match e.error_len() {
                        Some(n) => {
                            self.feed("\u{fffd}", &mut out);
                            rest = &after[n..];
                        }
                        None => {
                            self.utf8_tail = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// The not-yet-final tail rendered as it stands (an open fence shown unhighlighted), for a
    /// UI to show below the final lines until the next `push`. Its cost is linear in the pending
    /// text — usually one block — so call it after a push rather than on every frame.
    pub fn preview(&self) -> Vec<Line> {
        if self.partial.is_empty() {
            return render::render_text(
                &self.pending,
                &self.opts,
                &self.refs,
                self.emitted_any,
                false,
            );
        }
        let mut text = String::with_capacity(self.pending.len() + self.partial.len() + 1);
        text.push_str(&self.pending);
        text.push_str(&self.partial);
        text.push('\n');
        render::render_text(&text, &self.opts, &self.refs, self.emitted_any, false)
    }

    /// Ends the stream: everything left, rendered. An unclosed fence is code to the end,
    /// highlighted as far as it goes.
    pub fn finish(mut self) -> Vec<Line> {
        let mut out = Vec::new();
        if !self.utf8_tail.is_empty() {
            self.utf8_tail.clear();
            self.feed("\u{fffd}", &mut out);
        }
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&line, &mut out);
        }
        out.extend(render::render_text(
            &self.pending,
            &self.opts,
            &self.refs,
            self.emitted_any,
            true,
        ));
        out
    }

    fn feed(&mut self, mut chunk: &str, out: &mut Vec<Line>) {
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix('\n') {
                chunk = rest;
            }
        }
        while let Some(i) = memchr::memchr2(b'\n', b'\r', chunk.as_bytes()) {
            let (head, tail) = chunk.split_at(i);
            if self.partial.is_empty() {
                self.line(head, out);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.push_str(head);
                self.line(&line, out);
                line.clear();
                self.partial = line;
            }
            let mut rest = &tail[1..];
            if tail.starts_with('\r') {
                match rest.strip_prefix('\n') {
                    Some(after) => rest = after,
                    None if rest.is_empty() => self.after_cr = true,
                    None => {}
                }
            }
            chunk = rest;
        }
        self.partial.push_str(chunk);
    }

    /// One complete line (without its terminator).
    fn line(&mut self, line: &str, out: &mut Vec<Line>) {
        let class = classify(line);
        // Alone in the pending text, a line finishes nothing (a fence is still looked at, so
        // the parser confirms it).
        let alone = self.pending.is_empty();
        self.pending.push_str(line);
        self.pending.push('\n');
        self.lines_since_check += 1;
        if self.first_class.is_none() && class != LineClass::Blank {
            self.first_class = Some(class);
        }
        let col0 = !matches!(class, LineClass::Blank | LineClass::Indented);
        let due = self.lines_since_check >= CHECK_AT_LEAST_EVERY;
        let look = match self.fence {
            Some(f) => {
                // Whitespace and `>` stripped: this finds every line that could close the fence.
                let closes = fence_run(line, None)
                    .is_some_and(|(c, m, rest)| c == f.ch && m >= f.len && rest.trim().is_empty());
                if closes {
                    self.fence = None;
                }
                if closes {
                    // Closing a fence nested in a list or quote finishes no top-level block.
                    f.top || due
                } else if f.confirmed && f.top {
                    // The parser saw this fence open at the top level: only a closing line
                    // ends it, so a long code block costs no looks.
                    false
                } else if f.confirmed {
                    // A line at column 0 may end the list item or quote holding the fence.
                    due || (col0 && !continues(self.prev_class, self.first_class, class))
                } else {
                    due
                }
            }
            None => {
                if let Some((ch, n, _)) = fence_run(line, None) {
                    self.fence = Some(OpenFence {
                        ch,
                        len: n,
                        top: col0,
                        confirmed: false,
                    });
                    col0 || due
                } else {
                    due || (col0 && !alone && !continues(self.prev_class, self.first_class, class))
                }
            }
        };
        self.prev_class = class;
        if look {
            self.finalize(out);
        }
    }

    /// Parses the pending text and moves its final blocks to `out`.
    fn finalize(&mut self, out: &mut Vec<Line>) {
        self.lines_since_check = 0;
        self.looks += 1;
        let (cut, lines, defs, fence) = {
            let parsed = render::parse(&self.pending, &self.refs);
            let starts = top_level_starts(&parsed.events);
            let mut split: Option<(usize, usize)> = None;
            if let Some(&(last_idx, last_off)) = starts.last() {
                if starts.len() >= 2 {
                    split = Some((last_idx, line_start(&self.pending, last_off)));
                }
                let (event, range) = &parsed.events[last_idx];
                if matches!(
                    event,
                    Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_)))
                ) && fence_is_closed(&self.pending[range.clone()], true)
                {
                    split = Some((parsed.events.len(), line_end(&self.pending, range.end)));
                }
            }
            let fence_from = split.map_or(0, |(idx, _)| idx);
            let fence = open_fence(&self.pending, &parsed.events[fence_from..]);
            match split {
                Some((idx, cut)) if cut > 0 => {
                    let lines = Renderer::new(&self.opts, &self.pending, self.emitted_any, true)
                        .render(&parsed.events[..idx]);
                    let defs: Vec<_> = parsed.defs.into_iter().filter(|d| d.3.end <= cut).collect();
                    (cut, lines, defs, fence)
                }
                _ => (0, Vec::new(), Vec::new(), fence),
            }
        };
        self.fence = fence;
        if cut == 0 {
            return;
        }
        for (label, url, title, _) in defs {
            // The first definition of a label wins.
            self.refs.entry(label).or_insert((url, title));
        }
        self.emitted_any |= !lines.is_empty();
        out.extend(lines);
        self.pending.drain(..cut);
        self.first_class = self
            .pending
            .lines()
            .map(classify)
            .find(|c| *c != LineClass::Blank);
    }
}

/// Event index and source offset of each top-level block.
fn top_level_starts(events: &[(Event<'_>, Range<usize>)]) -> Vec<(usize, usize)> {
    let mut starts = Vec::new();
    let mut depth = 0usize;
    for (i, (event, range)) in events.iter().enumerate() {
        match event {
            Event::Start(_) => {
                if depth == 0 {
                    starts.push((i, range.start));
                }
                depth += 1;
            }
            Event::End(_) => depth = depth.saturating_sub(1),
            _ if depth == 0 => starts.push((i, range.start)),
            _ => {}
        }
    }
    starts
}

/// The fence the stream is inside, as far as looking for final blocks is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OpenFence {
    ch: u8,
    len: usize,
    /// Its opening line starts at column 0.
    top: bool,
    /// A parse saw it open (rather than the line tracker guessing).
    confirmed: bool,
}

/// The fenced code block still open at the end of the text, if any.
fn open_fence(text: &str, events: &[(Event<'_>, Range<usize>)]) -> Option<OpenFence> {
    events.iter().rev().find_map(|(event, range)| match event {
        Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_)))
            if range.end >= text.len() && !fence_is_closed(&text[range.clone()], false) =>
        {
            let first = text[range.clone()].lines().next()?;
            let start = line_start(text, range.start);
            let whole_line = text[start..].lines().next()?;
            fence_run(first, None).map(|(ch, len, _)| OpenFence {
                ch,
                len,
                top: fence_run(whole_line, Some(0)).is_some(),
                confirmed: true,
            })
        }
        _ => None,
    })
}

fn line_start(text: &str, offset: usize) -> usize {
    text[..offset].rfind('\n').map_or(0, |i| i + 1)
}

fn line_end(text: &str, offset: usize) -> usize {
    if offset == 0 || text.as_bytes().get(offset - 1) == Some(&b'\n') {
        return offset;
    }
    text[offset..]
        .find('\n')
        .map_or(text.len(), |i| offset + i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(classify("# h"), LineClass::Heading);
        assert_eq!(classify("#hashtag"), LineClass::Other);
        assert_eq!(classify("- item"), LineClass::Bullet(b'-'));
        assert_eq!(classify("---"), LineClass::Rule);
        assert_eq!(classify("* * *"), LineClass::Rule);
        assert_eq!(classify("-x"), LineClass::Other);
        assert_eq!(classify("12. x"), LineClass::Ordered(b'.'));
        assert_eq!(classify("3) x"), LineClass::Ordered(b')'));
        assert_eq!(classify("2024 was"), LineClass::Other);
        assert_eq!(classify("```rust"), LineClass::Fence);
        assert_eq!(classify("  code"), LineClass::Indented);
        assert_eq!(classify("   "), LineClass::Blank);
        assert_eq!(classify("==="), LineClass::Setext);
    }

    #[test]
    fn blocks_become_final_when_the_next_begins() {
        let mut s = MarkdownStream::new(RenderOptions::default());
        assert!(s.push("para one\nstill one\n\n").is_empty());
        let done = s.push("para two\n");
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].plain_text(), "para one still one");
        assert_eq!(s.pending, "para two\n");
        let rest = s.finish();
        assert_eq!(rest[0].kind, crate::LineKind::Blank);
        assert_eq!(rest[1].plain_text(), "para two");
    }

    #[test]
    fn a_closed_fence_is_final_at_its_closing_line() {
        let mut s = MarkdownStream::new(RenderOptions::default());
        assert!(s.push("```rust\nfn main() {}\n").is_empty());
        assert_eq!(
            s.fence,
            Some(OpenFence {
                ch: b'`',
                len: 3,
                top: true,
                confirmed: true
            })
        );
        let done = s.push("```\n");
        assert_eq!(done.len(), 3);
        assert!(s.pending.is_empty());
        assert_eq!(s.fence, None);
    }

    /// Looking parses the pending text, so it must stay rare inside long blocks: a long code
    /// block is looked at when it opens and closes, long lists and paragraphs at most every
    /// `CHECK_AT_LEAST_EVERY` lines.
    #[test]
    fn long_blocks_are_not_parsed_over_and_over() {
        let mut code = String::from("para\n\n```rust\n");
        for i in 0..3_000 {
            code.push_str(&format!("let x{i} = {i}; // no closing fence here\n"));
        }
        code.push_str("```\n");
        let plain = RenderOptions {
            color: false,
            ..RenderOptions::default()
        };
        let mut s = MarkdownStream::new(plain.clone());
        let lines = s.push(&code);
        assert_eq!(s.looks, 2, "at the opening and the closing fence");
        assert_eq!(lines.len(), 1 + 1 + 3_002);

        let mut list = String::new();
        for i in 0..10_000 {
            list.push_str(&format!("- item {i}\n"));
        }
        let mut s = MarkdownStream::new(plain.clone());
        s.push(&list);
        assert!(
            s.looks <= 10_000 / CHECK_AT_LEAST_EVERY as u64 + 1,
            "{}",
            s.looks
        );

        let mut para = String::new();
        for i in 0..10_000 {
            para.push_str(&format!("line {i} of one long paragraph\n"));
        }
        let mut s = MarkdownStream::new(plain);
        s.push(&para);
        assert!(
            s.looks <= 10_000 / CHECK_AT_LEAST_EVERY as u64 + 1,
            "{}",
            s.looks
        );
    }

    #[test]
    fn cr_at_a_chunk_end_and_lf_after_it_make_one_line_end() {
        let mut a = MarkdownStream::new(RenderOptions::default());
        let mut lines = a.push("one\r");
        lines.extend(a.push("\ntwo\r\rthree"));
        lines.extend(a.finish());
        let text: Vec<String> = lines.iter().map(Line::plain_text).collect();
        assert_eq!(text, ["one two", "", "three"]);
    }
}
