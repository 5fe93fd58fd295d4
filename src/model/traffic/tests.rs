use std::time::Duration;

use http::HeaderValue;

use super::*;
use crate::model::ObjectRef;

fn per_minute(requests: u64, selectors: Vec<Selector>) -> LimitRule {
    LimitRule {
        selectors,
        limit: Limit {
            requests,
            period: Duration::from_secs(60),
        },
        shared: false,
        key: format!("test|{requests}"),
    }
}

fn traffic(rules: Vec<LimitRule>) -> RuleTraffic {
    let policy = Arc::new(TrafficPolicy {
        source: "default/p".into(),
        local: rules,
        global: vec![],
        fail_closed: false,
        needs_headers: true,
        compression: None,
        faults: None,
        request_timeout: None,
        balance: None,
        health: None,
        request_buffer: None,
        backends: Default::default(),
    });
    policy.for_route(
        &ObjectRef::new("default", "r"),
        None,
        |_, limit, capacity| Arc::new(Buckets::new(limit, capacity)),
    )
}

struct Req {
    client: IpAddr,
    method: Method,
    path: &'static str,
    headers: HeaderMap,
}

impl Req {
    fn new(client: &str) -> Self {
        Self {
            client: client.parse().unwrap(),
            method: Method::GET,
            path: "/",
            headers: HeaderMap::new(),
        }
    }

    fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers
            .append(name, HeaderValue::from_str(value).unwrap());
        self
    }

    fn as_limit(&self) -> LimitRequest<'_> {
        LimitRequest {
            client: self.client,
            method: &self.method,
            path: self.path,
            headers: &self.headers,
        }
    }

    fn take(&self, t: &RuleTraffic, now: Instant) -> Result<(), Box<Limited>> {
        t.take(&self.as_limit(), now)
    }
}

fn admitted(t: &RuleTraffic, req: &Req, now: Instant, n: usize) -> usize {
    (0..n).filter(|_| req.take(t, now).is_ok()).count()
}

#[test]
fn a_rule_without_selectors_counts_every_request_in_one_bucket() {
    let t = traffic(vec![per_minute(3, vec![])]);
    let now = Instant::now();
    assert_eq!(admitted(&t, &Req::new("127.0.0.1"), now, 2), 2);
    assert_eq!(admitted(&t, &Req::new("10.0.0.9"), now, 5), 1);
    let Err(limited) = Req::new("10.0.0.9").take(&t, now) else {
        panic!("admitted over the limit");
    };
    assert_eq!(limited.limit.requests, 3);
    assert_eq!(limited.policy.source, "default/p");
    // One request per 20 s comes back.
    assert_eq!(limited.retry_after, Duration::from_secs(20));
    assert_eq!(limited.reset, Duration::from_secs(60));
}

#[test]
fn distinct_headers_and_addresses_get_a_bucket_each_and_a_missing_header_is_not_counted() {
    let t = traffic(vec![per_minute(
        2,
        vec![Selector {
            headers: vec![HeaderSelect::Distinct(HeaderName::from_static("x-user"))],
            ..Selector::default()
        }],
    )]);
    let now = Instant::now();
    let alice = Req::new("127.0.0.1").header("x-user", "alice");
    let bob = Req::new("127.0.0.1").header("x-user", "bob");
    assert_eq!(admitted(&t, &alice, now, 5), 2);
    assert_eq!(admitted(&t, &bob, now, 5), 2);
    // Without the header the rule does not apply.
    assert_eq!(admitted(&t, &Req::new("127.0.0.1"), now, 10), 10);

    let t = traffic(vec![per_minute(
        1,
        vec![Selector {
            source: Some(SourceSelect {
                cidr: "10.0.0.0/8".parse().unwrap(),
                distinct: true,
            }),
            ..Selector::default()
        }],
    )]);
    assert_eq!(admitted(&t, &Req::new("10.0.0.1"), now, 3), 1);
    assert_eq!(admitted(&t, &Req::new("10.0.0.2"), now, 3), 1);
    // An IPv4-mapped IPv6 client is the IPv4 one.
    assert_eq!(admitted(&t, &Req::new("::ffff:10.0.0.2"), now, 3), 0);
    // Outside the CIDR: not limited.
    assert_eq!(admitted(&t, &Req::new("192.168.0.1"), now, 3), 3);
}

