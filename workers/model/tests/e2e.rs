//! End to end through the real processes: the `hanzo-dev` binary re-executed as `__worker broker`
//! and `__worker model`, each confined by its own profile, joined by a direct socketpair (fd 4),
//! with this test as their supervisor (fd 3) and a local HTTP server playing the provider.
//!
//! Needs the binary: `cargo build -p hanzo-dev` first (same target dir).

mod fixtures;

use fixtures::server::{Reply, Server};
use fixtures::*;
use hanzo_ipc::channel::{Client, StreamPart};
use hanzo_ipc::frame::DEFAULT_MAX_FRAME;
use hanzo_ipc::probe::{Probe, SocketFamily, SocketKind};
use hanzo_ipc::roles::broker::{self, BrokerProtocol, CredentialSource, Endpoint};
use hanzo_ipc::roles::model::{
    self, Completion, CompletionRequest, Message, ModelProtocol, ProviderConfig, ProviderId,
    RetryPolicy, StopReason, StreamErrorKind, StreamEvent, ToolDef, Usage, WireFormat,
};
use hanzo_ipc::roles::{CommonRequest, CommonResponse};
use hanzo_ipc::socket::WriteHalf;
use hanzo_ipc::transport::{self, socketpair, supervisor_handshake};
use hanzo_ipc::Role;
use hanzo_policy::profile::{profile_for, ProfileContext};
use hanzo_sandbox::spawn::{configure_command, ChildSetup};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

const CANARY: &str = "sk-ant-api03-CANARY-e2e-5f4e3d2c1b0a";
const CANARY_OPENAI: &str = "sk-proj-CANARY-e2e-a1b2c3d4e5";

