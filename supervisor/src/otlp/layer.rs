//! The `tracing` layer that keeps the `agent.*` spans (`agent.run`, `agent.step`, `agent.tool`)
//! for export: ids, parent, start and end time, and their fields as attributes, renamed to the
//! OpenTelemetry GenAI conventions where one fits. Spans of any other name are not kept: their
//! fields were never reviewed for what they may carry.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// An attribute's value (the `AnyValue` kinds used here).
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// A string (`stringValue`).
    Str(String),
    /// A signed integer (`intValue`).
    Int(i64),
    /// A boolean (`boolValue`).
    Bool(bool),
    /// A floating-point number (`doubleValue`).
    Double(f64),
}

/// One ended span, ready to encode.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedSpan {
    /// The trace it belongs to: its root span's, random for a root (never all zero).
    pub trace_id: [u8; 16],
    /// Its own random id (never all zero).
    pub span_id: [u8; 8],
    /// The nearest enclosing exported span (none: a root).
    pub parent_id: Option<[u8; 8]>,
    /// The span's name (`agent.run`, `agent.step`, `agent.tool`).
    pub name: &'static str,
    /// When it was entered, in nanoseconds since the Unix epoch.
    pub start_unix_nano: u64,
    /// When it closed, in nanoseconds since the Unix epoch.
    pub end_unix_nano: u64,
    /// Its fields under their OpenTelemetry names, with `gen_ai.operation.name` first.
    pub attributes: Vec<(String, AttrValue)>,
    /// Set when the span's `status` field says the work failed: the status message.
    pub error: Option<String>,
}

/// Which spans are kept: the run loop's own.
pub fn exported(name: &str) -> bool {
    name.starts_with("agent.")
}

/// Field names mapped to their OpenTelemetry names (GenAI semantic conventions where they fit,
/// `hanzo.*` for our own). A field not listed keeps its name.
const RENAMES: &[(&str, &str)] = &[
    ("run_id", "hanzo.run.id"),
    ("step", "hanzo.step"),
    ("status", "hanzo.run.status"),
    ("tool", "gen_ai.tool.name"),
    ("agent", "gen_ai.agent.name"),
    ("model", "gen_ai.request.model"),
];

/// The GenAI operation each span is.
fn operation(name: &str) -> Option<&'static str> {
    match name {
        "agent.run" => Some("invoke_agent"),
        "agent.step" => Some("chat"),
        "agent.tool" => Some("execute_tool"),
        _ => None,
    }
}

/// Spans kept at most before export; beyond, new ones are dropped (and counted).
pub const MAX_PENDING: usize = 8192;

/// Ended spans waiting for the exporter.
#[derive(Default)]
pub struct Pending {
    spans: Mutex<VecDeque<FinishedSpan>>,
    dropped: AtomicU64,
    pub(super) ready: tokio::sync::Notify,
}

