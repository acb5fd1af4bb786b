//! The network allow-list for sandboxed commands (`sandbox.network_allow`): which hosts and ports
//! the broker's egress proxy may connect to for them, how the name a client asked for is decided,
//! which resolved addresses stay out of reach unless an entry names them literally, and how the
//! settings scopes combine. Pure data and decisions: nothing here resolves a name or opens a socket.
//!
//! Entries:
//!
//! | entry | allows |
//! |---|---|
//! | `example.com` | the name `example.com`, ports 443 and 80 |
//! | `*.example.com` | every name below `example.com` (any depth), not `example.com` itself; 443 and 80 |
//! | `example.com:8443` | that name, that port only (also `*.example.com:8443`) |
//! | `192.0.2.7`, `[2001:db8::7]`, `[2001:db8::7]:8080` | that address (443 and 80, or the port given), asked for literally or resolved from a listed name, even when it is loopback or private |
//!
//! Names are compared case-insensitively with one trailing dot ignored. Only ASCII names are
//! accepted: an internationalised name must be given (and asked for) in its punycode form
//! (`xn--…`), so that no two spellings of one name can decide differently. A name whose last label
//! is numeric must be a canonical dotted-quad IPv4 address (`127.1`, `0x7f.1` and `2130706433`
//! are refused: resolvers read them as addresses). An empty list means no network at all.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Ports an entry without a port allows.
pub const DEFAULT_PORTS: [u16; 2] = [443, 80];

/// Longest name accepted (RFC 1035: 253 characters in text form).
const MAX_NAME: usize = 253;
const MAX_LABEL: usize = 63;

/// The host part of an entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// Exactly this name (lowercase, no trailing dot).
    Name(String),
    /// Any name strictly below this one.
    Subdomains(String),
    /// This address (canonical: an IPv4-mapped IPv6 address is stored as IPv4).
    Address(IpAddr),
}

/// The ports of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ports {
    /// No port given: [`DEFAULT_PORTS`].
    Default,
    /// Just this port.
    One(u16),
}

impl Ports {
    /// Whether `port` is one of these.
    pub fn contains(self, port: u16) -> bool {
        match self {
            Ports::Default => DEFAULT_PORTS.contains(&port),
            Ports::One(p) => p == port,
        }
    }

    fn list(self) -> Vec<u16> {
        match self {
            Ports::Default => DEFAULT_PORTS.to_vec(),
            Ports::One(p) => vec![p],
        }
    }
}

/// One parsed entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// The host, a `*.` suffix or an address.
    pub host: HostPattern,
    /// The ports it opens.
    pub ports: Ports,
}

impl fmt::Display for Rule {
    /// The canonical text of the entry (`*.example.com:8443`, `[::1]`, `192.0.2.7:80`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Name(n) => f.write_str(n)?,
            HostPattern::Subdomains(n) => write!(f, "*.{n}")?,
            HostPattern::Address(IpAddr::V4(a)) => write!(f, "{a}")?,
            HostPattern::Address(IpAddr::V6(a)) => write!(f, "[{a}]")?,
        }
        match self.ports {
            Ports::Default => Ok(()),
            Ports::One(p) => write!(f, ":{p}"),
        }
    }
}

impl Rule {
    /// Whether this rule allows the name `name` (already normalised) on `port`.
    fn allows_name(&self, name: &str, port: u16) -> bool {
        self.ports.contains(port)
            && match &self.host {
                HostPattern::Name(n) => n == name,
                HostPattern::Subdomains(d) => is_strictly_below(name, d),
                HostPattern::Address(_) => false,
            }
    }

    fn allows_address(&self, ip: IpAddr, port: u16) -> bool {
        self.ports.contains(port) && self.host == HostPattern::Address(ip.to_canonical())
    }

    /// Whether every host this rule's `host` matches is matched by `outer`'s.
    fn host_within(&self, outer: &HostPattern) -> bool {
        match (outer, &self.host) {
            (HostPattern::Name(a), HostPattern::Name(b)) => a == b,
            (HostPattern::Subdomains(d), HostPattern::Name(b)) => is_strictly_below(b, d),
            (HostPattern::Subdomains(d), HostPattern::Subdomains(e)) => {
                e == d || is_strictly_below(e, d)
            }
            (HostPattern::Address(x), HostPattern::Address(y)) => x == y,
            _ => false,
        }
    }
}

