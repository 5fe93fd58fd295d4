//! pier's identity from the SPIFFE Workload API, against a real SPIRE server and agent
//! (`scripts/spire.sh build`): the pier binary started with `--spiffe-socket` before the agent
//! is up fails closed and says why, gets its X.509-SVID once the agent answers, verifies a
//! meshed workload end to end (the workload's certificate is minted by the same SPIRE server
//! and its trust bundle comes from the Workload API), refuses a workload outside the trust
//! domain, and keeps a steady load at zero failures across several SVID rotations; and
//! `config/examples/spire` serves with the socket from `SPIFFE_ENDPOINT_SOCKET`.

mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::apiserver::Proc;
use support::mesh::{
    Ca, GATEWAY_CLASS, Load, Seen, Workload, conditions, gateway, namespace, route, service,
};
use support::spire::{Spire, TRUST_DOMAIN};
use support::web::{eventually, get, try_get};
use support::*;

/// pier's SPIFFE ID, registered for the test's uid.
const PIER_ID: &str = "spiffe://example.org/pier";
/// The meshed workload's SPIFFE ID (minted by the SPIRE server).
const WEB_ID: &str = "spiffe://example.org/ns/app/sa/web";
/// pier's X.509-SVID TTL. SPIRE backdates an SVID's notBefore by 10 s and rotates it past half
/// its lifetime, so pier gets a new one every ~10 s (+ the agent's 5 s sync); three rotations
/// fit in well under a minute.
const SVID_TTL_SECS: u64 = 30;
/// Rotations the load must run across.
const ROTATIONS: usize = 3;

/// The mesh stanza: every route meshed, the trust bundle from the Workload API.
fn mesh_stanza() -> String {
    format!(
        "  mesh:\n    trustBundle:\n      - {{group: pier.dev, kind: SPIFFEWorkloadAPI, name: {TRUST_DOMAIN}}}\n"
    )
}

/// The pier binary on `dir`, its admin server on `admin`, with extra arguments; output to
/// `log`.
fn spawn_pier(dir: &Path, admin: SocketAddr, extra: &[String], log: &Path) -> Proc {
    spawn_pier_with_env(dir, admin, extra, &[], log)
}

fn spawn_pier_with_env(
    dir: &Path,
    admin: SocketAddr,
    extra: &[String],
    env: &[(&str, &str)],
    log: &Path,
) -> Proc {
    let mut args = vec![
        "run".to_string(),
        "--manifests".into(),
        dir.display().to_string(),
        "--listen-host".into(),
        "127.0.0.1".into(),
        "--admin".into(),
        admin.to_string(),
    ];
    args.extend_from_slice(extra);
    Proc::spawn_with_env(
        "pier",
        Path::new(env!("CARGO_BIN_EXE_pier")),
        &args,
        env,
        log.to_path_buf(),
    )
}

async fn status(admin: SocketAddr) -> serde_json::Value {
    get(&format!("http://{admin}/status"), &[]).await.json()
}

/// Gateway `gw/edge`'s `pier.dev/BackendTLS` condition: (status, reason, message).
async fn backend_tls(admin: SocketAddr) -> (String, String, String) {
    conditions(&status(admin).await, "Gateway", "gw", "edge")
        .remove("pier.dev/BackendTLS")
        .expect("a pier.dev/BackendTLS condition")
}

