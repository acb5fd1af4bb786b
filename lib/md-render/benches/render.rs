//! Throughput of streaming rendering against one-shot rendering of the same ~1 MB document
//! (prose, nested lists, tables, code fences in five languages), measured in the same run:
//!
//! - `stream_64B`: `MarkdownStream::push` in 64-byte chunks, then `finish` (what the UI does);
//! - `one_shot`: `render`, the same stream fed the whole text at once;
//! - `one_parse`: `render_document`, a single parse without block segmentation — the baseline
//!   a non-streaming renderer would pay.
//!
//! Each also runs with colour off (`*_nocolor`), where no code is highlighted, to show syntect's
//! share. `cargo bench -p hanzo-md-render --bench render`.
//!
//! On a loaded machine wall-clock figures drift; `--once MODE [nocolor]` (MODE `stream`,
//! `one_shot` or `one_parse`) renders the document once and exits, for an instruction count that
//! does not: `valgrind --tool=callgrind target/release/deps/render-<hash> --once stream`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, Criterion, Throughput};
use hanzo_md_render::{render, render_document, MarkdownStream, RenderOptions};

const RUST: &str = r#"```rust
use std::collections::HashMap;

/// Counts words in a text.
pub fn count_words(text: &str) -> HashMap<&str, usize> {
    let mut counts = HashMap::new();
    for word in text.split_whitespace() {
        *counts.entry(word).or_insert(0) += 1;
    }
    counts
}
```
"#;

const PYTHON: &str = r#"```python
import json

def load(path: str) -> dict:
    """Load a JSON file and return its content."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)

class Cache:
    def __init__(self):
        self.items = {}
```
"#;

const JS: &str = r#"```js
export async function fetchAll(urls) {
  const results = await Promise.all(urls.map((u) => fetch(u)));
  return results.filter((r) => r.ok).map((r) => r.status);
}
```
"#;

const SH: &str = r#"```sh
#!/usr/bin/env bash
set -euo pipefail
for f in src/*.rs; do
  echo "checking $f"
  cargo fmt -- --check "$f" || exit 1
done
```
"#;

const JSON: &str = r#"```json
{"name": "hanzo-dev", "version": "0.1.0", "features": ["tui", "vim"], "nested": {"a": [1, 2, 3]}}
```
"#;

/// A document of about `target` bytes mixing every block kind.
fn document(target: usize) -> String {
    let mut doc = String::with_capacity(target + 4096);
    let codes = [RUST, PYTHON, JS, SH, JSON];
    let mut i = 0usize;
    while doc.len() < target {
        doc.push_str(&format!("## Section {i}\n\n"));
        doc.push_str(
            "The agent read the **configuration** and found that the `retry` budget was \
             exhausted after *three* attempts; see [the docs](https://example.com/docs) for \
             details. This paragraph is long enough to wrap at eighty columns more than once, \
             which exercises the word wrapper as well as the inline styles.\n\n",
        );
        doc.push_str(
            "- first item with `code`\n- second item\n  - nested **bold** item\n  - another\n\
             - [x] a finished task\n\n1. step one\n2. step two\n\n",
        );
        doc.push_str(codes[i % codes.len()]);
        doc.push('\n');
        doc.push_str(
            "| File | Lines | Status |\n|:-----|------:|:------:|\n| `src/main.rs` | 120 | ok |\n\
             | `src/lib.rs` | 2048 | changed |\n\n",
        );
        doc.push_str("> A quoted remark with _emphasis_ that spans\n> two lines.\n\n---\n\n");
        i += 1;
    }
    doc
}

fn stream(text: &str, opts: &RenderOptions) -> usize {
    let mut s = MarkdownStream::new(opts.clone());
    let mut n = 0;
    let bytes = text.as_bytes();
    let mut from = 0;
    while from < bytes.len() {
        let mut to = (from + 64).min(bytes.len());
        while !text.is_char_boundary(to) {
            to += 1;
        }
        n += s.push(&text[from..to]).len();
        from = to;
    }
    n + s.finish().len()
}

fn bench(c: &mut Criterion) {
    let doc = document(1 << 20);
    let mut group = c.benchmark_group("md_render_1MB");
    group.throughput(Throughput::Bytes(doc.len() as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    for (suffix, color) in [("", true), ("_nocolor", false)] {
        let opts = RenderOptions {
            color,
            ..RenderOptions::new(Some(80))
        };
        // Same output, so the comparison is like for like.
        assert_eq!(stream(&doc, &opts), render(&doc, &opts).len());
        group.bench_function(format!("stream_64B{suffix}"), |b| {
            b.iter(|| stream(black_box(&doc), &opts))
        });
        group.bench_function(format!("one_shot{suffix}"), |b| {
            b.iter(|| render(black_box(&doc), &opts).len())
        });
        group.bench_function(format!("one_parse{suffix}"), |b| {
            b.iter(|| render_document(black_box(&doc), &opts).len())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--once") {
        let mode = args.get(i + 1).map_or("stream", String::as_str);
        let color = args.get(i + 2).map(String::as_str) != Some("nocolor");
        let doc = document(1 << 20);
        let opts = RenderOptions {
            color,
            ..RenderOptions::new(Some(80))
        };
        let lines = match mode {
            "stream" => stream(&doc, &opts),
            "one_shot" => render(&doc, &opts).len(),
            "one_parse" => render_document(&doc, &opts).len(),
            other => panic!("--once takes stream, one_shot or one_parse, not {other}"),
        };
        println!("{mode} color={color}: {} bytes, {lines} lines", doc.len());
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
