//! The text being edited: characters with `\n` between lines, and a cursor that is an index
//! between characters (`0..=len`). Positions are character indexes, never bytes.

use std::ops::Range;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Buffer {
    pub chars: Vec<char>,
    pub cursor: usize,
}

/// Vim's character classes: blank, punctuation, keyword (`big`: blank or not).
fn class(c: char, big: bool) -> u8 {
    if c == ' ' || c == '\t' || c == '\n' {
        0
    } else if big || !(c.is_alphanumeric() || c == '_') {
        1
    } else {
        2
    }
}

pub(crate) fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

impl Buffer {
    pub fn len(&self) -> usize {
        self.chars.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    pub fn text(&self) -> String {
        self.chars.iter().collect()
    }

    pub fn slice(&self, range: Range<usize>) -> String {
        self.chars[range].iter().collect()
    }

    pub fn set(&mut self, text: &str) {
        self.chars = text.chars().collect();
        self.cursor = self.chars.len();
    }

    /// Start of the line holding `pos`.
    pub fn line_start(&self, pos: usize) -> usize {
        let pos = pos.min(self.len());
        self.chars[..pos]
            .iter()
            .rposition(|&c| c == '\n')
            .map_or(0, |i| i + 1)
    }

    /// End of the line holding `pos`: the index of its `\n`, or the length.
    pub fn line_end(&self, pos: usize) -> usize {
        let pos = pos.min(self.len());
        self.chars[pos..]
            .iter()
            .position(|&c| c == '\n')
            .map_or(self.len(), |i| pos + i)
    }

    pub fn line_index(&self, pos: usize) -> usize {
        let pos = pos.min(self.len());
        self.chars[..pos].iter().filter(|&&c| c == '\n').count()
    }

    pub fn line_count(&self) -> usize {
        self.chars.iter().filter(|&&c| c == '\n').count() + 1
    }

    /// Start of line `n` (clamped to the last line).
    pub fn line_start_of(&self, n: usize) -> usize {
        let mut line = 0;
        for (i, &c) in self.chars.iter().enumerate() {
            if line == n {
                return i;
            }
            if c == '\n' {
                line += 1;
                if line == n {
                    return i + 1;
                }
            }
        }
        if line == n {
            self.len()
        } else {
            self.line_start(self.len())
        }
    }

    pub fn col(&self, pos: usize) -> usize {
        pos - self.line_start(pos)
    }

    /// Position `col` characters into the line holding `pos`, at most its end.
    pub fn at_col(&self, pos: usize, col: usize) -> usize {
        let start = self.line_start(pos);
        (start + col).min(self.line_end(pos))
    }

    pub fn first_non_blank(&self, pos: usize) -> usize {
        let start = self.line_start(pos);
        let end = self.line_end(pos);
        (start..end)
            .find(|&i| !is_blank(self.chars[i]))
            .unwrap_or(end)
    }

    /// The last position a Normal-mode cursor may take on the line holding `pos`.
    pub fn last_char(&self, pos: usize) -> usize {
        let start = self.line_start(pos);
        let end = self.line_end(pos);
        if end > start {
            end - 1
        } else {
            start
        }
    }

    /// `pos` moved back onto a character, as a Normal-mode cursor must be.
    pub fn clamp_normal(&self, pos: usize) -> usize {
        pos.min(self.last_char(pos))
    }

    pub fn insert(&mut self, pos: usize, text: &[char]) {
        let pos = pos.min(self.len());
        self.chars.splice(pos..pos, text.iter().copied());
    }

    pub fn insert_at_cursor(&mut self, text: &[char]) {
        let at = self.cursor;
        self.insert(at, text);
        self.cursor = at + text.len();
    }

    /// Removes `range` and returns it.
    pub fn remove(&mut self, range: Range<usize>) -> String {
        let end = range.end.min(self.len());
        let start = range.start.min(end);
        let removed: String = self.chars.drain(start..end).collect();
        if self.cursor > end {
            self.cursor -= end - start;
        } else if self.cursor > start {
            self.cursor = start;
        }
        removed
    }

    // Vim word motions.

    /// `w`: the start of the next word; an empty line counts as a word.
    pub fn next_word_start(&self, pos: usize, big: bool) -> usize {
        let n = self.len();
        if pos >= n {
            return n;
        }
        let mut i = pos;
        let c0 = self.chars[i];
        if c0 != '\n' {
            let k = class(c0, big);
            if k != 0 {
                while i < n && self.chars[i] != '\n' && class(self.chars[i], big) == k {
                    i += 1;
                }
            }
        }
        while i < n {
            let c = self.chars[i];
            if is_blank(c) {
                i += 1;
            } else if c == '\n' {
                i += 1;
                if i == n || self.chars[i] == '\n' {
                    return i;
                }
            } else {
                break;
            }
        }
        i
    }

    /// `b`: the start of the previous word; an empty line counts as a word.
    pub fn prev_word_start(&self, pos: usize, big: bool) -> usize {
        if pos == 0 {
            return 0;
        }
        let mut i = pos - 1;
        loop {
            let c = self.chars[i];
            if is_blank(c) {
                if i == 0 {
                    return 0;
                }
                i -= 1;
            } else if c == '\n' {
                if i == 0 || self.chars[i - 1] == '\n' {
                    return i;
                }
                i -= 1;
            } else {
                break;
            }
        }
        let k = class(self.chars[i], big);
        while i > 0 && self.chars[i - 1] != '\n' && class(self.chars[i - 1], big) == k {
            i -= 1;
        }
        i
    }

    /// `e`: the end (last character) of the current or next word.
    pub fn word_end(&self, pos: usize, big: bool) -> usize {
        let n = self.len();
        if n == 0 {
            return 0;
        }
        let mut i = pos + 1;
        while i < n && class(self.chars[i], big) == 0 {
            i += 1;
        }
        if i >= n {
            return n - 1;
        }
        let k = class(self.chars[i], big);
        while i + 1 < n && class(self.chars[i + 1], big) == k {
            i += 1;
        }
        i
    }

    /// The last character of the run of one class holding `pos` (`cw` changes up to it).
    pub fn run_end(&self, pos: usize, big: bool) -> usize {
        let n = self.len();
        if pos >= n {
            return pos;
        }
        let k = class(self.chars[pos], big);
        let mut i = pos;
        while i + 1 < n && self.chars[i + 1] != '\n' && class(self.chars[i + 1], big) == k {
            i += 1;
        }
        i
    }

    /// The word (or run of blanks) under `pos` on its line: vim's `iw`.
    pub fn inner_word(&self, pos: usize, big: bool) -> Option<Range<usize>> {
        let start = self.line_start(pos);
        let end = self.line_end(pos);
        if pos >= end {
            return None;
        }
        let k = class(self.chars[pos], big);
        let mut s = pos;
        while s > start && class(self.chars[s - 1], big) == k {
            s -= 1;
        }
        let mut e = pos + 1;
        while e < end && class(self.chars[e], big) == k {
            e += 1;
        }
        Some(s..e)
    }

    /// `aw`: the word and the blanks after it (or before it, when none follow); on blanks, the
    /// blanks and the word after them.
    pub fn a_word(&self, pos: usize, big: bool) -> Option<Range<usize>> {
        let inner = self.inner_word(pos, big)?;
        let start = self.line_start(pos);
        let end = self.line_end(pos);
        if is_blank(self.chars[inner.start]) {
            let after = self.inner_word(inner.end, big).filter(|_| inner.end < end);
            return Some(inner.start..after.map_or(inner.end, |r| r.end));
        }
        let mut e = inner.end;
        while e < end && is_blank(self.chars[e]) {
            e += 1;
        }
        if e > inner.end {
            return Some(inner.start..e);
        }
        let mut s = inner.start;
        while s > start && is_blank(self.chars[s - 1]) {
            s -= 1;
        }
        Some(s..inner.end)
    }

    /// The quoted string around (or after) `pos` on its line, quotes included: for `i"`/`a"`.
    pub fn quoted(&self, pos: usize, quote: char) -> Option<Range<usize>> {
        let start = self.line_start(pos);
        let end = self.line_end(pos);
        let quotes: Vec<usize> = (start..end)
            .filter(|&i| self.chars[i] == quote && (i == start || self.chars[i - 1] != '\\'))
            .collect();
        let pairs: Vec<(usize, usize)> = quotes.chunks_exact(2).map(|p| (p[0], p[1])).collect();
        pairs
            .iter()
            .find(|(a, b)| *a <= pos && pos <= *b)
            .or_else(|| pairs.iter().find(|(a, _)| *a > pos))
            .map(|&(a, b)| a..b + 1)
    }

    /// The bracket pair enclosing `pos` (possibly across lines), brackets included.
    pub fn enclosing(&self, pos: usize, open: char, close: char) -> Option<Range<usize>> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        let pos = pos.min(n - 1);
        let open_at = if self.chars[pos] == open {
            pos
        } else {
            // On the closing bracket, its opening one is the first unmatched before it.
            let mut depth = 0usize;
            let mut i = if self.chars[pos] == close {
                pos.checked_sub(1)?
            } else {
                pos
            };
            loop {
                let c = self.chars[i];
                if c == close {
                    depth += 1;
                } else if c == open {
                    if depth == 0 {
                        break i;
                    }
                    depth -= 1;
                }
                i = i.checked_sub(1)?;
            }
        };
        let mut depth = 0usize;
        for i in open_at + 1..n {
            let c = self.chars[i];
            if c == open {
                depth += 1;
            } else if c == close {
                if depth == 0 {
                    return Some(open_at..i + 1);
                }
                depth -= 1;
            }
        }
        None
    }

