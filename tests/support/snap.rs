//! Snapshots from a few lines, without translation:
//!
//! ```ignore
//! let b = backend("a", &[echo.addr]);
//! let r = rule("ns/route").to(&b).build();
//! let s = snapshot(vec![port(p, vec![listener("http", None).route(&[], prefix("/"), &r).build()])]);
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pier::model::route::RouteTableBuilder;
use pier::model::{
    AppProtocol, Backend, BackendId, BackendSet, BackendTarget, BackendTls, CertTable, Endpoint,
    Filters, HostnameMatch, Listener, ListenerId, ObjectRef, PathMatch, Port, Protocol,
    RequestMatch, RetryPolicy, RouteTable, Rule, Snapshot, Timeouts, WeightedBackend,
};

pub fn object(name: &str) -> ObjectRef {
    match name.split_once('/') {
        Some((ns, n)) => ObjectRef::new(ns, n),
        None => ObjectRef::new("default", name),
    }
}

pub fn backend(name: &str, addrs: &[SocketAddr]) -> Arc<Backend> {
    backend_with(name, AppProtocol::Http1, addrs)
}

pub fn backend_with(name: &str, protocol: AppProtocol, addrs: &[SocketAddr]) -> Arc<Backend> {
    tls_backend(name, protocol, addrs, BackendTls::default())
}

/// A backend reached over TLS (or failing closed) as `tls` says.
pub fn tls_backend(
    name: &str,
    protocol: AppProtocol,
    addrs: &[SocketAddr],
    tls: BackendTls,
) -> Arc<Backend> {
    Arc::new(Backend {
        id: BackendId {
            service: object(name),
            port: 80,
        },
        protocol,
        endpoints: addrs.iter().copied().map(Endpoint::new).collect(),
        tls,
        max_requests: None,
        max_pending: None,
        max_connections: None,
        max_retries: None,
        connect_timeout: None,
        retry_constraint: None,
        outlier: Default::default(),
        load: Default::default(),
    })
}

pub struct RuleBuilder {
    route: ObjectRef,
    filters: Filters,
    backends: Vec<WeightedBackend>,
    timeouts: Timeouts,
    retry: Option<RetryPolicy>,
    session: Option<pier::model::SessionPolicy>,
    access: Option<Arc<pier::model::AccessPolicy>>,
}

pub fn rule(route: &str) -> RuleBuilder {
    RuleBuilder {
        route: object(route),
        filters: Filters::default(),
        backends: vec![],
        timeouts: Timeouts::default(),
        retry: None,
        session: None,
        access: None,
    }
}

impl RuleBuilder {
    pub fn to(self, b: &Arc<Backend>) -> Self {
        self.weighted(1, b)
    }

    pub fn weighted(self, weight: u32, b: &Arc<Backend>) -> Self {
        self.weighted_with(weight, b, Filters::default())
    }

    pub fn weighted_with(mut self, weight: u32, b: &Arc<Backend>, filters: Filters) -> Self {
        self.backends.push(WeightedBackend {
            weight,
            target: BackendTarget::Service(b.clone()),
            filters,
        });
        self
    }

    pub fn invalid(mut self, weight: u32) -> Self {
        self.backends.push(WeightedBackend {
            weight,
            target: BackendTarget::Invalid,
            filters: Filters::default(),
        });
        self
    }

    pub fn filters(mut self, filters: Filters) -> Self {
        self.filters = filters;
        self
    }

    pub fn timeouts(
        mut self,
        request: Option<Duration>,
        backend_request: Option<Duration>,
    ) -> Self {
        self.timeouts = Timeouts {
            request,
            backend_request,
        };
        self
    }

    /// The rule's effective access policy (what translation makes of a SecurityPolicy).
    pub fn access(mut self, policy: pier::model::AccessPolicy) -> Self {
        self.access = Some(Arc::new(policy));
        self
    }

    pub fn session(mut self, policy: pier::model::SessionPolicy) -> Self {
        self.session = Some(policy);
        self
    }

