//! The crate's own output types: colours, styles, spans, lines, and the options a render takes.
//! The terminal UI maps them onto its toolkit's types (ratatui's `Style`, `Span`, `Line`).

use std::fmt::{self, Write as _};

/// A foreground colour. The sixteen named colours follow the user's terminal palette; `Rgb` is
/// used only for highlighted code with [`Palette::TrueColor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Color {
    /// Palette colour 0 (SGR 30).
    Black,
    /// Palette colour 1 (SGR 31).
    Red,
    /// Palette colour 2 (SGR 32).
    Green,
    /// Palette colour 3 (SGR 33).
    Yellow,
    /// Palette colour 4 (SGR 34).
    Blue,
    /// Palette colour 5 (SGR 35).
    Magenta,
    /// Palette colour 6 (SGR 36).
    Cyan,
    /// Palette colour 7 (SGR 37).
    White,
    /// Palette colour 8 (SGR 90).
    BrightBlack,
    /// Palette colour 9 (SGR 91).
    BrightRed,
    /// Palette colour 10 (SGR 92).
    BrightGreen,
    /// Palette colour 11 (SGR 93).
    BrightYellow,
    /// Palette colour 12 (SGR 94).
    BrightBlue,
    /// Palette colour 13 (SGR 95).
    BrightMagenta,
    /// Palette colour 14 (SGR 96).
    BrightCyan,
    /// Palette colour 15 (SGR 97).
    BrightWhite,
    /// A 24-bit colour (SGR 38;2), for highlighted code only.
    Rgb(u8, u8, u8),
}

impl Color {
    const NAMED: [(Color, &'static str, (u8, u8, u8)); 16] = [
        (Color::Black, "black", (0, 0, 0)),
        (Color::Red, "red", (205, 49, 49)),
        (Color::Green, "green", (13, 188, 121)),
        (Color::Yellow, "yellow", (229, 229, 16)),
        (Color::Blue, "blue", (36, 114, 200)),
        (Color::Magenta, "magenta", (188, 63, 188)),
        (Color::Cyan, "cyan", (17, 168, 205)),
        (Color::White, "white", (229, 229, 229)),
        (Color::BrightBlack, "brightblack", (102, 102, 102)),
        (Color::BrightRed, "brightred", (241, 76, 76)),
        (Color::BrightGreen, "brightgreen", (35, 209, 139)),
        (Color::BrightYellow, "brightyellow", (245, 245, 67)),
        (Color::BrightBlue, "brightblue", (59, 142, 234)),
        (Color::BrightMagenta, "brightmagenta", (214, 112, 214)),
        (Color::BrightCyan, "brightcyan", (41, 184, 219)),
        (Color::BrightWhite, "brightwhite", (255, 255, 255)),
    ];

    /// The named colour nearest to an RGB value (squared distance against a typical terminal
    /// palette), for terminals without true colour.
    pub fn nearest_named(r: u8, g: u8, b: u8) -> Color {
        let mut best = Color::White;
        let mut best_d = u32::MAX;
        for (color, _, (cr, cg, cb)) in Self::NAMED {
            let d = sq(r, cr) + sq(g, cg) + sq(b, cb);
            if d < best_d {
                best_d = d;
                best = color;
            }
        }
        best
    }
}

fn sq(a: u8, b: u8) -> u32 {
    let d = u32::from(a.abs_diff(b));
    d * d
}

impl fmt::Display for Color {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Color::Rgb(r, g, b) => write!(f, "#{r:02x}{g:02x}{b:02x}"),
            named => {
                let name = Self::NAMED
                    .iter()
                    .find(|(c, _, _)| c == named)
                    .map_or("?", |(_, n, _)| n);
                f.write_str(name)
            }
        }
    }
}

/// How a span looks: an optional foreground colour and text attributes. No background: the
/// transcript sits on the user's own terminal background.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Style {
    /// The text colour; `None` keeps the terminal's.
    pub fg: Option<Color>,
    /// Bold (SGR 1).
    pub bold: bool,
    /// Italic (SGR 3).
    pub italic: bool,
    /// Underlined (SGR 4).
    pub underline: bool,
    /// Faint (SGR 2).
    pub dim: bool,
    /// Crossed out (SGR 9).
    pub strikethrough: bool,
    /// Foreground and background swapped (SGR 7).
    pub reversed: bool,
}

impl Style {
    /// No colour and no attribute: the terminal's own look.
    pub const fn new() -> Self {
        Style {
            fg: None,
            bold: false,
            italic: false,
            underline: false,
            dim: false,
            strikethrough: false,
            reversed: false,
        }
    }
    /// This style in colour `color`.
    pub const fn fg(mut self, color: Color) -> Self {
        self.fg = Some(color);
        self
    }
    /// This style, bold.
    pub const fn bold(mut self) -> Self {
        self.bold = true;
        self
    }
    /// This style, italic.
    pub const fn italic(mut self) -> Self {
        self.italic = true;
        self
    }
    /// This style, underlined.
    pub const fn underline(mut self) -> Self {
        self.underline = true;
        self
    }
    /// This style, faint.
    pub const fn dim(mut self) -> Self {
        self.dim = true;
        self
    }
    /// This style, crossed out.
    pub const fn strikethrough(mut self) -> Self {
        self.strikethrough = true;
        self
    }
    /// This style, reversed.
    pub const fn reversed(mut self) -> Self {
        self.reversed = true;
        self
    }

