//! What a client asks the proxy for, read from the first bytes of its connection, and the
//! proxy's answers. One port speaks both protocols: a first byte of `0x05` is SOCKS5 (RFC 1928,
//! no authentication), anything else is HTTP — `CONNECT host:port` (RFC 9110 §9.3.6) or a
//! plain-HTTP request in absolute form (`GET http://host/path`), which is forwarded as one request
//! with `Connection: close`.
//!
//! Only framing is parsed: the target and, for a forwarded request, the head (rewritten to origin
//! form, hop-by-hop headers removed). Bodies and tunnelled bytes are never looked at.

use hanzo_ipc::roles::broker::{EgressDenial, EgressProtocol};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest HTTP request head accepted.
pub const MAX_HEAD: usize = 16 * 1024;
const MAX_HEADERS: usize = 96;

/// A request the proxy can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRequest {
    /// How the client spoke to the proxy.
    pub protocol: EgressProtocol,
    /// The host exactly as the client sent it (not yet validated).
    pub host: String,
    /// The port it asked for.
    pub port: u16,
    /// For [`EgressProtocol::HttpForward`]: the head to send to the destination.
    pub forward_head: Option<Vec<u8>>,
    /// Bytes the client sent after its request (to go to the destination first).
    pub leftover: Vec<u8>,
}

/// A request the proxy refuses while reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// How the client spoke (`Unknown` when nothing recognisable arrived).
    pub protocol: EgressProtocol,
    /// The host as the client asked for it (empty when no request was read).
    pub host: String,
    /// The port it asked for (0 when no request was read).
    pub port: u16,
    /// Why it is refused.
    pub reason: EgressDenial,
    /// What happened, in a sentence, for the record.
    pub detail: String,
    /// How the client is told (or not: the connection is just closed).
    pub answer: Answer,
}

/// The dialect a refusal is answered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// No answer: the connection is closed.
    None,
    /// An HTTP error response.
    Http,
    /// A SOCKS5 reply with a failure code.
    Socks,
}

impl Answer {
    /// The dialect the client spoke, to answer it in.
    pub fn for_protocol(p: EgressProtocol) -> Answer {
        match p {
            EgressProtocol::HttpConnect | EgressProtocol::HttpForward => Answer::Http,
            EgressProtocol::Socks5 => Answer::Socks,
            EgressProtocol::Unknown => Answer::None,
        }
    }
}

fn refuse(protocol: EgressProtocol, reason: EgressDenial, detail: impl Into<String>) -> Refusal {
    Refusal {
        protocol,
        host: String::new(),
        port: 0,
        reason,
        detail: detail.into(),
        answer: Answer::for_protocol(protocol),
    }
}

/// Read the request (the caller bounds the time). SOCKS5's method negotiation is answered here.
pub async fn read_request<S>(stream: &mut S) -> Result<ClientRequest, Refusal>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut first = [0u8; 1];
    let n = stream.read(&mut first).await.unwrap_or(0);
    if n == 0 {
        return Err(Refusal {
            answer: Answer::None,
            ..refuse(
                EgressProtocol::Unknown,
                EgressDenial::BadRequest,
                "the client closed the connection before sending a request",
            )
        });
    }
    match first[0] {
        SOCKS5 => read_socks5(stream).await,
        4 => {
            // A SOCKS4 "request rejected or failed" reply, so that the client says something.
            let _ = stream.write_all(&[0, 0x5b, 0, 0, 0, 0, 0, 0]).await;
            Err(Refusal {
                answer: Answer::None,
                ..refuse(
                    EgressProtocol::Unknown,
                    EgressDenial::BadRequest,
                    "SOCKS4 is not supported: use SOCKS5 with remote resolution (socks5h://)",
                )
            })
        }
        b => read_http(stream, b).await,
    }
}

const SOCKS5: u8 = 5;

/// SOCKS5 reply codes (RFC 1928 §6).
pub mod socks_reply {
    /// The request was granted.
    pub const SUCCEEDED: u8 = 0x00;
    /// A failure the other codes do not name.
    pub const GENERAL_FAILURE: u8 = 0x01;
    /// The rule set refuses the connection (the allow-list).
    pub const NOT_ALLOWED: u8 = 0x02;
    /// The network is unreachable.
    pub const NETWORK_UNREACHABLE: u8 = 0x03;
    /// The host is unreachable (or its name did not resolve).
    pub const HOST_UNREACHABLE: u8 = 0x04;
    /// The destination refused the connection.
    pub const CONNECTION_REFUSED: u8 = 0x05;
    /// TTL expired (what the proxy answers when connecting timed out).
    pub const TTL_EXPIRED: u8 = 0x06;
    /// `BIND` and `UDP ASSOCIATE` are not served.
    pub const COMMAND_NOT_SUPPORTED: u8 = 0x07;
    /// The address type is not IPv4, a domain name or IPv6.
    pub const ADDRESS_TYPE_NOT_SUPPORTED: u8 = 0x08;
}