fn hanzo_dev() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .join("hanzo-dev");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p hanzo-dev` with the same CARGO_TARGET_DIR first",
        bin.display()
    );
    bin
}

struct Workers {
    broker: Client<BrokerProtocol, WriteHalf>,
    model: Client<ModelProtocol, WriteHalf>,
    broker_child: Child,
    model_child: Child,
    hangup: Vec<std::os::unix::net::UnixStream>,
    _config: tempfile::TempDir,
}

fn spawn_worker(
    role: Role,
    ctx: ProfileContext,
    env: &[(&str, &str)],
    fds: &[(&OwnedFd, i32)],
) -> Child {
    let opts = hanzo_worker_args(role, &ctx);
    let mut cmd = Command::new(hanzo_dev());
    cmd.arg("__worker")
        .args(opts)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    configure_command(
        &mut cmd,
        ChildSetup {
            fds: fds
                .iter()
                .map(|(fd, target)| (fd.as_raw_fd(), *target))
                .collect(),
            rlimits: profile_for(role, &ctx).rlimits,
            parent_pid: i32::try_from(std::process::id()).expect("a pid fits pid_t"),
            new_session: true,
            join_cgroups: Vec::new(),
        },
    );
    cmd.spawn().expect("spawn worker")
}

/// The worker's command line after `__worker` (what `WorkerOptions::to_args` writes).
fn hanzo_worker_args(role: Role, ctx: &ProfileContext) -> Vec<String> {
    let mut args = vec![role.as_str().to_string()];
    if let Some(dir) = &ctx.config_dir {
        args.push("--config-dir".into());
        args.push(dir.display().to_string());
    }
    args
}

async fn connect<P: hanzo_ipc::proto::Protocol>(fd: OwnedFd) -> Client<P, WriteHalf> {
    let (mut r, mut w) = transport::split(fd, DEFAULT_MAX_FRAME).expect("stream");
    let (_, attestation) = supervisor_handshake(&mut r, &mut w, P::ROLE)
        .await
        .expect("handshake");
    assert!(
        attestation.no_new_privs && attestation.non_dumpable,
        "{attestation:?}"
    );
    let (client, _events, _end) = Client::<P, _>::start(r, w);
    client
}

impl Workers {
    async fn start(server: &Server) -> Workers {
        let config = tempfile::tempdir().expect("config dir");
        let (sup_b, child_b) = socketpair().expect("pair");
        let (sup_m, child_m) = socketpair().expect("pair");
        let (direct_b, direct_m) = socketpair().expect("pair");
        let broker_ctx = ProfileContext {
            config_dir: Some(config.path().to_path_buf()),
            ..Default::default()
        };
        let broker_child = spawn_worker(
            Role::Broker,
            broker_ctx,
            &[
                ("ANTHROPIC_API_KEY", CANARY),
                ("OPENAI_API_KEY", CANARY_OPENAI),
            ],
            &[(&child_b, 3), (&direct_b, 4)],
        );
        let model_child = spawn_worker(
            Role::Model,
            ProfileContext::default(),
            &[],
            &[(&child_m, 3), (&direct_m, 4)],
        );
        // The children have their copies; ours would keep the channels open after they die.
        drop((child_b, child_m, direct_b, direct_m));
        // Dups of our ends: the clients' reader tasks keep the sockets open after the clients are
        // dropped, so the test ends the channels with `shutdown` on these.
        let hangup = vec![
            std::os::unix::net::UnixStream::from(sup_b.try_clone().expect("dup")),
            std::os::unix::net::UnixStream::from(sup_m.try_clone().expect("dup")),
        ];
        let broker = connect::<BrokerProtocol>(sup_b).await;
        let model = connect::<ModelProtocol>(sup_m).await;
        let configured = broker
            .call(broker::Request::AllowEndpoints(vec![
                Endpoint {
                    provider: ProviderId::Anthropic,
                    base_url: server.base.clone(),
                },
                Endpoint {
                    provider: ProviderId::OpenAi,
                    base_url: format!("{}/v1", server.base),
                },
            ]))
            .await
            .expect("configure");
        assert_eq!(configured, broker::Response::Configured { endpoints: 2 });
        Workers {
            broker,
            model,
            broker_child,
            model_child,
            hangup,
            _config: config,
        }
    }

    async fn complete(
        &self,
        req: CompletionRequest,
    ) -> (Result<Completion, String>, Vec<model::Item>) {
        let mut stream = self
            .model
            .call_stream(model::Request::Complete(req))
            .await
            .expect("sent");
        let mut items = Vec::new();
        loop {
            match stream.next().await {
                Some(Ok(StreamPart::Item(i))) => items.push(i),
                Some(Ok(StreamPart::Done(model::Response::Completed(c)))) => return (Ok(c), items),
                Some(Ok(StreamPart::Done(other))) => panic!("unexpected reply {other:?}"),
                Some(Err(e)) => return (Err(e.to_string()), items),
                None => panic!("stream ended without a reply"),
            }
        }
    }

    /// Close both channels (as a supervisor that goes away), wait for the workers to exit on
    /// their own, and return their stderr.
    async fn finish(mut self) -> (String, String) {
        drop(self.broker);
        drop(self.model);
        for s in &self.hangup {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let mut logs = Vec::new();
        for c in [&mut self.broker_child, &mut self.model_child] {
            // Bounded so a worker that fails to exit fails the test instead of hanging it.
            let mut status = None;
            for _ in 0..500 {
                if let Some(s) = c.try_wait().expect("try_wait") {
                    status = Some(s);
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            let Some(status) = status else {
                let _ = c.kill();
                panic!("worker {} did not exit after its channel closed", c.id());
            };
            let mut log = String::new();
            if let Some(mut e) = c.stderr.take() {
                e.read_to_string(&mut log).expect("stderr");
            }
            assert!(status.success(), "worker exit {status:?}: {log}");
            logs.push(log);
        }
        let model_log = logs.pop().unwrap_or_default();
        let broker_log = logs.pop().unwrap_or_default();
        (broker_log, model_log)
    }
}

fn events(items: &[model::Item]) -> Vec<StreamEvent> {
    items
        .iter()
        .filter_map(|i| match i {
            model::Item::Event(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

fn req(wire: WireFormat, credential: ProviderId, base_url: String) -> CompletionRequest {
    CompletionRequest {
        provider: ProviderConfig::Http {
            wire,
            credential,
            base_url,
        },
        model: "test-model".into(),
        system: Some("Be brief.".into()),
        messages: vec![Message::user_text("What is the weather in San Francisco?")],
        tools: vec![ToolDef {
            name: "get_weather".into(),
            description: "Current weather".into(),
            input_schema_json: r#"{"type":"object"}"#.into(),
        }],
        max_tokens: 512,
        retry: RetryPolicy {
            max_attempts: 4,
            base_ms: 10,
            max_ms: 50,
            budget_ms: 10_000,
        },
        record: false,
    }
}

fn text(t: &str) -> StreamEvent {
    StreamEvent::ContentDelta { text: t.into() }
}

#[tokio::test]
async fn anthropic_text_and_tool_calls_through_broker_and_model_workers() {
    let server = Server::start(vec![
        Reply::sse(ANTHROPIC_TEXT, 9),
        Reply::sse(ANTHROPIC_TOOLS, 4),
    ])
    .await;
    let w = Workers::start(&server).await;
    let r = req(
        WireFormat::AnthropicMessages,
        ProviderId::Anthropic,
        server.base.clone(),
    );
    let (done, items) = w.complete(r.clone()).await;
    assert_eq!(
        done.expect("completes"),
        Completion {
            stop_reason: StopReason::EndTurn,
            usage: Usage {
                input_tokens: 25,
                output_tokens: 15
            },
            attempts: 1
        }
    );
    assert_eq!(events(&items)[..2], [text("Hello"), text(", wörld")]);
    let (done, items) = w.complete(r).await;
    assert_eq!(done.expect("completes").stop_reason, StopReason::ToolUse);
    let ev = events(&items);
    assert_eq!(
        ev[1],
        StreamEvent::ToolUse {
            id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
            name: "get_weather".into(),
            input_json: r#"{"location": "San Francisco, CA"}"#.into()
        }
    );
    assert!(matches!(&ev[2], StreamEvent::ToolUse { name, .. } if name == "get_time"));
    // What the provider saw: the broker's credential in Anthropic's header, the model's request.
    let got = server.received();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].method, "POST");
    assert_eq!(got[0].path, "/v1/messages");
    assert_eq!(got[0].header("x-api-key"), Some(CANARY));
    assert_eq!(got[0].header("anthropic-version"), Some("2023-06-01"));
    let body: serde_json::Value = serde_json::from_slice(&got[0].body).expect("json");
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
    let (be, me) = w.finish().await;
    assert!(!be.contains(CANARY) && !me.contains(CANARY));
}

#[tokio::test]
async fn openai_compatible_parallel_tools_usage_and_done() {
    let server = Server::start(vec![
        Reply::sse(OPENAI_TOOLS, 11),
        Reply::sse(OPENAI_TEXT, 64),
    ])
    .await;
    let w = Workers::start(&server).await;
    let r = req(
        WireFormat::OpenAiChat,
        ProviderId::OpenAi,
        format!("{}/v1", server.base),
    );
    let (done, items) = w.complete(r.clone()).await;
    assert_eq!(
        done.expect("completes"),
        Completion {
            stop_reason: StopReason::ToolUse,
            usage: Usage {
                input_tokens: 80,
                output_tokens: 40
            },
            attempts: 1
        }
    );
    let ev = events(&items);
    assert_eq!(ev.len(), 3);
    assert!(
        matches!(&ev[0], StreamEvent::ToolUse { id, input_json, .. } if id == "call_abc" && input_json == r#"{"location": "Paris"}"#)
    );
    assert!(
        matches!(&ev[1], StreamEvent::ToolUse { id, input_json, .. } if id == "call_def" && input_json == r#"{"tz": "CET"}"#)
    );
    let (done, items) = w.complete(r).await;
    assert_eq!(
        done.expect("completes").usage,
        Usage {
            input_tokens: 9,
            output_tokens: 12
        }
    );
    assert_eq!(events(&items)[..2], [text("Hello"), text(", wörld")]);
    let got = server.received();
    assert_eq!(got[0].path, "/v1/chat/completions");
    assert_eq!(
        got[0].header("authorization"),
        Some(format!("Bearer {CANARY_OPENAI}").as_str())
    );
    w.finish().await;
}

#[tokio::test]
async fn rate_limit_with_retry_after_and_overload_are_retried() {
    let server = Server::start(vec![
        Reply::json(429, ANTHROPIC_429).header("retry-after", "1"),
        Reply::sse(ANTHROPIC_OVERLOADED_AT_START, 16),
        Reply::json(529, ANTHROPIC_529),
        Reply::sse(ANTHROPIC_TEXT, 32),
    ])
    .await;
    let w = Workers::start(&server).await;
    let (done, items) = w
        .complete(req(
            WireFormat::AnthropicMessages,
            ProviderId::Anthropic,
            server.base.clone(),
        ))
        .await;
    assert_eq!(done.expect("completes").attempts, 4);
    assert_eq!(server.received().len(), 4);
    assert!(!events(&items)
        .iter()
        .any(|e| matches!(e, StreamEvent::Error { .. })));
    w.finish().await;
}

#[tokio::test]
async fn midstream_error_and_cut_connection_after_output_are_surfaced_once() {
    let mut cut = Reply::sse(ANTHROPIC_TRUNCATED, 40);
    cut.cut = true;
    let server = Server::start(vec![Reply::sse(ANTHROPIC_OVERLOADED_AFTER_TEXT, 20), cut]).await;
    let w = Workers::start(&server).await;
    let r = req(
        WireFormat::AnthropicMessages,
        ProviderId::Anthropic,
        server.base.clone(),
    );
    let (done, items) = w.complete(r.clone()).await;
    let err = done.expect_err("fails");
    assert!(err.contains("overloaded_error"), "{err}");
    let ev = events(&items);
    assert_eq!(ev[0], text("Partial"));
    assert!(matches!(
        ev.last(),
        Some(StreamEvent::Error {
            kind: StreamErrorKind::ProviderError,
            ..
        })
    ));
    assert_eq!(
        server.received().len(),
        1,
        "not replayed after output began"
    );
    let (done, items) = w.complete(r).await;
    assert!(done.is_err());
    let ev = events(&items);
    assert_eq!(ev[0], text("Hel"));
    assert!(matches!(
        ev.last(),
        Some(StreamEvent::Error {
            kind: StreamErrorKind::Interrupted,
            ..
        })
    ));
    assert_eq!(server.received().len(), 2);
    w.finish().await;
}

#[tokio::test]
async fn canary_key_stays_in_the_broker() {
    let body = OPENAI_401.replace("CANARY_PLACEHOLDER", CANARY_OPENAI);
    let server = Server::start(vec![Reply::json(401, &body)
        .header("x-echo-key", CANARY_OPENAI)
        .header("set-cookie", "s=1")])
    .await;
    let w = Workers::start(&server).await;
    let (done, items) = w
        .complete(req(
            WireFormat::OpenAiChat,
            ProviderId::OpenAi,
            format!("{}/v1", server.base),
        ))
        .await;
    let err = done.expect_err("401");
    assert!(err.contains("OPENAI_API_KEY"), "{err}");
    assert!(matches!(
        events(&items).last(),
        Some(StreamEvent::Error {
            kind: StreamErrorKind::Auth,
            ..
        })
    ));
    // The server did get the key, so the key was really in play.
    assert_eq!(
        server.received()[0].header("authorization"),
        Some(format!("Bearer {CANARY_OPENAI}").as_str())
    );
    // A recording of the exchange holds everything the model worker saw of it.
    let mut recorded = req(
        WireFormat::OpenAiChat,
        ProviderId::OpenAi,
        format!("{}/v1", server.base),
    );
    recorded.record = true;
    server.push(Reply::json(401, &body).header("x-echo-key", CANARY_OPENAI));
    let (_, rec_items) = w.complete(recorded).await;
    let lines: Vec<_> = rec_items
        .iter()
        .filter_map(|i| match i {
            model::Item::Recorded(l) => Some(l.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(lines.len(), 1);
    assert!(lines[0].contains("[redacted]"), "{}", lines[0]);
    for hay in [err.as_str(), &format!("{items:?}"), &lines[0]] {
        assert!(
            !hay.contains(CANARY_OPENAI) && !hay.contains(CANARY),
            "{hay}"
        );
    }
    // The model worker's environment: readable only if the kernel lets us (it is non-dumpable).
    let model_pid = w.model_child.id();
    let report = w
        .broker
        .call(broker::Request::DescribeCredentials)
        .await
        .expect("report");
    let broker::Response::Credentials(report) = report else {
        panic!("{report:?}")
    };
    assert_eq!(
        report.available,
        vec![
            (ProviderId::Anthropic, CredentialSource::Env),
            (ProviderId::OpenAi, CredentialSource::Env)
        ]
    );
    assert_eq!(report.detected, Some(ProviderId::Anthropic));
    assert!(!format!("{report:?}").contains(CANARY));
    match std::fs::read(format!("/proc/{model_pid}/environ")) {
        Ok(environ) => {
            let environ = String::from_utf8_lossy(&environ);
            assert!(!environ.contains(CANARY) && !environ.contains(CANARY_OPENAI));
            assert!(!environ.contains("API_KEY"));
        }
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}"),
    }
    let (be, me) = w.finish().await;
    for log in [&be, &me] {
        assert!(
            !log.contains(CANARY) && !log.contains(CANARY_OPENAI),
            "{log}"
        );
    }
}

#[tokio::test]
async fn destinations_off_the_allow_list_are_refused() {
    let server = Server::start(vec![]).await;
    let w = Workers::start(&server).await;
    // Anthropic's key to the OpenAI-configured origin path is fine origin-wise, so use a port
    // nobody configured.
    let (done, items) = w
        .complete(req(
            WireFormat::AnthropicMessages,
            ProviderId::Anthropic,
            "http://127.0.0.1:9/".into(),
        ))
        .await;
    let err = done.expect_err("refused");
    assert!(
        err.contains("may not be sent to http://127.0.0.1:9"),
        "{err}"
    );
    assert!(matches!(
        events(&items).last(),
        Some(StreamEvent::Error {
            kind: StreamErrorKind::Transport,
            ..
        })
    ));
    let (done, _) = w
        .complete(req(
            WireFormat::OpenAiChat,
            ProviderId::Hanzo,
            format!("{}/v1", server.base),
        ))
        .await;
    assert!(done
        .expect_err("refused")
        .contains("hanzo credentials may not be sent"));
    assert!(server.received().is_empty());
    w.finish().await;
}

#[tokio::test]
async fn the_model_worker_cannot_open_sockets_or_files_yet_does_its_job() {
    let server = Server::start(vec![Reply::sse(ANTHROPIC_TEXT, 13)]).await;
    let w = Workers::start(&server).await;
    let addr = server.base.trim_start_matches("http://").to_string();
    for probe in [
        Probe::Socket {
            family: SocketFamily::Inet,
            kind: SocketKind::Stream,
        },
        Probe::Socket {
            family: SocketFamily::Inet6,
            kind: SocketKind::Datagram,
        },
        Probe::ConnectTcp { addr },
        Probe::OpenRead {
            path: "/etc/hostname".into(),
        },
        Probe::OpenWrite {
            path: "/tmp/hanzo-model-probe".into(),
        },
    ] {
        let reply = w
            .model
            .call(model::Request::Common(CommonRequest::Probe(probe.clone())))
            .await
            .expect("probe");
        let model::Response::Common(CommonResponse::Probe(outcome)) = reply else {
            panic!("{reply:?}")
        };
        assert!(
            !outcome.succeeded,
            "{probe:?} succeeded in the model worker: {}",
            outcome.detail
        );
    }
    let (done, items) = w
        .complete(req(
            WireFormat::AnthropicMessages,
            ProviderId::Anthropic,
            server.base.clone(),
        ))
        .await;
    assert_eq!(done.expect("completes").stop_reason, StopReason::EndTurn);
    assert_eq!(events(&items)[0], text("Hello"));
    w.finish().await;
}

#[tokio::test]
async fn record_then_replay_through_the_model_worker() {
    let server = Server::start(vec![
        Reply::json(529, ANTHROPIC_529),
        Reply::sse(ANTHROPIC_TOOLS, 8),
    ])
    .await;
    let w = Workers::start(&server).await;
    let mut live = req(
        WireFormat::AnthropicMessages,
        ProviderId::Anthropic,
        server.base.clone(),
    );
    live.record = true;
    let (done, items) = w.complete(live.clone()).await;
    let live_done = done.expect("completes");
    let lines: Vec<String> = items
        .iter()
        .filter_map(|i| match i {
            model::Item::Recorded(l) => Some(l.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| !l.contains(CANARY)));
    let loaded = w
        .model
        .call(model::Request::LoadCassette {
            jsonl: lines.join("\n"),
        })
        .await
        .expect("loads");
    assert_eq!(loaded, model::Response::CassetteLoaded { exchanges: 2 });
    let mut replay = live;
    replay.provider = ProviderConfig::Replay {
        wire: WireFormat::AnthropicMessages,
    };
    replay.record = false;
    let (done, replayed) = w.complete(replay).await;
    assert_eq!(done.expect("replays"), live_done);
    assert_eq!(events(&replayed), events(&items));
    assert_eq!(server.received().len(), 2, "the replay made no request");
    w.finish().await;
}

#[tokio::test]
async fn cancelling_a_turn_closes_the_provider_connection_through_both_workers() {
    // The stream up to the first text delta, then the server holds the connection open.
    let cut_at = ANTHROPIC_TEXT
        .find("event: content_block_delta")
        .expect("delta");
    let head_end = cut_at + ANTHROPIC_TEXT[cut_at..].find("\n\n").expect("end") + 2;
    let mut held = Reply::sse(&ANTHROPIC_TEXT[..head_end], 4096);
    held.hold = true;
    let server = Server::start(vec![held, Reply::sse(ANTHROPIC_TEXT, 64)]).await;
    let w = Workers::start(&server).await;
    let r = req(
        WireFormat::AnthropicMessages,
        ProviderId::Anthropic,
        server.base.clone(),
    );
    let mut stream = w
        .model
        .call_stream(model::Request::Complete(r.clone()))
        .await
        .expect("sent");
    match stream.next().await {
        Some(Ok(StreamPart::Item(model::Item::Event(e)))) => assert_eq!(e, text("Hello")),
        other => panic!("unexpected {other:?}"),
    }
    stream.cancel().await.expect("cancel sent");
    match stream.next().await {
        Some(Err(e)) => assert!(e.to_string().contains("Cancelled"), "{e}"),
        other => panic!("unexpected {other:?}"),
    }
    // The model worker's abort drops its broker request, whose cancel makes the broker drop the
    // upstream response: the provider sees the connection close.
    let mut closed = false;
    for _ in 0..500 {
        if server.hung_up.load(std::sync::atomic::Ordering::SeqCst) == 1 {
            closed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        closed,
        "the provider connection stayed open after the cancel"
    );
    // Both workers are still serving.
    let (done, _) = w.complete(r).await;
    assert_eq!(done.expect("completes").stop_reason, StopReason::EndTurn);
    w.finish().await;
}
