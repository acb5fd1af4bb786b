//! One model turn: build the request, send it through a transport, parse the stream, and retry
//! what is worth retrying (connection errors, 429, 5xx, overloaded) with `hanzo-backoff`, honouring
//! `Retry-After`, within a cap on the total waiting time. A stream that breaks after output began
//! is surfaced, never replayed: the caller has already shown that output.

use crate::transport::{BodyStream, HttpTransport, TransportError};
use crate::wire::{error_message, is_context_overflow, WireError, WireParser};
use crate::{anthropic, openai, ModelError};
use hanzo_backoff::{parse_retry_after, Backoff, RetryBudget};
use hanzo_ipc::roles::http::{HttpHead, HttpRequest};
use hanzo_ipc::roles::model::{
    Completion, CompletionRequest, ProviderConfig, ProviderId, RetryNotice, StopReason,
    StreamEvent, WireFormat,
};
use hanzo_sse::SseFrameBuffer;
use std::time::Duration;
use tokio::sync::mpsc;

/// Largest SSE event accepted from a provider.
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;
/// How much of an error body is read to classify it.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Build the credential-free HTTP request for `req`. Replay uses a placeholder base URL: the
/// cassette matches on method and path only.
pub fn http_request(req: &CompletionRequest) -> Result<HttpRequest, ModelError> {
    let (wire, credential, base) = match &req.provider {
        ProviderConfig::Http {
            wire,
            credential,
            base_url,
        } => (
            *wire,
            *credential,
            base_url.trim_end_matches('/').to_string(),
        ),
        ProviderConfig::Replay { wire } => (*wire, replay_credential(*wire), "replay:".to_string()),
    };
    let built = match wire {
        WireFormat::AnthropicMessages => anthropic::build_request(req)?,
        WireFormat::OpenAiChat => openai::build_request(req)?,
    };
    Ok(HttpRequest {
        credential,
        method: "POST".into(),
        url: format!("{base}{}", built.path),
        headers: built.headers,
        body: built.body,
    })
}

/// A recording names no provider: the one whose API speaks its wire format (the provider table).
fn replay_credential(wire: WireFormat) -> ProviderId {
    ProviderId::of_wire(wire)
}

fn wire_of(req: &CompletionRequest) -> WireFormat {
    match &req.provider {
        ProviderConfig::Http { wire, .. } | ProviderConfig::Replay { wire } => *wire,
    }
}

/// How one attempt failed.
struct Failure {
    error: ModelError,
    retryable: bool,
    retry_after: Option<Duration>,
}

impl Failure {
    fn fatal(error: ModelError) -> Failure {
        Failure {
            error,
            retryable: false,
            retry_after: None,
        }
    }
}

/// Run one turn. Every event goes to `events` as it is parsed; the stream always ends with
/// `MessageStop` (on success) or `Error` (and the same error is returned).
pub async fn run_turn<T: HttpTransport>(
    transport: &T,
    req: &CompletionRequest,
    events: &mpsc::Sender<StreamEvent>,
    jitter_seed: Option<u64>,
) -> Result<Completion, ModelError> {
    run_turn_with_notices(transport, req, events, None, jitter_seed).await
}

/// [`run_turn`], announcing each retry on `retries` before waiting for it.
pub async fn run_turn_with_notices<T: HttpTransport>(
    transport: &T,
    req: &CompletionRequest,
    events: &mpsc::Sender<StreamEvent>,
    retries: Option<&mpsc::Sender<RetryNotice>>,
    jitter_seed: Option<u64>,
) -> Result<Completion, ModelError> {
    let result = run_turn_inner(transport, req, events, retries, jitter_seed).await;
    if let Err(e) = &result {
        let _ = events
            .send(StreamEvent::Error {
                kind: e.kind(),
                message: e.to_string(),
            })
            .await;
    }
    result
}

async fn run_turn_inner<T: HttpTransport>(
    transport: &T,
    req: &CompletionRequest,
    events: &mpsc::Sender<StreamEvent>,
    retries: Option<&mpsc::Sender<RetryNotice>>,
    jitter_seed: Option<u64>,
) -> Result<Completion, ModelError> {
    let http = http_request(req)?;
    let wire = wire_of(req);
    let policy = req.retry;
    let mut backoff = Backoff::from_millis(policy.base_ms, policy.max_ms);
    if let Some(seed) = jitter_seed {
        backoff = backoff.with_seed(seed);
    }
    let mut budget = RetryBudget::new(Duration::from_millis(policy.budget_ms));
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let failure = match attempt(transport, &http, wire, events).await {
            Ok((stop_reason, usage)) => {
                return Ok(Completion {
                    stop_reason,
                    usage,
                    attempts,
                })
            }
            Err(f) => f,
        };
        if !failure.retryable {
            return Err(failure.error);
        }
        if attempts >= policy.max_attempts.max(1) {
            return Err(ModelError::Unavailable {
                attempts,
                last: failure.error.to_string(),
            });
        }
        let delay = match failure.retry_after {
            Some(min) => backoff.next_delay_at_least(min),
            None => backoff.next_delay(),
        };
        if !budget.try_spend(delay) {
            return Err(ModelError::Unavailable {
                attempts,
                last: format!(
                    "{} (waiting {} ms more would exceed the {} ms retry budget)",
                    failure.error,
                    delay.as_millis(),
                    policy.budget_ms
                ),
            });
        }
        if let Some(tx) = retries {
            let _ = tx
                .send(RetryNotice {
                    attempt: attempts,
                    max_attempts: policy.max_attempts.max(1),
                    delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    reason: failure.error.to_string(),
                })
                .await;
        }
        tokio::time::sleep(delay).await;
    }
}

