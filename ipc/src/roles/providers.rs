//! What hanzo-dev knows about each model provider, in one table: where its API is, which wire
//! format it speaks, the model used when none is named, the hosts its credential may be sent to,
//! and the environment variables that hold that credential. The supervisor (`run`, `ask`), the
//! settings default, the broker's allow-list and the model worker all read it from here.

use super::model::{ProviderId, WireFormat};

/// One provider's facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderInfo {
    /// Which provider this row describes.
    pub id: ProviderId,
    /// The public API's base URL (for OpenAI-style APIs it ends in `/v1`).
    pub base_url: &'static str,
    /// The wire format of that API.
    pub wire: WireFormat,
    /// The model asked for when neither the command line, the agent nor the settings name one.
    pub default_model: &'static str,
    /// Hosts the broker may send this provider's credential to, over https on port 443 (more
    /// only by an explicit, trusted `--base-url` or setting).
    pub hosts: &'static [&'static str],
    /// Environment variables holding the credential, in the order they are looked at.
    pub credential_env: &'static [&'static str],
}

/// Every provider, in auto-detection order (HIP-0301 §13).
pub const PROVIDERS: [ProviderInfo; 3] = [
    ProviderInfo {
        id: ProviderId::Hanzo,
        base_url: "https://api.hanzo.ai/v1",
        wire: WireFormat::OpenAiChat,
        default_model: "gpt-4o-mini",
        hosts: &["api.hanzo.ai"],
        credential_env: &["HANZO_API_KEY"],
    },
    ProviderInfo {
        id: ProviderId::Anthropic,
        base_url: "https://api.anthropic.com",
        wire: WireFormat::AnthropicMessages,
        default_model: "claude-sonnet-4-20250514",
        hosts: &["api.anthropic.com"],
        credential_env: &["ANTHROPIC_API_KEY"],
    },
    ProviderInfo {
        id: ProviderId::OpenAi,
        base_url: "https://api.openai.com/v1",
        wire: WireFormat::OpenAiChat,
        default_model: "gpt-4o-mini",
        hosts: &["api.openai.com"],
        credential_env: &["OPENAI_API_KEY"],
    },
];

/// The model the settings name when no file, variable or flag does (Anthropic's default).
pub const DEFAULT_MODEL: &str = ProviderId::Anthropic.info().default_model;

impl ProviderId {
    /// This provider's row of [`PROVIDERS`].
    pub const fn info(self) -> &'static ProviderInfo {
        match self {
            ProviderId::Hanzo => &PROVIDERS[0],
            ProviderId::Anthropic => &PROVIDERS[1],
            ProviderId::OpenAi => &PROVIDERS[2],
        }
    }

    /// The provider whose own API speaks `wire` (for a recording, which names no provider).
    pub const fn of_wire(wire: WireFormat) -> ProviderId {
        match wire {
            WireFormat::AnthropicMessages => ProviderId::Anthropic,
            WireFormat::OpenAiChat => ProviderId::OpenAi,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_detection_order_and_each_row_is_its_own() {
        assert_eq!(
            PROVIDERS.map(|p| p.id),
            ProviderId::DETECT_ORDER,
            "auto-detection follows the table"
        );
        for p in ProviderId::DETECT_ORDER {
            assert_eq!(p.info().id, p);
            assert!(p.info().base_url.starts_with("https://"));
            let host = p.info().base_url.trim_start_matches("https://");
            assert!(
                p.info().hosts.iter().any(|h| host.starts_with(h)),
                "{p}: the base URL's host is allow-listed"
            );
            assert!(!p.info().credential_env.is_empty());
            assert_eq!(p.env_var(), p.info().credential_env[0]);
        }
        assert_eq!(
            ProviderId::of_wire(WireFormat::AnthropicMessages)
                .info()
                .wire,
            WireFormat::AnthropicMessages
        );
        assert_eq!(
            ProviderId::of_wire(WireFormat::OpenAiChat).info().wire,
            WireFormat::OpenAiChat
        );
    }
}
