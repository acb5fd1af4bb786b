//! Planning and applying a compaction over a long session (500 messages, tool pairs throughout).

use criterion::{criterion_group, criterion_main, Criterion};
use hanzo_compaction::{Message, Role, SessionCompactor, Summary};

fn session() -> Vec<Message> {
    let mut msgs = vec![Message::new(Role::System, "You are a coding agent.", 50)];
    for i in 0..250 {
        let mut call = Message::new(Role::Assistant, format!("reading file {i}"), 20);
        call.tool_uses = vec![format!("call_{i}")];
        let mut result = Message::new(Role::Tool, "x".repeat(400), 100);
        result.tool_results = vec![format!("call_{i}")];
        msgs.push(call);
        msgs.push(result);
    }
    msgs
}

fn bench(c: &mut Criterion) {
    let msgs = session();
    let compactor = SessionCompactor {
        max_tokens: 20_000,
        reserve_recent: 7,
    };
    c.bench_function("compact_500_messages", |b| {
        b.iter(|| {
            compactor.compact(&msgs, |_| {
                Some(Summary {
                    text: "summary".into(),
                    token_count: 10,
                })
            })
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