    // Readline word motions (words are alphanumeric runs).

    /// M-f: to the end of the next word.
    pub fn emacs_word_forward(&self, pos: usize) -> usize {
        let n = self.len();
        let mut i = pos;
        while i < n && !self.chars[i].is_alphanumeric() {
            i += 1;
        }
        while i < n && self.chars[i].is_alphanumeric() {
            i += 1;
        }
        i
    }

    /// M-b: to the start of the previous word.
    pub fn emacs_word_backward(&self, pos: usize) -> usize {
        let mut i = pos;
        while i > 0 && !self.chars[i - 1].is_alphanumeric() {
            i -= 1;
        }
        while i > 0 && self.chars[i - 1].is_alphanumeric() {
            i -= 1;
        }
        i
    }

    /// C-w: back over blanks, then over everything up to the previous blank.
    pub fn unix_word_start(&self, pos: usize) -> usize {
        let mut i = pos;
        while i > 0 && self.chars[i - 1].is_whitespace() {
            i -= 1;
        }
        while i > 0 && !self.chars[i - 1].is_whitespace() {
            i -= 1;
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(s: &str) -> Buffer {
        let mut b = Buffer::default();
        b.set(s);
        b
    }

    #[test]
    fn lines() {
        let b = buf("ab\n\ncd");
        assert_eq!(b.line_count(), 3);
        assert_eq!((b.line_start(5), b.line_end(5)), (4, 6));
        assert_eq!((b.line_start(3), b.line_end(3)), (3, 3));
        assert_eq!(b.line_start_of(1), 3);
        assert_eq!(b.line_start_of(2), 4);
        assert_eq!(b.line_start_of(9), 4);
        assert_eq!(b.line_index(4), 2);
    }

    #[test]
    fn vim_words() {
        let b = buf("foo.bar  baz\n\nqux");
        assert_eq!(b.next_word_start(0, false), 3);
        assert_eq!(b.next_word_start(3, false), 4);
        assert_eq!(b.next_word_start(4, false), 9);
        assert_eq!(b.next_word_start(0, true), 9);
        assert_eq!(b.next_word_start(9, false), 13, "the empty line is a word");
        assert_eq!(b.next_word_start(13, false), 14);
        assert_eq!(b.prev_word_start(14, false), 13);
        assert_eq!(b.prev_word_start(13, false), 9);
        assert_eq!(b.prev_word_start(9, false), 4);
        assert_eq!(b.word_end(0, false), 2);
        assert_eq!(b.word_end(2, false), 3);
        assert_eq!(b.word_end(9, false), 11);
        assert_eq!(b.word_end(11, false), 16, "e skips the empty line");
    }

    #[test]
    fn objects() {
        let b = buf(r#"say "hi \" there" (a (b) c)"#);
        assert_eq!(b.quoted(6, '"'), Some(4..17));
        assert_eq!(b.quoted(0, '"'), Some(4..17), "the next quoted string");
        assert_eq!(b.enclosing(22, '(', ')'), Some(21..24));
        assert_eq!(b.enclosing(19, '(', ')'), Some(18..27));
        assert_eq!(b.enclosing(26, '(', ')'), Some(18..27));
        assert_eq!(b.enclosing(0, '(', ')'), None);
        let w = buf("one two  three");
        assert_eq!(w.inner_word(5, false), Some(4..7));
        assert_eq!(w.a_word(5, false), Some(4..9));
        assert_eq!(
            w.a_word(11, false),
            Some(7..14),
            "last word takes the blanks before it"
        );
    }
}
