use super::*;
use proptest::prelude::*;

fn ev(event_type: &str, data: &str, id: &str) -> SseEvent {
    SseEvent {
        event_type: event_type.into(),
        data: data.into(),
        last_event_id: id.into(),
    }
}

/// Feed `chunks` in order, then end the stream.
fn run(chunks: &[&[u8]]) -> (Vec<SseEvent>, Option<u64>) {
    let mut sse = SseFrameBuffer::new();
    let mut events = Vec::new();
    for chunk in chunks {
        events.extend(sse.feed(chunk).expect("within the default limit"));
    }
    sse.finish();
    (events, sse.retry())
}

fn run_str(chunks: &[&str]) -> Vec<SseEvent> {
    let bytes: Vec<&[u8]> = chunks.iter().map(|c| c.as_bytes()).collect();
    run(&bytes).0
}

/// The spec's algorithm transliterated as plainly as possible, over the whole stream at once:
/// decode, strip one BOM, split into terminated lines, interpret. The streaming parser must agree.
fn oracle(stream: &[u8]) -> (Vec<SseEvent>, Option<u64>) {
    let decoded = String::from_utf8_lossy(stream);
    let text = decoded.strip_prefix('\u{FEFF}').unwrap_or(&decoded);
    let mut lines = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                lines.push(std::mem::take(&mut current));
            }
            '\n' => lines.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    // `current` is an unterminated line: discarded at end of stream.
    let (mut data, mut event_type, mut id_buf) = (String::new(), String::new(), String::new());
    let mut retry = None;
    let mut events = Vec::new();
    for line in lines {
        if line.is_empty() {
            // The last event ID string is set from the buffer at every dispatch, data or not.
            let last_id = id_buf.clone();
            if data.is_empty() {
                event_type.clear();
                continue;
            }
            if data.ends_with('\n') {
                data.pop();
            }
            let ty = if event_type.is_empty() {
                "message".to_string()
            } else {
                event_type.clone()
            };
            events.push(ev(&ty, &data, &last_id));
            data.clear();
            event_type.clear();
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (name, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line.as_str(), ""),
        };
        match name {
            "event" => event_type = value.to_string(),
            "data" => {
                data.push_str(value);
                data.push('\n');
            }
            "id" if !value.contains('\0') => id_buf = value.to_string(),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(v) = value.parse::<u64>() {
                    retry = Some(v);
                }
            }
            _ => {}
        }
    }
    (events, retry)
}

#[test]
fn simple_event_with_default_type() {
    assert_eq!(
        run_str(&["data: hello\n\n"]),
        vec![ev("message", "hello", "")]
    );
}

#[test]
fn all_three_line_endings_and_crlf_split_across_chunks() {
    let events = run_str(&["data: a\r", "\n", "\r", "\ndata: b\rdata: c\n\r"]);
    assert_eq!(
        events,
        vec![ev("message", "a", ""), ev("message", "b\nc", "")]
    );
}

#[test]
fn cr_at_chunk_end_followed_by_non_lf() {
    // The CR alone ends the line; the next chunk's `d` starts a new one.
    let events = run_str(&["data: a\r", "data: b\r\r"]);
    assert_eq!(events, vec![ev("message", "a\nb", "")]);
}

#[test]
fn cr_then_empty_chunks_then_lf_is_one_line_ending() {
    let events = run_str(&["data: a\r", "", "", "\n\n"]);
    assert_eq!(events, vec![ev("message", "a", "")]);
}

#[test]
fn multibyte_character_split_across_chunks() {
    let bytes = "data: h€llo\n\n".as_bytes();
    let at = bytes
        .iter()
        .position(|&b| b == 0xE2)
        .expect("euro sign present");
    let (events, _) = run(&[&bytes[..at + 1], &bytes[at + 1..at + 2], &bytes[at + 2..]]);
    assert_eq!(events, vec![ev("message", "h€llo", "")]);
}

