//! Parsed Markdown events to styled lines: block layout (containers, gaps, wrapping), inline
//! styles, tables and code blocks. Every string that goes into a span passes [`clean`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

use pulldown_cmark::{
    Alignment, BrokenLink, CodeBlockKind, CowStr, Event, LinkType, Options, Parser, Tag, TagEnd,
};

use crate::highlight;
use crate::sanitize::sanitize_line_for_terminal;
use crate::style::{Line, LineKind, RenderOptions, Span, Style};
use crate::wrap::{self, Inline};

/// Reference definitions seen in final blocks: normalised label → (destination, title).
pub(crate) type RefMap = HashMap<String, (String, String)>;

pub(crate) fn parser_options() -> Options {
    Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS
}

/// A link label as CommonMark compares them: case-folded, whitespace collapsed.
pub(crate) fn normalize_label(label: &str) -> String {
    label
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// What one parse of a text yields.
pub(crate) struct Parsed<'a> {
    pub events: Vec<(Event<'a>, Range<usize>)>,
    /// The reference definitions the text itself holds, with their source spans.
    pub defs: Vec<(String, String, String, Range<usize>)>,
}

/// Parses `text`; references it does not define resolve through `refs`.
pub(crate) fn parse<'a>(text: &'a str, refs: &'a RefMap) -> Parsed<'a> {
    let callback = move |link: BrokenLink<'a>| {
        refs.get(&normalize_label(&link.reference))
            .map(|(url, title)| (CowStr::from(url.clone()), CowStr::from(title.clone())))
    };
    let mut iter = Parser::new_with_broken_link_callback(text, parser_options(), Some(callback))
        .into_offset_iter();
    let events: Vec<_> = iter.by_ref().collect();
    let defs = iter
        .reference_definitions()
        .iter()
        .map(|(label, def)| {
            (
                normalize_label(label),
                def.dest.to_string(),
                def.title.as_deref().unwrap_or("").to_owned(),
                def.span.clone(),
            )
        })
        .collect();
    Parsed { events, defs }
}

/// Text safe for one span: tabs and line breaks become spaces, every control character and
/// bidi control a visible escape.
pub(crate) fn clean(text: &str) -> Cow<'_, str> {
    if text.contains(['\t', '\n', '\r']) {
        let spaced: String = text
            .chars()
            .map(|c| {
                if matches!(c, '\t' | '\n' | '\r') {
                    ' '
                } else {
                    c
                }
            })
            .collect();
        Cow::Owned(sanitize_line_for_terminal(&spaced).into_owned())
    } else {
        sanitize_line_for_terminal(text)
    }
}

/// Expands tabs to the next multiple of four columns.
fn expand_tabs(line: &str) -> Cow<'_, str> {
    if !line.contains('\t') {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len() + 8);
    let mut col = 0;
    for c in line.chars() {
        if c == '\t' {
            let n = 4 - col % 4;
            out.extend(std::iter::repeat_n(' ', n));
            col += n;
        } else {
            out.push(c);
            col += wrap::char_width(c);
        }
    }
    Cow::Owned(out)
}

/// The fence run (```` ``` ```` or `~~~~`) a line opens with, after up to `max_indent` columns
/// of spaces (`None`: any leading whitespace and `>` markers).
pub(crate) fn fence_run(line: &str, max_indent: Option<usize>) -> Option<(u8, usize, &str)> {
    let rest = match max_indent {
        Some(max) => {
            let spaces = line.len() - line.trim_start_matches(' ').len();
            if spaces > max {
                return None;
            }
            &line[spaces..]
        }
        None => line.trim_start_matches(|c: char| c.is_whitespace() || c == '>'),
    };
    let ch = *rest.as_bytes().first()?;
    if ch != b'`' && ch != b'~' {
        return None;
    }
    let n = rest.len() - rest.trim_start_matches(char::from(ch)).len();
    if n < 3 {
        return None;
    }
    let info = &rest[n..];
    if ch == b'`' && info.contains('`') {
        return None;
    }
    Some((ch, n, info))
}