fn is_strictly_below(name: &str, domain: &str) -> bool {
    name.len() > domain.len() + 1
        && name.ends_with(domain)
        && name.as_bytes()[name.len() - domain.len() - 1] == b'.'
}

/// Why a host (in an entry or in a request) is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// Nothing before the port.
    #[error("the host is empty")]
    Empty,
    /// Not ASCII: only punycode names are accepted.
    #[error("{0:?} is not ASCII: give an internationalised name in its punycode form (xn--…)")]
    NonAscii(String),
    /// A character no host name has.
    #[error("{host:?} contains {found:?}; a host name has letters, digits, `-`, `_` and dots")]
    BadCharacter {
        /// The host as given.
        host: String,
        /// The first character refused.
        found: char,
    },
    /// `..` or a leading dot.
    #[error("{0:?} has an empty label (`..`, or a leading dot)")]
    EmptyLabel(String),
    /// A label over 63 characters.
    #[error("{0:?} has a label longer than 63 characters")]
    LabelTooLong(String),
    /// A name over 253 characters.
    #[error("{0:?} is longer than 253 characters")]
    TooLong(String),
    /// All digits and dots, yet not an IPv4 address (resolvers would read it as one).
    #[error(
        "{0:?} looks like an IPv4 address but is not a canonical dotted quad (resolvers read \
         forms like 127.1, 0x7f.1 or 2130706433 as addresses); write the address as a.b.c.d"
    )]
    NumericName(String),
    /// Not a valid IPv6 address (zone indices are refused).
    #[error("{0:?} is not a valid IPv6 address (zone indices such as %eth0 are not accepted)")]
    BadIpv6(String),
}

/// A host as a client asked for it, normalised.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A name: lowercase, ASCII, no trailing dot.
    Name(String),
    /// An IP literal (canonical: IPv4-mapped IPv6 becomes IPv4).
    Address(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Address(a) => write!(f, "{a}"),
        }
    }
}

/// Normalise a host: a name (see the module documentation) or an IP literal, IPv6 with or
/// without brackets.
pub fn parse_host(text: &str) -> Result<Host, HostError> {
    if text.is_empty() {
        return Err(HostError::Empty);
    }
    if !text.is_ascii() {
        return Err(HostError::NonAscii(text.to_string()));
    }
    if let Some(inner) = text.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| HostError::BadIpv6(text.to_string()))?;
        return inner
            .parse::<Ipv6Addr>()
            .map(|a| Host::Address(IpAddr::V6(a).to_canonical()))
            .map_err(|_| HostError::BadIpv6(text.to_string()));
    }
    if text.contains(':') {
        return text
            .parse::<Ipv6Addr>()
            .map(|a| Host::Address(IpAddr::V6(a).to_canonical()))
            .map_err(|_| HostError::BadIpv6(text.to_string()));
    }
    let lower = text.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    if name.is_empty() {
        return Err(HostError::Empty);
    }
    if name.len() > MAX_NAME {
        return Err(HostError::TooLong(text.to_string()));
    }
    if let Some(found) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(HostError::BadCharacter {
            host: text.to_string(),
            found,
        });
    }
    let labels: Vec<&str> = name.split('.').collect();
    if labels.iter().any(|l| l.is_empty()) {
        return Err(HostError::EmptyLabel(text.to_string()));
    }
    if labels.iter().any(|l| l.len() > MAX_LABEL) {
        return Err(HostError::LabelTooLong(text.to_string()));
    }
    let last = labels.last().copied().unwrap_or_default();
    let numeric = last.bytes().all(|b| b.is_ascii_digit())
        || last
            .strip_prefix("0x")
            .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
    if numeric {
        return name
            .parse::<Ipv4Addr>()
            .map(|a| Host::Address(IpAddr::V4(a)))
            .map_err(|_| HostError::NumericName(text.to_string()));
    }
    Ok(Host::Name(name.to_string()))
}

