//! Scripted cassettes: a list of model turns written by hand becomes a cassette in the Anthropic
//! Messages SSE wire format, so the offline demo and the end-to-end tests replay "recordings"
//! through exactly the parser a live run uses (format in `CASSETTE.md`).
//!
//! Each [`ScriptTurn`] is one HTTP exchange (status 200, `text/event-stream`) with the events the
//! API sends: `message_start` with usage, a `ping`, an optional text block split into several
//! `text_delta`s, one `tool_use` block per tool call whose input arrives as two or more
//! `input_json_delta` pieces, `message_delta` with the stop reason and output usage, and
//! `message_stop`. The output is deterministic: the same script always gives the same bytes, so
//! a cassette committed next to its script can be checked for staleness with `==`.

use crate::cassette::{to_line, Chunk, Exchange, RequestSummary, CASSETTE_VERSION};
use hanzo_ipc::roles::model::{StopReason, StreamEvent, Usage};
use serde_json::{json, Value};

/// Where the recorded requests went (replay matches on the `/v1/messages` suffix only).
pub const MESSAGES_URL: &str = "https://api.anthropic.com/v1/messages";
/// The model named in every `message_start`.
pub const SCRIPT_MODEL: &str = "claude-sonnet-4-5";
/// Input tokens a turn reports unless [`ScriptTurn::with_usage`] says otherwise: about what a
/// system prompt, the built-in tool definitions and a short task come to.
pub const DEFAULT_INPUT_TOKENS: u64 = 2_400;

/// Longest text piece sent in one `text_delta` (cut at whitespace, so a piece may be longer when a
/// word is).
const TEXT_PIECE: usize = 24;
/// Longest `partial_json` piece.
const JSON_PIECE: usize = 24;

/// One tool call the scripted model makes. `input` must be a JSON object.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptToolUse {
    /// The call's id, which the tool result names.
    pub id: String,
    /// The tool to call.
    pub name: String,
    /// Its arguments.
    pub input: Value,
}

/// One model turn: optional text, then zero or more tool calls (the stop reason is `tool_use`
/// when there is at least one, else `end_turn`), and the usage the API reports for it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptTurn {
    /// What the model says before its calls, if anything.
    pub text: Option<String>,
    /// The calls, in order.
    pub tool_uses: Vec<ScriptToolUse>,
    /// The usage reported for the request (the conversation so far).
    pub input_tokens: u64,
    /// The usage reported for the answer.
    pub output_tokens: u64,
}

impl ScriptTurn {
    /// A turn that only says `t` and ends (`end_turn`).
    pub fn text(t: &str) -> Self {
        ScriptTurn {
            text: Some(t.to_string()),
            tool_uses: Vec::new(),
            input_tokens: DEFAULT_INPUT_TOKENS,
            output_tokens: 0,
        }
        .estimated()
    }

    /// A turn that makes one tool call and nothing else.
    pub fn tool(id: &str, name: &str, input: Value) -> Self {
        ScriptTurn {
            text: None,
            tool_uses: Vec::new(),
            input_tokens: DEFAULT_INPUT_TOKENS,
            output_tokens: 0,
        }
        .and_tool(id, name, input)
    }

    /// Set the text said before the tool calls.
    pub fn with_text(mut self, t: &str) -> Self {
        self.text = Some(t.to_string());
        self.estimated()
    }

    /// Add another tool call after the existing ones.
    pub fn and_tool(mut self, id: &str, name: &str, input: Value) -> Self {
        self.tool_uses.push(ScriptToolUse {
            id: id.to_string(),
            name: name.to_string(),
            input,
        });
        self.estimated()
    }

