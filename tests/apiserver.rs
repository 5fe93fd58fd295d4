//! Against a real kube-apiserver + etcd (`support::apiserver`): `config/crds/` installs and
//! serves pier's types, `spec.mesh` is pruned by the plain Gateway CRD and kept by
//! `config/crds/mesh/gateway-with-mesh.yaml`, pier's own SecurityPolicy CRD
//! (`config/crds/pier/`) is structural and keeps every field pier reads, and data survives an
//! API server outage.
//!
//! Needs the binaries from `scripts/control-plane.sh build`; fails (does not skip) without them.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use support::apiserver::{ControlPlane, poll};
use support::bounded;

const NS: &str = "smoke";

fn crds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/crds")
}

fn gateway(name: &str, mesh: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": { "name": name, "namespace": NS },
        "spec": {
            "gatewayClassName": "pier",
            "listeners": [{ "name": "http", "protocol": "HTTP", "port": 8080 }],
            "mesh": mesh,
        }
    }))
    .unwrap()
}

/// GEP-3951: one ConfigMap reference and `labelSelector`.
fn mesh_gep3951() -> Value {
    json!({
        "trustBundle": { "name": "mesh-trust-bundle", "namespace": "mesh", "bundleKey": "ca-bundle.crt" },
        "labelSelector": { "matchLabels": { "mesh": "one" } },
    })
}

/// GEP-3792: a list of object references and `selector`.
fn mesh_gep3792() -> Value {
    json!({
        "trustBundle": [
            { "group": "", "kind": "ConfigMap", "name": "root-ca", "namespace": "mesh" },
            { "kind": "Secret", "name": "other-ca" },
        ],
        "selector": { "matchExpressions": [{ "key": "mesh", "operator": "In", "values": ["one"] }] },
    })
}

async fn create_namespace(client: &kube::Client) {
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NS } })).unwrap();
    bounded(Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns))
        .await
        .unwrap();
}

async fn create_gateway_class(client: &kube::Client) {
    let gc: GatewayClass = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "GatewayClass",
        "metadata": { "name": "pier" },
        "spec": { "controllerName": pier::DEFAULT_CONTROLLER_NAME },
    }))
    .unwrap();
    bounded(Api::<GatewayClass>::all(client.clone()).create(&PostParams::default(), &gc))
        .await
        .unwrap();
}

async fn create_http_route(client: &kube::Client) {
    let route: HttpRoute = serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": { "name": "web", "namespace": NS },
        "spec": {
            "parentRefs": [{ "name": "plain" }],
            "hostnames": ["example.com"],
            "rules": [{
                "matches": [{ "path": { "type": "PathPrefix", "value": "/api" } }],
                "backendRefs": [{ "name": "api", "port": 8080 }],
            }],
        },
    }))
    .unwrap();
    let api = Api::<HttpRoute>::namespaced(client.clone(), NS);
    let created = bounded(api.create(&PostParams::default(), &route))
        .await
        .unwrap();
    assert_eq!(
        created.spec.rules.unwrap()[0]
            .backend_refs
            .as_ref()
            .unwrap()[0]
            .name,
        "api"
    );
}

/// Established, structural, and accepted under the `*.k8s.io` API approval policy. The
/// approval condition is set by its own controller, after Established: poll for it.
async fn assert_crds_conformant(client: &kube::Client, names: &[String]) {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for name in names {
        let conditions = || async {
            let crd = bounded(api.get(name)).await.unwrap();
            crd.status.and_then(|s| s.conditions).unwrap_or_default()
        };
        let approval = "KubernetesAPIApprovalPolicyConformant";
        // Only `*.k8s.io` groups are under the approval policy (`x-k8s.io` is not).
        let protected = name.ends_with(".k8s.io") || name.ends_with(".kubernetes.io");
        if !protected {
            let established = || async {
                (conditions().await)
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            };
            poll(
                Duration::from_secs(10),
                &format!("{name} Established"),
                established,
            )
            .await;
            continue;
        }
        poll(
            Duration::from_secs(10),
            &format!("{name} {approval}"),
            || async { conditions().await.iter().any(|c| c.type_ == approval) },
        )
        .await;
        let conditions = conditions().await;
        let status = |t: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| c.status.as_str())
        };
        assert_eq!(
            status("Established"),
            Some("True"),
            "{name}: {conditions:?}"
        );
        assert_eq!(
            status("NonStructuralSchema"),
            None,
            "{name}: {conditions:?}"
        );
        assert_eq!(status(approval), Some("True"), "{name}: {conditions:?}");
    }
}

