//! The typed channel end to end over a real socketpair, inside one process: handshake, replies
//! out of order, streaming, cancellation, ping, and a peer that dies or misbehaves.

use hanzo_ipc::attest::{
    Attestation, CapsAttestation, LandlockAttestation, LandlockStatus, SeccompAttestation,
    SocketPolicy,
};
use hanzo_ipc::channel::{
    serve, CallError, ChannelEnd, Client, EventFlow, Handler, ItemSink, ServerWriter, StreamPart,
};
use hanzo_ipc::frame::{FrameError, DEFAULT_MAX_FRAME};
use hanzo_ipc::proto::{self, frame_type, HandshakeError, Hello, RemoteErrorKind};
use hanzo_ipc::roles::tools::{Event, Item, Request, Response, ToolsProtocol};
use hanzo_ipc::roles::{CommonEvent, CommonItem, CommonRequest, CommonResponse, LogLevel};
use hanzo_ipc::socket::WriteHalf;
use hanzo_ipc::transport::{self, FrameReader, FrameWriter, IpcError};
use hanzo_ipc::Role;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::net::UnixStream;
use tokio::sync::Notify;

fn attestation(role: Role) -> Attestation {
    Attestation {
        role,
        pid: std::process::id(),
        no_new_privs: true,
        non_dumpable: true,
        caps: CapsAttestation {
            effective_empty: true,
            permitted_empty: true,
            inheritable_empty: true,
            ambient_empty: true,
            bounding_empty: true,
        },
        landlock: LandlockAttestation {
            kernel_abi: 7,
            status: LandlockStatus::FullyEnforced,
            grants: vec![],
            scoped: true,
        },
        seccomp: SeccompAttestation {
            installed: true,
            sockets: SocketPolicy::UnixOnly,
            denied_syscalls: vec!["ptrace".into()],
            x32_denied: true,
            namespace_creation_denied: true,
            allow_list: None,
            command_rules: false,
            filters: 4,
        },
        namespaces: vec![],
        notes: vec![],
        helpers: vec![],
    }
}

/// Test handler: `Sleep` waits for `gate` (not for time); `Echo` answers at once;
/// `EchoStream` streams.
struct Gated {
    gate: Arc<Notify>,
    /// Told each time a gated request has started in the worker.
    entered: Arc<Notify>,
    dropped_unfinished: Arc<AtomicBool>,
    /// Set by `stop`: whether a gated request had been dropped unfinished by then.
    stopped: Arc<std::sync::Mutex<Option<bool>>>,
}

