//! What a streaming UI sees: final lines as blocks finish, a preview of the tail meanwhile, code
//! fences buffered until closed (plain in the preview, highlighted once closed), and an unclosed
//! fence at the end of the stream flushed as highlighted code.

use hanzo_md_render::{Color, Line, LineKind, MarkdownStream, RenderOptions};

fn highlighted(lines: &[Line]) -> bool {
    lines
        .iter()
        .filter(|l| l.kind == LineKind::Code)
        .flat_map(|l| &l.spans)
        .any(|s| matches!(s.style.fg, Some(Color::Rgb(..))))
}

fn code_text(lines: &[Line]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.kind == LineKind::Code)
        .map(Line::plain_text)
        .collect()
}

#[test]
fn an_open_fence_is_previewed_plain_and_highlighted_once_closed() {
    let mut s = MarkdownStream::new(RenderOptions::new(Some(80)));
    let mut shown = s.push("Here:\n\n```rust\nfn main() {\n");
    assert_eq!(
        shown.len(),
        1,
        "the paragraph is final once the fence begins"
    );
    assert_eq!(shown[0].plain_text(), "Here:");
    let preview = s.preview();
    assert_eq!(code_text(&preview), ["fn main() {"]);
    assert!(!highlighted(&preview), "an open fence is not highlighted");
    assert!(
        preview
            .iter()
            .filter(|l| l.kind == LineKind::CodeFence)
            .count()
            == 1,
        "no closing fence yet"
    );

    assert!(
        s.push("    println!(\"hi\");\n}").is_empty(),
        "still buffered"
    );
    let preview = s.preview();
    assert_eq!(
        code_text(&preview),
        ["fn main() {", "    println!(\"hi\");", "}"]
    );

    let closed = s.push("\n```\n");
    assert!(highlighted(&closed), "highlighted in one pass when closed");
    assert_eq!(
        code_text(&closed),
        ["fn main() {", "    println!(\"hi\");", "}"]
    );
    assert_eq!(closed.last().map(|l| l.kind), Some(LineKind::CodeFence));
    assert!(
        s.preview().is_empty(),
        "nothing pending after a closed fence"
    );
    shown.extend(closed);
    shown.extend(s.finish());
    assert_eq!(
        shown,
        hanzo_md_render::render(
            "Here:\n\n```rust\nfn main() {\n    println!(\"hi\");\n}\n```\n",
            &RenderOptions::new(Some(80))
        )
    );
}

#[test]
fn an_unclosed_fence_at_the_end_is_flushed_as_highlighted_code() {
    let mut s = MarkdownStream::new(RenderOptions::new(Some(80)));
    let mut lines = s.push("```python\ndef f():\n    return \"never closed");
    lines.extend(s.finish());
    assert_eq!(code_text(&lines), ["def f():", "    return \"never closed"]);
    assert!(highlighted(&lines), "highlighted as far as it goes");
    let fences = lines
        .iter()
        .filter(|l| l.kind == LineKind::CodeFence)
        .count();
    assert_eq!(
        fences, 1,
        "an opening fence and no closing one: the cut is visible"
    );
}

#[test]
fn preview_follows_the_partial_line_and_inline_styles() {
    let mut s = MarkdownStream::new(RenderOptions::new(Some(80)));
    s.push("Some **bo");
    let p = s.preview();
    assert_eq!(p.len(), 1);
    assert_eq!(
        p[0].plain_text(),
        "Some **bo",
        "an unclosed emphasis shows as typed"
    );
    s.push("ld** text");
    let p = s.preview();
    assert_eq!(p[0].plain_text(), "Some bold text");
    assert!(p[0]
        .spans
        .iter()
        .any(|sp| sp.text == "bold" && sp.style.bold));
}

#[test]
fn preview_comes_after_a_gap_from_the_final_lines() {
    let mut s = MarkdownStream::new(RenderOptions::new(Some(80)));
    let done = s.push("# Title\n\nbody");
    assert!(done.is_empty());
    let done = s.push("\n\nnext");
    // `body` is final only once a line after it completes; the heading is.
    assert_eq!(
        done.iter().map(Line::plain_text).collect::<Vec<_>>(),
        ["Title"]
    );
    let p = s.preview();
    assert_eq!(
        p.iter()
            .map(|l| (l.kind, l.plain_text()))
            .collect::<Vec<_>>(),
        [
            (LineKind::Blank, String::new()),
            (LineKind::Paragraph, "body".to_owned()),
            (LineKind::Blank, String::new()),
            (LineKind::Paragraph, "next".to_owned()),
        ]
    );
}

#[test]
fn pathological_structures_render_within_bounds() {
    let opts = RenderOptions::new(Some(40));
    let deep_quote = format!("{}deep", "> ".repeat(300));
    let deep_list: String = (0..200)
        .map(|i| format!("{}- level {i}\n", "  ".repeat(i)))
        .collect();
    let wide_table = format!(
        "{}|\n{}|\n{}|\n",
        "| h ".repeat(500),
        "|---".repeat(500),
        "| c ".repeat(500)
    );
    let long_line = "word ".repeat(20_000);
    let brackets = "[".repeat(5_000) + &"]".repeat(5_000);
    let stars = "*a ".repeat(5_000);
    for doc in [
        deep_quote, deep_list, wide_table, long_line, brackets, stars,
    ] {
        let lines = hanzo_md_render::render(&doc, &opts);
        assert!(!lines.is_empty());
        for line in &lines {
            if line.kind == LineKind::Table {
                assert!(line.width() <= 40, "tables are cut to the width");
            }
            if line.kind == LineKind::Paragraph && line.quote_depth == 0 && line.indent == 0 {
                assert!(
                    line.width() <= 40,
                    "prose wraps to the width: {}",
                    line.width()
                );
            }
        }
    }
}
