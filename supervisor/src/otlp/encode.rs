//! `ExportTraceServiceRequest` in OTLP's two HTTP encodings: protobuf (the wire format of
//! `opentelemetry/proto/collector/trace/v1/trace_service.proto`, written field by field: the
//! message is small and fixed, and a code generator would cost more than it saves) and JSON (the
//! protobuf JSON mapping with OTLP's one exception: trace and span ids are hex, not base64).

use super::layer::{AttrValue, FinishedSpan};
use serde_json::{json, Value};

/// What every batch is sent with: the resource (`service.name`, …) and the instrumentation
/// scope.
#[derive(Debug, Clone)]
pub struct Origin {
    /// The resource attributes (`service.name`, `service.version`, those of
    /// `OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: Vec<(String, AttrValue)>,
    /// The instrumentation scope's name (`hanzo-dev`).
    pub scope_name: String,
    /// The instrumentation scope's version (this build's).
    pub scope_version: String,
}

/// `SPAN_KIND_INTERNAL`: every exported span is work inside this process tree.
const KIND_INTERNAL: u64 = 1;
/// `STATUS_CODE_ERROR`.
const STATUS_ERROR: u64 = 2;

/// A protobuf message being written.
#[derive(Default)]
struct Pb(Vec<u8>);

impl Pb {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v.to_le_bytes()[0] | 0x80);
            v >>= 7;
        }
        self.0.push(v.to_le_bytes()[0]);
    }
    fn key(&mut self, field: u64, wire: u64) {
        self.varint(field << 3 | wire);
    }
    fn uint(&mut self, field: u64, v: u64) {
        self.key(field, 0);
        self.varint(v);
    }
    fn fixed64(&mut self, field: u64, v: u64) {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, field: u64, b: &[u8]) {
        self.key(field, 2);
        self.varint(u64::try_from(b.len()).unwrap_or(u64::MAX));
        self.0.extend_from_slice(b);
    }
    fn message(&mut self, field: u64, m: Pb) {
        self.bytes(field, &m.0);
    }
}

fn any_value(v: &AttrValue) -> Pb {
    let mut m = Pb::default();
    match v {
        AttrValue::Str(s) => m.bytes(1, s.as_bytes()),
        AttrValue::Bool(b) => m.uint(2, u64::from(*b)),
        // int64 on the wire: the two's-complement bits as a varint.
        AttrValue::Int(i) => m.uint(3, u64::from_ne_bytes(i.to_ne_bytes())),
        AttrValue::Double(d) => m.fixed64(4, d.to_bits()),
    }
    m
}

fn key_value(key: &str, v: &AttrValue) -> Pb {
    let mut m = Pb::default();
    m.bytes(1, key.as_bytes());
    m.message(2, any_value(v));
    m
}

fn span_pb(s: &FinishedSpan) -> Pb {
    let mut m = Pb::default();
    m.bytes(1, &s.trace_id);
    m.bytes(2, &s.span_id);
    if let Some(parent) = &s.parent_id {
        m.bytes(4, parent);
    }
    m.bytes(5, s.name.as_bytes());
    m.uint(6, KIND_INTERNAL);
    m.fixed64(7, s.start_unix_nano);
    m.fixed64(8, s.end_unix_nano);
    for (k, v) in &s.attributes {
        m.message(9, key_value(k, v));
    }
    if let Some(message) = &s.error {
        let mut status = Pb::default();
        status.bytes(2, message.as_bytes());
        status.uint(3, STATUS_ERROR);
        m.message(15, status);
    }
    m
}

