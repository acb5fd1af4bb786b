//! The actor tree: a root actor supervising one [`WorkerActor`] per role, and the [`Supervisor`]
//! value callers use — one stable [`WorkerHandle`] per role.

use crate::pair::{DirectPair, Side};
use crate::spawner::Spawner;
use crate::worker::{
    RestartPolicy, Slot, WorkerActor, WorkerArgs, WorkerHandle, WorkerInfo, WorkerSpec,
};
use hanzo_ipc::channel::CallError;
use hanzo_ipc::proto::Protocol;
use hanzo_ipc::roles::{
    broker::BrokerProtocol, lsp::LspProtocol, mcp::McpProtocol, model::ModelProtocol,
    tools::ToolsProtocol,
};
use hanzo_ipc::Role;
use hanzo_policy::profile::{profile_for, ProfileContext};
use hanzo_worker::Fault;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How to start the tree.
#[derive(Clone)]
pub struct SupervisorConfig {
    /// The binary to re-exec as workers (this one, normally).
    pub exe: std::path::PathBuf,
    pub ctx: ProfileContext,
    /// The supervisor's environment as it was at start, secrets included; each role receives only
    /// what its allow-list admits (secrets: the broker alone).
    pub env: Vec<(String, String)>,
    /// Extra variable names to treat as secrets (from settings).
    pub secret_names: Vec<String>,
    pub restart: RestartPolicy,
    /// Test hook: misbehaviour to inject into a role's worker.
    pub faults: HashMap<Role, Fault>,
    pub kernel_landlock_abi: u32,
    /// Requests in flight per worker before callers wait.
    pub max_in_flight: usize,
    /// Start only these roles (`None`: all). A role left out is `Unavailable` to its callers;
    /// `auth status` and `login` start the broker alone.
    pub roles: Option<Vec<Role>>,
    /// What the tools worker must set up (it refuses to start short of `strict`'s tier B).
    pub isolation: hanzo_policy::isolation::IsolationMode,
}

/// The running tree.
pub struct Supervisor {
    root: ActorRef<()>,
    join: tokio::task::JoinHandle<()>,
    pub broker: WorkerHandle<BrokerProtocol>,
    pub model: WorkerHandle<ModelProtocol>,
    pub tools: WorkerHandle<ToolsProtocol>,
    pub mcp: WorkerHandle<McpProtocol>,
    pub lsp: WorkerHandle<LspProtocol>,
}

/// Actor names are process-global in ractor; each tree gets its own number so that several can
/// run in one process (tests do).
static TREE_INSTANCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

struct RootArgs {
    instance: u64,
    /// The direct channel between the model and broker workers.
    model_broker: Arc<DirectPair>,
    cfg: SupervisorConfig,
    spawner: Spawner,
    broker: watch::Sender<Slot<BrokerProtocol>>,
    model: watch::Sender<Slot<ModelProtocol>>,
    tools: watch::Sender<Slot<ToolsProtocol>>,
    mcp: watch::Sender<Slot<McpProtocol>>,
    lsp: watch::Sender<Slot<LspProtocol>>,
}

struct RootActor;

struct RootState {
    children: Vec<(Role, ractor::ActorCell)>,
}

fn spec(
    cfg: &SupervisorConfig,
    spawner: &Spawner,
    role: Role,
    model_broker: &Arc<DirectPair>,
) -> WorkerSpec {
    let profile = profile_for(role, &cfg.ctx);
    WorkerSpec {
        role,
        ctx: cfg.ctx.clone(),
        env: hanzo_sandbox::env::role_env(&profile, cfg.env.iter().cloned(), &cfg.secret_names),
        kernel_landlock_abi: cfg.kernel_landlock_abi,
        restart: cfg.restart,
        isolation: cfg.isolation,
        fault: cfg.faults.get(&role).copied(),
        spawner: spawner.clone(),
        direct: match role {
            Role::Broker => Some((model_broker.clone(), Side::A)),
            Role::Model => Some((model_broker.clone(), Side::B)),
            _ => None,
        },
    }
}

async fn spawn_child<P: Protocol>(
    root: &ActorRef<()>,
    args: &RootArgs,
    role: Role,
    slot: watch::Sender<Slot<P>>,
) -> Result<ractor::ActorCell, ActorProcessingErr> {
    let (actor, _join) = Actor::spawn_linked(
        Some(format!("tree{}-worker-{role}", args.instance)),
        WorkerActor::<P>::default(),
        WorkerArgs {
            spec: spec(&args.cfg, &args.spawner, role, &args.model_broker),
            slot,
        },
        root.get_cell(),
    )
    .await?;
    Ok(actor.get_cell())
}

