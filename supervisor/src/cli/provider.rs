//! Choosing where model turns go, shared by `ask` and `run`: a loaded cassette (offline), or a
//! provider whose credential the broker holds, at its public API or an explicit `--base-url`.

use anyhow::Context;
use hanzo_ipc::roles::broker::{self, Endpoint};
use hanzo_ipc::roles::model::{self, ProviderConfig, ProviderId, WireFormat};

use crate::tree::Supervisor;

/// A usage or configuration error: the command exits 2 with the message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

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

pub fn default_base_url(p: ProviderId) -> &'static str {
    match p {
        ProviderId::Anthropic => "https://api.anthropic.com",
        ProviderId::OpenAi => "https://api.openai.com/v1",
        ProviderId::Hanzo => "https://api.hanzo.ai/v1",
    }
}

pub fn default_model(wire: WireFormat) -> &'static str {
    match wire {
        WireFormat::AnthropicMessages => "claude-sonnet-4-20250514",
        WireFormat::OpenAiChat => "gpt-4o-mini",
    }
}

/// Load `cassette` into the model worker and replay it, or pick the provider (`provider`, else
/// the broker's auto-detection) and its endpoint. A `base_url` given by the user is added to the
/// broker's allow-list for this run. A missing credential or a refused URL is a [`UsageError`].
pub async fn resolve(
    sup: &Supervisor,
    cassette: Option<String>,
    provider: Option<ProviderId>,
    wire: Option<WireFormat>,
    base_url: Option<&str>,
) -> anyhow::Result<ProviderConfig> {
    if let Some(jsonl) = cassette {
        match sup
            .model
            .call(model::Request::LoadCassette { jsonl })
            .await
            .context("loading the cassette")?
        {
            model::Response::CassetteLoaded { .. } => {}
            other => anyhow::bail!("unexpected reply to the cassette: {other:?}"),
        }
        return Ok(ProviderConfig::Replay {
            wire: wire.unwrap_or(WireFormat::AnthropicMessages),
        });
    }
    let provider = match provider {
        Some(p) => p,
        None => match sup
            .broker
            .call(broker::Request::DescribeCredentials)
            .await?
        {
            broker::Response::Credentials(report) => report.detected.ok_or_else(|| {
                usage(
                    "no model credential found. Set HANZO_API_KEY, ANTHROPIC_API_KEY or \
                     OPENAI_API_KEY, log in with `hanzo-dev login`, use --replay FILE, or try \
                     `hanzo-dev run --demo`.",
                )
            })?,
            other => anyhow::bail!("unexpected broker reply {other:?}"),
        },
    };
    let wire = wire.unwrap_or(match provider {
        ProviderId::Anthropic => WireFormat::AnthropicMessages,
        _ => WireFormat::OpenAiChat,
    });
    let base_url = match base_url {
        Some(url) => {
            // An explicit user decision, for this run only: the broker may reach that endpoint.
            sup.broker
                .call(broker::Request::AllowEndpoints(vec![Endpoint {
                    provider,
                    base_url: url.to_string(),
                }]))
                .await
                .map_err(|e| usage(format!("the broker refused --base-url {url}: {e}")))?;
            url.to_string()
        }
        None => default_base_url(provider).to_string(),
    };
    Ok(ProviderConfig::Http {
        wire,
        credential: provider,
        base_url,
    })
}