#[test]
fn exact_regex_inverted_method_and_path_selectors_choose_what_counts() {
    let t = traffic(vec![per_minute(
        1,
        vec![Selector {
            headers: vec![
                HeaderSelect::Match {
                    name: HeaderName::from_static("x-plan"),
                    value: ValueMatch::Exact("free".into()),
                    invert: false,
                },
                HeaderSelect::Match {
                    name: HeaderName::from_static("x-agent"),
                    value: ValueMatch::regex("bot-.*").unwrap(),
                    invert: true,
                },
            ],
            methods: vec![(Method::GET, false), (Method::POST, false)],
            path: Some(PathSelect {
                path: PathMatch::prefix("/api").unwrap(),
                invert: false,
            }),
            ..Selector::default()
        }],
    )]);
    let now = Instant::now();
    let mut free = Req::new("127.0.0.1").header("x-plan", "free");
    free.path = "/api/x";
    assert_eq!(admitted(&t, &free, now, 3), 1);
    // Each part that does not match takes the request out of the rule.
    let mut paid = Req::new("127.0.0.1").header("x-plan", "paid");
    paid.path = "/api/x";
    assert_eq!(admitted(&t, &paid, now, 3), 3);
    let mut bot = Req::new("127.0.0.1")
        .header("x-plan", "free")
        .header("x-agent", "bot-1");
    bot.path = "/api/x";
    assert_eq!(admitted(&t, &bot, now, 3), 3);
    let mut delete = Req::new("127.0.0.1").header("x-plan", "free");
    delete.path = "/api/x";
    delete.method = Method::DELETE;
    assert_eq!(admitted(&t, &delete, now, 3), 3);
    let mut elsewhere = Req::new("127.0.0.1").header("x-plan", "free");
    elsewhere.path = "/apix";
    assert_eq!(admitted(&t, &elsewhere, now, 3), 3);

    // An inverted method: everything but it.
    let t = traffic(vec![per_minute(
        1,
        vec![Selector {
            methods: vec![(Method::OPTIONS, true)],
            ..Selector::default()
        }],
    )]);
    let mut options = Req::new("127.0.0.1");
    options.method = Method::OPTIONS;
    assert_eq!(admitted(&t, &options, now, 3), 3);
    assert_eq!(admitted(&t, &Req::new("127.0.0.1"), now, 3), 1);
}

#[test]
fn the_first_rule_over_its_limit_refuses_and_later_rules_are_not_charged() {
    let t = traffic(vec![per_minute(1, vec![]), per_minute(5, vec![])]);
    let now = Instant::now();
    let req = Req::new("127.0.0.1");
    assert!(req.take(&t, now).is_ok());
    for _ in 0..10 {
        assert_eq!(req.take(&t, now).unwrap_err().limit.requests, 1);
    }
    // The second rule's bucket took one request only.
    let (_, second) = &t.local[1];
    assert!(matches!(
        second.take(second.hasher().finish(), now),
        Decision::Admit { remaining: 3, .. }
    ));
}

#[test]
fn spoofed_distinct_values_cannot_grow_a_table_past_its_capacity() {
    let t = traffic(vec![per_minute(
        1,
        vec![Selector {
            headers: vec![HeaderSelect::Distinct(HeaderName::from_static("x-user"))],
            ..Selector::default()
        }],
    )]);
    let now = Instant::now();
    for i in 0..(DISTINCT_KEYS + DISTINCT_KEYS / 2) {
        let req = Req::new("127.0.0.1").header("x-user", &i.to_string());
        assert!(req.take(&t, now).is_ok());
    }
    let (_, table) = &t.local[0];
    assert!(table.len() <= table.capacity(), "{}", table.len());
    assert!(table.capacity() < DISTINCT_KEYS + DISTINCT_KEYS / 10);
}

#[test]
fn a_route_has_its_own_tables_unless_the_rule_is_shared() {
    let mut shared = per_minute(1, vec![]);
    shared.shared = true;
    let policy = Arc::new(TrafficPolicy {
        source: "default/p".into(),
        local: vec![per_minute(1, vec![]), shared],
        global: vec![],
        fail_closed: false,
        needs_headers: false,
        compression: None,
        faults: None,
        request_timeout: None,
        balance: None,
        health: None,
        request_buffer: None,
        backends: Default::default(),
    });
    let mut keys = vec![];
    for route in ["a", "b"] {
        let r = policy.for_route(
            &ObjectRef::new("default", route),
            None,
            |key, limit, cap| {
                keys.push(key.to_string());
                Arc::new(Buckets::new(limit, cap))
            },
        );
        assert_eq!(r.local.len(), 2);
    }
    assert_ne!(keys[0], keys[2], "per-route tables differ by route");
    assert_eq!(
        keys[1], keys[3],
        "a shared rule has one table for every route"
    );
}

#[test]
fn a_global_rule_sends_its_rule_entry_then_its_distinct_values_in_config_order() {
    let rule = per_minute(
        5,
        vec![Selector {
            headers: vec![
                HeaderSelect::Match {
                    name: HeaderName::from_static("x-plan"),
                    value: ValueMatch::Exact("free".into()),
                    invert: false,
                },
                HeaderSelect::Distinct(HeaderName::from_static("x-user")),
            ],
            source: Some(SourceSelect {
                cidr: "0.0.0.0/0".parse().unwrap(),
                distinct: true,
            }),
            ..Selector::default()
        }],
    );
    assert_eq!(rule.distinct_keys(), ["client", "header:x-user"]);
    let req = Req::new("10.1.2.3")
        .header("x-plan", "free")
        .header("x-user", "alice");
    let d = rule.descriptor(&req.as_limit(), "default/p/0").unwrap();
    let d: Vec<(&str, &str)> = d.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        d,
        [
            (RULE_KEY, "default/p/0"),
            ("client", "10.1.2.3"),
            ("header:x-user", "alice")
        ]
    );
    // Not the free plan, or no x-user: no descriptor (the service is not asked for it).
    let paid = Req::new("10.1.2.3")
        .header("x-plan", "paid")
        .header("x-user", "alice");
    assert!(rule.descriptor(&paid.as_limit(), "v").is_none());
    let anonymous = Req::new("10.1.2.3").header("x-plan", "free");
    assert!(rule.descriptor(&anonymous.as_limit(), "v").is_none());
}
