//! `hanzo-dev mcp list | tools [SERVER] | call SERVER TOOL [JSON]`: the configured MCP servers,
//! started in the sandboxed mcp worker exactly as a run starts them, their tools under the names
//! the model sees, and one call through the permission policy. All with `--json`.
//! `hanzo-dev mcp login | logout SERVER`: a remote server's OAuth login, in the broker
//! (`super::mcp_login`).

use super::exit;
use crate::mcp::{plan_for, McpPlan};
use crate::secrets::StartEnv;
use crate::startup::supervisor_config;
use crate::tree::Supervisor;
use hanzo_ipc::roles::mcp::{
    McpCallOutcome, McpServerState, McpServerStatus, McpToolCall, McpToolInfo, Request, Response,
};
use hanzo_ipc::roles::mcphttp::McpLogin;
use hanzo_ipc::Role;
use hanzo_policy::permission::{PermissionMode, RuleList, ScopedPolicy};
use hanzo_policy::settings::{load, CliOverrides, LoadedSettings, SettingsSources};
use serde_json::{json, Value};

/// What `hanzo-dev mcp` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which `mcp` command to run.
    #[command(subcommand)]
    pub command: McpCommand,
}

/// The `mcp` commands.
#[derive(Debug, clap::Subcommand)]
pub enum McpCommand {
    /// Every configured server: transport, state, tool count, and why one is disabled or skipped.
    List {
        /// Print `{"servers": […]}` as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The tools of one server (or of all), as `mcp__<server>__<tool>`.
    Tools {
        /// The server, by its name in `mcp_servers` (default: every server).
        server: Option<String>,
        /// Print `{"tools": […]}` as JSON, input schemas included.
        #[arg(long)]
        json: bool,
    },
    /// Call one tool through the permission policy (`prompt` needs `--yes`).
    Call {
        /// The server, by its name in `mcp_servers`.
        server: String,
        /// The tool's name on that server (without the `mcp__<server>__` prefix).
        tool: String,
        /// The arguments, a JSON object (default `{}`).
        #[arg(long = "args", value_name = "JSON")]
        args_flag: Option<String>,
        /// The arguments as a positional JSON object.
        args: Option<String>,
        /// Approve a call the policy would prompt for.
        #[arg(long)]
        yes: bool,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Log in to a remote MCP server with OAuth (the server's authorization server, found from
    /// its protected-resource metadata). The tokens stay in the broker's credentials.json,
    /// bound to the server's URL; later runs and `mcp` commands use them.
    Login {
        /// The remote server, by its name in `mcp_servers`.
        server: String,
        /// Use the device authorization grant (RFC 8628), for machines without a browser.
        #[arg(long)]
        device: bool,
        /// Seconds to wait for the browser or for the code's approval.
        #[arg(long, default_value_t = 300)]
        timeout: u32,
    },
    /// Forget a remote MCP server's stored tokens (its next request is a denial).
    Logout {
        /// The remote server, by its name in `mcp_servers`.
        server: String,
    },
    /// A client the official MCP conformance suite drives: the scenario comes from
    /// `MCP_CONFORMANCE_SCENARIO`, the server URL is the last argument. Runs through the broker
    /// and the mcp worker like every remote server; settings' servers are not started.
    #[command(name = "conformance-client", hide = true)]
    ConformanceClient {
        /// The scenario server's URL (appended by the harness).
        url: String,
    },
}

/// Runs `hanzo-dev mcp …`; returns the exit code.
pub async fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    match &args.command {
        McpCommand::ConformanceClient { url } => {
            return crate::cli::mcp_conformance::run(url, env).await;
        }
        McpCommand::Logout { server } => return super::mcp_login::logout(server, env).await,
        _ => {}
    }
    let cwd = std::env::current_dir()?;
    let src = SettingsSources::resolve(
        &cwd,
        env.vars.iter().cloned().collect(),
        CliOverrides::default(),
    );
    let loaded = match load(&src) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(exit::USAGE);
        }
    };
    for w in loaded.warnings() {
        eprintln!("warning: {w}");
    }
    let plan = match plan_for(&loaded, &cwd) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(exit::USAGE);
        }
    };
    if let McpCommand::Login {
        server,
        device,
        timeout,
    } = &args.command
    {
        let login = super::mcp_login::LoginArgs {
            server,
            device: *device,
            timeout: *timeout,
        };
        return super::mcp_login::login(&login, &plan, env).await;
    }
    let kernel = hanzo_sandbox::doctor::probe_kernel();
    let (mut cfg, _run_dir) = supervisor_config(Some(cwd.clone()), &env, kernel.landlock_abi)?;
    cfg.ctx.mcp_workspace_write = plan.wants_workspace_write();
    cfg.ctx.mcp_extra_read = plan.extra_reads();
    // The secrets servers are given reach the broker alone, whatever their names.
    cfg.secret_names.extend(
        crate::mcp::secret_grants(&plan.config)
            .into_iter()
            .flat_map(|g| g.names),
    );
    // Remote servers are reached, and secrets given, through the broker: it runs only when one
    // is configured.
    cfg.roles = Some(
        if crate::mcp::has_remote(&plan.config) || crate::mcp::has_secrets(&plan.config) {
            vec![Role::Broker, Role::Mcp]
        } else {
            vec![Role::Mcp]
        },
    );
    let sup = Supervisor::start(cfg).await?;
    let code = with_tree(&sup, args, &plan, &loaded).await;
    sup.shutdown().await;
    code
}

