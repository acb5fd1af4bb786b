//! `hanzo-dev bridge`: the WebSocket DevBridge (see `crate::serve::bridge`), the agents API as
//! JSON-RPC for browser pages on the origins it is told to trust.

use super::exit::usage;
use super::serve::{jwt_config, listen_addr, state, ServerArgs};
use crate::secrets::StartEnv;
use crate::serve::bridge::{normalize_origin, Bridge, BridgeConfig, DEFAULT_MAX_MESSAGE, PATH};
use crate::serve::listen::{ListenAddr, Listener};
use crate::serve::State;
use std::sync::Arc;
use std::time::Duration;

/// What `hanzo-dev bridge` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to listen: a loopback `127.0.0.1:PORT` / `[::1]:PORT` (browsers connect over TCP),
    /// or `unix:PATH`.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
    pub listen: String,
    /// An origin whose pages may connect (`https://app.example`, `http://127.0.0.1:3000`);
    /// repeatable. Without one, every browser page is refused.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// Also accept a handshake without `Origin` (a non-browser client; browsers always send
    /// one, so no web page gains anything from this).
    #[arg(long)]
    pub allow_no_origin: bool,
    /// The largest client message, in bytes (closed with 1009 beyond).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_MESSAGE)]
    pub max_message: usize,
    /// Seconds between the server's pings; a peer silent for two intervals is dropped.
    #[arg(long, value_name = "SECS", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub ping_interval: u64,
    /// What `bridge` shares with `serve`.
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Runs `hanzo-dev bridge` until SIGINT or SIGTERM; returns the exit code.
pub fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(bridge(args, env))
}

async fn bridge(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    let origins = args
        .allow_origin
        .iter()
        .map(|o| normalize_origin(o))
        .collect::<Result<Vec<_>, _>>()
        .map_err(usage)?;
    let (addr, default_path) = listen_addr(Some(&args.listen), &env)?;
    let base = state(&args.server, &env, None)?;
    let (jwt, key_broker) = jwt_config(&args.server, &env).await?;
    let state = Arc::new(State { jwt, ..base });
    let listener = Listener::bind(&addr, default_path)
        .await
        .map_err(|e| usage(e.to_string()))?;
    let bridge = Bridge {
        state: state.clone(),
        cfg: Arc::new(BridgeConfig {
            origins,
            allow_no_origin: args.allow_no_origin,
            max_message: args.max_message,
            ping_interval: Duration::from_secs(args.ping_interval),
        }),
    };
    if bridge.cfg.origins.is_empty() {
        eprintln!("hanzo-dev bridge: no --allow-origin given: every browser page is refused");
    }
    let at = match &addr {
        ListenAddr::Tcp(_) => listener.describe().replacen("http://", "ws://", 1) + PATH,
        ListenAddr::Unix(_) => listener.describe(),
    };
    eprintln!("hanzo-dev bridge: listening on {at}");
    crate::serve::serve_with(listener, state, bridge).await?;
    if let Some(b) = key_broker {
        b.shutdown().await;
    }
    Ok(0)
}
