//! `hanzo-worker` is the life of a worker process from exec to exit: adopt the inherited channel,
//! confine the process (before any thread exists), start a single-threaded runtime, handshake with
//! the supervisor, and serve requests until the supervisor goes away.
//!
//! Every role answers the common requests (confinement probes and status; echo, streaming echo and
//! sleep in test builds); each role's own requests are added beside them by the work that gives the
//! role its job.
//!
//! The `test-support` feature adds fault injection ([`Fault`], the `--fault` option) and the
//! test-only common requests; release builds never enable it.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use hanzo_ipc::attest::Attestation;
use hanzo_ipc::channel::{serve, EventSink, Handler, ItemSink, ServerWriter};
use hanzo_ipc::frame::DEFAULT_MAX_FRAME;
#[cfg(feature = "test-support")]
use hanzo_ipc::proto::{self, frame_type, Hello};
use hanzo_ipc::proto::{Protocol, RemoteError, RemoteErrorKind};
#[cfg(feature = "test-support")]
use hanzo_ipc::roles::CommonItem;
use hanzo_ipc::roles::{CommonRequest, CommonResponse, HasCommon, WorkerStatus};
use hanzo_ipc::socket::WriteHalf;
use hanzo_ipc::transport::{self, IpcError, SUPERVISOR_FD};
use hanzo_ipc::Role;
use hanzo_policy::isolation::IsolationMode;
use hanzo_policy::profile::{profile_for, ProfileContext};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
#[cfg(feature = "test-support")]
use std::time::Duration;
use tokio::io::AsyncWrite;

/// Exit codes of a worker process (the supervisor logs them).
pub mod exit {
    /// The supervisor closed the channel: a normal end.
    pub const OK: i32 = 0;
    /// Bad command line (the supervisor and worker come from different builds?).
    pub const USAGE: i32 = 64;
    /// The channel fd was not inherited.
    pub const NO_CHANNEL: i32 = 65;
    /// Confinement could not be applied; the worker refuses to run unconfined.
    pub const CONFINE_FAILED: i32 = 66;
    /// The worker's command launcher died: it can start no more commands (the supervisor
    /// restarts both).
    pub const LAUNCHER_GONE: i32 = 69;
    /// A syscall outside the worker's seccomp allow-list stopped it (its stderr names the
    /// syscall): 128 + `SIGSYS`.
    pub const SECCOMP_STOPPED: i32 = hanzo_sandbox::sigsys::EXIT_SECCOMP;
    /// The channel failed (protocol violation or i/o error).
    pub const CHANNEL_FAILED: i32 = 67;
    /// Injected by a test fault.
    pub const FAULT: i32 = 70;
}

/// Misbehaviour a test can ask a worker for, to prove the supervisor survives it. A fault can only
/// make the worker fail; none weakens its confinement.
#[cfg(feature = "test-support")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Exit before the handshake.
    CrashAtStart,
    /// Send a zero-length frame after `Ready`.
    ZeroLengthFrame,
    /// Claim a 4 GiB frame after `Ready`.
    OversizedFrame,
    /// Send half a frame after `Ready`, then exit.
    TruncatedFrame,
    /// Send a reply that is not valid postcard after `Ready`.
    GarbagePayload,
    /// Send a hello with the wrong magic.
    BadMagic,
    /// Send a hello with another protocol major version.
    WrongMajor,
    /// Claim to be another role.
    WrongRole,
    /// Never finish the handshake.
    HangBeforeReady,
    /// Report a weaker attestation than was applied (claims `no_new_privs` is off), to prove the
    /// supervisor refuses a worker whose attestation falls short. The confinement itself is
    /// applied in full.
    UnderReport,
    /// Serve normally, but when the supervisor ends the channel (an orderly stop), never exit:
    /// the supervisor must kill it after its grace.
    HangOnStop,
}

