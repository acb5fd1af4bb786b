//! A minimal HTTP/1.1 client over a loopback `TcpStream` (one connection per request,
//! `Connection: close`; Content-Length, chunked and read-to-end bodies), standing in for the
//! broker channel in tests. Only `http://` URLs.

use hanzo_mcp::{
    BoxFuture, HttpBody, HttpClient, HttpError, HttpErrorKind, HttpHead, HttpRequest, HttpResponse,
};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Every request sent, for assertions on headers.
#[derive(Default, Clone)]
pub struct Http1Client {
    pub sent: Arc<Mutex<Vec<HttpRequest>>>,
}

fn err(kind: HttpErrorKind, message: impl Into<String>) -> HttpError {
    HttpError {
        kind,
        message: message.into(),
    }
}

enum Mode {
    Length(usize),
    Chunked { left: usize, done: bool },
    ToEnd,
}

struct Body {
    reader: BufReader<TcpStream>,
    mode: Mode,
}

impl HttpBody for Body {
    fn next_chunk(&mut self) -> BoxFuture<'_, Option<Result<Vec<u8>, HttpError>>> {
        Box::pin(async move { self.next().await.transpose() })
    }
}

impl Body {
    async fn read_some(&mut self, max: usize) -> Result<Vec<u8>, HttpError> {
        let mut buf = vec![0u8; max.min(16 * 1024)];
        let n = self
            .reader
            .read(&mut buf)
            .await
            .map_err(|e| err(HttpErrorKind::Body, e.to_string()))?;
        buf.truncate(n);
        Ok(buf)
    }

    async fn next(&mut self) -> Result<Option<Vec<u8>>, HttpError> {
        match self.mode {
            Mode::Length(0) => Ok(None),
            Mode::Length(left) => {
                let b = self.read_some(left).await?;
                if b.is_empty() {
                    return Err(err(HttpErrorKind::Body, "body ended before Content-Length"));
                }
                self.mode = Mode::Length(left - b.len());
                Ok(Some(b))
            }
            Mode::ToEnd => {
                let b = self.read_some(16 * 1024).await?;
                Ok(if b.is_empty() { None } else { Some(b) })
            }
            Mode::Chunked { done: true, .. } => Ok(None),
            Mode::Chunked { left: 0, .. } => {
                let mut line = String::new();
                self.reader
                    .read_line(&mut line)
                    .await
                    .map_err(|e| err(HttpErrorKind::Body, e.to_string()))?;
                if line.is_empty() {
                    return Err(err(HttpErrorKind::Body, "chunked body cut off"));
                }
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| err(HttpErrorKind::Body, "bad chunk size"))?;
                if size == 0 {
                    loop {
                        let mut t = String::new();
                        let n = self.reader.read_line(&mut t).await.unwrap_or(0);
                        if n == 0 || t.trim().is_empty() {
                            break;
                        }
                    }
                    self.mode = Mode::Chunked {
                        left: 0,
                        done: true,
                    };
                    return Ok(None);
                }
                self.mode = Mode::Chunked {
                    left: size,
                    done: false,
                };
                Box::pin(self.next()).await
            }
            Mode::Chunked { left, .. } => {
                let b = self.read_some(left).await?;
                if b.is_empty() {
                    return Err(err(HttpErrorKind::Body, "chunked body cut off"));
                }
                let left = left - b.len();
                if left == 0 {
                    let mut crlf = [0u8; 2];
                    self.reader
                        .read_exact(&mut crlf)
                        .await
                        .map_err(|e| err(HttpErrorKind::Body, e.to_string()))?;
                }
                self.mode = Mode::Chunked { left, done: false };
                Ok(Some(b))
            }
        }
    }
}

fn split_url(url: &str) -> Result<(String, u16, String), HttpError> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        err(
            HttpErrorKind::BadRequest,
            format!("only http:// URLs: {url}"),
        )
    })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (
            h.to_string(),
            p.parse()
                .map_err(|_| err(HttpErrorKind::BadRequest, "bad port"))?,
        ),
        None => (authority.to_string(), 80),
    };
    Ok((host, port, path.to_string()))
}

impl HttpClient for Http1Client {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, HttpError>> {
        self.sent.lock().unwrap().push(request.clone());
        Box::pin(async move {
            let (host, port, path) = split_url(&request.url)?;
            let stream = TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| {
                    err(
                        HttpErrorKind::Connect,
                        format!("connect {host}:{port}: {e}"),
                    )
                })?;
            let mut head = format!(
                "{} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
                request.method,
                request.body.len()
            );
            for (k, v) in &request.headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let mut reader = BufReader::new(stream);
            let w = reader.get_mut();
            w.write_all(head.as_bytes())
                .await
                .and(w.write_all(&request.body).await)
                .map_err(|e| err(HttpErrorKind::Connect, e.to_string()))?;
            let mut status_line = String::new();
            reader
                .read_line(&mut status_line)
                .await
                .map_err(|e| err(HttpErrorKind::Connect, e.to_string()))?;
            let status: u16 = status_line
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| {
                    err(
                        HttpErrorKind::Connect,
                        format!("bad status line {status_line:?}"),
                    )
                })?;
            let mut headers = Vec::new();
            loop {
                let mut line = String::new();
                let n = reader
                    .read_line(&mut line)
                    .await
                    .map_err(|e| err(HttpErrorKind::Connect, e.to_string()))?;
                if n == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    headers.push((k.trim().to_string(), v.trim().to_string()));
                }
            }
            let head = HttpHead { status, headers };
            let mode = if request.method == "HEAD" || status == 204 || status == 304 {
                Mode::Length(0)
            } else if head
                .header("transfer-encoding")
                .is_some_and(|t| t.to_ascii_lowercase().contains("chunked"))
            {
                Mode::Chunked {
                    left: 0,
                    done: false,
                }
            } else if let Some(n) = head.header("content-length").and_then(|n| n.parse().ok()) {
                Mode::Length(n)
            } else {
                Mode::ToEnd
            };
            Ok(HttpResponse {
                head,
                body: Box::new(Body { reader, mode }),
            })
        })
    }
}
