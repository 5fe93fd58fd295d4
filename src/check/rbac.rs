//! The RBAC pier needs, as one table ([`RULES`]): `pier check` asks the API server about every
//! verb of it (SelfSubjectAccessReview), and a unit test keeps `config/rbac/` (the ClusterRole
//! and the Lease Role operators apply) equal to it, so the two cannot drift apart. Another
//! test ties the table to what the kube source watches ([`WatchKind`]).
//!
//! "None more": a SelfSubjectRulesReview in pier's namespace lists what the identity may do
//! there (cluster-wide grants included); anything outside the table is a warning.

use std::collections::BTreeSet;

use k8s_openapi::api::authorization::v1::ResourceRule;

use crate::translate::api::{CERTIFICATES_GROUP, CORE_GROUP, GATEWAY_GROUP};
use crate::translate::spiffe::PIER_GROUP;

/// One rule of pier's RBAC.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    pub group: &'static str,
    /// Plural resource names; `x/status` is the status subresource of `x`.
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
    /// `resourceNames`; empty: every object.
    pub names: &'static [&'static str],
    pub scope: Scope,
    pub need: Need,
}

/// Where a rule is granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// ClusterRole `pier`, bound cluster-wide.
    Cluster,
    /// Role `pier-lease`, in the status-writer Lease's namespace (`--lease-namespace`).
    LeaseNamespace,
}

/// What happens without the grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// pier never becomes ready (a watched kind never lists): a failure.
    Read,
    /// Status cannot be written (not checked with `--no-status`): a failure.
    StatusWrite,
    /// pier works with less (the reason): a warning.
    Optional(&'static str),
}

const GATEWAY_KINDS: &[&str] = &[
    "gatewayclasses",
    "gateways",
    "listenersets",
    "httproutes",
    "grpcroutes",
    "tlsroutes",
    "tcproutes",
    "udproutes",
    "referencegrants",
];
const READ: &[&str] = &["get", "list", "watch"];

/// pier's RBAC; `config/rbac/clusterrole.yaml` and `role.yaml` say the same (a test checks).
pub const RULES: &[Rule] = &[
    Rule {
        group: GATEWAY_GROUP,
        resources: GATEWAY_KINDS,
        verbs: READ,
        names: &[],
        scope: Scope::Cluster,
        need: Need::Read,
    },
    Rule {
        group: GATEWAY_GROUP,
        resources: &[
            "gatewayclasses/status",
            "gateways/status",
            "listenersets/status",
            "httproutes/status",
            "grpcroutes/status",
            "tlsroutes/status",
            "tcproutes/status",
            "udproutes/status",
            "backendtlspolicies/status",
        ],
        verbs: &["update", "patch"],
        names: &[],
        scope: Scope::Cluster,
        need: Need::StatusWrite,
    },
    Rule {
        group: CORE_GROUP,
        resources: &["namespaces", "services", "secrets", "configmaps"],
        verbs: READ,
        names: &[],
        scope: Scope::Cluster,
        need: Need::Read,
    },
    Rule {
        group: CORE_GROUP,
        resources: &["pods"],
        verbs: READ,
        names: &[],
        scope: Scope::Cluster,
        need: Need::Optional(
            "endpoints of meshed routes with mesh.identity get no traffic (their Pod's \
             ServiceAccount is unknown)",
        ),
    },
    Rule {
        group: "discovery.k8s.io",
        resources: &["endpointslices"],
        verbs: READ,
        names: &[],
        scope: Scope::Cluster,
        need: Need::Read,
    },
    Rule {
        group: "apiextensions.k8s.io",
        resources: &["customresourcedefinitions"],
        verbs: &["get"],
        names: &[
            "gatewayclasses.gateway.networking.k8s.io",
            "gateways.gateway.networking.k8s.io",
            "httproutes.gateway.networking.k8s.io",
        ],
        scope: Scope::Cluster,
        need: Need::Optional(
            "pier cannot read the installed Gateway API version and assumes it is supported",
        ),
    },
    Rule {
        group: GATEWAY_GROUP,
        resources: &["backendtlspolicies"],
        verbs: READ,
        names: &[],
        scope: Scope::Cluster,
        need: Need::Read,
    },
    Rule {
        group: CERTIFICATES_GROUP,
        resources: &["clustertrustbundles"],
        verbs: READ,
        names: &[],
        scope: Scope::Cluster,
        need: Need::Read,
    },
    // pier's own SecurityPolicy: a read pier cannot do without (a refused watch keeps pier
    // unready rather than serving routes without their access rules).
    Rule {
        group: PIER_GROUP,
        resources: &[
            "securitypolicies",
            "backendtrafficpolicies",
            "clienttrafficpolicies",
        ],
        verbs: READ,
        names: &[],
        scope: Scope::Cluster,
        need: Need::Read,
    },
    Rule {
        group: PIER_GROUP,
        resources: &[
            "securitypolicies/status",
            "backendtrafficpolicies/status",
            "clienttrafficpolicies/status",
        ],
        verbs: &["update", "patch"],
        names: &[],
        scope: Scope::Cluster,
        need: Need::StatusWrite,
    },
    Rule {
        group: crate::translate::api::X_GATEWAY_GROUP,
        resources: &["xbackendtrafficpolicies"],
        verbs: READ,
        names: &[],
        scope: Scope::Cluster,
        need: Need::Read,
    },
    Rule {
        group: crate::translate::api::X_GATEWAY_GROUP,
        resources: &["xbackendtrafficpolicies/status"],
        verbs: &["update", "patch"],
        names: &[],
        scope: Scope::Cluster,
        need: Need::StatusWrite,
    },
    Rule {
        group: "coordination.k8s.io",
        resources: &["leases"],
        verbs: &["get", "create", "update", "patch"],
        names: &[],
        scope: Scope::LeaseNamespace,
        need: Need::StatusWrite,
    },
];

