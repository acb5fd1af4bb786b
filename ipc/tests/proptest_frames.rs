//! Properties of the frame codec: round trip, no panic on any input, split-invariance.

use hanzo_ipc::frame::{decode_all, encode_frame, Frame, FrameDecoder, FrameError};
use proptest::prelude::*;

fn frames_strategy() -> impl Strategy<Value = Vec<(u8, Vec<u8>)>> {
    prop::collection::vec(
        (any::<u8>(), prop::collection::vec(any::<u8>(), 0..300)),
        0..12,
    )
}

/// Decode a stream delivered in the given read sizes.
fn decode_in_pieces(bytes: &[u8], cuts: &[usize], max: u32) -> (Vec<Frame>, Option<FrameError>) {
    let mut dec = FrameDecoder::new(max);
    let mut frames = Vec::new();
    let mut pos = 0;
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.push(bytes.len());
    for cut in cuts {
        dec.feed(&bytes[pos..cut.max(pos)]);
        pos = cut.max(pos);
        loop {
            match dec.next_frame() {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(e) => return (frames, Some(e)),
            }
        }
    }
    (frames, dec.finish().err())
}

proptest! {
    #[test]
    fn encode_then_decode_round_trips(frames in frames_strategy()) {
        let mut bytes = Vec::new();
        for (t, p) in &frames {
            encode_frame(*t, p, 1024, &mut bytes).expect("within limit");
        }
        let (got, err) = decode_all(&bytes, 1024);
        prop_assert_eq!(err, None);
        let got: Vec<(u8, Vec<u8>)> = got.into_iter().map(|f| (f.frame_type, f.payload)).collect();
        prop_assert_eq!(got, frames);
    }

    #[test]
    fn any_bytes_decode_to_frames_or_a_typed_error(bytes in prop::collection::vec(any::<u8>(), 0..2048), max in 1u32..4096) {
        let (frames, err) = decode_all(&bytes, max);
        // Every frame respects the limit, and what was consumed plus the error accounts for all.
        for f in &frames {
            prop_assert!(f.payload.len() < max as usize);
        }
        let consumed: usize = frames.iter().map(|f| 5 + f.payload.len()).sum();
        if err.is_none() {
            prop_assert_eq!(consumed, bytes.len());
        }
    }

    #[test]
    fn any_split_gives_the_same_frames(
        frames in frames_strategy(),
        tail in prop::collection::vec(any::<u8>(), 0..8),
        cuts in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let mut bytes = Vec::new();
        for (t, p) in &frames {
            encode_frame(*t, p, 1024, &mut bytes).expect("within limit");
        }
        bytes.extend_from_slice(&tail);
        let whole = decode_all(&bytes, 1024);
        let pieces = decode_in_pieces(&bytes, &cuts, 1024);
        prop_assert_eq!(whole, pieces);
    }
}
