//! The tools worker process: its request handler and entry point.

use crate::{SetupError, Tools};
use hanzo_ipc::channel::{Handler, ItemSink};
use hanzo_ipc::proto::{RemoteError, RemoteErrorKind};
use hanzo_ipc::roles::tools::{
    HookCall, Item, PreHookReply, Request, Response, ToolCall, ToolsProtocol,
};
use hanzo_ipc::Role;
use hanzo_policy::hooks::{HookConfig, HookEvent, HookSet, PreHookVerdict};
use hanzo_policy::isolation::{IsolationMode, Tier};
use hanzo_policy::profile::CommandLimits;
use hanzo_policy::profile::COMMAND_ETC;
use hanzo_sandbox::namespaces::{self, Side, TierB, WaitAs};
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
    /// `egress_port`: the egress forwarder's port in tier B's namespace, when this worker was
    /// given a control socket (the run allows network for commands).
    pub fn new(
        opts: &WorkerOptions,
        limits: &CommandLimits,
        tier: Tier,
        egress_port: Option<u16>,
    ) -> ToolsHandler {
        let tools = (|| {
            let ws = opts.ctx.workspace.as_ref().ok_or(SetupError::NoWorkspace)?;
            let run = opts.ctx.run_dir.as_ref().ok_or(SetupError::NoRunDir)?;
            Ok::<_, SetupError>(
                Tools::in_tier(ws, run, &[], limits, tier)?.with_egress_port(egress_port),
            )
        })()
        .map_err(|e| e.to_string());
        ToolsHandler { tools }
    }
}

