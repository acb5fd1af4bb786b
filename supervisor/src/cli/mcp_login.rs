//! `hanzo-dev mcp login SERVER [--device]` and `hanzo-dev mcp logout SERVER`: OAuth for a
//! remote (streamable-HTTP) MCP server of the settings.
//!
//! As for `hanzo-dev login`, the whole flow runs in the broker worker (started alone): the
//! supervisor sends the server's name and configured URL — only a server the settings configure
//! and may start (a `url` from an untrusted workspace is not) — prints what the broker streams
//! (the authorization URL, sanitised, opened in a browser when there is one; or the device
//! code), and prints what was stored. The broker finds the authorization server from the
//! server's own challenge and protected-resource metadata, and keeps the tokens in
//! `credentials.json` as `mcp:<server>`, bound to the server's URL. No token reaches this
//! process.

use super::exit;
use super::login::{broker_only, printable, relative, show_progress};
use crate::mcp::McpPlan;
use crate::secrets::StartEnv;
use crate::startup::config_dir;
use crate::tree::Supervisor;
use anyhow::Context;
use hanzo_ipc::channel::StreamPart;
use hanzo_ipc::roles::broker::{self, LoginOutcome, McpLoginRequest};
use hanzo_ipc::roles::mcp::McpTransport;
use hanzo_ipc::roles::mcphttp::{McpLogin, McpRemote};

/// What `hanzo-dev mcp login` was asked.
pub struct LoginArgs<'a> {
    /// The remote server, by its name in `mcp_servers`.
    pub server: &'a str,
    /// Use the device authorization grant (RFC 8628) instead of a browser.
    pub device: bool,
    /// Seconds to wait for the browser or for the code's approval.
    pub timeout: u32,
}

/// The configured URL of remote server `server`, or why it cannot be logged in to.
fn remote_url(plan: &McpPlan, server: &str) -> Result<String, String> {
    if let Some(s) = plan.config.servers.iter().find(|s| s.name == server) {
        return match &s.transport {
            McpTransport::Http { url, .. } => Ok(url.clone()),
            McpTransport::Stdio { .. } => Err(format!(
                "MCP server {} is a stdio server (a `command`); only remote (`url`) servers \
                 take an OAuth login",
                printable(server)
            )),
        };
    }
    if let Some((_, _, state, reason)) = plan.not_started.iter().find(|r| r.0 == server) {
        return Err(format!(
            "MCP server {} is {state}: {}",
            printable(server),
            printable(reason)
        ));
    }
    Err(format!(
        "no MCP server named {} is configured (see `hanzo-dev mcp list`)",
        printable(server)
    ))
}

/// The broker may write only beneath the config directory, which must exist when it starts.
fn ensure_config_dir(env: &StartEnv) -> anyhow::Result<Option<std::path::PathBuf>> {
    let Some(dir) = config_dir(env) else {
        return Ok(None);
    };
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(Some(dir))
}

/// Logs in to the remote server `args.server` of `plan` through the broker, which keeps the
/// tokens; returns the exit code.
pub async fn login(args: &LoginArgs<'_>, plan: &McpPlan, env: StartEnv) -> anyhow::Result<i32> {
    let url = match remote_url(plan, args.server) {
        Ok(u) => u,
        Err(why) => {
            eprintln!("error: {why}");
            return Ok(exit::USAGE);
        }
    };
    if ensure_config_dir(&env)?.is_none() {
        eprintln!("error: neither XDG_CONFIG_HOME nor HOME is set, so there is nowhere to store the login");
        return Ok(exit::USAGE);
    }
    let (sup, _run_dir) = broker_only(&env).await?;
    let result = run_login(args, &url, &env, &sup).await;
    sup.shutdown().await;
    result
}

async fn run_login(
    args: &LoginArgs<'_>,
    url: &str,
    env: &StartEnv,
    sup: &Supervisor,
) -> anyhow::Result<i32> {
    let request = broker::Request::McpLogin(McpLoginRequest {
        remote: McpRemote {
            server: args.server.to_string(),
            url: url.to_string(),
            client_id: None,
            scopes: Vec::new(),
            client_metadata_url: None,
            client_env: None,
            login: McpLogin::Never,
            headers: Vec::new(),
            settings_headers: Vec::new(),
        },
        device: args.device,
        timeout_secs: args.timeout,
    });
    // Which URL the settings name (a project's settings may set one): the user sees it first.
    eprintln!(
        "Logging in to MCP server {} at {}…",
        printable(args.server),
        printable(url)
    );
    let mut stream = sup.broker.call_stream(request).await?;
    while let Some(part) = stream.next().await {
        match part {
            Ok(StreamPart::Item(broker::Item::Login(p))) => show_progress(env, &p),
            Ok(StreamPart::Item(_)) => {}
            Ok(StreamPart::Done(broker::Response::LoggedIn(outcome))) => {
                println!("{}", describe(args.server, url, &outcome));
                return Ok(exit::OK);
            }
            Ok(StreamPart::Done(other)) => anyhow::bail!("unexpected broker reply {other:?}"),
            Err(e) => {
                eprintln!(
                    "error: login to MCP server {} failed: {}",
                    printable(args.server),
                    printable(&e.to_string())
                );
                return Ok(exit::FAILED);
            }
        }
    }
    anyhow::bail!("the broker ended the login without an answer")
}