#[cfg(feature = "test-support")]
impl Fault {
    /// Every fault with its name on the command line.
    pub const ALL: [(&'static str, Fault); 11] = [
        ("crash-at-start", Fault::CrashAtStart),
        ("zero-length-frame", Fault::ZeroLengthFrame),
        ("oversized-frame", Fault::OversizedFrame),
        ("truncated-frame", Fault::TruncatedFrame),
        ("garbage-payload", Fault::GarbagePayload),
        ("bad-magic", Fault::BadMagic),
        ("wrong-major", Fault::WrongMajor),
        ("wrong-role", Fault::WrongRole),
        ("hang-before-ready", Fault::HangBeforeReady),
        ("under-report", Fault::UnderReport),
        ("hang-on-stop", Fault::HangOnStop),
    ];

    /// The fault named `s`.
    pub fn parse(s: &str) -> Option<Fault> {
        Fault::ALL
            .iter()
            .find(|(name, _)| *name == s)
            .map(|(_, f)| *f)
    }

    /// The fault's name on the command line.
    pub fn name(self) -> &'static str {
        Fault::ALL
            .iter()
            .find(|(_, f)| *f == self)
            .map(|(name, _)| *name)
            .expect("every fault is listed in ALL")
    }
}

/// A worker's command line, as the supervisor writes it after the hidden `__worker` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerOptions {
    /// The role this worker plays.
    pub role: Role,
    /// The paths and settings its sandbox profile is built from.
    pub ctx: ProfileContext,
    /// How much isolation the role must set up for itself (the tools worker enters tier B unless
    /// this is `tier-a`, and refuses to start without it when `strict`).
    pub isolation: IsolationMode,
    /// Misbehaviour injected by a test.
    #[cfg(feature = "test-support")]
    pub fault: Option<Fault>,
}

impl WorkerOptions {
    /// The arguments that [`WorkerOptions::parse`] reads back.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![self.role.as_str().to_string()];
        let mut push = |flag: &str, p: &Option<PathBuf>| {
            if let Some(p) = p {
                args.push(flag.to_string());
                args.push(p.display().to_string());
            }
        };
        push("--workspace", &self.ctx.workspace);
        push("--config-dir", &self.ctx.config_dir);
        push("--run-dir", &self.ctx.run_dir);
        for h in &self.ctx.hidden {
            args.push("--hide".to_string());
            args.push(h.display().to_string());
        }
        for t in &self.ctx.toolchains {
            args.push("--toolchain".to_string());
            args.push(t.display().to_string());
        }
        for r in &self.ctx.mcp_extra_read {
            args.push("--mcp-read".to_string());
            args.push(r.display().to_string());
        }
        if self.ctx.allow_dangerous_workspace {
            args.push("--allow-dangerous-workspace".into());
            args.push("yes".into());
        }
        if self.ctx.mcp_workspace_write {
            args.push("--mcp-workspace-write".into());
            args.push("yes".into());
        }
        if self.isolation != IsolationMode::default() {
            args.push("--isolation".into());
            args.push(self.isolation.as_str().into());
        }
        #[cfg(feature = "test-support")]
        if let Some(f) = self.fault {
            args.push("--fault".into());
            args.push(f.name().into());
        }
        args
    }

    /// Reads the arguments [`WorkerOptions::to_args`] wrote; an unknown role or flag is an error.
    pub fn parse(args: &[String]) -> Result<WorkerOptions, String> {
        let (role, rest) = args.split_first().ok_or("missing worker role")?;
        let role = Role::parse(role).ok_or_else(|| format!("unknown worker role {role:?}"))?;
        let mut opts = WorkerOptions {
            role,
            ctx: ProfileContext::default(),
            isolation: IsolationMode::default(),
            #[cfg(feature = "test-support")]
            fault: None,
        };
        let mut it = rest.iter();
        while let Some(flag) = it.next() {
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--workspace" => opts.ctx.workspace = Some(value.into()),
                "--config-dir" => opts.ctx.config_dir = Some(value.into()),
                "--run-dir" => opts.ctx.run_dir = Some(value.into()),
                "--hide" => opts.ctx.hidden.push(value.into()),
                "--toolchain" => opts.ctx.toolchains.push(value.into()),
                "--mcp-read" => opts.ctx.mcp_extra_read.push(value.into()),
                "--allow-dangerous-workspace" => {
                    opts.ctx.allow_dangerous_workspace = value == "yes"
                }
                "--mcp-workspace-write" => opts.ctx.mcp_workspace_write = value == "yes",
                "--isolation" => {
                    opts.isolation = IsolationMode::parse(value)
                        .ok_or_else(|| format!("unknown isolation mode {value:?}"))?
                }
                #[cfg(feature = "test-support")]
                "--fault" => {
                    opts.fault = Some(
                        Fault::parse(value).ok_or_else(|| format!("unknown fault {value:?}"))?,
                    )
                }
                _ => return Err(format!("unknown worker option {flag:?}")),
            }
        }
        Ok(opts)
    }
}

