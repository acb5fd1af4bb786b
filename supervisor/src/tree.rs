//! The tree: one supervising task per role ([`crate::supervise`]), and the [`Supervisor`] value
//! callers use — one stable [`WorkerHandle`] per role.
//!
//! The per-role parts (the handles, the tasks, `wait_ready`, `worker_pids`) are generated from
//! the one table of roles, [`hanzo_ipc::with_roles!`]: a new role needs no edit here.

use crate::pair::{DirectPair, Side};
use crate::spawner::Spawner;
use crate::start::WorkerSpec;
use crate::supervise::{supervise, Stop};
use crate::worker::{RestartPolicy, Slot, WorkerHandle, WorkerInfo};
use hanzo_ipc::channel::CallError;
use hanzo_ipc::proto::Protocol;
use hanzo_ipc::role::{channel_ends, is_side_a, Channel, ChannelEnd};
use hanzo_ipc::roles;
use hanzo_ipc::Role;
use hanzo_policy::profile::{profile_for, ProfileContext};
#[cfg(feature = "test-support")]
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How to start the tree.
#[derive(Clone)]
pub struct SupervisorConfig {
    /// The binary to re-exec as workers (this one, normally).
    pub exe: std::path::PathBuf,
    /// Paths the roles' profiles are built from.
    pub ctx: ProfileContext,
    /// The supervisor's environment as it was at start, secrets included; each role receives only
    /// what its allow-list admits (secrets: the broker alone).
    pub env: Vec<(String, String)>,
    /// Extra variable names to treat as secrets (from settings).
    pub secret_names: Vec<String>,
    /// Restart, heartbeat and deadline timing, the same for every role.
    pub restart: RestartPolicy,
    /// Test hook: misbehaviour to inject into a role's worker.
    #[cfg(feature = "test-support")]
    pub faults: HashMap<Role, hanzo_worker::Fault>,
    /// The kernel's Landlock ABI, which attestations are checked against.
    pub kernel_landlock_abi: u32,
    /// Requests in flight per worker before callers wait.
    pub max_in_flight: usize,
    /// What the tools worker must set up (it refuses to start short of `strict`'s tier B).
    pub isolation: hanzo_policy::isolation::IsolationMode,
    /// Start only these roles (`None`: all). A role left out is `Unavailable` to its callers;
    /// `auth status` and `login` start the broker alone.
    pub roles: Option<Vec<Role>>,
    /// A run that allows network for commands: the broker and the tools worker get an egress
    /// control socket (fd 6 in both), and the broker's egress records go here. `None`: no egress.
    pub egress_records: Option<crate::start::EgressRecords>,
    /// A run whose MCP stdio servers get network: the broker (fd
    /// [`MCP_EGRESS_FD`](hanzo_ipc::transport::MCP_EGRESS_FD)) and the mcp worker (fd
    /// [`EGRESS_FD`](hanzo_ipc::transport::EGRESS_FD)) get a second egress control socket.
    /// Needs `egress_records` for the records.
    pub mcp_egress: bool,
}

impl SupervisorConfig {
    /// Whether `role` is to be started.
    pub fn starts(&self, role: Role) -> bool {
        self.roles.as_ref().is_none_or(|rs| rs.contains(&role))
    }
}

/// What every role's supervising task is built from.
struct TreeParts {
    spawner: Spawner,
    /// The direct channel between the model and broker workers.
    model_broker: Arc<DirectPair>,
    /// The direct channel between the mcp and broker workers (remote MCP servers).
    mcp_broker: Arc<DirectPair>,
    /// The egress control socket between the broker and the tools worker, when the run has one.
    tools_broker: Option<Arc<DirectPair>>,
    /// The egress control socket between the broker and the mcp worker, when servers get network.
    mcp_egress: Option<Arc<DirectPair>>,
    stop: watch::Sender<bool>,
    /// The stop of the roles the others reach (see [`stops_last`]), raised once the others ended.
    stop_last: watch::Sender<bool>,
}

/// Whether `role` stops after every other role: the broker, which the model, mcp and tools
/// workers reach through their direct channels and egress sockets, so that their orderly stop
/// can still use it (an MCP session's `DELETE` goes through the broker).
fn stops_last(role: Role) -> bool {
    role == Role::Broker
}

/// The supervising tasks of a tree, in the two groups its stop ends one after the other.
#[derive(Default)]
struct Tasks {
    first: Vec<JoinHandle<()>>,
    last: Vec<JoinHandle<()>>,
}

fn spec(cfg: &SupervisorConfig, parts: &TreeParts, role: Role) -> WorkerSpec {
    let profile = profile_for(role, &cfg.ctx);
    WorkerSpec {
        role,
        ctx: cfg.ctx.clone(),
        env: hanzo_sandbox::env::role_env(&profile, cfg.env.iter().cloned(), &cfg.secret_names),
        kernel_landlock_abi: cfg.kernel_landlock_abi,
        restart: cfg.restart,
        isolation: cfg.isolation,
        #[cfg(feature = "test-support")]
        fault: cfg.faults.get(&role).copied(),
        spawner: parts.spawner.clone(),
        direct: direct_channels(role, |c| parts.pair(c)),
        egress: egress_end(role, parts.tools_broker.as_ref()),
        egress_records: match role {
            Role::Broker => cfg.egress_records.clone(),
            _ => None,
        },
        adopts: role == Role::Broker,
    }
}