/// Whether the fenced code block whose source is `block` ends with its closing fence.
/// `strict`: the block is at the top level, so a closing fence is indented at most three spaces.
pub(crate) fn fence_is_closed(block: &str, strict: bool) -> bool {
    let indent = if strict { Some(3) } else { None };
    let mut lines = block.trim_end_matches('\n').lines();
    let Some(first) = lines.next() else {
        return false;
    };
    let Some((ch, n, _)) = fence_run(first, indent) else {
        return false;
    };
    let Some(last) = lines.next_back() else {
        return false;
    };
    match fence_run(last, indent) {
        Some((c, m, rest)) => c == ch && m >= n && rest.trim().is_empty(),
        None => false,
    }
}

enum Container {
    /// A block quote, with the number of lines output when it began.
    Quote(usize),
    List {
        next: Option<u64>,
        loose: bool,
    },
    Item {
        marker: Vec<Span>,
        width: usize,
        shown: bool,
    },
}

struct LinkState {
    url: String,
    start: usize,
    shows_url: bool,
}

struct CodeState {
    fenced: bool,
    info: String,
    text: String,
    range: Range<usize>,
}

struct TableState {
    aligns: Vec<Alignment>,
    rows: Vec<Vec<Vec<Span>>>,
    row: Vec<Vec<Span>>,
    in_head: bool,
    header_rows: usize,
}

/// Renders a sequence of events into lines.
pub(crate) struct Renderer<'o> {
    opts: &'o RenderOptions,
    src: &'o str,
    /// Highlight a fenced block that has no closing fence (at the end of the stream); a preview
    /// shows it plain.
    highlight_open: bool,
    out: Vec<Line>,
    containers: Vec<Container>,
    inline: Vec<Inline>,
    strong: u32,
    emphasis: u32,
    strike: u32,
    image: u32,
    links: Vec<LinkState>,
    heading: Option<u8>,
    pending_gap: bool,
    /// Lines were shown before this renderer's: a gap is owed before its first block.
    gap_before: bool,
    code: Option<CodeState>,
    html: Option<String>,
    table: Option<TableState>,
}

impl<'o> Renderer<'o> {
    /// `gap_before`: something was shown before these events, so the first block is preceded
    /// by a blank line.
    pub(crate) fn new(
        opts: &'o RenderOptions,
        src: &'o str,
        gap_before: bool,
        highlight_open: bool,
    ) -> Self {
        Renderer {
            opts,
            src,
            highlight_open,
            out: Vec::new(),
            containers: Vec::new(),
            inline: Vec::new(),
            strong: 0,
            emphasis: 0,
            strike: 0,
            image: 0,
            links: Vec::new(),
            heading: None,
            pending_gap: gap_before,
            gap_before,
            code: None,
            html: None,
            table: None,
        }
    }

