//! Trace export: the run loop's `agent.run` / `agent.step` / `agent.tool` spans sent to an
//! OpenTelemetry collector over OTLP/HTTP, configured by the standard `OTEL_*` variables and off
//! unless an endpoint is set.
//!
//! Three parts: [`layer`] keeps the ended spans (a `tracing` layer with its own filter),
//! [`encode`] writes them as an `ExportTraceServiceRequest` (protobuf or JSON), and
//! [`Exporter`], started with a supervisor tree, hands each batch to the broker, which sends it
//! with the collector headers only it holds (design §12: the runtime's network goes through the
//! broker). gRPC is not offered: OTLP/HTTP is what every collector also accepts (port 4318).

pub mod encode;
pub mod layer;

use crate::worker::WorkerHandle;
use encode::Origin;
use hanzo_ipc::roles::broker::{BrokerProtocol, Request, Response, TraceExport};
use layer::{AttrValue, OtlpLayer, Pending};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Spans per export request.
pub const BATCH: usize = 512;
/// How often pending spans are sent when fewer than a batch are waiting.
const INTERVAL: Duration = Duration::from_secs(2);
/// How long [`Exporter::flush`] waits at the end of a tree.
const FLUSH_PATIENCE: Duration = Duration::from_secs(15);

/// The encoding on the wire (`OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `http/protobuf`, the specification's default.
    Protobuf,
    /// `http/json`.
    Json,
}

impl Encoding {
    fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// Where and how spans are exported, from the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    /// The traces URL (`…/v1/traces`).
    pub endpoint: String,
    /// How the request body is encoded (OTLP/HTTP protobuf or JSON).
    pub encoding: Encoding,
    /// Milliseconds one export request may take (`OTEL_EXPORTER_OTLP_TIMEOUT`, default 10 000).
    pub timeout_ms: u64,
    /// `service.name` and the `OTEL_RESOURCE_ATTRIBUTES`.
    pub resource: Vec<(String, String)>,
}

/// Why the `OTEL_*` variables were not taken (export is then off, with this as a warning).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// `OTEL_TRACES_EXPORTER` names an exporter other than `otlp` or `none` (the value).
    #[error(
        "OTEL_TRACES_EXPORTER={0:?} is not supported: hanzo-dev exports traces with `otlp` \
         (or set it to `none`)"
    )]
    Exporter(String),
    /// The protocol is `grpc`, which is not implemented.
    #[error(
        "OTLP over gRPC is not supported: set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf (or \
         http/json) and point the endpoint at the collector's OTLP/HTTP port (4318 by default)"
    )]
    Grpc,
    /// The protocol variable holds an unknown value (the value).
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL={0:?} is not one of http/protobuf, http/json")]
    Protocol(String),
    /// The endpoint is not an `http://` or `https://` URL with a host (the value).
    #[error("the OTLP endpoint {0:?} is not an http:// or https:// URL with a host")]
    Endpoint(String),
    /// The endpoint URL carries a user name or password; credentials go in the headers, which
    /// only the broker holds.
    #[error(
        "the OTLP endpoint carries a user name or password; give credentials in \
         OTEL_EXPORTER_OTLP_HEADERS instead (only the broker holds that variable)"
    )]
    Credentials,
    /// A timeout variable is not a positive whole number of milliseconds.
    #[error("{name}={value:?} is not a number of milliseconds")]
    Timeout {
        /// The variable (`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` or `OTEL_EXPORTER_OTLP_TIMEOUT`).
        name: &'static str,
        /// Its value.
        value: String,
    },
}

