//! Word wrapping of styled text by display width, and cutting text to a width.

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use crate::style::{Span, Style};

/// A piece of a paragraph's inline content.
#[derive(Debug, Clone)]
pub(crate) enum Inline {
    Text(Span),
    /// A hard line break.
    Break,
}

pub(crate) fn char_width(c: char) -> usize {
    c.width().unwrap_or(0)
}

/// Lays out inline content into lines no wider than `width` columns (when given), breaking at
/// spaces; a word wider than the line is split between characters. Spaces at a break are
/// dropped. Adjacent spans of one style are merged.
pub(crate) fn wrap(content: &[Inline], width: Option<usize>) -> Vec<Vec<Span>> {
    let mut lines = Vec::new();
    let mut layout = Layout {
        width: width.map(|w| w.max(1)),
        line: Vec::new(),
        col: 0,
        continuation: false,
    };
    let mut word: Vec<(String, Style)> = Vec::new();
    let mut spaces: Vec<(String, Style)> = Vec::new();
    for piece in content {
        match piece {
            Inline::Break => {
                layout.place(&mut spaces, &mut word, &mut lines);
                spaces.clear();
                lines.push(std::mem::take(&mut layout.line));
                layout.col = 0;
                layout.continuation = false;
            }
            Inline::Text(span) => {
                for part in split_keep_spaces(&span.text) {
                    if part.starts_with(' ') {
                        if !word.is_empty() {
                            layout.place(&mut spaces, &mut word, &mut lines);
                        }
                        push_frag(&mut spaces, part, span.style);
                    } else {
                        push_frag(&mut word, part, span.style);
                    }
                }
            }
        }
    }
    layout.place(&mut spaces, &mut word, &mut lines);
    lines.push(layout.line);
    lines.into_iter().map(merge).collect()
}

struct Layout {
    width: Option<usize>,
    line: Vec<Span>,
    col: usize,
    /// The current line was started by wrapping (so leading spaces are dropped).
    continuation: bool,
}

impl Layout {
    /// Places the pending spaces and word (either may be empty), wrapping as needed.
    fn place(
        &mut self,
        spaces: &mut Vec<(String, Style)>,
        word: &mut Vec<(String, Style)>,
        lines: &mut Vec<Vec<Span>>,
    ) {
        let space_w: usize = spaces.iter().map(|(t, _)| t.width()).sum();
        let word_w: usize = word.iter().map(|(t, _)| t.width()).sum();
        if word.is_empty() {
            // Trailing spaces: kept only where they fit and the line is not a continuation.
            return;
        }
        let fits = self.width.is_none_or(|w| self.col + space_w + word_w <= w);
        if fits {
            if !(self.col == 0 && self.continuation) {
                for (t, s) in spaces.drain(..) {
                    self.line.push(Span::new(t, s));
                }
                self.col += space_w;
            }
            spaces.clear();
            for (t, s) in word.drain(..) {
                self.line.push(Span::new(t, s));
            }
            self.col += word_w;
            return;
        }
        spaces.clear();
        let width = self.width.unwrap_or(usize::MAX);
        if self.col > 0 && word_w <= width {
            lines.push(std::mem::take(&mut self.line));
            self.col = 0;
            self.continuation = true;
            for (t, s) in word.drain(..) {
                self.line.push(Span::new(t, s));
            }
            self.col = word_w;
            return;
        }
        // Wider than a whole line: split between characters.
        if self.col > 0 && self.col < width {
            self.line.push(Span::new(" ", Style::new()));
            self.col += 1;
        }
        for (t, s) in word.drain(..) {
            let mut piece = String::new();
            for c in t.chars() {
                let cw = char_width(c);
                if self.col + cw > width && (self.col > 0 || !piece.is_empty()) {
                    if !piece.is_empty() {
                        self.line.push(Span::new(std::mem::take(&mut piece), s));
                    }
                    lines.push(std::mem::take(&mut self.line));
                    self.col = 0;
                    self.continuation = true;
                }
                piece.push(c);
                self.col += cw;
            }
            if !piece.is_empty() {
                self.line.push(Span::new(piece, s));
            }
        }
    }
}