async fn attempt<T: HttpTransport>(
    transport: &T,
    http: &HttpRequest,
    wire: WireFormat,
    events: &mpsc::Sender<StreamEvent>,
) -> Result<(StopReason, hanzo_ipc::roles::model::Usage), Failure> {
    let (head, mut body) = match transport.send(http).await {
        Ok(r) => r,
        Err(e) => {
            let retryable = e.is_retryable();
            return Err(Failure {
                error: transport_error(e),
                retryable,
                retry_after: None,
            });
        }
    };
    if !(200..300).contains(&head.status) {
        let mut bytes = Vec::new();
        while let Some(Ok(chunk)) = body.next_chunk().await {
            bytes.extend_from_slice(&chunk);
            if bytes.len() >= MAX_ERROR_BODY {
                break;
            }
        }
        return Err(classify_status(&head, &bytes, http.credential));
    }
    let mut parser: Box<dyn WireParser> = match wire {
        WireFormat::AnthropicMessages => Box::new(anthropic::AnthropicParser::new()),
        WireFormat::OpenAiChat => Box::new(openai::OpenAiParser::new()),
    };
    let mut sse = SseFrameBuffer::new().with_max_event_size(MAX_EVENT_BYTES);
    let mut began = false;
    let mut out = Vec::new();
    loop {
        let chunk = match body.next_chunk().await {
            None => break,
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                return Err(interrupted(began, format!("the connection broke: {e}")));
            }
        };
        let frames = sse
            .feed(&chunk)
            .map_err(|e| Failure::fatal(ModelError::Protocol(format!("bad event stream: {e}"))))?;
        for frame in &frames {
            match parser.on_event(frame, &mut out) {
                Ok(()) => {}
                Err(WireError::Provider {
                    kind,
                    message,
                    retryable,
                }) => {
                    flush(&mut out, events, &mut began).await;
                    return Err(if began {
                        Failure::fatal(ModelError::ProviderError { kind, message })
                    } else {
                        Failure {
                            error: ModelError::ProviderError { kind, message },
                            retryable,
                            retry_after: None,
                        }
                    });
                }
                Err(WireError::Protocol(m)) => {
                    flush(&mut out, events, &mut began).await;
                    return Err(Failure::fatal(ModelError::Protocol(m)));
                }
            }
        }
        flush(&mut out, events, &mut began).await;
    }
    // A final event without its blank line still counts (WHATWG: it is discarded, but the data
    // was complete; providers always end with a blank line, so this only matters for `[DONE]`).
    sse.finish();
    let complete = parser.on_end(&mut out);
    flush(&mut out, events, &mut began).await;
    if !complete {
        return Err(interrupted(
            began,
            "the stream ended before the message was complete".into(),
        ));
    }
    Ok((
        parser.stop_reason().unwrap_or(StopReason::EndTurn),
        parser.usage(),
    ))
}

fn interrupted(began: bool, reason: String) -> Failure {
    Failure {
        error: ModelError::Interrupted {
            reason,
            after_output: began,
        },
        // Before any output the turn can be tried again as if nothing happened.
        retryable: !began,
        retry_after: None,
    }
}

async fn flush(out: &mut Vec<StreamEvent>, events: &mpsc::Sender<StreamEvent>, began: &mut bool) {
    for ev in out.drain(..) {
        if matches!(
            ev,
            StreamEvent::ContentDelta { .. } | StreamEvent::ToolUse { .. }
        ) {
            *began = true;
        }
        // A closed receiver means the caller stopped listening; parsing on is harmless.
        let _ = events.send(ev).await;
    }
}

fn transport_error(e: TransportError) -> ModelError {
    match e {
        TransportError::Http(f) => ModelError::Transport {
            kind: f.kind,
            message: f.message,
        },
        TransportError::Cassette(m) => ModelError::Cassette(m),
    }
}

fn classify_status(head: &HttpHead, body: &[u8], credential: ProviderId) -> Failure {
    let status = head.status;
    let retry_after = head
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("retry-after"))
        .and_then(|(_, v)| parse_retry_after(v));
    let (kind, message) = error_message(body);
    match status {
        // The provider's message is left out on purpose: some echo part of the key.
        401 | 403 => Failure::fatal(ModelError::Auth {
            provider: credential,
            status,
        }),
        408 | 409 | 425 | 429 | 500..=599 => Failure {
            error: ModelError::Http {
                status,
                message: if message.is_empty() {
                    "no details".into()
                } else {
                    message
                },
            },
            retryable: true,
            retry_after,
        },
        413 => Failure::fatal(ModelError::ContextOverflow { message }),
        _ if is_context_overflow(kind.as_deref(), &message) => {
            Failure::fatal(ModelError::ContextOverflow { message })
        }
        _ => Failure::fatal(ModelError::BadRequest { status, message }),
    }
}
