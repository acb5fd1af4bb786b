//! The model worker process: serves `Complete` and `LoadCassette` on its supervisor channel and
//! reaches HTTP only through the broker on the direct channel (fd 4).

use crate::cassette::{parse_cassette, Recording, ReplayTransport};
use crate::transport::{BrokerTransport, HttpTransport};
use crate::turn::run_turn_with_notices;
use hanzo_ipc::channel::{Client, Handler, ItemSink};
use hanzo_ipc::frame::DEFAULT_MAX_FRAME;
use hanzo_ipc::proto::{RemoteError, RemoteErrorKind};
use hanzo_ipc::roles::http::{direct_handshake, HttpProtocol};
use hanzo_ipc::roles::model::{
    CompletionRequest, Item, ModelProtocol, ProviderConfig, Request, Response,
};
use hanzo_ipc::socket::WriteHalf;
use hanzo_ipc::transport;
use hanzo_worker::{handle_common, WorkerContext, WorkerOptions};
use std::os::fd::OwnedFd;
use std::sync::Mutex;
use tokio::sync::{mpsc, OnceCell};

/// The model worker's entry point (`hanzo-dev __worker model …`); returns the exit code.
pub fn worker_main(opts: WorkerOptions) -> i32 {
    hanzo_worker::run_with::<ModelProtocol, _, _>(opts, |ctx: WorkerContext<ModelProtocol>| {
        ModelHandler {
            direct: Mutex::new(ctx.direct),
            broker: OnceCell::new(),
            replay: Mutex::new(None),
        }
    })
}

type Broker = BrokerTransport<WriteHalf>;

struct ModelHandler {
    /// fd 4 until the first request connects it.
    direct: Mutex<Option<OwnedFd>>,
    broker: OnceCell<Result<Broker, String>>,
    replay: Mutex<Option<ReplayTransport>>,
}

impl ModelHandler {
    async fn broker(&self) -> Result<&Broker, RemoteError> {
        let connected = self
            .broker
            .get_or_init(|| async {
                let fd = self
                    .direct
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                    .ok_or_else(|| {
                        "no direct channel to the broker (fd 4 was not passed to the model worker)"
                            .to_string()
                    })?;
                connect_broker(fd).await
            })
            .await;
        connected
            .as_ref()
            .map_err(|m| RemoteError::new(RemoteErrorKind::Refused, m.clone()))
    }

    async fn complete(
        &self,
        req: CompletionRequest,
        items: &ItemSink<ModelProtocol, WriteHalf>,
    ) -> Result<Response, RemoteError> {
        match &req.provider {
            ProviderConfig::Http { .. } => {
                let broker = self.broker().await?;
                turn_with(broker, &req, items).await
            }
            ProviderConfig::Replay { .. } => {
                let replay = self
                    .replay
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone()
                    .ok_or_else(|| {
                        RemoteError::new(
                            RemoteErrorKind::Refused,
                            "replay provider: no cassette loaded (send LoadCassette first)",
                        )
                    })?;
                turn_with(&replay, &req, items).await
            }
        }
    }
}

async fn connect_broker(fd: OwnedFd) -> Result<Broker, String> {
    let (mut reader, mut writer) =
        transport::split(fd, DEFAULT_MAX_FRAME).map_err(|e| format!("direct channel: {e}"))?;
    direct_handshake(&mut reader, &mut writer)
        .await
        .map_err(|e| format!("direct channel to the broker: {e}"))?;
    let (client, _events, _end) = Client::<HttpProtocol, _>::start(reader, writer);
    Ok(BrokerTransport::new(client))
}

async fn turn_with<T: HttpTransport>(
    transport: &T,
    req: &CompletionRequest,
    items: &ItemSink<ModelProtocol, WriteHalf>,
) -> Result<Response, RemoteError> {
    if req.record {
        let recording = Recording::new(transport);
        let result = forward(&recording, req, items).await;
        for line in recording.take_lines() {
            send(items, Item::Recorded(line)).await?;
        }
        result
    } else {
        forward(transport, req, items).await
    }
}

async fn forward<T: HttpTransport>(
    transport: &T,
    req: &CompletionRequest,
    items: &ItemSink<ModelProtocol, WriteHalf>,
) -> Result<Response, RemoteError> {
    let (tx, mut rx) = mpsc::channel(64);
    let (retry_tx, mut retry_rx) = mpsc::channel(8);
    let turn = async move {
        let result = run_turn_with_notices(transport, req, &tx, Some(&retry_tx), None).await;
        drop(tx);
        drop(retry_tx);
        result
    };
    let pump = async {
        let (mut events_open, mut retries_open) = (true, true);
        while events_open || retries_open {
            tokio::select! {
                ev = rx.recv(), if events_open => match ev {
                    Some(ev) => send(items, Item::Event(ev)).await?,
                    None => events_open = false,
                },
                notice = retry_rx.recv(), if retries_open => match notice {
                    Some(n) => send(items, Item::Retrying(n)).await?,
                    None => retries_open = false,
                },
            }
        }
        Ok::<(), RemoteError>(())
    };
    let (result, pumped) = tokio::join!(turn, pump);
    pumped?;
    match result {
        Ok(c) => Ok(Response::Completed(c)),
        // The error event has already been streamed; the reply carries the same message.
        Err(e) => Err(RemoteError::new(RemoteErrorKind::Refused, e.to_string())),
    }
}

async fn send(items: &ItemSink<ModelProtocol, WriteHalf>, item: Item) -> Result<(), RemoteError> {
    items
        .send(item)
        .await
        .map_err(|e| RemoteError::new(RemoteErrorKind::Internal, format!("channel: {e}")))
}

impl<T: HttpTransport> HttpTransport for &T {
    type Body = T::Body;
    fn send(
        &self,
        request: &hanzo_ipc::roles::http::HttpRequest,
    ) -> impl std::future::Future<
        Output = Result<
            (hanzo_ipc::roles::http::HttpHead, T::Body),
            crate::transport::TransportError,
        >,
    > + Send {
        (**self).send(request)
    }
}

impl Handler<ModelProtocol, WriteHalf> for ModelHandler {
    async fn handle(
        &self,
        request: Request,
        items: ItemSink<ModelProtocol, WriteHalf>,
    ) -> Result<Response, RemoteError> {
        match request {
            Request::Common(c) => handle_common::<ModelProtocol, _>(c, items)
                .await
                .map(Response::Common),
            Request::LoadCassette { jsonl } => {
                let exchanges = parse_cassette(&jsonl)
                    .map_err(|e| RemoteError::new(RemoteErrorKind::BadRequest, e.to_string()))?;
                let n = u32::try_from(exchanges.len()).unwrap_or(u32::MAX);
                *self.replay.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(ReplayTransport::new(exchanges));
                Ok(Response::CassetteLoaded { exchanges: n })
            }
            Request::Complete(req) => self.complete(req, &items).await,
        }
    }
}
