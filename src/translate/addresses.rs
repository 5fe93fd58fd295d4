//! Gateway addresses. pier assigns no addresses: it serves on the host it runs on, and reports
//! the addresses the operator says that host is reached at (`--advertise-address`, else a
//! concrete `--listen-host`) in `status.addresses`. A Gateway's `spec.addresses` are checked
//! against them with the upstream semantics:
//!
//! - a type other than `IPAddress` (e.g. `Hostname`): `Accepted` False, `UnsupportedAddress`;
//! - an IP address pier is not reached at: `Programmed` False, `AddressNotUsable`;
//! - an `IPAddress` without a value (GEP-3726: "assign one"): the advertised addresses; with
//!   none to give, `Programmed` False, `AddressNotAssigned`;
//! - otherwise `status.addresses` lists exactly the requested (or assigned) addresses.
//!
//! Either way pier keeps serving the Gateway's listeners on its own host: the conditions tell
//! the operator that the requested addresses are not the ones it is reached at.
//!
//! With an address pool (`--gateway-address-pool`), each Gateway gets an address of its own
//! instead, as a cloud load balancer per Gateway would give it: its listeners bind that
//! address, so two Gateways may both listen on port 80. An address, once given, stays: a
//! Gateway whose `status.addresses` already holds a pool address keeps it (so Gateways coming
//! and going never move the others). Then, in creation order: the address `spec.addresses`
//! names if it is in the pool and free, else (no address, or an empty value) a free one,
//! searched from a slot that the Gateway's name hashes to (so a restart without status, as in
//! standalone mode, gives mostly the same addresses), never one that any Gateway names in its
//! `spec.addresses` (a static address is not handed to another Gateway first). A Gateway that
//! names an address outside the pool, or taken, or more than one (pier binds one address per
//! Gateway), is `AddressNotUsable`; one left without is `AddressNotAssigned`; neither is
//! served.
//!
//! Routability (GEP-5093, Gateway API v1.7 experimental): an entry's `routability` is a
//! requirement. pier's addresses are the host's (or its pool's), never a Service ClusterIP, so
//! `Cluster` cannot be met, nor can a prefixed value pier does not define; only `""` (the
//! default) and the value conformance reserves, `testing.x-k8s.io/sentinel` (met as the default
//! and echoed), can. An entry that cannot be met is left out and named (`AddressesAssigned`
//! False: `PartiallyAssigned`, or `NotAssigned` with `Programmed` False `AddressNotAssigned`
//! when nothing is left); every status address says its routability (`""` or the sentinel).

use std::net::IpAddr;

use serde::Serialize;

use super::api::GatewayAddresses;

pub const IP_ADDRESS: &str = "IPAddress";

/// `AddressNotAssigned`'s message when every entry asks for a routability pier cannot meet.
pub const NONE_MET: &str = "no entry of spec.addresses has a routability pier can meet";

/// The routability conformance reserves (GEP-5093): a claimant supports it and echoes it.
pub const SENTINEL: &str = "testing.x-k8s.io/sentinel";

/// One `status.addresses` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StatusAddress {
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub value: String,
    /// `""` (pier's default scope) or [`SENTINEL`] (GEP-5093: claimants set it on every
    /// address; the status writer leaves it out where the installed CRD lacks the field).
    pub routability: &'static str,
}

/// What `spec.addresses` comes to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Addresses {
    pub status: Vec<StatusAddress>,
    /// The Gateway's own address, which its listeners bind (pool mode).
    pub bind: Option<IpAddr>,
    /// Pool mode, but no address for this Gateway: its listeners are not served.
    pub unbound: bool,
    /// `Accepted` False, `UnsupportedAddress`.
    pub unsupported: Option<String>,
    /// `Programmed` False, `AddressNotUsable`.
    pub not_usable: Option<String>,
    /// `Programmed` False, `AddressNotAssigned`.
    pub not_assigned: Option<String>,
    /// `spec.addresses` is not empty.
    pub requested: bool,
    /// Entries whose `routability` pier cannot meet (left out), each named.
    pub unsatisfied: Vec<String>,
}