impl OtlpConfig {
    /// The configuration the `OTEL_*` variables in `get` describe; `Ok(None)` when export is
    /// off (no endpoint, `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`). The
    /// signal-specific `OTEL_EXPORTER_OTLP_TRACES_*` variable wins over the general one; the
    /// general endpoint gets `/v1/traces` appended, the traces one is taken as it is.
    pub fn from_env(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<OtlpConfig>, ConfigError> {
        let get = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        match get("OTEL_TRACES_EXPORTER").as_deref() {
            None | Some("otlp") => {}
            Some("none") => return Ok(None),
            Some(other) => return Err(ConfigError::Exporter(other.to_string())),
        }
        let endpoint = match (
            get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            get("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(traces), _) => traces,
            (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        check_endpoint(&endpoint)?;
        let protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| get("OTEL_EXPORTER_OTLP_PROTOCOL"));
        let encoding = match protocol.as_deref() {
            None | Some("http/protobuf") => Encoding::Protobuf,
            Some("http/json") => Encoding::Json,
            Some("grpc") => return Err(ConfigError::Grpc),
            Some(other) => return Err(ConfigError::Protocol(other.to_string())),
        };
        let timeout_ms = match (
            get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
                .map(|v| ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", v)),
            get("OTEL_EXPORTER_OTLP_TIMEOUT").map(|v| ("OTEL_EXPORTER_OTLP_TIMEOUT", v)),
        ) {
            (Some((name, v)), _) | (None, Some((name, v))) => v
                .parse::<u64>()
                .ok()
                .filter(|ms| *ms > 0)
                .ok_or(ConfigError::Timeout { name, value: v })?,
            (None, None) => 10_000,
        };
        let mut resource = parse_resource(&get("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default());
        let service = get("OTEL_SERVICE_NAME").unwrap_or_else(|| "hanzo-dev".to_string());
        match resource.iter_mut().find(|(k, _)| k == "service.name") {
            // OTEL_SERVICE_NAME wins over a service.name in the attributes.
            Some(slot) if get("OTEL_SERVICE_NAME").is_some() => slot.1 = service,
            Some(_) => {}
            None => resource.insert(0, ("service.name".to_string(), service)),
        }
        Ok(Some(OtlpConfig {
            endpoint,
            encoding,
            timeout_ms,
            resource,
        }))
    }

    fn origin(&self) -> Origin {
        let mut resource: Vec<(String, AttrValue)> = self
            .resource
            .iter()
            .map(|(k, v)| (k.clone(), AttrValue::Str(v.clone())))
            .collect();
        resource.push((
            "service.version".to_string(),
            AttrValue::Str(env!("CARGO_PKG_VERSION").to_string()),
        ));
        Origin {
            resource,
            scope_name: "hanzo-dev".to_string(),
            scope_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// An `http://` or `https://` URL with a host and no user information (the broker parses it
/// again before sending).
fn check_endpoint(endpoint: &str) -> Result<(), ConfigError> {
    let bad = || ConfigError::Endpoint(endpoint.to_string());
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .ok_or_else(bad)?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(ConfigError::Credentials);
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    if host.is_empty()
        || authority
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(bad());
    }
    Ok(())
}

/// `OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs separated by commas, values percent-decoded;
/// a malformed pair is skipped (the specification says to ignore the whole value; keeping the
/// well-formed pairs loses less).
fn parse_resource(raw: &str) -> Vec<(String, String)> {
    raw.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let k = k.trim();
            let v = percent_decode(v.trim())?;
            (!k.is_empty()).then(|| (k.to_string(), v))
        })
        .collect()
}

fn percent_decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut rest = s.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            out.push(b);
            rest = tail;
        }
    }
    String::from_utf8(out).ok()
}

/// The process's span queue, present once [`layer_from_env`] installed the layer.
static PENDING: OnceLock<Arc<Pending>> = OnceLock::new();

/// The export configuration of this process, read once by [`layer_from_env`].
static CONFIG: OnceLock<OtlpConfig> = OnceLock::new();

/// The layer to install when the environment asks for export (`Ok(None)`: it does not); the
/// configuration is kept for the [`Exporter`]s of the trees this process starts.
pub fn layer_from_env(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<OtlpLayer>, ConfigError> {
    let Some(config) = OtlpConfig::from_env(get)? else {
        return Ok(None);
    };
    let pending = PENDING.get_or_init(Default::default).clone();
    let _ = CONFIG.set(config);
    Ok(Some(OtlpLayer::new(pending)))
}

/// Sends the process's ended spans through one tree's broker, every [`INTERVAL`] or as soon as
/// a batch is waiting, until flushed and dropped.
pub struct Exporter {
    flush: mpsc::Sender<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

/// What one export loop has done (logged at its end).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ExportCounts {
    /// Spans the collector accepted.
    pub sent: u64,
    /// Spans in batches whose export failed (they are not retried).
    pub failed: u64,
}

impl Exporter {
    /// The exporter for a tree whose broker is `broker`, when this process exports traces.
    pub fn start(broker: WorkerHandle<BrokerProtocol>) -> Option<Exporter> {
        let (pending, config) = (PENDING.get()?.clone(), CONFIG.get()?.clone());
        Some(Exporter::start_with(broker, pending, config))
    }

    fn start_with(
        broker: WorkerHandle<BrokerProtocol>,
        pending: Arc<Pending>,
        config: OtlpConfig,
    ) -> Exporter {
        let (flush, mut flushes) = mpsc::channel::<oneshot::Sender<()>>(4);
        let task = tokio::spawn(async move {
            let origin = config.origin();
            let mut counts = ExportCounts::default();
            let mut warned = false;
            loop {
                let done = tokio::select! {
                    f = flushes.recv() => f,
                    () = pending.ready.notified() => None,
                    () = tokio::time::sleep(INTERVAL) => None,
                };
                while !pending.is_empty() {
                    let batch = pending.take(BATCH);
                    match send(&broker, &config, &origin, &batch).await {
                        Ok(()) => counts.sent += u64::try_from(batch.len()).unwrap_or(u64::MAX),
                        Err(e) => {
                            counts.failed += u64::try_from(batch.len()).unwrap_or(u64::MAX);
                            tracing::warn!("trace export failed: {e}");
                            if !warned {
                                warned = true;
                                eprintln!(
                                    "warning: trace export to {} failed ({e}); spans are \
                                     dropped until it works",
                                    crate::term::sanitize_line_for_terminal(&config.endpoint)
                                );
                            }
                        }
                    }
                }
                if let Some(reply) = done {
                    let dropped = pending.dropped();
                    tracing::info!(
                        sent = counts.sent,
                        failed = counts.failed,
                        dropped,
                        "trace export flushed"
                    );
                    let _ = reply.send(());
                }
            }
        });
        Exporter { flush, task }
    }

    /// Send every span ended so far, waiting at most [`FLUSH_PATIENCE`].
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.flush.send(tx).await.is_ok() {
            let _ = tokio::time::timeout(FLUSH_PATIENCE, rx).await;
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn send(
    broker: &WorkerHandle<BrokerProtocol>,
    config: &OtlpConfig,
    origin: &Origin,
    batch: &[layer::FinishedSpan],
) -> Result<(), String> {
    let body = match config.encoding {
        Encoding::Protobuf => encode::protobuf(origin, batch),
        Encoding::Json => encode::json(origin, batch),
    };
    let export = TraceExport {
        endpoint: config.endpoint.clone(),
        content_type: config.encoding.content_type().to_string(),
        body,
        timeout_ms: config.timeout_ms,
    };
    let deadline = Duration::from_millis(config.timeout_ms) + Duration::from_secs(5);
    match broker
        .call_within(Request::ExportTraces(export), deadline)
        .await
    {
        Ok(Response::TracesExported { .. }) => Ok(()),
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<Option<OtlpConfig>, ConfigError> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        OtlpConfig::from_env(|k| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn export_is_off_without_an_endpoint_or_when_disabled() {
        assert_eq!(env(&[]), Ok(None));
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(env(&[base, ("OTEL_SDK_DISABLED", "true")]), Ok(None));
        assert_eq!(env(&[base, ("OTEL_TRACES_EXPORTER", "none")]), Ok(None));
        assert_eq!(
            env(&[base, ("OTEL_TRACES_EXPORTER", "zipkin")]),
            Err(ConfigError::Exporter("zipkin".into()))
        );
    }

    #[test]
    fn endpoints_protocols_and_timeouts_follow_the_specification() {
        let c = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")])
            .unwrap()
            .unwrap();
        assert_eq!(c.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(c.encoding, Encoding::Protobuf);
        assert_eq!(c.timeout_ms, 10_000);
        assert_eq!(
            c.resource,
            [("service.name".to_string(), "hanzo-dev".to_string())]
        );
        let c = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://collector.example/custom",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "99"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2500"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=from-attrs,team=a%2Cb,broken",
            ),
            ("OTEL_SERVICE_NAME", "agents"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.endpoint, "https://collector.example/custom");
        assert_eq!(c.encoding, Encoding::Json);
        assert_eq!(c.timeout_ms, 2500);
        assert_eq!(
            c.resource,
            [
                ("service.name".to_string(), "agents".to_string()),
                ("team".to_string(), "a,b".to_string())
            ]
        );
    }

    #[test]
    fn bad_settings_are_refused_with_the_fix_named() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(
            env(&[base, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]),
            Err(ConfigError::Grpc)
        );
        assert!(ConfigError::Grpc.to_string().contains("http/protobuf"));
        assert_eq!(
            env(&[base, ("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")]),
            Err(ConfigError::Protocol("thrift".into()))
        );
        for bad in ["file:///tmp/x", "127.0.0.1:4318", "unix:/run/otel.sock"] {
            assert!(
                matches!(
                    env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", bad)]),
                    Err(ConfigError::Endpoint(_))
                ),
                "{bad}"
            );
        }
        assert_eq!(
            env(&[(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "https://user:pw@collector.example"
            )]),
            Err(ConfigError::Credentials)
        );
        assert!(!ConfigError::Credentials.to_string().contains("pw@"));
        assert!(matches!(
            env(&[base, ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")]),
            Err(ConfigError::Timeout { .. })
        ));
    }
}
