//! BackendTrafficPolicy: attachment and status, invalid specs, buckets carried across
//! translations, the last valid version kept.

use std::time::{Duration, Instant};

use super::*;
use crate::model::traffic::LimitRequest;
use crate::translate::status::PolicyConditionType as T;
use crate::translate::test_support::{BASE, resources};
use crate::translate::{Settings, Translation, translate_with};

const ROUTES: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - name: read
    matches: [{path: {type: PathPrefix, value: /read}}]
    backendRefs: [{name: svc, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: api, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /api}}]
    backendRefs: [{name: svc, port: 80}]
"#;

const GW: &str = "{group: gateway.networking.k8s.io, kind: Gateway, name: gw}";
const WEB: &str = "{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}";

fn policy(name: &str, target: &str, rules: &str) -> String {
    format!(
        r#"apiVersion: pier.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {{name: {name}, namespace: default, generation: 3, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  targetRefs: [{target}]
  rateLimit:
    local:
      rules:
{rules}
---
"#
    )
}

fn run(more: &str, carried: &Carried) -> Translation {
    let r = resources(&format!("{BASE}\n---\n{ROUTES}\n---\n{more}"));
    translate_with(&r, &Settings::default(), carried, &Default::default())
}

/// The rule of the first listener's entry matching `path`.
fn rule_at<'t>(t: &'t Translation, path: &str) -> &'t std::sync::Arc<crate::model::Rule> {
    let l = &t.snapshot.ports[0].listeners[0];
    let e = (l.routes.entries())
        .find(|e| format!("{:?}", e.matcher).contains(path))
        .unwrap_or_else(|| panic!("no entry for {path}"));
    &e.rule
}

/// The first backend of the rule at `path`.
fn backend_at(t: &Translation, path: &str) -> std::sync::Arc<crate::model::Backend> {
    match &rule_at(t, path).backends.backends[0].target {
        crate::model::BackendTarget::Service(b) => b.clone(),
        crate::model::BackendTarget::Invalid => panic!("no backend at {path}"),
    }
}

fn traffic_of<'t>(t: &'t Translation, path: &str) -> Option<&'t RuleTraffic> {
    rule_at(t, path).traffic.as_deref()
}

fn accepted(t: &Translation, name: &str) -> (bool, String, String) {
    let s = &t.status.backend_traffic_policies[&ObjectRef::new("default", name)];
    let c = (s.ancestors[0].conditions.iter())
        .find(|c| c.type_ == T::Accepted)
        .unwrap();
    (c.status, c.reason.to_string(), c.message.clone())
}

fn take(t: &RuleTraffic, now: Instant) -> bool {
    let headers = http::HeaderMap::new();
    let req = LimitRequest {
        client: "127.0.0.1".parse().unwrap(),
        method: &http::Method::GET,
        path: "/",
        headers: &headers,
    };
    t.take(&req, now).is_ok()
}

const TWO_PER_MINUTE: &str = "      - limit: {requests: 2, unit: Minute}";

#[test]
fn a_gateway_policy_limits_each_route_on_its_own_and_a_rule_without_one_pays_nothing() {
    let t = run(&policy("gp", GW, TWO_PER_MINUTE), &Carried::default());
    assert!(accepted(&t, "gp").0, "{:?}", accepted(&t, "gp"));
    let read = traffic_of(&t, "/read").expect("the Gateway's policy applies to web");
    let api = traffic_of(&t, "/api").expect("and to api");
    assert_eq!(read.policy.source, "default/gp");
    let now = Instant::now();
    assert!(take(read, now) && take(read, now) && !take(read, now));
    // api has buckets of its own (not shared).
    assert!(take(api, now));

    let t = run("", &Carried::default());
    assert!(traffic_of(&t, "/read").is_none());
}