    /// Retries `codes` (and connection failures) up to `attempts` times, `backoff` apart.
    pub fn retry(mut self, codes: &[u16], attempts: u32, backoff: Duration) -> Self {
        self.retry = Some(RetryPolicy::new(codes.to_vec(), attempts, backoff));
        self
    }

    pub fn build(self) -> Arc<Rule> {
        Arc::new(Rule {
            route: self.route,
            index: 0,
            kind: "HTTPRoute",
            name: None,
            filters: self.filters,
            backends: BackendSet::new(self.backends),
            timeouts: self.timeouts,
            retry: self.retry,
            session: self.session,
            access: self.access,
            traffic: None,
            health: None,
        })
    }
}

pub struct ListenerBuilder {
    id: ListenerId,
    hostname: Option<HostnameMatch>,
    table: RouteTableBuilder,
    order: usize,
}

pub fn listener(name: &str, hostname: Option<&str>) -> ListenerBuilder {
    ListenerBuilder {
        id: ListenerId {
            gateway: object("gw"),
            set: None,
            name: name.to_string(),
        },
        hostname: hostname.map(|h| HostnameMatch::parse(h).unwrap()),
        table: RouteTable::builder(),
        order: 0,
    }
}

impl ListenerBuilder {
    /// Adds one match of `rule` for `hostnames` (empty: any host). Earlier calls win ties.
    pub fn route(mut self, hostnames: &[&str], matcher: RequestMatch, rule: &Arc<Rule>) -> Self {
        let hosts: Vec<HostnameMatch> = hostnames
            .iter()
            .map(|h| HostnameMatch::parse(h).unwrap())
            .collect();
        self.table.add(&hosts, matcher, rule, (self.order, 0, 0));
        self.order += 1;
        self
    }

    pub fn build(self) -> Listener {
        Listener {
            id: self.id,
            hostname: self.hostname,
            passthrough: false,
            client_cert_header: None,
            tls_profile: None,
            client_policy: None,
            access_log: None,
            pre_route: None,
            before_routing: false,
            alt_svc: None,
            routes: self.table.build(),
        }
    }
}

pub fn port(port: u16, listeners: Vec<Listener>) -> Port {
    let mut p = Port {
        address: None,
        port,
        protocol: Protocol::Http,
        proxy_protocol: false,
        access_log_on: false,
        listeners,
        certs: None,
        client_auth: None,
        tls_profiles: false,
        client: None,
        quic: None,
    };
    p.sort_listeners();
    p
}

pub fn https_port(port: u16, listeners: Vec<Listener>, certs: CertTable) -> Port {
    let mut p = Port {
        address: None,
        port,
        protocol: Protocol::Https,
        proxy_protocol: false,
        access_log_on: false,
        listeners,
        certs: Some(certs),
        client_auth: None,
        tls_profiles: false,
        client: None,
        quic: None,
    };
    p.sort_listeners();
    p
}

pub fn snapshot(mut ports: Vec<Port>) -> Snapshot {
    ports.sort_by_key(Port::key);
    Snapshot {
        generation: 1,
        ports,
    }
}

/// One port, one listener for any host, everything to `b`.
pub fn simple(p: u16, b: &Arc<Backend>) -> Snapshot {
    let r = rule("default/route").to(b).build();
    snapshot(vec![port(
        p,
        vec![listener("http", None).route(&[], prefix("/"), &r).build()],
    )])
}

/// One HTTPS port serving `certs`, one listener for any host, everything to `b`.
pub fn simple_https(p: u16, certs: CertTable, b: &Arc<Backend>) -> Snapshot {
    let r = rule("ns/r").to(b).build();
    snapshot(vec![https_port(
        p,
        vec![listener("https", None).route(&[], prefix("/"), &r).build()],
        certs,
    )])
}

pub fn prefix(p: &str) -> RequestMatch {
    RequestMatch {
        path: PathMatch::prefix(p).unwrap(),
        ..Default::default()
    }
}

pub fn exact(p: &str) -> RequestMatch {
    RequestMatch {
        path: PathMatch::exact(p).unwrap(),
        ..Default::default()
    }
}