async fn read_socks5<S>(stream: &mut S) -> Result<ClientRequest, Refusal>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let p = EgressProtocol::Socks5;
    let io = |_| Refusal {
        answer: Answer::None,
        ..refuse(
            p,
            EgressDenial::BadRequest,
            "the client closed the connection during the SOCKS5 handshake",
        )
    };
    let nmethods = stream.read_u8().await.map_err(io)?;
    let mut methods = vec![0u8; usize::from(nmethods)];
    stream.read_exact(&mut methods).await.map_err(io)?;
    if !methods.contains(&0) {
        let _ = stream.write_all(&[SOCKS5, 0xff]).await;
        return Err(Refusal {
            answer: Answer::None,
            ..refuse(
                p,
                EgressDenial::BadRequest,
                "the client offered no SOCKS5 method the proxy accepts (only \"no authentication\")",
            )
        });
    }
    stream.write_all(&[SOCKS5, 0]).await.map_err(io)?;
    let mut head = [0u8; 4];
    stream.read_exact(&mut head).await.map_err(io)?;
    let [ver, cmd, _rsv, atyp] = head;
    if ver != SOCKS5 {
        return Err(Refusal {
            answer: Answer::None,
            ..refuse(
                p,
                EgressDenial::BadRequest,
                format!("SOCKS5 request with version {ver}"),
            )
        });
    }
    let host = match atyp {
        1 => {
            let mut a = [0u8; 4];
            stream.read_exact(&mut a).await.map_err(io)?;
            std::net::Ipv4Addr::from(a).to_string()
        }
        3 => {
            let len = stream.read_u8().await.map_err(io)?;
            let mut name = vec![0u8; usize::from(len)];
            stream.read_exact(&mut name).await.map_err(io)?;
            match String::from_utf8(name) {
                Ok(s) => s,
                Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
            }
        }
        4 => {
            let mut a = [0u8; 16];
            stream.read_exact(&mut a).await.map_err(io)?;
            format!("[{}]", std::net::Ipv6Addr::from(a))
        }
        other => {
            return Err(refuse(
                p,
                EgressDenial::BadRequest,
                format!("SOCKS5 address type {other} does not exist"),
            ))
        }
    };
    let port = stream.read_u16().await.map_err(io)?;
    let unsupported = |what: &str| Refusal {
        host: host.clone(),
        port,
        ..refuse(
            p,
            EgressDenial::UnsupportedCommand,
            format!(
                "SOCKS5 {what} is not supported: the proxy only opens TCP connections (CONNECT)"
            ),
        )
    };
    match cmd {
        1 => Ok(ClientRequest {
            protocol: p,
            host,
            port,
            forward_head: None,
            leftover: Vec::new(),
        }),
        2 => Err(unsupported("BIND")),
        3 => Err(unsupported("UDP ASSOCIATE")),
        other => Err(unsupported(&format!("command {other}"))),
    }
}

/// The SOCKS5 reply with `code`. The bound address is always `0.0.0.0:0`: nothing about the
/// host's network reaches the sandbox.
pub fn socks_reply(code: u8) -> [u8; 10] {
    [SOCKS5, code, 0, 1, 0, 0, 0, 0, 0, 0]
}