impl Pending {
    fn push(&self, span: FinishedSpan) {
        let mut q = self.spans.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= MAX_PENDING {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.push_back(span);
        let full = q.len() >= super::BATCH;
        drop(q);
        if full {
            self.ready.notify_one();
        }
    }

    /// Up to `n` of the oldest ended spans.
    pub fn take(&self, n: usize) -> Vec<FinishedSpan> {
        let mut q = self.spans.lock().unwrap_or_else(|p| p.into_inner());
        let n = n.min(q.len());
        q.drain(..n).collect()
    }

    /// How many ended spans are waiting.
    pub fn len(&self) -> usize {
        self.spans.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no ended span is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Spans dropped because the queue was full, since the start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The layer; install it with its own filter ([`exported`]), so the log filter's level does not
/// decide which spans are kept.
pub struct OtlpLayer {
    pending: Arc<Pending>,
}

impl OtlpLayer {
    /// A layer that puts each ended `agent.*` span into `pending`.
    pub fn new(pending: Arc<Pending>) -> OtlpLayer {
        OtlpLayer { pending }
    }
}

/// What the layer keeps in a live span's extensions.
struct Live {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent_id: Option<[u8; 8]>,
    start_unix_nano: u64,
    attributes: Vec<(String, AttrValue)>,
}

fn now_unix_nano() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // A failing CSPRNG is not worth losing the run for; a zero id is then replaced below.
    let _ = getrandom::getrandom(&mut b);
    if b.iter().all(|x| *x == 0) {
        // All-zero ids are invalid in OTLP.
        b[N - 1] = 1;
    }
    b
}

struct Fields<'a>(&'a mut Vec<(String, AttrValue)>);

impl Fields<'_> {
    fn put(&mut self, field: &Field, v: AttrValue) {
        let name = RENAMES
            .iter()
            .find(|(from, _)| *from == field.name())
            .map_or(field.name(), |(_, to)| to);
        // A field recorded again replaces its value.
        match self.0.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = v,
            None => self.0.push((name.to_string(), v)),
        }
    }
}

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, AttrValue::Str(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, AttrValue::Str(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, AttrValue::Int(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(
            field,
            AttrValue::Int(i64::try_from(value).unwrap_or(i64::MAX)),
        );
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, AttrValue::Bool(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, AttrValue::Double(value));
    }
}

impl<S> Layer<S> for OtlpLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        if !exported(span.name()) {
            return;
        }
        // The nearest enclosing span this layer keeps gives the trace and the parent.
        let parent = span.scope().skip(1).find_map(|s| {
            s.extensions()
                .get::<Live>()
                .map(|l| (l.trace_id, l.span_id))
        });
        let mut attributes = Vec::new();
        if let Some(op) = operation(span.name()) {
            attributes.push((
                "gen_ai.operation.name".to_string(),
                AttrValue::Str(op.to_string()),
            ));
        }
        attrs.record(&mut Fields(&mut attributes));
        let live = Live {
            trace_id: parent.map_or_else(random, |p| p.0),
            span_id: random(),
            parent_id: parent.map(|p| p.1),
            start_unix_nano: now_unix_nano(),
            attributes,
        };
        span.extensions_mut().insert(live);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(live) = ext.get_mut::<Live>() {
            values.record(&mut Fields(&mut live.attributes));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(live) = span.extensions_mut().remove::<Live>() else {
            return;
        };
        let error = live.attributes.iter().find_map(|(k, v)| match v {
            AttrValue::Str(s) if k == "hanzo.run.status" && s == "failed" => {
                Some("the run failed".to_string())
            }
            _ => None,
        });
        self.pending.push(FinishedSpan {
            trace_id: live.trace_id,
            span_id: live.span_id,
            parent_id: live.parent_id,
            name: span.name(),
            start_unix_nano: live.start_unix_nano,
            end_unix_nano: now_unix_nano(),
            attributes: live.attributes,
            error,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn agent_spans_nest_share_a_trace_and_carry_renamed_fields() {
        let pending = Arc::new(Pending::default());
        let subscriber = tracing_subscriber::registry().with(OtlpLayer::new(pending.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let run = tracing::info_span!(
                "agent.run",
                run_id = 7u64,
                agent = "code",
                status = tracing::field::Empty
            );
            let _r = run.enter();
            {
                let other = tracing::info_span!("http.request", token = "never-exported");
                let _o = other.enter();
                let step = tracing::info_span!("agent.step", step = 1u32);
                let _s = step.enter();
                let tool = tracing::info_span!("agent.tool", tool = "bash");
                drop(tool.enter());
            }
            run.record("status", "failed");
        });
        let spans = pending.take(10);
        let names: Vec<_> = spans.iter().map(|s| s.name).collect();
        assert_eq!(names, ["agent.tool", "agent.step", "agent.run"]);
        let (tool, step, run) = (&spans[0], &spans[1], &spans[2]);
        assert_eq!(run.parent_id, None);
        // The step's parent is the run, across the span this layer does not keep.
        assert_eq!(step.parent_id, Some(run.span_id));
        assert_eq!(tool.parent_id, Some(step.span_id));
        assert!(spans.iter().all(|s| s.trace_id == run.trace_id));
        assert_ne!(tool.span_id, step.span_id);
        assert!(run.end_unix_nano >= run.start_unix_nano);
        let attr = |s: &FinishedSpan, k: &str| {
            s.attributes
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(attr(run, "hanzo.run.id"), Some(AttrValue::Int(7)));
        assert_eq!(
            attr(run, "gen_ai.agent.name"),
            Some(AttrValue::Str("code".into()))
        );
        assert_eq!(
            attr(run, "gen_ai.operation.name"),
            Some(AttrValue::Str("invoke_agent".into()))
        );
        assert_eq!(
            attr(tool, "gen_ai.tool.name"),
            Some(AttrValue::Str("bash".into()))
        );
        assert_eq!(run.error.as_deref(), Some("the run failed"));
        assert_eq!(tool.error, None);
        assert!(spans.iter().all(|s| s
            .attributes
            .iter()
            .all(|(_, v)| *v != AttrValue::Str("never-exported".into()))));
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let pending = Pending::default();
        let span = FinishedSpan {
            trace_id: [1; 16],
            span_id: [1; 8],
            parent_id: None,
            name: "agent.run",
            start_unix_nano: 0,
            end_unix_nano: 0,
            attributes: Vec::new(),
            error: None,
        };
        for _ in 0..MAX_PENDING + 5 {
            pending.push(span.clone());
        }
        assert_eq!(pending.len(), MAX_PENDING);
        assert_eq!(pending.dropped(), 5);
        assert_eq!(pending.take(3).len(), 3);
        assert_eq!(pending.len(), MAX_PENDING - 3);
    }
}