    pub(crate) fn render(mut self, events: &[(Event<'_>, Range<usize>)]) -> Vec<Line> {
        for (event, range) in events {
            self.event(event, range);
        }
        self.flush_inline();
        if !self.opts.color {
            for line in &mut self.out {
                for span in &mut line.spans {
                    span.style.fg = None;
                }
            }
        }
        self.out
    }

    fn theme(&self) -> &crate::style::Theme {
        &self.opts.theme
    }

    fn quote_depth(&self) -> usize {
        self.containers
            .iter()
            .filter(|c| matches!(c, Container::Quote(_)))
            .count()
    }

    fn style(&self) -> Style {
        let theme = self.theme();
        let mut s = theme.text;
        if self.quote_depth() > 0 {
            s = s.patch(theme.quote_text);
        }
        if let Some(level) = self.heading {
            s = s.patch(theme.heading[usize::from(level.clamp(1, 6)) - 1]);
        }
        if self.table.as_ref().is_some_and(|t| t.in_head) {
            s = s.patch(theme.table_header);
        }
        if self.strong > 0 {
            s = s.patch(theme.strong);
        }
        if self.emphasis > 0 {
            s = s.patch(theme.emphasis);
        }
        if self.strike > 0 {
            s = s.patch(theme.strikethrough);
        }
        if !self.links.is_empty() || self.image > 0 {
            s = s.patch(theme.link_text);
        }
        s
    }

    fn push_inline(&mut self, text: &str, style: Style) {
        if text.is_empty() {
            return;
        }
        self.inline
            .push(Inline::Text(Span::new(clean(text).into_owned(), style)));
    }

    fn text(&mut self, text: &str) {
        if let Some(code) = &mut self.code {
            code.text.push_str(text);
        } else if let Some(html) = &mut self.html {
            html.push_str(text);
        } else {
            let style = self.style();
            self.push_inline(text, style);
        }
    }

    fn event(&mut self, event: &Event<'_>, range: &Range<usize>) {
        match event {
            Event::Start(tag) => self.start(tag, range),
            Event::End(tag) => self.end(*tag),
            Event::Text(t) => self.text(t),
            Event::Code(t) => {
                let style = self.style().patch(self.theme().inline_code);
                if self.opts.color {
                    self.push_inline(t, style);
                } else {
                    self.push_inline(&format!("`{t}`"), style);
                }
            }
            Event::Html(t) => self.text(t),
            Event::InlineHtml(t) => {
                let style = self.style().patch(self.theme().html);
                self.push_inline(t, style);
            }
            Event::InlineMath(t) | Event::DisplayMath(t) => self.text(t),
            Event::FootnoteReference(label) => {
                let style = self.style();
                self.push_inline(&format!("[^{label}]"), style);
            }
            Event::SoftBreak => {
                let style = self.style();
                self.push_inline(" ", style);
            }
            Event::HardBreak => self.inline.push(Inline::Break),
            Event::Rule => {
                self.begin_block();
                let width = self.available_width().unwrap_or(40);
                let rule = Span::new("─".repeat(width), self.theme().rule);
                self.emit(LineKind::Rule, vec![rule]);
                self.pending_gap = true;
            }
            Event::TaskListMarker(checked) => {
                let marker = if *checked { "[x] " } else { "[ ] " };
                let style = self.theme().list_marker;
                self.push_inline(marker, style);
            }
        }
    }

    fn start(&mut self, tag: &Tag<'_>, range: &Range<usize>) {
        match tag {
            Tag::Paragraph => {
                self.begin_block();
                let len = self.containers.len();
                if len >= 2 && matches!(self.containers[len - 1], Container::Item { .. }) {
                    if let Container::List { loose, .. } = &mut self.containers[len - 2] {
                        *loose = true;
                    }
                }
            }
            Tag::Heading { level, .. } => {
                self.begin_block();
                self.heading = Some(*level as u8);
            }
            Tag::BlockQuote(_) => {
                self.begin_block();
                self.containers.push(Container::Quote(self.out.len()));
            }
            Tag::CodeBlock(kind) => {
                self.begin_block();
                let (fenced, info) = match kind {
                    CodeBlockKind::Fenced(info) => (true, info.to_string()),
                    CodeBlockKind::Indented => (false, String::new()),
                };
                self.code = Some(CodeState {
                    fenced,
                    info,
                    text: String::new(),
                    range: range.clone(),
                });
            }
            Tag::HtmlBlock => {
                self.begin_block();
                self.html = Some(String::new());
            }
            Tag::List(start) => {
                self.begin_block();
                self.containers.push(Container::List {
                    next: *start,
                    loose: false,
                });
            }
            Tag::Item => {
                self.flush_inline();
                let depth = self
                    .containers
                    .iter()
                    .filter(|c| matches!(c, Container::List { .. }))
                    .count();
                let marker_style = self.theme().list_marker;
                let mut marker = None;
                if let Some(Container::List { next, loose }) = self.containers.last_mut() {
                    if !*loose {
                        self.pending_gap = false;
                    }
                    marker = Some(match next {
                        Some(n) => {
                            let m = format!("{n}. ");
                            *n = n.saturating_add(1);
                            m
                        }
                        None => {
                            let bullets = ["•", "◦", "▪"];
                            format!("{} ", bullets[depth.saturating_sub(1) % 3])
                        }
                    });
                }
                let marker = marker.unwrap_or_else(|| "• ".to_owned());
                let width = unicode_width::UnicodeWidthStr::width(marker.as_str());
                self.containers.push(Container::Item {
                    marker: vec![Span::new(marker, marker_style)],
                    width,
                    shown: false,
                });
            }
            Tag::Table(aligns) => {
                self.begin_block();
                self.table = Some(TableState {
                    aligns: aligns.clone(),
                    rows: Vec::new(),
                    row: Vec::new(),
                    in_head: false,
                    header_rows: 0,
                });
            }
            Tag::TableHead => {
                if let Some(t) = &mut self.table {
                    t.in_head = true;
                    t.row.clear();
                }
            }
            Tag::TableRow => {
                if let Some(t) = &mut self.table {
                    t.row.clear();
                }
            }
            Tag::TableCell => self.inline.clear(),
            Tag::Emphasis => self.emphasis += 1,
            Tag::Strong => self.strong += 1,
            Tag::Strikethrough => self.strike += 1,
            Tag::Link {
                link_type,
                dest_url,
                ..
            } => {
                let shows_url = matches!(link_type, LinkType::Autolink | LinkType::Email);
                self.links.push(LinkState {
                    url: dest_url.to_string(),
                    start: self.inline.len(),
                    shows_url,
                });
            }
            Tag::Image { dest_url, .. } => {
                let style = self.style().patch(self.theme().link_text);
                self.push_inline("[image: ", style);
                self.image += 1;
                self.links.push(LinkState {
                    url: dest_url.to_string(),
                    start: self.inline.len(),
                    shows_url: false,
                });
            }
            Tag::FootnoteDefinition(label) => {
                self.begin_block();
                let style = self.style();
                self.push_inline(&format!("[^{label}]: "), style);
            }
            Tag::Superscript
            | Tag::Subscript
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::MetadataBlock(_) => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph => {
                self.flush_inline();
                self.pending_gap = true;
            }
            TagEnd::Heading(level) => {
                if self.inline.is_empty() {
                    self.emit(LineKind::Heading(level as u8), Vec::new());
                }
                self.flush_inline();
                self.heading = None;
                self.pending_gap = true;
            }
            TagEnd::BlockQuote(_) => {
                self.flush_inline();
                if let Some(Container::Quote(start)) = self.containers.last() {
                    if *start == self.out.len() {
                        // An empty quote still shows its bar.
                        self.emit(LineKind::Paragraph, Vec::new());
                    }
                }
                self.containers.pop();
                self.pending_gap = true;
            }
            TagEnd::CodeBlock => {
                if let Some(code) = self.code.take() {
                    self.emit_code(code);
                }
                self.pending_gap = true;
            }
            TagEnd::HtmlBlock => {
                if let Some(html) = self.html.take() {
                    let style = self.theme().html;
                    for line in html.trim_end_matches('\n').split('\n') {
                        let text = clean(&expand_tabs(line)).into_owned();
                        self.emit(LineKind::Html, vec![Span::new(text, style)]);
                    }
                }
                self.pending_gap = true;
            }
            TagEnd::List(_) => {
                self.flush_inline();
                self.containers.pop();
                self.pending_gap = true;
            }
            TagEnd::Item => {
                self.flush_inline();
                let unshown = matches!(
                    self.containers.last(),
                    Some(Container::Item { shown: false, .. })
                );
                if unshown {
                    self.emit(LineKind::Paragraph, Vec::new());
                }
                self.containers.pop();
            }
            TagEnd::Table => {
                if let Some(table) = self.table.take() {
                    self.emit_table(table);
                }
                self.pending_gap = true;
            }
            TagEnd::TableHead => {
                if let Some(t) = &mut self.table {
                    let row = std::mem::take(&mut t.row);
                    t.rows.push(row);
                    t.in_head = false;
                    t.header_rows = t.rows.len();
                }
            }
            TagEnd::TableRow => {
                if let Some(t) = &mut self.table {
                    let row = std::mem::take(&mut t.row);
                    t.rows.push(row);
                }
            }
            TagEnd::TableCell => {
                let content = std::mem::take(&mut self.inline);
                let cell: Vec<Span> = wrap::wrap(&content, None)
                    .into_iter()
                    .enumerate()
                    .flat_map(|(i, line)| {
                        let sep = (i > 0).then(|| Span::plain(" "));
                        sep.into_iter().chain(line)
                    })
                    .collect();
                if let Some(t) = &mut self.table {
                    t.row.push(wrap::merge(cell));
                }
            }
            TagEnd::Emphasis => self.emphasis = self.emphasis.saturating_sub(1),
            TagEnd::Strong => self.strong = self.strong.saturating_sub(1),
            TagEnd::Strikethrough => self.strike = self.strike.saturating_sub(1),
            TagEnd::Link => self.end_link(),
            TagEnd::Image => {
                self.image = self.image.saturating_sub(1);
                let style = self.style().patch(self.theme().link_text);
                self.push_inline("]", style);
                self.end_link();
            }
            TagEnd::FootnoteDefinition => {
                self.flush_inline();
                self.pending_gap = true;
            }
            TagEnd::Superscript
            | TagEnd::Subscript
            | TagEnd::DefinitionList
            | TagEnd::DefinitionListTitle
            | TagEnd::DefinitionListDefinition
            | TagEnd::MetadataBlock(_) => {}
        }
    }

    fn end_link(&mut self) {
        let Some(link) = self.links.pop() else {
            return;
        };
        if link.shows_url || link.url.is_empty() {
            return;
        }
        let shown: String = self.inline[link.start.min(self.inline.len())..]
            .iter()
            .filter_map(|p| match p {
                Inline::Text(s) => Some(s.text.as_str()),
                Inline::Break => None,
            })
            .collect();
        if shown == clean(&link.url) {
            return;
        }
        let style = self.style().patch(self.theme().link_url);
        self.push_inline(" (", style);
        self.push_inline(&link.url, style);
        self.push_inline(")", style);
    }

    /// Before a block starts: the text of a tight list item is laid out, and the blank line
    /// owed to the previous block is emitted.
    fn begin_block(&mut self) {
        self.flush_inline();
        if self.pending_gap && (self.gap_before || !self.out.is_empty()) {
            self.pending_gap = false;
            self.emit_gap();
        }
    }

    /// Columns left for content after the prefix, when a width is set.
    fn available_width(&self) -> Option<usize> {
        let prefix: usize = self
            .containers
            .iter()
            .map(|c| match c {
                Container::Quote(_) => 2,
                Container::Item { width, .. } => *width,
                Container::List { .. } => 0,
            })
            .sum();
        self.opts
            .width
            .map(|w| usize::from(w).saturating_sub(prefix).max(1))
    }

    /// The prefix for the next line: quote bars, and for list items their marker on the item's
    /// first line, its width in spaces after.
    fn prefix(&mut self) -> (Vec<Span>, usize) {
        let bar = self.opts.theme.quote_bar;
        let mut spans = Vec::new();
        let mut width = 0;
        for c in &mut self.containers {
            match c {
                Container::Quote(_) => {
                    spans.push(Span::new("│ ", bar));
                    width += 2;
                }
                Container::Item {
                    marker,
                    width: w,
                    shown,
                } => {
                    if *shown {
                        spans.push(Span::plain(" ".repeat(*w)));
                    } else {
                        spans.extend(marker.iter().cloned());
                        *shown = true;
                    }
                    width += *w;
                }
                Container::List { .. } => {}
            }
        }
        (spans, width)
    }

    fn emit(&mut self, kind: LineKind, content: Vec<Span>) {
        let (mut spans, width) = self.prefix();
        spans.extend(content);
        let quote_depth = u8::try_from(self.quote_depth()).unwrap_or(u8::MAX);
        self.out.push(Line {
            spans: wrap::merge(spans),
            kind,
            quote_depth,
            indent: u16::try_from(width).unwrap_or(u16::MAX),
        });
    }

    /// A blank line between blocks: quote bars only, no list marker consumed.
    fn emit_gap(&mut self) {
        let bar = self.opts.theme.quote_bar;
        let mut spans = Vec::new();
        for c in &self.containers {
            match c {
                Container::Quote(_) => spans.push(Span::new("│ ", bar)),
                Container::Item { width, .. } => spans.push(Span::plain(" ".repeat(*width))),
                Container::List { .. } => {}
            }
        }
        while let Some(last) = spans.last_mut() {
            let trimmed = last.text.trim_end().len();
            if trimmed == 0 {
                spans.pop();
            } else {
                last.text.truncate(trimmed);
                break;
            }
        }
        let quote_depth = u8::try_from(self.quote_depth()).unwrap_or(u8::MAX);
        let spans = wrap::merge(spans);
        let indent = u16::try_from(wrap::spans_width(&spans)).unwrap_or(u16::MAX);
        self.out.push(Line {
            spans,
            kind: LineKind::Blank,
            quote_depth,
            indent,
        });
    }

    fn flush_inline(&mut self) {
        if self.inline.is_empty() || self.table.is_some() {
            return;
        }
        let content = std::mem::take(&mut self.inline);
        let kind = self.heading.map_or(LineKind::Paragraph, LineKind::Heading);
        for line in wrap::wrap(&content, self.available_width()) {
            self.emit(kind, line);
        }
    }

    fn emit_code(&mut self, code: CodeState) {
        let theme_fence = self.theme().code_fence;
        let plain = self.theme().code_block;
        let block_src = self.src.get(code.range.clone()).unwrap_or("");
        let closed = code.fenced && fence_is_closed(block_src, self.containers.is_empty());
        let fence = block_src
            .lines()
            .next()
            .and_then(|l| fence_run(l, None))
            .map_or_else(
                || "```".to_owned(),
                |(ch, n, _)| char::from(ch).to_string().repeat(n),
            );
        if code.fenced {
            let head = format!("{fence}{}", code.info.trim());
            self.emit(
                LineKind::CodeFence,
                vec![Span::new(clean(&head).into_owned(), theme_fence)],
            );
        }
        let body = code.text.strip_suffix('\n').unwrap_or(&code.text);
        let lines: Vec<String> = if code.text.is_empty() {
            Vec::new()
        } else {
            body.split('\n')
                .map(|l| expand_tabs(l).into_owned())
                .collect()
        };
        let highlight =
            self.opts.color && code.fenced && (closed || self.highlight_open) && !lines.is_empty();
        let highlighted = if highlight {
            highlight::highlight(
                &lines,
                &code.info,
                &self.opts.theme.code_theme,
                self.opts.palette,
            )
        } else {
            None
        };
        let indent = if code.fenced { "" } else { "    " };
        match highlighted {
            Some(spans) => {
                for line in spans {
                    let cleaned = line
                        .into_iter()
                        .map(|s| Span::new(clean(&s.text).into_owned(), s.style))
                        .collect();
                    self.emit(LineKind::Code, cleaned);
                }
            }
            None => {
                for line in &lines {
                    let text = format!("{indent}{}", clean(line));
                    self.emit(LineKind::Code, vec![Span::new(text, plain)]);
                }
            }
        }
        if closed {
            self.emit(LineKind::CodeFence, vec![Span::new(fence, theme_fence)]);
        }
    }

    fn emit_table(&mut self, table: TableState) {
        let columns = table.rows.iter().map(Vec::len).max().unwrap_or(0);
        if columns == 0 {
            return;
        }
        let border = self.theme().table_border;
        let mut widths = vec![1usize; columns];
        for row in &table.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(wrap::spans_width(cell));
            }
        }
        let seps = 3 * (columns - 1);
        let avail = self.available_width();
        if let Some(avail) = avail {
            fit_columns(&mut widths, avail.saturating_sub(seps));
        }
        let render_row = |row: &[Vec<Span>]| -> Vec<Span> {
            let mut spans = Vec::new();
            for (i, width) in widths.iter().enumerate() {
                if i > 0 {
                    spans.push(Span::new(" │ ", border));
                }
                let cell = row
                    .get(i)
                    .map(|c| wrap::truncate(c, *width))
                    .unwrap_or_default();
                let pad = width.saturating_sub(wrap::spans_width(&cell));
                let (left, right) = match table.aligns.get(i) {
                    Some(Alignment::Right) => (pad, 0),
                    Some(Alignment::Center) => (pad / 2, pad - pad / 2),
                    _ => (0, pad),
                };
                if left > 0 {
                    spans.push(Span::plain(" ".repeat(left)));
                }
                spans.extend(cell);
                // No trailing padding after the last column.
                if right > 0 && i + 1 < widths.len() {
                    spans.push(Span::plain(" ".repeat(right)));
                }
            }
            spans
        };
        let mut lines = Vec::new();
        for (r, row) in table.rows.iter().enumerate() {
            lines.push(render_row(row));
            if r + 1 == table.header_rows {
                let rule: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
                lines.push(vec![Span::new(rule.join("─┼─"), border)]);
            }
        }
        for line in lines {
            let line = match avail {
                Some(avail) => wrap::truncate(&line, avail),
                None => line,
            };
            self.emit(LineKind::Table, line);
        }
    }
}

