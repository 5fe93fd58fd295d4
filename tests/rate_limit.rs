//! `BackendTrafficPolicy` local rate limits end to end: `pier run` on manifests; HTTP/1.1 (the
//! fast path) and HTTP/2 (hyper's path) draw on the same buckets; over the limit: 429 with
//! `retry-after` and the `x-ratelimit-*` headers, gRPC status 8; Distinct buckets per header
//! value; a reload keeps the counts; `/status` and `/metrics` report the policy.

mod support;

use std::time::Duration;

use support::cluster::sample;
use support::web::*;
use support::*;

fn policy(name: &str, route: &str, rules: &str) -> String {
    route_policy(
        "BackendTrafficPolicy",
        name,
        route,
        &format!("  rateLimit:\n    local:\n      rules:\n{rules}"),
    )
}

#[tokio::test]
async fn local_limits_refuse_with_429_on_both_request_paths_and_survive_a_reload() {
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let admin = free_port();
    let mut manifests = format!("{}---\n{}---\n", gateway(port), service("a", echo.addr));
    for (name, prefix) in [
        ("limited", "/limited"),
        ("per-user", "/per-user"),
        ("plain", "/plain"),
    ] {
        manifests.push_str(&route(name, prefix, "a"));
        manifests.push_str("---\n");
    }
    // A minute's limits: the test's requests all fall in the first second's burst.
    manifests.push_str(&policy(
        "five",
        "limited",
        "      - limit: {requests: 5, unit: Minute}\n",
    ));
    manifests.push_str(&policy(
        "users",
        "per-user",
        "      - clientSelectors: [{headers: [{name: x-user, type: Distinct}]}]\n        \
         limit: {requests: 2, unit: Minute}\n",
    ));
    std::fs::write(dir.path().join("all.yaml"), &manifests).unwrap();
    let _pier = start_pier(dir.path(), admin, &[], &[]).await;
    let base = format!("http://127.0.0.1:{port}");

    // Three over HTTP/1.1 and two over HTTP/2 use up the same five.
    for i in 0..3 {
        assert_eq!(
            get(&format!("{base}/limited"), &[]).await.status,
            200,
            "h1 {i}"
        );
    }
    for i in 0..2 {
        assert_eq!(get_h2(port, "/limited", &[]).await.status, 200, "h2 {i}");
    }
    let refused = get(&format!("{base}/limited"), &[]).await;
    assert_eq!(refused.status, 429, "{refused:?}");
    let h = |name: &str| {
        refused
            .headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name}: {refused:?}"))
            .to_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(h("x-ratelimit-limit"), "5, 5;w=60");
    assert_eq!(h("x-ratelimit-remaining"), "0");
    // One request every 12 s comes back; the bucket is full again within the minute.
    let retry: u64 = h("retry-after").parse().unwrap();
    assert!((11..=12).contains(&retry), "retry-after {retry}");
    let reset: u64 = h("x-ratelimit-reset").parse().unwrap();
    assert!((59..=60).contains(&reset), "reset {reset}");
    assert_eq!(get_h2(port, "/limited", &[]).await.status, 429);
    // A gRPC client gets RESOURCE_EXHAUSTED (8) in a Trailers-Only answer.
    let grpc = get_h2(port, "/limited", &[("content-type", "application/grpc")]).await;
    assert_eq!(grpc.status, 200);
    assert_eq!(grpc.headers["grpc-status"], "8", "{grpc:?}");
    // A route without a policy is not limited.
    for _ in 0..20 {
        assert_eq!(get(&format!("{base}/plain"), &[]).await.status, 200);
    }

    // Distinct: two per user; a request without the header is not counted.
    for user in ["alice", "bob"] {
        let hdr = [("x-user", user)];
        assert_eq!(get(&format!("{base}/per-user"), &hdr).await.status, 200);
        assert_eq!(get_h2(port, "/per-user", &hdr).await.status, 200);
        assert_eq!(get(&format!("{base}/per-user"), &hdr).await.status, 429);
    }
    for _ in 0..5 {
        assert_eq!(get(&format!("{base}/per-user"), &[]).await.status, 200);
    }

    // A reload for an unrelated change (a new route) keeps the buckets: still refused.
    let more = route("later", "/later", "a");
    write_atomic(&dir.path().join("more.yaml"), &more);
    eventually(Duration::from_secs(10), || async {
        get(&format!("{base}/later"), &[]).await.status == 200
    })
    .await;
    assert_eq!(get(&format!("{base}/limited"), &[]).await.status, 429);
    assert_eq!(
        get(&format!("{base}/per-user"), &[("x-user", "alice")])
            .await
            .status,
        429
    );

    // Every refusal counted, by policy.
    let metrics = get(&format!("http://127.0.0.1:{admin}/metrics"), &[])
        .await
        .text();
    let count = |p: &str| {
        sample(
            &metrics,
            &format!("pier_proxy_rate_limited_total{{policy=\"{p}\"}}"),
        )
    };
    assert_eq!(count("default/five"), 4.0, "{metrics}");
    assert_eq!(count("default/users"), 3.0, "{metrics}");

    let status = get(&format!("http://127.0.0.1:{admin}/status"), &[])
        .await
        .json();
    let five = status
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "BackendTrafficPolicy" && o["metadata"]["name"] == "five")
        .unwrap_or_else(|| panic!("no status: {status}"))
        .clone();
    let accepted = &five["status"]["ancestors"][0]["conditions"][0];
    assert_eq!(accepted["type"], "Accepted");
    assert_eq!(accepted["status"], "True", "{five}");
    assert_eq!(five["status"]["ancestors"][0]["ancestorRef"]["name"], "gw");
}

