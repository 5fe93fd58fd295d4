//! Per-endpoint workload identity (`mesh.identity`): the name a meshed endpoint's certificate
//! must carry, made from its Pod's ServiceAccount by the mesh's naming scheme.
//!
//! | scheme    | identity (checked in the certificate)                        | SNI sent            |
//! |-----------|--------------------------------------------------------------|---------------------|
//! | `SPIFFE`  | URI SAN `spiffe://<trust domain>/ns/<ns>/sa/<sa>`            | the Service's name  |
//! | `Linkerd` | DNS SAN `<sa>.<ns>.serviceaccount.identity.linkerd.<domain>` | the identity itself |
//!
//! Istio and SPIRE name workloads with SPIFFE IDs; Linkerd's proxies present (and expect as
//! SNI) the DNS-shaped name. Pure: no I/O.

use rustls::pki_types::ServerName;

use super::super::api::MeshIdentitySpec;
use crate::tls::client::SanRequirement;

/// How the mesh names workload identities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdentityScheme {
    Spiffe { trust_domain: String },
    Linkerd { trust_domain: String },
}

/// What one endpoint must present, and the SNI to send it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedIdentity {
    pub san: SanRequirement,
    /// `Some` where the mesh expects the identity as SNI (Linkerd); else the Service's name.
    pub sni: Option<ServerName<'static>>,
}

impl IdentityScheme {
    /// The scheme of a mesh stanza; `Ok(None)` for `None` (chain only). `default_domain` is
    /// pier's cluster domain. Errors name the field and the rule broken.
    pub fn parse(spec: &MeshIdentitySpec, default_domain: &str) -> Result<Option<Self>, String> {
        let domain = spec
            .trust_domain
            .as_deref()
            .unwrap_or(default_domain)
            .trim_end_matches('.')
            .to_string();
        let scheme = match spec.scheme.as_str() {
            "None" => return Ok(None),
            "SPIFFE" => Self::Spiffe {
                trust_domain: domain,
            },
            "Linkerd" => Self::Linkerd {
                trust_domain: domain,
            },
            other => {
                return Err(format!(
                    "mesh identity.scheme {other:?} is not supported (SPIFFE, Linkerd or None)"
                ));
            }
        };
        let td = scheme.trust_domain();
        let valid = match &scheme {
            // SPIFFE: lower-case letters, digits, '.', '-', '_' (the SPIFFE ID standard).
            Self::Spiffe { .. } => {
                !td.is_empty()
                    && td.len() <= 255
                    && td.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b)
                    })
            }
            Self::Linkerd { .. } => {
                matches!(
                    ServerName::try_from(td.to_string()),
                    Ok(ServerName::DnsName(_))
                )
            }
        };
        if !valid {
            return Err(format!(
                "mesh identity.trustDomain {td:?} is not a valid {} trust domain",
                scheme.name()
            ));
        }
        Ok(Some(scheme))
    }

    /// `SPIFFE` or `Linkerd`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Spiffe { .. } => "SPIFFE",
            Self::Linkerd { .. } => "Linkerd",
        }
    }

    fn trust_domain(&self) -> &str {
        match self {
            Self::Spiffe { trust_domain } | Self::Linkerd { trust_domain } => trust_domain,
        }
    }

    /// The identity of ServiceAccount `namespace/service_account`; `None` when it makes no
    /// valid name (Kubernetes names always do; manifests may not).
    pub fn expected(&self, namespace: &str, service_account: &str) -> Option<ExpectedIdentity> {
        let segment_ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        };
        if !segment_ok(namespace) || !segment_ok(service_account) {
            return None;
        }
        match self {
            Self::Spiffe { trust_domain } => Some(ExpectedIdentity {
                san: SanRequirement::Uri(format!(
                    "spiffe://{trust_domain}/ns/{namespace}/sa/{service_account}"
                )),
                sni: None,
            }),
            Self::Linkerd { trust_domain } => {
                let name = format!(
                    "{service_account}.{namespace}.serviceaccount.identity.linkerd.{trust_domain}"
                )
                .to_ascii_lowercase();
                let sni = match ServerName::try_from(name.clone()) {
                    Ok(n @ ServerName::DnsName(_)) => n,
                    _ => return None,
                };
                Some(ExpectedIdentity {
                    san: SanRequirement::Dns(name),
                    sni: Some(sni),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(scheme: &str, td: Option<&str>) -> MeshIdentitySpec {
        MeshIdentitySpec {
            scheme: scheme.into(),
            trust_domain: td.map(Into::into),
        }
    }

    #[test]
    fn spiffe_ids_follow_the_istio_and_spire_shape() {
        let s = IdentityScheme::parse(&spec("SPIFFE", None), "cluster.local")
            .unwrap()
            .unwrap();
        let id = s.expected("shop", "web").unwrap();
        assert_eq!(
            id.san,
            SanRequirement::Uri("spiffe://cluster.local/ns/shop/sa/web".into())
        );
        assert_eq!(id.sni, None);
        let s = IdentityScheme::parse(&spec("SPIFFE", Some("example.org")), "cluster.local")
            .unwrap()
            .unwrap();
        assert_eq!(
            s.expected("a", "b").unwrap().san,
            SanRequirement::Uri("spiffe://example.org/ns/a/sa/b".into())
        );
    }

    #[test]
    fn linkerd_identities_are_dns_names_and_the_sni() {
        let s = IdentityScheme::parse(&spec("Linkerd", None), "cluster.local.")
            .unwrap()
            .unwrap();
        let id = s.expected("shop", "web").unwrap();
        let name = "web.shop.serviceaccount.identity.linkerd.cluster.local";
        assert_eq!(id.san, SanRequirement::Dns(name.into()));
        assert_eq!(id.sni.unwrap().to_str(), name);
    }

    #[test]
    fn none_is_chain_only_and_bad_settings_are_refused() {
        assert_eq!(
            IdentityScheme::parse(&spec("None", None), "cluster.local"),
            Ok(None)
        );
        let err = IdentityScheme::parse(&spec("spiffe", None), "cluster.local").unwrap_err();
        assert!(err.contains("not supported"), "{err}");
        let err = IdentityScheme::parse(&spec("SPIFFE", Some("Bad Domain")), "cluster.local")
            .unwrap_err();
        assert!(err.contains("trustDomain"), "{err}");
        let err = IdentityScheme::parse(&spec("Linkerd", Some("bad..domain")), "x").unwrap_err();
        assert!(err.contains("trustDomain"), "{err}");
    }

    #[test]
    fn names_that_make_no_identity_are_none() {
        let s = IdentityScheme::parse(&spec("SPIFFE", None), "cluster.local")
            .unwrap()
            .unwrap();
        assert_eq!(s.expected("shop", ""), None);
        assert_eq!(s.expected("shop", "a/b"), None);
        let l = IdentityScheme::parse(&spec("Linkerd", None), "cluster.local")
            .unwrap()
            .unwrap();
        assert_eq!(l.expected("shop", &"x".repeat(64)), None);
    }
}
