//! `hanzo-dev mcp conformance-client URL`: the client the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`) drives. The scenario comes from
//! `MCP_CONFORMANCE_SCENARIO`; the URL is the scenario server's.
//!
//! It goes the product's way: the broker and the mcp worker start as for any remote server, the
//! broker is told this one URL (`AllowMcpServers`, with [`McpLogin::Headless`] so that an OAuth
//! challenge is answered by the broker's MCP authorization flow, following the authorization URL
//! itself: the suite's authorization servers redirect at once; and with the suite's client
//! metadata document URL, used as `client_id` where the authorization server accepts one), the mcp worker is configured with
//! it (`Configure`: `initialize`, the tool list), and the scenario's tool is called (`CallTool`).
//! Tokens go to a credential file in the run's private directory, so no scenario sees another's
//! and the user's `credentials.json` is never touched.
//!
//! Exit codes: 0 the client did its part, 1 it failed, 2 the scenario is unknown.

use super::exit;
use crate::mcp::remotes_of;
use crate::secrets::StartEnv;
use crate::startup::supervisor_config;
use crate::tree::Supervisor;
use hanzo_ipc::roles::broker;
use hanzo_ipc::roles::mcp::{
    McpCallOutcome, McpConfig, McpServerConfig, McpServerState, McpToolCall, McpTransport, Request,
    Response,
};
use hanzo_ipc::roles::mcphttp::McpLogin;
use hanzo_ipc::Role;
use hanzo_mcp::conformance::{arguments_for, SCENARIOS, SCENARIO_ENV};
use std::time::Duration;

/// The server's name in the worker (and its token's key, `mcp:conformance`).
const SERVER: &str = "conformance";
/// The tool every auth scenario's server lists.
const AUTH_TOOL: &str = "test-tool";
/// The client metadata document the suite's scenarios expect a client to present as its
/// `client_id` where the authorization server accepts one (`auth/basic-cimd`). Nothing is
/// served there: the suite's authorization server takes the URL without fetching it.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";
/// Where the harness puts a scenario's context (a pre-registered client and its secret).
const CONTEXT_ENV: &str = "MCP_CONFORMANCE_CONTEXT";
/// Time for `initialize`, an OAuth flow included.
const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(90);

/// What a scenario asks of the client: the tool to call (if any), and whether elicitation is
/// answered with the schema's defaults.
fn plan(scenario: &str) -> Option<(Option<&'static str>, bool)> {
    if scenario.starts_with("auth/") {
        return Some((Some(AUTH_TOOL), false));
    }
    SCENARIOS
        .iter()
        .find(|(name, _)| *name == scenario)
        .map(|(name, tool)| (*tool, *name == "elicitation-sep1034-client-defaults"))
}

/// Run the scenario named in the environment against `url`; the process's exit code.
pub async fn run(url: &str, env: StartEnv) -> anyhow::Result<i32> {
    let scenario = env
        .vars
        .iter()
        .find(|(k, _)| k == SCENARIO_ENV)
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let Some((tool, elicitation_defaults)) = plan(&scenario) else {
        eprintln!("conformance: unknown scenario {scenario:?} (set {SCENARIO_ENV})");
        return Ok(exit::USAGE);
    };
    let kernel = hanzo_sandbox::doctor::probe_kernel();
    let (mut cfg, run_dir) = supervisor_config(None, &env, kernel.landlock_abi)?;
    let config_dir = run_dir.path().join("conformance-config");
    std::fs::create_dir(&config_dir)?;
    cfg.ctx.config_dir = Some(config_dir);
    cfg.roles = Some(vec![Role::Broker, Role::Mcp]);
    let sup = Supervisor::start(cfg).await?;
    let outcome = drive(&sup, url, tool, elicitation_defaults).await;
    // Closing the session (DELETE) before the workers stop.
    let _ = sup
        .mcp
        .call_within(
            Request::Configure(McpConfig {
                servers: Vec::new(),
                roots: Vec::new(),
                max_result_bytes: 0,
                max_message_bytes: 0,
            }),
            Duration::from_secs(10),
        )
        .await;
    sup.shutdown().await;
    drop(run_dir);
    Ok(match outcome {
        Ok(()) => {
            eprintln!("conformance: {scenario}: done");
            exit::OK
        }
        Err(e) => {
            eprintln!(
                "conformance: {scenario}: {}",
                crate::term::sanitize_line_for_terminal(&e)
            );
            exit::FAILED
        }
    })
}

