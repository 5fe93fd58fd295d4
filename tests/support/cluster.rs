//! Cluster-mode helpers: a real control plane with pier's CRDs and the RBAC of `config/rbac/`,
//! objects written through the admin client (server-side apply, manager `pier-tests`), and pier
//! started in-process as ServiceAccount `pier-system/pier`, never as admin.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use pier::run::{self, ClusterOptions, RunOptions};
use pier::source::kube::Connect;
use pier::status_writer::LeaseOptions;
use serde_json::{Value, json};

use super::apiserver::{ControlPlane, poll};
use super::web::{get, try_get};
use super::{bounded, free_port};

pub const PIER_NS: &str = "pier-system";
pub const PIER_SA: &str = "pier";
pub const LEASE: &str = "pier-test";
const MANAGER: &str = "pier-tests";
/// Bound for pier to list everything and bind its listeners.
pub const READY_BOUND: Duration = Duration::from_secs(60);
/// Bound for pier to write a status.
pub const STATUS_BOUND: Duration = Duration::from_secs(30);

pub struct Cluster {
    pub cp: ControlPlane,
    pub admin: kube::Client,
    /// pier's least-privilege identity.
    pub pier_kubeconfig: PathBuf,
}

pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

// === impl Cluster ===

impl Cluster {
    /// A control plane with the Gateway API CRDs, pier's own (`config/crds/pier/`) and pier's
    /// RBAC.
    pub async fn start() -> Self {
        let c = Self::start_without_crds().await;
        c.cp.install_crds(repo("config/crds")).await;
        c.cp.install_crds(repo("config/crds/pier")).await;
        c
    }

    /// A control plane with pier's RBAC but no CRDs.
    pub async fn start_without_crds() -> Self {
        init_logging();
        let cp = ControlPlane::start().await;
        let admin = cp.admin_client();
        let c = Self {
            pier_kubeconfig: PathBuf::new(),
            cp,
            admin,
        };
        c.apply_dir(&repo("config/rbac")).await;
        let pier_kubeconfig = bounded(c.cp.kubeconfig_for_service_account(PIER_NS, PIER_SA)).await;
        Self {
            pier_kubeconfig,
            ..c
        }
    }

    /// Server-side applies every document of every `*.yaml` in `dir` (namespaces first).
    pub async fn apply_dir(&self, dir: &Path) {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        let mut docs: Vec<Value> = vec![];
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let objs: Vec<DynamicObject> = serde_saphyr::from_multiple(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            docs.extend(objs.into_iter().map(|o| serde_json::to_value(o).unwrap()));
        }
        docs.sort_by_key(|d| d["kind"] != "Namespace");
        for d in docs {
            self.apply(d).await;
        }
    }