async fn with_tree(
    sup: &Supervisor,
    args: &Args,
    plan: &McpPlan,
    loaded: &LoadedSettings,
) -> anyhow::Result<i32> {
    sup.wait_ready().await?;
    if crate::mcp::has_remote(&plan.config) {
        crate::mcp::allow_remotes(sup, &plan.config, McpLogin::Never).await?;
    }
    if crate::mcp::has_secrets(&plan.config) {
        crate::mcp::allow_secrets(&sup.broker, &plan.config).await?;
    }
    let statuses = match sup
        .mcp
        .call_within(
            Request::Configure(plan.config.clone()),
            crate::mcp::configure_limit(&plan.config),
        )
        .await?
    {
        Response::Servers(s) => s,
        other => anyhow::bail!("the mcp worker answered Configure with {other:?}"),
    };
    match &args.command {
        McpCommand::List { json } => {
            print_list(&statuses, plan, *json);
            Ok(exit::OK)
        }
        McpCommand::Tools { server, json } => {
            if let Some(s) = server {
                if !statuses.iter().any(|st| &st.name == s) {
                    eprintln!(
                        "error: no MCP server named {s:?} is running (see `hanzo-dev mcp list`)"
                    );
                    return Ok(exit::USAGE);
                }
            }
            let tools = match sup
                .mcp
                .call(Request::ListTools {
                    server: server.clone(),
                })
                .await?
            {
                Response::Tools(t) => t,
                other => anyhow::bail!("the mcp worker answered ListTools with {other:?}"),
            };
            print_tools(&tools, *json);
            Ok(exit::OK)
        }
        McpCommand::ConformanceClient { .. }
        | McpCommand::Login { .. }
        | McpCommand::Logout { .. } => {
            unreachable!("handled before the tree starts")
        }
        McpCommand::Call {
            server,
            tool,
            args_flag,
            args,
            yes,
            json,
        } => {
            let arguments = args_flag
                .as_deref()
                .or(args.as_deref())
                .unwrap_or("{}")
                .to_string();
            let input: Value = match serde_json::from_str(&arguments) {
                Ok(v @ Value::Object(_)) => v,
                _ => {
                    eprintln!("error: the arguments must be a JSON object, e.g. '{{\"a\": 1}}'");
                    return Ok(exit::USAGE);
                }
            };
            let qualified = hanzo_mcp::qualified_tool_name(server, tool);
            let policy = policy_of(loaded)?;
            let decision = policy.evaluate(&qualified, &input);
            match decision.mode {
                PermissionMode::Allow => {}
                PermissionMode::Prompt if *yes => {}
                PermissionMode::Prompt => {
                    eprintln!(
                        "error: the permission policy asks before {qualified} runs; pass --yes to approve this call, or add an allow rule for it"
                    );
                    return Ok(exit::FAILED);
                }
                PermissionMode::Deny => {
                    eprintln!("error: the permission policy denies {qualified}");
                    return Ok(exit::FAILED);
                }
            }
            let outcome = match sup
                .mcp
                .call(Request::CallTool(McpToolCall {
                    server: server.clone(),
                    tool: tool.clone(),
                    arguments_json: arguments,
                    timeout_ms: None,
                }))
                .await?
            {
                Response::Call(o) => o,
                other => anyhow::bail!("the mcp worker answered CallTool with {other:?}"),
            };
            print_outcome(&outcome, *json);
            Ok(match outcome {
                McpCallOutcome::Allowed {
                    is_error: false, ..
                } => exit::OK,
                McpCallOutcome::Denied { .. } => exit::FAILED,
                _ => exit::FAILED,
            })
        }
    }
}

fn policy_of(loaded: &LoadedSettings) -> anyhow::Result<ScopedPolicy> {
    let p = &loaded.merged.config.permissions;
    let list = |rules: &[hanzo_policy::permission::PermissionRule]| {
        RuleList::new(rules.to_vec()).map_err(|e| anyhow::anyhow!("permission rules: {e}"))
    };
    Ok(ScopedPolicy::new(
        list(&p.user)?,
        list(&p.project)?,
        list(&p.local)?,
        loaded.trust_check.is_trusted(),
    ))
}