/// Why an entry cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The host part is not a valid host.
    #[error("network entry {entry:?}: {source}")]
    Host {
        /// The entry as written.
        entry: String,
        /// What is wrong with its host.
        #[source]
        source: HostError,
    },
    /// A URL (scheme or path) rather than a host.
    #[error(
        "network entry {0:?}: give a host, not a URL (`example.com` or `example.com:8443`, \
         without a scheme or path)"
    )]
    NotAHost(String),
    /// A `*` anywhere but a leading `*.`.
    #[error(
        "network entry {0:?}: a wildcard is only accepted as a leading `*.` \
         (`*.example.com` allows the names below example.com)"
    )]
    Wildcard(String),
    /// `*.` before an address.
    #[error("network entry {0:?}: `*.` must be followed by a name, not an address")]
    WildcardAddress(String),
    /// A port that is not 1 to 65535.
    #[error("network entry {0:?}: the port must be a number from 1 to 65535")]
    BadPort(String),
}

/// Parse one entry.
pub fn parse_entry(text: &str) -> Result<Rule, EntryError> {
    let entry = text.trim();
    let bad_host = |source| EntryError::Host {
        entry: entry.to_string(),
        source,
    };
    if entry.contains("://") || entry.contains('/') || entry.contains('@') {
        return Err(EntryError::NotAHost(entry.to_string()));
    }
    let (host, port) = split_host_port(entry)?;
    let ports = match port {
        None => Ports::Default,
        Some(p) => Ports::One(parse_port(p).ok_or_else(|| EntryError::BadPort(entry.to_string()))?),
    };
    let pattern = if let Some(rest) = host.strip_prefix("*.") {
        match parse_host(rest).map_err(bad_host)? {
            Host::Name(n) => HostPattern::Subdomains(n),
            Host::Address(_) => return Err(EntryError::WildcardAddress(entry.to_string())),
        }
    } else if host.contains('*') {
        return Err(EntryError::Wildcard(entry.to_string()));
    } else {
        match parse_host(host).map_err(bad_host)? {
            Host::Name(n) => HostPattern::Name(n),
            Host::Address(a) => HostPattern::Address(a),
        }
    };
    Ok(Rule {
        host: pattern,
        ports,
    })
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`, or a bare IPv6 address (no port).
fn split_host_port(entry: &str) -> Result<(&str, Option<&str>), EntryError> {
    if entry.starts_with('[') {
        let close = entry
            .find(']')
            .ok_or_else(|| EntryError::NotAHost(entry.to_string()))?;
        let (host, rest) = entry.split_at(close + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => rest
                .strip_prefix(':')
                .map(|p| (host, Some(p)))
                .ok_or_else(|| EntryError::NotAHost(entry.to_string())),
        };
    }
    match entry.matches(':').count() {
        0 => Ok((entry, None)),
        1 => {
            let (h, p) = entry.split_once(':').expect("one colon");
            Ok((h, Some(p)))
        }
        _ => Ok((entry, None)),
    }
}

fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u16>().ok().filter(|p| *p != 0)
}

/// The parsed allow-list, in entry order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllowList {
    rules: Vec<Rule>,
}

impl AllowList {
    /// No network.
    pub fn none() -> AllowList {
        AllowList::default()
    }

    /// Every entry must parse.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<AllowList, EntryError> {
        let mut list = AllowList::none();
        for e in entries {
            list.push(parse_entry(e.as_ref())?);
        }
        Ok(list)
    }

    /// The entries that parse, and the errors of those that do not.
    pub fn parse_lenient<S: AsRef<str>>(entries: &[S]) -> (AllowList, Vec<EntryError>) {
        let mut list = AllowList::none();
        let mut errors = Vec::new();
        for e in entries {
            match parse_entry(e.as_ref()) {
                Ok(r) => list.push(r),
                Err(err) => errors.push(err),
            }
        }
        (list, errors)
    }

    /// Add a rule unless an equal one is there.
    pub fn push(&mut self, rule: Rule) {
        if !self.rules.contains(&rule) {
            self.rules.push(rule);
        }
    }

    /// The entries, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The canonical text of every entry.
    pub fn entries(&self) -> Vec<String> {
        self.rules.iter().map(Rule::to_string).collect()
    }

    /// The first entry naming `ip` literally with `port`.
    pub fn literal_rule_for(&self, ip: IpAddr, port: u16) -> Option<&Rule> {
        self.rules.iter().find(|r| r.allows_address(ip, port))
    }

    /// Whether `inner` allows nothing this list does not: its host is within a rule's host for
    /// each of its ports.
    pub fn covers(&self, inner: &Rule) -> bool {
        inner.ports.list().into_iter().all(|port| {
            self.rules
                .iter()
                .any(|outer| outer.ports.contains(port) && inner.host_within(&outer.host))
        })
    }
}

/// Why a request was refused by [`decide`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DenyReason {
    /// No entry allows this name and port.
    #[error("{host}:{port} is not on the network allow-list")]
    NotListed {
        /// The requested name.
        host: String,
        /// The requested port.
        port: u16,
    },
    /// An address no entry names literally.
    #[error(
        "{address}:{port} is an IP address; only a name on the allow-list, or an address the \
         allow-list names literally, is reachable"
    )]
    IpLiteral {
        /// The requested address.
        address: IpAddr,
        /// The requested port.
        port: u16,
    },
    /// The requested host is not a valid host.
    #[error(transparent)]
    InvalidHost(HostError),
}

/// The decision on one requested `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// `rule` is the canonical text of the first entry that allows it.
    Allowed {
        /// The entry.
        rule: String,
    },
    /// Refused.
    Denied {
        /// Why.
        reason: DenyReason,
    },
}

