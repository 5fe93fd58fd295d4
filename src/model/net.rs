//! IP networks (`addr/len`), for the data plane's address rules: trusted proxies (the
//! addresses whose forwarding headers, request IDs and trace flags pier believes: read once
//! per connection by the accept stage, and by `observe::forwarded` for the `X-Forwarded-For`
//! chain), and the client CIDRs of access policies.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::Serialize;

/// An IPv4 or IPv6 network, `addr/len` (a bare address is a `/32` or `/128`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct Cidr {
    addr: IpAddr,
    len: u8,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CidrError {
    #[error("not an IP address")]
    Address,
    #[error("prefix length is not a number up to 32 (IPv4) or 128 (IPv6)")]
    Length,
}

// === impl Cidr ===

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => prefix_eq(&net.octets(), &ip.octets(), self.len),
            (IpAddr::V6(net), IpAddr::V6(ip)) => prefix_eq(&net.octets(), &ip.octets(), self.len),
            _ => false,
        }
    }
}

/// The first `len` bits of `a` and `b` are equal.
fn prefix_eq(a: &[u8], b: &[u8], len: u8) -> bool {
    let whole = usize::from(len / 8);
    let rest = len % 8;
    if a[..whole] != b[..whole] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    a[whole] & mask == b[whole] & mask
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| CidrError::Address)?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => l.trim().parse().map_err(|_| CidrError::Length)?,
        };
        if len > max {
            return Err(CidrError::Length);
        }
        Ok(Self { addr, len })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl From<Cidr> for String {
    fn from(c: Cidr) -> Self {
        c.to_string()
    }
}

/// The addresses whose forwarding headers pier believes (`--trusted-proxies`). Empty, the
/// default: nobody's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TrustedProxies(Vec<Cidr>);

// === impl TrustedProxies ===

impl TrustedProxies {
    pub fn new(nets: Vec<Cidr>) -> Self {
        Self(nets)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Is `ip` one of the trusted proxies? An IPv4-mapped IPv6 address (a dual-stack socket's
    /// view of an IPv4 peer) counts as the IPv4 address.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|c| c.contains(ip))
    }
}

impl FromStr for TrustedProxies {
    type Err = CidrError;

    /// A comma-separated list of CIDRs; empty means nobody.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map(Self)
    }
}
