//! Choosing where model turns go, shared by `ask` and `run`: a loaded cassette (offline), or a
//! provider whose credential the broker holds, at its public API or an explicit `--base-url`.
//! What each provider is (URL, wire format, default model, credential variables) comes from the
//! one provider table, `hanzo_ipc::roles::providers`.

use super::exit::{failed, usage};
use crate::agent::deadline::{within, Deadlines};
use crate::tree::Supervisor;
use hanzo_ipc::roles::broker::{self, Endpoint};
use hanzo_ipc::roles::model::{self, ProviderConfig, ProviderId, WireFormat};
use hanzo_ipc::Role;

/// The wire format of `--base-url`'s server, when it is not the provider's own.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Wire {
    /// Anthropic's Messages API.
    Anthropic,
    /// OpenAI's Chat Completions API.
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

/// The model used for `provider` when nothing names one: the provider's own default, or for a
/// recording the default of the provider whose wire format it is in.
pub fn default_model(provider: &ProviderConfig) -> &'static str {
    match provider {
        ProviderConfig::Http { credential, .. } => credential.info().default_model,
        ProviderConfig::Replay { wire } => ProviderId::of_wire(*wire).info().default_model,
    }
}

/// `--provider NAME`, checked.
pub fn parse_provider(name: &str) -> anyhow::Result<ProviderId> {
    ProviderId::parse(name).ok_or_else(|| {
        usage(format!(
            "unknown provider {name:?} (expected {})",
            ProviderId::DETECT_ORDER.map(ProviderId::as_str).join(", ")
        ))
    })
}

fn credential_hint() -> String {
    let vars: Vec<&str> = ProviderId::DETECT_ORDER
        .iter()
        .flat_map(|p| p.info().credential_env.iter().copied())
        .collect();
    vars.join(", ")
}

/// Load `cassette` into the model worker and replay it, or pick the provider (`provider`, else
/// the broker's auto-detection) and its endpoint. A `base_url` given by the user is added to the
/// broker's allow-list for this run. A missing credential or a refused URL is a usage error
/// (exit 2): nothing has run yet.
pub async fn resolve(
    sup: &Supervisor,
    cassette: Option<String>,
    provider: Option<ProviderId>,
    wire: Option<WireFormat>,
    base_url: Option<&str>,
) -> anyhow::Result<ProviderConfig> {
    let limit = Deadlines::default().request;
    if let Some(jsonl) = cassette {
        let reply = within(
            Role::Model,
            "loading the cassette",
            limit,
            sup.model.call(model::Request::LoadCassette { jsonl }),
        )
        .await?;
        match reply {
            Ok(model::Response::CassetteLoaded { .. }) => {}
            Ok(other) => {
                return Err(failed(format!(
                    "unexpected reply to the cassette: {other:?}"
                )))
            }
            Err(hanzo_ipc::channel::CallError::Remote { error, .. }) => {
                return Err(usage(format!(
                    "the cassette cannot be played: {}",
                    error.message
                )))
            }
            Err(e) => return Err(failed(format!("cannot load the cassette: {e}"))),
        }
        return Ok(ProviderConfig::Replay {
            wire: wire.unwrap_or(WireFormat::AnthropicMessages),
        });
    }
    let report = match within(
        Role::Broker,
        "the credential check",
        limit,
        sup.broker.call(broker::Request::DescribeCredentials),
    )
    .await?
    {
        Ok(broker::Response::Credentials(report)) => report,
        Ok(other) => return Err(failed(format!("unexpected broker reply {other:?}"))),
        Err(e) => {
            return Err(failed(format!(
                "cannot ask the broker for credentials: {e}"
            )))
        }
    };
    let provider = match provider {
        Some(p) if report.available.iter().any(|(q, _)| *q == p) => p,
        Some(p) => {
            return Err(usage(format!(
                "no credential for {p}: set {} (or add it to the credentials file), or use \
                 --replay FILE",
                p.info().credential_env.join(" or ")
            )))
        }
        None => report.detected.ok_or_else(|| {
            usage(format!(
                "no model credential found. Set {}, log in with `hanzo-dev login`, use --replay FILE, or try `hanzo-dev run \
                 --demo`.",
                credential_hint()
            ))
        })?,
    };
    let wire = wire.unwrap_or(provider.info().wire);
    let base_url = match base_url {
        Some(url) => {
            // An explicit user decision, for this run only: the broker may reach that endpoint.
            let allowed = within(
                Role::Broker,
                "the endpoint check",
                limit,
                sup.broker
                    .call(broker::Request::AllowEndpoints(vec![Endpoint {
                        provider,
                        base_url: url.to_string(),
                    }])),
            )
            .await?;
            if let Err(e) = allowed {
                let why = match &e {
                    hanzo_ipc::channel::CallError::Remote { error, .. } => error.message.clone(),
                    other => other.to_string(),
                };
                return Err(usage(format!("--base-url {url} cannot be used: {why}")));
            }
            url.to_string()
        }
        None => provider.info().base_url.to_string(),
    };
    Ok(ProviderConfig::Http {
        wire,
        credential: provider,
        base_url,
    })
}
