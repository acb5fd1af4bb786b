//! `hanzo-dev serve`: the local agents API (see `crate::serve`), and `serve token
//! create|list|revoke` for its bearer tokens.

use super::exit::usage;
use crate::agent::approval::{approval_parser, ApprovalMode};
use crate::secrets::StartEnv;
use crate::serve::jwks::{BrokerKeys, KeySource};
use crate::serve::jwt::JwtConfig;
use crate::serve::listen::{ListenAddr, Listener};
use crate::serve::tokens::TokenStore;
use crate::serve::{runs, State, DEFAULT_MAX_BODY};
use anyhow::Context;
use std::path::PathBuf;
use std::sync::Arc;

/// What `hanzo-dev serve` takes.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// `serve token …`; none serves the API.
    #[command(subcommand)]
    pub command: Option<ServeCommand>,
    /// Where to listen: `unix:PATH`, or a loopback `127.0.0.1:PORT` / `[::1]:PORT`
    /// [default: unix:$XDG_RUNTIME_DIR/hanzo-dev/api.sock].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// What `serve` and `bridge` share.
    #[command(flatten)]
    pub server: ServerArgs,
}

/// What `serve` and `bridge` share: where runs work, how far they may go, and who may ask.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
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
    /// Accept JWTs (RS256, ES256) whose `iss` is ISS; their `owner` claim is the org. The keys
    /// come from --jwks FILE, from --jwks-url, or else from the issuer's OpenID discovery
    /// document (both fetched through the broker). Needs --jwt-audience.
    #[arg(long, value_name = "ISS", requires = "jwt_audience")]
    pub jwt_issuer: Option<String>,
    /// The `aud` a JWT must carry (or list).
    #[arg(long, value_name = "AUD", requires = "jwt_issuer")]
    pub jwt_audience: Option<String>,
    /// Verify JWTs against the keys of this JWKS file (read for each token).
    #[arg(
        long,
        value_name = "FILE",
        requires = "jwt_issuer",
        conflicts_with = "jwks_url"
    )]
    pub jwks: Option<PathBuf>,
    /// Verify JWTs against the key set at this URL (https, or http to a loopback address),
    /// fetched through the broker, cached, and refetched on an unknown `kid`.
    #[arg(long, value_name = "URL", requires = "jwt_issuer")]
    pub jwks_url: Option<String>,
    /// The largest request body accepted, in bytes (413 beyond).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BODY)]
    pub max_body: usize,
}

/// The `serve` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ServeCommand {
    /// The API's bearer tokens.
    #[command(subcommand)]
    Token(TokenCommand),
}

/// The `serve token` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Issue a token for ORG and print it once (only its hash is kept).
    Create {
        /// The org the token acts for: its runs and agents are that org's store.
        #[arg(long)]
        org: String,
    },
    /// The issued tokens: id, org, creation time (never the tokens).
    List {
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke the token with ID (from `token list`); it stops working at once.
    Revoke {
        /// The token's id, as `token list` prints it.
        id: String,
    },
}

fn env_var<'a>(env: &'a StartEnv, name: &str) -> Option<&'a str> {
    env.vars
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// Runs `hanzo-dev serve`: a token command, or the API until SIGINT or SIGTERM; returns the exit
/// code.
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

/// Where to listen (`--listen`, else the default socket) and whether that is the default path.
pub fn listen_addr(listen: Option<&str>, env: &StartEnv) -> anyhow::Result<(ListenAddr, bool)> {
    Ok(match listen {
        Some(l) => (
            ListenAddr::parse(l).map_err(|e| usage(e.to_string()))?,
            false,
        ),
        None => (
            ListenAddr::default_unix(env_var(env, "XDG_RUNTIME_DIR"))
                .map_err(|e| usage(e.to_string()))?,
            true,
        ),
    })
}

/// A broker started for a server's JWT keys; kept for as long as the server runs.
pub struct KeyBroker {
    sup: crate::tree::Supervisor,
    _run_dir: crate::startup::RunDir,
}

impl KeyBroker {
    /// Stops the broker and its supervision tree.
    pub async fn shutdown(self) {
        self.sup.shutdown().await;
    }
}

/// The JWT configuration the flags ask for; when the keys come from a URL (or discovery), the
/// broker that fetches them is started here and returned with it.
pub async fn jwt_config(
    args: &ServerArgs,
    env: &StartEnv,
) -> anyhow::Result<(Option<JwtConfig>, Option<KeyBroker>)> {
    let (Some(iss), Some(aud)) = (&args.jwt_issuer, &args.jwt_audience) else {
        return Ok((None, None));
    };
    if let Some(p) = &args.jwks {
        let keys = KeySource::File(
            p.canonicalize()
                .map_err(|e| usage(format!("--jwks {}: {e}", p.display())))?,
        );
        let cfg = JwtConfig {
            keys,
            issuer: iss.clone(),
            audience: aud.clone(),
        };
        return Ok((Some(cfg), None));
    }
    let (sup, run_dir) = super::login::broker_only(env).await?;
    let keys = match BrokerKeys::start(sup.broker.clone(), iss.clone(), args.jwks_url.clone()).await
    {
        Ok(k) => k,
        Err(e) => {
            sup.shutdown().await;
            return Err(usage(format!(
                "{e}\n(the keys must be at an https:// URL, or http:// to a loopback address, \
                 answered without a redirect)"
            )));
        }
    };
    let cfg = JwtConfig {
        keys: KeySource::Broker(keys),
        issuer: iss.clone(),
        audience: aud.clone(),
    };
    Ok((
        Some(cfg),
        Some(KeyBroker {
            sup,
            _run_dir: run_dir,
        }),
    ))
}

/// The state every handler shares, from the shared flags.
pub fn state(args: &ServerArgs, env: &StartEnv, jwt: Option<JwtConfig>) -> anyhow::Result<State> {
    let data_dir = super::store::data_dir(env)?;
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
            "--approval prompt: nobody is at a terminal to answer; use deny, allow-listed or allow",
        ));
    }
    Ok(State {
        tokens: TokenStore::in_data_dir(&data_dir),
        jwt,
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
    })
}

async fn serve(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    let (addr, default_path) = listen_addr(args.listen.as_deref(), &env)?;
    // Checked before the listener is bound and the broker started.
    let base = state(&args.server, &env, None)?;
    let (jwt, key_broker) = jwt_config(&args.server, &env).await?;
    let state = Arc::new(State { jwt, ..base });
    let listener = Listener::bind(&addr, default_path)
        .await
        .map_err(|e| usage(e.to_string()))?;
    eprintln!("hanzo-dev serve: listening on {}", listener.describe());
    crate::serve::serve(listener, state).await?;
    if let Some(b) = key_broker {
        b.shutdown().await;
    }
    Ok(0)
}