/// One (scope, group, resource, verb, name) a rule grants; name "" for every object.
pub type Grant = (Scope, String, String, String, String);

/// Every grant of `rules`, one per verb and resource name.
pub fn expand(rules: &[Rule]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for r in rules {
        for res in r.resources {
            for verb in r.verbs {
                let names: &[&str] = if r.names.is_empty() { &[""] } else { r.names };
                for name in names {
                    out.insert((
                        r.scope,
                        r.group.to_string(),
                        res.to_string(),
                        verb.to_string(),
                        name.to_string(),
                    ));
                }
            }
        }
    }
    out
}

/// What every authenticated user may do (`system:basic-user`): asking about oneself.
fn is_self_review(group: &str, resource: &str, verb: &str) -> bool {
    verb == "create"
        && matches!(
            (group, resource),
            (
                "authorization.k8s.io",
                "selfsubjectaccessreviews" | "selfsubjectrulesreviews"
            ) | ("authentication.k8s.io", "selfsubjectreviews")
        )
}

/// The grants of `rules` (a SelfSubjectRulesReview's answer) that [`RULES`] does not have,
/// as `verb group/resource[/name]` (sorted, deduplicated). A wildcard is always beyond.
pub fn beyond(rules: &[ResourceRule]) -> Vec<String> {
    let ours = expand(RULES);
    let covered = |group: &str, resource: &str, verb: &str, name: &str| {
        ours.iter().any(|(_, g, r, v, n)| {
            g == group && r == resource && v == verb && (n.is_empty() || n == name)
        })
    };
    let mut out = BTreeSet::new();
    for rule in rules {
        let groups = rule.api_groups.as_deref().unwrap_or_default();
        let resources = rule.resources.as_deref().unwrap_or_default();
        let names: Vec<&str> = match rule.resource_names.as_deref() {
            Some(n) if !n.is_empty() => n.iter().map(String::as_str).collect(),
            _ => vec![""],
        };
        for g in groups {
            for res in resources {
                for verb in &rule.verbs {
                    if is_self_review(g, res, verb) {
                        continue;
                    }
                    for name in &names {
                        if !covered(g, res, verb, name) {
                            let group = if g.is_empty() { "core" } else { g.as_str() };
                            let name = if name.is_empty() {
                                String::new()
                            } else {
                                format!("/{name}")
                            };
                            out.insert(format!("{verb} {group}/{res}{name}"));
                        }
                    }
                }
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::kube::WatchKind;
    use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};

    fn from_yaml(scope: Scope, rules: &[PolicyRule]) -> BTreeSet<Grant> {
        let mut out = BTreeSet::new();
        for r in rules {
            let names = match &r.resource_names {
                Some(n) if !n.is_empty() => n.clone(),
                _ => vec![String::new()],
            };
            for g in r.api_groups.as_deref().unwrap_or_default() {
                for res in r.resources.as_deref().unwrap_or_default() {
                    for v in &r.verbs {
                        for n in &names {
                            out.insert((scope, g.clone(), res.clone(), v.clone(), n.clone()));
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn the_table_is_what_config_rbac_grants() {
        let role: ClusterRole =
            serde_saphyr::from_str(include_str!("../../config/rbac/clusterrole.yaml")).unwrap();
        let lease: Role =
            serde_saphyr::from_str(include_str!("../../config/rbac/role.yaml")).unwrap();
        let mut yaml = from_yaml(Scope::Cluster, role.rules.as_deref().unwrap());
        yaml.extend(from_yaml(
            Scope::LeaseNamespace,
            lease.rules.as_deref().unwrap(),
        ));
        let table = expand(RULES);
        let missing: Vec<_> = table.difference(&yaml).collect();
        let extra: Vec<_> = yaml.difference(&table).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "config/rbac/ lacks {missing:?} and has more: {extra:?}"
        );
    }

    #[test]
    fn every_watched_kind_can_be_listed_and_watched() {
        let table = expand(RULES);
        for kind in WatchKind::ALL {
            let (group, resource) = kind.resource();
            for verb in ["list", "watch"] {
                let g = (
                    Scope::Cluster,
                    group.to_string(),
                    resource.to_string(),
                    verb.to_string(),
                    String::new(),
                );
                assert!(table.contains(&g), "{kind}: no {verb} in RULES");
            }
        }
    }

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> ResourceRule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        ResourceRule {
            api_groups: Some(v(groups)),
            resources: Some(v(resources)),
            verbs: v(verbs),
            resource_names: (!names.is_empty()).then(|| v(names)),
        }
    }

    #[test]
    fn beyond_flags_wildcards_and_writes_but_not_pier_own_grants() {
        let own = [
            rule(
                &[""],
                &["secrets", "services"],
                &["get", "list", "watch"],
                &[],
            ),
            rule(
                &["apiextensions.k8s.io"],
                &["customresourcedefinitions"],
                &["get"],
                &["gateways.gateway.networking.k8s.io"],
            ),
            rule(
                &["authorization.k8s.io"],
                &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                &["create"],
                &[],
            ),
        ];
        assert!(beyond(&own).is_empty(), "{:?}", beyond(&own));
        let more = [
            rule(&["*"], &["*"], &["*"], &[]),
            rule(&[""], &["secrets"], &["create", "get"], &[]),
            rule(
                &["apiextensions.k8s.io"],
                &["customresourcedefinitions"],
                &["get"],
                &[],
            ),
        ];
        assert_eq!(
            beyond(&more),
            [
                "* */*",
                "create core/secrets",
                "get apiextensions.k8s.io/customresourcedefinitions",
            ]
        );
    }
}
