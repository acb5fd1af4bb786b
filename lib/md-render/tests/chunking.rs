//! The streaming property: the lines a `MarkdownStream` returns (pushes, then `finish`) do not
//! depend on where the input was cut — bytes (UTF-8 sequences cut anywhere) or characters —
//! over the golden corpus and over random documents built from Markdown's sharpest fragments.
//! Random documents are also checked for terminal safety and against a single parse of the
//! whole document.

use std::path::Path;

use hanzo_md_render::{
    compact, is_unsafe_for_terminal, render, render_document, Line, MarkdownStream, RenderOptions,
};
use proptest::prelude::*;
use proptest::sample::Index;

fn corpus() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut docs: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("tests/golden exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("golden inputs are UTF-8");
            (p.display().to_string(), text)
        })
        .collect();
    docs.sort();
    assert!(docs.len() >= 15);
    docs.into_iter().map(|(_, t)| t).collect()
}

fn opts() -> RenderOptions {
    RenderOptions::new(Some(50))
}

/// Cut positions from indexes, sorted, within `0..=len`.
fn cuts(len: usize, at: &[Index]) -> Vec<usize> {
    let mut v: Vec<usize> = at.iter().map(|i| i.index(len + 1)).collect();
    v.sort_unstable();
    v
}

fn by_bytes(text: &str, at: &[usize]) -> Vec<Line> {
    let mut stream = MarkdownStream::new(opts());
    let mut lines = Vec::new();
    let mut from = 0;
    for &to in at {
        lines.extend(stream.push_bytes(&text.as_bytes()[from..to]));
        from = to;
    }
    lines.extend(stream.push_bytes(&text.as_bytes()[from..]));
    lines.extend(stream.finish());
    lines
}

fn by_chars(text: &str, at: &[usize]) -> Vec<Line> {
    let mut stream = MarkdownStream::new(opts());
    let mut lines = Vec::new();
    let mut from = 0;
    for &to in at {
        let mut to = to;
        while !text.is_char_boundary(to) {
            to += 1;
        }
        if to < from {
            continue;
        }
        lines.extend(stream.push(&text[from..to]));
        from = to;
    }
    lines.extend(stream.push(&text[from..]));
    lines.extend(stream.finish());
    lines
}

const FRAGMENTS: &[&str] = &[
    "```",
    "```rust",
    "```py",
    "~~~",
    "````",
    "- ",
    "* ",
    "+ ",
    "1. ",
    "2) ",
    "> ",
    "> > ",
    "| a | b |",
    "|---|:-:|",
    "| 1 | 2 |",
    "    ",
    "  ",
    "\t",
    "# ",
    "### ",
    "**",
    "*",
    "_",
    "`",
    "~~",
    "[x] ",
    "[ ] ",
    "[link](http://x.y)",
    "<http://a.b>",
    "![i](p.png)",
    "<div>",
    "</div>",
    "<!--",
    "-->",
    "---",
    "***",
    "===",
    "text",
    "more words here",
    "é",
    "日本",
    "🦀",
    "\u{1b}[31m",
    "\u{1b}]52;c;eA==\u{7}",
    "\u{9b}",
    "\u{202e}",
    "\u{0}",
    "&#27;",
    "&#x202e;",
    "\\",
    "fn main() {}",
    "\"str",
    "\n",
    "\n",
    "\n",
    "\n",
    "\n\n",
    "\r\n",
    "\r",
];

fn document() -> impl Strategy<Value = String> {
    proptest::collection::vec(0..FRAGMENTS.len(), 0..60)
        .prop_map(|ix| ix.into_iter().map(|i| FRAGMENTS[i]).collect())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 192,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn corpus_output_does_not_depend_on_chunking(
        doc in any::<Index>(),
        at in proptest::collection::vec(any::<Index>(), 0..24),
    ) {
        let docs = corpus();
        let text = &docs[doc.index(docs.len())];
        let whole = render(text, &opts());
        let at = cuts(text.len(), &at);
        prop_assert_eq!(by_bytes(text, &at), whole.clone());
        prop_assert_eq!(by_chars(text, &at), whole);
    }

    #[test]
    fn random_documents_do_not_depend_on_chunking(
        text in document(),
        at in proptest::collection::vec(any::<Index>(), 0..24),
    ) {
        let whole = render(&text, &opts());
        let at = cuts(text.len(), &at);
        prop_assert_eq!(by_bytes(&text, &at), whole.clone());
        prop_assert_eq!(by_chars(&text, &at), whole.clone());
        for line in &whole {
            for span in &line.spans {
                prop_assert!(
                    !span.text.chars().any(is_unsafe_for_terminal),
                    "unsafe character in {:?}", span.text
                );
            }
        }
    }

    #[test]
    fn random_documents_render_as_one_parse_would(text in document()) {
        // No fragment defines a reference, so segmentation must be invisible.
        prop_assert_eq!(compact(&render_document(&text, &opts())), compact(&render(&text, &opts())));
    }
}

#[test]
fn byte_by_byte_equals_one_chunk_for_invalid_utf8() {
    let bytes: &[u8] =
        b"caf\xc3\xa9 \xe6\x97\xa5 bad \xff\xfe cut \xe6\x97\n\n```\n\xf0\x9f\xa6\x80\n";
    let whole = {
        let mut s = MarkdownStream::new(opts());
        let mut l = s.push_bytes(bytes);
        l.extend(s.finish());
        l
    };
    let mut s = MarkdownStream::new(opts());
    let mut split = Vec::new();
    for b in bytes {
        split.extend(s.push_bytes(std::slice::from_ref(b)));
    }
    split.extend(s.finish());
    assert_eq!(split, whole);
    let lossy = String::from_utf8_lossy(bytes);
    assert_eq!(whole, render(&lossy, &opts()));
}