/// The protobuf encoding (`application/x-protobuf`).
pub fn protobuf(origin: &Origin, spans: &[FinishedSpan]) -> Vec<u8> {
    let mut resource = Pb::default();
    for (k, v) in &origin.resource {
        resource.message(1, key_value(k, v));
    }
    let mut scope = Pb::default();
    scope.bytes(1, origin.scope_name.as_bytes());
    scope.bytes(2, origin.scope_version.as_bytes());
    let mut scope_spans = Pb::default();
    scope_spans.message(1, scope);
    for s in spans {
        scope_spans.message(2, span_pb(s));
    }
    let mut resource_spans = Pb::default();
    resource_spans.message(1, resource);
    resource_spans.message(2, scope_spans);
    let mut request = Pb::default();
    request.message(1, resource_spans);
    request.0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn any_value_json(v: &AttrValue) -> Value {
    match v {
        AttrValue::Str(s) => json!({ "stringValue": s }),
        AttrValue::Bool(b) => json!({ "boolValue": b }),
        // int64 is a decimal string in the protobuf JSON mapping.
        AttrValue::Int(i) => json!({ "intValue": i.to_string() }),
        AttrValue::Double(d) => json!({ "doubleValue": d }),
    }
}

fn attributes_json(attrs: &[(String, AttrValue)]) -> Value {
    attrs
        .iter()
        .map(|(k, v)| json!({ "key": k, "value": any_value_json(v) }))
        .collect()
}

/// The JSON encoding (`application/json`).
pub fn json(origin: &Origin, spans: &[FinishedSpan]) -> Vec<u8> {
    let spans: Vec<Value> = spans
        .iter()
        .map(|s| {
            let mut span = json!({
                "traceId": hex(&s.trace_id),
                "spanId": hex(&s.span_id),
                "name": s.name,
                "kind": KIND_INTERNAL,
                "startTimeUnixNano": s.start_unix_nano.to_string(),
                "endTimeUnixNano": s.end_unix_nano.to_string(),
                "attributes": attributes_json(&s.attributes),
            });
            if let Some(parent) = &s.parent_id {
                span["parentSpanId"] = json!(hex(parent));
            }
            if let Some(message) = &s.error {
                span["status"] = json!({ "code": STATUS_ERROR, "message": message });
            }
            span
        })
        .collect();
    let request = json!({
        "resourceSpans": [{
            "resource": { "attributes": attributes_json(&origin.resource) },
            "scopeSpans": [{
                "scope": { "name": origin.scope_name, "version": origin.scope_version },
                "spans": spans,
            }],
        }],
    });
    serde_json::to_vec(&request).expect("a JSON value serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span() -> FinishedSpan {
        FinishedSpan {
            trace_id: [0xab; 16],
            span_id: [1, 2, 3, 4, 5, 6, 7, 8],
            parent_id: Some([9; 8]),
            name: "agent.tool",
            start_unix_nano: 1_700_000_000_000_000_000,
            end_unix_nano: 1_700_000_000_500_000_000,
            attributes: vec![
                ("gen_ai.tool.name".into(), AttrValue::Str("bash".into())),
                ("hanzo.step".into(), AttrValue::Int(-2)),
                ("ok".into(), AttrValue::Bool(true)),
                ("ratio".into(), AttrValue::Double(0.5)),
            ],
            error: Some("failed".into()),
        }
    }

    #[test]
    fn varints_match_the_protobuf_encoding() {
        let mut m = Pb::default();
        m.varint(1);
        m.varint(300);
        m.varint(u64::MAX);
        assert_eq!(
            m.0,
            [1, 0xac, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
        // A negative int64 takes ten bytes, as protoc writes it.
        let v = any_value(&AttrValue::Int(-1));
        assert_eq!(v.0[0], 3 << 3);
        assert_eq!(v.0.len(), 11);
    }

    #[test]
    fn a_span_s_fields_carry_their_numbers_and_wire_types() {
        let m = span_pb(&span());
        // trace_id: field 1, length-delimited, 16 bytes.
        assert_eq!(&m.0[..2], &[0x0a, 16]);
        assert_eq!(&m.0[2..18], &[0xab; 16]);
        // span_id: field 2, 8 bytes; parent_span_id: field 4.
        assert_eq!(&m.0[18..20], &[0x12, 8]);
        assert_eq!(&m.0[28..30], &[0x22, 8]);
        // name: field 5.
        assert_eq!(m.0[38], 0x2a);
        assert_eq!(&m.0[40..50], b"agent.tool");
        // kind: field 6 varint 1; start: field 7 fixed64.
        assert_eq!(&m.0[50..53], &[0x30, 1, 0x39]);
        assert_eq!(&m.0[53..61], &1_700_000_000_000_000_000u64.to_le_bytes());
    }

    #[test]
    fn json_uses_hex_ids_and_string_int64s() {
        let origin = Origin {
            resource: vec![("service.name".into(), AttrValue::Str("hanzo-dev".into()))],
            scope_name: "hanzo-dev".into(),
            scope_version: "1".into(),
        };
        let v: Value = serde_json::from_slice(&json(&origin, &[span()])).unwrap();
        let s = &v["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(s["traceId"], "abababababababababababababababab");
        assert_eq!(s["spanId"], "0102030405060708");
        assert_eq!(s["parentSpanId"], "0909090909090909");
        assert_eq!(s["startTimeUnixNano"], "1700000000000000000");
        assert_eq!(s["attributes"][1]["value"]["intValue"], "-2");
        assert_eq!(s["status"]["code"], 2);
        assert_eq!(
            v["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"],
            "hanzo-dev"
        );
    }
}