    /// Server-side applies every document of `yaml`.
    pub async fn apply_yaml(&self, yaml: &str) {
        let objs: Vec<DynamicObject> =
            serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("{e}: {yaml}"));
        for o in objs {
            self.apply(serde_json::to_value(o).unwrap()).await;
        }
    }

    /// Server-side applies `obj` (force: the tests own what they write).
    pub async fn apply(&self, obj: Value) -> DynamicObject {
        let (api, name) = self.api_for(&obj);
        let pp = PatchParams::apply(MANAGER).force();
        bounded(api.patch(&name, &pp, &Patch::Apply(&obj)))
            .await
            .unwrap_or_else(|e| panic!("apply {}: {e}", obj["kind"]))
    }

    /// Like [`apply`](Self::apply), retrying for `bound` (the API server may be restarting).
    pub async fn apply_retrying(&self, obj: Value, bound: Duration) -> DynamicObject {
        let (api, name) = self.api_for(&obj);
        let pp = PatchParams::apply(MANAGER).force();
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            match tokio::time::timeout(
                Duration::from_secs(5),
                api.patch(&name, &pp, &Patch::Apply(&obj)),
            )
            .await
            {
                Ok(Ok(o)) => return o,
                r if tokio::time::Instant::now() < deadline => {
                    eprintln!("apply {} (retrying): {r:?}", obj["kind"]);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                r => panic!("apply {}: {r:?}", obj["kind"]),
            }
        }
    }

    pub async fn delete(&self, api_version: &str, kind: &str, namespace: Option<&str>, name: &str) {
        let api = self.api(api_version, kind, namespace);
        bounded(api.delete(name, &DeleteParams::default()))
            .await
            .unwrap_or_else(|e| panic!("delete {kind} {name}: {e}"));
    }

    pub async fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> DynamicObject {
        let api = self.api(api_version, kind, namespace);
        bounded(api.get(name))
            .await
            .unwrap_or_else(|e| panic!("get {kind} {name}: {e}"))
    }

    /// A Gateway API object's status.
    pub async fn status(&self, kind: &str, namespace: Option<&str>, name: &str) -> Value {
        self.get(GATEWAY_V1, kind, namespace, name).await.data["status"].clone()
    }

    /// Merge-patches a status as another controller would (field manager `manager`).
    pub async fn patch_status_as(
        &self,
        manager: &str,
        kind: &str,
        ns: &str,
        name: &str,
        status: Value,
    ) {
        let api = self.api(GATEWAY_V1, kind, Some(ns));
        let pp = PatchParams {
            field_manager: Some(manager.to_string()),
            ..PatchParams::default()
        };
        bounded(api.patch_status(name, &pp, &Patch::Merge(json!({ "status": status }))))
            .await
            .unwrap_or_else(|e| panic!("patch {kind} {name} status: {e}"));
    }

    pub fn api(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Api<DynamicObject> {
        let ar = api_resource(api_version, kind);
        match namespace {
            Some(ns) => Api::namespaced_with(self.admin.clone(), ns, &ar),
            None => Api::all_with(self.admin.clone(), &ar),
        }
    }

    fn api_for(&self, obj: &Value) -> (Api<DynamicObject>, String) {
        let api = self.api(
            obj["apiVersion"].as_str().unwrap(),
            obj["kind"].as_str().unwrap(),
            obj["metadata"]["namespace"].as_str(),
        );
        (api, obj["metadata"]["name"].as_str().unwrap().to_string())
    }

    /// Options to run pier in-process against this cluster as its ServiceAccount, listeners on
    /// `listen_host`, admin on a free loopback port.
    pub fn pier_options(&self, listen_host: IpAddr, identity: &str) -> RunOptions {
        let lease = LeaseOptions {
            namespace: PIER_NS.to_string(),
            name: LEASE.to_string(),
            identity: identity.to_string(),
            duration_secs: 15,
            grace_secs: 5,
        };
        let connect = Connect {
            kubeconfig: Some(self.pier_kubeconfig.clone()),
            context: None,
        };
        RunOptions {
            listen_host,
            admin: SocketAddr::from(([127, 0, 0, 1], 0)),
            access_log: false,
            ..RunOptions::new(run::Source::Cluster(ClusterOptions::new(connect, lease)))
        }
    }
}

/// pier's logs in the test output (shown for failing tests, or with `--nocapture`); the level
/// comes from `RUST_LOG` (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// Starts pier and waits until `/readyz` says ready.
pub async fn start_pier(opts: RunOptions) -> run::Running {
    let running = run::start(opts).await.expect("pier starts");
    wait_ready(&running).await;
    running
}

pub async fn wait_ready(running: &run::Running) {
    let url = format!("http://{}/readyz", running.admin_addr);
    poll(READY_BOUND, "pier /readyz", || async {
        try_get(&url, &[]).await.is_some_and(|r| r.status == 200)
    })
    .await;
}

pub async fn metrics(running: &run::Running) -> String {
    get(&format!("http://{}/metrics", running.admin_addr), &[])
        .await
        .text()
}