#[test]
fn invalid_utf8_becomes_replacement_characters() {
    // Truncated 3-byte sequence, a lone continuation byte, an encoded surrogate (3 errors).
    let (events, _) = run(&[b"data: a\xE2\x82b\x80c\xED\xA0\x80\n\n"]);
    assert_eq!(
        events,
        vec![ev(
            "message",
            "a\u{FFFD}b\u{FFFD}c\u{FFFD}\u{FFFD}\u{FFFD}",
            ""
        )]
    );
}

#[test]
fn bom_is_stripped_once_even_when_split() {
    let (events, _) = run(&[b"\xEF", b"\xBB", b"\xBFdata: x\n\n"]);
    assert_eq!(events, vec![ev("message", "x", "")]);
    // A second BOM is text: the line's field name becomes "\u{FEFF}data", an unknown field.
    let (events, _) = run(&[b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\ndata: y\n\n"]);
    assert_eq!(events, vec![ev("message", "y", "")]);
}

#[test]
fn partial_bom_is_text_not_swallowed() {
    // EF BB followed by `d` is an invalid sequence (one U+FFFD), then the text goes on.
    let (events, _) = run(&[b"\xEF\xBB", b"d\ndata: x\n\n"]);
    assert_eq!(events, vec![ev("message", "x", "")]);
    let (events, _) = run(&[b"\xEF", b"\n", b"data: y\n\n"]);
    assert_eq!(events, vec![ev("message", "y", "")]);
}

#[test]
fn bom_only_at_start_of_stream() {
    let mut sse = SseFrameBuffer::new();
    assert!(sse.feed(b"data: a\n\n").expect("small").len() == 1);
    // Mid-stream BOM bytes are part of a field name.
    assert!(sse
        .feed(b"\xEF\xBB\xBFdata: b\n\n")
        .expect("small")
        .is_empty());
}

#[test]
fn fields_and_spaces() {
    let events = run_str(&["event:  two spaces\ndata:no space\ndata:  two\ndata\ndata:\n\n"]);
    assert_eq!(events, vec![ev(" two spaces", "no space\n two\n\n", "")]);
}

#[test]
fn event_without_data_is_not_dispatched_and_its_type_is_reset() {
    let events = run_str(&["event: lonely\n\ndata: x\n\n"]);
    assert_eq!(events, vec![ev("message", "x", "")]);
}

#[test]
fn empty_data_line_dispatches_an_empty_event() {
    assert_eq!(run_str(&["data\n\n"]), vec![ev("message", "", "")]);
    assert_eq!(run_str(&["data:\n\n"]), vec![ev("message", "", "")]);
}

#[test]
fn id_persists_is_reset_by_empty_id_and_ignores_nul() {
    let events = run_str(&[
        "id: 1\ndata: a\n\n",
        "data: b\n\n",
        "id: bad\0id\ndata: c\n\n",
        "id\ndata: d\n\n",
    ]);
    assert_eq!(
        events,
        vec![
            ev("message", "a", "1"),
            ev("message", "b", "1"),
            ev("message", "c", "1"),
            ev("message", "d", ""),
        ]
    );
}

#[test]
fn id_in_an_event_without_data_still_updates_last_event_id() {
    let mut sse = SseFrameBuffer::new();
    let events = sse.feed_str("id: 7\n\ndata: x\n\n").expect("small");
    assert_eq!(events, vec![ev("message", "x", "7")]);
    assert_eq!(sse.last_event_id(), "7");
}

#[test]
fn last_event_id_string_changes_only_on_dispatch() {
    let mut sse = SseFrameBuffer::new();
    sse.feed_str("id: 1\n\nid: 2\ndata: x\n").expect("small");
    assert_eq!(sse.last_event_id(), "1");
    assert!(sse.finish());
    assert_eq!(sse.last_event_id(), "1");
}

#[test]
fn retry_accepts_only_digits() {
    let (_, retry) = run(&[b"retry: 1500\n"]);
    assert_eq!(retry, Some(1500));
    let (_, retry) = run(&[b"retry: 3000\nretry: 1000x\nretry:\nretry: -1\nretry:  5\n"]);
    assert_eq!(retry, Some(3000));
    let (_, retry) = run(&[b"retry: 18446744073709551615\n"]);
    assert_eq!(retry, Some(u64::MAX));
    let (_, retry) = run(&[b"retry: 7\nretry: 18446744073709551616\n"]);
    assert_eq!(retry, Some(7));
    let (_, retry) = run(&[b"retry: 0012\n"]);
    assert_eq!(retry, Some(12));
}

#[test]
fn comments_and_unknown_fields_are_ignored() {
    let events = run_str(&[": ping\nfoo: bar\nDATA: no\ndata: yes\n:\n\n"]);
    assert_eq!(events, vec![ev("message", "yes", "")]);
}

#[test]
fn unterminated_final_event_is_discarded() {
    let mut sse = SseFrameBuffer::new();
    assert!(sse.feed_str("data: a\n\ndata: b\n").expect("small").len() == 1);
    assert!(sse.finish());
    let mut sse = SseFrameBuffer::new();
    assert!(sse.feed_str("data: a\n\ndata: b").expect("small").len() == 1);
    assert!(sse.finish());
    let mut sse = SseFrameBuffer::new();
    sse.feed_str("data: a\n\n").expect("small");
    assert!(!sse.finish());
}

#[test]
fn finish_starts_a_new_stream() {
    let mut sse = SseFrameBuffer::new();
    sse.feed_str("retry: 10\nid: 4\ndata: partial\n")
        .expect("small");
    sse.finish();
    let events = sse.feed(b"\xEF\xBB\xBFdata: fresh\n\n").expect("small");
    // The new stream's BOM is stripped, the old data is gone, the new stream's id buffer is empty.
    assert_eq!(events, vec![ev("message", "fresh", "")]);
    assert_eq!(sse.retry(), Some(10));
}

#[test]
fn oversized_event_fails_the_stream_until_finish() {
    let mut sse = SseFrameBuffer::new().with_max_event_size(16);
    assert_eq!(
        sse.feed_str("data: 0123456789\n\n")
            .expect("line of exactly 16 bytes fits"),
        vec![ev("message", "0123456789", "")]
    );
    let err = sse.feed_str("data: 0123456789A\n\n");
    assert_eq!(err, Err(SseError::EventTooLarge { limit: 16 }));
    assert_eq!(
        sse.feed_str("data: ok\n\n"),
        Err(SseError::EventTooLarge { limit: 16 })
    );
    sse.finish();
    assert_eq!(
        sse.feed_str("data: ok\n\n").expect("new stream"),
        vec![ev("message", "ok", "")]
    );
}

#[test]
fn multi_line_event_counts_its_whole_data_buffer() {
    let mut sse = SseFrameBuffer::new().with_max_event_size(20);
    // Data buffer grows by 6 bytes per line ("12345\n"); the 4th line (11 bytes) no longer fits.
    let got = sse.feed_str("data: 12345\ndata: 12345\ndata: 12345\ndata: 12345\n");
    assert_eq!(got, Err(SseError::EventTooLarge { limit: 20 }));
}

#[test]
fn unterminated_line_is_bounded_before_its_end_arrives() {
    let mut sse = SseFrameBuffer::new().with_max_event_size(4096);
    let chunk = [b'x'; 1000];
    let mut results = Vec::new();
    for _ in 0..5 {
        results.push(sse.feed(&chunk).is_ok());
    }
    assert_eq!(results, vec![true, true, true, true, false]);
    assert!(sse.pending.capacity() == 0 && sse.data.capacity() == 0);
    assert_eq!(
        sse.to_owned().feed(b"\n"),
        Err(SseError::EventTooLarge { limit: 4096 })
    );
}

#[test]
fn error_message_names_the_limit() {
    let msg = SseError::EventTooLarge { limit: 99 }.to_string();
    assert!(msg.contains("99-byte limit"), "{msg}");
}

#[test]
fn large_data_line_across_many_chunks() {
    let payload = "z".repeat(200_000);
    let stream = format!("event: big\ndata: {payload}\r\n\r\n");
    let mut sse = SseFrameBuffer::new();
    let mut events = Vec::new();
    for piece in stream.as_bytes().chunks(4093) {
        events.extend(sse.feed(piece).expect("under default limit"));
    }
    assert_eq!(events, vec![ev("big", &payload, "")]);
}

#[test]
fn line_end_scan_finds_first_terminator_at_every_position() {
    for len in 0..200 {
        for pos in 0..len {
            let mut hay = vec![b'a'; len];
            hay[pos] = if pos % 2 == 0 { b'\n' } else { b'\r' };
            if pos + 1 < len {
                hay[pos + 1] = b'\n';
            }
            assert_eq!(find_line_end(&hay), Some(pos), "len {len} pos {pos}");
        }
        assert_eq!(find_line_end(&vec![b'a'; len]), None);
    }
}

#[test]
fn anthropic_shaped_stream() {
    let stream = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n\
                  event: ping\ndata: {\"type\": \"ping\"}\n\n\
                  event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hi\"}}\n\n\
                  event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let bytes = stream.as_bytes();
    // Split everywhere at once: one byte per chunk.
    let chunks: Vec<&[u8]> = bytes.chunks(1).collect();
    let (events, _) = run(&chunks);
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        vec![
            "message_start",
            "ping",
            "content_block_delta",
            "message_stop"
        ]
    );
    assert_eq!(events[3].data, "{\"type\":\"message_stop\"}");
}

/// Streams built from the pieces that matter to the algorithm, so random inputs hit edge cases.
fn stream_strategy() -> impl Strategy<Value = Vec<u8>> {
    let pieces: Vec<&'static [u8]> = vec![
        b"data",
        b"data:",
        b"data: ",
        b"event",
        b"event: ",
        b"id",
        b"id: ",
        b"retry:",
        b"retry: ",
        b":",
        b" ",
        b"x",
        b"yz",
        b"\r",
        b"\n",
        b"\r\n",
        b"\n\n",
        b"\0",
        b"12",
        b"0",
        b"99999999999999999999",
        b"\xEF\xBB\xBF",
        b"\xEF\xBB",
        b"\xE2\x82",
        b"\xE2\x82\xAC",
        b"\xFF",
        b"\x80",
        b"\xF0\x9F\x98",
        b"\xF0\x9F\x98\x80",
        b"message",
    ];
    proptest::collection::vec(proptest::sample::select(pieces), 0..60).prop_map(|ps| ps.concat())
}

fn split_feed(stream: &[u8], cuts: &[usize]) -> (Vec<SseEvent>, Option<u64>, String) {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    cuts.sort_unstable();
    let mut sse = SseFrameBuffer::new();
    let mut events = Vec::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain([stream.len()]) {
        events.extend(sse.feed(&stream[start..cut]).expect("small"));
        start = cut;
    }
    sse.finish();
    (events, sse.retry(), sse.last_event_id().to_string())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn any_split_gives_the_same_events(stream in stream_strategy(), cuts in proptest::collection::vec(any::<usize>(), 0..12)) {
        let whole = split_feed(&stream, &[]);
        let split = split_feed(&stream, &cuts);
        prop_assert_eq!(whole, split);
    }

    #[test]
    fn agrees_with_the_plain_transliteration_of_the_spec(stream in stream_strategy(), cuts in proptest::collection::vec(any::<usize>(), 0..6)) {
        let (events, retry, _) = split_feed(&stream, &cuts);
        prop_assert_eq!((events, retry), oracle(&stream));
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_match_the_oracle(stream in proptest::collection::vec(any::<u8>(), 0..512), cuts in proptest::collection::vec(any::<usize>(), 0..8)) {
        let (events, retry, _) = split_feed(&stream, &cuts);
        prop_assert_eq!((events, retry), oracle(&stream));
    }

    #[test]
    fn tiny_limits_never_panic(stream in stream_strategy(), limit in 0usize..40) {
        let mut sse = SseFrameBuffer::new().with_max_event_size(limit);
        for piece in stream.chunks(7) {
            if sse.feed(piece).is_err() {
                prop_assert!(sse.feed(b"\n").is_err());
                break;
            }
        }
        sse.finish();
    }
}
