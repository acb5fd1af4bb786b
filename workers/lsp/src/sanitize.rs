//! Server text on its way to a model, a terminal or a record: no control characters (ANSI
//! escapes, carriage returns, bidirectional overrides), bounded length with the cut stated.

/// Characters that change how text around them is displayed without being visible themselves.
fn is_invisible_control(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

/// One line: every line break becomes `"; "` (runs of blank lines collapse), other control
/// characters become a space, leading and trailing whitespace goes.
pub fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, part) in s
        .split(['\n', '\r'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .enumerate()
    {
        if i > 0 {
            out.push_str("; ");
        }
        for c in part.chars() {
            out.push(if is_invisible_control(c) { ' ' } else { c });
        }
    }
    out
}

/// Several lines: `\n` and `\t` stay (`\r\n` and `\r` become `\n`), other control characters go.
pub fn multi_line(s: &str) -> String {
    let s = s.replace("\r\n", "\n").replace('\r', "\n");
    s.chars()
        .filter(|&c| c == '\n' || c == '\t' || !is_invisible_control(c))
        .collect()
}

/// `s` cut to at most `max` bytes on a character boundary; a cut is marked with `marker`
/// (which counts toward `max`).
pub fn bounded(s: String, max: usize, marker: &str) -> String {
    if s.len() <= max {
        return s;
    }
    let mut end = max.saturating_sub(marker.len());
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = s[..end].to_string();
    if out.len() + marker.len() <= max {
        out.push_str(marker);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_removes_escapes_and_breaks() {
        assert_eq!(
            one_line("bad\x1b[31m red\r\n  second\n\n\tthird\u{202E}x"),
            "bad [31m red; second; third x"
        );
        assert_eq!(one_line("\n\n"), "");
    }

    #[test]
    fn multi_line_keeps_lines_and_tabs_only() {
        assert_eq!(multi_line("a\r\nb\rc\x07\td\x1b"), "a\nb\nc\td");
    }

    #[test]
    fn bounded_cuts_on_a_boundary_and_says_so() {
        assert_eq!(bounded("héllo wörld".into(), 100, "…"), "héllo wörld");
        let cut = bounded("ééééé".into(), 8, "…");
        assert!(cut.len() <= 8, "{cut}");
        assert_eq!(cut, "éé…");
        assert_eq!(bounded("abcdef".into(), 2, "[cut]"), "");
    }
}
