//! Name resolution for the egress proxy. The broker resolves; clients never do (their namespace
//! has no resolver). Only names that passed the allow-list reach a resolver, already normalised
//! (ASCII, lowercase, no trailing dot, never an address).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

/// The addresses a name resolves to.
pub type Resolution<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// Resolves host names for the proxy (the system's resolver, or a fixed table in tests).
pub trait Resolve: Send + Sync + 'static {
    /// The addresses `name` resolves to (`port` is the one the client asked for).
    fn resolve<'a>(&'a self, name: &'a str, port: u16) -> Resolution<'a>;
}

/// The system's resolver (`getaddrinfo` on tokio's blocking pool, reading `/etc/hosts` and
/// `/etc/resolv.conf` under the broker's Landlock grants).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a str, port: u16) -> Resolution<'a> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((name, port)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// Fixed answers, for tests and benchmarks: a name maps to the addresses given; any other name
/// does not resolve. Nothing falls through to the system.
#[derive(Debug, Clone, Default)]
pub struct StaticResolver {
    names: HashMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    /// A resolver that knows no name yet.
    pub fn new() -> StaticResolver {
        StaticResolver::default()
    }

    /// `name` (lowercase) resolves to `addrs`.
    pub fn with(mut self, name: &str, addrs: &[IpAddr]) -> StaticResolver {
        self.names.insert(name.to_ascii_lowercase(), addrs.to_vec());
        self
    }
}

impl Resolve for StaticResolver {
    fn resolve<'a>(&'a self, name: &'a str, _port: u16) -> Resolution<'a> {
        let found = self.names.get(name).cloned();
        Box::pin(async move {
            found.ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("{name} does not resolve"))
            })
        })
    }
}
