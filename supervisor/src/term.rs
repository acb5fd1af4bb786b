//! Making model- and tool-derived text safe to print on a terminal.
//!
//! The supervisor is the one unconfined process, and its terminal is the user's: a model (or a
//! file it read, or a command's output) that gets an escape sequence printed can write the
//! clipboard (OSC 52), set the window title (OSC 0/2), clear the screen or move the cursor (CSI)
//! to overdraw an approval prompt, reach terminal extensions (DCS, APC), or overwrite a line with
//! `\r` and backspace. Bidi overrides reorder what the user reads (Trojan Source); zero-width and
//! other invisible characters hide text. None of them may reach the terminal as such; each
//! becomes a visible, inert escape:
//!
//! | input | shown as |
//! |---|---|
//! | C0 controls U+0000–U+001F (ESC, BEL, BS, NUL, a lone CR, …) | the Control Pictures glyph U+2400 + code: `␛` `␇` `␈` `␀` `␍` |
//! | DEL U+007F | `␡` |
//! | C1 controls U+0080–U+009F (8-bit CSI U+009B, OSC U+009D, …) | `<U+009B>` |
//! | bidi controls U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069 | `<U+202E>` |
//! | invisible characters: zero-width U+200B–U+200D, U+2060–U+2064, U+FEFF, U+00AD, U+180E, line and paragraph separators U+2028/U+2029, tag characters U+E0000–U+E007F | `<U+200B>` |
//!
//! A tab and a line feed are kept by [`sanitize_for_terminal`] (line structure), and CR LF
//! becomes LF; [`sanitize_line_for_terminal`] is for one-line contexts (a status line, the
//! command in an approval prompt) and shows them as `␉` and `␊` too. The escape forms contain no
//! character that is itself escaped, so sanitising twice changes nothing more.
//!
//! This is the contract of `hanzo_md_render::sanitize_for_terminal` (the future terminal UI's),
//! with the invisible characters added; one of the two will become the only one.

use std::borrow::Cow;

/// Text safe to write to a terminal, keeping tabs and line feeds (CR LF becomes LF). Every
/// other control character, C1 control, bidi control and invisible character becomes a visible
/// escape (see the module documentation). Borrows when nothing needed escaping.
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
    is_control(c) || is_bidi_control(c) || is_invisible(c)
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

/// Characters that print as nothing (or break a line without a line feed), so text can hide in
/// or behind them.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200d}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{2060}'..='\u{2064}'
            | '\u{feff}'
            | '\u{e0000}'..='\u{e007f}'
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
        if needs_work(c, one_line) {
            push_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn push_escape(out: &mut String, c: char) {
    let code = u32::from(c);
    match c {
        '\u{0}'..='\u{1f}' => out.push(char::from_u32(0x2400 + code).unwrap_or('\u{fffd}')),
        '\u{7f}' => out.push('\u{2421}'),
        _ => out.push_str(&format!("<U+{code:04X}>")),
    }
}

/// How much of a long text a view shows, and what it says about the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The visible part, sanitized.
    pub text: String,
    /// Characters of the (sanitized) text left out; 0 when everything is shown.
    pub hidden_chars: usize,
}

/// At most `max` characters of `text` after sanitizing (one line or not), never cut silently:
/// [`Shown::hidden_chars`] says how much was left out, for the caller to say so and how to see it.
pub fn shown(text: &str, max: usize, one_line: bool) -> Shown {
    let clean = sanitize(text, one_line);
    let total = clean.chars().count();
    if total <= max {
        return Shown {
            text: clean.into_owned(),
            hidden_chars: 0,
        };
    }
    Shown {
        text: clean.chars().take(max).collect(),
        hidden_chars: total - max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_text_is_borrowed() {
        assert!(matches!(
            sanitize_for_terminal("héllo\n\tworld ✓"),
            Cow::Borrowed(_)
        ));
        assert!(matches!(
            sanitize_line_for_terminal("héllo world"),
            Cow::Borrowed(_)
        ));
    }

    /// Real attack sequences, each shown inert.
    #[test]
    fn attack_sequences_are_shown_not_obeyed() {
        let cases = [
            // OSC 52: write "rm -rf ~" to the clipboard.
            ("\x1b]52;c;cm0gLXJmIH4=\x07", "␛]52;c;cm0gLXJmIH4=␇"),
            // OSC 0 / OSC 2: the window title, ST-terminated.
            ("\x1b]0;pwned\x1b\\", "␛]0;pwned␛\\"),
            ("\x1b]2;title\x07", "␛]2;title␇"),
            // Clear the screen, home the cursor, move up and erase lines.
            ("\x1b[2J\x1b[H", "␛[2J␛[H"),
            ("ok\x1b[1A\x1b[2K", "ok␛[1A␛[2K"),
            // 8-bit CSI and OSC (C1).
            ("\u{9b}31m\u{9d}0;x\u{9c}", "<U+009B>31m<U+009D>0;x<U+009C>"),
            // DCS and APC.
            ("\x1bPq#0\x1b\\", "␛Pq#0␛\\"),
            ("\x1b_payload\x1b\\", "␛_payload␛\\"),
            // NUL, BEL, backspace overwriting, DEL.
            ("a\0b\x07c\x08\x08d\x7f", "a␀b␇c␈␈d␡"),
            // A carriage return that would overwrite the line it is on.
            ("rm -rf ~ \r ls -la", "rm -rf ~ ␍ ls -la"),
            // Trojan Source: the right-to-left override and isolates.
            ("\u{202e}fdp.exe", "<U+202E>fdp.exe"),
            ("a\u{2066}b\u{2069}", "a<U+2066>b<U+2069>"),
            // Invisible text: zero-width space and joiner, BOM, tag characters.
            ("r\u{200b}m", "r<U+200B>m"),
            ("\u{feff}x\u{e0041}", "<U+FEFF>x<U+E0041>"),
        ];
        for (input, want) in cases {
            assert_eq!(sanitize_for_terminal(input), want, "{input:?}");
            let out = sanitize_for_terminal(input);
            assert!(
                !out.chars()
                    .any(|c| is_unsafe_for_terminal(c) && c != '\n' && c != '\t'),
                "{out:?}"
            );
        }
    }

    #[test]
    fn line_structure_is_kept_or_shown() {
        assert_eq!(sanitize_for_terminal("a\r\nb\rc\n\td"), "a\nb␍c\n\td");
        assert_eq!(sanitize_line_for_terminal("a\r\nb\tc"), "a␍␊b␉c");
        let once = sanitize_line_for_terminal("\x1b]52;c;aGk=\x07\u{2066}\n\u{200b}").into_owned();
        assert_eq!(sanitize_line_for_terminal(&once), once, "idempotent");
    }

    #[test]
    fn shown_text_says_how_much_is_hidden() {
        assert_eq!(
            shown("short", 10, true),
            Shown {
                text: "short".into(),
                hidden_chars: 0
            }
        );
        let s = shown(&"x".repeat(25), 10, true);
        assert_eq!(s.text, "x".repeat(10));
        assert_eq!(s.hidden_chars, 15);
        // Counted after escaping: an escape is never cut in half unnoticed.
        let s = shown("ab\x1b[2J", 3, true);
        assert_eq!(s.text, "ab␛");
        assert_eq!(s.hidden_chars, 3);
    }
}