    /// Set the reported usage. The other helpers re-estimate `output_tokens` from the content, so
    /// call this one last.
    pub fn with_usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.input_tokens = input_tokens;
        self.output_tokens = output_tokens;
        self
    }

    /// Output tokens from the content at roughly four bytes a token, plus the few tokens each
    /// tool call's framing costs.
    fn estimated(mut self) -> Self {
        let text = self.text.as_deref().map_or(0, str::len);
        let tools: usize = self
            .tool_uses
            .iter()
            .map(|t| t.name.len() + input_json(&t.input).len() + 40)
            .sum();
        self.output_tokens = ((text + tools) / 4).max(1) as u64;
        self
    }

    /// `tool_use` when the turn makes a call, else `end_turn`.
    pub fn stop_reason(&self) -> StopReason {
        if self.tool_uses.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        }
    }

    /// The stream events the parser produces when this turn is replayed: one `ContentDelta` per
    /// `text_delta`, one `ToolUse` per call (input as the compact JSON the deltas add up to),
    /// then `MessageStop`.
    pub fn expected_events(&self) -> Vec<StreamEvent> {
        let mut out: Vec<StreamEvent> = self
            .text
            .as_deref()
            .map(text_pieces)
            .unwrap_or_default()
            .into_iter()
            .map(|t| StreamEvent::ContentDelta {
                text: t.to_string(),
            })
            .collect();
        out.extend(self.tool_uses.iter().map(|t| StreamEvent::ToolUse {
            id: t.id.clone(),
            name: t.name.clone(),
            input_json: input_json(&t.input),
        }));
        out.push(StreamEvent::MessageStop {
            stop_reason: self.stop_reason(),
            usage: Usage {
                input_tokens: self.input_tokens,
                output_tokens: self.output_tokens,
            },
        });
        out
    }
}

/// The tool input as the model streams it: compact JSON, keys in the order written.
fn input_json(input: &Value) -> String {
    input.to_string()
}

/// `text` cut before whitespace once a piece reaches [`TEXT_PIECE`] bytes; the pieces join back
/// to `text`. Empty text gives no piece (the API sends no delta for it).
fn text_pieces(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() && i - start >= TEXT_PIECE {
            pieces.push(&text[start..i]);
            start = i;
        }
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

/// `json` in at least two pieces (it is never shorter than `{}`), each at most [`JSON_PIECE`]
/// bytes unless a character is longer, cut on character boundaries.
fn json_pieces(json: &str) -> Vec<&str> {
    let size = (json.len() / 2).clamp(1, JSON_PIECE);
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < json.len() {
        let mut end = (start + size).min(json.len());
        while !json.is_char_boundary(end) {
            end += 1;
        }
        pieces.push(&json[start..end]);
        start = end;
    }
    pieces
}

/// An id in the API's style (`msg_01…`, `req_01…`: base62 after a fixed prefix), derived from the
/// turn number so the cassette is reproducible.
fn api_id(prefix: &str, index: usize) -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    // splitmix64 seeded by the prefix (FNV-1a) and the turn: cheap and well mixed, so a turn's
    // `msg_` and `req_` ids differ; nothing depends on these ids being unpredictable.
    let mut state = prefix.bytes().fold(0xCBF2_9CE4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
    }) ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut id = format!("{prefix}_01");
    for _ in 0..22 {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        id.push(char::from(ALPHABET[(z % 62) as usize]));
    }
    id
}

