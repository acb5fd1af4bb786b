//! The turn driver over the replay transport: the same parsing and retry path a live run takes,
//! fed with provider streams in their real wire formats.

mod fixtures;

use fixtures::*;
use hanzo_ipc::roles::http::HttpFailureKind;
use hanzo_ipc::roles::model::{
    CompletionRequest, ContentBlock, Message, MessageRole, ProviderConfig, ProviderId, RetryPolicy,
    StopReason, StreamErrorKind, StreamEvent, ToolDef, Usage, WireFormat,
};
use hanzo_model::cassette::{
    parse_cassette, to_line, Chunk, Exchange, RecordedFailure, Recording, ReplayTransport,
    RequestSummary,
};
use hanzo_model::{run_turn, turn::http_request, ModelError};
use std::time::Duration;
use tokio::sync::mpsc;

fn exchange(path: &str, status: u16, headers: &[(&str, &str)], chunks: Vec<Vec<u8>>) -> Exchange {
    Exchange {
        version: 1,
        request: RequestSummary {
            method: "POST".into(),
            url: format!("https://example.invalid{path}"),
            credential: "anthropic".into(),
            body_bytes: 0,
        },
        status,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        chunks: chunks.into_iter().map(Chunk::from_bytes).collect(),
        error: None,
    }
}

fn anth(status: u16, headers: &[(&str, &str)], body: &str) -> Exchange {
    exchange("/v1/messages", status, headers, chunks_of(body, 7))
}

fn oai(status: u16, headers: &[(&str, &str)], body: &str) -> Exchange {
    exchange("/v1/chat/completions", status, headers, chunks_of(body, 5))
}

fn request(wire: WireFormat) -> CompletionRequest {
    CompletionRequest {
        provider: ProviderConfig::Replay { wire },
        model: "test-model".into(),
        system: Some("Be brief.".into()),
        messages: vec![Message::user_text("What is the weather in Paris?")],
        tools: vec![ToolDef {
            name: "get_weather".into(),
            description: "Current weather".into(),
            input_schema_json: r#"{"type":"object","properties":{"location":{"type":"string"}}}"#
                .into(),
        }],
        max_tokens: 1024,
        retry: RetryPolicy {
            max_attempts: 4,
            base_ms: 10,
            max_ms: 100,
            budget_ms: 60_000,
        },
        record: false,
    }
}

async fn run(
    wire: WireFormat,
    exchanges: Vec<Exchange>,
) -> (
    Result<hanzo_ipc::roles::model::Completion, ModelError>,
    Vec<StreamEvent>,
    usize,
) {
    run_req(request(wire), exchanges).await
}

async fn run_req(
    req: CompletionRequest,
    exchanges: Vec<Exchange>,
) -> (
    Result<hanzo_ipc::roles::model::Completion, ModelError>,
    Vec<StreamEvent>,
    usize,
) {
    let replay = ReplayTransport::new(exchanges);
    let (tx, mut rx) = mpsc::channel(1024);
    let result = run_turn(&replay, &req, &tx, Some(7)).await;
    drop(tx);
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push(e);
    }
    (result, events, replay.remaining())
}

fn text(t: &str) -> StreamEvent {
    StreamEvent::ContentDelta { text: t.into() }
}

#[tokio::test]
async fn anthropic_text_stream_gives_deltas_then_stop_with_usage() {
    let (result, events, _) = run(
        WireFormat::AnthropicMessages,
        vec![anth(200, &[], ANTHROPIC_TEXT)],
    )
    .await;
    let c = result.expect("completes");
    assert_eq!(c.attempts, 1);
    let stop = StreamEvent::MessageStop {
        stop_reason: StopReason::EndTurn,
        usage: Usage {
            input_tokens: 25,
            output_tokens: 15,
        },
    };
    assert_eq!(events, vec![text("Hello"), text(", wörld"), stop]);
}

