//! Golden translation tests: every `tests/fixtures/translate/*.in.yaml` (manifests, as users
//! write them) is translated and compared with its `*.out.yaml`: the statuses pier would write
//! plus a stable summary of the snapshot. `PIER_BLESS=1 cargo test --test translate` rewrites
//! the outputs; review the YAML diff.
//!
//! A fixture may select one Gateway with a first-line comment `# settings.gateway: NS/NAME`.

use std::path::{Path, PathBuf};

use pier::model::ext_auth::PreRoute;
use pier::model::retry::RetryConstraint;
use pier::model::{
    AppProtocol, BackendTarget, BackendTls, CertTable, ClientAuth, Filters, Port, Protocol,
    RequestMatch, RetryPolicy, Snapshot, Timeouts, TlsMode, WeightedBackend,
};
use pier::translate::{Resources, Settings, StatusObject, parse_manifests, translate};
use serde::Serialize;

#[derive(Serialize)]
struct Golden<'a> {
    status: Vec<StatusObject<'a>>,
    snapshot: SnapshotSummary<'a>,
}

#[derive(Serialize)]
struct SnapshotSummary<'a> {
    ports: Vec<PortSummary<'a>>,
}

#[derive(Serialize)]
struct PortSummary<'a> {
    port: u16,
    protocol: Protocol,
    #[serde(skip_serializing_if = "Option::is_none")]
    certs: Option<&'a CertTable>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_auth: Option<&'a ClientAuth>,
    /// The QUIC endpoint of an HTTPS port serving HTTP/3.
    #[serde(skip_serializing_if = "Option::is_none")]
    quic: Option<&'a pier::model::Quic>,
    listeners: Vec<ListenerSummary<'a>>,
}

#[derive(Serialize)]
struct ListenerSummary<'a> {
    listener: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    hostname: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    passthrough: bool,
    /// Listener filters (GEP-5224), as the data plane runs them.
    #[serde(rename = "preRoute", skip_serializing_if = "Option::is_none")]
    pre_route: Option<&'a PreRoute>,
    /// HTTP/3 served: the `Alt-Svc` its TCP responses carry.
    #[serde(rename = "altSvc", skip_serializing_if = "Option::is_none")]
    alt_svc: Option<&'a str>,
    routes: Vec<EntrySummary<'a>>,
}

#[derive(Serialize)]
struct EntrySummary<'a> {
    host: String,
    #[serde(rename = "match")]
    matcher: &'a RequestMatch,
    route: String,
    rule: usize,
    #[serde(skip_serializing_if = "Filters::is_empty")]
    filters: &'a Filters,
    backends: Vec<BackendSummary<'a>>,
    #[serde(skip_serializing_if = "is_default_timeouts")]
    timeouts: &'a Timeouts,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry: Option<&'a RetryPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<&'a pier::model::session::SessionPolicy>,
}

#[derive(Serialize)]
struct BackendSummary<'a> {
    weight: u32,
    backend: String,
    #[serde(skip_serializing_if = "is_http1")]
    protocol: AppProtocol,
    endpoints: Vec<String>,
    /// `plain`, `tls(mesh|policy, sni=…, trust_key=…)` or `unavailable(reason)`.
    tls: String,
    #[serde(skip_serializing_if = "Filters::is_empty")]
    filters: &'a Filters,
    /// Its Service's XBackendTrafficPolicy retry budget.
    #[serde(rename = "retryConstraint", skip_serializing_if = "Option::is_none")]
    retry_constraint: Option<RetryConstraint>,
}

fn is_default_timeouts(t: &&Timeouts) -> bool {
    **t == Timeouts::default()
}

fn is_http1(p: &AppProtocol) -> bool {
    *p == AppProtocol::Http1
}

fn summary(s: &Snapshot) -> SnapshotSummary<'_> {
    SnapshotSummary {
        ports: s.ports.iter().map(port).collect(),
    }
}

