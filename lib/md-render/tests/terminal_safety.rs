//! Terminal safety (issue 10 item 10): real attack sequences, raw and entity-encoded, through
//! `sanitize_for_terminal` and through every place Markdown puts text (prose, headings, inline
//! code, code blocks, link text and URLs, table cells, HTML). A terminal only acts on control
//! characters, so the proof is that none reaches a span or the sanitiser's output, and that
//! each shows up as a visible escape instead.

use hanzo_md_render::{
    is_unsafe_for_terminal, render, sanitize_for_terminal, sanitize_line_for_terminal,
    RenderOptions,
};
use proptest::prelude::*;

/// (what it does, the sequence)
const ATTACKS: &[(&str, &str)] = &[
    ("OSC 52 clipboard write (BEL)", "\x1b]52;c;cm0gLXJmIH4=\x07"),
    ("OSC 52 clipboard write (ST)", "\x1b]52;p;ZXZpbA==\x1b\\"),
    ("OSC 0 window title", "\x1b]0;owned\x07"),
    ("OSC 2 window title", "\x1b]2;owned\x1b\\"),
    ("clear screen and home", "\x1b[2J\x1b[H"),
    ("CR and erase line to overwrite", "rm -rf ~\r\x1b[2Kls"),
    ("cursor up to overdraw a prompt", "\x1b[1A\x1b[2K Allowed"),
    (
        "OSC 8 hyperlink",
        "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",
    ),
    ("device status report", "\x1b[6n"),
    ("title report (answerback)", "\x1b[21t"),
    ("DECID", "\x1bZ"),
    ("DCS DECRQSS", "\x1bP$q m\x1b\\"),
    ("DCS DECUDK key redefinition", "\x1bP0|17/6C730D\x1b\\"),
    ("kitty graphics APC", "\x1b_Gf=100;AAAA\x1b\\"),
    (
        "iTerm2 inline file",
        "\x1b]1337;File=name=eA==;inline=1:AAAA\x07",
    ),
    ("bracketed paste end injection", "\x1b[201~rm -rf /\n"),
    ("window resize", "\x1b[8;100;100t"),
    ("iconify", "\x1b[2t"),
    ("alternate screen", "\x1b[?1049h"),
    ("mouse tracking", "\x1b[?1000h"),
    ("full reset", "\x1bc"),
    ("invisible text", "\x1b[8mhidden"),
    ("shift out (charset switch)", "\x0egarbled\x0f"),
    ("8-bit CSI", "\u{9b}2J"),
    ("8-bit OSC 52", "\u{9d}52;c;eA==\u{9c}"),
    ("8-bit DCS", "\u{90}$q m\u{9c}"),
    ("NEL", "a\u{85}b"),
    ("backspace overwrite", "safe\x08\x08\x08\x08evil"),
    (
        "Trojan Source bidi",
        "/* \u{202e} } \u{2066}if (admin)\u{2069} \u{2066} begin admins only */",
    ),
    ("right-to-left mark", "a\u{200f}b\u{200e}c\u{61c}"),
    ("NUL, BEL, DEL", "a\0b\x07c\x7f"),
];

fn assert_inert(context: &str, text: &str, keep_lines: bool) {
    for c in text.chars() {
        let allowed = keep_lines && (c == '\n' || c == '\t');
        assert!(
            allowed || !is_unsafe_for_terminal(c),
            "{context}: {c:?} survived in {text:?}"
        );
    }
}

#[test]
fn the_sanitiser_neutralises_every_attack_visibly() {
    for (what, seq) in ATTACKS {
        let out = sanitize_for_terminal(seq);
        assert_inert(what, &out, true);
        assert_ne!(out, *seq, "{what}: nothing was escaped");
        assert!(
            out.contains(['␛', '␇', '␈', '␀', '␡', '␍', '␎']) || out.contains("<U+"),
            "{what}: no visible escape in {out:?}"
        );
        let line = sanitize_line_for_terminal(seq);
        assert_inert(what, &line, false);
        assert!(
            !line.contains('\n'),
            "{what}: a line break in one-line output"
        );
    }
}

#[test]
fn escapes_keep_the_rest_of_the_text() {
    assert_eq!(sanitize_for_terminal("ok \x1b]0;t\x07 ok"), "ok ␛]0;t␇ ok");
    assert_eq!(sanitize_for_terminal("\u{9b}2J"), "<U+009B>2J");
    assert_eq!(
        sanitize_for_terminal("rm -rf ~\r\x1b[2Kls"),
        "rm -rf ~␍␛[2Kls"
    );
    assert_eq!(sanitize_for_terminal("one\r\ntwo\tcol"), "one\ntwo\tcol");
    assert_eq!(sanitize_line_for_terminal("one\ntwo\tcol"), "one␊two␉col");
}

#[test]
fn no_attack_survives_markdown_rendering_anywhere() {
    let opts = RenderOptions::new(Some(80));
    for (what, seq) in ATTACKS {
        let one_line = seq.replace('\n', " ");
        let places = [
            format!("prose {seq} prose"),
            format!("# heading {one_line}"),
            format!("`code {one_line}`"),
            format!("```sh\necho '{seq}'\n```"),
            format!("```\n{seq}"),
            format!("    indented {one_line}"),
            format!("[text {one_line}](https://e.com/{one_line})"),
            format!("<https://e.com/{one_line}>"),
            format!("| h {one_line} |\n|---|\n| c {one_line} |"),
            format!("<div>\n{seq}\n</div>"),
            format!("inline <b title=\"{one_line}\">html</b>"),
            format!("> - [x] {one_line}"),
        ];
        for (i, doc) in places.iter().enumerate() {
            for line in render(doc, &opts) {
                for span in &line.spans {
                    assert_inert(&format!("{what}, place {i}"), &span.text, false);
                }
            }
        }
    }
}

#[test]
fn entities_cannot_smuggle_controls() {
    let opts = RenderOptions::new(Some(80));
    let doc = "&#27;]52;c;eA==&#7; &#x1b;[2J &#155;2J &#x9d; &#x202e; &#8238; &#0; &#x7f;";
    let lines = render(doc, &opts);
    let text: String = lines.iter().map(|l| l.plain_text()).collect();
    for line in &lines {
        for span in &line.spans {
            assert_inert("entity", &span.text, false);
        }
    }
    assert!(text.contains("␛]52;c;eA==␇"), "{text}");
    assert!(
        text.contains("<U+009B>2J") && text.contains("<U+202E>"),
        "{text}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_string_comes_out_inert_and_stable(s in "(?s).{0,64}") {
        let out = sanitize_for_terminal(&s);
        assert_inert("proptest", &out, true);
        let twice = sanitize_for_terminal(&out).into_owned();
        prop_assert_eq!(twice.as_str(), out.as_ref());
        let line = sanitize_line_for_terminal(&s);
        assert_inert("proptest", &line, false);
        if !s.chars().any(is_unsafe_for_terminal) && !s.contains('\r') {
            prop_assert_eq!(out.as_ref(), s.as_str());
        }
    }

    #[test]
    fn any_markdown_renders_inert(s in "(?s)[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}\\u{202a}-\\u{202e}#>*`|\\[\\]()&;a-z0-9 \\n-]{0,120}") {
        for line in render(&s, &RenderOptions::new(Some(40))) {
            for span in &line.spans {
                assert_inert("proptest markdown", &span.text, false);
            }
        }
    }
}
