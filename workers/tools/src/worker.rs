//! The tools worker process: its request handler and entry point.

use crate::limits::Limits;
use crate::{SetupError, Tools};
use hanzo_ipc::channel::{Handler, ItemSink};
use hanzo_ipc::proto::{RemoteError, RemoteErrorKind};
use hanzo_ipc::roles::tools::{HookCall, Item, PreHookReply, Request, Response, ToolsProtocol};
use hanzo_policy::hooks::PreHookVerdict;
use hanzo_policy::isolation::IsolationMode;
use hanzo_sandbox::namespaces::{self, Side, TierB};
use hanzo_worker::{handle_common, WorkerOptions};
use tokio::io::AsyncWrite;

/// Most output a single call streams as items; the final result carries the capped output anyway.
const MAX_STREAMED: usize = 1 << 20;

/// Serves the tools channel.
pub struct ToolsHandler {
    tools: Result<Tools, String>,
}

impl ToolsHandler {
    /// Built inside the confined worker. A set-up failure is answered on every call, so the
    /// supervisor sees why rather than a worker that died.
    pub fn new(opts: &WorkerOptions, limits: &Limits) -> ToolsHandler {
        let tools = (|| {
            let ws = opts.ctx.workspace.as_ref().ok_or(SetupError::NoWorkspace)?;
            let run = opts.ctx.run_dir.as_ref().ok_or(SetupError::NoRunDir)?;
            Tools::new(ws, run, &[], limits)
        })()
        .map_err(|e| e.to_string());
        ToolsHandler { tools }
    }

    pub fn from_tools(tools: Tools) -> ToolsHandler {
        ToolsHandler { tools: Ok(tools) }
    }
}

impl ToolsHandler {
    /// A hook runner for `call`, working in the workspace with this worker's (allow-listed)
    /// environment, and the parsed tool input.
    fn hook_runner(
        &self,
        call: &HookCall,
    ) -> Result<(crate::hooks::HookRunner, serde_json::Value), RemoteError> {
        let bad = |what: &str, e: String| {
            RemoteError::new(RemoteErrorKind::BadRequest, format!("{what}: {e}"))
        };
        let tools = self
            .tools
            .as_ref()
            .map_err(|e| RemoteError::new(RemoteErrorKind::Internal, e.clone()))?;
        let configs: Vec<hanzo_policy::hooks::HookConfig> =
            serde_json::from_str(&call.hooks_json).map_err(|e| bad("hooks", e.to_string()))?;
        let set = hanzo_policy::hooks::HookSet::new(configs)
            .map_err(|(i, e)| bad(&format!("hook #{i}"), e.to_string()))?;
        let input =
            serde_json::from_str(&call.input_json).map_err(|e| bad("tool input", e.to_string()))?;
        Ok((
            crate::hooks::HookRunner::new(set, tools.roots.workspace().to_path_buf()),
            input,
        ))
    }
}

impl<W: AsyncWrite + Unpin + Send + 'static> Handler<ToolsProtocol, W> for ToolsHandler {
    async fn handle(
        &self,
        request: Request,
        items: ItemSink<ToolsProtocol, W>,
    ) -> Result<Response, RemoteError> {
        match request {
            Request::Common(c) => handle_common::<ToolsProtocol, W>(c, items)
                .await
                .map(Response::Common),
            Request::Definitions => Ok(Response::Definitions(crate::definitions())),
            Request::Run(call) => {
                let tools = self
                    .tools
                    .as_ref()
                    .map_err(|e| RemoteError::new(RemoteErrorKind::Internal, e.clone()))?;
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
                let mut streamed = 0usize;
                let run = tools.run_streaming(&call, move |chunk| {
                    if streamed < MAX_STREAMED {
                        streamed += chunk.len();
                        let _ = tx.send(chunk.to_vec());
                    }
                });
                let forward = async {
                    while let Some(chunk) = rx.recv().await {
                        // A failed send means the channel is closing; the result would fail too.
                        let _ = items.send(Item::Output { chunk }).await;
                    }
                };
                let (result, ()) = tokio::join!(run, forward);
                Ok(Response::Result(result))
            }
            Request::RunPreHooks(call) => {
                let (runner, input) = self.hook_runner(&call)?;
                let r = runner.run_pre(&call.session_id, &call.tool, &input).await;
                let decided_by = r.denied_by.map(|h| h.command);
                Ok(Response::PreHooks(match r.verdict {
                    PreHookVerdict::Allow => PreHookReply {
                        allowed: true,
                        reason: None,
                        decided_by,
                        failed: false,
                    },
                    PreHookVerdict::Deny { reason } => PreHookReply {
                        allowed: false,
                        reason: Some(reason),
                        decided_by,
                        failed: false,
                    },
                    PreHookVerdict::Failed { reason, .. } => PreHookReply {
                        allowed: false,
                        reason: Some(reason),
                        decided_by,
                        failed: true,
                    },
                }))
            }
            Request::RunPostHooks(call) => {
                let (runner, input) = self.hook_runner(&call)?;
                let output: serde_json::Value = match &call.output_json {
                    Some(o) => serde_json::from_str(o).map_err(|e| {
                        RemoteError::new(RemoteErrorKind::BadRequest, format!("hook output: {e}"))
                    })?,
                    None => serde_json::Value::Null,
                };
                let failures = runner
                    .run_post(&call.session_id, &call.tool, &input, &output)
                    .await;
                Ok(Response::PostHooks { failures })
            }
        }
    }
}