#[test]
fn a_route_policy_overrides_the_gateway_one_and_says_so() {
    let t = run(
        &format!(
            "{}{}",
            policy("gp", GW, TWO_PER_MINUTE),
            policy("rp", WEB, "      - limit: {requests: 100, unit: Second}")
        ),
        &Carried::default(),
    );
    assert_eq!(traffic_of(&t, "/read").unwrap().policy.source, "default/rp");
    assert_eq!(traffic_of(&t, "/api").unwrap().policy.source, "default/gp");
    let s = &t.status.backend_traffic_policies[&ObjectRef::new("default", "gp")];
    assert!(
        s.ancestors[0]
            .conditions
            .iter()
            .any(|c| c.type_ == T::Overridden && c.status),
        "{s:?}"
    );
}

#[test]
fn buckets_survive_a_new_translation_while_the_limit_is_the_same() {
    let p = policy("gp", GW, TWO_PER_MINUTE);
    let first = run(&p, &Carried::default());
    let now = Instant::now();
    let read = traffic_of(&first, "/read").unwrap();
    assert!(take(read, now) && take(read, now));
    // The next translation (any object changed) takes the buckets over: still empty.
    let second = run(&p, &first.snapshot.carried());
    assert!(!take(traffic_of(&second, "/read").unwrap(), now));
    // A new limit starts new buckets.
    let changed = policy("gp", GW, "      - limit: {requests: 3, unit: Minute}");
    let third = run(&changed, &second.snapshot.carried());
    assert!(take(traffic_of(&third, "/read").unwrap(), now));
}

#[test]
fn an_invalid_version_keeps_the_last_valid_one_in_force_and_says_why() {
    let good = run(&policy("gp", GW, TWO_PER_MINUTE), &Carried::default());
    let bad = policy("gp", GW, "      - limit: {requests: 2, unit: Fortnight}");
    let t = run(&bad, &good.snapshot.carried());
    let (ok, reason, message) = accepted(&t, "gp");
    assert!(!ok);
    assert_eq!(reason, "Invalid");
    assert!(
        message.contains("rateLimit.local.rules[0].limit.unit"),
        "{message}"
    );
    assert!(message.contains("last valid version"), "{message}");
    let kept = traffic_of(&t, "/read").expect("the last valid version stays");
    assert_eq!(kept.policy.local[0].limit.requests, 2);

    // Never valid: nothing of it applies, and the status says that too.
    let t = run(&bad, &Carried::default());
    assert!(traffic_of(&t, "/read").is_none());
    assert!(accepted(&t, "gp").2.contains("nothing of this policy"));
}

#[test]
fn invalid_selectors_are_named_in_the_status() {
    for (rules, want) in [
        (
            "      - clientSelectors: [{headers: [{name: x-user, type: Distinct, invert: true}]}]\n        limit: {requests: 1, unit: Second}",
            "clientSelectors[0].headers: x-user: a Distinct header cannot be inverted",
        ),
        (
            "      - clientSelectors: [{sourceCIDR: {value: 10.0.0.0/33}}]\n        limit: {requests: 1, unit: Second}",
            "clientSelectors[0].sourceCIDR.value",
        ),
        (
            "      - clientSelectors: [{headers: [{name: x-a, type: RegularExpression, value: \"(\"}]}]\n        limit: {requests: 1, unit: Second}",
            "clientSelectors[0].headers: x-a",
        ),
        (
            "      - limit: {requests: 0, unit: Second}",
            "limit.requests: must be at least 1",
        ),
        (
            "      - clientSelectors: [{methods: [{value: get}]}]\n        limit: {requests: 1, unit: Second}",
            "methods: \"get\" is not an HTTP method",
        ),
    ] {
        let t = run(&policy("gp", GW, rules), &Carried::default());
        let (ok, reason, message) = accepted(&t, "gp");
        assert!(!ok && reason == "Invalid", "{rules}");
        assert!(message.contains(want), "{message} lacks {want}");
    }
}