fn sse(event: &str, data: &Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// The SSE events of turn number `index` (0-based), one string per event.
pub fn anthropic_events(index: usize, turn: &ScriptTurn) -> Vec<String> {
    let mut events = vec![sse(
        "message_start",
        &json!({
            "type": "message_start",
            "message": {
                "id": api_id("msg", index),
                "type": "message",
                "role": "assistant",
                "model": SCRIPT_MODEL,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {
                    "input_tokens": turn.input_tokens,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    "output_tokens": 1
                }
            }
        }),
    )];
    // The API sends its first ping right after the first block starts (or after message_start
    // when there is no block at all).
    let ping = "event: ping\ndata: {\"type\": \"ping\"}\n\n".to_string();
    let mut pinged = false;
    let mut block = 0u64;
    if let Some(text) = turn.text.as_deref().filter(|t| !t.is_empty()) {
        events.push(sse(
            "content_block_start",
            &json!({"type": "content_block_start", "index": block,
                    "content_block": {"type": "text", "text": ""}}),
        ));
        events.push(ping.clone());
        pinged = true;
        for piece in text_pieces(text) {
            events.push(sse(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": block,
                        "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        events.push(sse(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": block}),
        ));
        block += 1;
    }
    for tool in &turn.tool_uses {
        events.push(sse(
            "content_block_start",
            &json!({"type": "content_block_start", "index": block,
                    "content_block": {"type": "tool_use", "id": tool.id, "name": tool.name,
                                      "input": {}}}),
        ));
        if !pinged {
            events.push(ping.clone());
            pinged = true;
        }
        // The API opens every tool input with an empty fragment.
        let json = input_json(&tool.input);
        for piece in std::iter::once("").chain(json_pieces(&json)) {
            events.push(sse(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": block,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        events.push(sse(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": block}),
        ));
        block += 1;
    }
    if !pinged {
        events.insert(1, ping);
    }
    let stop = match turn.stop_reason() {
        StopReason::ToolUse => "tool_use",
        _ => "end_turn",
    };
    events.push(sse(
        "message_delta",
        &json!({"type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": null},
                "usage": {"output_tokens": turn.output_tokens}}),
    ));
    events.push(sse("message_stop", &json!({"type": "message_stop"})));
    events
}

/// Turn number `index` (0-based) as one exchange. `body_bytes` is 0: a script has no request
/// body to measure, and replay does not look at it.
pub fn anthropic_exchange(index: usize, turn: &ScriptTurn) -> Exchange {
    Exchange {
        version: CASSETTE_VERSION,
        request: RequestSummary {
            method: "POST".into(),
            url: MESSAGES_URL.into(),
            credential: "anthropic".into(),
            body_bytes: 0,
        },
        status: 200,
        headers: vec![
            (
                "content-type".into(),
                "text/event-stream; charset=utf-8".into(),
            ),
            ("cache-control".into(), "no-cache".into()),
            ("request-id".into(), api_id("req", index)),
        ],
        chunks: anthropic_events(index, turn)
            .into_iter()
            .map(Chunk::Text)
            .collect(),
        error: None,
    }
}

