//! `hanzo-dev serve`: the local agents API (see `crate::serve`), and `serve token
//! create|list|revoke` for its bearer tokens.

use super::exit::usage;
use crate::agent::approval::{approval_parser, ApprovalMode};
use crate::secrets::StartEnv;
use crate::serve::listen::{ListenAddr, Listener};
use crate::serve::tokens::TokenStore;
use crate::serve::{runs, State, DEFAULT_MAX_BODY};
use anyhow::Context;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<ServeCommand>,
    /// Where to listen: `unix:PATH`, or a loopback `127.0.0.1:PORT` / `[::1]:PORT`
    /// [default: unix:$XDG_RUNTIME_DIR/hanzo-dev/api.sock].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// The workspace every run works in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// The widest approval mode a run may ask for, and the default for runs that ask none
    /// (nobody is at a terminal to prompt).
    #[arg(long, value_parser = approval_parser(), default_value = "deny")]
    pub approval: ApprovalMode,
    /// Every run plays this cassette instead of calling a provider (offline, tests).
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Also accept JWTs (RS256, ES256) signed by a key of this JWKS file; their `owner` claim is
    /// the org. Needs --jwt-issuer and --jwt-audience.
    #[arg(long, value_name = "FILE", requires_all = ["jwt_issuer", "jwt_audience"])]
    pub jwks: Option<PathBuf>,
    /// The `iss` a JWT must carry.
    #[arg(long, value_name = "ISS", requires = "jwks")]
    pub jwt_issuer: Option<String>,
    /// The `aud` a JWT must carry (or list).
    #[arg(long, value_name = "AUD", requires = "jwks")]
    pub jwt_audience: Option<String>,
    /// The largest request body accepted, in bytes (413 beyond).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BODY)]
    pub max_body: usize,
}

#[derive(Debug, clap::Subcommand)]
pub enum ServeCommand {
    /// The API's bearer tokens.
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Issue a token for ORG and print it once (only its hash is kept).
    Create {
        #[arg(long)]
        org: String,
    },
    /// The issued tokens: id, org, creation time (never the tokens).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Revoke the token with ID (from `token list`); it stops working at once.
    Revoke { id: String },
}

fn env_var<'a>(env: &'a StartEnv, name: &str) -> Option<&'a str> {
    env.vars
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

pub fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    match &args.command {
        Some(ServeCommand::Token(t)) => token(t, &env),
        None => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(serve(args, env))
        }
    }
}

fn token(cmd: &TokenCommand, env: &StartEnv) -> anyhow::Result<i32> {
    let tokens = TokenStore::in_data_dir(&super::store::data_dir(env)?);
    match cmd {
        TokenCommand::Create { org } => {
            hanzo_store::validate_org(org).map_err(|e| usage(e.to_string()))?;
            let (text, entry) = tokens.create(org)?;
            eprintln!(
                "created token {} for org {org}; it is shown once, here (only its hash is kept):",
                entry.id
            );
            println!("{text}");
        }
        TokenCommand::List { json } => {
            let all = tokens.list()?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                for t in &all {
                    println!("{}  org {}  created_ms {}", t.id, t.org, t.created_ms);
                }
            }
        }
        TokenCommand::Revoke { id } => {
            let gone = tokens.revoke(id).map_err(|e| usage(e.to_string()))?;
            eprintln!("revoked token {} of org {}", gone.id, gone.org);
        }
    }
    Ok(0)
}

async fn serve(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    let data_dir = super::store::data_dir(&env)?;
    let (addr, default_path) = match &args.listen {
        Some(l) => (
            ListenAddr::parse(l).map_err(|e| usage(e.to_string()))?,
            false,
        ),
        None => (
            ListenAddr::default_unix(env_var(&env, "XDG_RUNTIME_DIR"))
                .map_err(|e| usage(e.to_string()))?,
            true,
        ),
    };
    let workspace = match &args.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("cannot determine the current directory")?,
    };
    let workspace = workspace
        .canonicalize()
        .map_err(|e| usage(format!("workspace {}: {e}", workspace.display())))?;
    let replay = match &args.replay {
        Some(p) => Some(
            p.canonicalize()
                .map_err(|e| usage(format!("cassette {}: {e}", p.display())))?,
        ),
        None => None,
    };
    if args.approval == ApprovalMode::Prompt {
        return Err(usage(
            "serve --approval prompt: nobody is at a terminal to answer; use deny, allow-listed \
             or allow",
        ));
    }
    let listener = Listener::bind(&addr, default_path)
        .await
        .map_err(|e| usage(e.to_string()))?;
    let state = Arc::new(State {
        tokens: TokenStore::in_data_dir(&data_dir),
        jwt: match (&args.jwks, &args.jwt_issuer, &args.jwt_audience) {
            (Some(p), Some(iss), Some(aud)) => Some(crate::serve::jwt::JwtConfig {
                jwks_path: p
                    .canonicalize()
                    .map_err(|e| usage(format!("--jwks {}: {e}", p.display())))?,
                issuer: iss.clone(),
                audience: aud.clone(),
            }),
            _ => None,
        },
        data_dir,
        secrets: env.secret_values(),
        approval: args.approval,
        max_body: args.max_body,
        template: runs::RunTemplate {
            exe: std::env::current_exe().context("cannot find the hanzo-dev binary")?,
            workspace,
            replay,
            env: env.vars.clone(),
        },
        registry: runs::Registry::default(),
    });
    eprintln!("hanzo-dev serve: listening on {}", listener.describe());
    crate::serve::serve(listener, state).await?;
    Ok(0)
}