#[test]
fn a_missing_target_is_target_not_found() {
    let missing = "{group: gateway.networking.k8s.io, kind: HTTPRoute, name: nope}";
    let t = run(&policy("gp", missing, TWO_PER_MINUTE), &Carried::default());
    let (ok, reason, _) = accepted(&t, "gp");
    assert!(!ok);
    assert_eq!(reason, "TargetNotFound");
}

fn with_service() -> Settings {
    Settings {
        rate_limit_service: Some(Arc::new(RateLimitService::new(
            "127.0.0.1:8081".parse().unwrap(),
            Duration::from_millis(50),
            "pier".into(),
        ))),
        ..Settings::default()
    }
}

const GLOBAL: &str = r#"apiVersion: pier.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: g, namespace: default}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  rateLimit:
    global:
      failClosed: true
      rules:
      - limit: {requests: 10, unit: Minute}
      - clientSelectors: [{headers: [{name: x-user, type: Distinct}], sourceCIDR: {type: Distinct, value: 0.0.0.0/0}}]
        limit: {requests: 2, unit: Second}
        shared: true
"#;

#[test]
fn global_rules_need_the_service_and_write_its_config() {
    let t = run(GLOBAL, &Carried::default());
    let (ok, reason, message) = accepted(&t, "g");
    assert!(!ok && reason == "Invalid", "{message}");
    assert!(message.contains("--rate-limit-service"), "{message}");

    let r = resources(&format!("{BASE}\n---\n{ROUTES}\n---\n{GLOBAL}"));
    let t = translate_with(
        &r,
        &with_service(),
        &Carried::default(),
        &Default::default(),
    );
    assert!(accepted(&t, "g").0);
    let read = traffic_of(&t, "/read").unwrap();
    assert!(read.policy.fail_closed);
    let values = &read.global.as_ref().unwrap().values;
    assert_eq!(&*values[0], "default/g/0/default/web");
    assert_eq!(
        &*values[1], "default/g/1",
        "shared: one value for every Route"
    );
    let config: serde_json::Value =
        serde_json::from_str(&rate_limit_config(&t.snapshot, "pier")).unwrap();
    assert_eq!(
        config,
        serde_json::json!({
            "domain": "pier",
            "descriptors": [
                {"key": "pier.dev/rule", "value": "default/g/0/default/api",
                 "rate_limit": {"unit": "minute", "requests_per_unit": 10}},
                {"key": "pier.dev/rule", "value": "default/g/0/default/web",
                 "rate_limit": {"unit": "minute", "requests_per_unit": 10}},
                {"key": "pier.dev/rule", "value": "default/g/1",
                 "descriptors": [{"key": "client",
                   "descriptors": [{"key": "header:x-user",
                     "rate_limit": {"unit": "second", "requests_per_unit": 2}}]}]},
            ]
        })
    );
}

fn compressing(name: &str, target: &str, compressor: &str) -> String {
    format!(
        r#"apiVersion: pier.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {{name: {name}, namespace: default, generation: 1, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  targetRefs: [{target}]
{compressor}
---
"#
    )
}

#[test]
fn a_compressor_reaches_the_rule_and_sends_it_to_hypers_path() {
    let t = run(
        &compressing(
            "cp",
            WEB,
            "  compressor:\n  - type: Brotli\n  - {type: Gzip, gzip: {}, minContentLength: 1Ki}",
        ),
        &Carried::default(),
    );
    assert!(accepted(&t, "cp").0, "{:?}", accepted(&t, "cp"));
    let read = traffic_of(&t, "/read").expect("the policy applies to web");
    assert!(read.local.is_empty() && read.global.is_none());
    assert!(read.needs_hyper(), "compression is done on hyper's path");
    let c = read.policy.compression.as_ref().unwrap();
    let got: Vec<_> = c
        .compressors
        .iter()
        .map(|c| (c.encoding, c.min_content_length))
        .collect();
    assert_eq!(got, [(Encoding::Brotli, 30), (Encoding::Gzip, 1024)]);
    assert!(
        traffic_of(&t, "/api").is_none(),
        "a route without it pays nothing"
    );

    // Envoy Gateway's older field name reads the same.
    let t = run(
        &compressing("cp", WEB, "  compression:\n  - type: Zstd"),
        &Carried::default(),
    );
    let read = traffic_of(&t, "/read").unwrap();
    let c = read.policy.compression.as_ref().unwrap();
    assert_eq!(c.compressors[0].encoding, Encoding::Zstd);
}