/// The tools worker's `main`: lower the process-wide limits, enter tier B's namespaces (before
/// confinement: seccomp refuses `unshare` and `mount`) unless `opts.isolation` is `tier-a`, and
/// fork the tier-B command launcher, then confine, handshake and serve
/// (`hanzo_worker::run_with`). With `strict`, a worker that cannot enter tier B exits with
/// `CONFINE_FAILED` rather than run weaker. Returns the process exit code.
pub fn worker_main(opts: WorkerOptions) -> i32 {
    let isolation = opts.isolation;
    let limits = Limits::default();
    if let Err(e) = limits.apply_process_wide() {
        eprintln!("hanzo-dev tools worker: cannot set resource limits: {e}");
        return hanzo_worker::exit::CONFINE_FAILED;
    }
    let tier_b = match isolation {
        IsolationMode::TierA => false,
        IsolationMode::Strict => true,
        IsolationMode::Auto => {
            opts.ctx.workspace.is_some() && hanzo_sandbox::doctor::probe_kernel().tier_b().is_ok()
        }
    };
    if tier_b {
        let Some(ws) = &opts.ctx.workspace else {
            eprintln!("hanzo-dev tools worker: tier B needs a workspace");
            return hanzo_worker::exit::CONFINE_FAILED;
        };
        let cfg = TierB::for_workspace(ws, opts.ctx.run_dir.as_deref(), &[]);
        // The command launcher's socket pair now; pid 1 forks the launcher (with the tier-B
        // command profile: inet sockets, in this namespace only) just before the worker.
        let mut launcher = crate::launcher::prepare();
        let ctx = opts.ctx.clone();
        let entered = namespaces::enter_with(&cfg, |lo_up| {
            if let Ok(l) = launcher.as_mut() {
                l.fork_in_pid1(&ctx, lo_up);
            }
        });
        match entered {
            // The original process: the worker lived and ended in the child. `enter` closed
            // every fd above 2 here already: the pair must not be closed a second time.
            Ok(Side::Parent { status }) => {
                std::mem::forget(launcher);
                return status;
            }
            // Without a launcher, commands run from the worker itself and get no network at
            // all; the attestation says which (doctor shows it).
            Ok(Side::Child) => match launcher.map_err(|e| e.to_string()).and_then(|l| l.finish()) {
                Ok(()) => namespaces::describe_net("loopback only, for commands"),
                Err(e) => {
                    eprintln!("hanzo-dev tools worker: commands get no network: {e}");
                    namespaces::describe_net("no network for commands");
                }
            },
            Err(e) => {
                eprintln!("hanzo-dev tools worker: cannot enter tier B: {e}");
                return hanzo_worker::exit::CONFINE_FAILED;
            }
        }
    }
    hanzo_worker::run_with::<ToolsProtocol, _, _>(opts, move |ctx| {
        // Confined and still single-threaded (the runtime is current-thread and no blocking task
        // has run yet): every thread and command from here on inherits the filter.
        if let Err(e) = crate::nosocket::deny_socket_creation() {
            return ToolsHandler {
                tools: Err(format!("the tools worker is not fully confined: {e}")),
            };
        }
        ToolsHandler::new(&ctx.opts, &limits)
    })
}