/// Decide on the host a client asked for (before any name resolution): a name is allowed by the
/// first entry matching it and the port; an IP literal only by an entry naming that address.
pub fn decide(list: &AllowList, host: &str, port: u16) -> Decision {
    let denied = |reason| Decision::Denied { reason };
    match parse_host(host) {
        Err(e) => denied(DenyReason::InvalidHost(e)),
        Ok(Host::Address(address)) => match list.literal_rule_for(address, port) {
            Some(rule) => Decision::Allowed {
                rule: rule.to_string(),
            },
            None => denied(DenyReason::IpLiteral { address, port }),
        },
        Ok(Host::Name(name)) => match list.rules.iter().find(|r| r.allows_name(&name, port)) {
            Some(rule) => Decision::Allowed {
                rule: rule.to_string(),
            },
            None => denied(DenyReason::NotListed { host: name, port }),
        },
    }
}

/// A special-purpose block an address falls in (IANA's IPv4 and IPv6 special-purpose address
/// registries, and what is not global unicast).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialRange {
    /// The block, e.g. `127.0.0.0/8`.
    pub block: &'static str,
    /// What it is, e.g. `loopback`.
    pub what: &'static str,
}

/// An address that is not publicly routable, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NonPublic {
    /// The special-purpose block it falls in.
    pub range: SpecialRange,
    /// When the address embeds an IPv4 address (IPv4-mapped, NAT64, 6to4, Teredo): the form,
    /// e.g. `IPv4-mapped (::ffff:0:0/96)`, and the embedded address that was classified.
    pub embedded: Option<(&'static str, Ipv4Addr)>,
}

impl fmt::Display for NonPublic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.range.what, self.range.block)?;
        if let Some((form, v4)) = self.embedded {
            write!(f, ", embedded as {v4} in an {form} address")?;
        }
        Ok(())
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from_be_bytes([a, b, c, d])
}

