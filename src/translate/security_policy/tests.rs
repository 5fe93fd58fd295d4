//! SecurityPolicy attachment: levels, precedence, conflicts, missing targets, invalid specs.

use super::*;
use crate::translate::Translation;
use crate::translate::status::PolicyConditionType as T;
use crate::translate::test_support::run_with_base;

/// HTTPRoutes `web` (rules `read` and `write`) and `api`, both on `gw`, plus `more`.
fn with(more: &str) -> Translation {
    run_with_base(&format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: web, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - name: read
    matches: [{{path: {{type: PathPrefix, value: /read}}}}]
    backendRefs: [{{name: svc, port: 80}}]
  - name: write
    matches: [{{path: {{type: PathPrefix, value: /write}}}}]
    backendRefs: [{{name: svc, port: 80}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: api, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /api}}}}]
    backendRefs: [{{name: svc, port: 80}}]
---
{more}"#
    ))
}

fn policy(name: &str, created: &str, target: &str, cidr: &str) -> String {
    format!(
        r#"apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {{name: {name}, namespace: default, generation: 2, creationTimestamp: "{created}"}}
spec:
  targetRefs: [{target}]
  authorization:
    defaultAction: Deny
    rules: [{{action: Allow, principal: {{clientCIDRs: ["{cidr}"]}}}}]
---
"#
    )
}

const GW: &str = "{group: gateway.networking.k8s.io, kind: Gateway, name: gw}";
const WEB: &str = "{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}";
const WEB_WRITE: &str =
    "{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web, sectionName: write}";

/// The source of the access policy of the rule serving `path`, per listener.
fn policy_of(t: &Translation, path: &str) -> Option<String> {
    let l = &t.snapshot.ports[0].listeners[0];
    let e = l
        .routes
        .entries()
        .find(|e| format!("{:?}", e).contains(path))
        .unwrap_or_else(|| panic!("no entry for {path}"));
    e.rule.access.as_ref().map(|a| {
        assert!(a.invalid.is_none(), "{a:?}");
        a.source.clone()
    })
}

/// `(status, reason)` of a policy condition under its first ancestor.
fn cond(t: &Translation, name: &str, ty: T) -> Option<(bool, String)> {
    let s = &t.status.security_policies[&ObjectRef::new("default", name)];
    s.ancestors[0]
        .conditions
        .iter()
        .find(|c| c.type_ == ty)
        .map(|c| (c.status, c.reason.to_string()))
}

#[test]
fn a_gateway_policy_applies_to_every_rule_of_its_routes() {
    let t = with(&policy("gp", "2026-01-01T00:00:00Z", GW, "10.0.0.0/8"));
    for path in ["/read", "/write", "/api"] {
        assert_eq!(policy_of(&t, path).as_deref(), Some("default/gp"), "{path}");
    }
    assert_eq!(cond(&t, "gp", T::Accepted), Some((true, "Accepted".into())));
    let s = &t.status.security_policies[&ObjectRef::new("default", "gp")];
    assert_eq!(s.ancestors.len(), 1);
    assert_eq!(s.ancestors[0].ancestor_ref.name, "gw");
    assert_eq!(s.generation, Some(2));
    assert_eq!(cond(&t, "gp", T::Overridden), None);
}

#[test]
fn a_rule_beats_its_route_which_beats_the_gateway() {
    let t = with(&format!(
        "{}{}{}",
        policy("gp", "2026-01-01T00:00:00Z", GW, "10.0.0.0/8"),
        policy("rp", "2026-01-02T00:00:00Z", WEB, "10.1.0.0/16"),
        policy("wp", "2026-01-03T00:00:00Z", WEB_WRITE, "10.2.0.0/16"),
    ));
    assert_eq!(policy_of(&t, "/api").as_deref(), Some("default/gp"));
    assert_eq!(policy_of(&t, "/read").as_deref(), Some("default/rp"));
    assert_eq!(policy_of(&t, "/write").as_deref(), Some("default/wp"));
    // The broader ones are overridden under the Gateway, and still accepted.
    assert_eq!(
        cond(&t, "gp", T::Overridden),
        Some((true, "Overridden".into()))
    );
    assert_eq!(
        cond(&t, "rp", T::Overridden),
        Some((true, "Overridden".into()))
    );
    assert_eq!(cond(&t, "wp", T::Overridden), None);
    assert_eq!(cond(&t, "gp", T::Accepted), Some((true, "Accepted".into())));
}

#[test]
fn at_one_target_the_oldest_policy_wins_and_the_other_is_conflicted() {
    let t = with(&format!(
        "{}{}",
        policy("newer", "2026-02-01T00:00:00Z", WEB, "10.1.0.0/16"),
        policy("older", "2026-01-01T00:00:00Z", WEB, "10.2.0.0/16"),
    ));
    assert_eq!(policy_of(&t, "/read").as_deref(), Some("default/older"));
    assert_eq!(
        cond(&t, "older", T::Accepted),
        Some((true, "Accepted".into()))
    );
    assert_eq!(
        cond(&t, "newer", T::Accepted),
        Some((false, "Conflicted".into()))
    );
}