struct FlagOnDrop(Arc<AtomicBool>, bool);
impl Drop for FlagOnDrop {
    fn drop(&mut self) {
        if !self.1 {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

impl Handler<ToolsProtocol, WriteHalf> for Gated {
    async fn handle(
        &self,
        request: Request,
        items: ItemSink<ToolsProtocol, WriteHalf>,
    ) -> Result<Response, hanzo_ipc::proto::RemoteError> {
        let Request::Common(req) = request else {
            panic!("unexpected {request:?}");
        };
        let resp = match req {
            CommonRequest::Echo { data } => CommonResponse::Echo { data },
            CommonRequest::Sleep { .. } => {
                let mut guard = FlagOnDrop(self.dropped_unfinished.clone(), false);
                self.entered.notify_one();
                self.gate.notified().await;
                guard.1 = true;
                CommonResponse::Slept
            }
            CommonRequest::EchoStream { data, count } => {
                for seq in 0..count {
                    items
                        .send(Item::Common(CommonItem::Echo {
                            seq,
                            data: data.clone(),
                        }))
                        .await
                        .expect("send item");
                }
                CommonResponse::EchoStreamDone { count }
            }
            other => panic!("unexpected {other:?}"),
        };
        Ok(Response::Common(resp))
    }

    async fn stop(&self) {
        *self.stopped.lock().unwrap() = Some(self.dropped_unfinished.load(Ordering::SeqCst));
    }
}

struct Pair {
    client: Client<ToolsProtocol, WriteHalf>,
    end: tokio::sync::oneshot::Receiver<ChannelEnd>,
    gate: Arc<Notify>,
    entered: Arc<Notify>,
    dropped_unfinished: Arc<AtomicBool>,
    stopped: Arc<std::sync::Mutex<Option<bool>>>,
    server: tokio::task::JoinHandle<Result<(), IpcError>>,
}

type Halves = (transport::UnixFrameReader, transport::UnixFrameWriter);

/// Both ends of a tools channel over a socketpair, handshake done: (supervisor's, worker's).
async fn handshaken() -> (Halves, Halves) {
    let (a, b) = UnixStream::pair().expect("socketpair");
    let (mut cr, mut cw) =
        transport::split(a.into_std().expect("std").into(), DEFAULT_MAX_FRAME).expect("split");
    let (mut sr, mut sw) =
        transport::split(b.into_std().expect("std").into(), DEFAULT_MAX_FRAME).expect("split");
    let att = attestation(Role::Tools);
    let (sup, wrk) = tokio::join!(
        transport::supervisor_handshake(&mut cr, &mut cw, Role::Tools),
        transport::worker_handshake(&mut sr, &mut sw, Role::Tools, &att),
    );
    let (hello, got_att) = sup.expect("supervisor handshake");
    assert_eq!(hello.role, Role::Tools);
    assert_eq!(got_att, att);
    assert_eq!(wrk.expect("worker handshake").role, Role::Tools);
    ((cr, cw), (sr, sw))
}

async fn connected_pair() -> Pair {
    let ((cr, cw), (sr, sw)) = handshaken().await;
    let gate = Arc::new(Notify::new());
    let entered = Arc::new(Notify::new());
    let dropped_unfinished = Arc::new(AtomicBool::new(false));
    let stopped = Arc::new(std::sync::Mutex::new(None));
    let handler = Arc::new(Gated {
        gate: gate.clone(),
        entered: entered.clone(),
        dropped_unfinished: dropped_unfinished.clone(),
        stopped: stopped.clone(),
    });
    let server = tokio::spawn(serve::<ToolsProtocol, _, _, _>(
        sr,
        ServerWriter::new(sw),
        handler,
    ));
    let (client, _events, end) = Client::start(cr, cw);
    Pair {
        client,
        end,
        gate,
        entered,
        dropped_unfinished,
        stopped,
        server,
    }
}

/// A gated request the worker has started and holds open (it waits for `gate`), and the task
/// that waits for its answer.
async fn held_open(p: &Pair) -> tokio::task::JoinHandle<Result<Response, CallError>> {
    let c = p.client.clone();
    let pending = tokio::spawn(async move {
        c.call(Request::Common(CommonRequest::Sleep { ms: 0 }))
            .await
    });
    p.entered.notified().await;
    pending
}

fn echo(data: &[u8]) -> Request {
    Request::Common(CommonRequest::Echo {
        data: data.to_vec(),
    })
}

#[tokio::test]
async fn replies_are_matched_by_id_even_out_of_order() {
    let p = connected_pair().await;
    let slow = held_open(&p).await;
    // The fast request, sent after the slow one, completes while the slow one still waits.
    let fast = p.client.call(echo(b"fast")).await.expect("fast reply");
    assert_eq!(
        fast,
        Response::Common(CommonResponse::Echo {
            data: b"fast".to_vec()
        })
    );
    assert!(!slow.is_finished());
    p.gate.notify_one();
    let slow = slow.await.expect("join").expect("slow reply");
    assert_eq!(slow, Response::Common(CommonResponse::Slept));
}

#[tokio::test]
async fn streamed_response_delivers_every_item_then_done() {
    let p = connected_pair().await;
    let mut stream = p
        .client
        .call_stream(Request::Common(CommonRequest::EchoStream {
            data: b"x".to_vec(),
            count: 100,
        }))
        .await
        .expect("stream");
    let mut seqs = Vec::new();
    let done = loop {
        match stream.next().await.expect("part").expect("ok") {
            StreamPart::Item(Item::Common(CommonItem::Echo { seq, .. })) => seqs.push(seq),
            StreamPart::Done(d) => break d,
            StreamPart::Item(other) => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(seqs, (0..100).collect::<Vec<_>>());
    assert_eq!(
        done,
        Response::Common(CommonResponse::EchoStreamDone { count: 100 })
    );
    assert!(stream.next().await.is_none());
}

#[tokio::test]
async fn cancel_aborts_the_request_in_the_worker() {
    let p = connected_pair().await;
    let stream = p
        .client
        .call_stream(Request::Common(CommonRequest::Sleep { ms: 0 }))
        .await
        .expect("sent");
    // Make sure the worker has started the request before cancelling it.
    p.client.ping().await.expect("ping");
    stream.cancel().await.expect("cancel sent");
    let mut stream = stream;
    match stream.next().await {
        Some(Err(CallError::Remote { error, .. })) => {
            assert_eq!(error.kind, RemoteErrorKind::Cancelled)
        }
        other => panic!("expected a cancelled error, got {other:?}"),
    }
    p.client.ping().await.expect("channel still usable");
    assert!(p.dropped_unfinished.load(Ordering::SeqCst));
}

/// The orderly stop: the supervisor ends the channel for writing; the worker's serve loop
/// aborts what is in flight, waits until it is dropped, runs the handler's `stop` after that,
/// and ends cleanly. The caller's request fails at once with the reason given.
#[tokio::test]
async fn finishing_the_channel_aborts_requests_in_flight_then_stops_the_handler() {
    let p = connected_pair().await;
    let pending = held_open(&p).await;
    assert_eq!(*p.stopped.lock().unwrap(), None);
    p.client.finish("the run is over").await;
    match pending.await.expect("join") {
        Err(CallError::WorkerGone { reason, .. }) => assert_eq!(reason, "the run is over"),
        other => panic!("expected the request to fail with the reason, got {other:?}"),
    }
    p.server
        .await
        .expect("join")
        .expect("the serve loop ends cleanly at the end of its input");
    assert_eq!(
        *p.stopped.lock().unwrap(),
        Some(true),
        "stop ran, after the request in flight was dropped"
    );
    assert!(p.client.is_closed());
}

#[tokio::test]
async fn in_flight_requests_fail_at_once_when_the_worker_dies() {
    let p = connected_pair().await;
    let pending = held_open(&p).await;
    p.server.abort();
    let err = pending.await.expect("join").expect_err("must fail");
    assert!(err.is_worker_gone(), "{err:?}");
    let end = p.end.await;
    assert!(matches!(end, Ok(ChannelEnd::Eof)), "{end:?}");
    let again = p.client.call(echo(b"late")).await.expect_err("closed");
    assert!(again.is_worker_gone());
}

async fn client_against_raw_peer(bytes: &[u8]) -> (ChannelEnd, Result<Response, CallError>) {
    let (a, b) = UnixStream::pair().expect("socketpair");
    let (cr, cw) = transport::split(a.into_std().expect("std").into(), 1024).expect("split");
    let (client, _events, end) = Client::<ToolsProtocol, _>::start(cr, cw);
    let (_br, bw) = b.into_split();
    let mut raw = FrameWriter::new(bw, u32::MAX);
    let c = client.clone();
    let call = tokio::spawn(async move { c.call(echo(b"x")).await });
    raw.send_raw(bytes).await.expect("write");
    let end = end.await.expect("end reported");
    (end, call.await.expect("join"))
}

#[tokio::test]
async fn zero_length_frame_from_worker_ends_the_channel_with_a_typed_error() {
    let (end, call) = client_against_raw_peer(&[0, 0, 0, 0]).await;
    assert!(matches!(
        end,
        ChannelEnd::Error(IpcError::Frame(FrameError::ZeroLength))
    ));
    assert!(call.expect_err("failed").is_worker_gone());
}

#[tokio::test]
async fn oversized_claim_is_refused_before_allocation() {
    let (end, call) = client_against_raw_peer(&[0xff, 0xff, 0xff, 0xff, 0x20]).await;
    match end {
        ChannelEnd::Error(IpcError::Frame(FrameError::TooLarge { len, max })) => {
            assert_eq!((len, max), (u32::MAX, 1024));
        }
        other => panic!("expected too_large, got {other}"),
    }
    assert!(call.is_err());
}

#[tokio::test]
async fn garbage_payload_is_a_decode_error_not_a_panic() {
    let (end, call) =
        client_against_raw_peer(&[0, 0, 0, 4, frame_type::REPLY, 0xff, 0xff, 0xff]).await;
    assert!(
        matches!(end, ChannelEnd::Error(IpcError::Decode(_))),
        "{end}"
    );
    assert!(call.is_err());
}

#[tokio::test]
async fn unknown_frame_type_ends_the_channel() {
    let (end, _) = client_against_raw_peer(&[0, 0, 0, 1, 0x77]).await;
    assert!(matches!(
        end,
        ChannelEnd::Error(IpcError::UnexpectedFrame { got: 0x77 })
    ));
}

async fn handshake_against(hello: Hello) -> IpcError {
    let (a, b) = UnixStream::pair().expect("socketpair");
    let (mut cr, mut cw) =
        transport::split(a.into_std().expect("std").into(), DEFAULT_MAX_FRAME).expect("split");
    let (br, bw) = b.into_split();
    let mut w = FrameWriter::new(bw, DEFAULT_MAX_FRAME);
    w.send(frame_type::HELLO, &proto::encode_payload(&hello))
        .await
        .expect("send hello");
    let _keep = FrameReader::new(br, DEFAULT_MAX_FRAME);
    transport::supervisor_handshake(&mut cr, &mut cw, Role::Model)
        .await
        .expect_err("must be refused")
}

#[tokio::test]
async fn major_version_mismatch_is_a_clear_error() {
    let mut hello = Hello::new(Role::Model);
    hello.major += 1;
    let err = handshake_against(hello).await;
    assert!(matches!(
        err,
        IpcError::Handshake(HandshakeError::VersionMismatch { .. })
    ));
    assert!(err.to_string().contains("same hanzo-dev build"), "{err}");
}

#[tokio::test]
async fn minor_version_difference_is_accepted() {
    let mut hello = Hello::new(Role::Model);
    hello.minor += 3;
    assert_eq!(hello.check(Role::Model), Ok(()));
}

#[tokio::test]
async fn wrong_magic_and_wrong_role_are_refused() {
    let mut bad = Hello::new(Role::Model);
    bad.magic = *b"HTTP";
    assert!(matches!(
        handshake_against(bad).await,
        IpcError::Handshake(HandshakeError::BadMagic { .. })
    ));
    let other = Hello::new(Role::Broker);
    assert!(matches!(
        handshake_against(other).await,
        IpcError::Handshake(HandshakeError::WrongRole {
            expected: Role::Model,
            got: Role::Broker
        })
    ));
}

#[tokio::test]
async fn request_larger_than_the_channel_limit_is_refused_locally() {
    let (a, b) = UnixStream::pair().expect("socketpair");
    let (cr, cw) = transport::split(a.into_std().expect("std").into(), 128).expect("split");
    let (client, _e, _end) = Client::<ToolsProtocol, _>::start(cr, cw);
    let _b = b;
    let err = client.call(echo(&[0; 512])).await.expect_err("too large");
    assert!(matches!(
        err,
        CallError::TooLarge(FrameError::TooLarge { .. })
    ));
}

/// A worker that sends `count` log events and then nothing; the client end starts with `flow`.
async fn flooding_pair(
    count: usize,
    flow: EventFlow,
) -> (
    Client<ToolsProtocol, WriteHalf>,
    tokio::sync::mpsc::Receiver<Event>,
    tokio::task::JoinHandle<()>,
) {
    let ((cr, cw), (sr, sw)) = handshaken().await;
    let writer = ServerWriter::new(sw);
    let sink = writer.events::<ToolsProtocol>();
    let handler = Arc::new(Gated {
        gate: Arc::new(Notify::new()),
        entered: Arc::new(Notify::new()),
        dropped_unfinished: Arc::new(AtomicBool::new(false)),
        stopped: Arc::default(),
    });
    tokio::spawn(serve::<ToolsProtocol, _, _, _>(sr, writer, handler));
    let flood = tokio::spawn(async move {
        for i in 0..count {
            sink.send(Event::Common(CommonEvent::Log {
                level: LogLevel::Info,
                message: format!("record {i}"),
            }))
            .await
            .expect("event sent");
        }
    });
    let (client, events, _end) = Client::<ToolsProtocol, _>::start_with(cr, cw, flow);
    (client, events, flood)
}

fn message(event: Event) -> String {
    let Event::Common(CommonEvent::Log { message, .. }) = event;
    message
}

#[tokio::test]
async fn with_backpressure_a_burst_of_events_arrives_whole_and_in_order() {
    // Four times the receiver's room, read slowly: after each event the test yields, so the
    // reader could run ahead and (if it dropped events) lose some. Once the worker has sent all,
    // a call: its reply is behind the burst in the stream, so when it is back every event the
    // reader kept has been handed over.
    let (client, mut events, mut flood) = flooding_pair(1024, EventFlow::Backpressure).await;
    let mut got = Vec::new();
    loop {
        tokio::select! {
            biased;
            Some(e) = events.recv() => {
                got.push(message(e));
                for _ in 0..8 {
                    tokio::task::yield_now().await;
                }
            }
            sent = &mut flood => {
                sent.expect("the worker sent every event");
                break;
            }
        }
    }
    let mut call = tokio::spawn(async move { client.call(echo(b"after")).await });
    let reply = loop {
        tokio::select! {
            biased;
            Some(e) = events.recv() => got.push(message(e)),
            reply = &mut call => break reply.expect("call task"),
        }
    };
    let want: Vec<String> = (0..1024).map(|i| format!("record {i}")).collect();
    let first_gap = got.iter().zip(&want).position(|(g, w)| g != w);
    assert_eq!((got.len(), first_gap), (1024, None), "events lost");
    assert_eq!(
        reply.expect("reply"),
        Response::Common(CommonResponse::Echo {
            data: b"after".to_vec()
        })
    );
}

#[tokio::test]
async fn by_default_a_burst_beyond_the_receiver_is_dropped_and_replies_are_not_held() {
    let (client, mut events, flood) = flooding_pair(1024, EventFlow::DropWhenFull).await;
    // The worker finishes sending although nobody reads, and a reply overtakes the backlog.
    flood.await.expect("the worker sent every event");
    client.call(echo(b"after")).await.expect("reply");
    let mut kept = 0;
    while events.try_recv().is_ok() {
        kept += 1;
    }
    assert!(kept < 1024, "kept {kept}");
    assert!(kept > 0);
}
