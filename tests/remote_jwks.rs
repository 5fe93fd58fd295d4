//! `remoteJWKS` end to end: `pier run` fetches a key set from a real HTTPS server (its
//! certificate from a test CA that pier trusts through `SSL_CERT_FILE`), follows a key
//! rotation after one refused token, keeps the last good keys while the server is down (metric
//! and status say so), and a flood of tokens with forged `kid`s makes no extra fetch.

mod support;

use std::time::Duration;

use serde_json::json;
use support::jwks_server::JwksServer;
use support::jwt::{Issuer, now};
use support::pki::Pki;
use support::web::*;
use support::*;

/// A SecurityPolicy on Route `name` with one provider reading `uri`, and the Route.
fn manifests(port: u16, echo: std::net::SocketAddr, policies: &[(&str, &str, &str)]) -> String {
    let mut out = format!("{}---\n{}---\n", gateway(port), service("a", echo));
    for (name, uri, cache) in policies {
        out.push_str(&route(name, &format!("/{name}"), "a"));
        out.push_str(&format!(
            "---
apiVersion: pier.dev/v1alpha1
kind: SecurityPolicy
metadata: {{name: {name}, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: {name}}}]
  jwt:
    providers:
    - name: idp
      issuer: https://issuer.test
      remoteJWKS: {{uri: \"{uri}\", cacheDuration: {cache}}}
---
"
        ));
    }
    out
}

fn token(issuer: &Issuer) -> String {
    issuer.token(&json!({"iss": "https://issuer.test", "sub": "u", "exp": now() + 600}))
}

async fn status_of(url: &str, path: &str, token: &str) -> u16 {
    let auth = format!("Bearer {token}");
    get(&format!("{url}{path}"), &[("authorization", &auth)])
        .await
        .status
        .as_u16()
}

/// The `pier.dev/RemoteJWKS` condition of SecurityPolicy `name`, from `/status`.
async fn condition(admin: u16, name: &str) -> serde_json::Value {
    let status = get(&format!("http://127.0.0.1:{admin}/status"), &[])
        .await
        .json();
    let policy = status
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "SecurityPolicy" && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no status for {name}: {status}"))
        .clone();
    let conditions = policy["status"]["ancestors"][0]["conditions"]
        .as_array()
        .unwrap()
        .clone();
    conditions
        .into_iter()
        .find(|c| c["type"] == "pier.dev/RemoteJWKS")
        .unwrap_or_else(|| panic!("no pier.dev/RemoteJWKS condition: {policy}"))
}

async fn metrics(admin: u16) -> String {
    let r = get(&format!("http://127.0.0.1:{admin}/metrics"), &[]).await;
    String::from_utf8(r.body.to_vec()).unwrap()
}

/// The CA's PEM in a file, for pier's `SSL_CERT_FILE`.
fn ca_file(pki: &Pki, dir: &std::path::Path) -> String {
    let path = dir.join("ca.pem");
    std::fs::write(&path, pki.ca_pem()).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test]
async fn a_rotated_key_is_fetched_once_and_forged_kids_cause_no_fetch_storm() {
    let pki = Pki::new();
    let k1 = Issuer::new("k1");
    let server = JwksServer::start(&pki, k1.jwks()).await;
    let echo = echo("a").await;
    let (dir, port, admin) = (tempfile::tempdir().unwrap(), free_port(), free_port());
    let text = manifests(port, echo.addr, &[("api", &server.uri(), "300s")]);
    std::fs::write(dir.path().join("all.yaml"), text).unwrap();
    let ca = ca_file(&pki, dir.path());
    let _pier = start_pier(dir.path(), admin, &[("SSL_CERT_FILE", &ca)], &[]).await;
    let url = format!("http://127.0.0.1:{port}");

    assert_eq!(status_of(&url, "/api", &token(&k1)).await, 200);
    assert_eq!(server.fetches(), 1, "one fetch at start");
    assert_eq!(condition(admin, "api").await["status"], "True");

    // Rotation: the set now holds k2 only. The first k2 token is refused (nothing waits for
    // the fetch it triggers); soon after, k2 tokens pass and k1 ones do not.
    let k2 = Issuer::new("k2");
    server.set(k2.jwks());
    let t2 = token(&k2);
    assert_eq!(status_of(&url, "/api", &t2).await, 401);
    let took = eventually(Duration::from_secs(5), || {
        let (url, t2) = (url.clone(), t2.clone());
        async move { status_of(&url, "/api", &t2).await == 200 }
    })
    .await;
    eprintln!("rotation: k2 accepted {took:?} after its first token was refused");
    assert_eq!(status_of(&url, "/api", &token(&k1)).await, 401);
    assert_eq!(server.fetches(), 2, "the unknown kid made one fetch");

    // A flood of tokens naming kids the set lacks: each refused, none makes a fetch (one
    // unknown-kid fetch per 30 s, and the rotation's was just now).
    let forger = Issuer::new("k1");
    for i in 0..200 {
        let forged = Issuer::new(&format!("forged-{i}"));
        let t = if i % 2 == 0 {
            token(&forged)
        } else {
            token(&forger)
        };
        assert_eq!(status_of(&url, "/api", &t).await, 401);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.fetches(), 2, "forged kids caused fetches");
    let m = metrics(admin).await;
    assert!(
        m.contains(&format!(
            "pier_jwks_fetches_total{{uri=\"{}\",trigger=\"UnknownKid\",result=\"Ok\"}} 1",
            server.uri()
        )),
        "{m}"
    );
    assert_eq!(status_of(&url, "/api", &t2).await, 200);
}

#[tokio::test]
async fn a_server_down_keeps_the_last_good_keys_and_says_so() {
    let pki = Pki::new();
    let k1 = Issuer::new("k1");
    let server = JwksServer::start(&pki, k1.jwks()).await;
    let echo = echo("a").await;
    let (dir, port, admin) = (tempfile::tempdir().unwrap(), free_port(), free_port());
    let refused = format!("https://localhost:{}/jwks", refused_addr().port());
    let text = manifests(
        port,
        echo.addr,
        &[
            ("api", &server.uri(), "1s"),
            ("never", &refused, "1s"),
            ("plain", "http://192.0.2.1/jwks", "1s"),
        ],
    );
    std::fs::write(dir.path().join("all.yaml"), text).unwrap();
    let ca = ca_file(&pki, dir.path());
    let _pier = start_pier(dir.path(), admin, &[("SSL_CERT_FILE", &ca)], &[]).await;
    let url = format!("http://127.0.0.1:{port}");
    let t1 = token(&k1);
    assert_eq!(status_of(&url, "/api", &t1).await, 200);

    // A set never fetched: fail closed (401), and the status says why.
    assert_eq!(status_of(&url, "/never", &t1).await, 401);
    let c = condition(admin, "never").await;
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&json!("False"), &json!("FetchFailed"))
    );
    assert!(
        c["message"].as_str().unwrap().contains("refused (401)"),
        "{c}"
    );
    // Plaintext to a non-loopback address: the policy is invalid (500, fail closed).
    assert_eq!(status_of(&url, "/plain", &t1).await, 500);

    server.set_up(false);
    eventually(Duration::from_secs(10), || async move {
        condition(admin, "api").await["reason"] == "FetchFailed"
    })
    .await;
    let c = condition(admin, "api").await;
    assert_eq!(c["status"], "False");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("last good fetch stay in use"),
        "{c}"
    );
    assert_eq!(
        status_of(&url, "/api", &t1).await,
        200,
        "the last good keys"
    );
    let m = metrics(admin).await;
    let down = format!(
        "pier_jwks_fetches_total{{uri=\"{}\",trigger=\"Schedule\",result=\"Unreachable\"}}",
        server.uri()
    );
    assert!(m.contains(&down), "{m}");

    server.set_up(true);
    eventually(Duration::from_secs(10), || async move {
        condition(admin, "api").await["status"] == "True"
    })
    .await;
    assert_eq!(status_of(&url, "/api", &t1).await, 200);
}