impl TreeParts {
    /// The pair behind `channel`, when this tree has one. The broker ↔ tools egress socket is
    /// passed as [`WorkerSpec::egress`] instead, so it is not one of these.
    fn pair(&self, channel: Channel) -> Option<Arc<DirectPair>> {
        match channel {
            Channel::ModelBroker => Some(self.model_broker.clone()),
            Channel::McpBroker => Some(self.mcp_broker.clone()),
            Channel::McpEgress => self.mcp_egress.clone(),
            Channel::ToolsEgress => None,
        }
    }
}

/// Which end of its pair a table end is: the table lists side A first.
fn side_of(end: ChannelEnd) -> Side {
    if is_side_a(end.channel, end.role) {
        Side::A
    } else {
        Side::B
    }
}

/// `role`'s end of the broker ↔ tools egress control socket, when the run has one and the role
/// table gives the role an end (the spawner places it at the table's number).
fn egress_end(role: Role, pair: Option<&Arc<DirectPair>>) -> Option<(Arc<DirectPair>, Side)> {
    let end = channel_ends(role).find(|e| e.channel == Channel::ToolsEgress)?;
    Some((pair?.clone(), side_of(end)))
}

/// The direct channels `role` holds an end of, each with its fd number in the worker, as the role
/// table ([`hanzo_ipc::role::CHANNEL_ENDS`]) places them: model ↔ broker, mcp ↔ broker, and the
/// mcp worker's egress control socket when `pair` has one. A restart of the model or mcp worker
/// hands the running broker the new pair's other end (adopted pairs, `pair.rs`); a restart of the
/// broker restarts its peers. (The egress control socket broker ↔ tools is
/// [`WorkerSpec::egress`].)
fn direct_channels(
    role: Role,
    pair: impl Fn(Channel) -> Option<Arc<DirectPair>>,
) -> Vec<(Arc<DirectPair>, Side, i32)> {
    channel_ends(role)
        .filter_map(|e| Some((pair(e.channel)?, side_of(e), e.fd)))
        .collect()
}

/// Start `role`'s supervising task (or, when the configuration leaves the role out, publish why
/// it is unavailable) and return its handle.
fn start_role<P: Protocol>(
    cfg: &SupervisorConfig,
    parts: &TreeParts,
    tasks: &mut Tasks,
) -> WorkerHandle<P> {
    let role = P::ROLE;
    let (tx, rx) = watch::channel(Slot::Starting { last_error: None });
    if cfg.starts(role) {
        let (stop, group) = if stops_last(role) {
            (parts.stop_last.subscribe(), &mut tasks.last)
        } else {
            (parts.stop.subscribe(), &mut tasks.first)
        };
        group.push(tokio::spawn(supervise::<P>(
            spec(cfg, parts, role),
            tx,
            Stop::new(stop),
        )));
    } else {
        tx.send_replace(Slot::Failed(format!(
            "the {role} worker was not started: this command runs without it"
        )));
    }
    WorkerHandle::new(role, rx, cfg.max_in_flight, cfg.restart.request_deadline)
}