#[test]
fn invalid_compressors_are_named_in_the_status() {
    for (spec, want) in [
        (
            "  compressor:\n  - type: Deflate",
            "compressor[0].type: \"Deflate\" is not one of Gzip, Brotli, Zstd",
        ),
        (
            "  compressor:\n  - type: Gzip\n  - type: Gzip",
            "compressor[1].type: Gzip is listed twice",
        ),
        (
            "  compressor:\n  - {type: Gzip, brotli: {}}",
            "compressor[0].brotli: settings for another type than Gzip",
        ),
        (
            "  compressor:\n  - {type: Gzip, minContentLength: 1Qi}",
            "compressor[0].minContentLength: \"1Qi\" is not a quantity",
        ),
        (
            "  compressor:\n  - type: Gzip\n  compression:\n  - type: Brotli",
            "compressor and compression (its older name) are both given",
        ),
    ] {
        let t = run(&compressing("cp", WEB, spec), &Carried::default());
        let (ok, reason, message) = accepted(&t, "cp");
        assert!(!ok && reason == "Invalid", "{spec}");
        assert!(message.contains(want), "{message} lacks {want}");
    }
}

#[test]
fn quantities_of_bytes() {
    for (q, want) in [
        ("0", 0),
        ("30", 30),
        ("1Ki", 1024),
        ("1.5Ki", 1536),
        ("2k", 2000),
        ("1Mi", 1 << 20),
        ("0.5", 1),
        ("1Gi", 1 << 30),
    ] {
        assert_eq!(quantity(q), Ok(want), "{q}");
    }
    for bad in [
        "",
        "Ki",
        "-1",
        "1e3",
        "1 Ki",
        "1.2.3",
        "1KB",
        ".",
        "99999999999999999999",
    ] {
        assert!(quantity(bad).is_err(), "{bad}");
    }
}

#[test]
fn fault_injection_is_read_and_its_mistakes_named() {
    let t = run(
        &compressing(
            "faults",
            WEB,
            "  faultInjection:\n    delay: {fixedDelay: 250ms, percentage: 12.5}\n    abort: {grpcStatus: 14}",
        ),
        &Carried::default(),
    );
    assert!(accepted(&t, "faults").0, "{:?}", accepted(&t, "faults"));
    let read = traffic_of(&t, "/read").unwrap();
    let f = read.policy.faults.as_ref().unwrap();
    let delay = f.delay.as_ref().unwrap();
    assert_eq!(
        (delay.delay, delay.share),
        (Duration::from_millis(250), Share(125_000))
    );
    let abort = f.abort.as_ref().unwrap();
    assert_eq!(
        (abort.abort, abort.share),
        (Abort::Grpc(14), Share(Share::ALL))
    );
    assert!(read.needs_hyper(), "a delay waits on hyper's path");
    // An abort alone is decided on both paths.
    let t = run(
        &compressing(
            "faults",
            WEB,
            "  faultInjection:\n    abort: {httpStatus: 503, percentage: 0}",
        ),
        &Carried::default(),
    );
    let read = traffic_of(&t, "/read").unwrap();
    assert!(!read.needs_hyper());
    let abort = read.policy.faults.as_ref().unwrap().abort.as_ref().unwrap();
    assert_eq!((abort.abort, abort.share), (Abort::Http(503), Share(0)));

    for (spec, want) in [
        (
            "  faultInjection: {}",
            "faultInjection: neither delay nor abort is given",
        ),
        (
            "  faultInjection:\n    delay: {fixedDelay: soon}",
            "faultInjection.delay.fixedDelay: \"soon\" is not a duration",
        ),
        (
            "  faultInjection:\n    delay: {fixedDelay: 2h}",
            "faultInjection.delay.fixedDelay: \"2h\"",
        ),
        (
            "  faultInjection:\n    delay: {fixedDelay: 1s, percentage: 150}",
            "faultInjection.delay.percentage: 150 is not from 0 to 100",
        ),
        (
            "  faultInjection:\n    abort: {httpStatus: 99}",
            "faultInjection.abort.httpStatus: 99 is not from 200 to 599",
        ),
        (
            "  faultInjection:\n    abort: {grpcStatus: 17}",
            "faultInjection.abort.grpcStatus: 17 is not from 0 to 16",
        ),
        (
            "  faultInjection:\n    abort: {httpStatus: 503, grpcStatus: 14}",
            "httpStatus and grpcStatus are both given",
        ),
        (
            "  faultInjection:\n    abort: {percentage: 10}",
            "httpStatus or grpcStatus: neither is given",
        ),
    ] {
        let t = run(&compressing("faults", WEB, spec), &Carried::default());
        let (ok, reason, message) = accepted(&t, "faults");
        assert!(!ok && reason == "Invalid", "{spec}");
        assert!(message.contains(want), "{message} lacks {want}");
    }
}

