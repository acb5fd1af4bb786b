//! `session-compaction` vectors: each case runs through `hanzo_compaction::SessionCompactor::compact`
//! (the function the agent loop uses) with a stub summarizer that returns a fixed text of
//! `summary_tokens` tokens, or fails when `"summarizer": "fail"`. In the expected messages the
//! placeholder `<summary>` stands for the summarizer's text and `<truncated>` for
//! `hanzo_compaction::truncation_notice(compacted_count)`.
use super::{field, str_field, u64_field};
use hanzo_compaction::{Message, Role, SessionCompactor, Summary};
use serde_json::Value;

/// The stub summarizer's text; no input message contains it, so it cannot match by accident.
const STUB_SUMMARY: &str = "\u{27e6}stub summary\u{27e7}";

fn role(s: &str) -> Result<Role, String> {
    Ok(match s {
        "system" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        other => return Err(format!("malformed case: unknown role {other:?}")),
    })
}

fn ids(m: &Value, key: &str) -> Result<Vec<String>, String> {
    match m.get(key) {
        None => Ok(Vec::new()),
        Some(v) => v
            .as_array()
            .ok_or_else(|| format!("malformed case: {key:?} must be an array"))?
            .iter()
            .map(|id| {
                id.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("malformed case: {key:?} holds {id}, not a string"))
            })
            .collect(),
    }
}

fn messages(v: &Value, key: &str) -> Result<Vec<Message>, String> {
    field(v, key)?
        .as_array()
        .ok_or_else(|| format!("malformed case: {key:?} must be an array"))?
        .iter()
        .map(|m| {
            Ok(Message {
                role: role(str_field(m, "role")?)?,
                content: str_field(m, "content")?.to_string(),
                token_count: u64_field(m, "tokens")?,
                tool_uses: ids(m, "tool_uses")?,
                tool_results: ids(m, "tool_results")?,
            })
        })
        .collect()
}

/// One line describing a message, for error output.
fn show(m: &Message) -> String {
    format!(
        "{:?} {:?} ({} tokens, uses {:?}, results {:?})",
        m.role, m.content, m.token_count, m.tool_uses, m.tool_results
    )
}

pub fn run(case: &Value) -> Result<(), String> {
    let compactor = SessionCompactor {
        max_tokens: u64_field(case, "max_tokens")?,
        reserve_recent: usize::try_from(u64_field(case, "reserve_recent")?)
            .map_err(|_| "malformed case: reserve_recent too large".to_string())?,
    };
    let fails = match str_field(case, "summarizer")? {
        "ok" => false,
        "fail" => true,
        other => return Err(format!("malformed case: summarizer {other:?} (ok | fail)")),
    };
    let summary_tokens = match case.get("summary_tokens") {
        Some(_) => u64_field(case, "summary_tokens")?,
        None if fails => 0,
        None => return Err("malformed case: summarizer ok needs summary_tokens".into()),
    };
    let input = messages(case, "messages")?;
    let expect = field(case, "expect")?;
    let want_count = usize::try_from(u64_field(expect, "compacted_count")?)
        .map_err(|_| "malformed case: compacted_count too large".to_string())?;
    let want_saved = u64_field(expect, "tokens_saved")?;
    let mut want = messages(expect, "messages")?;
    for m in &mut want {
        match m.content.as_str() {
            "<summary>" => m.content = STUB_SUMMARY.to_string(),
            "<truncated>" => m.content = hanzo_compaction::truncation_notice(want_count),
            _ => {}
        }
    }

    let mut shown: Option<Vec<String>> = None;
    let got = compactor.compact(&input, |middle| {
        shown = Some(middle.iter().map(|m| m.content.clone()).collect());
        (!fails).then(|| Summary {
            text: STUB_SUMMARY.to_string(),
            token_count: summary_tokens,
        })
    });

    if got.compacted_count != want_count {
        return Err(format!(
            "compacted_count {}, expected {want_count}",
            got.compacted_count
        ));
    }
    if got.tokens_saved != want_saved {
        return Err(format!(
            "tokens_saved {}, expected {want_saved}",
            got.tokens_saved
        ));
    }
    if got.messages.len() != want.len() {
        return Err(format!(
            "{} messages, expected {}: got [{}]",
            got.messages.len(),
            want.len(),
            got.messages.iter().map(show).collect::<Vec<_>>().join("; ")
        ));
    }
    for (i, (g, w)) in got.messages.iter().zip(&want).enumerate() {
        if g != w {
            return Err(format!(
                "message {i}: got {}, expected {}",
                show(g),
                show(w)
            ));
        }
    }
    match (want_count, &shown) {
        (0, Some(_)) => return Err("the summarizer was called but nothing was compacted".into()),
        (n, None) if n > 0 => return Err("compacted without calling the summarizer".into()),
        _ => {}
    }
    if let Some(want_shown) = case.get("summarized") {
        let want_shown: Vec<String> = want_shown
            .as_array()
            .ok_or("malformed case: \"summarized\" must be an array")?
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("malformed case: summarized holds {s}"))
            })
            .collect::<Result<_, String>>()?;
        let got_shown = shown.unwrap_or_default();
        if got_shown != want_shown {
            return Err(format!(
                "summarizer was shown {got_shown:?}, expected {want_shown:?}"
            ));
        }
    }
    Ok(())
}