macro_rules! define_supervisor {
    ($($(#[$doc:meta])* $variant:ident($name:literal, $module:ident, $proto:ident)),* $(,)?) => {
        /// The running tree.
        pub struct Supervisor {
            stop: watch::Sender<bool>,
            stop_last: watch::Sender<bool>,
            tasks: Tasks,
            started: Vec<Role>,
            /// Sends the process's `agent.*` spans through this tree's broker, when
            /// `OTEL_EXPORTER_OTLP_*` asks for it ([`crate::otlp`]).
            exporter: Option<crate::otlp::Exporter>,
            $($(#[$doc])* pub $module: WorkerHandle<roles::$module::$proto>,)*
        }

        impl Supervisor {
            /// Start the spawner thread and one supervising task per role the configuration
            /// names. Workers start in the background; use [`Supervisor::wait_ready`] to wait for
            /// them to be attested.
            pub async fn start(cfg: SupervisorConfig) -> anyhow::Result<Supervisor> {
                let parts = TreeParts {
                    spawner: Spawner::start(cfg.exe.clone(), tokio::runtime::Handle::current())?,
                    model_broker: Arc::new(DirectPair::default().adopted_as(b"model")),
                    mcp_broker: Arc::new(DirectPair::default().adopted_as(b"mcp")),
                    tools_broker: cfg
                        .egress_records
                        .is_some()
                        .then(|| Arc::new(DirectPair::egress_control())),
                    mcp_egress: (cfg.mcp_egress && cfg.egress_records.is_some())
                        .then(|| Arc::new(DirectPair::egress_control().adopted_as(b"mcp-egress"))),
                    stop: watch::channel(false).0,
                    stop_last: watch::channel(false).0,
                };
                let mut tasks = Tasks::default();
                let started = Role::ALL.into_iter().filter(|r| cfg.starts(*r)).collect();
                $(let $module = start_role::<roles::$module::$proto>(&cfg, &parts, &mut tasks);)*
                let mut sup = Supervisor {
                    stop: parts.stop,
                    stop_last: parts.stop_last,
                    tasks,
                    started,
                    exporter: None,
                    $($module,)*
                };
                if sup.started.contains(&Role::Broker) {
                    sup.exporter = crate::otlp::Exporter::start(sup.broker.clone());
                }
                Ok(sup)
            }

            /// Wait until every started role is attested; the first role that fails ends the
            /// wait with its error.
            pub async fn wait_ready(&self) -> Result<Vec<Arc<WorkerInfo>>, CallError> {
                let mut ready = Vec::new();
                $(if self.started.contains(&Role::$variant) {
                    ready.push(self.$module.ready().await?.1);
                })*
                Ok(ready)
            }

            /// The current pid of every running worker.
            pub fn worker_pids(&self) -> Vec<(Role, u32)> {
                [$(self.$module.info()),*]
                    .into_iter()
                    .flatten()
                    .map(|i| (i.role, i.pid))
                    .collect()
            }
        }
    };
}

hanzo_ipc::with_roles!(define_supervisor);

impl Supervisor {
    /// The roles this tree started.
    pub fn started(&self) -> &[Role] {
        &self.started
    }

    /// Stop every worker and the tree, after the spans ended so far were exported (when trace
    /// export is on). Each worker is stopped in order (`start.rs` `stop_in_order`: its channel
    /// ended, its servers stopped, killed only after a grace) and reaped, its cgroup removed;
    /// the broker last, once every worker that reaches it has ended.
    pub async fn shutdown(self) {
        if let Some(exporter) = &self.exporter {
            exporter.flush().await;
        }
        self.stop.send_replace(true);
        join_within(self.tasks.first).await;
        self.stop_last.send_replace(true);
        join_within(self.tasks.last).await;
    }
}

/// Wait for each supervising task, aborting one that has not ended within 15 s.
async fn join_within(tasks: Vec<JoinHandle<()>>) {
    for task in tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout(Duration::from_secs(15), task)
            .await
            .is_err()
        {
            tracing::error!("a supervising task did not stop within 15 s; aborting it");
            abort.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hanzo_ipc::role::{fd_of, runtime_channel, SUPERVISOR_FD};

    /// With every optional channel of a run present, the fds the supervisor hands each role's
    /// worker are exactly the ones the role table gives it, which are the ones its worker adopts
    /// (the workers name them through `hanzo_ipc::role::fd` in a `const`, so one the table does
    /// not list does not compile): none missing, none extra, no number twice, and the two ends of
    /// each channel on opposite sides of its pair.
    #[test]
    fn every_role_is_passed_exactly_the_fds_its_table_rows_name() {
        let channels = [
            Channel::ModelBroker,
            Channel::McpBroker,
            Channel::ToolsEgress,
            Channel::McpEgress,
        ];
        let pairs: HashMap<Channel, Arc<DirectPair>> = channels
            .into_iter()
            .map(|c| (c, Arc::new(DirectPair::default())))
            .collect();
        let tools_egress = pairs.get(&Channel::ToolsEgress).cloned();
        let mut sides: HashMap<Channel, Vec<Side>> = HashMap::new();
        for role in Role::ALL {
            // What `spec` and the spawner produce for this role.
            let direct = direct_channels(role, |c| match c {
                Channel::ToolsEgress => None,
                c => pairs.get(&c).cloned(),
            });
            let egress = egress_end(role, tools_egress.as_ref());
            let mut passed = vec![SUPERVISOR_FD];
            for (pair, side, fd) in &direct {
                passed.push(*fd);
                let channel = channels
                    .into_iter()
                    .find(|c| pairs.get(c).is_some_and(|p| Arc::ptr_eq(p, pair)))
                    .expect("a pair of this tree");
                sides.entry(channel).or_default().push(*side);
            }
            if let Some((_, side)) = egress {
                passed.push(fd_of(Channel::ToolsEgress, role).expect("an egress end has a number"));
                sides.entry(Channel::ToolsEgress).or_default().push(side);
            }
            let mut expected: Vec<i32> = std::iter::once(SUPERVISOR_FD)
                .chain(channel_ends(role).map(|e| e.fd))
                .collect();
            let mut unique = passed.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(
                unique.len(),
                passed.len(),
                "{role}: an fd passed twice: {passed:?}"
            );
            passed.sort_unstable();
            expected.sort_unstable();
            assert_eq!(passed, expected, "{role}");
            if let Some(end) = runtime_channel(role) {
                assert!(
                    passed.contains(&end.fd),
                    "{role}: the runtime's end is not passed"
                );
            }
        }
        for channel in channels {
            let mut s = sides.remove(&channel).unwrap_or_default();
            s.sort_by_key(|side| *side as u8);
            assert_eq!(s, [Side::A, Side::B], "{channel:?}");
        }
    }
}