/// Shrinks column widths so that their sum fits `budget`: the widest columns are capped first,
/// none below three columns (or its natural width when narrower).
fn fit_columns(widths: &mut [usize], budget: usize) {
    let total: usize = widths.iter().sum();
    if total <= budget {
        return;
    }
    const MIN: usize = 3;
    let floor = |w: usize, cap: usize| w.min(cap.max(MIN.min(w)));
    let (mut lo, mut hi) = (0usize, widths.iter().copied().max().unwrap_or(0));
    // The largest cap whose capped sum fits.
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let sum: usize = widths.iter().map(|w| floor(*w, mid)).sum();
        if sum <= budget {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let cap = lo;
    let mut sum: usize = 0;
    for w in widths.iter_mut() {
        let natural = *w;
        *w = floor(natural, cap);
        sum += *w;
    }
    // Hand out what the cap left over, one column each, to columns that were cut.
    let mut left = budget.saturating_sub(sum);
    for w in widths.iter_mut() {
        if left == 0 {
            break;
        }
        if *w >= cap && *w > MIN.min(*w) {
            *w += 1;
            left -= 1;
        }
    }
}

/// Renders a text with one parse (no segmentation).
pub(crate) fn render_text(
    text: &str,
    opts: &RenderOptions,
    refs: &RefMap,
    gap_before: bool,
    highlight_open: bool,
) -> Vec<Line> {
    let parsed = parse(text, refs);
    Renderer::new(opts, text, gap_before, highlight_open).render(&parsed.events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fit_their_budget() {
        let mut w = vec![10, 40, 5];
        fit_columns(&mut w, 30);
        assert_eq!(w.iter().sum::<usize>(), 30);
        assert!(w[1] <= 15 && w[2] == 5, "{w:?}");
        let mut w = vec![2, 50];
        fit_columns(&mut w, 100);
        assert_eq!(w, [2, 50]);
        let mut w = vec![20, 20, 20];
        fit_columns(&mut w, 4);
        assert_eq!(w, [3, 3, 3]);
    }

    #[test]
    fn fences_open_and_close() {
        assert_eq!(fence_run("```rust", Some(3)), Some((b'`', 3, "rust")));
        assert_eq!(fence_run("    ```", Some(3)), None);
        assert_eq!(fence_run("``` a`b", Some(3)), None);
        assert_eq!(fence_run("~~~~ x`y", Some(3)), Some((b'~', 4, " x`y")));
        assert!(fence_is_closed("```\ncode\n```\n", true));
        assert!(fence_is_closed("````\ncode\n`````", true));
        assert!(!fence_is_closed("````\ncode\n```\n", true));
        assert!(!fence_is_closed("```\ncode\n", true));
        assert!(!fence_is_closed("```\n", true));
        assert!(!fence_is_closed("```\ncode\n    ```\n", true));
        assert!(!fence_is_closed("~~~\ncode\n```\n", true));
        assert!(fence_is_closed("```\n  code\n  ```\n", false));
    }
}