/// What a role's handler is built from, once the worker is confined and attested.
pub struct WorkerContext<P: Protocol> {
    /// The options the worker was started with.
    pub opts: WorkerOptions,
    /// The second, direct channel (fd 4), when the supervisor passed one (model ↔ broker).
    pub direct: Option<OwnedFd>,
    /// Unsolicited events to the supervisor.
    pub events: EventSink<P, WriteHalf>,
}

/// Run a worker that answers the common requests only, and return the process exit code.
/// Roles whose own work has not been built yet run this.
pub fn run(opts: WorkerOptions) -> i32 {
    macro_rules! dispatch {
        ($($(#[$doc:meta])* $variant:ident($name:literal, $module:ident, $proto:ident)),* $(,)?) => {
            match opts.role {
                $(Role::$variant => {
                    run_with::<hanzo_ipc::roles::$module::$proto, _, _>(opts, |_| CommonHandler)
                })*
            }
        };
    }
    hanzo_ipc::with_roles!(dispatch)
}

/// Run a worker to its end with the handler `make` builds, and return the process exit code.
///
/// Must be called from `main` before any thread is started: confinement is applied to the process
/// as it is then, and the handler is built only afterwards (inside the worker's single-threaded
/// runtime), so nothing it opens escapes the sandbox.
pub fn run_with<P, H, F>(opts: WorkerOptions, make: F) -> i32
where
    P: HasCommon,
    H: Handler<P, WriteHalf>,
    F: FnOnce(WorkerContext<P>) -> H,
{
    run_with_helpers(opts, Vec::new(), make)
}

/// [`run_with`], for a worker that started helper processes before confining itself (the tools
/// worker's command launcher): their attestations go into the worker's own, for the supervisor
/// to check.
pub fn run_with_helpers<P, H, F>(opts: WorkerOptions, helpers: Vec<Attestation>, make: F) -> i32
where
    P: HasCommon,
    H: Handler<P, WriteHalf>,
    F: FnOnce(WorkerContext<P>) -> H,
{
    let role = opts.role;
    let fd = match hanzo_sandbox::confine::adopt_inherited_fd(SUPERVISOR_FD) {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!(
                "hanzo-dev {role} worker: no channel on fd {SUPERVISOR_FD} ({e}); \
                 workers are started by the supervisor, not by hand"
            );
            return exit::NO_CHANNEL;
        }
    };
    // The direct channel is optional: only roles the role table gives one that the runtime
    // adopts receive it, and only when the peer worker runs.
    let direct = hanzo_ipc::role::runtime_channel(role)
        .and_then(|end| hanzo_sandbox::confine::adopt_inherited_fd(end.fd).ok());
    #[cfg(feature = "test-support")]
    if opts.fault == Some(Fault::CrashAtStart) {
        return exit::FAULT;
    }
    let profile = profile_for(role, &opts.ctx);
    // Opened before confinement: afterwards Landlock hides /proc and most roles' seccomp
    // allow-lists admit no `openat`; `Status` re-reads it with `pread64`.
    let _ = PROC_STATUS.set(std::fs::File::open("/proc/self/status").ok());
    #[cfg_attr(not(feature = "test-support"), allow(unused_mut))]
    let mut attestation = match hanzo_sandbox::confine::confine_current_process(&profile) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("hanzo-dev {role} worker: cannot confine: {e}");
            return exit::CONFINE_FAILED;
        }
    };
    // Namespaces a role entered before `run_with` (tier B tools) are part of what it applied.
    attestation.namespaces = hanzo_sandbox::namespaces::entered();
    attestation.notes.extend(hanzo_sandbox::namespaces::notes());
    attestation.helpers = helpers;
    #[cfg(feature = "test-support")]
    if opts.fault == Some(Fault::UnderReport) {
        attestation.no_new_privs = false;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hanzo-dev {role} worker: cannot start runtime: {e}");
            return exit::CHANNEL_FAILED;
        }
    };
    #[cfg(feature = "test-support")]
    let fault = opts.fault;
    let result = runtime.block_on(async move {
        let (mut reader, mut writer) = transport::split(fd, DEFAULT_MAX_FRAME)?;
        #[cfg(feature = "test-support")]
        if let Some(code) = handshake_fault(role, fault, &mut writer).await? {
            return Ok(code);
        }
        transport::worker_handshake(&mut reader, &mut writer, role, &attestation).await?;
        #[cfg(feature = "test-support")]
        if let Some(code) = post_ready_fault(fault, &mut writer).await? {
            return Ok(code);
        }
        let writer = ServerWriter::new(writer);
        let handler = make(WorkerContext {
            opts,
            direct,
            events: writer.events(),
        });
        serve::<P, _, _, _>(reader, writer, Arc::new(handler)).await?;
        #[cfg(feature = "test-support")]
        if fault == Some(Fault::HangOnStop) {
            std::future::pending::<()>().await;
        }
        Ok::<i32, IpcError>(exit::OK)
    });
    // Whatever is left (a blocking read, a task the handler left behind) must not hold the exit:
    // dropping the runtime would wait for blocking tasks.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hanzo-dev {role} worker: channel failed: {e}");
            exit::CHANNEL_FAILED
        }
    }
}

