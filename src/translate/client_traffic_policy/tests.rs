use super::*;

fn spec(yaml: &str) -> ClientTrafficPolicySpec {
    serde_saphyr::from_str(&format!(
        "targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]\n{yaml}"
    ))
    .unwrap()
}

#[test]
fn connection_limits_and_trusted_proxies_are_read_or_refused() {
    let p = client_policy(
        "ns/p",
        &spec(
            "connection: {connectionLimit: {value: 100}}\n\
             clientIPDetection: {xForwardedFor: {trustedCIDRs: [10.0.0.0/8, '2001:db8::/32']}}",
        ),
    )
    .unwrap();
    assert_eq!(p.connection.connection_limit, Some(100));
    let t = p.connection.trusted_proxies.unwrap();
    assert!(t.trusts("10.1.2.3".parse().unwrap()));
    assert!(!t.trusts("192.0.2.1".parse().unwrap()));

    let refused = |yaml: &str, want: &str| {
        let e = client_policy("ns/p", &spec(yaml)).unwrap_err();
        assert!(e.contains(want), "{yaml}: {e}");
    };
    refused("connection: {connectionLimit: {value: 0}}", "1 or more");
    refused(
        "timeout: {http: {idleTimeout: forever}}",
        "timeout.http.idleTimeout: \"forever\" is not a duration",
    );
    refused(
        "headers: {withUnderscoresAction: Ignore}",
        "\"Ignore\" is not Allow, RejectRequest or DropHeader",
    );
    refused(
        "path: {escapedSlashesAction: UnescapeAndRedirect}",
        "UnescapeAndRedirect is not in this version",
    );
    let p = client_policy(
        "ns/p",
        &spec("path: {escapedSlashesAction: RejectRequest, disableMergeSlashes: false}"),
    )
    .unwrap();
    assert_eq!(p.connection.merge_slashes, Some(true));
    assert_eq!(
        p.connection.escaped_slashes,
        Some(EscapedSlashes::RejectRequest)
    );
    let p = client_policy("ns/p", &spec("timeout: {http: {idleTimeout: 90s}}")).unwrap();
    assert_eq!(
        p.connection.idle_timeout,
        Some(std::time::Duration::from_secs(90))
    );
    let p = client_policy(
        "ns/p",
        &spec("timeout: {http: {requestReceivedTimeout: 10s}}"),
    )
    .unwrap();
    assert_eq!(
        p.connection.request_received,
        Some(std::time::Duration::from_secs(10))
    );
    refused(
        "timeout: {http: {requestReceivedTimeout: 0s}}",
        "timeout.http.requestReceivedTimeout: \"0s\" is not a duration from 1ms to 1h",
    );
    refused(
        "clientIPDetection: {xForwardedFor: {numTrustedHops: 2}}",
        "numTrustedHops: pier believes forwarding headers by the address",
    );
    refused(
        "clientIPDetection: {customHeader: {name: x-real-ip}}",
        "not from a custom header",
    );
    refused(
        "clientIPDetection: {xForwardedFor: {trustedCIDRs: [10.0.0.0/33]}}",
        "\"10.0.0.0/33\"",
    );
}