async fn seen(port: u16, host: &str) -> (u16, Option<Seen>) {
    let r = get(&format!("http://127.0.0.1:{port}/"), &[("host", host)]).await;
    let s = (r.status == 200).then(|| serde_json::from_slice(&r.body).unwrap());
    (r.status.as_u16(), s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pier_gets_its_identity_from_spire_and_rotates_it_under_load() {
    init();
    let started = Instant::now();
    let mut spire = Spire::start_server().await;
    // pier is the only process of this uid that asks the agent; the test's own uid is the
    // simplest selector that needs no discovery of binary paths.
    let uid = std::fs::metadata(spire.dir()).unwrap().uid();
    spire.register(PIER_ID, &format!("unix:uid:{uid}"), SVID_TTL_SECS);
    let bundle = spire.bundle();
    // The workload's certificate comes from the same SPIRE server; it requires client
    // certificates from that trust domain.
    let web =
        Workload::spawn_trusting([127, 0, 0, 1].into(), &spire.mint(WEB_ID), &bundle, false).await;
    // A workload whose certificate does not chain to the SPIRE bundle.
    let rogue_ca = Ca::new("rogue CA");
    let rogue = Workload::spawn_trusting(
        [127, 0, 0, 1].into(),
        &rogue_ca.workload("spiffe://example.org/ns/app/sa/rogue"),
        &bundle,
        false,
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let manifests = [
        GATEWAY_CLASS.to_string(),
        gateway(port, &mesh_stanza()),
        namespace("app", ""),
        service("app", "web", web.addr),
        service("app", "rogue", rogue.addr),
        route("app", "web", "", "web"),
        route("app", "rogue", "", "rogue"),
    ];
    std::fs::write(dir.path().join("all.yaml"), manifests.join("---\n")).unwrap();

    // pier starts before the agent: it comes up, meshed routes fail closed and the status says
    // it is waiting for the Workload API.
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let socket = spire.agent_socket();
    let mut pier = spawn_pier(
        dir.path(),
        admin,
        &["--spiffe-socket".into(), socket.display().to_string()],
        &spire.dir().join("pier.log"),
    );
    let ready = eventually(Duration::from_secs(30), || async {
        try_get(&format!("http://{admin}/readyz"), &[])
            .await
            .is_some_and(|r| r.status == 200)
    })
    .await;
    pier.assert_running();
    let (ok, reason, msg) = backend_tls(admin).await;
    assert_eq!(
        (ok.as_str(), reason.as_str()),
        ("False", "NoClientCertificate"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!(
            "no X.509-SVID from the SPIFFE Workload API at unix://{} yet",
            socket.display()
        )),
        "{msg}"
    );
    assert_eq!(seen(port, "web.example").await.0, 503);
    eprintln!("pier ready without the agent after {ready:?}");

    // The agent comes up: pier gets its SVID and the bundle, and the meshed request verifies
    // both ways.
    spire.start_agent().await;
    let waited = eventually(Duration::from_secs(30), || async {
        backend_tls(admin).await.0 == "True"
    })
    .await;
    eprintln!("first SVID published {waited:?} after the agent was healthy");
    let (_, _, msg) = backend_tls(admin).await;
    assert!(
        msg.contains(&format!(
            "client certificate is the X.509-SVID {PIER_ID} from the SPIFFE Workload API"
        )),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("bundle for trust domain {TRUST_DOMAIN}")),
        "{msg}"
    );
    let (code, first) = seen(port, "web.example").await;
    assert_eq!(code, 200);
    let first = first.unwrap();
    assert_eq!(first.client_uris, [PIER_ID]);
    let first_serial = first.client_serial.clone().unwrap();

    // Outside the trust domain: refused before any request is sent.
    let before = rogue.count();
    assert_eq!(seen(port, "rogue.example").await.0, 502);
    assert_eq!(rogue.count(), before);

    // A steady load across several rotations: no failure, and the workload sees each new
    // certificate.
    let load_started = Instant::now();
    let load = Load::start(SocketAddr::from(([127, 0, 0, 1], port)), "web.example", 4);
    let bound = Duration::from_secs(SVID_TTL_SECS * (ROTATIONS as u64 + 2));
    let serials = |w: &Workload| {
        w.requests()
            .into_iter()
            .filter_map(|s| s.client_serial)
            .collect::<BTreeSet<_>>()
    };
    let rotated = tokio::time::timeout(bound, async {
        while serials(&web).len() < ROTATIONS + 1 {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    let report = load.stop().await;
    pier.assert_running();
    assert!(
        rotated.is_ok(),
        "fewer than {ROTATIONS} rotations within {bound:?}: serials {:?}\n{}",
        serials(&web),
        spire.logs()
    );
    let failures = report.failures();
    assert!(
        failures.is_empty(),
        "{} of {} requests failed across the rotations: {:?}\npier log:\n{}",
        failures.len(),
        report.total(),
        failures.iter().take(5).collect::<Vec<_>>(),
        pier.tail()
    );
    assert!(report.total() > 100, "too little load: {}", report.total());
    let all = serials(&web);
    assert!(all.contains(&first_serial));
    // Every request the workload saw came from pier's SPIFFE ID, whatever the certificate.
    assert!(
        web.requests().iter().all(|s| s.client_uris == [PIER_ID]),
        "a request without pier's SPIFFE ID"
    );
    eprintln!(
        "{} requests in {:?}, 0 failures, {} certificates seen; test took {:?}",
        report.total(),
        load_started.elapsed(),
        all.len(),
        started.elapsed()
    );
}

/// `config/examples/spire` as the manual (docs/src/spire.md) runs it (ports moved to free ones; the test's SPIRE
/// server and agent stand in for the example's `server.conf`/`agent.conf`, same trust
/// domain), with the Workload API socket from `SPIFFE_ENDPOINT_SOCKET` instead of the flag:
/// pier presents its SVID to the example's workload, whose certificate SPIRE minted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spire_example_serves_with_the_socket_from_the_environment() {
    const EXAMPLE: &str = "config/examples/spire";
    init();
    let mut spire = Spire::start_server().await;
    let uid = std::fs::metadata(spire.dir()).unwrap().uid();
    spire.register(PIER_ID, &format!("unix:uid:{uid}"), 3600);
    spire.start_agent().await;
    let bundle = spire.bundle();
    let web = Workload::spawn_trusting(
        [127, 0, 0, 1].into(),
        &spire.mint("spiffe://example.org/ns/shop/sa/web"),
        &bundle,
        false,
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    for (f, from, to) in [
        ("00-gateway.yaml", "port: 8080", format!("port: {port}")),
        ("10-backends.yaml", "18443", web.addr.port().to_string()),
    ] {
        let text = std::fs::read_to_string(format!("{EXAMPLE}/{f}")).unwrap();
        assert!(text.contains(from), "{from} not in {f}");
        std::fs::write(dir.path().join(f), text.replace(from, &to)).unwrap();
    }
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let socket = format!("unix://{}", spire.agent_socket().display());
    let mut pier = spawn_pier_with_env(
        dir.path(),
        admin,
        &[],
        &[("SPIFFE_ENDPOINT_SOCKET", &socket)],
        &spire.dir().join("pier.log"),
    );
    eventually(Duration::from_secs(30), || async {
        try_get(&format!("http://{admin}/readyz"), &[])
            .await
            .is_some_and(|r| r.status == 200)
    })
    .await;
    let backend_tls = || async {
        conditions(&status(admin).await, "Gateway", "shop-gw", "edge")
            .remove("pier.dev/BackendTLS")
            .expect("a pier.dev/BackendTLS condition")
    };
    eventually(Duration::from_secs(30), || async {
        backend_tls().await.0 == "True"
    })
    .await;
    pier.assert_running();
    let (_, _, msg) = backend_tls().await;
    assert!(
        msg.contains(&format!(
            "client certificate is the X.509-SVID {PIER_ID} from the SPIFFE Workload API at {socket}"
        )),
        "{msg}"
    );
    let (code, s) = seen(port, "shop.example").await;
    assert_eq!(code, 200, "{}", pier.tail());
    let s = s.unwrap();
    assert!(s.tls);
    assert_eq!(s.client_uris, [PIER_ID]);
    assert_eq!(web.count(), 1);
}

#[test]
fn spiffe_socket_and_client_cert_conflict() {
    let out = Command::new(env!("CARGO_BIN_EXE_pier"))
        .args([
            "run",
            "--manifests",
            ".",
            "--spiffe-socket",
            "/nonexistent.sock",
            "--client-cert",
            "c.pem",
            "--client-key",
            "k.pem",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--spiffe-socket"), "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
}

#[test]
fn a_bad_spiffe_endpoint_socket_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pier"))
        .args(["run", "--manifests"])
        .arg(dir.path())
        .env("SPIFFE_ENDPOINT_SOCKET", "unix://host/agent.sock")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("SPIFFE_ENDPOINT_SOCKET"), "{err}");
}