#[test]
fn a_request_timeout_is_the_default_of_rules_without_their_own() {
    let own = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: own, namespace: default}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /own}}]
    timeouts: {request: 3s}
    backendRefs: [{name: svc, port: 80}]
---
"#;
    let gateway_wide = compressing("t", GW, "  timeout:\n    http: {requestTimeout: 750ms}");
    let t = run(&format!("{own}{gateway_wide}"), &Carried::default());
    assert!(accepted(&t, "t").0, "{:?}", accepted(&t, "t"));
    let rule_of = |path: &str| rule_at(&t, path).clone();
    assert_eq!(
        rule_of("/read").timeouts.request,
        Some(Duration::from_millis(750))
    );
    assert_eq!(
        rule_of("/own").timeouts.request,
        Some(Duration::from_secs(3)),
        "the Route's own wins"
    );
    // Only a timeout: nothing to do per request.
    assert!(rule_of("/read").traffic.is_none());

    let t = run(
        &compressing("t", GW, "  timeout:\n    http: {requestTimeout: 0s}"),
        &Carried::default(),
    );
    let (ok, reason, message) = accepted(&t, "t");
    assert!(!ok && reason == "Invalid");
    assert!(
        message.contains("timeout.http.requestTimeout: \"0s\""),
        "{message}"
    );
}