fn state_text(s: &McpServerState) -> (String, Option<String>) {
    match s {
        McpServerState::Starting => ("starting".into(), None),
        McpServerState::Ready => ("ready".into(), None),
        McpServerState::Failed { reason } => ("failed".into(), Some(reason.clone())),
        McpServerState::Restarting { attempt, reason } => {
            (format!("restarting ({attempt})"), Some(reason.clone()))
        }
        McpServerState::Stopped => ("stopped".into(), None),
    }
}

fn print_list(statuses: &[McpServerStatus], plan: &McpPlan, json: bool) {
    let mut rows: Vec<Value> = statuses
        .iter()
        .map(|s| {
            let (state, reason) = state_text(&s.state);
            // A ready server whose tools cannot be offered (two share a name) says why.
            let reason = reason.or_else(|| {
                s.tools_problem
                    .as_ref()
                    .map(|p| format!("none of its tools is offered: {p}"))
            });
            json!({
                "name": s.name, "transport": s.transport, "state": state,
                "tool_count": s.tool_count, "reason": reason,
                "protocol_version": s.protocol_version,
                "tools_offered": s.tools_problem.is_none(),
            })
        })
        .collect();
    for (name, transport, state, reason) in &plan.not_started {
        rows.push(json!({
            "name": name, "transport": transport, "state": state,
            "tool_count": 0, "reason": reason, "protocol_version": null,
            "tools_offered": false,
        }));
    }
    if json {
        println!("{}", json!({ "servers": rows }));
        return;
    }
    if rows.is_empty() {
        println!("no MCP servers are configured (add `mcp_servers` to settings.json)");
    }
    for r in rows {
        let reason = r["reason"]
            .as_str()
            .map(|s| format!(" — {}", crate::term::sanitize_line_for_terminal(s)))
            .unwrap_or_default();
        println!(
            "{}  {}  {}  {} tools{}",
            r["name"].as_str().unwrap_or_default(),
            r["transport"].as_str().unwrap_or_default(),
            r["state"].as_str().unwrap_or_default(),
            r["tool_count"],
            reason
        );
    }
}

fn print_tools(tools: &[McpToolInfo], json: bool) {
    if json {
        let rows: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({
                    "server": t.server, "tool": t.tool, "name": t.qualified_name,
                    "description": t.description,
                    "input_schema": serde_json::from_str::<Value>(&t.input_schema_json).unwrap_or(Value::Null),
                })
            })
            .collect();
        println!("{}", json!({ "tools": rows }));
        return;
    }
    for t in tools {
        let desc = t
            .description
            .as_deref()
            .map(|d| crate::term::sanitize_line_for_terminal(d.lines().next().unwrap_or_default()))
            .unwrap_or_default();
        println!("{}  {}", t.qualified_name, desc);
    }
}

fn print_outcome(o: &McpCallOutcome, json: bool) {
    let doc = match o {
        McpCallOutcome::Allowed {
            result_json,
            is_error,
            truncated,
            bytes,
        } => json!({
            "classification": "allowed", "is_error": is_error, "truncated": truncated,
            "bytes": bytes,
            "result": serde_json::from_str::<Value>(result_json).unwrap_or(Value::String(result_json.clone())),
        }),
        McpCallOutcome::Denied { reason } => json!({"classification": "denied", "reason": reason}),
        McpCallOutcome::Fault { reason } => json!({"classification": "fault", "reason": reason}),
        McpCallOutcome::Failed { kind, message } => {
            json!({"classification": "failed", "kind": format!("{kind:?}"), "reason": message})
        }
    };
    if json {
        println!("{doc}");
        return;
    }
    match o {
        McpCallOutcome::Allowed {
            result_json,
            truncated,
            bytes,
            ..
        } => {
            let v: Value = serde_json::from_str(result_json).unwrap_or(Value::Null);
            let text: Vec<&str> = v["content"]
                .as_array()
                .map(|c| c.iter().filter_map(|b| b["text"].as_str()).collect())
                .unwrap_or_default();
            // A cut result is the text of the cut JSON (it no longer parses as a result).
            if let Some(cut) = v.as_str().filter(|_| *truncated) {
                println!("{}", crate::term::sanitize_line_for_terminal(cut));
            } else if text.is_empty() {
                println!("{}", crate::term::sanitize_line_for_terminal(result_json));
            } else {
                println!(
                    "{}",
                    crate::term::sanitize_line_for_terminal(&text.join("\n"))
                );
            }
            // The same mark a run gives the model.
            if *truncated {
                println!("[hanzo-dev: the MCP result was cut; it had {bytes} bytes]");
            }
        }
        _ => eprintln!(
            "{}: {}",
            doc["classification"].as_str().unwrap_or_default(),
            crate::term::sanitize_line_for_terminal(doc["reason"].as_str().unwrap_or_default())
        ),
    }
}
