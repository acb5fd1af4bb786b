//! `sse-frames` vectors: the chunks go through the real `hanzo_sse::SseFrameBuffer`, the stream is
//! ended, and the dispatched events and the last valid `retry` are compared exactly.
use super::{field, str_field};
use hanzo_sse::{SseEvent, SseFrameBuffer};
use serde_json::Value;

/// A `"bytes": true` chunk: each char U+0000–U+00FF is one byte.
fn latin1_bytes(chunk: &str) -> Result<Vec<u8>, String> {
    chunk
        .chars()
        .map(|c| {
            u8::try_from(u32::from(c))
                .map_err(|_| format!("malformed case: bytes chunk holds {c:?}, above U+00FF"))
        })
        .collect()
}

fn expected_event(v: &Value) -> Result<SseEvent, String> {
    Ok(SseEvent {
        event_type: str_field(v, "type")?.to_string(),
        data: str_field(v, "data")?.to_string(),
        last_event_id: str_field(v, "lastEventId")?.to_string(),
    })
}

fn show(e: &SseEvent) -> String {
    format!(
        "{{type: {:?}, data: {:?}, lastEventId: {:?}}}",
        e.event_type, e.data, e.last_event_id
    )
}

pub fn run(case: &Value) -> Result<(), String> {
    let bytes = match case.get("bytes") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("malformed case: \"bytes\" must be a boolean".into()),
    };
    let chunks = field(case, "chunks")?
        .as_array()
        .ok_or("malformed case: \"chunks\" must be an array of strings")?;
    let want_events = field(case, "events")?
        .as_array()
        .ok_or("malformed case: \"events\" must be an array")?
        .iter()
        .map(expected_event)
        .collect::<Result<Vec<_>, String>>()?;
    let want_retry = match field(case, "retry")? {
        Value::Null => None,
        v => Some(
            v.as_u64()
                .ok_or("malformed case: \"retry\" must be null or a non-negative integer")?,
        ),
    };

    let mut sse = SseFrameBuffer::new();
    let mut got = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let text = chunk
            .as_str()
            .ok_or("malformed case: \"chunks\" must be an array of strings")?;
        let input = if bytes {
            latin1_bytes(text)?
        } else {
            text.as_bytes().to_vec()
        };
        got.extend(sse.feed(&input).map_err(|e| format!("chunk {i}: {e}"))?);
    }
    sse.finish();

    if let Some(i) =
        (0..want_events.len().max(got.len())).find(|&i| want_events.get(i) != got.get(i))
    {
        let describe = |e: Option<&SseEvent>| e.map_or_else(|| "nothing".to_string(), show);
        let counts = if got.len() == want_events.len() {
            String::new()
        } else {
            format!("{} events, expected {}; ", got.len(), want_events.len())
        };
        return Err(format!(
            "{counts}event #{i}: got {}, expected {}",
            describe(got.get(i)),
            describe(want_events.get(i))
        ));
    }
    if sse.retry() != want_retry {
        let show = |r: Option<u64>| r.map_or_else(|| "null".to_string(), |ms| ms.to_string());
        return Err(format!(
            "retry {}, expected {}",
            show(sse.retry()),
            show(want_retry)
        ));
    }
    Ok(())
}
