//! The client side of the official MCP conformance suite (`@modelcontextprotocol/conformance`):
//! the harness starts a scenario's server, runs a client with the server URL as its last
//! argument and the scenario's name in `MCP_CONFORMANCE_SCENARIO`, and judges what the server
//! saw. [`run`] is that client's logic, over any [`HttpClient`] (in the product: the broker).

use crate::classify::CallOutcome;
use crate::client::{CallOptions, ClientOptions, McpClient};
use crate::http::HttpClient;
use crate::requests::AcceptSchemaDefaults;
use serde_json::{json, Value};
use std::sync::Arc;

/// The environment variable naming the scenario.
pub const SCENARIO_ENV: &str = "MCP_CONFORMANCE_SCENARIO";

/// The client scenarios of conformance 0.1.16 that need no OAuth, with the tool each one calls.
/// The `auth/*` scenarios need the broker's MCP authorization flow: they are run against
/// `hanzo-dev mcp conformance-client` (the supervisor's `mcp_conformance` tests), not here.
pub const SCENARIOS: &[(&str, Option<&str>)] = &[
    ("initialize", None),
    ("tools_call", Some("add_numbers")),
    (
        "elicitation-sep1034-client-defaults",
        Some("test_client_elicitation_defaults"),
    ),
    ("sse-retry", Some("test_reconnection")),
];

/// What this client says of an `auth/*` scenario (after its name) when it refuses it.
pub const AUTH_ELSEWHERE: &str = "needs OAuth, which hanzo-dev does in its broker: run it with \
     `hanzo-dev mcp conformance-client`; this client has no broker";

/// The scenario named in the environment.
pub fn scenario_from_env() -> Option<String> {
    std::env::var(SCENARIO_ENV).ok().filter(|s| !s.is_empty())
}

/// Run `scenario` against `url`. Exit codes: 0 the client did its part, 1 it failed, 2 the
/// scenario is unknown, or needs OAuth, which is the broker's ([`AUTH_ELSEWHERE`]) and which
/// this client over a bare [`HttpClient`] therefore cannot do.
pub async fn run(scenario: &str, url: &str, http: Arc<dyn HttpClient>) -> i32 {
    let Some((_, tool)) = SCENARIOS.iter().find(|(name, _)| *name == scenario) else {
        if scenario.starts_with("auth/") {
            eprintln!("conformance: scenario {scenario:?} {AUTH_ELSEWHERE}");
        } else {
            eprintln!("conformance: unknown scenario {scenario:?}");
        }
        return 2;
    };
    let mut options = ClientOptions::default();
    if scenario == "elicitation-sep1034-client-defaults" {
        // The scenario checks SEP-1034 defaults; the product enables this only when configured.
        options.elicitation = Some(Arc::new(AcceptSchemaDefaults));
    }
    match drive(url, http, options, *tool).await {
        Ok(()) => {
            eprintln!("conformance: {scenario}: done");
            0
        }
        Err(e) => {
            eprintln!("conformance: {scenario}: {e}");
            1
        }
    }
}

async fn drive(
    url: &str,
    http: Arc<dyn HttpClient>,
    options: ClientOptions,
    tool: Option<&str>,
) -> Result<(), String> {
    let client = McpClient::connect_http("conformance", url, http, options)
        .await
        .map_err(|e| e.to_string())?;
    let info = client.server_info();
    eprintln!(
        "conformance: connected to {:?} {:?}, protocol {}",
        info.name, info.version, info.protocol_version
    );
    let result = match tool {
        None => Ok(()),
        Some(tool) => call(&client, tool).await,
    };
    client.shutdown().await;
    result
}

async fn call(client: &McpClient, tool: &str) -> Result<(), String> {
    let tools = client.tools();
    let listed = tools
        .tools
        .iter()
        .find(|t| t.name == tool)
        .ok_or_else(|| format!("the server does not list the tool {tool:?}"))?;
    let args = arguments_for(&listed.input_schema);
    match client.call_tool(tool, args, CallOptions::default()).await {
        Ok(CallOutcome::Allowed(r)) if !r.is_error => {
            eprintln!(
                "conformance: {tool} answered: {}",
                crate::jsonrpc::excerpt(&r.value.to_string(), 300)
            );
            Ok(())
        }
        Ok(CallOutcome::Allowed(r)) => Err(format!("{tool} reported a tool error: {}", r.value)),
        Ok(other) => Err(format!("{tool}: {} ({other:?})", other.kind())),
        Err(e) => Err(e.to_string()),
    }
}

/// Arguments for the scenario tools: numbers for every required number (`add_numbers`).
pub fn arguments_for(schema: &Value) -> Value {
    let mut args = serde_json::Map::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        let mut n = 2;
        for (name, prop) in props {
            if prop.get("type").and_then(Value::as_str) == Some("number") {
                args.insert(name.clone(), json!(n));
                n += 1;
            }
        }
    }
    Value::Object(args)
}
