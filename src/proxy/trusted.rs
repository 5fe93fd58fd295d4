//! The addresses whose forwarding headers, request IDs and trace flags pier believes
//! (`--trusted-proxies`): read by the accept stage (once per connection) and by
//! `observe::forwarded` (the `X-Forwarded-For` chain).

use std::net::IpAddr;
use std::str::FromStr;

use crate::model::net::{Cidr, CidrError};

/// The addresses whose forwarding headers pier believes (`--trusted-proxies`). Empty, the
/// default: nobody's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