/// The cassette (JSON Lines, one exchange per turn, each line ending in `\n`) for `turns`.
pub fn anthropic_cassette(turns: &[ScriptTurn]) -> String {
    let mut out = String::new();
    for (i, turn) in turns.iter().enumerate() {
        out.push_str(&to_line(&anthropic_exchange(i, turn)));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cassette::{parse_cassette, ReplayTransport};
    use crate::run_turn;
    use hanzo_ipc::roles::model::{
        Completion, CompletionRequest, Message, ProviderConfig, RetryPolicy, WireFormat,
    };
    use tokio::sync::mpsc;

    fn request() -> CompletionRequest {
        CompletionRequest {
            provider: ProviderConfig::Replay {
                wire: WireFormat::AnthropicMessages,
            },
            model: SCRIPT_MODEL.into(),
            system: None,
            messages: vec![Message::user_text("Fix the failing test.")],
            tools: Vec::new(),
            max_tokens: 4096,
            // One attempt: a scripted exchange that failed to parse must fail the test, not be
            // retried into the next exchange.
            retry: RetryPolicy {
                max_attempts: 1,
                base_ms: 1,
                max_ms: 1,
                budget_ms: 0,
            },
            record: false,
        }
    }

    /// Replays every turn of `cassette` through the real turn driver and parser; returns each
    /// turn's completion and events, and how many exchanges were left over.
    async fn replay(cassette: &str, turns: usize) -> (Vec<(Completion, Vec<StreamEvent>)>, usize) {
        let replay = ReplayTransport::new(parse_cassette(cassette).expect("cassette parses"));
        let mut out = Vec::new();
        for _ in 0..turns {
            let (tx, mut rx) = mpsc::channel(4096);
            let completion = run_turn(&replay, &request(), &tx, Some(1))
                .await
                .expect("turn replays");
            drop(tx);
            let mut events = Vec::new();
            while let Some(e) = rx.recv().await {
                events.push(e);
            }
            out.push((completion, events));
        }
        (out, replay.remaining())
    }

    fn delta(t: &str) -> StreamEvent {
        StreamEvent::ContentDelta { text: t.into() }
    }

    #[tokio::test]
    async fn text_turn_replays_as_deltas_then_end_turn() {
        let turn = ScriptTurn::text("All seven tests pass now: page_count rounds up.")
            .with_usage(3_100, 42);
        let cassette = anthropic_cassette(std::slice::from_ref(&turn));
        let (turns, left) = replay(&cassette, 1).await;
        assert_eq!(left, 0);
        let (completion, events) = &turns[0];
        assert_eq!(completion.stop_reason, StopReason::EndTurn);
        assert_eq!(completion.attempts, 1);
        assert_eq!(
            events,
            &vec![
                delta("All seven tests pass now:"),
                delta(" page_count rounds up."),
                StreamEvent::MessageStop {
                    stop_reason: StopReason::EndTurn,
                    usage: Usage {
                        input_tokens: 3_100,
                        output_tokens: 42
                    },
                },
            ]
        );
        assert_eq!(events, &turn.expected_events());
    }

    #[tokio::test]
    async fn text_and_tool_turns_replay_to_exactly_the_scripted_events() {
        let script = vec![
            ScriptTurn::tool("toolu_01A", "list_dir", json!({})),
            ScriptTurn::tool("toolu_02B", "read_file", json!({"path": "README.md"}))
                .with_text("Reading the README and the source — “quoted”, ünïcode.")
                .and_tool(
                    "toolu_02C",
                    "edit_file",
                    json!({"path": "pager/pages.py",
                           "old_string": "    return len(items) // per_page + 1\n",
                           "new_string": "    return (len(items) + per_page - 1) // per_page\n"}),
                )
                .with_usage(5_000, 120),
            ScriptTurn::text("Done."),
        ];
        let cassette = anthropic_cassette(&script);
        assert_eq!(cassette.lines().count(), 3);
        assert!(cassette.ends_with('\n'));
        let (turns, left) = replay(&cassette, script.len()).await;
        assert_eq!(left, 0, "every exchange is consumed, one per turn");

        // Hand-written expectations for the first turn, so the test does not only compare the
        // builder with itself.
        assert_eq!(
            turns[0].1,
            vec![
                StreamEvent::ToolUse {
                    id: "toolu_01A".into(),
                    name: "list_dir".into(),
                    input_json: "{}".into(),
                },
                StreamEvent::MessageStop {
                    stop_reason: StopReason::ToolUse,
                    usage: Usage {
                        input_tokens: DEFAULT_INPUT_TOKENS,
                        output_tokens: script[0].output_tokens,
                    },
                },
            ]
        );
        let (completion, events) = &turns[1];
        assert_eq!(completion.stop_reason, StopReason::ToolUse);
        assert_eq!(
            completion.usage,
            Usage {
                input_tokens: 5_000,
                output_tokens: 120
            }
        );
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ContentDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, script[1].text.as_deref().expect("has text"));
        let tools: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolUse {
                    id,
                    name,
                    input_json,
                } => Some((id.as_str(), name.as_str(), input_json.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            tools[0],
            ("toolu_02B", "read_file", r#"{"path":"README.md"}"#.into())
        );
        assert_eq!(tools[1].1, "edit_file");
        let edit: Value = serde_json::from_str(&tools[1].2).expect("input is JSON");
        assert_eq!(edit, script[1].tool_uses[1].input);
        assert_eq!(turns[2].0.stop_reason, StopReason::EndTurn);
        for (turn, (_, events)) in script.iter().zip(&turns) {
            assert_eq!(events, &turn.expected_events());
        }
    }

    #[test]
    fn exchanges_have_the_real_shape() {
        let turn = ScriptTurn::tool(
            "toolu_1",
            "bash",
            json!({"command": "python3 -m unittest -v"}),
        )
        .with_text("Let me run the tests to see what fails.");
        let ex = &parse_cassette(&anthropic_cassette(&[turn])).expect("parses")[0];
        assert_eq!(ex.version, CASSETTE_VERSION);
        assert_eq!(ex.status, 200);
        assert_eq!(ex.request.method, "POST");
        assert_eq!(ex.request.url, MESSAGES_URL);
        assert_eq!(ex.request.credential, "anthropic");
        assert!(ex.error.is_none());
        assert!(ex
            .headers
            .iter()
            .any(|(k, v)| k == "content-type" && v.starts_with("text/event-stream")));
        let kinds: Vec<String> = ex
            .chunks
            .iter()
            .map(|c| match c {
                Chunk::Text(t) => t.lines().next().unwrap_or_default().to_string(),
                Chunk::Bytes { .. } => panic!("scripted chunks are text"),
            })
            .collect();
        let count = |k: &str| {
            kinds
                .iter()
                .filter(|x| *x == &format!("event: {k}"))
                .count()
        };
        assert_eq!(
            kinds.first().map(String::as_str),
            Some("event: message_start")
        );
        assert_eq!(
            kinds.last().map(String::as_str),
            Some("event: message_stop")
        );
        assert_eq!(count("ping"), 1);
        assert_eq!(count("content_block_start"), 2);
        assert_eq!(count("content_block_stop"), 2);
        assert_eq!(count("message_delta"), 1);
        let body: String = ex
            .chunks
            .iter()
            .map(|c| c.clone().into_bytes())
            .map(|b| String::from_utf8(b).expect("utf-8"))
            .collect();
        assert!(body.contains(r#""stop_reason":"tool_use""#));
        let text_deltas = body.matches(r#""type":"text_delta""#).count();
        let json_deltas = body.matches(r#""type":"input_json_delta""#).count();
        assert!(text_deltas >= 2, "text is split: {text_deltas}");
        // The opening empty fragment plus at least two pieces.
        assert!(json_deltas >= 3, "input is split: {json_deltas}");
    }

    #[test]
    fn the_same_script_gives_the_same_bytes_and_distinct_ids() {
        let script = [ScriptTurn::text("one"), ScriptTurn::text("two")];
        assert_eq!(anthropic_cassette(&script), anthropic_cassette(&script));
        assert_ne!(api_id("msg", 0), api_id("msg", 1));
        assert_ne!(api_id("msg", 0)[4..], api_id("req", 0)[4..]);
        assert_eq!(api_id("msg", 0).len(), "msg_01".len() + 22);
    }

    #[test]
    fn pieces_join_back_and_respect_char_boundaries() {
        for s in [
            "",
            "a",
            "{}",
            "ünïcöde “quotes” everywhere, and a longer tail of words",
        ] {
            assert_eq!(text_pieces(s).concat(), s);
            assert_eq!(json_pieces(s).concat(), s);
        }
        assert_eq!(json_pieces("{}"), vec!["{", "}"]);
        assert!(text_pieces("").is_empty());
        assert_eq!(text_pieces("short"), vec!["short"]);
    }

    #[test]
    fn usage_estimate_and_override() {
        let t = ScriptTurn::text(&"word ".repeat(40));
        assert_eq!(t.output_tokens, 50);
        assert_eq!(t.input_tokens, DEFAULT_INPUT_TOKENS);
        let t = t.with_usage(9, 8);
        assert_eq!((t.input_tokens, t.output_tokens), (9, 8));
        assert_eq!(t.stop_reason(), StopReason::EndTurn);
        assert_eq!(
            ScriptTurn::tool("t", "list_dir", json!({})).stop_reason(),
            StopReason::ToolUse
        );
    }
}