#[tokio::test]
async fn anthropic_tool_use_is_assembled_from_input_json_deltas() {
    // One byte per chunk: every event, line and UTF-8 sequence is split.
    let ex = exchange("/v1/messages", 200, &[], chunks_of(ANTHROPIC_TOOLS, 1));
    let (result, events, _) = run(WireFormat::AnthropicMessages, vec![ex]).await;
    assert_eq!(result.expect("completes").stop_reason, StopReason::ToolUse);
    assert_eq!(
        events,
        vec![
            text("Let me check."),
            StreamEvent::ToolUse {
                id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                name: "get_weather".into(),
                input_json: r#"{"location": "San Francisco, CA"}"#.into(),
            },
            StreamEvent::ToolUse {
                id: "toolu_02".into(),
                name: "get_time".into(),
                input_json: "{}".into(),
            },
            StreamEvent::MessageStop {
                stop_reason: StopReason::ToolUse,
                usage: Usage {
                    input_tokens: 472,
                    output_tokens: 89
                },
            },
        ]
    );
}

#[tokio::test]
async fn overloaded_before_any_output_is_retried() {
    let (result, events, left) = run(
        WireFormat::AnthropicMessages,
        vec![
            anth(200, &[], ANTHROPIC_OVERLOADED_AT_START),
            anth(200, &[], ANTHROPIC_TEXT),
        ],
    )
    .await;
    assert_eq!(result.expect("second attempt completes").attempts, 2);
    assert_eq!(left, 0);
    assert!(!events
        .iter()
        .any(|e| matches!(e, StreamEvent::Error { .. })));
    assert_eq!(events.first(), Some(&text("Hello")));
}

#[tokio::test]
async fn error_after_output_began_is_surfaced_not_replayed() {
    let (result, events, left) = run(
        WireFormat::AnthropicMessages,
        vec![
            anth(200, &[], ANTHROPIC_OVERLOADED_AFTER_TEXT),
            anth(200, &[], ANTHROPIC_TEXT),
        ],
    )
    .await;
    assert_eq!(
        result.expect_err("surfaced"),
        ModelError::ProviderError {
            kind: "overloaded_error".into(),
            message: "Overloaded".into()
        }
    );
    assert_eq!(left, 1, "the good exchange must not have been requested");
    assert_eq!(events[0], text("Partial"));
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Error {
            kind: StreamErrorKind::ProviderError,
            ..
        })
    ));
    assert_eq!(events.len(), 2);
}

#[tokio::test]
async fn truncated_stream_after_output_is_interrupted() {
    let (result, events, left) = run(
        WireFormat::AnthropicMessages,
        vec![
            anth(200, &[], ANTHROPIC_TRUNCATED),
            anth(200, &[], ANTHROPIC_TEXT),
        ],
    )
    .await;
    match result.expect_err("interrupted") {
        ModelError::Interrupted { after_output, .. } => assert!(after_output),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(left, 1);
    assert_eq!(events[0], text("Hel"));
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Error {
            kind: StreamErrorKind::Interrupted,
            ..
        })
    ));
}

#[tokio::test]
async fn body_broken_before_output_is_retried() {
    let mut broken = anth(200, &[], &ANTHROPIC_TEXT[..120]);
    broken.error = Some(RecordedFailure {
        kind: "body".into(),
        message: "connection reset".into(),
    });
    let (result, _, _) = run(
        WireFormat::AnthropicMessages,
        vec![broken, anth(200, &[], ANTHROPIC_TEXT)],
    )
    .await;
    assert_eq!(result.expect("retried").attempts, 2);
}

