//! Throughput of one model turn through the full parsing path (SSE frames → provider parser →
//! stream events), fed from a replayed body in 16 KiB chunks.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hanzo_ipc::roles::model::{
    CompletionRequest, Message, ProviderConfig, RetryPolicy, WireFormat,
};
use hanzo_model::cassette::{Chunk, Exchange, ReplayTransport, RequestSummary};
use hanzo_model::run_turn;
use tokio::sync::mpsc;

fn anthropic_body(deltas: usize) -> String {
    let mut s = String::from("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    for i in 0..deltas {
        s.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"token {i} of a fairly ordinary answer \"}}}}\n\n"));
    }
    s.push_str("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":99}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    s
}

fn openai_body(deltas: usize) -> String {
    let mut s = String::new();
    for i in 0..deltas {
        s.push_str(&format!("data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"token {i} of a fairly ordinary answer \"}},\"finish_reason\":null}}]}}\n\n"));
    }
    s.push_str("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n");
    s
}

fn exchange(path: &str, body: &str) -> Exchange {
    Exchange {
        version: 1,
        request: RequestSummary {
            method: "POST".into(),
            url: format!("https://x{path}"),
            credential: "anthropic".into(),
            body_bytes: 0,
        },
        status: 200,
        headers: vec![],
        chunks: body
            .as_bytes()
            .chunks(16 * 1024)
            .map(|c| Chunk::Bytes { bytes: c.to_vec() })
            .collect(),
        error: None,
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for (name, wire, ex, len) in [
        {
            let b = anthropic_body(20_000);
            (
                "anthropic_text",
                WireFormat::AnthropicMessages,
                exchange("/v1/messages", &b),
                b.len(),
            )
        },
        {
            let b = openai_body(20_000);
            (
                "openai_text",
                WireFormat::OpenAiChat,
                exchange("/v1/chat/completions", &b),
                b.len(),
            )
        },
    ] {
        let req = CompletionRequest {
            provider: ProviderConfig::Replay { wire },
            model: "m".into(),
            system: None,
            messages: vec![Message::user_text("hi")],
            tools: vec![],
            max_tokens: 10,
            retry: RetryPolicy::default(),
            record: false,
        };
        let mut group = c.benchmark_group("turn");
        group.throughput(Throughput::Bytes(len as u64));
        group.sample_size(20);
        group.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    let replay = ReplayTransport::new(vec![ex.clone()]);
                    let (tx, mut rx) = mpsc::channel(usize::MAX >> 4);
                    let done = run_turn(&replay, &req, &tx, Some(1)).await.expect("turn");
                    drop(tx);
                    let mut n = 0usize;
                    while rx.recv().await.is_some() {
                        n += 1;
                    }
                    (done, n)
                })
            })
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