/// IPv4 blocks that are not globally reachable. `255.255.255.255/32` comes before `240.0.0.0/4`,
/// which contains it, so that broadcast is named as such.
const V4_SPECIAL: &[(u32, u8, SpecialRange)] = &[
    (
        v4(0, 0, 0, 0),
        8,
        r("0.0.0.0/8", "\"this network\" (unspecified)"),
    ),
    (v4(10, 0, 0, 0), 8, r("10.0.0.0/8", "private (RFC 1918)")),
    (
        v4(100, 64, 0, 0),
        10,
        r("100.64.0.0/10", "shared address space (CGNAT)"),
    ),
    (v4(127, 0, 0, 0), 8, r("127.0.0.0/8", "loopback")),
    (v4(169, 254, 0, 0), 16, r("169.254.0.0/16", "link-local")),
    (
        v4(172, 16, 0, 0),
        12,
        r("172.16.0.0/12", "private (RFC 1918)"),
    ),
    (
        v4(192, 0, 0, 0),
        24,
        r("192.0.0.0/24", "IETF protocol assignments"),
    ),
    (
        v4(192, 0, 2, 0),
        24,
        r("192.0.2.0/24", "documentation (TEST-NET-1)"),
    ),
    (
        v4(192, 88, 99, 0),
        24,
        r("192.88.99.0/24", "deprecated 6to4 relay anycast"),
    ),
    (
        v4(192, 168, 0, 0),
        16,
        r("192.168.0.0/16", "private (RFC 1918)"),
    ),
    (v4(198, 18, 0, 0), 15, r("198.18.0.0/15", "benchmarking")),
    (
        v4(198, 51, 100, 0),
        24,
        r("198.51.100.0/24", "documentation (TEST-NET-2)"),
    ),
    (
        v4(203, 0, 113, 0),
        24,
        r("203.0.113.0/24", "documentation (TEST-NET-3)"),
    ),
    (v4(224, 0, 0, 0), 4, r("224.0.0.0/4", "multicast")),
    (
        v4(255, 255, 255, 255),
        32,
        r("255.255.255.255/32", "limited broadcast"),
    ),
    (v4(240, 0, 0, 0), 4, r("240.0.0.0/4", "reserved")),
];

const fn r(block: &'static str, what: &'static str) -> SpecialRange {
    SpecialRange { block, what }
}

fn in_v4(addr: u32, base: u32, len: u8) -> bool {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    addr & mask == base
}

fn in_v6(addr: u128, base: u128, len: u8) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    addr & mask == base
}

/// Where `ip` is not publicly routable, the block it falls in; `None` for a public address.
/// IPv6 addresses outside global unicast (`2000::/3`) are all non-public; the forms that embed an
/// IPv4 address (IPv4-mapped `::ffff:0:0/96`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`, Teredo
/// `2001::/32`) are as public as the IPv4 address they carry.
pub fn classify(ip: IpAddr) -> Option<NonPublic> {
    match ip {
        IpAddr::V4(a) => classify_v4(a).map(|range| NonPublic {
            range,
            embedded: None,
        }),
        IpAddr::V6(a) => classify_v6(a),
    }
}

fn classify_v4(a: Ipv4Addr) -> Option<SpecialRange> {
    let n = u32::from(a);
    V4_SPECIAL
        .iter()
        .find(|(base, len, _)| in_v4(n, *base, *len))
        .map(|(_, _, range)| *range)
}

fn classify_v6(a: Ipv6Addr) -> Option<NonPublic> {
    let n = u128::from(a);
    let plain = |block, what| {
        Some(NonPublic {
            range: r(block, what),
            embedded: None,
        })
    };
    let embedded = |form: &'static str, v4: u32| {
        let v4 = Ipv4Addr::from(v4);
        classify_v4(v4).map(|range| NonPublic {
            range,
            embedded: Some((form, v4)),
        })
    };
    // The 32 bits at `bits`, and the low 32 bits: where IPv6 forms embed an IPv4 address.
    #[allow(clippy::cast_possible_truncation, reason = "takes 32 bits on purpose")]
    let high = |bits: u32| (n >> bits) as u32;
    let low = high(0);
    if n == 0 {
        return plain("::/128", "unspecified");
    }
    if n == 1 {
        return plain("::1/128", "loopback");
    }
    if in_v6(n, 0xffff_0000_0000, 96) {
        return embedded("IPv4-mapped (::ffff:0:0/96)", low);
    }
    if in_v6(n, 0x0064_ff9b << 96, 96) {
        return embedded("NAT64 (64:ff9b::/96)", low);
    }
    if in_v6(n, 0x0064_ff9b_0001 << 80, 48) {
        return plain("64:ff9b:1::/48", "local-use NAT64");
    }
    if in_v6(n, 0, 8) {
        return plain("::/8", "reserved (IPv4-compatible and other legacy forms)");
    }
    if in_v6(n, 0x0100 << 112, 64) {
        return plain("100::/64", "discard-only");
    }
    if in_v6(n, 0x2001_0db8 << 96, 32) {
        return plain("2001:db8::/32", "documentation");
    }
    if in_v6(n, 0x2001_0000 << 96, 32) {
        // Teredo: the server's IPv4 address in bits 32–63, the client's (the real endpoint)
        // inverted in the low 32 bits.
        return embedded("Teredo (2001::/32)", !low)
            .or_else(|| embedded("Teredo (2001::/32)", high(64)));
    }
    if in_v6(n, 0x2001 << 112, 23) {
        return plain("2001::/23", "IETF protocol assignments");
    }
    if in_v6(n, 0x2002 << 112, 16) {
        return embedded("6to4 (2002::/16)", high(80));
    }
    if in_v6(n, 0x3fff << 112, 20) {
        return plain("3fff::/20", "documentation");
    }
    if in_v6(n, 0x5f00 << 112, 16) {
        return plain("5f00::/16", "segment routing (SRv6) SIDs");
    }
    if in_v6(n, 0xfc00 << 112, 7) {
        return plain("fc00::/7", "unique local");
    }
    if in_v6(n, 0xfe80 << 112, 10) {
        return plain("fe80::/10", "link-local");
    }
    if in_v6(n, 0xfec0 << 112, 10) {
        return plain("fec0::/10", "site-local (deprecated)");
    }
    if in_v6(n, 0xff00 << 112, 8) {
        return plain("ff00::/8", "multicast");
    }
    if !in_v6(n, 0x2000 << 112, 3) {
        return plain("outside 2000::/3", "not global unicast (reserved)");
    }
    None
}