#[test]
fn load_balancer_types_and_their_mistakes() {
    let lb = |spec: &str| run(&compressing("lb", WEB, spec), &Carried::default());
    let t = lb("  loadBalancer: {type: RoundRobin}");
    let read = traffic_of(&t, "/read").unwrap();
    assert!(matches!(read.policy.balance, Some(Balance::RoundRobin)));
    assert!(read.needs_hyper());
    let t = lb(
        "  loadBalancer:\n    type: ConsistentHash\n    consistentHash: {type: Header, header: {name: X-User}}",
    );
    let read = traffic_of(&t, "/read").unwrap();
    assert!(
        matches!(&read.policy.balance, Some(Balance::Hash(HashOn::Header(h))) if h == "x-user")
    );
    // LeastRequest is pier's default: nothing to do per request.
    let t = lb("  loadBalancer: {type: LeastRequest}");
    assert!(accepted(&t, "lb").0);
    assert!(traffic_of(&t, "/read").is_none());

    for (spec, want) in [
        (
            "  loadBalancer: {type: Sticky}",
            "loadBalancer.type: \"Sticky\" is not one of",
        ),
        (
            "  loadBalancer: {type: ConsistentHash}",
            "loadBalancer.consistentHash.type: ConsistentHash needs consistentHash",
        ),
        (
            "  loadBalancer:\n    type: RoundRobin\n    consistentHash: {type: SourceIP}",
            "loadBalancer.consistentHash: given for type RoundRobin",
        ),
        (
            "  loadBalancer:\n    type: ConsistentHash\n    consistentHash: {type: Header}",
            "loadBalancer.consistentHash.header: missing for type Header",
        ),
        (
            "  loadBalancer:\n    type: ConsistentHash\n    consistentHash: {type: Cookie, cookie: {name: \"a;b\"}}",
            "loadBalancer.consistentHash.cookie.name: \"a;b\"",
        ),
        (
            "  loadBalancer:\n    type: ConsistentHash\n    consistentHash: {type: Query}",
            "loadBalancer.consistentHash.type: \"Query\"",
        ),
        (
            "  loadBalancer:\n    type: ConsistentHash\n    consistentHash: {type: Cookie, cookie: {name: lb, ttl: 500ms}}",
            "loadBalancer.consistentHash.cookie.ttl: \"500ms\" is not a duration of a second or more",
        ),
    ] {
        let t = lb(spec);
        let (ok, reason, message) = accepted(&t, "lb");
        assert!(!ok && reason == "Invalid", "{spec}");
        assert!(message.contains(want), "{message} lacks {want}");
    }
}

#[test]
fn active_health_checks_reach_the_rules_with_defaults_and_their_mistakes_named() {
    use crate::model::health::{ActiveCheck, Probe};
    let hc = |spec: &str| run(&compressing("hc", WEB, spec), &Carried::default());
    let check_of = |t: &Translation| rule_at(t, "/read").health.clone();
    let t = hc("  healthCheck:\n    active: {type: HTTP, http: {path: /healthz}}");
    assert!(accepted(&t, "hc").0);
    let check = check_of(&t).expect("the rule carries the check");
    assert_eq!(
        *check,
        ActiveCheck {
            probe: Probe::Http {
                path: "/healthz".into(),
                host: None,
                head: false,
                expected: [200].into(),
                body: None,
            },
            interval: ActiveCheck::INTERVAL,
            timeout: ActiveCheck::TIMEOUT,
            unhealthy_threshold: 3,
            healthy_threshold: 1,
            source: "default/hc".into(),
        }
    );
    // Nothing per request: no RuleTraffic for a policy that only checks.
    assert!(traffic_of(&t, "/read").is_none());
    let t = hc(
        "  healthCheck:\n    active:\n      type: GRPC\n      interval: 500ms\n      \
         unhealthyThreshold: 2\n      grpc: {service: shop.Cart}",
    );
    let check = check_of(&t).unwrap();
    assert_eq!(
        check.probe,
        Probe::Grpc {
            service: "shop.Cart".into()
        }
    );
    assert_eq!(
        (check.interval, check.unhealthy_threshold),
        (Duration::from_millis(500), 2)
    );
    assert!(check_of(&hc("  healthCheck:\n    active: {type: TCP}")).is_some());
    let t = hc(
        "  healthCheck:\n    active:\n      type: HTTP\n      http:\n        path: /h\n        \
         expectedResponse: {type: Binary, binary: b2s=}",
    );
    assert!(
        matches!(&check_of(&t).unwrap().probe, Probe::Http { body: Some(b), .. } if &b[..] == b"ok")
    );
    // A rule without the policy has no check.
    assert!(check_of(&run("", &Carried::default())).is_none());

    for (spec, want) in [
        (
            "  healthCheck: {}",
            "healthCheck: neither active nor passive is given",
        ),
        (
            "  healthCheck:\n    active: {type: UDP}",
            "healthCheck.active.type: \"UDP\" is not HTTP, TCP or GRPC",
        ),
        (
            "  healthCheck:\n    active: {type: HTTP}",
            "healthCheck.active.http: type HTTP needs http.path",
        ),
        (
            "  healthCheck:\n    active: {type: HTTP, http: {path: healthz}}",
            "healthCheck.active.http.path: \"healthz\" is not a path",
        ),
        (
            "  healthCheck:\n    active: {type: HTTP, http: {path: /h, method: POST}}",
            "healthCheck.active.http.method: \"POST\" is not GET or HEAD",
        ),
        (
            "  healthCheck:\n    active: {type: HTTP, http: {path: /h, expectedStatuses: [99]}}",
            "healthCheck.active.http.expectedStatuses: 99 is not a status",
        ),
        (
            "  healthCheck:\n    active: {type: TCP, interval: 0s}",
            "healthCheck.active.interval: \"0s\" is not a duration",
        ),
        (
            "  healthCheck:\n    active: {type: TCP, unhealthyThreshold: 0}",
            "healthCheck.active.unhealthyThreshold: must be at least 1",
        ),
        (
            "  healthCheck:\n    active: {type: TCP, http: {path: /h}}",
            "healthCheck.active.http: given for type TCP",
        ),
        (
            "  healthCheck:\n    active: {type: HTTP, http: {path: /h, expectedResponse: {type: Text}}}",
            "http.expectedResponse: give type Text with text",
        ),
        (
            "  healthCheck:\n    active: {type: HTTP, http: {path: /h, method: HEAD, expectedResponse: {type: Text, text: ok}}}",
            "asked of a HEAD check",
        ),
    ] {
        let t = hc(spec);
        let (ok, reason, message) = accepted(&t, "hc");
        assert!(!ok && reason == "Invalid", "{spec}");
        assert!(message.contains(want), "{message} lacks {want}");
    }
}

