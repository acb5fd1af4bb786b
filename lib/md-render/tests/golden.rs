//! Golden tests: each `tests/golden/NAME.md` is rendered and compared, in the compact textual
//! form of `Line`s, with `NAME.out`. A first line `%% key=value …` sets options (`width=N` or
//! `width=none`, default 60; `color=false`; `palette=ansi16`) and is not rendered.
//!
//! `HANZO_BLESS=1 cargo test -p hanzo-md-render --test golden` rewrites the `.out` files; review
//! the diff before committing it.
//!
//! Every golden document is also fed byte by byte and character by character (the output must
//! not change), checked for terminal safety, and rendered with a single parse of the whole
//! document (the stream's block segmentation must not change the result).

use std::path::{Path, PathBuf};

use hanzo_md_render::{
    compact, is_unsafe_for_terminal, render, render_document, Line, MarkdownStream, Palette,
    RenderOptions,
};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn options_and_text(source: &str) -> (RenderOptions, &str) {
    let mut opts = RenderOptions::new(Some(60));
    let Some(rest) = source.strip_prefix("%%") else {
        return (opts, source);
    };
    let (directive, text) = rest.split_once('\n').unwrap_or((rest, ""));
    for setting in directive.split_whitespace() {
        match setting.split_once('=') {
            Some(("width", "none")) => opts.width = None,
            Some(("width", n)) => opts.width = Some(n.parse().expect("width is a number")),
            Some(("color", v)) => opts.color = v.parse().expect("color is true or false"),
            Some(("palette", "ansi16")) => opts.palette = Palette::Ansi16,
            other => panic!("unknown golden directive {other:?}"),
        }
    }
    (opts, text)
}

fn goldens() -> Vec<(String, String)> {
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(golden_dir()).expect("tests/golden exists") {
        let path = entry.expect("readable dir entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            let name = path
                .file_stem()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            let bytes = std::fs::read(&path).expect("readable golden input");
            // Some inputs hold raw control bytes on purpose; all are UTF-8.
            docs.push((
                name,
                String::from_utf8(bytes).expect("golden inputs are UTF-8"),
            ));
        }
    }
    docs.sort();
    assert!(docs.len() >= 15, "golden inputs are missing");
    docs
}

fn streamed_bytes(text: &str, opts: &RenderOptions) -> Vec<Line> {
    let mut stream = MarkdownStream::new(opts.clone());
    let mut lines = Vec::new();
    for b in text.as_bytes() {
        lines.extend(stream.push_bytes(std::slice::from_ref(b)));
    }
    lines.extend(stream.finish());
    lines
}

fn streamed_chars(text: &str, opts: &RenderOptions) -> Vec<Line> {
    let mut stream = MarkdownStream::new(opts.clone());
    let mut lines = Vec::new();
    let mut buf = [0u8; 4];
    for c in text.chars() {
        lines.extend(stream.push(c.encode_utf8(&mut buf)));
    }
    lines.extend(stream.finish());
    lines
}

fn assert_terminal_safe(name: &str, lines: &[Line]) {
    for line in lines {
        for span in &line.spans {
            assert!(
                !span.text.chars().any(is_unsafe_for_terminal),
                "{name}: unsafe character in span {:?}",
                span.text
            );
        }
    }
}

#[test]
fn golden_files_match() {
    let bless = std::env::var_os("HANZO_BLESS").is_some();
    let mut failures = Vec::new();
    for (name, source) in goldens() {
        let (opts, text) = options_and_text(&source);
        let lines = render(text, &opts);
        let got = compact(&lines);
        let out_path = golden_dir().join(format!("{name}.out"));
        if bless {
            std::fs::write(&out_path, &got).expect("golden output writable");
            continue;
        }
        let want = std::fs::read_to_string(&out_path).unwrap_or_default();
        if got != want {
            failures.push(format!("--- {name}.out (want)\n{want}\n+++ got\n{got}"));
        }
    }
    assert!(
        failures.is_empty(),
        "golden mismatches:\n{}",
        failures.join("\n")
    );
}

#[test]
fn goldens_are_chunk_independent_safe_and_segmentation_free() {
    for (name, source) in goldens() {
        let (opts, text) = options_and_text(&source);
        let whole = render(text, &opts);
        assert_eq!(streamed_bytes(text, &opts), whole, "{name}: byte by byte");
        assert_eq!(streamed_chars(text, &opts), whole, "{name}: char by char");
        assert_terminal_safe(&name, &whole);
        assert_eq!(
            compact(&render_document(text, &opts)),
            compact(&whole),
            "{name}: segmented rendering differs from one parse"
        );
    }
}

#[test]
fn crlf_renders_as_lf() {
    let source = std::fs::read_to_string(golden_dir().join("crlf.md")).expect("crlf golden");
    assert!(
        source.contains("\r\n"),
        "crlf.md must keep its CR LF endings"
    );
    let opts = RenderOptions::new(Some(60));
    assert_eq!(
        render(&source, &opts),
        render(&source.replace("\r\n", "\n"), &opts)
    );
    assert_eq!(
        render(&source.replace("\r\n", "\r"), &opts),
        render(&source, &opts)
    );
}