fn push_frag(frags: &mut Vec<(String, Style)>, text: &str, style: Style) {
    match frags.last_mut() {
        Some((t, s)) if *s == style => t.push_str(text),
        _ => frags.push((text.to_owned(), style)),
    }
}

/// Splits into alternating runs of spaces and non-spaces.
fn split_keep_spaces(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let space = rest.starts_with(' ');
        let end = rest
            .find(|c: char| (c == ' ') != space)
            .unwrap_or(rest.len());
        let (head, tail) = rest.split_at(end);
        rest = tail;
        Some(head)
    })
}

/// Adjacent spans of one style joined; empty spans dropped.
pub(crate) fn merge(spans: Vec<Span>) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    for span in spans {
        if span.text.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.style == span.style => last.text.push_str(&span.text),
            _ => out.push(span),
        }
    }
    out
}

/// Display width of spans.
pub(crate) fn spans_width(spans: &[Span]) -> usize {
    spans.iter().map(|s| s.text.width()).sum()
}

/// Spans cut to at most `width` columns, ending in `…` when something was cut.
pub(crate) fn truncate(spans: &[Span], width: usize) -> Vec<Span> {
    if spans_width(spans) <= width {
        return spans.to_vec();
    }
    if width == 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut col = 0;
    let budget = width - 1;
    let mut last_style = Style::new();
    'outer: for span in spans {
        let mut piece = String::new();
        last_style = span.style;
        for c in span.text.chars() {
            let cw = char_width(c);
            if col + cw > budget {
                if !piece.is_empty() {
                    out.push(Span::new(piece, span.style));
                }
                break 'outer;
            }
            piece.push(c);
            col += cw;
        }
        if !piece.is_empty() {
            out.push(Span::new(piece, span.style));
        }
    }
    out.push(Span::new("…", last_style));
    merge(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Vec<Span>]) -> Vec<String> {
        lines
            .iter()
            .map(|l| l.iter().map(|s| s.text.as_str()).collect())
            .collect()
    }

    fn plain(s: &str) -> Inline {
        Inline::Text(Span::plain(s))
    }

    #[test]
    fn wraps_at_spaces_and_drops_them() {
        let lines = wrap(&[plain("the quick brown fox jumps")], Some(10));
        assert_eq!(text(&lines), ["the quick", "brown fox", "jumps"]);
    }

    #[test]
    fn long_words_split_by_width_and_wide_chars_count_double() {
        let lines = wrap(&[plain("abcdefghij")], Some(4));
        assert_eq!(text(&lines), ["abcd", "efgh", "ij"]);
        let lines = wrap(&[plain("日本語テキスト")], Some(5));
        assert_eq!(text(&lines), ["日本", "語テ", "キス", "ト"]);
    }

    #[test]
    fn styles_stay_on_their_words() {
        let bold = Style::new().bold();
        let lines = wrap(
            &[
                plain("aa "),
                Inline::Text(Span::new("bb cc", bold)),
                plain(" dd"),
            ],
            Some(5),
        );
        assert_eq!(text(&lines), ["aa bb", "cc dd"]);
        assert_eq!(lines[0][1], Span::new("bb", bold));
        assert_eq!(lines[1][0], Span::new("cc", bold));
    }

    #[test]
    fn hard_breaks_and_no_width() {
        let lines = wrap(&[plain("a b"), Inline::Break, plain("c")], None);
        assert_eq!(text(&lines), ["a b", "c"]);
    }

    #[test]
    fn truncation_marks_the_cut() {
        let spans = vec![
            Span::plain("hello"),
            Span::new("world", Style::new().bold()),
        ];
        assert_eq!(spans_width(&truncate(&spans, 7)), 7);
        assert_eq!(text(&[truncate(&spans, 7)]), ["hellow…"]);
        assert_eq!(text(&[truncate(&spans, 10)]), ["helloworld"]);
    }
}
