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

use std::net::IpAddr;

use serde::Serialize;

use super::api::GatewayAddresses;

pub const IP_ADDRESS: &str = "IPAddress";

/// One `status.addresses` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StatusAddress {
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub value: String,
}

/// What `spec.addresses` comes to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Addresses {
    pub status: Vec<StatusAddress>,
    /// `Accepted` False, `UnsupportedAddress`.
    pub unsupported: Option<String>,
    /// `Programmed` False, `AddressNotUsable`.
    pub not_usable: Option<String>,
    /// `Programmed` False, `AddressNotAssigned`.
    pub not_assigned: Option<String>,
}

pub fn resolve(spec: Option<&[GatewayAddresses]>, advertised: &[IpAddr]) -> Addresses {
    let all = || {
        advertised
            .iter()
            .map(|ip| StatusAddress {
                type_: IP_ADDRESS,
                value: ip.to_string(),
            })
            .collect::<Vec<_>>()
    };
    let spec = spec.unwrap_or_default();
    if spec.is_empty() {
        return Addresses {
            status: all(),
            ..Addresses::default()
        };
    }
    let mut out = Addresses::default();
    let mut unsupported = vec![];
    let mut not_usable = vec![];
    for a in spec {
        let type_ = a.r#type.as_deref().unwrap_or(IP_ADDRESS);
        if type_ != IP_ADDRESS {
            unsupported.push(format!("{type_} {}", a.value.as_deref().unwrap_or("")));
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
                    let s = StatusAddress {
                        type_: IP_ADDRESS,
                        value: ip.to_string(),
                    };
                    if !out.status.contains(&s) {
                        out.status.push(s);
                    }
                }
                _ => not_usable.push(v.to_string()),
            },
        }
    }
    if !unsupported.is_empty() {
        out.unsupported = Some(format!(
            "pier supports only IPAddress addresses; unsupported: {}",
            unsupported.join(", ")
        ));
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
    fn an_empty_value_is_assigned_from_the_advertised_addresses() {
        let spec = [addr(Some("IPAddress"), None)];
        let a = resolve(Some(&spec), &ips(&["192.0.2.1"]));
        assert_eq!(values(&a), ["192.0.2.1"]);
        assert_eq!(a.not_assigned, None);
        let a = resolve(Some(&spec), &[]);
        assert!(a.not_assigned.is_some());
        assert!(a.status.is_empty());
    }
}
