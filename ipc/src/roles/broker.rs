//! The broker channel (supervisor ↔ broker). Credential-free HTTP requests from the model worker
//! travel on the separate direct channel ([`super::http`]), not here. Nothing on this channel
//! carries a secret value: the supervisor learns which credentials exist, never what they are.

use super::model::ProviderId;
use super::{impl_protocol, CommonEvent, CommonItem, CommonRequest, CommonResponse};
use crate::Role;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Common(CommonRequest),
    /// Add endpoints to the allow-list (from trusted configuration: settings or CLI flags, never
    /// from a model). Replies [`Response::Configured`] or a `Refused` error naming the bad URL.
    AllowEndpoints(Vec<Endpoint>),
    /// Which providers have a credential, from where, and which one auto-detection picks.
    DescribeCredentials,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Common(CommonResponse),
    Configured { endpoints: u32 },
    Credentials(CredentialReport),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    Common(CommonItem),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    Common(CommonEvent),
}

impl_protocol!(BrokerProtocol, Role::Broker);

/// A base URL the broker may send `provider`'s credential to: `https://host[:port][/path]`, or
/// `http://` to a loopback address (a local server such as Ollama).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub provider: ProviderId,
    pub base_url: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CredentialSource {
    /// A secret environment variable handed to the broker at start.
    Env,
    /// `api_key` in the user settings file.
    UserSettings,
    /// `$XDG_CONFIG_HOME/hanzo/credentials.json`.
    CredentialFile,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialReport {
    pub available: Vec<(ProviderId, CredentialSource)>,
    /// The first provider with a credential in the order Hanzo, Anthropic, OpenAI.
    pub detected: Option<ProviderId>,
    /// Problems met while loading (a refused credential file, …); never contains a secret.
    pub warnings: Vec<String>,
}