async fn drive(
    sup: &Supervisor,
    url: &str,
    tool: Option<&str>,
    elicitation_defaults: bool,
) -> Result<(), String> {
    sup.wait_ready().await.map_err(|e| e.to_string())?;
    let config = McpConfig {
        servers: vec![McpServerConfig {
            name: SERVER.into(),
            transport: McpTransport::Http {
                url: url.to_string(),
                credential: Some(format!("mcp:{SERVER}")),
            },
            initialize_timeout_ms: u64::try_from(INITIALIZE_TIMEOUT.as_millis())
                .unwrap_or(u64::MAX),
            call_timeout_ms: crate::mcp::CALL_TIMEOUT_MS,
            elicitation_defaults,
            max_result_bytes: None,
        }],
        roots: Vec::new(),
        max_result_bytes: crate::mcp::MAX_RESULT_BYTES,
        max_message_bytes: crate::mcp::MAX_MESSAGE_BYTES,
    };
    let mut remotes = remotes_of(&config, McpLogin::Headless);
    for r in &mut remotes {
        r.client_metadata_url = Some(CLIENT_METADATA_URL.into());
        // A scenario's pre-registered client (`auth/pre-registration`) arrives in the
        // harness's context. Named a secret (`HANZO_SECRET_ENV`), it reaches the broker's
        // environment only; the broker reads the client from it.
        r.client_env = Some(CONTEXT_ENV.into());
    }
    match sup
        .broker
        .call(broker::Request::AllowMcpServers(remotes))
        .await
    {
        Ok(broker::Response::Configured { .. }) => {}
        Ok(other) => {
            return Err(format!(
                "the broker answered AllowMcpServers with {other:?}"
            ))
        }
        Err(e) => return Err(format!("the broker refused the remote MCP server: {e}")),
    }
    let within = INITIALIZE_TIMEOUT + Duration::from_secs(10);
    let statuses = match sup
        .mcp
        .call_within(Request::Configure(config), within)
        .await
    {
        Ok(Response::Servers(s)) => s,
        Ok(other) => return Err(format!("the mcp worker answered Configure with {other:?}")),
        Err(e) => return Err(e.to_string()),
    };
    match statuses.first().map(|s| &s.state) {
        Some(McpServerState::Ready) => {}
        Some(McpServerState::Failed { reason }) => return Err(reason.clone()),
        other => return Err(format!("the server is not ready: {other:?}")),
    }
    let Some(tool) = tool else { return Ok(()) };
    let tools = match sup.mcp.call(Request::ListTools { server: None }).await {
        Ok(Response::Tools(t)) => t,
        Ok(other) => return Err(format!("the mcp worker answered ListTools with {other:?}")),
        Err(e) => return Err(e.to_string()),
    };
    let listed = tools
        .iter()
        .find(|t| t.tool == tool)
        .ok_or_else(|| format!("the server does not list the tool {tool:?}"))?;
    let schema = serde_json::from_str(&listed.input_schema_json).unwrap_or_default();
    let call = McpToolCall {
        server: SERVER.into(),
        tool: tool.into(),
        arguments_json: arguments_for(&schema).to_string(),
        timeout_ms: None,
    };
    match sup.mcp.call(Request::CallTool(call)).await {
        Ok(Response::Call(McpCallOutcome::Allowed {
            is_error: false, ..
        })) => Ok(()),
        Ok(Response::Call(other)) => Err(format!("{tool}: {other:?}")),
        Ok(other) => Err(format!("the mcp worker answered CallTool with {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}