    /// `other` laid over `self`: its colour wins when it has one, attributes add up.
    pub fn patch(self, other: Style) -> Style {
        Style {
            fg: other.fg.or(self.fg),
            bold: self.bold || other.bold,
            italic: self.italic || other.italic,
            underline: self.underline || other.underline,
            dim: self.dim || other.dim,
            strikethrough: self.strikethrough || other.strikethrough,
            reversed: self.reversed || other.reversed,
        }
    }

    /// The compact form used by golden files: `b,i,fg=red`; empty for the plain style.
    pub fn compact(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        for (on, name) in [
            (self.bold, "b"),
            (self.italic, "i"),
            (self.underline, "u"),
            (self.dim, "d"),
            (self.strikethrough, "s"),
            (self.reversed, "r"),
        ] {
            if on {
                parts.push(name.to_owned());
            }
        }
        if let Some(fg) = self.fg {
            parts.push(format!("fg={fg}"));
        }
        parts.join(",")
    }
}

/// A run of text in one style. The renderer guarantees that `text` holds no control character,
/// no bidi control and no line break or tab (see [`crate::sanitize_for_terminal`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Span {
    /// What is shown (sanitised: see the type's doc).
    pub text: String,
    /// How it is shown.
    pub style: Style,
}

impl Span {
    /// `text` in `style`.
    pub fn new(text: impl Into<String>, style: Style) -> Self {
        Span {
            text: text.into(),
            style,
        }
    }
    /// `text` in the terminal's own look.
    pub fn plain(text: impl Into<String>) -> Self {
        Span::new(text, Style::new())
    }
}

/// What a line shows, so the UI can treat kinds differently (clip code rather than wrap it,
/// stretch a rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LineKind {
    /// The empty line between blocks (it may carry quote bars).
    Blank,
    /// Prose: a paragraph, the text of a list item, alt text.
    Paragraph,
    /// A heading of level 1 to 6.
    Heading(u8),
    /// A line of code from a fenced or indented code block. Never wrapped by the renderer.
    Code,
    /// The opening or closing line of a fenced code block (```` ```rust ````).
    CodeFence,
    /// A row of a table, or the line under its header.
    Table,
    /// A thematic break.
    Rule,
    /// Raw HTML from the source, shown as text.
    Html,
}

/// One terminal line: spans left to right, plus what the UI needs to lay it out again.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Line {
    /// The line's text, left to right.
    pub spans: Vec<Span>,
    /// What the line shows.
    pub kind: LineKind,
    /// Block quote nesting at this line (each level draws a `│ ` bar at the start).
    pub quote_depth: u8,
    /// Display width of the prefix at the start of `spans` (quote bars, list markers and the
    /// hanging indent under them). A UI that wraps a line again indents continuations by this.
    pub indent: u16,
}

impl Line {
    /// An empty line outside any quote.
    pub fn blank() -> Self {
        Line {
            spans: Vec::new(),
            kind: LineKind::Blank,
            quote_depth: 0,
            indent: 0,
        }
    }

    /// The text without styles.
    pub fn plain_text(&self) -> String {
        self.spans.iter().map(|s| s.text.as_str()).collect()
    }

    /// Display width in terminal columns.
    pub fn width(&self) -> usize {
        self.spans
            .iter()
            .map(|s| unicode_width::UnicodeWidthStr::width(s.text.as_str()))
            .sum()
    }

    /// The compact textual form used by golden files: the kind, `q<depth>` and `i<indent>` when
    /// non-zero, then each span as `«text»` followed by `{style}` when it is styled.
    pub fn compact(&self) -> String {
        let mut out = match self.kind {
            LineKind::Blank => "blank".to_owned(),
            LineKind::Paragraph => "para".to_owned(),
            LineKind::Heading(n) => format!("h{n}"),
            LineKind::Code => "code".to_owned(),
            LineKind::CodeFence => "fence".to_owned(),
            LineKind::Table => "table".to_owned(),
            LineKind::Rule => "rule".to_owned(),
            LineKind::Html => "html".to_owned(),
        };
        if self.quote_depth > 0 {
            let _ = write!(out, " q{}", self.quote_depth);
        }
        if self.indent > 0 {
            let _ = write!(out, " i{}", self.indent);
        }
        if !self.spans.is_empty() {
            out.push_str(" |");
        }
        for span in &self.spans {
            let _ = write!(out, " «{}»", span.text);
            let style = span.style.compact();
            if !style.is_empty() {
                let _ = write!(out, "{{{style}}}");
            }
        }
        out
    }
}

