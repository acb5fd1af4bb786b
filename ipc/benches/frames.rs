//! Frame encode/decode throughput.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use hanzo_ipc::frame::{decode_all, encode_frame, FrameDecoder, DEFAULT_MAX_FRAME};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    for size in [64usize, 4096, 1 << 20] {
        let payload = vec![0xabu8; size];
        let mut g = c.benchmark_group(format!("frame_{size}B"));
        g.throughput(Throughput::Bytes(size as u64 + 5));
        g.bench_function("encode", |b| {
            let mut out = Vec::with_capacity(size + 5);
            b.iter(|| {
                out.clear();
                encode_frame(1, black_box(&payload), DEFAULT_MAX_FRAME, &mut out).expect("fits");
            })
        });
        let mut encoded = Vec::new();
        encode_frame(1, &payload, DEFAULT_MAX_FRAME, &mut encoded).expect("fits");
        g.bench_function("decode", |b| {
            b.iter(|| {
                let mut dec = FrameDecoder::new(DEFAULT_MAX_FRAME);
                dec.feed(black_box(&encoded));
                black_box(dec.next_frame().expect("valid").expect("complete"));
            })
        });
        g.finish();
    }
    // Many small frames in one buffer, as a busy channel delivers them.
    let mut stream = Vec::new();
    for _ in 0..1000 {
        encode_frame(0x21, &[7u8; 64], DEFAULT_MAX_FRAME, &mut stream).expect("fits");
    }
    let mut g = c.benchmark_group("stream_1000x64B");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("decode_all", |b| {
        b.iter(|| black_box(decode_all(black_box(&stream), DEFAULT_MAX_FRAME)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