fn port(p: &Port) -> PortSummary<'_> {
    PortSummary {
        port: p.port,
        protocol: p.protocol,
        certs: p.certs.as_ref(),
        client_auth: p.client_auth.as_ref(),
        quic: p.quic.as_ref(),
        listeners: p
            .listeners
            .iter()
            .map(|l| ListenerSummary {
                listener: l.id.to_string(),
                hostname: l.hostname.as_ref().map(ToString::to_string),
                passthrough: l.passthrough,
                pre_route: l.pre_route.as_deref(),
                alt_svc: l.alt_svc.as_ref().and_then(|v| v.to_str().ok()),
                routes: l
                    .routes
                    .buckets()
                    .into_iter()
                    .flat_map(|(host, entries)| {
                        let host = host.map_or_else(|| "*".to_string(), |h| h.to_string());
                        entries.iter().map(move |e| EntrySummary {
                            host: host.clone(),
                            matcher: &e.matcher,
                            route: e.rule.route.to_string(),
                            rule: e.rule.index,
                            filters: &e.rule.filters,
                            backends: e.rule.backends.backends.iter().map(backend).collect(),
                            timeouts: &e.rule.timeouts,
                            retry: e.rule.retry.as_ref(),
                            session: e.rule.session.as_ref(),
                        })
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn backend(b: &WeightedBackend) -> BackendSummary<'_> {
    let (name, protocol, endpoints, tls) = match &b.target {
        BackendTarget::Service(s) => (
            s.id.to_string(),
            s.protocol,
            s.endpoints.iter().map(endpoint_summary).collect(),
            tls_summary(&s.tls),
        ),
        BackendTarget::Invalid => (
            "(invalid: answers 500)".to_string(),
            AppProtocol::Http1,
            vec![],
            "none".to_string(),
        ),
    };
    BackendSummary {
        weight: b.weight,
        backend: name,
        protocol,
        endpoints,
        tls,
        filters: &b.filters,
        retry_constraint: match &b.target {
            BackendTarget::Service(s) => s.retry_constraint,
            BackendTarget::Invalid => None,
        },
    }
}

fn tls_summary(t: &BackendTls) -> String {
    match t {
        BackendTls::Plain => "plain".into(),
        BackendTls::Tls(u) => format!(
            "tls({}, sni={}, trust_key={:016x})",
            match u.mode {
                TlsMode::Mesh => "mesh",
                TlsMode::Policy => "policy",
            },
            u.server_name.to_str(),
            u.trust_key
        ),
        BackendTls::PerEndpoint(ids) => {
            let unresolved: Vec<String> = ids
                .unresolved
                .iter()
                .map(|(a, why)| format!("{a}: {why}"))
                .collect();
            format!(
                "per-endpoint({}, unresolved=[{}])",
                ids.scheme,
                unresolved.join("; ")
            )
        }
        BackendTls::Unavailable(why) => format!("unavailable({})", why.as_str()),
    }
}

/// The address, and with per-endpoint identity what the endpoint must present and the SNI.
fn endpoint_summary(e: &pier::model::Endpoint) -> String {
    match &e.tls {
        None => e.addr.to_string(),
        Some(t) => format!(
            "{} identity={} sni={} trust_key={:016x}",
            e.addr,
            t.identity.as_deref().unwrap_or("-"),
            t.server_name.to_str(),
            t.trust_key
        ),
    }
}

/// A fixture's first comment lines may set `# settings.gateway: NS/NAME` and
/// `# settings.advertise: IP IP ...`.
fn settings_for(input: &str) -> Settings {
    let mut settings = Settings::default();
    for line in input.lines().take_while(|l| l.starts_with('#')) {
        if let Some(rest) = line.strip_prefix("# settings.gateway: ") {
            let (ns, name) = rest.trim().split_once('/').expect("NS/NAME");
            settings.gateway = Some(pier::model::ObjectRef::new(ns, name));
        }
        if let Some(rest) = line.strip_prefix("# settings.advertise: ") {
            let ips = rest.split_whitespace().map(|ip| ip.parse().expect("an IP"));
            settings.advertise = ips.collect();
        }
    }
    settings
}

fn render(input: &str) -> String {
    let mut resources = Resources::default();
    parse_manifests(input, &mut resources).expect("fixture parses");
    let t = translate(&resources, &settings_for(input));
    let golden = Golden {
        status: t.status.objects(),
        snapshot: summary(&t.snapshot),
    };
    // Long messages stay on one line: easier to read in review diffs.
    let options = serde_saphyr::ser_options! { prefer_block_scalars: false };
    serde_saphyr::to_string_with_options(&golden, options).expect("serializes")
}

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/translate");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixture dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".in.yaml"))
        .collect();
    v.sort();
    v
}

#[test]
fn golden_outputs_match() {
    let bless = std::env::var_os("PIER_BLESS").is_some();
    let mut failures = vec![];
    let cases = fixtures();
    let count = cases.len();
    for input_path in cases {
        let input = std::fs::read_to_string(&input_path).expect("read input");
        let out_path = PathBuf::from(
            input_path
                .to_string_lossy()
                .replace(".in.yaml", ".out.yaml"),
        );
        let actual = render(&input);
        if bless {
            std::fs::write(&out_path, &actual).expect("write output");
            continue;
        }
        let expected = std::fs::read_to_string(&out_path).unwrap_or_default();
        if expected != actual {
            failures.push(format!(
                "{}:\n--- expected\n{expected}\n--- actual\n{actual}",
                out_path.display()
            ));
        }
    }
    assert!(count >= 12, "expected at least 12 fixtures, found {count}");
    assert!(
        failures.is_empty(),
        "golden mismatch (PIER_BLESS=1 to rewrite):\n{}",
        failures.join("\n")
    );
}

#[test]
fn translation_is_deterministic() {
    for input_path in fixtures() {
        let input = std::fs::read_to_string(&input_path).expect("read input");
        assert_eq!(render(&input), render(&input), "{}", input_path.display());
    }
}