#[test]
fn passive_health_checks_set_the_outlier_detection_of_the_rules_backends() {
    use crate::model::OutlierOverride;
    let hc = |spec: &str| run(&compressing("hc", WEB, spec), &Carried::default());
    let outlier_of = |t: &Translation| backend_at(t, "/read").outlier;
    let t = hc("  healthCheck:\n    passive: {}");
    assert!(accepted(&t, "hc").0);
    assert_eq!(
        outlier_of(&t),
        OutlierOverride {
            consecutive_failures: Some(5),
            ejection: Some(Duration::from_secs(30)),
            any_5xx: Some(true),
            ..Default::default()
        },
        "Envoy Gateway's defaults"
    );
    assert!(traffic_of(&t, "/read").is_none(), "nothing per request");
    let t = hc("  healthCheck:\n    passive: {consecutiveGatewayErrors: 3, baseEjectionTime: 10s}");
    assert_eq!(
        outlier_of(&t),
        OutlierOverride {
            consecutive_failures: Some(3),
            ejection: Some(Duration::from_secs(10)),
            any_5xx: Some(false),
            ..Default::default()
        }
    );
    let t = hc("  healthCheck:\n    passive: {interval: 2s, maxEjectionPercent: 50}");
    assert_eq!(
        (outlier_of(&t).interval, outlier_of(&t).max_ejection_percent),
        (Some(Duration::from_secs(2)), Some(50))
    );
    assert!(outlier_of(&run("", &Carried::default())).is_none());
    for (spec, want) in [
        (
            "  healthCheck:\n    passive: {maxEjectionPercent: 101}",
            "healthCheck.passive.maxEjectionPercent: 101 is not a percentage",
        ),
        (
            "  healthCheck:\n    passive: {interval: 0s}",
            "healthCheck.passive.interval: \"0s\" is not a duration from 1ms to 1h",
        ),
        (
            "  healthCheck:\n    passive: {consecutive5XxErrors: 2, consecutiveGatewayErrors: 2}",
            "give consecutive5XxErrors or consecutiveGatewayErrors",
        ),
        (
            "  healthCheck:\n    passive: {baseEjectionTime: forever}",
            "healthCheck.passive.baseEjectionTime: \"forever\"",
        ),
    ] {
        let t = hc(spec);
        let (ok, reason, message) = accepted(&t, "hc");
        assert!(!ok && reason == "Invalid", "{spec}");
        assert!(message.contains(want), "{message} lacks {want}");
    }
}

