//! `GET /v1/runs/:id/events`: a run's event rows as Server-Sent Events. Each event's `id:` is its
//! row id, so a client that reconnects with `Last-Event-ID: N` gets exactly the rows after N.
//! Rows already recorded come first; then new ones as they are recorded (the registry says when);
//! the stream ends once the run is over and its last row sent. A run this server is not driving
//! (started by another process) is followed by reading the store at a short interval.

use super::http::{Body, ChannelBody};
use super::runs::{event_kind, Registry};
use bytes::Bytes;
use hanzo_store::{EventRecord, RunId, RunStatus, RunStore};
use http::{header, Response, StatusCode};
use http_body_util::BodyExt;
use std::path::PathBuf;
use std::time::Duration;

/// Rows read from the store at a time.
const BATCH: usize = 256;
/// How often a run driven by another process is looked at, and the keep-alive interval's unit.
const POLL: Duration = Duration::from_millis(250);
/// Idle polls between keep-alive comments (about 15 s).
const KEEPALIVE_POLLS: u32 = 60;

/// One SSE frame for an event row. The data is compact JSON (no raw newline can occur in it).
pub fn frame(e: &EventRecord) -> Bytes {
    let data = serde_json::to_string(&e.data).expect("a stored JSON value serializes");
    Bytes::from(format!(
        "id: {}\nevent: {}\ndata: {data}\n\n",
        e.id,
        event_kind(&e.kind)
    ))
}

/// What a stream follows.
pub struct Follow {
    /// The run store's data directory.
    pub data_dir: PathBuf,
    /// The org whose store holds the run.
    pub org: String,
    /// The run.
    pub run: RunId,
    /// The last event row the client has (`Last-Event-ID`; 0: none); rows after it are sent.
    pub after: i64,
    /// The active runs, whose new rows wake the stream.
    pub registry: Registry,
}

/// The response: headers now, rows as they come.
pub fn response(f: Follow) -> Response<Body> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(pump(
        f,
        tx,
        frame,
        Some(Bytes::from_static(b": keep-alive\n\n")),
    ));
    let mut r = Response::new(ChannelBody(rx).boxed());
    *r.status_mut() = StatusCode::OK;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    h.insert("x-accel-buffering", header::HeaderValue::from_static("no"));
    r
}

/// Read a batch of rows after `after`, and whether the run was over before the read.
fn read_batch(
    f: &Follow,
    store: &mut RunStore,
    after: i64,
    sweep: bool,
) -> Result<(Vec<EventRecord>, bool), String> {
    let driving = f.registry.is_active(&f.org, f.run);
    if sweep && !driving {
        // A run whose process died (a killed server's child, a killed `hanzo-dev run`) would
        // stay `running` and keep this stream open for ever: close it as interrupted.
        store.mark_interrupted_runs().map_err(|e| e.to_string())?;
    }
    let status = store.get_run(f.run).map_err(|e| e.to_string())?.status;
    let rows = store
        .events_after(f.run, after, BATCH)
        .map_err(|e| e.to_string())?;
    // Over: not running and not driven here. Checked before the read, so every row the run
    // will ever have was committed before it.
    Ok((rows, !driving && status != RunStatus::Running))
}

/// Send `frame` of each of the run's rows after `f.after` into `tx`, then of each new one as it
/// is recorded, until the run is over (or `tx` is closed); `keepalive` (if any) after about
/// 15 s without a row. The SSE stream and the WebSocket bridge's subscriptions share it.
pub async fn pump<F>(
    f: Follow,
    tx: tokio::sync::mpsc::Sender<Bytes>,
    frame: F,
    keepalive: Option<Bytes>,
) where
    F: Fn(&EventRecord) -> Bytes,
{
    let mut after = f.after;
    let mut watch = f.registry.watch(&f.org, f.run);
    let mut idle = 0u32;
    let mut first = true;
    let f = std::sync::Arc::new(f);
    // One connection for the whole stream, moved to a blocking thread for each read.
    let mut store = None;
    loop {
        let ff = f.clone();
        let sweep = first || idle + 1 >= KEEPALIVE_POLLS;
        first = false;
        let batch = tokio::task::spawn_blocking(move || {
            let mut s = match store {
                Some(s) => s,
                None => RunStore::open(&ff.data_dir, &ff.org).map_err(|e| e.to_string())?,
            };
            let read = read_batch(&ff, &mut s, after, sweep);
            read.map(|r| (s, r))
        })
        .await;
        let (rows, over) = match batch {
            Ok(Ok((s, b))) => {
                store = Some(s);
                b
            }
            Ok(Err(e)) => {
                eprintln!("event stream of run {}: {e}", f.run.0);
                return;
            }
            Err(_) => return,
        };
        let full = rows.len() == BATCH;
        for e in &rows {
            if tx.send(frame(e)).await.is_err() {
                return; // the client went away
            }
            after = e.id;
        }
        if full {
            continue;
        }
        if over {
            return;
        }
        if rows.is_empty() {
            idle += 1;
        } else {
            idle = 0;
        }
        if idle >= KEEPALIVE_POLLS {
            idle = 0;
            if let Some(k) = &keepalive {
                if tx.send(k.clone()).await.is_err() {
                    return;
                }
            }
        }
        wait_for_more(&mut watch, &f).await;
    }
}

/// Until the run records something (or at most one poll interval).
async fn wait_for_more(watch: &mut Option<tokio::sync::watch::Receiver<u64>>, f: &Follow) {
    if watch.is_none() {
        *watch = f.registry.watch(&f.org, f.run);
    }
    match watch {
        Some(w) => {
            if let Ok(Err(_)) = tokio::time::timeout(POLL, w.changed()).await {
                // The run's sender is gone: it ended; the next read sees that.
                *watch = None;
            }
        }
        None => tokio::time::sleep(POLL).await,
    }
}
