//! `hanzo-dev ask "PROMPT"`: one model turn through the real workers — the broker holds the key and
//! speaks HTTP, the model worker parses the stream — printed as it arrives. `--record FILE` writes
//! the exchange as a cassette; `--replay FILE` plays one back offline through the same parser.
//!
//! No tools are offered: this is the model path alone (the agent loop is `run`, later).

use super::exit;
use crate::secrets::StartEnv;
use crate::startup::supervisor_config;
use crate::tree::Supervisor;
use anyhow::Context;
use hanzo_ipc::channel::StreamPart;
use hanzo_ipc::roles::broker::{self, Endpoint};
use hanzo_ipc::roles::model::{
    self, CompletionRequest, Message, ProviderConfig, ProviderId, RetryPolicy, StreamEvent,
    WireFormat,
};
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Wire {
    Anthropic,
    Openai,
}

impl From<Wire> for WireFormat {
    fn from(w: Wire) -> WireFormat {
        match w {
            Wire::Anthropic => WireFormat::AnthropicMessages,
            Wire::Openai => WireFormat::OpenAiChat,
        }
    }
}

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

pub(crate) fn default_base_url(p: ProviderId) -> &'static str {
    match p {
        ProviderId::Anthropic => "https://api.anthropic.com",
        ProviderId::OpenAi => "https://api.openai.com/v1",
        ProviderId::Hanzo => "https://api.hanzo.ai/v1",
    }
}

pub(crate) fn default_model(wire: WireFormat) -> &'static str {
    match wire {
        WireFormat::AnthropicMessages => "claude-sonnet-4-20250514",
        WireFormat::OpenAiChat => "gpt-4o-mini",
    }
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
    let provider = match cassette {
        Some(jsonl) => {
            let r = sup
                .model
                .call(model::Request::LoadCassette { jsonl })
                .await
                .context("loading the cassette")?;
            if !matches!(r, model::Response::CassetteLoaded { .. }) {
                anyhow::bail!("unexpected reply to the cassette: {r:?}");
            }
            ProviderConfig::Replay {
                wire: args
                    .wire
                    .map(Into::into)
                    .unwrap_or(WireFormat::AnthropicMessages),
            }
        }
        None => {
            let provider = match provider_flag {
                Some(p) => p,
                None => match sup
                    .broker
                    .call(broker::Request::DescribeCredentials)
                    .await?
                {
                    broker::Response::Credentials(report) => match report.detected {
                        Some(p) => p,
                        None => {
                            eprintln!(
                                "error: no model credential found. Set HANZO_API_KEY, \
                                 ANTHROPIC_API_KEY or OPENAI_API_KEY, or use --replay FILE."
                            );
                            return Ok(exit::USAGE);
                        }
                    },
                    other => anyhow::bail!("unexpected broker reply {other:?}"),
                },
            };
            let wire = args.wire.map(Into::into).unwrap_or(match provider {
                ProviderId::Anthropic => WireFormat::AnthropicMessages,
                _ => WireFormat::OpenAiChat,
            });
            let base_url = match &args.base_url {
                Some(url) => {
                    // An explicit, recorded user decision: this run may reach that endpoint.
                    sup.broker
                        .call(broker::Request::AllowEndpoints(vec![Endpoint {
                            provider,
                            base_url: url.clone(),
                        }]))
                        .await
                        .with_context(|| format!("the broker refused --base-url {url}"))?;
                    url.clone()
                }
                None => default_base_url(provider).to_string(),
            };
            ProviderConfig::Http {
                wire,
                credential: provider,
                base_url,
            }
        }
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