/// Whether the broker may connect to `ip` (resolved from a name, or asked for literally) on
/// `port`: a public address always; a non-public one only when an entry names it literally.
/// `Ok(Some(rule))` names that entry; `Err` says which block refused it.
pub fn admit_address(list: &AllowList, ip: IpAddr, port: u16) -> Result<Option<&Rule>, NonPublic> {
    match classify(ip) {
        None => Ok(None),
        Some(why) => list.literal_rule_for(ip, port).map(Some).ok_or(why),
    }
}

/// Where an entry of the effective list came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntrySource {
    /// The user's settings (`$XDG_CONFIG_HOME/hanzo/settings.json`).
    User,
    /// The workspace's `.hanzo/settings.json` (only when trusted, and only narrowing).
    Project,
    /// The workspace's `.hanzo/settings.local.json`.
    Local,
    /// `--network-allow HOST`, for one invocation.
    Cli,
}

impl EntrySource {
    /// The name `config show --sources` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            EntrySource::User => "user",
            EntrySource::Project => "project",
            EntrySource::Local => "local",
            EntrySource::Cli => "cli",
        }
    }
}

/// A problem with one scope's entries; the entry was ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkWarning {
    /// Whose entry it was.
    pub scope: EntrySource,
    /// What was wrong, and that it was ignored.
    pub message: String,
}

/// `sandbox.network_allow` of each scope, as written (`None`: the scope does not set it).
#[derive(Debug, Clone, Copy, Default)]
pub struct ScopeEntries<'a> {
    /// The user's settings.
    pub user: Option<&'a [String]>,
    /// The project's settings.
    pub project: Option<&'a [String]>,
    /// The project's local settings.
    pub local: Option<&'a [String]>,
    /// `--network-allow` values.
    pub cli: &'a [String],
    /// Whether the workspace is trusted (or has nothing that needs trust).
    pub trusted: bool,
}

/// The allow-list a run uses, where each entry came from, and what was ignored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EffectiveAllowList {
    /// The entries in force.
    pub list: AllowList,
    /// Canonical entry text and its scope, in list order (for `config show --sources`).
    pub sources: Vec<(String, EntrySource)>,
    /// Entries that were ignored, and why.
    pub warnings: Vec<NetworkWarning>,
}

