//! Where `hanzo-dev serve` listens: a unix socket (the default, mode 0600, only this user may
//! connect) or a loopback TCP port.
//!
//! The socket is created without trusting what is already at its path: a symbolic link there
//! (planted to make us replace or chmod someone else's file) or any other non-socket is refused
//! and left alone; a socket another server still answers on is refused; only a stale socket
//! (nobody listening) is removed before binding. The socket is bound under a 0177 umask so it is
//! never connectable by others, not even between `bind` and `chmod`, and every accepted unix
//! connection must come from this user (`SO_PEERCRED`).

use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A `--listen` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// `unix:PATH`.
    Unix(PathBuf),
    /// `127.0.0.1:PORT` or `[::1]:PORT`: loopback only.
    Tcp(SocketAddr),
}

/// Why the server cannot listen where it was asked to.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// The `--listen` value (the text) is neither `unix:PATH` nor an address.
    #[error(
        "--listen {0:?}: expected unix:PATH (an absolute path) or a loopback address such as \
         127.0.0.1:PORT"
    )]
    Syntax(String),
    /// A TCP address other than loopback was asked for.
    #[error(
        "--listen {0}: only loopback addresses are served (bearer tokens travel in clear text \
         over TCP); put a TLS proxy in front to serve other hosts"
    )]
    NotLoopback(SocketAddr),
    /// Something other than a socket exists at the socket's path.
    #[error(
        "refusing to listen at {0}: something that is not a socket is there (a symbolic link, \
         a file or a directory); hanzo-dev never replaces it. Remove it or choose another path"
    )]
    NotASocket(PathBuf),
    /// A server already answers on the socket at this path.
    #[error("refusing to listen at {0}: another server is answering on that socket")]
    InUse(PathBuf),
    /// The socket's directory is not this user's own with mode 0700, or is a link.
    #[error(
        "refusing to use {0} for the socket: it is not a directory owned by this user with \
         mode 0700 (or it is a symbolic link)"
    )]
    UnsafeDir(PathBuf),
    /// No `--listen` and no `XDG_RUNTIME_DIR` for the default socket path.
    #[error("no default socket path: set XDG_RUNTIME_DIR or pass --listen unix:PATH")]
    NoRuntimeDir,
    /// Binding or preparing the socket failed.
    #[error("cannot listen at {what}: {source}")]
    Io {
        /// The address or path.
        what: String,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

impl ListenAddr {
    /// Parse a `--listen` value.
    pub fn parse(s: &str) -> Result<ListenAddr, ListenError> {
        if let Some(path) = s.strip_prefix("unix:") {
            let path = PathBuf::from(path);
            if !path.is_absolute() || path.file_name().is_none() {
                return Err(ListenError::Syntax(s.to_string()));
            }
            return Ok(ListenAddr::Unix(path));
        }
        let addr: SocketAddr = s.parse().map_err(|_| ListenError::Syntax(s.to_string()))?;
        if !addr.ip().is_loopback() {
            return Err(ListenError::NotLoopback(addr));
        }
        Ok(ListenAddr::Tcp(addr))
    }

    /// The default: `$XDG_RUNTIME_DIR/hanzo-dev/api.sock`.
    pub fn default_unix(runtime_dir: Option<&str>) -> Result<ListenAddr, ListenError> {
        let dir = runtime_dir
            .filter(|d| Path::new(d).is_absolute())
            .ok_or(ListenError::NoRuntimeDir)?;
        Ok(ListenAddr::Unix(
            Path::new(dir).join("hanzo-dev").join("api.sock"),
        ))
    }
}

/// A bound listener.
#[derive(Debug)]
pub enum Listener {
    /// A unix socket and its path (removed when the server stops).
    Unix(tokio::net::UnixListener, PathBuf),
    /// A loopback TCP socket.
    Tcp(tokio::net::TcpListener),
}

impl Listener {
    /// Bind `addr` (see the module documentation for what a unix path must satisfy). For the
    /// default path, `private_parent` creates its directory 0700 when missing and checks it.
    pub async fn bind(addr: &ListenAddr, private_parent: bool) -> Result<Listener, ListenError> {
        match addr {
            ListenAddr::Tcp(a) => tokio::net::TcpListener::bind(a)
                .await
                .map(Listener::Tcp)
                .map_err(|source| ListenError::Io {
                    what: a.to_string(),
                    source,
                }),
            ListenAddr::Unix(path) => {
                if private_parent {
                    ensure_private_dir(path.parent().expect("an absolute path with a file name"))?;
                }
                clear_stale_socket(path).await?;
                bind_private_socket(path).map(|l| Listener::Unix(l, path.clone()))
            }
        }
    }

    /// What to print: `unix:PATH` or `http://ADDR`.
    pub fn describe(&self) -> String {
        match self {
            Listener::Unix(_, p) => format!("unix:{}", p.display()),
            Listener::Tcp(l) => l
                .local_addr()
                .map(|a| format!("http://{a}"))
                .unwrap_or_else(|_| "tcp".into()),
        }
    }
}

/// Create `dir` with mode 0700 if it is missing; refuse it unless it is a real directory (not a
/// link) owned by us and closed to others.
fn ensure_private_dir(dir: &Path) -> Result<(), ListenError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .map_err(|source| ListenError::Io {
                    what: dir.display().to_string(),
                    source,
                })?;
        }
        Err(source) => {
            return Err(ListenError::Io {
                what: dir.display().to_string(),
                source,
            })
        }
        Ok(_) => {}
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|source| ListenError::Io {
        what: dir.display().to_string(),
        source,
    })?;
    let ours = meta.uid() == nix::unistd::geteuid().as_raw();
    if !meta.file_type().is_dir() || !ours || meta.mode() & 0o077 != 0 {
        return Err(ListenError::UnsafeDir(dir.to_path_buf()));
    }
    Ok(())
}

