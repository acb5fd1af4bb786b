//! OTLP/HTTP trace export on the supervisor's behalf (`Request::ExportTraces`).
//!
//! The supervisor encodes its finished `agent.*` spans and names the collector's URL (both from
//! trusted configuration: its own spans and the standard `OTEL_EXPORTER_OTLP_*` variables). The
//! broker sends the batch, because it is the one process with network for the runtime's own
//! traffic (design §12), and because the collector's headers (`OTEL_EXPORTER_OTLP_HEADERS`,
//! typically an API key) are secrets: only the broker's environment holds them.

use crate::secret::Secret;
use hanzo_ipc::roles::broker::TraceExport;
use hanzo_policy::secret::SecretValues;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use std::time::Duration;

/// The collector's headers and the client that sends to it.
pub struct TraceSender {
    client: reqwest::Client,
    headers: Vec<(HeaderName, Secret)>,
    /// The header values, scrubbed from any error text before it leaves the broker.
    values: SecretValues,
}

/// Why an export failed; the text never carries a header value.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The endpoint is not an `http://` or `https://` URL; holds it.
    #[error("the traces endpoint {0:?} is not an http:// or https:// URL")]
    BadEndpoint(String),
    /// The content type is neither OTLP/HTTP encoding; holds it.
    #[error("content type {0:?} is not OTLP/HTTP's (application/x-protobuf or application/json)")]
    BadContentType(String),
    /// The collector could not be reached; holds what failed.
    #[error("the collector could not be reached: {0}")]
    Unreachable(String),
    /// The collector answered with a status other than 2xx.
    #[error("the collector answered {status}{}", if *.retryable { " (retryable)" } else { "" })]
    Status {
        /// The HTTP status.
        status: u16,
        /// Whether a later attempt may succeed (429, 502, 503, 504).
        retryable: bool,
    },
}

/// The collector's headers from the broker's environment, as the OpenTelemetry specification
/// defines them: `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS`; a
/// comma-separated list of `key=value`, values percent-decoded. Malformed entries are skipped
/// and named (by key only) in the returned warnings.
pub fn headers_from_env(
    get: impl Fn(&str) -> Option<String>,
) -> (Vec<(HeaderName, Secret)>, Vec<String>) {
    let raw = get("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
        .or_else(|| get("OTEL_EXPORTER_OTLP_HEADERS"))
        .unwrap_or_default();
    let mut headers = Vec::new();
    let mut warnings = Vec::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((key, value)) = entry.split_once('=') else {
            warnings
                .push("an OTEL_EXPORTER_OTLP_HEADERS entry has no `=`; it is ignored".to_string());
            continue;
        };
        let key = key.trim();
        let value = percent_decode(value.trim());
        match (HeaderName::from_bytes(key.as_bytes()), value) {
            (Ok(name), Some(value)) if HeaderValue::from_str(&value).is_ok() => {
                headers.push((name, Secret::new(value)))
            }
            _ => warnings.push(format!(
                "the OTEL_EXPORTER_OTLP_HEADERS entry for {:?} is not a valid header; it is ignored",
                key.chars().take(64).collect::<String>()
            )),
        }
    }
    (headers, warnings)
}

/// `%XX` escapes decoded; `None` for a malformed escape or a result that is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl TraceSender {
    /// A sender adding `headers` (values kept secret) to every export; fails only when the HTTP
    /// client cannot be built.
    pub fn new(headers: Vec<(HeaderName, Secret)>) -> Result<TraceSender, String> {
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            // A redirect would carry the headers to a place the user did not name.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the trace export client: {e}"))?;
        let values = SecretValues::new(headers.iter().map(|(_, v)| v.expose().to_string()));
        Ok(TraceSender {
            client,
            headers,
            values,
        })
    }

    /// Send one batch; `Ok(status)` for a 2xx answer.
    pub async fn send(&self, export: TraceExport) -> Result<u16, ExportError> {
        let url = reqwest::Url::parse(&export.endpoint)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
            .ok_or_else(|| ExportError::BadEndpoint(self.scrub(&export.endpoint)))?;
        if !matches!(
            export.content_type.as_str(),
            "application/x-protobuf" | "application/json"
        ) {
            return Err(ExportError::BadContentType(export.content_type));
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let mut v = HeaderValue::from_str(value.expose())
                .map_err(|_| ExportError::Unreachable("a header value is invalid".into()))?;
            v.set_sensitive(true);
            headers.insert(name.clone(), v);
        }
        let content_type = HeaderValue::from_str(&export.content_type)
            .map_err(|_| ExportError::BadContentType(export.content_type.clone()))?;
        headers.insert(CONTENT_TYPE, content_type);
        let timeout = Duration::from_millis(export.timeout_ms.clamp(1, 60_000));
        let response = self
            .client
            .post(url)
            .headers(headers)
            .timeout(timeout)
            .body(export.body)
            .send()
            .await
            .map_err(|e| ExportError::Unreachable(self.scrub(&e.to_string())))?;
        let status = response.status().as_u16();
        if response.status().is_success() {
            Ok(status)
        } else {
            // The body is not read: a collector's error text could echo a header back.
            Err(ExportError::Status {
                status,
                retryable: matches!(status, 429 | 502 | 503 | 504),
            })
        }
    }

    fn scrub(&self, text: &str) -> String {
        self.values.scrub(text).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn headers_are_parsed_percent_decoded_and_the_traces_variable_wins() {
        let (h, w) = headers_from_env(env(&[(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "api-key=a%20b, x-team = blue ,=bad,novalue, bad name=1, k=%zz",
        )]));
        let got: Vec<_> = h
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), v.expose().to_string()))
            .collect();
        assert_eq!(
            got,
            [
                ("api-key".to_string(), "a b".to_string()),
                ("x-team".to_string(), "blue".to_string())
            ]
        );
        assert_eq!(w.len(), 4, "{w:?}");
        assert!(w.iter().all(|m| !m.contains("a b") && !m.contains("blue")));
        let (h, _) = headers_from_env(env(&[
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "b=2"),
        ]));
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].0.as_str(), "b");
    }

    #[tokio::test]
    async fn an_endpoint_that_is_not_http_is_refused_and_errors_carry_no_header_value() {
        let sender = TraceSender::new(vec![(
            HeaderName::from_static("api-key"),
            Secret::new("s3cr3t"),
        )])
        .unwrap();
        let export = |endpoint: &str, content_type: &str| TraceExport {
            endpoint: endpoint.to_string(),
            content_type: content_type.to_string(),
            body: Vec::new(),
            timeout_ms: 1000,
        };
        for bad in [
            "file:///etc/passwd",
            "unix:/tmp/x",
            "not a url",
            "http://s3cr3t@/",
        ] {
            let e = sender
                .send(export(bad, "application/json"))
                .await
                .unwrap_err();
            assert!(matches!(e, ExportError::BadEndpoint(_)), "{bad}: {e}");
            assert!(!e.to_string().contains("s3cr3t"), "{e}");
        }
        let e = sender
            .send(export("http://127.0.0.1:9/v1/traces", "text/plain"))
            .await
            .unwrap_err();
        assert!(matches!(e, ExportError::BadContentType(_)), "{e}");
        // A port just closed: the connection is refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = sender
            .send(export(
                &format!("http://127.0.0.1:{port}/v1/traces"),
                "application/json",
            ))
            .await
            .unwrap_err();
        assert!(matches!(e, ExportError::Unreachable(_)), "{e}");
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
    }
}
