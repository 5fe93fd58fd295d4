//! `pier check --kubeconfig`, the built binary against a real kube-apiserver + etcd
//! (`support::apiserver`), as pier's own ServiceAccount under `config/rbac/` unless a test says
//! otherwise. Every line of the report is asserted, passing and failing: API server, CRDs,
//! RBAC (a missing verb, grants beyond pier's), Gateways, pod network reachability (a TCP
//! probe, a mesh mTLS handshake, an address where nothing listens) and mesh certificates (an
//! expired client certificate); JSON and text output; exit codes.
//!
//! Endpoint addresses are on `support::cluster::host_ip()`: 192.0.2.10 inside the test's own
//! network namespace (`PIER_TEST_NETNS=1`), which the API server accepts in EndpointSlices.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};
use support::apiserver::poll;
use support::cluster::*;
use support::mesh::{self, MeshPki};

/// Bound for one `pier check` run (API answers and listing are bounded by 30 s inside).
const RUN_BOUND: Duration = Duration::from_secs(120);

/// Runs the built `pier` with `args`; (exit code, stdout, stderr).
async fn pier(args: &[&str]) -> (i32, String, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_pier"));
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env_remove("KUBECONFIG");
    // The workloads the probes reach run on this test's runtime: wait off it.
    let out: Output =
        tokio::time::timeout(RUN_BOUND, tokio::task::spawn_blocking(move || cmd.output()))
            .await
            .expect("pier check finishes")
            .unwrap()
            .expect("pier runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `pier check --kubeconfig <kubeconfig> -o json <extra>`: exit code and the parsed report.
async fn check_json(kubeconfig: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec![
        "check",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "-o",
        "json",
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = pier(&args).await;
    let v: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {out}\nstderr: {err}"));
    assert_eq!(v["schema"], "pier.dev/check/v1");
    assert_eq!(v["passed"], code == 0, "exit code {code} vs passed: {out}");
    for c in v["checks"].as_array().unwrap() {
        for field in ["category", "name", "status", "message"] {
            assert!(c[field].is_string(), "{field} in {c}");
        }
        let problem = c["status"] == "fail" || c["status"] == "warn";
        assert_eq!(
            c["hint"].is_string(),
            problem,
            "hint exactly on problems: {c}"
        );
    }
    (code, v)
}

fn checks(v: &Value) -> &Vec<Value> {
    v["checks"].as_array().unwrap()
}

/// The check named `name`.
fn get<'a>(v: &'a Value, name: &str) -> &'a Value {
    checks(v)
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {}", names(v)))
}

fn names(v: &Value) -> String {
    checks(v)
        .iter()
        .map(|c| format!("{} {}: {}", c["status"], c["name"], c["message"]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Names of the checks with `status`.
fn with_status(v: &Value, status: &str) -> Vec<String> {
    checks(v)
        .iter()
        .filter(|c| c["status"] == status)
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

fn assert_check(v: &Value, name: &str, status: &str, message_has: &str) {
    let c = get(v, name);
    assert_eq!(c["status"], status, "{name}: {c}\n{}", names(v));
    let m = c["message"].as_str().unwrap();
    assert!(
        m.contains(message_has),
        "{name}: {m:?} lacks {message_has:?}"
    );
}

const GATEWAY_CRDS: [&str; 9] = [
    "gatewayclasses",
    "gateways",
    "listenersets",
    "httproutes",
    "grpcroutes",
    "tlsroutes",
    "tcproutes",
    "referencegrants",
    "backendtlspolicies",
];

const SA_USER: &str = "system:serviceaccount:pier-system:pier";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_and_api_server_failures_skip_everything_else() {
    // No kubeconfig.
    let (code, v) = check_json(Path::new("/nonexistent/pier.kubeconfig"), &[]).await;
    assert_eq!(code, 1);
    assert_check(&v, "kubeconfig", "fail", "/nonexistent/pier.kubeconfig");
    for c in [
        "gateway-api-crds",
        "rbac",
        "gateways",
        "pod-network",
        "mesh",
    ] {
        assert_check(&v, c, "skipped", "skipped: the API server cannot be used");
    }
    assert_eq!(checks(&v).len(), 6, "{}", names(&v));

    // A kubeconfig whose server does not answer.
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let kubeconfig = dir.path().join("down.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: \
             https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  \
             user:\n    token: t\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
             current-context: x\n"
        ),
    )
    .unwrap();
    let (code, v) = check_json(&kubeconfig, &[]).await;
    assert_eq!(code, 1);
    assert_check(&v, "kubeconfig", "ok", &format!("https://127.0.0.1:{port}"));
    assert_check(
        &v,
        "api-server",
        "fail",
        &format!("cannot reach https://127.0.0.1:{port}"),
    );
    assert!(
        get(&v, "api-server")["hint"]
            .as_str()
            .unwrap()
            .contains("server URL")
    );
    assert_check(&v, "mesh", "skipped", "skipped");

    // Text: the same, for people; the error count on stderr.
    let (code, out, err) = pier(&["check", "--kubeconfig", kubeconfig.to_str().unwrap()]).await;
    assert_eq!(code, 1);
    assert!(
        out.starts_with("kubernetes-api\n--------------\n✔ kubeconfig: loaded "),
        "{out}"
    );
    assert!(out.contains("\n✖ api-server: cannot reach "), "{out}");
    assert!(out.contains("\n    fix: check the server URL"), "{out}");
    assert!(out.contains("\n· rbac: skipped: "), "{out}");
    assert!(
        out.ends_with("\n✖ 1 check(s) failed, 0 warning(s)\n"),
        "{out}"
    );
    assert!(
        !out.contains('\x1b'),
        "no colour when stdout is not a terminal"
    );
    assert!(err.contains("error: 1 check(s) failed"), "{err}");

    // --manifests and --kubeconfig exclude each other.
    let (code, _, err) = pier(&["check", "--manifests", ".", "--kubeconfig", "x"]).await;
    assert_eq!(code, 2, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_crd_fails_and_skips_what_needs_it() {
    let c = Cluster::start_without_crds().await;
    // No HTTPRoute CRD (pier needs it), no GRPCRoute CRD (optional), a Gateway CRD from an
    // older Gateway API release, and a TCPRoute CRD that serves only v1alpha2 (before v1.7).
    let mut crds: Vec<_> = pier::crds::all()
        .into_iter()
        .filter(|crd| !["httproutes", "grpcroutes"].contains(&crd.spec.names.plural.as_str()))
        .collect();
    for crd in &mut crds {
        if crd.spec.names.plural == "tcproutes" {
            crd.spec.versions[0].name = "v1alpha2".into();
        }
        if crd.spec.names.plural == "gateways" {
            let a = crd.metadata.annotations.as_mut().unwrap();
            a.insert(
                "gateway.networking.k8s.io/bundle-version".into(),
                "v1.4.0".into(),
            );
        }
    }
    c.cp.apply_crds(&crds).await;

    let (code, v) = check_json(&c.pier_kubeconfig, &[]).await;
    assert_eq!(code, 1, "{}", names(&v));
    assert_check(
        &v,
        "credentials",
        "ok",
        &format!("authenticated as {SA_USER}"),
    );
    let missing = get(&v, "crd/httproutes.gateway.networking.k8s.io");
    assert_eq!(missing["status"], "fail");
    assert_eq!(
        missing["message"],
        "not installed: pier cannot serve without HTTPRoutes"
    );
    assert!(
        missing["hint"]
            .as_str()
            .unwrap()
            .starts_with("pier crds | kubectl apply -f -")
    );
    // The CRDs pier's RBAC may read carry the version pier was built for; the others are
    // served.
    let built = pier::crds::BUNDLE_VERSION;
    let optional = get(&v, "crd/grpcroutes.gateway.networking.k8s.io");
    assert_eq!(optional["status"], "warn");
    assert_eq!(
        optional["message"],
        "not installed: pier serves no GRPCRoute until it is"
    );
    // pier's own SecurityPolicy CRD: optional, with its own message.
    assert_check(
        &v,
        "crd/securitypolicies.pier.dev",
        "warn",
        "not installed: no SecurityPolicy can be created until it is (pier runs without)",
    );
    let older = get(&v, "crd/gateways.gateway.networking.k8s.io");
    assert_eq!(older["status"], "warn");
    assert_eq!(
        older["message"],
        format!(
            "served as v1, Gateway API v1.4.0, standard channel: older than {} pier was built \
             for (newer fields are dropped by the API server)",
            pier::crds::BUNDLE_VERSION
        )
    );
    assert!(
        older["hint"]
            .as_str()
            .unwrap()
            .starts_with("pier crds | kubectl apply -f -")
    );
    assert_check(
        &v,
        "crd/gatewayclasses.gateway.networking.k8s.io",
        "ok",
        &format!("served as v1, Gateway API {built}, standard channel"),
    );
    // Installed, but not in the version pier reads: a warning, not silence.
    assert_check(
        &v,
        "crd/tcproutes.gateway.networking.k8s.io",
        "warn",
        "served as v1alpha2 only: pier reads TCPRoute v1 (Gateway API v1.7) and serves no \
         TCPRoute until that version is served",
    );
    for plural in [
        "tlsroutes",
        "udproutes",
        "referencegrants",
        "backendtlspolicies",
    ] {
        let name = format!("crd/{plural}.gateway.networking.k8s.io");
        assert_check(
            &v,
            &name,
            "ok",
            "served as v1 (bundle version not readable)",
        );
    }
    // RBAC does not depend on the CRDs.
    assert_check(&v, "rbac/none-more", "ok", "no grants beyond pier's");
    for c in ["gateways", "pod-network", "mesh"] {
        assert_check(&v, c, "skipped", "Gateway API CRDs pier needs are missing");
    }
    assert_eq!(
        with_status(&v, "fail"),
        ["crd/httproutes.gateway.networking.k8s.io"]
    );
}

/// The world of [`live_cluster_checks`]: Gateway `gw/edge` with `spec.mesh` selecting routes
/// labelled `mesh: enabled`, a meshed route `shop/web` to an mTLS workload and a plain route
/// `public/site` to an echo backend; pier's client certificate comes from files.
struct World {
    pki: MeshPki,
    dir: tempfile::TempDir,
    _web: mesh::Workload,
    web_addr: std::net::SocketAddr,
    site_addr: std::net::SocketAddr,
    _site: pier::echo::EchoServer,
}

impl World {
    async fn new(c: &Cluster) -> Self {
        support::init();
        c.cp.install_crds(repo("config/crds/mesh")).await;
        let pki = MeshPki::new();
        let web = mesh::Workload::spawn_on(host_ip(), &pki.workload, &pki.client_ca, false).await;
        let site = host_echo("site").await;
        let spec = "  mesh:\n    trustBundle: {name: mesh-ca, bundleKey: ca-bundle.crt}\n    \
                    selector: {matchLabels: {mesh: enabled}}\n";
        for ns in ["gw", "shop", "public"] {
            c.apply_yaml(&mesh::namespace(ns, "")).await;
        }
        c.apply_yaml(mesh::GATEWAY_CLASS).await;
        c.apply_yaml(&mesh::bundle(&[&pki.mesh_ca])).await;
        c.apply_yaml(&mesh::gateway(listener_port(), spec)).await;
        c.apply_yaml(&mesh::service("shop", "web", web.addr)).await;
        c.apply_yaml(&mesh::route("shop", "web", "mesh: enabled", "web"))
            .await;
        c.apply_yaml(&mesh::service("public", "site", site.addr))
            .await;
        c.apply_yaml(&mesh::route("public", "site", "", "site"))
            .await;
        let dir = tempfile::tempdir().unwrap();
        let w = Self {
            web_addr: web.addr,
            site_addr: site.addr,
            pki,
            dir,
            _web: web,
            _site: site,
        };
        w.write_client_cert("pier", &w.pki.pier.chain_pem, &w.pki.pier.key_pem);
        w
    }

    fn write_client_cert(&self, name: &str, chain: &str, key: &str) -> (PathBuf, PathBuf) {
        let crt = self.dir.path().join(format!("{name}.crt"));
        let k = self.dir.path().join(format!("{name}.key"));
        std::fs::write(&crt, chain).unwrap();
        std::fs::write(&k, key).unwrap();
        (crt, k)
    }

    fn cert_args(&self, name: &str) -> Vec<String> {
        let p = |ext: &str| {
            self.dir
                .path()
                .join(format!("{name}.{ext}"))
                .display()
                .to_string()
        };
        vec![
            "--client-cert".into(),
            p("crt"),
            "--client-key".into(),
            p("key"),
        ]
    }
}

/// The cluster in good order, then each failure on it in turn: a grant beyond pier's (a
/// warning), a missing verb, an expired client certificate, an endpoint nothing listens on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_cluster_checks() {
    let c = Cluster::start().await;
    let w = World::new(&c).await;
    let certs = w.cert_args("pier");
    let certs: Vec<&str> = certs.iter().map(String::as_str).collect();

    // --- All pass, as pier's ServiceAccount.
    let (code, v) = check_json(&c.pier_kubeconfig, &certs).await;
    assert_eq!(code, 0, "{}", names(&v));
    let not_ok: Vec<String> = checks(&v)
        .iter()
        .filter(|c| c["status"] != "ok")
        .map(|c| c.to_string())
        .collect();
    assert!(not_ok.is_empty(), "{not_ok:#?}");
    assert_check(&v, "api-server", "ok", &c.cp.server_url());
    assert_check(&v, "api-version", "ok", "Kubernetes v1.");
    assert_check(&v, "credentials", "ok", SA_USER);
    for plural in GATEWAY_CRDS {
        get(&v, &format!("crd/{plural}.gateway.networking.k8s.io"));
    }
    assert_check(
        &v,
        "crd/securitypolicies.pier.dev",
        "ok",
        "served as v1alpha1",
    );
    for (res, verbs) in [
        (
            "gateways.gateway.networking.k8s.io",
            "get, list, watch granted cluster-wide",
        ),
        (
            "httproutes/status.gateway.networking.k8s.io",
            "update, patch granted cluster-wide",
        ),
        (
            "endpointslices.discovery.k8s.io",
            "get, list, watch granted cluster-wide",
        ),
        ("secrets", "get, list, watch granted cluster-wide"),
        ("pods", "get, list, watch granted cluster-wide"),
        (
            "customresourcedefinitions.apiextensions.k8s.io",
            "get gatewayclasses.gateway.networking.k8s.io, get gateways.",
        ),
        (
            "leases.coordination.k8s.io",
            "get, create, update, patch granted in namespace pier-system",
        ),
        (
            "clustertrustbundles.certificates.k8s.io",
            "get, list, watch",
        ),
        (
            "securitypolicies.pier.dev",
            "get, list, watch granted cluster-wide",
        ),
        (
            "securitypolicies/status.pier.dev",
            "update, patch granted cluster-wide",
        ),
    ] {
        assert_check(&v, &format!("rbac/{res}"), "ok", verbs);
    }
    assert_check(
        &v,
        "rbac/none-more",
        "ok",
        "no grants beyond pier's in namespace pier-system",
    );
    assert_check(
        &v,
        "gatewayclass/pier",
        "ok",
        "accepted (controller pier.dev/gateway-controller)",
    );
    assert_check(
        &v,
        "gateway/gw/edge",
        "ok",
        "accepted and programmed; listeners: http (2 routes)",
    );
    let site = format!("reach/gw/edge/{}", w.site_addr);
    assert_check(
        &v,
        &site,
        "ok",
        "Service public/site:443, route public/site: TCP connect in",
    );
    let web = format!("reach/gw/edge/{}", w.web_addr);
    assert_check(
        &v,
        &web,
        "ok",
        "Service shop/web:443, route shop/web: mesh mTLS handshake in",
    );
    assert_check(
        &v,
        "mesh/gw/edge",
        "ok",
        "client certificate from --client-cert/--client-key",
    );
    assert_check(
        &v,
        "mesh/gw/edge/trust-bundle",
        "ok",
        "1 CA certificate(s); CN=mesh CA: valid until",
    );
    assert_check(
        &v,
        "mesh/gw/edge/client-certificate",
        "ok",
        "CN=pier-gateway",
    );
    assert_check(
        &v,
        "mesh/gw/edge/client-chain",
        "ok",
        "chains to CN=pier client CA",
    );

    // The same as text.
    let mut args = vec!["check", "--kubeconfig", c.pier_kubeconfig.to_str().unwrap()];
    args.extend_from_slice(&certs);
    let (code, out, _) = pier(&args).await;
    assert_eq!(code, 0, "{out}");
    for line in out.lines() {
        let header = line.is_empty()
            || line.chars().all(|ch| ch == '-')
            || line.chars().all(|ch| ch.is_ascii_lowercase() || ch == '-');
        assert!(header || line.starts_with("✔ "), "{line:?} in\n{out}");
    }
    assert!(
        out.contains(&format!(
            "\n✔ {site}: Service public/site:443, route public/site: TCP"
        )),
        "{out}"
    );
    assert!(out.ends_with("\n✔ all checks passed\n"), "{out}");

    // --- As the cluster admin: more than pier needs is a warning, and warnings pass.
    let (code, v) = check_json(&c.cp.kubeconfig_admin(), &certs).await;
    assert_eq!(code, 0, "{}", names(&v));
    assert_eq!(with_status(&v, "warn"), ["rbac/none-more"], "{}", names(&v));
    assert_check(&v, "rbac/none-more", "warn", "may do more than pier needs");
    assert_check(&v, "rbac/none-more", "warn", "* */*");
    assert_check(&v, "credentials", "ok", "authenticated as pier-test-admin");

    // --- A ServiceAccount whose ClusterRole lacks one verb: patch on gateways/status.
    let lacking = lacking_rbac(&c, "pier-lacking").await;
    let (code, v) = check_json(&lacking, &certs).await;
    assert_eq!(code, 1, "{}", names(&v));
    assert_eq!(
        with_status(&v, "fail"),
        ["rbac/gateways/status.gateway.networking.k8s.io"]
    );
    let f = get(&v, "rbac/gateways/status.gateway.networking.k8s.io");
    assert_eq!(
        f["message"],
        "patch not granted cluster-wide: pier cannot write status (or run with --no-status)"
    );
    assert!(
        f["hint"]
            .as_str()
            .unwrap()
            .starts_with("kubectl apply -f config/rbac/")
    );
    assert_check(
        &v,
        "rbac/httproutes/status.gateway.networking.k8s.io",
        "ok",
        "update, patch",
    );
    // A missing write does not stop the rest.
    assert_check(&v, "gateway/gw/edge", "ok", "accepted and programmed");
    // --no-status: the write verbs are not needed, and not asked about.
    let mut no_status = certs.clone();
    no_status.push("--no-status");
    let (code, v) = check_json(&lacking, &no_status).await;
    assert_eq!(code, 0, "{}", names(&v));
    assert!(
        checks(&v)
            .iter()
            .all(|c| !c["name"].as_str().unwrap().contains("/status"))
    );

    // --- An expired client certificate (from pier's CA): the mesh check fails, and the
    // workload rejects it.
    let expired = w.pki.client_ca.workload_expired(mesh::PIER_ID);
    let chain = format!("{}{}", expired.chain_pem, w.pki.client_ca.pem);
    w.write_client_cert("expired", &chain, &expired.key_pem);
    let expired_args = w.cert_args("expired");
    let expired_args: Vec<&str> = expired_args.iter().map(String::as_str).collect();
    let (code, v) = check_json(&c.pier_kubeconfig, &expired_args).await;
    assert_eq!(code, 1, "{}", names(&v));
    assert_eq!(
        with_status(&v, "fail"),
        [web.clone(), "mesh/gw/edge/client-certificate".to_string()]
    );
    let cert = get(&v, "mesh/gw/edge/client-certificate");
    assert_eq!(
        cert["message"],
        format!("{}: expired 2021-01-01T00:00:00Z", mesh::PIER_ID)
    );
    assert!(
        cert["hint"]
            .as_str()
            .unwrap()
            .starts_with("renew pier's client certificate")
    );
    assert_check(
        &v,
        &web,
        "fail",
        "the workload rejected pier's client certificate",
    );
    assert_check(
        &v,
        "mesh/gw/edge/client-chain",
        "ok",
        "chains to CN=pier client CA",
    );
    assert_check(&v, &site, "ok", "TCP connect");

    // --- An endpoint address nothing listens on.
    let closed = std::net::SocketAddr::new(host_ip(), closed_port(host_ip()));
    c.apply_yaml(&mesh::service("public", "gone", closed)).await;
    c.apply_yaml(&mesh::route("public", "gone", "", "gone"))
        .await;
    let (code, v) = check_json(&c.pier_kubeconfig, &certs).await;
    assert_eq!(code, 1, "{}", names(&v));
    let gone = format!("reach/gw/edge/{closed}");
    assert_eq!(
        with_status(&v, "fail"),
        std::slice::from_ref(&gone),
        "{}",
        names(&v)
    );
    assert_check(
        &v,
        &gone,
        "fail",
        "Service public/gone:443, route public/gone: connection refused",
    );
    assert!(
        get(&v, &gone)["hint"]
            .as_str()
            .unwrap()
            .starts_with("this VM cannot reach pod IPs")
    );
    let (code, out, _) = pier(&[
        "check",
        "--kubeconfig",
        c.pier_kubeconfig.to_str().unwrap(),
        "--client-cert",
        certs[1],
        "--client-key",
        certs[3],
    ])
    .await;
    assert_eq!(code, 1);
    assert!(
        out.contains(&format!(
            "\n✖ {gone}: Service public/gone:443, route public/gone: "
        )),
        "{out}"
    );
    assert!(
        out.contains("\n    fix: this VM cannot reach pod IPs"),
        "{out}"
    );

    // --probe-sample bounds the probes per Gateway.
    let (_, v) = check_json(
        &c.pier_kubeconfig,
        &[&certs[..], &["--probe-sample", "1"]].concat(),
    )
    .await;
    let probed = checks(&v)
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with("reach/gw/edge/"))
        .count();
    assert_eq!(probed, 1, "{}", names(&v));
    assert_check(
        &v,
        "reach/gw/edge",
        "ok",
        "probing 1 of 3 endpoint addresses",
    );

    // --- No Gateway for pier: no class with its controller name, or no such Gateway.
    let (code, v) = check_json(
        &c.pier_kubeconfig,
        &["--controller-name", "example.com/nobody"],
    )
    .await;
    assert_eq!(code, 1, "{}", names(&v));
    assert_check(
        &v,
        "gatewayclass",
        "fail",
        "no GatewayClass has spec.controllerName example.com/nobody",
    );
    assert!(
        get(&v, "gatewayclass")["hint"]
            .as_str()
            .unwrap()
            .contains("--controller-name")
    );
    for c in ["pod-network", "mesh"] {
        assert_check(&v, c, "skipped", "skipped: pier would serve no Gateway");
    }
    let (code, v) = check_json(&c.pier_kubeconfig, &["--gateway", "gw/missing"]).await;
    assert_eq!(code, 1, "{}", names(&v));
    assert_check(&v, "gatewayclass/pier", "ok", "accepted");
    assert_check(
        &v,
        "gateways",
        "fail",
        "Gateway gw/missing does not exist or its class is not pier's",
    );

    // --- The mesh trust bundle is gone: the mesh check fails, and meshed endpoints are only
    // probed with TCP (pier would answer 503 rather than send plaintext).
    c.delete("v1", "ConfigMap", Some("gw"), "mesh-ca").await;
    let (code, v) = check_json(&c.pier_kubeconfig, &certs).await;
    assert_eq!(code, 1, "{}", names(&v));
    assert_check(&v, "mesh/gw/edge", "fail", "NoTrustBundle: ");
    assert_check(
        &v,
        &web,
        "ok",
        "TLS is required but unusable: NoTrustBundle",
    );
    assert_eq!(with_status(&v, "fail"), [gone, "mesh/gw/edge".to_string()]);

    // --- While serving: the same probes every --probe-interval, as metrics.
    let running = start_pier(pier::run::RunOptions {
        probe_interval: Some(Duration::from_millis(300)),
        ..c.pier_options(std::net::Ipv4Addr::LOCALHOST.into(), "replica-a")
    })
    .await;
    let series = |name: &str| format!("pier_pod_network_{name}{{gateway=\"gw/edge\"}}");
    let counts = async |running: &pier::run::Running| {
        let m = metrics(running).await;
        (
            sample(&m, &series("probed_endpoints")),
            sample(&m, &series("unreachable_endpoints")),
            sample(&m, &series("tls_failed_endpoints")),
        )
    };
    poll(READY_BOUND, "3 probed, 1 unreachable", || async {
        counts(&running).await == (3.0, 1.0, 0.0)
    })
    .await;
    // ... and as a condition on the Gateway, written by pier's status writer.
    let reachable = async || {
        let s = c.status("Gateway", Some("gw"), "edge").await;
        condition(&s["conditions"], "pier.dev/PodNetworkReachable").cloned()
    };
    poll(STATUS_BOUND, "PodNetworkReachable False", || async {
        reachable().await.is_some_and(|c| c["status"] == "False")
    })
    .await;
    let cond = reachable().await.unwrap();
    assert_eq!(cond["reason"], "Unreachable");
    assert_eq!(
        cond["message"],
        format!(
            "1 of 3 sampled endpoint addresses are not reachable from pier's host: {closed} \
             (connection refused (nothing listens there))"
        )
    );
    c.delete(GATEWAY_V1, "HTTPRoute", Some("public"), "gone")
        .await;
    poll(READY_BOUND, "2 probed, none unreachable", || async {
        counts(&running).await == (2.0, 0.0, 0.0)
    })
    .await;
    poll(STATUS_BOUND, "PodNetworkReachable True", || async {
        reachable().await.is_some_and(|c| {
            c["status"] == "True"
                && c["reason"] == "Reachable"
                && c["message"] == "all 2 sampled endpoint addresses are reachable from pier's host"
        })
    })
    .await;
    running.shutdown().await;
}

/// A port on `ip` nothing listens on (bound, then released).
fn closed_port(ip: std::net::IpAddr) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A kubeconfig for ServiceAccount `pier-system/<name>`, bound to pier's Lease Role and to a
/// copy of pier's ClusterRole without `patch` on `gateways/status`.
async fn lacking_rbac(c: &Cluster, name: &str) -> PathBuf {
    let role: Value =
        serde_saphyr::from_str(include_str!("../config/rbac/clusterrole.yaml")).unwrap();
    let mut rules: Vec<Value> = role["rules"].as_array().unwrap().clone();
    let status = rules
        .iter_mut()
        .find(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .contains(&json!("gateways/status"))
        })
        .unwrap();
    let resources: Vec<Value> = status["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| *r != "gateways/status")
        .cloned()
        .collect();
    status["resources"] = json!(resources);
    rules.push(json!({
        "apiGroups": ["gateway.networking.k8s.io"],
        "resources": ["gateways/status"],
        "verbs": ["update"],
    }));
    c.apply(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": name }, "rules": rules,
    }))
    .await;
    let subject = json!([{ "kind": "ServiceAccount", "name": name, "namespace": PIER_NS }]);
    c.apply(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
        "subjects": subject,
    }))
    .await;
    c.apply(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": { "name": name, "namespace": PIER_NS },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pier-lease" },
        "subjects": subject,
    }))
    .await;
    support::bounded(c.cp.kubeconfig_for_service_account(PIER_NS, name)).await
}