/// Remove a socket nobody answers on; refuse anything else at `path`.
async fn clear_stale_socket(path: &Path) -> Result<(), ListenError> {
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ListenError::Io {
                what: path.display().to_string(),
                source,
            })
        }
        Ok(m) => m,
    };
    if !meta.file_type().is_socket() {
        return Err(ListenError::NotASocket(path.to_path_buf()));
    }
    if tokio::net::UnixStream::connect(path).await.is_ok() {
        return Err(ListenError::InUse(path.to_path_buf()));
    }
    std::fs::remove_file(path).map_err(|source| ListenError::Io {
        what: path.display().to_string(),
        source,
    })
}

/// Bind under a 0177 umask (the socket is born 0600), then check what was created.
fn bind_private_socket(path: &Path) -> Result<tokio::net::UnixListener, ListenError> {
    use nix::sys::stat::{umask, Mode};
    let old = umask(Mode::from_bits_truncate(0o177));
    let bound = std::os::unix::net::UnixListener::bind(path);
    umask(old);
    let io = |source| ListenError::Io {
        what: path.display().to_string(),
        source,
    };
    let std_listener = bound.map_err(io)?;
    // Belt and braces: the mode is 0600 whatever the umask did.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    std_listener.set_nonblocking(true).map_err(io)?;
    tokio::net::UnixListener::from_std(std_listener).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_values_parse_and_non_loopback_is_refused() {
        assert_eq!(
            ListenAddr::parse("unix:/run/x/api.sock").expect("unix"),
            ListenAddr::Unix("/run/x/api.sock".into())
        );
        assert!(matches!(
            ListenAddr::parse("unix:relative.sock"),
            Err(ListenError::Syntax(_))
        ));
        assert!(matches!(
            ListenAddr::parse("127.0.0.1:8080").expect("tcp"),
            ListenAddr::Tcp(_)
        ));
        assert!(matches!(
            ListenAddr::parse("[::1]:8080").expect("tcp6"),
            ListenAddr::Tcp(_)
        ));
        assert!(matches!(
            ListenAddr::parse("0.0.0.0:8080"),
            Err(ListenError::NotLoopback(_))
        ));
        assert!(matches!(
            ListenAddr::parse("10.0.0.1:80"),
            Err(ListenError::NotLoopback(_))
        ));
        assert!(matches!(
            ListenAddr::parse("localhost"),
            Err(ListenError::Syntax(_))
        ));
        assert!(matches!(
            ListenAddr::default_unix(None),
            Err(ListenError::NoRuntimeDir)
        ));
        assert!(matches!(
            ListenAddr::default_unix(Some("relative")),
            Err(ListenError::NoRuntimeDir)
        ));
    }
}