impl ToolsHandler {
    /// A hook runner for `call`'s hooks, which run on `event`, working in the workspace with this
    /// worker's (allow-listed) environment, and the parsed tool input.
    fn hook_runner(
        &self,
        call: &HookCall,
        event: HookEvent,
    ) -> Result<(crate::hooks::HookRunner, serde_json::Value), RemoteError> {
        let bad = |what: &str, e: String| {
            RemoteError::new(RemoteErrorKind::BadRequest, format!("{what}: {e}"))
        };
        let tools = self
            .tools
            .as_ref()
            .map_err(|e| RemoteError::new(RemoteErrorKind::Internal, e.clone()))?;
        let configs = call
            .hooks
            .iter()
            .map(|h| HookConfig {
                event,
                command: h.command.clone(),
                tool_pattern: h.tool_pattern.clone(),
                timeout_ms: h.timeout_ms,
            })
            .collect();
        let set =
            HookSet::new(configs).map_err(|(i, e)| bad(&format!("hook #{i}"), e.to_string()))?;
        let input =
            serde_json::from_str(&call.input_json).map_err(|e| bad("tool input", e.to_string()))?;
        Ok((
            crate::hooks::HookRunner::new(set, tools.roots.workspace().to_path_buf())
                .with_runner(tools.runner().clone()),
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
        // The long arms are boxed: every request's task holds this future, and spawning moves
        // it whole, so a small request (a probe, a status, the definitions) should not carry a
        // tool run's or a hook run's state.
        match request {
            Request::Common(c) => handle_common::<ToolsProtocol, W>(c, items)
                .await
                .map(Response::Common),
            Request::Definitions => Ok(Response::Definitions(crate::definitions())),
            Request::Run(call) => Box::pin(self.run_call(call, items)).await,
            Request::RunPreHooks(call) => Box::pin(self.pre_hooks(call)).await,
            Request::RunPostHooks(call) => Box::pin(self.post_hooks(call)).await,
        }
    }
}

impl ToolsHandler {
    /// One tool call, its output streamed as items while it runs.
    async fn run_call<W: AsyncWrite + Unpin + Send + 'static>(
        &self,
        call: ToolCall,
        items: ItemSink<ToolsProtocol, W>,
    ) -> Result<Response, RemoteError> {
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

    /// The pre-tool-use hooks of one call, and their verdict.
    async fn pre_hooks(&self, call: HookCall) -> Result<Response, RemoteError> {
        let (runner, input) = self.hook_runner(&call, HookEvent::PreToolUse)?;
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

    /// The post-tool-use hooks of one call, and their failures.
    async fn post_hooks(&self, call: HookCall) -> Result<Response, RemoteError> {
        let (runner, input) = self.hook_runner(&call, HookEvent::PostToolUse)?;
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

/// The tools worker's `main`: lower the process-wide limits, enter tier B's namespaces (before
/// confinement: seccomp refuses namespace creation and `mount`) unless `opts.isolation` is
/// `tier-a`, fork the command launcher (from tier B's pid 1, or from this process in tier A),
/// then confine, handshake and serve (`hanzo_worker::run_with_helpers`, with the launcher's
/// attestation among the helpers). With `strict`, a worker that cannot enter tier B exits with
/// `CONFINE_FAILED` rather than run weaker; with `auto` it falls back to tier A and says why.
/// Tier A is refused for a workspace that contains a hidden path (hanzo's configuration or data)
/// unless the context allows a dangerous workspace. Returns the process exit code.
pub fn worker_main(opts: WorkerOptions) -> i32 {
    let fail = |what: &str| {
        eprintln!("hanzo-dev tools worker: {what}");
        hanzo_worker::exit::CONFINE_FAILED
    };
    let isolation = opts.isolation;
    let limits = CommandLimits::default();
    if let Err(e) = hanzo_sandbox::spawn::lower_process_limits(&limits) {
        return fail(&format!("cannot set resource limits: {e}"));
    }
    let Some(ws) = opts.ctx.workspace.clone() else {
        return fail("no workspace");
    };
    let dangerous = opts.ctx.hidden_in_workspace();
    let tier_a_refused = || -> Option<String> {
        (!dangerous.is_empty() && !opts.ctx.allow_dangerous_workspace).then(|| {
            format!(
                "the workspace {} contains {}, which tier A cannot keep out of reach; refusing \
                 tier A (tier B hides them; --allow-dangerous-workspace runs anyway)",
                ws.display(),
                dangerous
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    };
    let want_b = match isolation {
        IsolationMode::TierA => false,
        IsolationMode::Strict => true,
        IsolationMode::Auto => hanzo_sandbox::doctor::probe_kernel().tier_b().is_ok(),
    };
    // The egress control socket (its number from the role table): given only when the run allows
    // network for commands. Pid 1 hands it to the forwarder it forks first; no other process here
    // keeps a copy.
    const EGRESS_CONTROL_FD: i32 = hanzo_ipc::role::fd(
        hanzo_ipc::role::Channel::ToolsEgress,
        hanzo_ipc::Role::Tools,
    );
    let mut egress_control = hanzo_sandbox::confine::adopt_inherited_fd(EGRESS_CONTROL_FD).ok();
    let mut egress_port: Option<Result<u16, String>> = None;
    let mut launcher = match crate::launcher::prepare() {
        Ok(l) => l,
        Err(e) => return fail(&e.to_string()),
    };
    // Tier B's git launcher, for a workspace whose git directory is `.git` inside it: the git
    // tool commits there while every command sees the git directory read-only.
    let git_dir = ws.join(".git");
    let mut git_launcher =
        if want_b && std::fs::symlink_metadata(&git_dir).is_ok_and(|m| m.is_dir()) {
            match crate::launcher::prepare_git() {
                Ok(l) => Some(l),
                Err(e) => return fail(&e.to_string()),
            }
        } else {
            None
        };
    let mut tier = Tier::A;
    if want_b {
        let mut keep_rw = vec![ws.clone()];
        keep_rw.extend(opts.ctx.run_dir.iter().cloned());
        let cfg = TierB::new(
            keep_rw,
            Vec::new(),
            opts.ctx.hidden.clone(),
            crate::paths::protected_paths(&ws),
            COMMAND_ETC,
            limits.tmp_size,
        );
        let ctx = opts.ctx.clone();
        let protected = crate::paths::protected_paths(&ws);
        let git = &mut git_launcher;
        let control = &mut egress_control;
        let port = &mut egress_port;
        let entered = namespaces::enter_with(&cfg, |lo_up| {
            // The forwarder first, so that it is pid 2 (`egress_forward::NS_PID`), where the
            // supervisor looks for it to tell the broker whose messages to accept.
            if let Some(control) = control.take() {
                *port = Some(if lo_up {
                    crate::egress_forward::start(control).map_err(|e| e.to_string())
                } else {
                    Err("the namespace's lo did not come up".to_string())
                });
            }
            launcher.fork(Role::Tools, &ctx, Tier::B);
            if let Some(git) = git.as_mut() {
                git.fork_git(Role::Tools, &ctx, git_dir.clone(), protected);
            }
        });
        match entered {
            // The original process: the worker lives and ends in the namespaces; this one only
            // waits (confined with the reaper's allow-list) and passes the status on.
            Ok(Side::Parent(parent)) => {
                // This process only waits: its copy of the control socket closes.
                drop(egress_control.take());
                std::mem::forget(launcher);
                std::mem::forget(git_launcher);
                return parent.wait(WaitAs {
                    confine: true,
                    forward_signals: false,
                });
            }
            Ok(Side::Child) => {
                tier = Tier::B;
                namespaces::describe_net(if namespaces::loopback_up() {
                    "loopback only, for commands"
                } else {
                    "no interface up"
                });
            }
            Err(e) if isolation == IsolationMode::Auto && e.can_fall_back() => {
                eprintln!("hanzo-dev tools worker: tier B is unavailable ({e}); running in tier A");
            }
            Err(e) => return fail(&format!("cannot enter tier B: {e}")),
        }
    }
    let egress_port = match egress_port {
        None => None,
        Some(Ok(port)) => Some(port),
        Some(Err(e)) => return fail(&format!("no egress forwarder: {e}")),
    };
    if tier == Tier::A {
        // No namespace to put the forwarder in: no egress (the supervisor fails such a run).
        drop(egress_control.take());
        if let Some(why) = tier_a_refused() {
            return fail(&why);
        }
        launcher.fork(Role::Tools, &opts.ctx, Tier::A);
    }
    let launcher_att = match launcher.finish() {
        Ok(a) => a,
        Err(e) => return fail(&format!("no command launcher: {e}")),
    };
    let mut helpers = vec![launcher_att];
    match git_launcher.filter(|_| tier == Tier::B).map(|g| g.finish()) {
        Some(Ok(att)) => helpers.push(att),
        // The git tool then runs git in the commands' view, where changing the repository
        // fails and says why.
        Some(Err(e)) => eprintln!("hanzo-dev tools worker: no git launcher: {e}"),
        None => {}
    }
    hanzo_worker::run_with_helpers::<ToolsProtocol, _, _>(opts, helpers, move |ctx| {
        // Commands go through the launcher; when it is gone, no command can run any more: end,
        // so that the supervisor restarts the worker (and with it a launcher).
        tokio::spawn(async {
            crate::runner::launcher_gone().await;
            eprintln!("hanzo-dev tools worker: the command launcher is gone; exiting");
            std::process::exit(hanzo_worker::exit::LAUNCHER_GONE);
        });
        ToolsHandler::new(&ctx.opts, &limits, tier, egress_port)
    })
}
