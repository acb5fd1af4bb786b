//! `hanzo-dev auth status [--json]`: which credentials the broker holds — provider, kind,
//! source, expiry, scopes — and which one auto-detection picks. Never a token, not even a
//! prefix: the broker's answer carries none. Starts the broker alone.

use super::exit;
use super::login::{broker_only, printable, relative};
use crate::secrets::StartEnv;
use hanzo_ipc::roles::broker::{self, AuthStatusReport, CredentialSource};

/// What `hanzo-dev auth` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which `auth` command to run.
    #[command(subcommand)]
    pub command: AuthCommand,
}

/// The `auth` commands.
#[derive(Debug, clap::Subcommand)]
pub enum AuthCommand {
    /// Show the credentials the broker holds (never their values).
    Status {
        /// One JSON object on stdout (format in docs/auth-status.md).
        #[arg(long)]
        json: bool,
    },
}

fn source_name(s: CredentialSource) -> &'static str {
    match s {
        CredentialSource::Env => "environment",
        CredentialSource::UserSettings => "user settings",
        CredentialSource::CredentialFile => "credentials.json",
    }
}

fn source_key(s: CredentialSource) -> &'static str {
    match s {
        CredentialSource::Env => "env",
        CredentialSource::UserSettings => "user_settings",
        CredentialSource::CredentialFile => "credential_file",
    }
}

/// The `--json` form (an API boundary: documented in `docs/auth-status.md`).
pub fn status_json(r: &AuthStatusReport) -> serde_json::Value {
    serde_json::json!({
        "detected": r.detected.map(|p| p.as_str()),
        "credentials": r.entries.iter().map(|e| serde_json::json!({
            "provider": e.name,
            "kind": e.kind.as_str(),
            "source": source_key(e.source),
            "expires_at": e.expires_at,
            "scopes": e.scopes,
            "refreshable": e.refreshable,
            "resource": e.resource,
        })).collect::<Vec<_>>(),
        "warnings": r.warnings,
    })
}

fn status_text(r: &AuthStatusReport) -> String {
    let mut out = String::new();
    if r.entries.is_empty() {
        let vars: Vec<&str> = hanzo_ipc::roles::providers::PROVIDERS
            .iter()
            .map(|p| p.credential_env[0])
            .collect();
        out.push_str(&format!(
            "No credentials. Log in with `hanzo-dev login` (a remote MCP server: `hanzo-dev \
             mcp login NAME`), or set {}.\n",
            or_list(&vars)
        ));
    }
    for e in &r.entries {
        let mut line = format!(
            "{:<12} {:<8} from {}",
            printable(&e.name),
            e.kind.as_str(),
            source_name(e.source)
        );
        if let Some(t) = e.expires_at {
            line.push_str(&format!(
                "; expires {}{}",
                relative(t),
                if e.refreshable {
                    " (renews itself)"
                } else {
                    ""
                }
            ));
        }
        if !e.scopes.is_empty() {
            line.push_str(&format!("; scopes: {}", printable(&e.scopes.join(" "))));
        }
        if let Some(r) = &e.resource {
            line.push_str(&format!("; for {}", printable(r)));
        }
        out.push_str(&line);
        out.push('\n');
    }
    if let Some(p) = r.detected {
        out.push_str(&format!("Model requests use: {p}\n"));
    }
    for w in &r.warnings {
        out.push_str(&format!("warning: {}\n", printable(w)));
    }
    out
}

/// Runs `hanzo-dev auth …`, asking a broker started for it; returns the exit code.
pub async fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    match &args.command {
        AuthCommand::Status { json } => {
            let (sup, _run_dir) = broker_only(&env).await?;
            let reply = sup.broker.call(broker::Request::AuthStatus).await;
            sup.shutdown().await;
            match reply {
                Ok(broker::Response::AuthStatus(report)) => {
                    if *json {
                        println!("{}", status_json(&report));
                    } else {
                        print!("{}", status_text(&report));
                    }
                    Ok(exit::OK)
                }
                Ok(other) => anyhow::bail!("unexpected broker reply {other:?}"),
                Err(e) => {
                    eprintln!(
                        "error: the broker did not answer: {}",
                        printable(&e.to_string())
                    );
                    Ok(exit::FAILED)
                }
            }
        }
    }
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_no_credentials_the_status_names_every_providers_key_variable() {
        let text = status_text(&AuthStatusReport {
            entries: Vec::new(),
            detected: None,
            warnings: Vec::new(),
        });
        assert!(
            text.contains("set HANZO_API_KEY, ANTHROPIC_API_KEY or OPENAI_API_KEY."),
            "{text}"
        );
        assert_eq!(or_list(&["a"]), "a");
        assert_eq!(or_list(&["a", "b"]), "a or b");
    }
}