/// Lines in the compact form, one per line.
pub fn compact(lines: &[Line]) -> String {
    let mut out = String::new();
    for line in lines {
        out.push_str(&line.compact());
        out.push('\n');
    }
    out
}

/// Colours available for highlighted code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Palette {
    /// 24-bit colours from the syntax theme.
    #[default]
    TrueColor,
    /// The syntax theme's colours mapped to the nearest of the sixteen named colours.
    Ansi16,
}

/// The styles of each Markdown element, and the syntax theme for code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Theme {
    /// Prose.
    pub text: Style,
    /// Headings of level 1 to 6.
    pub heading: [Style; 6],
    /// `**strong**` text.
    pub strong: Style,
    /// `*emphasised*` text.
    pub emphasis: Style,
    /// `~~struck~~` text.
    pub strikethrough: Style,
    /// `` `inline code` ``.
    pub inline_code: Style,
    /// A link's text.
    pub link_text: Style,
    /// The URL shown after a link's text.
    pub link_url: Style,
    /// The `│` drawn for each level of block quote.
    pub quote_bar: Style,
    /// Text inside a block quote.
    pub quote_text: Style,
    /// Bullets and item numbers.
    pub list_marker: Style,
    /// A thematic break's line.
    pub rule: Style,
    /// A table's rules and column separators.
    pub table_border: Style,
    /// The cells of a table's header row.
    pub table_header: Style,
    /// Code that is not highlighted (no language, an unknown one, an unclosed fence in a
    /// preview, or colour off).
    pub code_block: Style,
    /// A code block's opening and closing fence lines.
    pub code_fence: Style,
    /// Raw HTML, shown as text.
    pub html: Style,
    /// A theme of syntect's default set: `base16-ocean.dark`, `base16-eighties.dark`,
    /// `base16-mocha.dark`, `base16-ocean.light`, `InspiredGitHub`, `Solarized (dark)`,
    /// `Solarized (light)`. An unknown name falls back to `base16-ocean.dark`.
    pub code_theme: String,
}

impl Theme {
    /// For dark terminal backgrounds (the default).
    pub fn dark() -> Self {
        Theme {
            text: Style::new(),
            heading: [
                Style::new().fg(Color::Magenta).bold().underline(),
                Style::new().fg(Color::Cyan).bold(),
                Style::new().fg(Color::Green).bold(),
                Style::new().bold(),
                Style::new().bold(),
                Style::new().bold().italic(),
            ],
            strong: Style::new().bold(),
            emphasis: Style::new().italic(),
            strikethrough: Style::new().strikethrough(),
            inline_code: Style::new().fg(Color::Yellow),
            link_text: Style::new().fg(Color::Blue).underline(),
            link_url: Style::new().dim(),
            quote_bar: Style::new().fg(Color::BrightBlack),
            quote_text: Style::new().italic(),
            list_marker: Style::new().fg(Color::Cyan),
            rule: Style::new().dim(),
            table_border: Style::new().dim(),
            table_header: Style::new().bold(),
            code_block: Style::new(),
            code_fence: Style::new().dim(),
            html: Style::new().dim(),
            code_theme: "base16-ocean.dark".to_owned(),
        }
    }

    /// For light terminal backgrounds.
    pub fn light() -> Self {
        Theme {
            heading: [
                Style::new().fg(Color::Magenta).bold().underline(),
                Style::new().fg(Color::Blue).bold(),
                Style::new().fg(Color::Green).bold(),
                Style::new().bold(),
                Style::new().bold(),
                Style::new().bold().italic(),
            ],
            inline_code: Style::new().fg(Color::Red),
            list_marker: Style::new().fg(Color::Blue),
            code_theme: "InspiredGitHub".to_owned(),
            ..Theme::dark()
        }
    }
}

impl Default for Theme {
    fn default() -> Self {
        Theme::dark()
    }
}

/// How to render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderOptions {
    /// Terminal columns available. Prose and headings are word-wrapped to it (continuations
    /// keep the quote bars and list indentation), tables are shrunk and cut to it, rules span
    /// it. Code lines are never wrapped. `None`: no wrapping, tables at their natural width,
    /// rules 40 columns.
    pub width: Option<u16>,
    /// `false` for `NO_COLOR`: every colour goes, attributes (bold, italic, …) stay, code is
    /// not highlighted, and inline code keeps its backticks so it remains recognisable.
    pub color: bool,
    /// How colours reach the terminal (24-bit or the sixteen named).
    pub palette: Palette,
    /// The styles of each element.
    pub theme: Theme,
}

impl RenderOptions {
    /// The default options for a terminal `width` columns wide (`None`: no wrapping).
    pub fn new(width: Option<u16>) -> Self {
        RenderOptions {
            width,
            ..RenderOptions::default()
        }
    }
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            width: None,
            color: true,
            palette: Palette::TrueColor,
            theme: Theme::dark(),
        }
    }
}