fn describe(server: &str, url: &str, o: &LoginOutcome) -> String {
    let mut s = format!(
        "Logged in to MCP server {} at {} (OAuth",
        printable(server),
        printable(url)
    );
    if let Some(t) = o.expires_at {
        s.push_str(&format!("; the access token expires {}", relative(t)));
    }
    if !o.scopes.is_empty() {
        s.push_str(&format!("; scopes: {}", printable(&o.scopes.join(" "))));
    }
    s.push_str(").");
    s
}

/// `hanzo-dev mcp logout SERVER`: the server need not be configured any more.
pub async fn logout(server: &str, env: StartEnv) -> anyhow::Result<i32> {
    if let Err(e) = hanzo_mcp::validate_server_name(server) {
        eprintln!("error: {}", printable(&e.to_string()));
        return Ok(exit::USAGE);
    }
    let Some(dir) = config_dir(&env) else {
        eprintln!("error: neither XDG_CONFIG_HOME nor HOME is set, so no credential is stored");
        return Ok(exit::USAGE);
    };
    if !dir
        .join(hanzo_broker::credentials::CREDENTIALS_FILE)
        .exists()
    {
        println!("No stored credential for MCP server {}.", printable(server));
        return Ok(exit::OK);
    }
    let (sup, _run_dir) = broker_only(&env).await?;
    let reply = sup
        .broker
        .call(broker::Request::Logout {
            provider: format!("mcp:{server}"),
        })
        .await;
    sup.shutdown().await;
    match reply {
        Ok(broker::Response::LoggedOut { removed, .. }) => {
            if removed {
                println!(
                    "Logged out of MCP server {}: its stored tokens were removed.",
                    printable(server)
                );
            } else {
                println!("No stored credential for MCP server {}.", printable(server));
            }
            Ok(exit::OK)
        }
        Ok(other) => anyhow::bail!("unexpected broker reply {other:?}"),
        Err(e) => {
            eprintln!("error: logout failed: {}", printable(&e.to_string()));
            Ok(exit::FAILED)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hanzo_ipc::roles::mcp::{McpConfig, McpServerConfig};

    fn plan() -> McpPlan {
        let server = |name: &str, transport| McpServerConfig {
            name: name.into(),
            transport,
            initialize_timeout_ms: 1,
            call_timeout_ms: 1,
            elicitation_defaults: false,
            max_result_bytes: None,
        };
        McpPlan {
            config: McpConfig {
                servers: vec![
                    server(
                        "docs",
                        McpTransport::Http {
                            url: "https://mcp.example/mcp".into(),
                            credential: Some("mcp:docs".into()),
                        },
                    ),
                    server(
                        "local",
                        McpTransport::Stdio {
                            command: "srv".into(),
                            args: vec![],
                            env: Default::default(),
                            cwd: None,
                            profile: hanzo_ipc::roles::mcp::McpServerProfile {
                                filesystem: hanzo_ipc::roles::mcp::McpFilesystem::WorkspaceRo,
                                extra_read: vec![],
                                network: false,
                                egress_address: None,
                            },
                        },
                    ),
                ],
                roots: vec![],
                max_result_bytes: 0,
                max_message_bytes: 0,
            },
            not_started: vec![(
                "proj".into(),
                "http".into(),
                "skipped".into(),
                "its `url` comes from this workspace's settings, which are not trusted".into(),
            )],
            network: Vec::new(),
            headers: Vec::new(),
        }
    }

    #[test]
    fn only_a_startable_remote_server_can_be_logged_in_to() {
        let p = plan();
        assert_eq!(
            remote_url(&p, "docs").as_deref(),
            Ok("https://mcp.example/mcp")
        );
        assert!(remote_url(&p, "local")
            .unwrap_err()
            .contains("stdio server"));
        let untrusted = remote_url(&p, "proj").unwrap_err();
        assert!(untrusted.contains("skipped") && untrusted.contains("not trusted"));
        assert!(remote_url(&p, "nosuch\x1b[2J")
            .unwrap_err()
            .contains("no MCP server named nosuch␛[2J"));
    }
}