fn gateways(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::erase::<Gateway>(&());
    Api::namespaced_with(client.clone(), NS, &ar)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_mesh_variant_and_apiserver_restart() {
    let mut cp = ControlPlane::start().await;
    let client = cp.admin_client();

    let installed = cp.install_crds(crds_dir()).await;
    assert_eq!(installed.len(), 11, "{installed:?}");
    assert_crds_conformant(&client, &installed).await;
    create_namespace(&client).await;
    create_gateway_class(&client).await;
    create_http_route(&client).await;
    let gws = gateways(&client);

    // The plain (generated) Gateway CRD prunes spec.mesh: the reason the variant exists.
    let plain = bounded(gws.create(&PostParams::default(), &gateway("plain", mesh_gep3951())))
        .await
        .unwrap();
    assert!(plain.data["spec"].get("mesh").is_none(), "{:#}", plain.data);
    assert_eq!(plain.data["spec"]["listeners"][0]["port"], 8080);

    // The mesh variant keeps it. Replacing a CRD's schema takes effect asynchronously, so poll
    // with dry-run creates (which prune exactly like real ones) until mesh survives.
    cp.install_crds(crds_dir().join("mesh")).await;
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    poll(
        Duration::from_secs(30),
        "the mesh schema to take effect",
        || async {
            let probe = gateway("probe", mesh_gep3951());
            gws.create(&dry, &probe)
                .await
                .is_ok_and(|o| o.data["spec"].get("mesh").is_some())
        },
    )
    .await;

    for (name, mesh) in [("gep3951", mesh_gep3951()), ("gep3792", mesh_gep3792())] {
        let mut sent = mesh.clone();
        // Unknown fields inside `mesh` are still pruned: only trustBundle is untyped.
        sent["unknown"] = json!("pruned");
        bounded(gws.create(&PostParams::default(), &gateway(name, sent)))
            .await
            .unwrap();
        let read = bounded(gws.get(name)).await.unwrap();
        assert_eq!(read.data["spec"]["mesh"], mesh, "{name}");
        // pier's typed Gateway still reads it (and ignores mesh).
        let typed = bounded(Api::<Gateway>::namespaced(client.clone(), NS).get(name))
            .await
            .unwrap();
        assert_eq!(typed.spec.listeners[0].port, 8080);
    }
    // An object stored while the plain CRD was installed stays pruned.
    let plain = bounded(gws.get("plain")).await.unwrap();
    assert!(plain.data["spec"].get("mesh").is_none());

    // Outage: the API server goes away for 3 s, comes back on the same port with the same
    // etcd, and the same long-lived client lists everything again.
    cp.stop_apiserver();
    let t = std::time::Instant::now();
    let down = tokio::time::timeout(Duration::from_secs(5), gws.list(&ListParams::default())).await;
    assert!(
        !matches!(down, Ok(Ok(_))),
        "list succeeded with the API server down"
    );
    eprintln!("while down, list failed in {:?}: {down:?}", t.elapsed());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let t = std::time::Instant::now();
    cp.start_apiserver().await;
    eprintln!("kube-apiserver ready again in {:?}", t.elapsed());

    // The first request may still race the restart; retry within a bound.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let list = loop {
        match bounded(gws.list(&ListParams::default())).await {
            Ok(list) => break list,
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("list after restart: {e}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("listing Gateways after the restart: {e}"),
        }
    };
    let mut names: Vec<String> = list
        .items
        .iter()
        .filter_map(|g| g.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["gep3792", "gep3951", "plain"]);
    let read = bounded(gws.get("gep3792")).await.unwrap();
    assert_eq!(read.data["spec"]["mesh"], mesh_gep3792());
}

/// `config/crds/pier/` installs (Established, structural; `pier.dev` is not a protected group,
/// so no API approval is asked), a BackendTrafficPolicy with every field reads back unchanged,
/// and a SecurityPolicy using every part
/// of the spec reads back as pier's typed struct unchanged: the schema prunes nothing pier
/// reads. Its status subresource takes `ancestors`.
#[tokio::test]
async fn security_policy_crd_installs_and_keeps_every_field() {
    use pier::translate::api::SecurityPolicy;
    let cp = ControlPlane::start().await;
    let client = cp.admin_client();
    let mut installed = cp.install_crds(crds_dir().join("pier")).await;
    installed.sort();
    assert_eq!(
        installed,
        [
            "backendtrafficpolicies.pier.dev",
            "clienttrafficpolicies.pier.dev",
            "securitypolicies.pier.dev"
        ]
    );
    for name in &installed {
        let crd = bounded(Api::<CustomResourceDefinition>::all(client.clone()).get(name))
            .await
            .unwrap();
        let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        let status = |t: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| c.status.as_str())
        };
        assert_eq!(
            status("Established"),
            Some("True"),
            "{name}: {conditions:?}"
        );
        assert_eq!(
            status("NonStructuralSchema"),
            None,
            "{name}: {conditions:?}"
        );
    }
    create_namespace(&client).await;

    // A BackendTrafficPolicy using every field it has reads back unchanged.
    {
        use pier::translate::api::BackendTrafficPolicy;
        let sent = json!({
            "apiVersion": "pier.dev/v1alpha1",
            "kind": "BackendTrafficPolicy",
            "metadata": { "name": "limits", "namespace": NS },
            "spec": {
                "targetRefs": [
                    { "group": "gateway.networking.k8s.io", "kind": "GRPCRoute", "name": "rpc",
                      "sectionName": "read" },
                ],
                "rateLimit": { "local": { "rules": [{
                    "clientSelectors": [{
                        "headers": [
                            { "name": "x-user", "type": "Distinct" },
                            { "name": "x-plan", "type": "RegularExpression", "value": "free|trial",
                              "invert": true },
                        ],
                        "sourceCIDR": { "type": "Distinct", "value": "10.0.0.0/8" },
                        "methods": [{ "value": "GET", "invert": false }],
                        "path": { "type": "PathPrefix", "value": "/api", "invert": false },
                    }],
                    "limit": { "requests": 10, "unit": "Minute" },
                    "shared": true,
                }] } },
            },
        });
        let typed: BackendTrafficPolicy = serde_json::from_value(sent.clone()).unwrap();
        let api = Api::<BackendTrafficPolicy>::namespaced(client.clone(), NS);
        bounded(api.create(&PostParams::default(), &typed))
            .await
            .unwrap();
        let read = bounded(api.get("limits")).await.unwrap();
        assert_eq!(read.spec, typed.spec, "nothing pruned");
    }

    let sent = json!({
        "apiVersion": "pier.dev/v1alpha1",
        "kind": "SecurityPolicy",
        "metadata": { "name": "auth", "namespace": NS },
        "spec": {
            "targetRefs": [
                { "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "web" },
                { "group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw",
                  "sectionName": "https" },
            ],
            "basicAuth": { "users": { "name": "htpasswd" }, "forwardUsernameHeader": "x-user" },
            "apiKeyAuth": {
                "credentialRefs": [{ "kind": "Secret", "name": "keys", "namespace": "other" }],
                "extractFrom": [{ "headers": ["x-api-key"], "params": ["key"], "cookies": ["k"] }],
                "forwardClientIDHeader": "x-client",
                "sanitize": true,
            },
            "jwt": {
                "optional": false,
                "providers": [{
                    "name": "idp",
                    "issuer": "https://idp.example",
                    "audiences": ["web"],
                    "remoteJWKS": { "uri": "https://idp.example/jwks", "cacheDuration": "10m" },
                    "localJWKS": { "type": "ValueRef", "valueRef": { "kind": "ConfigMap", "name": "jwks" } },
                    "claimToHeaders": [{ "header": "x-sub", "claim": "sub" }],
                    "extractFrom": { "headers": [{ "name": "authorization", "valuePrefix": "Bearer " }] },
                }],
            },
            "authorization": {
                "defaultAction": "Deny",
                "rules": [{
                    "name": "admins",
                    "action": "Allow",
                    "operation": { "methods": ["GET"] },
                    "principal": {
                        "clientCIDRs": ["10.0.0.0/8"],
                        "jwt": { "provider": "idp", "scopes": ["read"],
                                 "claims": [{ "name": "groups", "values": ["admin"] }] },
                        "headers": [{ "name": "x-team", "values": ["a"] }],
                    },
                }],
            },
        },
    });
    let typed: SecurityPolicy = serde_json::from_value(sent.clone()).unwrap();
    let api = Api::<SecurityPolicy>::namespaced(client.clone(), NS);
    bounded(api.create(&PostParams::default(), &typed))
        .await
        .unwrap();
    let read = bounded(api.get("auth")).await.unwrap();
    assert_eq!(read.spec, typed.spec, "nothing pruned");
    let raw = bounded(
        Api::<DynamicObject>::namespaced_with(
            client.clone(),
            NS,
            &ApiResource::erase::<SecurityPolicy>(&()),
        )
        .get("auth"),
    )
    .await
    .unwrap();
    assert_eq!(
        raw.data["spec"], sent["spec"],
        "as written, field for field"
    );

    // An unknown field is pruned, as for every CRD under apiextensions.k8s.io/v1.
    let mut extra = sent.clone();
    extra["metadata"]["name"] = json!("extra");
    extra["spec"]["basicAuth"]["realm"] = json!("pruned");
    let extra: DynamicObject = serde_json::from_value(extra).unwrap();
    let dynamic = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::erase::<SecurityPolicy>(&()),
    );
    let created = bounded(dynamic.create(&PostParams::default(), &extra))
        .await
        .unwrap();
    assert!(created.data["spec"]["basicAuth"].get("realm").is_none());

    // The status subresource takes GEP-713 ancestors.
    let status = json!({
        "apiVersion": "pier.dev/v1alpha1",
        "kind": "SecurityPolicy",
        "metadata": { "name": "auth", "namespace": NS },
        "status": { "ancestors": [{
            "ancestorRef": { "group": "gateway.networking.k8s.io", "kind": "Gateway",
                             "name": "gw", "namespace": NS },
            "controllerName": pier::DEFAULT_CONTROLLER_NAME,
            "conditions": [{ "type": "Accepted", "status": "True", "reason": "Accepted",
                             "message": "", "observedGeneration": 1,
                             "lastTransitionTime": "2020-01-01T00:00:00Z" }],
        }] },
    });
    let pp = kube::api::PatchParams::apply("pier-tests").force();
    bounded(api.patch_status("auth", &pp, &kube::api::Patch::Apply(&status)))
        .await
        .unwrap();
    let read = bounded(api.get("auth")).await.unwrap();
    let ancestors = read.status.unwrap().ancestors;
    assert_eq!(ancestors.len(), 1);
    assert_eq!(ancestors[0].controller_name, pier::DEFAULT_CONTROLLER_NAME);
    assert_eq!(
        read.spec, typed.spec,
        "a status write leaves the spec alone"
    );
}

/// A least-privilege identity: a ServiceAccount token from the TokenRequest API is
/// authenticated, and RBAC denies what it was not granted.
#[tokio::test]
async fn service_account_kubeconfig_is_subject_to_rbac() {
    let cp = ControlPlane::start().await;
    let admin = cp.admin_client();
    create_namespace(&admin).await;

    let kubeconfig = bounded(cp.kubeconfig_for_service_account(NS, "pier")).await;
    let sa = cp.client_from(&kubeconfig).await;
    let err = bounded(Api::<Namespace>::all(sa.clone()).list(&ListParams::default()))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(e) => {
            assert_eq!(e.code, 403, "{e:?}");
            assert!(
                e.message.contains("system:serviceaccount:smoke:pier"),
                "{e:?}"
            );
        }
        e => panic!("expected 403, got {e}"),
    }

    let user = cp.kubeconfig_for_user("alice", Some("devs"));
    let alice = cp.client_from(&user).await;
    let err = bounded(Api::<Namespace>::all(alice).get("default"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref e) if e.code == 403),
        "{err}"
    );
}