#[test]
fn circuit_breakers_and_connect_timeouts_reach_the_rules_backends() {
    let p = |spec: &str| run(&compressing("cb", WEB, spec), &Carried::default());
    let backend_of = |t: &Translation| backend_at(t, "/read");
    let t = p(
        "  circuitBreaker: {maxParallelRequests: 10, maxPendingRequests: 0, maxConnections: 4, \
         maxParallelRetries: 2}\n  timeout:\n    tcp: {connectTimeout: 250ms}",
    );
    assert!(accepted(&t, "cb").0);
    let b = backend_of(&t);
    assert_eq!(
        (b.max_requests, b.max_pending, b.connect_timeout),
        (Some(10), Some(0), Some(Duration::from_millis(250)))
    );
    assert_eq!((b.max_connections, b.max_retries), (Some(4), Some(2)));
    assert!(traffic_of(&t, "/read").is_none(), "nothing per request");
    let plain = backend_of(&run("", &Carried::default()));
    assert_eq!(
        (plain.max_requests, plain.max_pending, plain.connect_timeout),
        (None, None, None)
    );
    // The copy shares the load state with the Service's backend of another route (`/api`,
    // no policy): the maximum counts every route's requests.
    let api = backend_at(&t, "/api");
    assert_eq!(api.max_requests, None);
    assert!(std::sync::Arc::ptr_eq(&b.load, &api.load));
    for (spec, want) in [
        (
            "  circuitBreaker: {maxParallelRequests: 0}",
            "circuitBreaker.maxParallelRequests: must be at least 1",
        ),
        (
            "  circuitBreaker: {maxConnections: 0}",
            "circuitBreaker.maxConnections: must be at least 1",
        ),
        (
            "  timeout:\n    tcp: {connectTimeout: 1h}",
            "timeout.tcp.connectTimeout: \"1h\" is not a duration from 1ms to 5m",
        ),
    ] {
        let t = p(spec);
        let (ok, reason, message) = accepted(&t, "cb");
        assert!(!ok && reason == "Invalid", "{spec}");
        assert!(message.contains(want), "{message} lacks {want}");
    }
}

#[test]
fn a_request_buffer_is_a_limit_the_rules_requests_carry() {
    let p = |spec: &str| run(&compressing("rb", WEB, spec), &Carried::default());
    let t = p("  requestBuffer: {limit: 4Mi}");
    assert!(accepted(&t, "rb").0);
    let traffic = traffic_of(&t, "/read").expect("a limit per request");
    assert_eq!(traffic.policy.request_buffer, Some(4 << 20));
    assert!(
        !traffic.needs_hyper(),
        "the fast path checks the length itself"
    );
    assert!(
        traffic_of(&t, "/api").is_none(),
        "another route is not limited"
    );
    let t = p("  requestBuffer: {limit: 1024}");
    assert_eq!(
        traffic_of(&t, "/read").unwrap().policy.request_buffer,
        Some(1024)
    );
    for (spec, want) in [
        (
            "  requestBuffer: {limit: 65Mi}",
            "requestBuffer.limit: 68157440 bytes is not from 1 byte to 64Mi",
        ),
        (
            "  requestBuffer: {limit: 0}",
            "requestBuffer.limit: 0 bytes",
        ),
        (
            "  requestBuffer: {limit: lots}",
            "requestBuffer.limit: \"lots\" is not a quantity of bytes",
        ),
    ] {
        let t = p(spec);
        let (ok, reason, message) = accepted(&t, "rb");
        assert!(!ok && reason == "Invalid", "{spec}");
        assert!(message.contains(want), "{message} lacks {want}");
    }
}