/// Combine the scopes: the user scope grants; the project scope, then the local scope, may only
/// narrow — when a workspace scope sets the list, the list becomes that scope's entries that the
/// list so far already allows (every host and port of the entry), and any other entry is ignored
/// with a warning; an untrusted workspace gets no network from settings at all. `--network-allow`
/// entries are added last, for this invocation: an explicit decision of the user at the prompt.
/// Entries that do not parse are ignored with a warning.
pub fn effective_allow_list(scopes: &ScopeEntries<'_>) -> EffectiveAllowList {
    let mut out = EffectiveAllowList::default();
    let parse = |scope: EntrySource, entries: &[String], out: &mut EffectiveAllowList| {
        let (list, errors) = AllowList::parse_lenient(entries);
        out.warnings
            .extend(errors.into_iter().map(|e| NetworkWarning {
                scope,
                message: format!("{e}; ignored"),
            }));
        list
    };
    let mut current: Vec<(Rule, EntrySource)> = Vec::new();
    if scopes.trusted {
        if let Some(user) = scopes.user {
            let list = parse(EntrySource::User, user, &mut out);
            current = list
                .rules
                .into_iter()
                .map(|r| (r, EntrySource::User))
                .collect();
        }
        for (scope, entries) in [
            (EntrySource::Project, scopes.project),
            (EntrySource::Local, scopes.local),
        ] {
            let Some(entries) = entries else { continue };
            let narrower = parse(scope, entries, &mut out);
            let so_far = AllowList {
                rules: current.iter().map(|(r, _)| r.clone()).collect(),
            };
            let mut kept = Vec::new();
            for rule in narrower.rules {
                if so_far.covers(&rule) {
                    kept.push((rule, scope));
                } else {
                    out.warnings.push(NetworkWarning {
                        scope,
                        message: format!(
                            "network entry {:?} is ignored: the user settings do not allow it, \
                             and a workspace file can only narrow network access (add it to \
                             the user settings, or pass --network-allow for one run)",
                            rule.to_string()
                        ),
                    });
                }
            }
            current = kept;
        }
    } else {
        let asked = [scopes.user, scopes.project, scopes.local]
            .iter()
            .flatten()
            .map(|e| e.len())
            .sum::<usize>();
        if asked > 0 {
            out.warnings.push(NetworkWarning {
                scope: EntrySource::Project,
                message: format!(
                    "this workspace is not trusted, so commands get no network from the settings \
                     ({asked} sandbox.network_allow entries ignored); review .hanzo/ and run \
                     `hanzo-dev trust`, or pass --network-allow for one run"
                ),
            });
        }
    }
    let cli = parse(EntrySource::Cli, scopes.cli, &mut out);
    current.extend(cli.rules.into_iter().map(|r| (r, EntrySource::Cli)));
    for (rule, scope) in current {
        if !out.list.rules.contains(&rule) {
            out.sources.push((rule.to_string(), scope));
            out.list.rules.push(rule);
        }
    }
    out
}

/// The error when the settings ask for network and only tier A is available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the settings allow network for commands ({entries} sandbox.network_allow entries: {list}), \
     but network for commands needs sandbox tier B, which is not available here: {why}. Commands \
     are never given the host's network. Run where user namespaces work (`hanzo-dev doctor` says \
     what is missing), or remove the entries to run without network"
)]
pub struct NeedsTierB {
    /// How many entries ask for network.
    pub entries: usize,
    /// The entries, comma-separated.
    pub list: String,
    /// Why tier B is unavailable (from the kernel probe).
    pub why: String,
}

/// Fail closed when `list` asks for network and tier B is unavailable (`tier_b` is
/// `hanzo_sandbox::doctor::KernelReport::tier_b()`): tier A has no namespace to put the proxy
/// endpoint in, so it has no egress at all.
pub fn require_tier_b(list: &AllowList, tier_b: Result<(), String>) -> Result<(), NeedsTierB> {
    match tier_b {
        Ok(()) => Ok(()),
        Err(_) if list.is_empty() => Ok(()),
        Err(why) => Err(NeedsTierB {
            entries: list.rules.len(),
            list: list.entries().join(", "),
            why,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strictly_below_needs_a_dot_boundary() {
        assert!(is_strictly_below("a.example.com", "example.com"));
        assert!(is_strictly_below("a.b.example.com", "example.com"));
        assert!(!is_strictly_below("example.com", "example.com"));
        assert!(!is_strictly_below("badexample.com", "example.com"));
        assert!(!is_strictly_below(".example.com", "example.com"));
    }
}