#[tokio::test]
async fn connection_errors_are_retried() {
    let mut refused = anth(0, &[], "");
    refused.error = Some(RecordedFailure {
        kind: "connect".into(),
        message: "connection refused".into(),
    });
    let (result, _, _) = run(
        WireFormat::AnthropicMessages,
        vec![refused, anth(200, &[], ANTHROPIC_TEXT)],
    )
    .await;
    assert_eq!(result.expect("retried").attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn rate_limit_honours_retry_after() {
    let start = tokio::time::Instant::now();
    let (result, _, _) = run(
        WireFormat::AnthropicMessages,
        vec![
            anth(429, &[("retry-after", "7")], ANTHROPIC_429),
            anth(200, &[], ANTHROPIC_TEXT),
        ],
    )
    .await;
    assert_eq!(result.expect("retried").attempts, 2);
    // Paused (virtual) time: the driver slept at least what the server asked for, although
    // its own backoff ceiling is 100 ms.
    assert!(start.elapsed() >= Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn retry_after_beyond_the_budget_gives_up_at_once() {
    let mut req = request(WireFormat::AnthropicMessages);
    req.retry.budget_ms = 5_000;
    let (result, events, left) = run_req(
        req,
        vec![
            anth(429, &[("retry-after", "30")], ANTHROPIC_429),
            anth(200, &[], ANTHROPIC_TEXT),
        ],
    )
    .await;
    match result.expect_err("gave up") {
        ModelError::Unavailable { attempts, last } => {
            assert_eq!(attempts, 1);
            assert!(last.contains("retry budget"), "{last}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(left, 1);
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Error {
            kind: StreamErrorKind::Unavailable,
            ..
        })
    ));
}

#[tokio::test]
async fn server_errors_are_retried_up_to_max_attempts() {
    let ex: Vec<_> = (0..5).map(|_| anth(529, &[], ANTHROPIC_529)).collect();
    let (result, _, left) = run(WireFormat::AnthropicMessages, ex).await;
    match result.expect_err("gave up") {
        ModelError::Unavailable { attempts, last } => {
            assert_eq!(attempts, 4);
            assert!(last.contains("Overloaded"), "{last}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(left, 1);
}

#[tokio::test]
async fn unauthorized_is_a_typed_error_naming_the_credential_without_echoing_it() {
    let body = OPENAI_401.replace("CANARY_PLACEHOLDER", "sk-canary-0123456789");
    let (result, events, left) = run(
        WireFormat::OpenAiChat,
        vec![oai(401, &[], &body), oai(200, &[], OPENAI_TEXT)],
    )
    .await;
    let err = result.expect_err("auth");
    assert_eq!(
        err,
        ModelError::Auth {
            provider: ProviderId::OpenAi,
            status: 401
        }
    );
    let msg = err.to_string();
    assert!(msg.contains("OPENAI_API_KEY"), "{msg}");
    assert!(msg.contains("credentials.json"), "{msg}");
    assert!(!msg.contains("sk-canary"), "{msg}");
    assert_eq!(left, 1, "auth failures are not retried");
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Error { kind: StreamErrorKind::Auth, message }) if !message.contains("sk-canary")
    ));
}

#[tokio::test]
async fn context_overflow_and_bad_request_are_told_apart() {
    let (r, _, _) = run(
        WireFormat::AnthropicMessages,
        vec![anth(400, &[], ANTHROPIC_CONTEXT)],
    )
    .await;
    assert!(
        matches!(r, Err(ModelError::ContextOverflow { ref message }) if message.contains("prompt is too long"))
    );
    let (r, _, _) = run(WireFormat::OpenAiChat, vec![oai(400, &[], OPENAI_CONTEXT)]).await;
    assert!(matches!(r, Err(ModelError::ContextOverflow { .. })));
    let (r, events, _) = run(
        WireFormat::AnthropicMessages,
        vec![anth(400, &[], ANTHROPIC_400)],
    )
    .await;
    assert!(
        matches!(r, Err(ModelError::BadRequest { status: 400, ref message }) if message.contains("roles must alternate"))
    );
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Error {
            kind: StreamErrorKind::BadRequest,
            ..
        })
    ));
}

#[tokio::test]
async fn openai_text_stream_with_usage_and_done() {
    let (result, events, _) = run(WireFormat::OpenAiChat, vec![oai(200, &[], OPENAI_TEXT)]).await;
    let c = result.expect("completes");
    assert_eq!(
        c.usage,
        Usage {
            input_tokens: 9,
            output_tokens: 12
        }
    );
    assert_eq!(
        events,
        vec![
            text("Hello"),
            text(", wörld"),
            StreamEvent::MessageStop {
                stop_reason: StopReason::EndTurn,
                usage: Usage {
                    input_tokens: 9,
                    output_tokens: 12
                }
            }
        ]
    );
}

#[tokio::test]
async fn openai_parallel_tool_calls_are_assembled_by_index() {
    let ex = exchange("/v1/chat/completions", 200, &[], chunks_of(OPENAI_TOOLS, 3));
    let (result, events, _) = run(WireFormat::OpenAiChat, vec![ex]).await;
    assert_eq!(result.expect("completes").stop_reason, StopReason::ToolUse);
    assert_eq!(
        events,
        vec![
            StreamEvent::ToolUse {
                id: "call_abc".into(),
                name: "get_weather".into(),
                input_json: r#"{"location": "Paris"}"#.into()
            },
            StreamEvent::ToolUse {
                id: "call_def".into(),
                name: "get_time".into(),
                input_json: r#"{"tz": "CET"}"#.into()
            },
            StreamEvent::MessageStop {
                stop_reason: StopReason::ToolUse,
                usage: Usage {
                    input_tokens: 80,
                    output_tokens: 40
                }
            },
        ]
    );
}

#[tokio::test]
async fn openai_single_tool_call() {
    let (result, events, _) =
        run(WireFormat::OpenAiChat, vec![oai(200, &[], OPENAI_ONE_TOOL)]).await;
    assert_eq!(
        result.expect("completes").usage,
        Usage {
            input_tokens: 30,
            output_tokens: 7
        }
    );
    assert_eq!(
        events[0],
        StreamEvent::ToolUse {
            id: "call_1".into(),
            name: "read_file".into(),
            input_json: r#"{"path":"src/main.rs"}"#.into()
        }
    );
}

#[tokio::test]
async fn openai_truncated_and_midstream_error() {
    let (r, events, _) = run(
        WireFormat::OpenAiChat,
        vec![oai(200, &[], OPENAI_TRUNCATED)],
    )
    .await;
    assert!(matches!(
        r,
        Err(ModelError::Interrupted {
            after_output: true,
            ..
        })
    ));
    assert_eq!(events[0], text("Hi"));
    let (r, _, left) = run(
        WireFormat::OpenAiChat,
        vec![
            oai(200, &[], OPENAI_MIDSTREAM_ERROR),
            oai(200, &[], OPENAI_TEXT),
        ],
    )
    .await;
    assert!(matches!(r, Err(ModelError::ProviderError { ref kind, .. }) if kind == "server_error"));
    assert_eq!(left, 1);
}

#[tokio::test]
async fn replay_mismatch_and_exhaustion_are_cassette_errors() {
    let (r, _, _) = run(
        WireFormat::AnthropicMessages,
        vec![oai(200, &[], OPENAI_TEXT)],
    )
    .await;
    assert!(matches!(r, Err(ModelError::Cassette(ref m)) if m.contains("/v1/chat/completions")));
    let (r, events, _) = run(WireFormat::AnthropicMessages, vec![]).await;
    assert!(matches!(r, Err(ModelError::Cassette(_))));
    assert!(matches!(
        events.last(),
        Some(StreamEvent::Error {
            kind: StreamErrorKind::Cassette,
            ..
        })
    ));
}

#[tokio::test]
async fn recording_then_replaying_gives_the_same_events() {
    // Record a run (a retried 529, then a stream whose chunks split UTF-8), then replay the
    // recorded lines and compare.
    let source = vec![
        anth(529, &[("x-should-retry", "true")], ANTHROPIC_529),
        anth(
            200,
            &[("content-type", "text/event-stream")],
            ANTHROPIC_TEXT,
        ),
    ];
    let recording = Recording::new(ReplayTransport::new(source.clone()));
    let req = request(WireFormat::AnthropicMessages);
    let (tx, mut rx) = mpsc::channel(1024);
    let first = run_turn(&recording, &req, &tx, Some(1))
        .await
        .expect("completes");
    drop(tx);
    let mut live = Vec::new();
    while let Some(e) = rx.recv().await {
        live.push(e);
    }
    let lines = recording.take_lines();
    assert_eq!(lines.len(), 2);
    let jsonl = lines.join("\n");
    let parsed = parse_cassette(&jsonl).expect("parses");
    assert_eq!(
        parsed[1].chunks, source[1].chunks,
        "chunks recorded exactly as received"
    );
    assert!(
        parsed
            .iter()
            .any(|e| e.chunks.iter().any(|c| matches!(c, Chunk::Bytes { .. }))),
        "a split UTF-8 chunk is kept as bytes"
    );
    assert_eq!(parsed[0].request.url, "replay:/v1/messages");
    let (second, replayed, _) = run_req(req, parsed).await;
    assert_eq!(second.expect("replays"), first);
    assert_eq!(replayed, live);
    // And a line round-trips.
    assert_eq!(
        parse_cassette(&to_line(&source[0])).expect("parses")[0],
        source[0]
    );
}

#[test]
fn cassette_errors_name_the_line() {
    let err = parse_cassette("\n{\"version\":1}\n").expect_err("bad");
    assert!(err.to_string().starts_with("cassette line 2:"), "{err}");
    let line = to_line(&anth(200, &[], "x")).replace("\"version\":1", "\"version\":9");
    assert!(parse_cassette(&line).is_err());
}

fn conversation() -> CompletionRequest {
    let mut req = request(WireFormat::AnthropicMessages);
    req.provider = ProviderConfig::Http {
        wire: WireFormat::AnthropicMessages,
        credential: ProviderId::Anthropic,
        base_url: "https://api.anthropic.com/".into(),
    };
    req.messages = vec![
        Message::user_text("weather?"),
        Message {
            role: MessageRole::Assistant,
            content: vec![
                ContentBlock::Text {
                    text: "Checking.".into(),
                },
                ContentBlock::ToolUse {
                    id: "t1".into(),
                    name: "get_weather".into(),
                    input_json: r#"{"location":"Paris"}"#.into(),
                },
            ],
        },
        Message {
            role: MessageRole::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "t1".into(),
                content: "18C".into(),
                is_error: false,
            }],
        },
    ];
    req
}

