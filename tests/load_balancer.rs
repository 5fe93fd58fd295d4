//! `BackendTrafficPolicy` `loadBalancer` end to end: `pier run` on manifests, one Service with
//! three echo endpoints (127.0.0.2–4, one port); `RoundRobin` takes turns, `Random` reaches
//! them all, `ConsistentHash` keeps a header value, a cookie or the client address on one
//! endpoint (over HTTP/1.1, which hands such rules to hyper's path, and HTTP/2), and a route
//! without a policy still spreads its requests.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use support::web::*;
use support::*;

const NAMES: [&str; 3] = ["a", "b", "c"];

/// Backend name -> requests, over `n` GETs of `path` with `headers` (HTTP/2 every other one).
async fn spread(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
    n: usize,
) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for i in 0..n {
        let r = if i % 2 == 0 {
            get(&format!("http://127.0.0.1:{port}{path}"), headers).await
        } else {
            get_h2(port, path, headers).await
        };
        assert_eq!(r.status, 200, "{r:?}");
        *seen.entry(r.backend()).or_default() += 1;
    }
    seen
}

#[tokio::test]
async fn each_load_balancer_spreads_or_keeps_requests_as_configured() {
    let echo_port = free_port();
    let mut echoes = vec![];
    for (i, name) in NAMES.iter().enumerate() {
        let addr = SocketAddr::from(([127, 0, 0, 2 + i as u8], echo_port));
        echoes.push(pier::echo::spawn(addr, name).await.unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let admin = free_port();
    let mut manifests = format!(
        "{}---\n{}---\n",
        gateway(port),
        service_pool(
            "pool",
            echo_port,
            &["127.0.0.2", "127.0.0.3", "127.0.0.4"],
            None
        )
    );
    for name in ["rr", "random", "header", "cookie", "made", "ip", "plain"] {
        manifests.push_str(&route(name, &format!("/{name}"), "pool"));
        manifests.push_str("---\n");
    }
    for (name, lb) in [
        ("rr", "{type: RoundRobin}"),
        ("random", "{type: Random}"),
        (
            "header",
            "{type: ConsistentHash, consistentHash: {type: Header, header: {name: x-user}}}",
        ),
        (
            "cookie",
            "{type: ConsistentHash, consistentHash: {type: Cookie, cookie: {name: sid}}}",
        ),
        (
            "made",
            "{type: ConsistentHash, consistentHash: {type: Cookie, cookie: {name: lb, ttl: 1h}}}",
        ),
        (
            "ip",
            "{type: ConsistentHash, consistentHash: {type: SourceIP}}",
        ),
    ] {
        manifests.push_str(&route_policy(
            "BackendTrafficPolicy",
            name,
            name,
            &format!("  loadBalancer: {lb}\n"),
        ));
    }
    std::fs::write(dir.path().join("all.yaml"), &manifests).unwrap();
    let _pier = start_pier(dir.path(), admin, &[], &[]).await;

    // RoundRobin: nine requests, three each.
    let rr = spread(port, "/rr", &[], 9).await;
    assert_eq!(
        rr.values().copied().collect::<Vec<_>>(),
        [3, 3, 3],
        "{rr:?}"
    );

    // Random: every endpoint gets some of 60.
    let random = spread(port, "/random", &[], 60).await;
    assert_eq!(random.len(), 3, "{random:?}");

    // ConsistentHash on a header: one user, one endpoint; many users, all endpoints.
    let alice = spread(port, "/header", &[("x-user", "alice")], 12).await;
    assert_eq!(alice.len(), 1, "{alice:?}");
    let mut users = BTreeMap::<String, usize>::new();
    for u in 0..30 {
        let user = format!("user-{u}");
        let one = spread(port, "/header", &[("x-user", &user)], 2).await;
        assert_eq!(one.len(), 1, "{user}: {one:?}");
        *users.entry(one.into_keys().next().unwrap()).or_default() += 1;
    }
    assert_eq!(users.len(), 3, "30 users over three endpoints: {users:?}");

    // ... on a cookie, among others in the header.
    let sid = spread(
        port,
        "/cookie",
        &[("cookie", "theme=dark; sid=s-123; lang=en")],
        12,
    )
    .await;
    assert_eq!(sid.len(), 1, "{sid:?}");

    // ... on a cookie pier makes (cookie.ttl) for a client without one: each new client gets
    // its own value, and its requests with it stay on the endpoint of its first.
    let mut clients = BTreeMap::<String, usize>::new();
    for _ in 0..30 {
        let first = get(&format!("http://127.0.0.1:{port}/made"), &[]).await;
        assert_eq!(first.status, 200, "{first:?}");
        let set = first.headers["set-cookie"].to_str().unwrap().to_string();
        assert!(set.ends_with("; Path=/; Max-Age=3600; HttpOnly"), "{set}");
        let pair = set.split(';').next().unwrap().to_string();
        let again = spread(port, "/made", &[("cookie", &pair)], 4).await;
        assert_eq!(
            again.keys().collect::<Vec<_>>(),
            [&first.backend()],
            "{pair}: {again:?}"
        );
        *clients.entry(first.backend()).or_default() += 1;
    }
    assert_eq!(
        clients.len(),
        3,
        "30 clients over three endpoints: {clients:?}"
    );
    let with = get(
        &format!("http://127.0.0.1:{port}/made"),
        &[("cookie", "lb=x")],
    )
    .await;
    assert!(
        with.headers.get("set-cookie").is_none(),
        "a client with the cookie keeps it"
    );

    // ... on the client address: every request from 127.0.0.1 to one endpoint.
    let ip = spread(port, "/ip", &[], 12).await;
    assert_eq!(ip.len(), 1, "{ip:?}");

    // Without a policy: pier's default still reaches them all.
    let plain = spread(port, "/plain", &[], 60).await;
    assert_eq!(plain.len(), 3, "{plain:?}");
}