async fn read_http<S>(stream: &mut S, first: u8) -> Result<ClientRequest, Refusal>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(1024);
    buf.push(first);
    let mut chunk = [0u8; 2048];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let leftover = buf[len..].to_vec();
                return http_target(&req, leftover);
            }
            Ok(httparse::Status::Partial) => {}
            Err(e) => {
                return Err(Refusal {
                    answer: Answer::Http,
                    ..refuse(
                        EgressProtocol::Unknown,
                        EgressDenial::BadRequest,
                        format!("not an HTTP request or SOCKS5 handshake ({e})"),
                    )
                })
            }
        }
        if buf.len() >= MAX_HEAD {
            return Err(Refusal {
                answer: Answer::Http,
                ..refuse(
                    EgressProtocol::Unknown,
                    EgressDenial::BadRequest,
                    format!("the request head is larger than {MAX_HEAD} bytes"),
                )
            });
        }
        let room = (MAX_HEAD - buf.len()).min(chunk.len());
        let n = stream.read(&mut chunk[..room]).await.unwrap_or(0);
        if n == 0 {
            return Err(Refusal {
                answer: Answer::None,
                ..refuse(
                    EgressProtocol::Unknown,
                    EgressDenial::BadRequest,
                    "the client closed the connection in the middle of its request",
                )
            });
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn http_target(
    req: &httparse::Request<'_, '_>,
    leftover: Vec<u8>,
) -> Result<ClientRequest, Refusal> {
    let method = req.method.unwrap_or_default();
    let target = req.path.unwrap_or_default();
    if method.eq_ignore_ascii_case("CONNECT") {
        let p = EgressProtocol::HttpConnect;
        let (host, port) = split_authority(target).ok_or_else(|| {
            refuse(
                p,
                EgressDenial::BadRequest,
                format!("CONNECT target {target:?} is not host:port"),
            )
        })?;
        let port = port.ok_or_else(|| {
            refuse(
                p,
                EgressDenial::BadRequest,
                format!("CONNECT target {target:?} has no port"),
            )
        })?;
        return Ok(ClientRequest {
            protocol: p,
            host: host.to_string(),
            port,
            forward_head: None,
            leftover,
        });
    }
    let p = EgressProtocol::HttpForward;
    let Some(rest) = strip_prefix_ignore_case(target, "http://") else {
        let detail = if strip_prefix_ignore_case(target, "https://").is_some() {
            "an https:// URL must be fetched through CONNECT (set HTTPS_PROXY)".to_string()
        } else {
            format!(
                "{method} {target:?}: this is a proxy; send CONNECT host:port or an absolute \
                 http:// URL"
            )
        };
        return Err(refuse(p, EgressDenial::UnsupportedCommand, detail));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let path = path.split('#').next().unwrap_or_default();
    if authority.contains('@') {
        return Err(refuse(
            p,
            EgressDenial::BadRequest,
            "a URL with a user name or password is not forwarded",
        ));
    }
    let (host, port) = split_authority(authority).ok_or_else(|| {
        refuse(
            p,
            EgressDenial::BadRequest,
            format!("{authority:?} is not a host with an optional port"),
        )
    })?;
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    let version = match req.version {
        Some(0) => "HTTP/1.0",
        _ => "HTTP/1.1",
    };
    Ok(ClientRequest {
        protocol: p,
        host: host.to_string(),
        port: port.unwrap_or(80),
        forward_head: Some(origin_form_head(
            method,
            &path,
            version,
            authority,
            req.headers,
        )),
        leftover,
    })
}

/// Headers that belong to the hop between client and proxy (RFC 9110 §7.6.1), plus the proxy's
/// credentials; `Host` is rewritten from the URL.
const HOP_HEADERS: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "upgrade",
    "host",
];

fn origin_form_head(
    method: &str,
    path: &str,
    version: &str,
    authority: &str,
    headers: &[httparse::Header<'_>],
) -> Vec<u8> {
    let named_in_connection: Vec<String> = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .flat_map(|h| {
            String::from_utf8_lossy(h.value)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut out = format!("{method} {path} {version}\r\nHost: {authority}\r\n").into_bytes();
    for h in headers {
        let name = h.name.to_ascii_lowercase();
        if HOP_HEADERS.contains(&name.as_str()) || named_in_connection.contains(&name) {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    // One request per connection: the next one may be for another host, which this connection
    // was not checked for.
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`. The host is returned as written (brackets kept).
pub fn split_authority(a: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if a.starts_with('[') {
        let close = a.find(']')?;
        let (h, rest) = a.split_at(close + 1);
        match rest {
            "" => (h, None),
            r => (h, Some(r.strip_prefix(':')?)),
        }
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            Some(_) => return None,
            None => (a, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            Some(p.parse::<u16>().ok().filter(|n| *n != 0)?)
        }
        Some(_) => return None,
    };
    Some((host, port))
}

/// An HTTP error response with a one-line plain-text reason.
pub fn http_error(status: u16, reason_phrase: &str, text: &str) -> Vec<u8> {
    let body = format!("hanzo-dev egress proxy: {text}\n");
    format!(
        "HTTP/1.1 {status} {reason_phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The answer to an HTTP `CONNECT` once the tunnel is open.
pub const HTTP_ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities_split_with_and_without_ports() {
        assert_eq!(split_authority("a.b:443"), Some(("a.b", Some(443))));
        assert_eq!(split_authority("a.b"), Some(("a.b", None)));
        assert_eq!(split_authority("[::1]:8080"), Some(("[::1]", Some(8080))));
        assert_eq!(split_authority("[::1]"), Some(("[::1]", None)));
        assert_eq!(split_authority("::1:80"), None);
        assert_eq!(split_authority("a.b:0"), None);
        assert_eq!(split_authority("a.b:65536"), None);
        assert_eq!(split_authority("a.b:"), None);
        assert_eq!(split_authority(":80"), None);
        assert_eq!(split_authority("[::1]x"), None);
    }
}
