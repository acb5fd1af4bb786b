//! Entry points shared by the `cargo fuzz` target (`ipc/fuzz`) and the corpus-replay test, so the
//! fuzzer and the test suite exercise exactly the same code.

use crate::frame::decode_all;
use crate::proto::{
    decode_payload, frame_type, Hello, ItemEnvelope, ReplyEnvelope, RequestEnvelope,
};
use crate::roles::tools;

/// Decode `data` as a frame stream with a small limit, then every frame's payload as each message
/// its frame type may carry. Never panics; returns how many frames decoded.
pub fn decode_everything(data: &[u8]) -> usize {
    let (frames, _err) = decode_all(data, 64 * 1024);
    for f in &frames {
        match f.frame_type {
            frame_type::HELLO => {
                let _ = decode_payload::<Hello>("HELLO", &f.payload);
            }
            frame_type::READY => {
                let _ = decode_payload::<crate::attest::Attestation>("READY", &f.payload);
            }
            frame_type::REQUEST => {
                let _ = decode_payload::<RequestEnvelope<tools::Request>>("REQUEST", &f.payload);
            }
            frame_type::REPLY => {
                let _ = decode_payload::<ReplyEnvelope<tools::Response>>("REPLY", &f.payload);
            }
            frame_type::ITEM => {
                let _ = decode_payload::<ItemEnvelope<tools::Item>>("ITEM", &f.payload);
            }
            frame_type::EVENT => {
                let _ = decode_payload::<tools::Event>("EVENT", &f.payload);
            }
            _ => {
                let _ = decode_payload::<u64>("PING", &f.payload);
            }
        }
    }
    frames.len()
}