/// `spec.addresses` split by whether pier can meet each entry's `routability` (by index in
/// `routability`, `""` where unset).
#[derive(Debug, Default)]
pub struct Routable {
    /// The entries pier can meet, in order.
    pub spec: Vec<GatewayAddresses>,
    /// The ones it cannot, each named with why.
    pub unsatisfied: Vec<String>,
    /// The values of entries that asked for [`SENTINEL`] (`""`: an entry without a value).
    sentinel: Vec<String>,
}

/// Splits `spec` by routability (see the module docs).
pub fn routable(spec: Option<&[GatewayAddresses]>, routability: &[String]) -> Routable {
    let mut out = Routable::default();
    for (i, a) in spec.unwrap_or_default().iter().enumerate() {
        let value = a.value.as_deref().unwrap_or_default();
        match routability.get(i).map_or("", String::as_str) {
            "" => out.spec.push(a.clone()),
            SENTINEL => {
                out.sentinel.push(value.to_string());
                out.spec.push(a.clone());
            }
            "Cluster" => out.unsatisfied.push(format!(
                "spec.addresses[{i}] ({value:?}): routability Cluster needs a Service ClusterIP, \
                 and pier runs outside the cluster"
            )),
            other => out.unsatisfied.push(format!(
                "spec.addresses[{i}] ({value:?}): routability {other:?} is not one pier can meet \
                 (\"\", or {SENTINEL:?})"
            )),
        }
    }
    out
}

impl Routable {
    /// The entries pier can meet, for the assigner; `None` when the Gateway asks for none.
    pub fn spec(&self) -> Option<&[GatewayAddresses]> {
        Some(self.spec.as_slice()).filter(|s| !s.is_empty())
    }

    /// Every entry asked for a routability pier cannot meet: no address at all.
    pub fn none_met(&self) -> bool {
        self.spec.is_empty() && !self.unsatisfied.is_empty()
    }

    /// Notes on `out` what routability left out, and marks the addresses given for entries
    /// that asked for the sentinel.
    pub fn apply(self, out: &mut Addresses) {
        for s in &mut out.status {
            let named = self
                .spec
                .iter()
                .any(|a| a.value.as_deref() == Some(s.value.as_str()));
            let echoed = self.sentinel.contains(&s.value)
                || (!named && self.sentinel.iter().any(String::is_empty));
            if echoed {
                s.routability = SENTINEL;
            }
        }
        out.requested |= !self.spec.is_empty() || !self.unsatisfied.is_empty();
        out.unsatisfied = self.unsatisfied;
    }
}

/// Hands out addresses to Gateways in creation order (see the module docs).
#[derive(Debug)]
pub struct Assigner<'a> {
    advertised: &'a [IpAddr],
    pool: &'a [IpAddr],
    taken: std::collections::BTreeSet<IpAddr>,
    /// Pool addresses some Gateway names: not handed out to Gateways that name none.
    named: std::collections::BTreeSet<IpAddr>,
}

impl<'a> Assigner<'a> {
    pub fn new(advertised: &'a [IpAddr], pool: &'a [IpAddr]) -> Self {
        Self {
            advertised,
            pool,
            taken: Default::default(),
            named: Default::default(),
        }
    }

    /// Notes the pool addresses a Gateway names in `spec.addresses`, so that no address is
    /// handed to a Gateway that names none before the one naming it gets it. Call for every
    /// Gateway before [`Assigner::assign`].
    pub fn note_named(&mut self, spec: Option<&[GatewayAddresses]>) {
        let named = wanted(spec.unwrap_or_default())
            .into_iter()
            .filter_map(|v| v.parse::<IpAddr>().ok())
            .filter(|ip| self.pool.contains(ip));
        self.named.extend(named);
    }

