//! `hanzo-dev ask "PROMPT"`: one model turn through the real workers — the broker holds the key and
//! speaks HTTP, the model worker parses the stream — printed as it arrives. `--record FILE` writes
//! the exchange as a cassette; `--replay FILE` plays one back offline through the same parser.
//!
//! No tools are offered: this is the model path alone (the agent loop is `run`). What the model
//! says is printed made safe for a terminal (`crate::term`); with `--json` it is data, escaped as
//! JSON.

use super::exit::{self, failed, usage};
use super::provider::{self, default_model, parse_provider, Wire};
use crate::agent::deadline::{within, Deadlines};
use crate::secrets::StartEnv;
use crate::startup::supervisor_config;
use crate::term::{sanitize_for_terminal, sanitize_line_for_terminal};
use crate::tree::Supervisor;
use crate::userfile::{write_user_file, PRIVATE};
use hanzo_ipc::channel::StreamPart;
use hanzo_ipc::roles::model::{
    self, CompletionRequest, Message, ProviderId, RetryPolicy, StreamEvent,
};
use hanzo_ipc::Role;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// What `hanzo-dev ask` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to ask.
    pub prompt: String,
    /// Whose credential to use (default: the first found of hanzo, anthropic, openai).
    #[arg(long)]
    pub provider: Option<String>,
    /// Endpoint base URL (default: the provider's public API). A URL given here is added to the
    /// broker's allow-list for this run; plain http is accepted for loopback only.
    #[arg(long)]
    pub base_url: Option<String>,
    /// Wire protocol of the endpoint (default: anthropic for the anthropic provider, else openai).
    #[arg(long, value_enum)]
    pub wire: Option<Wire>,
    /// Model name (default: `HANZO_MODEL`, else the provider's default).
    #[arg(long)]
    pub model: Option<String>,
    /// The most tokens the model may answer with.
    #[arg(long, default_value_t = 1024, value_name = "TOKENS")]
    pub max_tokens: u32,
    /// Write the exchange to FILE as a cassette (JSONL; see workers/model/CASSETTE.md).
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    pub record: Option<PathBuf>,
    /// Play a cassette instead of calling a provider (offline).
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// One JSON object per stream event on stdout.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn lookup<'a>(env: &'a StartEnv, name: &str) -> Option<&'a str> {
    env.vars
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// Runs `hanzo-dev ask`: one model turn, its text on stdout; returns the exit code.
pub async fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    let cassette = match &args.replay {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| usage(format!("cannot read cassette {}: {e}", path.display())))?,
        ),
        None => None,
    };
    let provider_flag = args.provider.as_deref().map(parse_provider).transpose()?;
    let kernel = hanzo_sandbox::doctor::probe_kernel();
    let (cfg, _run_dir) = supervisor_config(None, &env, kernel.landlock_abi)?;
    let sup = Supervisor::start(cfg).await?;
    let result = ask(args, &env, &sup, cassette, provider_flag).await;
    sup.shutdown().await;
    result
}

async fn ask(
    args: &Args,
    env: &StartEnv,
    sup: &Supervisor,
    cassette: Option<String>,
    provider_flag: Option<ProviderId>,
) -> anyhow::Result<i32> {
    let provider = provider::resolve(
        sup,
        cassette,
        provider_flag,
        args.wire.map(Into::into),
        args.base_url.as_deref(),
    )
    .await?;
    let model_name = args
        .model
        .clone()
        .or_else(|| lookup(env, "HANZO_MODEL").map(str::to_string))
        .unwrap_or_else(|| default_model(&provider).to_string());
    let request = CompletionRequest {
        provider,
        model: model_name,
        system: None,
        messages: vec![Message::user_text(args.prompt.clone())],
        tools: Vec::new(),
        max_tokens: args.max_tokens,
        retry: RetryPolicy::default(),
        record: args.record.is_some(),
    };
    let idle = Deadlines::default().model_idle;
    let mut stream = within(
        Role::Model,
        "the model turn",
        idle,
        sup.model.call_stream(model::Request::Complete(request)),
    )
    .await?
    .map_err(|e| failed(format!("the model request could not be sent: {e}")))?;
    let mut recorded = Vec::new();
    let mut failed_with = None;
    let mut out = std::io::stdout().lock();
    let on_terminal = std::io::stderr().is_terminal();
    loop {
        let Some(part) = within(Role::Model, "the model turn", idle, stream.next()).await? else {
            break;
        };
        match part {
            Ok(StreamPart::Item(model::Item::Event(event))) => {
                if args.json {
                    writeln!(out, "{}", event_json(&event))?;
                } else if let StreamEvent::ContentDelta { text } = &event {
                    write!(out, "{}", sanitize_for_terminal(text))?;
                    out.flush()?;
                }
                if let StreamEvent::Error { message, .. } = &event {
                    failed_with = Some(message.clone());
                }
            }
            Ok(StreamPart::Item(model::Item::Recorded(line))) => recorded.push(line),
            Ok(StreamPart::Item(model::Item::Retrying(n))) => {
                tracing::info!(
                    attempt = n.attempt,
                    delay_ms = n.delay_ms,
                    reason = %n.reason,
                    "the model request failed; retrying"
                );
                if on_terminal && !args.json {
                    eprintln!(
                        "model request attempt {} of {} failed ({}); retrying in {:.1} s",
                        n.attempt,
                        n.max_attempts,
                        sanitize_line_for_terminal(&n.reason),
                        n.delay_ms as f64 / 1000.0
                    );
                }
            }
            Ok(StreamPart::Item(_)) => {}
            Ok(StreamPart::Done(_)) => break,
            Err(e) => {
                // The worker streams its error as an event first; that message is the one to show.
                failed_with.get_or_insert_with(|| e.to_string());
                break;
            }
        }
    }
    if !args.json {
        writeln!(out)?;
    }
    if let Some(path) = &args.record {
        let mut text = recorded.join("\n");
        text.push('\n');
        // ask has no workspace: a run in this directory could have planted a link here.
        let cwd = std::env::current_dir().ok();
        write_user_file(path, text.as_bytes(), PRIVATE, cwd.as_deref())
            .map_err(|e| failed(format!("cannot write the cassette: {e}")))?;
    }
    match failed_with {
        Some(msg) => Err(failed(msg)),
        None => Ok(exit::OK),
    }
}

fn event_json(e: &StreamEvent) -> serde_json::Value {
    use serde_json::json;
    match e {
        StreamEvent::ContentDelta { text } => json!({"type": "content_delta", "text": text}),
        StreamEvent::ToolUse {
            id,
            name,
            input_json,
        } => json!({"type": "tool_use", "id": id, "name": name, "input": input_json}),
        StreamEvent::MessageStop { stop_reason, usage } => json!({
            "type": "message_stop",
            "stop_reason": format!("{stop_reason:?}"),
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
        }),
        StreamEvent::Error { kind, message } => {
            json!({"type": "error", "kind": format!("{kind:?}"), "message": message})
        }
    }
}
