#!/usr/bin/env python3
"""A stand-in OTLP/HTTP trace collector for the tests (supervisor/tests/otlp_export.rs).

Listens on a kernel-chosen 127.0.0.1 port (written to PORT_FILE once listening) and decodes each
POST to /v1/traces with the OpenTelemetry project's generated classes (opentelemetry-proto):
protobuf bodies with ExportTraceServiceRequest.FromString, JSON bodies with the protobuf JSON
mapping (after turning OTLP/JSON's hex ids into the mapping's base64, as collectors do), refusing
unknown fields (a protobuf body must re-encode to the same bytes). Appends one JSON line per span to OUT_FILE (with the request's headers), and each
raw body to OUT_FILE + ".bodies". A body that does not decode is answered 400 and recorded as an
{"error": ...} line. POST /fail is answered 503.

usage: receiver.py PORT_FILE OUT_FILE
"""
import base64
import binascii
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

PORT_FILE, OUT_FILE = sys.argv[1], sys.argv[2]


def hex_ids_to_base64(value):
    """OTLP/JSON writes traceId/spanId/parentSpanId in hex; the JSON mapping wants base64."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                v = base64.b64encode(binascii.unhexlify(v)).decode()
            out[k] = hex_ids_to_base64(v)
        return out
    if isinstance(value, list):
        return [hex_ids_to_base64(v) for v in value]
    return value


def any_value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def record(self, obj):
        with open(OUT_FILE, "a") as f:
            f.write(json.dumps(obj) + "\n")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with open(OUT_FILE + ".bodies", "ab") as f:
            f.write(body + b"\n")
        if self.path == "/fail":
            self.send_response(503)
            self.end_headers()
            return
        ctype = self.headers.get("Content-Type", "")
        request = trace_service_pb2.ExportTraceServiceRequest()
        try:
            if ctype == "application/x-protobuf":
                request.ParseFromString(body)
                # Parsing skips fields the schema does not know; re-encoding must give the same
                # bytes, so every byte was one the reference schema understood.
                if request.SerializeToString() != body:
                    raise ValueError("the body re-encodes differently: unknown or misplaced fields")
            elif ctype == "application/json":
                json_format.Parse(json.dumps(hex_ids_to_base64(json.loads(body))), request)
            else:
                raise ValueError(f"content type {ctype!r}")
        except Exception as e:  # noqa: BLE001 - any decoding failure is the test's failure
            self.record({"error": f"{type(e).__name__}: {e}", "content_type": ctype})
            self.send_response(400)
            self.end_headers()
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        for rs in request.resource_spans:
            resource = {kv.key: any_value(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.record({
                        "content_type": ctype,
                        "headers": headers,
                        "resource": resource,
                        "scope": [ss.scope.name, ss.scope.version],
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "name": s.name,
                        "kind": s.kind,
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "attributes": {kv.key: any_value(kv.value) for kv in s.attributes},
                        "status": [s.status.code, s.status.message],
                    })
        reply = trace_service_pb2.ExportTraceServiceResponse()
        out = reply.SerializeToString() if ctype == "application/x-protobuf" else b"{}"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
