//! `hanzo-dev ask "PROMPT"`: one model turn through the real workers — the broker holds the key and
//! speaks HTTP, the model worker parses the stream — printed as it arrives. `--record FILE` writes
//! the exchange as a cassette; `--replay FILE` plays one back offline through the same parser.
//!
//! No tools are offered: this is the model path alone (the agent loop is `run`).

use super::exit;
use super::provider::{self, default_model, UsageError, Wire};
use crate::secrets::StartEnv;
use crate::startup::supervisor_config;
use crate::tree::Supervisor;
use anyhow::Context;
use hanzo_ipc::channel::StreamPart;
use hanzo_ipc::roles::model::{
    self, CompletionRequest, Message, ProviderConfig, ProviderId, RetryPolicy, StreamEvent,
};
use std::io::Write;
use std::path::PathBuf;

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
    #[arg(long, default_value_t = 1024)]
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

pub async fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    let cassette = match &args.replay {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read cassette {}", path.display()))?,
        ),
        None => None,
    };
    let provider_flag = match &args.provider {
        Some(p) => Some(ProviderId::parse(p).with_context(|| {
            format!("unknown provider {p:?} (expected hanzo, anthropic or openai)")
        })?),
        None => None,
    };
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
    let provider = match provider::resolve(
        sup,
        cassette,
        provider_flag,
        args.wire.map(Into::into),
        args.base_url.as_deref(),
    )
    .await
    {
        Ok(p) => p,
        Err(e) => match e.downcast::<UsageError>() {
            Ok(u) => {
                eprintln!("error: {}", u.0);
                return Ok(exit::USAGE);
            }
            Err(e) => return Err(e),
        },
    };
    let wire = match &provider {
        ProviderConfig::Http { wire, .. } | ProviderConfig::Replay { wire } => *wire,
    };
    let model_name = args
        .model
        .clone()
        .or_else(|| lookup(env, "HANZO_MODEL").map(str::to_string))
        .unwrap_or_else(|| default_model(wire).to_string());
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
    let mut stream = sup
        .model
        .call_stream(model::Request::Complete(request))
        .await?;
    let mut recorded = Vec::new();
    let mut failed = None;
    let mut out = std::io::stdout().lock();
    while let Some(part) = stream.next().await {
        match part {
            Ok(StreamPart::Item(model::Item::Event(event))) => {
                if args.json {
                    writeln!(out, "{}", event_json(&event))?;
                } else if let StreamEvent::ContentDelta { text } = &event {
                    write!(out, "{text}")?;
                    out.flush()?;
                }
                if let StreamEvent::Error { message, .. } = &event {
                    failed = Some(message.clone());
                }
            }
            Ok(StreamPart::Item(model::Item::Recorded(line))) => recorded.push(line),
            Ok(StreamPart::Item(_)) => {}
            Ok(StreamPart::Done(_)) => break,
            Err(e) => {
                failed.get_or_insert_with(|| e.to_string());
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
        std::fs::write(path, text)
            .with_context(|| format!("cannot write cassette {}", path.display()))?;
    }
    match failed {
        Some(msg) => {
            eprintln!("error: {msg}");
            Ok(exit::FAILED)
        }
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
