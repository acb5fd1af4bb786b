//! SSE parsing throughput: large `data:` frames (target ≥ 1 GB/s) and typical small deltas.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hanzo_sse::SseFrameBuffer;
use std::hint::black_box;

/// `events` events, each one `data:` line of `line_len` JSON-ish bytes.
fn large_frames(events: usize, line_len: usize) -> Vec<u8> {
    let payload: Vec<u8> = b"{\"k\":\"abcdefghijklmnopqrstuvwxyz0123456789\"},"
        .iter()
        .copied()
        .cycle()
        .take(line_len)
        .collect();
    let mut stream = Vec::with_capacity(events * (line_len + 8));
    for _ in 0..events {
        stream.extend_from_slice(b"data: ");
        stream.extend_from_slice(&payload);
        stream.extend_from_slice(b"\n\n");
    }
    stream
}

/// An Anthropic-shaped stream of `deltas` small text deltas.
fn small_deltas(deltas: usize) -> Vec<u8> {
    let mut stream = Vec::new();
    stream.extend_from_slice(
        b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"role\":\"assistant\"}}\n\n",
    );
    for i in 0..deltas {
        stream.extend_from_slice(
            format!(
                "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"word{i} \"}}}}\n\n"
            )
            .as_bytes(),
        );
    }
    stream.extend_from_slice(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    stream
}

/// Parse `stream` fed in `chunk`-byte pieces; returns the event count so nothing is optimised out.
fn parse(stream: &[u8], chunk: usize) -> usize {
    let mut sse = SseFrameBuffer::new();
    let mut n = 0;
    for piece in stream.chunks(chunk) {
        n += sse
            .feed(piece)
            .expect("bench input is within the limit")
            .len();
    }
    sse.finish();
    n
}

fn bench(c: &mut Criterion) {
    let large = large_frames(64, 64 * 1024);
    let mut group = c.benchmark_group("large_data_frames_64KiB");
    group.throughput(Throughput::Bytes(large.len() as u64));
    group.bench_function("whole_buffer", |b| {
        b.iter(|| parse(black_box(&large), large.len()))
    });
    group.bench_function("16KiB_chunks", |b| {
        b.iter(|| parse(black_box(&large), 16 * 1024))
    });
    group.finish();

    let small = small_deltas(2_000);
    let mut group = c.benchmark_group("small_deltas_anthropic");
    group.throughput(Throughput::Bytes(small.len() as u64));
    group.bench_function("1400B_chunks", |b| {
        b.iter(|| parse(black_box(&small), 1400))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