/// The value of one sample line (`name{labels}`) in Prometheus text, 0 when absent.
pub fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

pub const GATEWAY_V1: &str = "gateway.networking.k8s.io/v1";

pub fn api_resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "GatewayClass" => "gatewayclasses",
        "Gateway" => "gateways",
        "HTTPRoute" => "httproutes",
        "GRPCRoute" => "grpcroutes",
        "TLSRoute" => "tlsroutes",
        "TCPRoute" => "tcproutes",
        "UDPRoute" => "udproutes",
        "ListenerSet" => "listenersets",
        "ReferenceGrant" => "referencegrants",
        "Namespace" => "namespaces",
        "Service" => "services",
        "EndpointSlice" => "endpointslices",
        "Secret" => "secrets",
        "ConfigMap" => "configmaps",
        "Pod" => "pods",
        "ServiceAccount" => "serviceaccounts",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "Lease" => "leases",
        "BackendTLSPolicy" => "backendtlspolicies",
        "ClusterTrustBundle" => "clustertrustbundles",
        "SecurityPolicy" => "securitypolicies",
        "BackendTrafficPolicy" => "backendtrafficpolicies",
        "ClientTrafficPolicy" => "clienttrafficpolicies",
        "XBackendTrafficPolicy" => "xbackendtrafficpolicies",
        other => panic!("no plural for {other}"),
    };
    ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        plural: plural.to_string(),
    }
}

// === object builders ===

pub fn namespace(name: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } })
}

pub fn gateway_class() -> Value {
    json!({
        "apiVersion": GATEWAY_V1, "kind": "GatewayClass",
        "metadata": { "name": "pier" },
        "spec": { "controllerName": pier::DEFAULT_CONTROLLER_NAME },
    })
}

pub fn gateway(ns: &str, name: &str, port: u16) -> Value {
    json!({
        "apiVersion": GATEWAY_V1, "kind": "Gateway",
        "metadata": { "name": name, "namespace": ns },
        "spec": {
            "gatewayClassName": "pier",
            "listeners": [{ "name": "http", "protocol": "HTTP", "port": port }],
        },
    })
}

/// A headless Service with port 80 (`http`).
pub fn service(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "clusterIP": "None", "ports": [{ "name": "http", "port": 80, "protocol": "TCP" }] },
    })
}

/// The one EndpointSlice of Service `service`: a ready endpoint at `addr`.
pub fn endpoint_slice(ns: &str, service: &str, addrs: &[SocketAddr]) -> Value {
    let port = addrs[0].port();
    assert!(addrs.iter().all(|a| a.port() == port), "one port per slice");
    let endpoints: Vec<Value> = addrs
        .iter()
        .map(|a| json!({ "addresses": [a.ip().to_string()], "conditions": { "ready": true } }))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{service}-1"), "namespace": ns,
            "labels": { "kubernetes.io/service-name": service },
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{ "name": "http", "port": port, "protocol": "TCP" }],
    })
}

/// A Service and its slice, for a backend listening at `addr`.
pub async fn backend(c: &Cluster, ns: &str, name: &str, addr: SocketAddr) {
    c.apply(service(ns, name)).await;
    c.apply(endpoint_slice(ns, name, &[addr])).await;
}

/// `rules`: `(path prefix, backendRef)` pairs.
pub fn http_route(ns: &str, name: &str, gateway: &str, rules: &[(&str, Value)]) -> Value {
    let rules: Vec<Value> = rules
        .iter()
        .map(|(prefix, backend)| {
            json!({
                "matches": [{ "path": { "type": "PathPrefix", "value": prefix } }],
                "backendRefs": [backend],
            })
        })
        .collect();
    json!({
        "apiVersion": GATEWAY_V1, "kind": "HTTPRoute",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "parentRefs": [{ "name": gateway }], "rules": rules },
    })
}