#[cfg(feature = "test-support")]
async fn handshake_fault<W: AsyncWrite + Unpin>(
    role: Role,
    fault: Option<Fault>,
    writer: &mut transport::FrameWriter<W>,
) -> Result<Option<i32>, IpcError> {
    let mut hello = Hello::new(role);
    match fault {
        Some(Fault::BadMagic) => hello.magic = *b"NOPE",
        Some(Fault::WrongMajor) => hello.major = proto::PROTOCOL_MAJOR + 1,
        Some(Fault::WrongRole) => {
            hello.role = if role == Role::Tools {
                Role::Broker
            } else {
                Role::Tools
            }
        }
        Some(Fault::HangBeforeReady) => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return Ok(Some(exit::FAULT));
        }
        _ => return Ok(None),
    }
    writer
        .send(frame_type::HELLO, &proto::encode_payload(&hello))
        .await?;
    // Wait for the supervisor to hang up on us.
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok(Some(exit::FAULT))
}

#[cfg(feature = "test-support")]
async fn post_ready_fault<W: AsyncWrite + Unpin>(
    fault: Option<Fault>,
    writer: &mut transport::FrameWriter<W>,
) -> Result<Option<i32>, IpcError> {
    let bytes: &[u8] = match fault {
        Some(Fault::ZeroLengthFrame) => &[0, 0, 0, 0],
        Some(Fault::OversizedFrame) => &[0xff, 0xff, 0xff, 0xff, frame_type::REPLY],
        Some(Fault::TruncatedFrame) => &[0, 0, 0, 100, frame_type::REPLY, 1, 2, 3],
        Some(Fault::GarbagePayload) => &[0, 0, 0, 4, frame_type::REPLY, 0xff, 0xff, 0xff],
        _ => return Ok(None),
    };
    writer.send_raw(bytes).await?;
    if fault == Some(Fault::TruncatedFrame) {
        return Ok(Some(exit::FAULT));
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok(Some(exit::FAULT))
}

/// Answers the requests every role shares.
pub struct CommonHandler;

impl<P: HasCommon, W: AsyncWrite + Unpin + Send + 'static> Handler<P, W> for CommonHandler {
    async fn handle(
        &self,
        request: P::Request,
        items: ItemSink<P, W>,
    ) -> Result<P::Response, RemoteError> {
        let Some(common) = P::as_common_request(&request) else {
            return Err(RemoteError::new(
                RemoteErrorKind::BadRequest,
                format!("the {} worker does not serve this request yet", P::ROLE),
            ));
        };
        handle_common::<P, W>(common.clone(), items)
            .await
            .map(P::common_response)
    }
}

