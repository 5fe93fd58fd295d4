//! The access log line and request metrics.

use std::sync::{Arc, Mutex};

use crate::support::client::{get, send, send_h2};
use crate::support::snap::*;
use crate::support::*;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The `pier::access` lines logged while `requests` (host, path, expected status; a host
/// starting `h2.` over HTTP/2 without TLS, the others over HTTP/1.1) go one by one through a proxy serving `snapshot` on port `p` with `config`. A current_thread runtime:
/// the proxy's tasks run on this thread, under the default subscriber set here.
async fn logged(
    p: u16,
    snapshot: pier::model::Snapshot,
    config: pier::proxy::ProxyConfig,
    requests: &[(&str, &str, u16)],
) -> Vec<String> {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::INFO)
        .without_time()
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);

    let h = Harness::start_with(snapshot, config).await;
    for (host, path, status) in requests {
        let resp = if host.starts_with("h2.") {
            bounded(send_h2(local(p), get(host, path))).await
        } else {
            bounded(send(local(p), get(host, path))).await
        };
        assert_eq!(resp.status, *status, "{host}{path}");
    }
    bounded(h.proxy.shutdown(BOUND)).await;

    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    text.lines()
        .filter(|l| l.contains("pier::access"))
        .map(str::to_string)
        .collect()
}

/// The lines for one `GET Log.Example.com /logged?secret=1` to an echo backend, and the
/// backend's address.
async fn access_lines(config: pier::proxy::ProxyConfig) -> (Vec<String>, String) {
    let a = echo("a").await;
    let p = free_port();
    let s = simple(p, &backend("ns/a", &[a.addr]));
    let lines = logged(
        p,
        s,
        config,
        &[("Log.Example.com", "/logged?secret=1", 200)],
    )
    .await;
    (lines, a.addr.to_string())
}

#[tokio::test]
async fn access_log_has_one_line_per_request() {
    let config = pier::proxy::ProxyConfig {
        access_log: true,
        ..config()
    };
    let (lines, upstream) = access_lines(config).await;
    let text = lines.join("\n");
    assert_eq!(lines.len(), 1, "{text}");
    let line = &lines[0];
    for field in [
        "method=GET",
        "host=Log.Example.com",
        "path=/logged",
        "protocol=HTTP/1.1",
        "status=200",
        "route=default/route",
        "backend=ns/a:80",
        &format!("upstream={upstream}"),
        "duration_ms=",
        "client=127.0.0.1:",
    ] {
        assert!(line.contains(field), "{field} missing in {line}");
    }
    assert!(!line.contains("secret"), "the query is not logged: {line}");
}

/// A request pier could not complete says why in `error` (the response flag): no route, a
/// refused connection, a backend past its timeout.
#[tokio::test]
async fn access_log_lines_name_the_failure() {
    let a = echo("a").await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let slow = rule("ns/slow")
        .to(&backend("ns/a", &[a.addr]))
        .timeouts(None, Some(std::time::Duration::from_millis(100)))
        .build();
    let refused = rule("ns/refused")
        .to(&backend("ns/gone", &[closed]))
        .build();
    let p = free_port();
    let s = snapshot(vec![port(
        p,
        vec![
            listener("http", None)
                .route(&[], prefix("/delay"), &slow)
                .route(&[], prefix("/refused"), &refused)
                .build(),
        ],
    )]);
    let config = pier::proxy::ProxyConfig {
        access_log: true,
        ..config()
    };
    let requests = [
        ("x", "/nothing", 404),
        ("x", "/refused", 502),
        ("x", "/delay/2000", 504),
        ("x", "/delay/1", 200),
    ];
    let lines = logged(p, s, config, &requests).await;
    assert_eq!(lines.len(), 4, "{lines:#?}");
    let expect = [
        ("status=404", Some("error=NoRoute")),
        ("status=502", Some("error=ConnectRefused")),
        ("status=504", Some("error=BackendTimeout")),
        ("status=200", None),
    ];
    for (line, (status, error)) in lines.iter().zip(expect) {
        assert!(line.contains(status), "{status} missing in {line}");
        match error {
            Some(e) => assert!(line.contains(e), "{e} missing in {line}"),
            None => assert!(!line.contains("error="), "{line}"),
        }
    }
}

/// `protocol` names the request's protocol as the client spoke it (HTTP/1.1 on the fast
/// path, HTTP/2 on hyper's; HTTP/3's in tests/http3.rs).
#[tokio::test]
async fn access_log_names_the_protocol() {
    let a = echo("a").await;
    let p = free_port();
    let config = pier::proxy::ProxyConfig {
        access_log: true,
        ..config()
    };
    let requests = [("h1.example", "/", 200), ("h2.example", "/", 200)];
    let lines = logged(p, simple(p, &backend("ns/a", &[a.addr])), config, &requests).await;
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(lines[0].contains(" protocol=HTTP/1.1 "), "{}", lines[0]);
    assert!(lines[1].contains(" protocol=HTTP/2 "), "{}", lines[1]);
}

/// `--access-log-fields` keeps the named fields and leaves out every other one.
#[tokio::test]
async fn access_log_fields_pick_what_a_line_carries() {
    let config = pier::proxy::ProxyConfig {
        access_log: true,
        access_log_fields: "status,path,duration_ms".parse().unwrap(),
        ..config()
    };
    let (lines, _) = access_lines(config).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    for kept in ["status=200", "path=/logged", "duration_ms="] {
        assert!(line.contains(kept), "{kept} missing in {line}");
    }
    for left_out in pier::proxy::AccessLogFields::NAMES
        .iter()
        .filter(|n| !["status", "path", "duration_ms"].contains(n))
    {
        assert!(
            !line.contains(&format!(" {left_out}=")),
            "{left_out} in {line}"
        );
    }
}

#[tokio::test]
async fn request_metrics_carry_route_backend_and_status_class() {
    let a = echo("a").await;
    let p = free_port();
    let h = Harness::start(simple(p, &backend("ns/a", &[a.addr]))).await;
    assert_eq!(
        bounded(send(local(p), get("x", "/status/503")))
            .await
            .status,
        503
    );
    let m = h.metrics_text();
    assert!(
        m.contains(r#"pier_proxy_requests_total{gateway="default/gw",listener="http",route="default/route",backend="ns/a:80",status="5xx",tls="plain"} 1"#),
        "{m}"
    );
    assert!(
        m.contains(r#"pier_proxy_request_duration_seconds_count{gateway="default/gw",listener="http",route="default/route"} 1"#),
        "{m}"
    );
    // The gauge exists; its value drops to 0 once hyper releases the response body.
    assert!(
        m.contains(r#"pier_proxy_upstream_in_flight{backend="ns/a:80"}"#),
        "{m}"
    );
    bounded(h.proxy.shutdown(BOUND)).await;
}