#[test]
fn a_port_takes_the_smallest_limit_and_trusts_only_what_every_listener_trusts() {
    use crate::model::PortClient;
    use crate::model::net::TrustedProxies;
    // What one listener's policy sets of its connections.
    let policy = |limit: Option<u32>, trusted: Option<&str>| PortClient {
        connection_limit: limit,
        trusted_proxies: trusted.map(|t| std::sync::Arc::new(t.parse::<TrustedProxies>().unwrap())),
        idle_timeout: limit.map(|l| std::time::Duration::from_secs(l.into())),
        request_received: limit.map(|l| std::time::Duration::from_millis(l.into())),
        ..PortClient::default()
    };
    let (a, b) = (
        policy(Some(10), Some("10.0.0.0/8")),
        policy(Some(5), Some("10.0.0.0/8")),
    );
    let port = PortClient::of([Some(&a), Some(&b)]).unwrap();
    assert_eq!(port.connection_limit, Some(5));
    assert_eq!(port.idle_timeout, Some(std::time::Duration::from_secs(5)));
    assert_eq!(
        port.request_received,
        Some(std::time::Duration::from_millis(5))
    );
    assert!(
        port.trusted_proxies
            .unwrap()
            .trusts("10.0.0.1".parse().unwrap())
    );

    // One listener without the policy: it believes `--trusted-proxies`, the other the
    // policy's; they differ, so the port believes nobody.
    let port = PortClient::of([Some(&a), None]).unwrap();
    assert_eq!(port.connection_limit, Some(10));
    assert_eq!(
        port.trusted_proxies.as_deref(),
        Some(&TrustedProxies::default())
    );

    assert_eq!(
        PortClient::of([None, None]),
        None,
        "nothing differs from the flags"
    );

    // Path rules: agreed, they hold; not agreed, the flag merges and escaped slashes are refused.
    let path = |merge: Option<bool>, escaped: Option<EscapedSlashes>| PortClient {
        merge_slashes: merge,
        escaped_slashes: escaped,
        ..policy(None, None)
    };
    let unescape = path(Some(true), Some(EscapedSlashes::UnescapeAndForward));
    let port = PortClient::of([Some(&unescape), Some(&unescape)]).unwrap();
    assert_eq!(
        (port.merge_slashes, port.escaped_slashes),
        (Some(true), Some(EscapedSlashes::UnescapeAndForward))
    );
    let port = PortClient::of([Some(&unescape), None]).unwrap();
    assert_eq!(
        (port.merge_slashes, port.escaped_slashes),
        (None, Some(EscapedSlashes::RejectRequest))
    );

    // Underscores: the strictest; request IDs kept only when every listener keeps them.
    let headers = |u: Underscores, keep: bool| PortClient {
        underscores: Some(u),
        preserve_request_id: keep,
        ..policy(None, None)
    };
    let (drop, reject) = (
        headers(Underscores::DropHeader, true),
        headers(Underscores::RejectRequest, true),
    );
    let port = PortClient::of([Some(&drop), Some(&reject)]).unwrap();
    assert_eq!(port.underscores, Some(Underscores::RejectRequest));
    assert!(port.preserve_request_id);
    let port = PortClient::of([Some(&drop), None]).unwrap();
    assert_eq!(port.underscores, Some(Underscores::DropHeader));
    assert!(!port.preserve_request_id);
    let tls_only = policy(None, None);
    assert_eq!(PortClient::of([Some(&tls_only)]), None);
}

#[test]
fn listeners_that_share_a_port_say_when_the_port_applies_other_settings() {
    use crate::translate::test_support::{gateway, listener, listener_cond, run};
    let t = run(r#"
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pier}
spec: {controllerName: pier.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: pier
  listeners:
    - {name: a, protocol: HTTP, port: 80, hostname: a.example}
    - {name: b, protocol: HTTP, port: 80, hostname: b.example}
    - {name: c, protocol: HTTP, port: 81}
---
apiVersion: pier.dev/v1alpha1
kind: ClientTrafficPolicy
metadata: {name: a, namespace: default}
spec:
  targetRefs:
    - {group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: a}
    - {group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: c}
  connection: {connectionLimit: {value: 10}}
  clientIPDetection: {xForwardedFor: {trustedCIDRs: [10.0.0.0/8]}}
"#);
    let g = gateway(&t, "default", "gw");
    let (_, _, a) = listener_cond(listener(g, "a"), "Accepted");
    assert!(
        a.contains("listeners on port 80 have different ClientTrafficPolicy connection settings")
            && a.contains(r#""trustedProxies":[]"#),
        "{a}"
    );
    let (_, _, b) = listener_cond(listener(g, "b"), "Accepted");
    assert!(
        b.contains(r#"the port applies {"connectionLimit":10"#),
        "{b}"
    );
    let (_, _, c) = listener_cond(listener(g, "c"), "Accepted");
    assert!(
        !c.contains("different ClientTrafficPolicy"),
        "alone on its port: {c}"
    );
}