/// The common requests, for role handlers to delegate to.
pub async fn handle_common<P: HasCommon, W: AsyncWrite + Unpin + Send>(
    request: CommonRequest,
    items: ItemSink<P, W>,
) -> Result<CommonResponse, RemoteError> {
    #[cfg(not(feature = "test-support"))]
    let _ = &items;
    match request {
        #[cfg(feature = "test-support")]
        CommonRequest::Echo { data } => Ok(CommonResponse::Echo { data }),
        #[cfg(feature = "test-support")]
        CommonRequest::EchoStream { data, count } => {
            for seq in 0..count {
                items
                    .send(P::common_item(CommonItem::Echo {
                        seq,
                        data: data.clone(),
                    }))
                    .await
                    .map_err(|e| RemoteError::new(RemoteErrorKind::Internal, e.to_string()))?;
            }
            Ok(CommonResponse::EchoStreamDone { count })
        }
        #[cfg(feature = "test-support")]
        CommonRequest::Sleep { ms } => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(CommonResponse::Slept)
        }
        CommonRequest::Probe(probe) => Ok(CommonResponse::Probe(hanzo_sandbox::probe::run_probe(
            &probe,
        ))),
        CommonRequest::Status => Ok(CommonResponse::Status(WorkerStatus {
            pid: std::process::id(),
            role: P::ROLE,
            rss_kib: self_rss_kib(),
        })),
        // The test-only requests exist in the wire types when `hanzo-ipc/test-support` is on
        // even if this crate's feature is off (cargo unifies features per build: `cargo test -p
        // hanzo-ipc -p hanzo-broker` turns on ipc's alone, which failed to compile). Such a
        // build does not serve them.
        #[cfg(not(feature = "test-support"))]
        #[allow(unreachable_patterns)]
        _ => Err(RemoteError::new(
            RemoteErrorKind::BadRequest,
            "a test-only request, which this build does not serve",
        )),
    }
}

/// This worker's `/proc/self/status`, opened before confinement (see `run_with_helpers`).
static PROC_STATUS: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();

/// The resident set size from `/proc/self/status` (0 when it cannot be read). Uses the file
/// opened before confinement when there is one: a confined worker may not open it again.
fn self_rss_kib() -> u64 {
    let text = match PROC_STATUS.get() {
        Some(Some(file)) => reread(file),
        Some(None) => None,
        None => std::fs::read_to_string("/proc/self/status").ok(),
    };
    text.and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    })
    .unwrap_or(0)
}

/// Reads a procfs file again from offset 0 (`pread64`: each read regenerates its contents).
fn reread(file: &std::fs::File) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(_) => return None,
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_file_opened_once_is_read_again_from_the_start() {
        let file = std::fs::File::open("/proc/self/status").expect("open");
        let first = reread(&file).expect("first read");
        // A second read through the same descriptor regenerates the contents (no `openat`).
        let _grow = vec![1u8; 8 << 20];
        let second = reread(&file).expect("second read");
        for text in [&first, &second] {
            assert!(text.starts_with("Name:"), "{text:.80}");
            assert!(text.contains("\nVmRSS:"), "{text}");
        }
    }

    #[cfg(feature = "test-support")]
    #[test]
    fn options_round_trip_through_args() {
        let opts = WorkerOptions {
            role: Role::Tools,
            ctx: ProfileContext {
                workspace: Some("/w s".into()),
                config_dir: None,
                run_dir: Some("/tmp/r".into()),
                hidden: vec!["/h/.config/hanzo".into(), "/h/.local/share/hanzo".into()],
                allow_dangerous_workspace: true,
                toolchains: vec!["/h/.npm-global/lib/node_modules".into()],
                mcp_workspace_write: true,
                mcp_extra_read: vec!["/srv/docs".into()],
            },
            isolation: IsolationMode::Strict,
            fault: Some(Fault::OversizedFrame),
        };
        assert_eq!(WorkerOptions::parse(&opts.to_args()), Ok(opts));
    }

    #[test]
    fn bad_worker_args_are_errors() {
        assert!(WorkerOptions::parse(&[]).is_err());
        assert!(WorkerOptions::parse(&["nope".into()]).is_err());
        assert!(WorkerOptions::parse(&["tools".into(), "--fault".into()]).is_err());
        assert!(WorkerOptions::parse(&["tools".into(), "--x".into(), "1".into()]).is_err());
    }
}