    /// Reserves the pool address a Gateway already has (`status.addresses`), if it is in the
    /// pool, free, and compatible with its `spec.addresses`. Call for every Gateway first.
    pub fn keep(
        &mut self,
        spec: Option<&[GatewayAddresses]>,
        previous: &[String],
    ) -> Option<IpAddr> {
        let wanted = wanted(spec.unwrap_or_default());
        let ip = previous
            .iter()
            .filter_map(|v| v.parse::<IpAddr>().ok())
            .find(|ip| {
                self.pool.contains(ip)
                    && !self.taken.contains(ip)
                    && (wanted.is_empty() || wanted.iter().any(|w| w.parse() == Ok(*ip)))
            })?;
        self.taken.insert(ip);
        Some(ip)
    }

    /// A Gateway's addresses; `kept` is what [`Assigner::keep`] reserved for it, `name` seeds
    /// where the search for a free address starts.
    pub fn assign(
        &mut self,
        spec: Option<&[GatewayAddresses]>,
        kept: Option<IpAddr>,
        name: &str,
    ) -> Addresses {
        if self.pool.is_empty() {
            return resolve(spec, self.advertised);
        }
        let spec = spec.unwrap_or_default();
        let mut out = Addresses {
            unsupported: unsupported(spec),
            ..Addresses::default()
        };
        let wanted = wanted(spec);
        let pick = if wanted.is_empty() && kept.is_some() {
            kept
        } else if wanted.is_empty() {
            let start = slot(name, self.pool.len());
            let (before, after) = self.pool.split_at(start);
            after
                .iter()
                .chain(before)
                .copied()
                .find(|ip| !self.taken.contains(ip) && !self.named.contains(ip))
        } else {
            // Every address named must be a free pool address (GEP-3726: an address the
            // Gateway cannot have is AddressNotUsable, even beside one it can).
            let not_free: Vec<&str> = wanted
                .iter()
                .copied()
                .filter(|v| {
                    !matches!(v.parse::<IpAddr>(), Ok(ip) if self.pool.contains(&ip)
                        && (!self.taken.contains(&ip) || kept == Some(ip)))
                })
                .collect();
            if !not_free.is_empty() {
                out.not_usable = Some(format!(
                    "{} is not a free address of pier's gateway address pool",
                    not_free.join(", ")
                ));
                None
            } else if wanted.len() > 1 {
                out.not_usable = Some(format!(
                    "pier binds one address per Gateway; spec.addresses names {}",
                    wanted.join(", ")
                ));
                None
            } else {
                wanted[0].parse::<IpAddr>().ok()
            }
        };
        match pick {
            Some(ip) => {
                self.taken.insert(ip);
                out.bind = Some(ip);
                out.status = vec![StatusAddress::ip(ip)];
            }
            None => {
                out.unbound = true;
                if out.not_usable.is_none() {
                    out.not_assigned =
                        Some("every address of pier's gateway address pool is taken".into());
                }
            }
        }
        out
    }
}

impl StatusAddress {
    fn ip(ip: IpAddr) -> Self {
        Self {
            type_: IP_ADDRESS,
            value: ip.to_string(),
            routability: "",
        }
    }
}

/// `Accepted=False`'s message when `spec.addresses` has a type other than `IPAddress`.
fn unsupported(spec: &[GatewayAddresses]) -> Option<String> {
    let types: Vec<String> = spec
        .iter()
        .filter_map(|a| {
            let type_ = a.r#type.as_deref().unwrap_or(IP_ADDRESS);
            (type_ != IP_ADDRESS).then(|| format!("{type_} {}", a.value.as_deref().unwrap_or("")))
        })
        .collect();
    (!types.is_empty()).then(|| {
        format!(
            "pier supports only IPAddress addresses; unsupported: {}",
            types.join(", ")
        )
    })
}