#[test]
fn anthropic_request_shape() {
    let http = http_request(&conversation()).expect("builds");
    assert_eq!(http.url, "https://api.anthropic.com/v1/messages");
    assert_eq!(http.credential, ProviderId::Anthropic);
    assert!(http
        .headers
        .contains(&("anthropic-version".into(), "2023-06-01".into())));
    assert!(!http.headers.iter().any(
        |(k, _)| k.eq_ignore_ascii_case("x-api-key") || k.eq_ignore_ascii_case("authorization")
    ));
    let body: serde_json::Value = serde_json::from_slice(&http.body).expect("json");
    assert_eq!(body["stream"], true);
    assert_eq!(body["system"], "Be brief.");
    assert_eq!(body["max_tokens"], 1024);
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    assert_eq!(
        body["messages"][1]["content"][1]["input"]["location"],
        "Paris"
    );
    assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
    assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "t1");
}

#[test]
fn openai_request_shape_for_a_compatible_base_url() {
    let mut req = conversation();
    req.provider = ProviderConfig::Http {
        wire: WireFormat::OpenAiChat,
        credential: ProviderId::Hanzo,
        base_url: "http://127.0.0.1:11434/v1".into(),
    };
    let http = http_request(&req).expect("builds");
    assert_eq!(http.url, "http://127.0.0.1:11434/v1/chat/completions");
    assert_eq!(http.credential, ProviderId::Hanzo);
    let body: serde_json::Value = serde_json::from_slice(&http.body).expect("json");
    assert_eq!(body["stream_options"]["include_usage"], true);
    let msgs = body["messages"].as_array().expect("array");
    assert_eq!(msgs[0]["role"], "system");
    assert_eq!(msgs[1]["content"], "weather?");
    assert_eq!(msgs[2]["tool_calls"][0]["function"]["name"], "get_weather");
    let args: serde_json::Value = serde_json::from_str(
        msgs[2]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .expect("string"),
    )
    .expect("arguments are JSON text");
    assert_eq!(args["location"], "Paris");
    assert_eq!(msgs[3]["role"], "tool");
    assert_eq!(msgs[3]["tool_call_id"], "t1");
    assert_eq!(body["tools"][0]["function"]["parameters"]["type"], "object");
}

#[test]
fn invalid_tool_schema_is_a_bad_request_before_sending() {
    let mut req = request(WireFormat::OpenAiChat);
    req.tools[0].input_schema_json = "not json".into();
    let err = http_request(&req).expect_err("refused");
    assert!(matches!(err, ModelError::BadInput(ref m) if m.contains("get_weather")));
}

#[test]
fn transport_refusals_keep_their_kind() {
    let e = ModelError::Transport {
        kind: HttpFailureKind::NotAllowed,
        message: "x".into(),
    };
    assert_eq!(e.kind(), StreamErrorKind::Transport);
}
