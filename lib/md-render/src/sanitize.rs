//! Making untrusted text safe to print on a terminal.
//!
//! Model and tool output may carry escape sequences that a terminal obeys: OSC 52 writes the
//! clipboard, OSC 0/2 sets the window title, CSI moves the cursor or clears the screen (so an
//! approval prompt can be overdrawn), DCS/APC reach terminal extensions, and `\r` or backspace
//! overwrite what was printed. Bidi overrides reorder what the user reads (Trojan Source). None of
//! them may reach the terminal as such; each becomes a visible, inert escape:
//!
//! | input | shown as |
//! |---|---|
//! | C0 controls U+0000–U+001F (ESC, BEL, BS, NUL, a lone CR, …) | the Control Pictures glyph U+2400 + code: `␛` `␇` `␈` `␀` `␍` |
//! | DEL U+007F | `␡` |
//! | C1 controls U+0080–U+009F (8-bit CSI U+009B, OSC U+009D, …) | `<U+009B>` |
//! | bidi controls U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069 | `<U+202E>` |
//!
//! A tab and a line feed are kept by [`sanitize_for_terminal`] (line structure), and CR LF
//! becomes LF; [`sanitize_line_for_terminal`] is for one-line contexts (a status line, the
//! command in an approval prompt) and shows them as `␉` and `␊` too. The escape forms contain no
//! character that is itself escaped, so sanitising twice changes nothing more.

use std::borrow::Cow;

/// Text safe to write to a terminal, keeping tabs and line feeds (CR LF becomes LF). Every
/// other control character, C1 control and bidi control becomes a visible escape:
///
/// | input | shown as |
/// |---|---|
/// | C0 controls U+0000–U+001F (ESC, BEL, BS, NUL, a lone CR, …) | Control Pictures, U+2400 + code: `␛` `␇` `␈` `␀` `␍` |
/// | DEL U+007F | `␡` |
/// | C1 controls U+0080–U+009F (8-bit CSI U+009B, OSC U+009D, …) | `<U+009B>` |
/// | bidi controls U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069 | `<U+202E>` |
///
/// The escapes contain nothing that is escaped again, so sanitising twice changes nothing more.
/// Borrows when nothing needed escaping.
pub fn sanitize_for_terminal(text: &str) -> Cow<'_, str> {
    sanitize(text, false)
}

/// As [`sanitize_for_terminal`], but for text that must stay on one line: tabs and line feeds
/// become `␉` and `␊` as well.
pub fn sanitize_line_for_terminal(text: &str) -> Cow<'_, str> {
    sanitize(text, true)
}

/// Whether `c` would be escaped in a one-line context.
pub fn is_unsafe_for_terminal(c: char) -> bool {
    is_control(c) || is_bidi_control(c)
}

fn is_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

/// Unicode's `Bidi_Control` property.
fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

fn needs_work(c: char, one_line: bool) -> bool {
    match c {
        '\n' | '\t' => one_line,
        _ => is_unsafe_for_terminal(c),
    }
}

fn sanitize(text: &str, one_line: bool) -> Cow<'_, str> {
    let Some(first) = text.find(|c| needs_work(c, one_line)) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str(&text[..first]);
    let mut chars = text[first..].chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && !one_line && chars.peek() == Some(&'\n') {
            // CR LF is a line ending: keep the LF only.
            continue;
        }
        if !needs_work(c, one_line) {
            out.push(c);
        } else {
            push_escape(&mut out, c);
        }
    }
    Cow::Owned(out)
}

fn push_escape(out: &mut String, c: char) {
    let code = u32::from(c);
    match c {
        '\u{0}'..='\u{1f}' => {
            out.push(char::from_u32(0x2400 + code).unwrap_or('\u{fffd}'));
        }
        '\u{7f}' => out.push('\u{2421}'),
        _ => {
            out.push_str("<U+");
            out.push_str(&format!("{code:04X}"));
            out.push('>');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_text_is_borrowed() {
        assert!(matches!(
            sanitize_for_terminal("héllo\n\tworld"),
            Cow::Borrowed(_)
        ));
        assert!(matches!(
            sanitize_line_for_terminal("héllo world"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn escapes_are_visible_and_stable() {
        assert_eq!(sanitize_for_terminal("a\x1b[2Jb"), "a␛[2Jb");
        assert_eq!(sanitize_for_terminal("\0\x07\x08\x7f"), "␀␇␈␡");
        assert_eq!(sanitize_for_terminal("x\u{9b}31m"), "x<U+009B>31m");
        assert_eq!(sanitize_for_terminal("\u{202e}abc"), "<U+202E>abc");
        assert_eq!(sanitize_for_terminal("a\r\nb\rc"), "a\nb␍c");
        assert_eq!(sanitize_line_for_terminal("a\r\nb\tc"), "a␍␊b␉c");
        let once = sanitize_line_for_terminal("\x1b]52;c;aGk=\x07\u{2066}\n").into_owned();
        assert_eq!(sanitize_line_for_terminal(&once), once);
    }
}
