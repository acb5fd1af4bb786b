//! The chat screen's render loop: one frame at 200×60 while a reply streams — a key typed in the
//! input box, a 64-byte text delta applied, the whole screen drawn (ratatui, test backend) — over
//! a transcript that already holds 40 turns with tool calls. Target: ≤ 2 ms per frame.

use criterion::{criterion_group, criterion_main, Criterion};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use hanzo_dev::agent::events::RunEvent;
use hanzo_dev::tui::app::App;
use hanzo_dev::tui::bridge::UiMsg;
use hanzo_line_edit::InputMode;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde_json::json;
use std::time::Instant;

const REPLY: &str = "Here is **what I found** in `pager/pages.py`: the page count adds one \
    page too many when the items fill the last page exactly.\n\n- first, the division\n- then \
    the rounding\n\n```python\ndef page_count(items, per_page):\n    return (len(items) + per_page \
    - 1) // per_page\n```\n\nThe tests pass now. ";

fn history(app: &mut App) {
    for i in 0..40 {
        app.transcript.push_user(&format!("question number {i}"));
        let id = format!("t{i}");
        for ev in [
            RunEvent::Text { text: REPLY.into() },
            RunEvent::ToolCall {
                id: id.clone(),
                name: "bash".into(),
                input: json!({"command": "python3 -m unittest -v"}),
            },
            RunEvent::ToolDecision {
                id: id.clone(),
                allowed: true,
                decided_by: hanzo_store::DecidedBy::Rule,
                reason: "allowed".into(),
            },
            RunEvent::ToolResult {
                id,
                is_error: false,
                preview: "ok\nok\nok\nRan 7 tests".into(),
                duration_ms: 120,
            },
            RunEvent::Text { text: REPLY.into() },
        ] {
            app.apply(UiMsg::Event(ev));
        }
    }
}

fn frame(c: &mut Criterion) {
    let mut app = App::new(200, true, InputMode::Default);
    history(&mut app);
    let mut term = Terminal::new(TestBackend::new(200, 60)).expect("terminal");
    let chunks: Vec<String> = REPLY
        .as_bytes()
        .chunks(64)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let mut i = 0usize;
    c.bench_function("chat frame 200x60 (key + 64-byte delta + draw)", |b| {
        b.iter(|| {
            let now = Instant::now();
            // A message of up to 80 characters, as typed; then the box starts over.
            if i.is_multiple_of(80) {
                app.editor.clear();
            }
            app.on_key(KeyEvent::new(KeyCode::Char('x'), KeyModifiers::NONE), now);
            app.apply(UiMsg::Event(RunEvent::Text {
                text: chunks[i % chunks.len()].clone(),
            }));
            i += 1;
            term.draw(|f| app.draw(f)).expect("draw");
        })
    });
}

/// The parts of a frame apart: drawing an unchanged screen, and applying one delta.
fn parts(c: &mut Criterion) {
    let mut app = App::new(200, true, InputMode::Default);
    history(&mut app);
    let mut term = Terminal::new(TestBackend::new(200, 60)).expect("terminal");
    c.bench_function("chat draw only 200x60", |b| {
        b.iter(|| {
            term.draw(|f| app.draw(f)).expect("draw");
        })
    });
    let mut i = 0usize;
    let chunks: Vec<String> = REPLY
        .as_bytes()
        .chunks(64)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    c.bench_function("chat apply one 64-byte delta", |b| {
        b.iter(|| {
            app.apply(UiMsg::Event(RunEvent::Text {
                text: chunks[i % chunks.len()].clone(),
            }));
            i += 1;
        })
    });
}

criterion_group!(benches, frame, parts);
criterion_main!(benches);