#[test]
fn a_missing_target_is_target_not_found_and_a_wrong_kind_invalid() {
    let t = with(&format!(
        "{}{}",
        policy(
            "lost",
            "2026-01-01T00:00:00Z",
            "{group: gateway.networking.k8s.io, kind: HTTPRoute, name: nowhere}",
            "10.0.0.0/8"
        ),
        policy(
            "svc",
            "2026-01-01T00:00:00Z",
            "{group: '', kind: Service, name: svc}",
            "10.0.0.0/8"
        ),
    ));
    assert_eq!(
        cond(&t, "lost", T::Accepted),
        Some((false, "TargetNotFound".into()))
    );
    assert_eq!(
        cond(&t, "svc", T::Accepted),
        Some((false, "Invalid".into()))
    );
    assert_eq!(policy_of(&t, "/read"), None);
}

#[test]
fn an_invalid_policy_fails_closed_on_its_targets() {
    let t = with(&policy("bad", "2026-01-01T00:00:00Z", WEB, "10.0.0.300/8"));
    let s = &t.status.security_policies[&ObjectRef::new("default", "bad")];
    let accepted = &s.ancestors[0].conditions[0];
    assert!(!accepted.status);
    assert!(
        accepted
            .message
            .contains("authorization.rules[0].principal.clientCIDRs"),
        "{}",
        accepted.message
    );
    // The route's rules still carry it, as a policy that answers 500.
    let l = &t.snapshot.ports[0].listeners[0];
    let read = l
        .routes
        .entries()
        .find(|e| format!("{e:?}").contains("/read"))
        .unwrap();
    assert!(read.rule.access.as_ref().unwrap().invalid.is_some());
}

#[test]
fn a_policy_whose_secret_is_missing_is_invalid() {
    let t = with(
        r#"apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {name: basic, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: api}]
  basicAuth: {users: {name: users}}
"#,
    );
    assert_eq!(
        cond(&t, "basic", T::Accepted),
        Some((false, "Invalid".into()))
    );
}

#[test]
fn a_listener_section_applies_only_to_that_listener() {
    let t = with(&policy(
        "lp",
        "2026-01-01T00:00:00Z",
        "{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: http}",
        "10.0.0.0/8",
    ));
    assert_eq!(policy_of(&t, "/api").as_deref(), Some("default/lp"));
    let s = &t.status.security_policies[&ObjectRef::new("default", "lp")];
    assert_eq!(
        s.ancestors[0].ancestor_ref.section_name.as_deref(),
        Some("http")
    );
    let t = with(&policy(
        "lp",
        "2026-01-01T00:00:00Z",
        "{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: nope}",
        "10.0.0.0/8",
    ));
    assert_eq!(
        cond(&t, "lp", T::Accepted),
        Some((false, "TargetNotFound".into()))
    );
    assert_eq!(policy_of(&t, "/api"), None);
}

#[test]
fn routes_without_policies_share_their_rule() {
    // No policy: the rule added to the table is the compiled one (no copy per listener).
    let t = with("");
    assert!(t.status.security_policies.is_empty());
    assert_eq!(policy_of(&t, "/read"), None);
}

/// A SecurityPolicy of `default` whose API keys are in Secret `vault/keys`, plus `grant`.
fn cross_namespace_keys(grant: &str) -> Translation {
    with(&format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: keys, namespace: vault}}
stringData: {{alice: s3cret}}
---
apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {{name: keys, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: api}}]
  apiKeyAuth:
    credentialRefs: [{{name: keys, namespace: vault}}]
    extractFrom: [{{headers: [x-api-key]}}]
---
{grant}"#
    ))
}

#[test]
fn a_secret_in_another_namespace_needs_a_reference_grant() {
    let t = cross_namespace_keys("");
    assert_eq!(
        cond(&t, "keys", T::Accepted),
        Some((false, "Invalid".into()))
    );
    let s = &t.status.security_policies[&ObjectRef::new("default", "keys")];
    let message = &s.ancestors[0].conditions[0].message;
    assert!(
        message.contains("vault/keys") && message.contains("ReferenceGrant"),
        "{message}"
    );
    assert!(policy_invalid(&t, "/api"));

    // A grant for another kind, or from another namespace, is not enough.
    let wrong = r#"apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: g, namespace: vault}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}]
  to: [{group: "", kind: Secret}]
"#;
    let t = cross_namespace_keys(wrong);
    assert_eq!(
        cond(&t, "keys", T::Accepted),
        Some((false, "Invalid".into()))
    );

    let grant = r#"apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: g, namespace: vault}
spec:
  from: [{group: pier.dev, kind: SecurityPolicy, namespace: default}]
  to: [{group: "", kind: Secret, name: keys}]
"#;
    let t = cross_namespace_keys(grant);
    assert_eq!(
        cond(&t, "keys", T::Accepted),
        Some((true, "Accepted".into()))
    );
    assert!(!policy_invalid(&t, "/api"));
}

/// Whether the access policy of the rule serving `path` is invalid (fails closed).
fn policy_invalid(t: &Translation, path: &str) -> bool {
    let l = &t.snapshot.ports[0].listeners[0];
    let e = l
        .routes
        .entries()
        .find(|e| format!("{e:?}").contains(path))
        .unwrap();
    e.rule.access.as_ref().unwrap().invalid.is_some()
}