pub fn backend_ref(name: &str, namespace: Option<&str>) -> Value {
    let mut r = json!({ "name": name, "port": 80 });
    if let Some(ns) = namespace {
        r["namespace"] = json!(ns);
    }
    r
}

/// A ReferenceGrant in `ns` letting HTTPRoutes in `from_ns` use its Services.
pub fn reference_grant(ns: &str, name: &str, from_ns: &str) -> Value {
    json!({
        "apiVersion": GATEWAY_V1, "kind": "ReferenceGrant",
        "metadata": { "name": name, "namespace": ns },
        "spec": {
            "from": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": from_ns }],
            "to": [{ "group": "", "kind": "Service" }],
        },
    })
}

/// The condition `type_` of a `conditions` list.
pub fn condition<'a>(conditions: &'a Value, type_: &str) -> Option<&'a Value> {
    conditions.as_array()?.iter().find(|c| c["type"] == type_)
}

/// pier's entry in a Route's `status.parents`.
pub fn our_parent(status: &Value) -> Option<&Value> {
    status["parents"]
        .as_array()?
        .iter()
        .find(|p| p["controllerName"] == pier::DEFAULT_CONTROLLER_NAME)
}

/// An address of this host for backends: 192.0.2.10 on `lo` inside the test run's own network
/// namespace (`scripts/test` sets `PIER_TEST_NETNS=1` there), else a local non-loopback IPv4
/// address of the host (nothing is added to the host's interfaces). kube-apiserver rejects
/// loopback (and link-local) EndpointSlice addresses, so the echo backends listen on this
/// address instead; connections to it never leave the host (the kernel delivers them through
/// the loopback device). Read from `/proc/net/fib_trie`, which needs no route or library.
pub fn host_ip() -> IpAddr {
    static IP: std::sync::OnceLock<IpAddr> = std::sync::OnceLock::new();
    *IP.get_or_init(|| test_net_on_lo().unwrap_or_else(local_ip))
}

/// TEST-NET-1 (RFC 5737, never routed) address added to the loopback device, so that test
/// traffic has a loopback-only path and no test targets a real network address. Needs root
/// (as CI has); `None` when it cannot be added.
const TEST_NET_IP: std::net::Ipv4Addr = std::net::Ipv4Addr::new(192, 0, 2, 10);

fn test_net_on_lo() -> Option<IpAddr> {
    // Only inside the test run's own network namespace.
    std::env::var_os("PIER_TEST_NETNS")?;
    let _ = std::process::Command::new("ip")
        .args(["addr", "add", "192.0.2.10/32", "dev", "lo"])
        .stderr(std::process::Stdio::null())
        .status();
    std::net::TcpListener::bind((TEST_NET_IP, 0)).ok()?;
    Some(IpAddr::V4(TEST_NET_IP))
}

fn local_ip() -> IpAddr {
    let trie = std::fs::read_to_string("/proc/net/fib_trie").expect("/proc/net/fib_trie");
    let mut last: Option<std::net::Ipv4Addr> = None;
    for line in trie.lines() {
        let t = line.trim_start_matches([' ', '|', '-', '+']).trim();
        if let Ok(ip) = t.parse::<std::net::Ipv4Addr>() {
            last = Some(ip);
        } else if t.starts_with("/32 host LOCAL")
            && let Some(ip) = last
            && !ip.is_loopback()
            && !ip.is_link_local()
            && !ip.is_unspecified()
        {
            return IpAddr::V4(ip);
        }
    }
    panic!(
        "this host has no non-loopback IPv4 address: cluster-mode tests need one for \
         EndpointSlice addresses (kube-apiserver rejects 127.0.0.0/8)"
    )
}

/// An echo backend on [`host_ip`].
pub async fn host_echo(name: &str) -> pier::echo::EchoServer {
    pier::echo::spawn(SocketAddr::new(host_ip(), 0), name)
        .await
        .unwrap()
}

/// A listener port for a test Gateway.
pub fn listener_port() -> u16 {
    free_port()
}