/// The IP address values `spec.addresses` names.
fn wanted(spec: &[GatewayAddresses]) -> Vec<&str> {
    spec.iter()
        .filter(|a| a.r#type.as_deref().unwrap_or(IP_ADDRESS) == IP_ADDRESS)
        .filter_map(|a| a.value.as_deref().filter(|v| !v.is_empty()))
        .collect()
}

/// Where the search for a free pool address starts for Gateway `name` (FNV-1a: stable across
/// runs and builds).
fn slot(name: &str, len: usize) -> usize {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (h % len.max(1) as u64) as usize
}

/// Parses `--gateway-address-pool` entries: IP addresses and IPv4 CIDR blocks (at most 4096
/// addresses each; the network and broadcast addresses of blocks up to /30 are left out).
pub fn parse_pool(entries: &[String]) -> Result<Vec<IpAddr>, String> {
    let mut out = Vec::new();
    for e in entries {
        let e = e.trim();
        if let Some((net, bits)) = e.split_once('/') {
            let net: std::net::Ipv4Addr = net
                .parse()
                .map_err(|_| format!("{e}: not an IPv4 CIDR block"))?;
            let bits: u32 = bits
                .parse()
                .map_err(|_| format!("{e}: bad prefix length"))?;
            if !(20..=32).contains(&bits) {
                return Err(format!("{e}: prefix length must be 20 to 32"));
            }
            let size = 1u32 << (32 - bits);
            let base = u32::from(net) & !(size - 1);
            let (first, last) = if size >= 4 { (1, size - 1) } else { (0, size) };
            out.extend((first..last).map(|i| IpAddr::V4((base + i).into())));
        } else {
            out.push(e.parse().map_err(|_| format!("{e}: not an IP address"))?);
        }
    }
    out.dedup();
    Ok(out)
}

pub fn resolve(spec: Option<&[GatewayAddresses]>, advertised: &[IpAddr]) -> Addresses {
    let all = || {
        advertised
            .iter()
            .map(|ip| StatusAddress::ip(*ip))
            .collect::<Vec<_>>()
    };
    let spec = spec.unwrap_or_default();
    if spec.is_empty() {
        return Addresses {
            status: all(),
            ..Addresses::default()
        };
    }
    let mut out = Addresses {
        unsupported: unsupported(spec),
        ..Addresses::default()
    };
    let mut not_usable = vec![];
    for a in spec {
        if a.r#type.as_deref().unwrap_or(IP_ADDRESS) != IP_ADDRESS {
            continue;
        }
        match a.value.as_deref().filter(|v| !v.is_empty()) {
            None if advertised.is_empty() => {
                out.not_assigned = Some(
                    "an IPAddress without a value asks for an address, and pier advertises none \
                     (--advertise-address)"
                        .into(),
                );
            }
            None => {
                for s in all() {
                    if !out.status.contains(&s) {
                        out.status.push(s);
                    }
                }
            }
            Some(v) => match v.parse::<IpAddr>() {
                Ok(ip) if advertised.contains(&ip) => {
                    let s = StatusAddress::ip(ip);
                    if !out.status.contains(&s) {
                        out.status.push(s);
                    }
                }
                _ => not_usable.push(v.to_string()),
            },
        }
    }
    if !not_usable.is_empty() {
        let have: Vec<String> = advertised.iter().map(IpAddr::to_string).collect();
        out.not_usable = Some(format!(
            "pier is not reached at {} (it advertises: {}); listeners are still served on its host",
            not_usable.join(", "),
            if have.is_empty() {
                "none".to_string()
            } else {
                have.join(", ")
            }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(type_: Option<&str>, value: Option<&str>) -> GatewayAddresses {
        GatewayAddresses {
            r#type: type_.map(str::to_string),
            value: value.map(str::to_string),
        }
    }

    fn ips(s: &[&str]) -> Vec<IpAddr> {
        s.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn values(a: &Addresses) -> Vec<&str> {
        a.status.iter().map(|s| s.value.as_str()).collect()
    }

    #[test]
    fn no_spec_addresses_reports_every_advertised_one() {
        let a = resolve(None, &ips(&["192.0.2.1", "2001:db8::1"]));
        assert_eq!(values(&a), ["192.0.2.1", "2001:db8::1"]);
        assert_eq!(a.unsupported, None);
        assert_eq!(resolve(Some(&[]), &[]), Addresses::default());
    }

    #[test]
    fn static_addresses_follow_the_upstream_rules() {
        let adv = ips(&["192.0.2.1", "192.0.2.2"]);
        let spec = [
            addr(Some("Hostname"), Some("gw.example.com")),
            addr(Some("IPAddress"), Some("198.51.100.9")),
            addr(None, Some("192.0.2.2")),
        ];
        let a = resolve(Some(&spec), &adv);
        assert!(
            a.unsupported
                .as_ref()
                .unwrap()
                .contains("Hostname gw.example.com")
        );
        assert!(a.not_usable.as_ref().unwrap().contains("198.51.100.9"));
        assert_eq!(values(&a), ["192.0.2.2"]);

        let a = resolve(Some(&spec[1..]), &adv);
        assert_eq!(a.unsupported, None);
        assert!(a.not_usable.is_some());

        let a = resolve(Some(&spec[2..]), &adv);
        assert_eq!(
            (&a.unsupported, &a.not_usable, &a.not_assigned),
            (&None, &None, &None)
        );
        assert_eq!(values(&a), ["192.0.2.2"]);
    }

    #[test]
    fn the_pool_gives_each_gateway_its_own_address() {
        let pool = parse_pool(&["10.244.1.0/30".into(), "10.244.2.7".into()]).unwrap();
        // A /30's network and broadcast addresses are left out.
        assert_eq!(pool, ips(&["10.244.1.1", "10.244.1.2", "10.244.2.7"]));
        let mut a = Assigner::new(&[], &pool);
        // A Gateway that already has 10.244.1.1 (its status) keeps it.
        let kept = a.keep(None, &["10.244.1.1".into()]);
        assert_eq!(kept, Some("10.244.1.1".parse().unwrap()));
        let first = a.assign(None, kept, "ns/first");
        assert_eq!(values(&first), ["10.244.1.1"]);
        // A named pool address; then a taken one and one outside the pool are not usable.
        let spec = [addr(Some("IPAddress"), Some("10.244.2.7"))];
        let named = a.assign(Some(&spec), None, "ns/b");
        assert_eq!(named.bind, Some("10.244.2.7".parse().unwrap()));
        let taken = a.assign(Some(&[addr(None, Some("10.244.1.1"))]), None, "ns/c");
        assert!(taken.unbound && taken.not_usable.is_some());
        let outside = a.assign(Some(&[addr(None, Some("192.0.2.1"))]), None, "ns/d");
        assert!(outside.unbound && outside.not_usable.is_some());
        // An empty value takes the one free address left; then the pool runs out.
        let empty = a.assign(Some(&[addr(Some("IPAddress"), None)]), None, "ns/e");
        assert_eq!(empty.bind, Some("10.244.1.2".parse().unwrap()));
        let none = a.assign(None, None, "ns/f");
        assert!(none.unbound && none.not_assigned.is_some());
        assert!(parse_pool(&["10.0.0.0/8".into()]).is_err());
    }

    #[test]
    fn a_static_address_is_all_or_nothing_and_reserved_for_its_gateway() {
        // GatewayStaticAddresses: an unusable address beside a usable one is AddressNotUsable;
        // without it, the usable one is bound.
        let pool = parse_pool(&["10.244.1.0/29".into()]).unwrap();
        let usable = addr(Some("IPAddress"), Some("10.244.1.5"));
        let unusable = addr(Some("IPAddress"), Some("192.0.2.9"));
        let mut a = Assigner::new(&[], &pool);
        let both = a.assign(Some(&[unusable.clone(), usable.clone()]), None, "ns/s");
        assert!(both.unbound);
        assert_eq!(
            both.not_usable.as_deref(),
            Some("192.0.2.9 is not a free address of pier's gateway address pool")
        );
        let mut a = Assigner::new(&[], &pool);
        let one = a.assign(Some(std::slice::from_ref(&usable)), None, "ns/s");
        assert_eq!(values(&one), ["10.244.1.5"]);
        // Two usable addresses: pier binds one per Gateway.
        let two = [usable.clone(), addr(None, Some("10.244.1.6"))];
        let mut a = Assigner::new(&[], &pool);
        assert!(a.assign(Some(&two), None, "ns/s").not_usable.is_some());
        // A kept address does not hide an unusable one added beside it.
        let mut a = Assigner::new(&[], &pool);
        let kept = a.keep(Some(std::slice::from_ref(&usable)), &["10.244.1.5".into()]);
        let added = a.assign(Some(&[usable.clone(), unusable]), kept, "ns/s");
        assert!(added.unbound && added.not_usable.is_some());
        // Gateways that name no address never get one that another Gateway names, whichever
        // comes first: fill the pool with unnamed Gateways after noting the static one.
        let mut a = Assigner::new(&[], &pool);
        a.note_named(Some(std::slice::from_ref(&usable)));
        let given: Vec<_> = (0..pool.len())
            .filter_map(|i| a.assign(None, None, &format!("ns/g{i}")).bind)
            .collect();
        assert_eq!(given.len(), pool.len() - 1);
        assert!(!given.contains(&"10.244.1.5".parse().unwrap()));
        assert_eq!(
            values(&a.assign(Some(&[usable]), None, "ns/s")),
            ["10.244.1.5"]
        );
    }

    #[test]
    fn a_new_address_does_not_depend_on_which_other_gateways_exist() {
        let pool = parse_pool(&["10.244.1.0/24".into()]).unwrap();
        let alone = Assigner::new(&[], &pool).assign(None, None, "ns/late").bind;
        let mut crowded = Assigner::new(&[], &pool);
        crowded.assign(None, None, "ns/early-1");
        crowded.assign(None, None, "ns/early-2");
        // (Unless an earlier Gateway took its slot: then the next free one.)
        assert_eq!(crowded.assign(None, None, "ns/late").bind, alone);
    }

    #[test]
    fn an_empty_value_is_assigned_from_the_advertised_addresses() {
        let spec = [addr(Some("IPAddress"), None)];
        let a = resolve(Some(&spec), &ips(&["192.0.2.1"]));
        assert_eq!(values(&a), ["192.0.2.1"]);
        assert_eq!(a.not_assigned, None);
        let a = resolve(Some(&spec), &[]);
        assert!(a.not_assigned.is_some());
        assert!(a.status.is_empty());
    }

    #[test]
    fn routability_keeps_what_pier_can_meet_and_echoes_the_sentinel() {
        let spec = [
            addr(None, Some("192.0.2.1")),
            addr(None, Some("192.0.2.2")),
            addr(None, Some("192.0.2.3")),
            addr(None, Some("192.0.2.4")),
        ];
        let routability: Vec<String> = ["", SENTINEL, "Cluster", "example.com/vpc"]
            .map(String::from)
            .to_vec();
        let r = routable(Some(&spec), &routability);
        assert_eq!(r.spec().unwrap().len(), 2);
        assert!(!r.none_met());
        assert_eq!(r.unsatisfied.len(), 2);
        assert!(r.unsatisfied[0].contains("Cluster needs a Service ClusterIP"));
        assert!(r.unsatisfied[1].contains("\"example.com/vpc\" is not one pier can meet"));
        let mut a = resolve(r.spec(), &ips(&["192.0.2.1", "192.0.2.2"]));
        r.apply(&mut a);
        assert_eq!(values(&a), ["192.0.2.1", "192.0.2.2"]);
        let scopes: Vec<&str> = a.status.iter().map(|s| s.routability).collect();
        assert_eq!(scopes, ["", SENTINEL]);
        assert!(a.requested);
        assert_eq!(a.unsatisfied.len(), 2);
        // Only unmeetable entries: nothing for the assigner.
        let r = routable(Some(&spec[2..]), &routability[2..]);
        assert!(r.none_met());
        assert_eq!(r.spec(), None);
        // A sentinel entry without a value: every address given for it says so.
        let r = routable(Some(&[addr(None, None)]), &[SENTINEL.to_string()]);
        let mut a = resolve(r.spec(), &ips(&["192.0.2.9"]));
        r.apply(&mut a);
        assert_eq!(a.status[0].routability, SENTINEL);
        // No routability given (a v1.6 Gateway): as before.
        let r = routable(Some(&spec[..1]), &[]);
        assert_eq!(r.spec().unwrap().len(), 1);
        assert!(r.unsatisfied.is_empty());
    }
}