/// An invalid edit keeps the version in force: the limit still applies, and `/status` says
/// why the edit is not.
#[tokio::test]
async fn an_invalid_edit_keeps_the_limit_in_force() {
    let echo = pier::echo::spawn("127.0.0.1:0".parse().unwrap(), "a")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let admin = free_port();
    let base_manifests = format!(
        "{}---\n{}---\n{}---\n",
        gateway(port),
        service("a", echo.addr),
        route("limited", "/limited", "a")
    );
    std::fs::write(dir.path().join("base.yaml"), &base_manifests).unwrap();
    let good = policy(
        "one",
        "limited",
        "      - limit: {requests: 1, unit: Hour}\n",
    );
    std::fs::write(dir.path().join("policy.yaml"), &good).unwrap();
    let _pier = start_pier(dir.path(), admin, &[], &[]).await;
    let url = format!("http://127.0.0.1:{port}/limited");
    assert_eq!(get(&url, &[]).await.status, 200);
    assert_eq!(get(&url, &[]).await.status, 429);

    let bad = policy(
        "one",
        "limited",
        "      - clientSelectors: [{sourceCIDR: {value: 10.0.0.0/40}}]\n        \
         limit: {requests: 1000, unit: Second}\n",
    );
    write_atomic(&dir.path().join("policy.yaml"), &bad);
    let status_url = format!("http://127.0.0.1:{admin}/status");
    eventually(Duration::from_secs(10), || async {
        get(&status_url, &[])
            .await
            .text()
            .contains("sourceCIDR.value")
    })
    .await;
    let status = get(&status_url, &[]).await.json();
    let one = (status.as_array().unwrap().iter())
        .find(|o| o["kind"] == "BackendTrafficPolicy")
        .unwrap()
        .clone();
    let accepted = &one["status"]["ancestors"][0]["conditions"][0];
    assert_eq!(accepted["status"], "False", "{one}");
    assert_eq!(accepted["reason"], "Invalid");
    assert!(
        accepted["message"]
            .as_str()
            .unwrap()
            .contains("the last valid version of this policy stays in force"),
        "{one}"
    );
    assert_eq!(
        get(&url, &[]).await.status,
        429,
        "the last good limit holds"
    );
}