impl Actor for RootActor {
    type Msg = ();
    type State = RootState;
    type Arguments = RootArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<()>,
        args: RootArgs,
    ) -> Result<RootState, ActorProcessingErr> {
        let wanted = |r: Role| args.cfg.roles.as_ref().is_none_or(|rs| rs.contains(&r));
        let mut children = Vec::new();
        if wanted(Role::Broker) {
            let c = spawn_child(&myself, &args, Role::Broker, args.broker.clone()).await?;
            children.push((Role::Broker, c));
        }
        if wanted(Role::Model) {
            let c = spawn_child(&myself, &args, Role::Model, args.model.clone()).await?;
            children.push((Role::Model, c));
        }
        if wanted(Role::Tools) {
            let c = spawn_child(&myself, &args, Role::Tools, args.tools.clone()).await?;
            children.push((Role::Tools, c));
        }
        if wanted(Role::Mcp) {
            let c = spawn_child(&myself, &args, Role::Mcp, args.mcp.clone()).await?;
            children.push((Role::Mcp, c));
        }
        if wanted(Role::Lsp) {
            let c = spawn_child(&myself, &args, Role::Lsp, args.lsp.clone()).await?;
            children.push((Role::Lsp, c));
        }
        // The slots of roles not started close with `args` here, so their callers fail at once.
        Ok(RootState { children })
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<()>,
        event: SupervisionEvent,
        _state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        // A worker actor that fails drops its slot sender: callers of that role then get a clear
        // `Unavailable` error instead of waiting. The process itself is killed by its monitor.
        if let SupervisionEvent::ActorFailed(cell, err) = event {
            tracing::error!(actor = ?cell.get_name(), error = %err, "worker actor failed");
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<()>,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        for (_, child) in state.children.drain(..) {
            let _ = child
                .stop_and_wait(None, Some(Duration::from_secs(10)))
                .await;
        }
        Ok(())
    }
}

impl Supervisor {
    /// Start the spawner thread and the actor tree. Workers start in the background; use
    /// [`Supervisor::wait_ready`] to wait for all of them to be attested.
    pub async fn start(cfg: SupervisorConfig) -> anyhow::Result<Supervisor> {
        let spawner = Spawner::start(cfg.exe.clone(), tokio::runtime::Handle::current())?;
        let (broker_tx, broker_rx) = watch::channel(Slot::Starting { last_error: None });
        let (model_tx, model_rx) = watch::channel(Slot::Starting { last_error: None });
        let (tools_tx, tools_rx) = watch::channel(Slot::Starting { last_error: None });
        let (mcp_tx, mcp_rx) = watch::channel(Slot::Starting { last_error: None });
        let (lsp_tx, lsp_rx) = watch::channel(Slot::Starting { last_error: None });
        let max = cfg.max_in_flight;
        let instance = TREE_INSTANCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (root, join) = Actor::spawn(
            Some(format!("tree{instance}-supervisor")),
            RootActor,
            RootArgs {
                instance,
                model_broker: Arc::new(DirectPair::default()),
                cfg,
                spawner,
                broker: broker_tx,
                model: model_tx,
                tools: tools_tx,
                mcp: mcp_tx,
                lsp: lsp_tx,
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("cannot start the supervisor actor tree: {e}"))?;
        Ok(Supervisor {
            root,
            join,
            broker: WorkerHandle::new(Role::Broker, broker_rx, max),
            model: WorkerHandle::new(Role::Model, model_rx, max),
            tools: WorkerHandle::new(Role::Tools, tools_rx, max),
            mcp: WorkerHandle::new(Role::Mcp, mcp_rx, max),
            lsp: WorkerHandle::new(Role::Lsp, lsp_rx, max),
        })
    }

    /// Wait until every role is attested; the first role that fails ends the wait with its error.
    pub async fn wait_ready(&self) -> Result<Vec<Arc<WorkerInfo>>, CallError> {
        let (b, m, t, c, l) = tokio::join!(
            self.broker.ready(),
            self.model.ready(),
            self.tools.ready(),
            self.mcp.ready(),
            self.lsp.ready()
        );
        Ok(vec![b?.1, m?.1, t?.1, c?.1, l?.1])
    }

    /// The current pid of every running worker.
    pub fn worker_pids(&self) -> Vec<(Role, u32)> {
        [
            self.broker.info(),
            self.model.info(),
            self.tools.info(),
            self.mcp.info(),
            self.lsp.info(),
        ]
        .into_iter()
        .flatten()
        .map(|i| (i.role, i.pid))
        .collect()
    }

    /// Stop every worker (killed and reaped) and the tree.
    pub async fn shutdown(self) {
        let _ = self
            .root
            .stop_and_wait(None, Some(Duration::from_secs(15)))
            .await;
        let _ = self.join.await;
    }
}
