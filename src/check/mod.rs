//! `pier check --kubeconfig`: is this machine, with this identity, ready to serve this
//! cluster's Gateways? One line per check, ✔ / ‼ (warning) / ✖ with a one-line fix, in six
//! groups; a group whose prerequisite failed is reported as skipped.
//!
//! ```text
//! kubernetes-api    kubeconfig loads ─> /version ─> SelfSubjectReview (who am I)
//! gateway-api-crds  discovery + CRD bundle-version      (kinds: source::kube::WatchKind;
//!                   pier's own SecurityPolicy: served or not)
//! rbac              SelfSubjectAccessReview per verb    (table: rbac::RULES = config/rbac/)
//!                   SelfSubjectRulesReview: none more
//! gateways          KubeSource lists everything once ─> translate() ─> class/Gateway status
//! pod-network       sample of the snapshot's endpoints ─> TCP connect (+ TLS handshake)
//! mesh              trust bundle and client certificate of each Gateway: chain, expiry
//! ```
//!
//! Nothing here re-implements routing: the objects come from the kube source pier runs on,
//! and which Gateways are served, which routes are meshed and with what TLS config comes from
//! [`crate::translate`]. The check only reads; it writes no status and takes no Lease.

pub mod certs;
pub mod probe;
pub mod rbac;

use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PostParams};
use serde::Serialize;

use crate::model::ObjectRef;
use crate::source::kube::{Connect, KubeMetrics, KubeSource, WatchKind, WatchScope};
use crate::translate::api::GATEWAY_GROUP;
use crate::translate::spiffe::PIER_GROUP;
use crate::translate::{Settings, Translation};

/// The `schema` field of the JSON output; bumped on any incompatible change.
pub const JSON_SCHEMA: &str = "pier.dev/check/v1";
const BUNDLE_VERSION_ANNOTATION: &str = "gateway.networking.k8s.io/bundle-version";
const CHANNEL_ANNOTATION: &str = "gateway.networking.k8s.io/channel";
const CRD_HINT: &str = "pier crds | kubectl apply -f -   (pier crds --mesh for spec.mesh)";
const RBAC_HINT: &str = "kubectl apply -f config/rbac/ and run pier as ServiceAccount \
                         pier-system/pier (config/rbac/make-kubeconfig.sh)";
const NETWORK_HINT: &str = "this VM cannot reach pod IPs: add routes, VPC peering or firewall \
                            rules from this VM to the pod network (or nothing listens on the port)";

/// ✔, ‼, ✖, or not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
    Skipped,
}

/// The groups, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    KubernetesApi,
    GatewayApiCrds,
    Rbac,
    Gateways,
    PodNetwork,
    Mesh,
}

/// One line of the report (one element of the JSON `checks` array).
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub category: Category,
    /// Stable: e.g. `api-server`, `crd/httproutes.gateway.networking.k8s.io`,
    /// `rbac/gateways.gateway.networking.k8s.io`, `gateway/app/gw`,
    /// `reach/app/gw/192.0.2.10:8080`, `mesh/app/gw/client-certificate`.
    pub name: String,
    pub status: Status,
    pub message: String,
    /// How to fix it; `null` when the check passed.
    pub hint: Option<String>,
}

/// Every check, in order.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
}

/// What the checks need (from the CLI).
#[derive(Clone, Debug)]
pub struct Options {
    pub connect: Connect,
    pub scope: WatchScope,
    /// Where the status-writer Lease lives (its Role is checked there; "none more" too).
    pub lease_namespace: String,
    /// `--no-status`: status and Lease write verbs are not needed.
    pub status_writes: bool,
    pub settings: Settings,
    /// `--client-cert`/`--client-key`, already read (or why they could not be).
    pub client_cert: Option<Result<crate::translate::ClientIdentityPem, String>>,
    pub probe_timeout: Duration,
    /// Endpoint addresses probed per Gateway at most.
    pub probe_sample: usize,
    /// Bound for the API server's answers and for listing everything once.
    pub api_timeout: Duration,
    /// Unix seconds, for certificate expiry.
    pub now: i64,
}

// === impl Report ===

impl Report {
    fn add(
        &mut self,
        category: Category,
        name: impl Into<String>,
        status: Status,
        message: impl Into<String>,
        hint: Option<&str>,
    ) {
        self.checks.push(Check {
            category,
            name: name.into(),
            status,
            message: message.into(),
            hint: hint
                .filter(|_| matches!(status, Status::Warn | Status::Fail))
                .map(str::to_string),
        });
    }

    fn ok(&mut self, c: Category, name: impl Into<String>, message: impl Into<String>) {
        self.add(c, name, Status::Ok, message, None);
    }

    fn fail(
        &mut self,
        c: Category,
        name: impl Into<String>,
        message: impl Into<String>,
        hint: &str,
    ) {
        self.add(c, name, Status::Fail, message, Some(hint));
    }

    fn warn(
        &mut self,
        c: Category,
        name: impl Into<String>,
        message: impl Into<String>,
        hint: &str,
    ) {
        self.add(c, name, Status::Warn, message, Some(hint));
    }

    /// One skipped line for each of `categories`.
    fn skip(&mut self, categories: &[Category], why: &str) {
        for &c in categories {
            let name = serde_json::to_value(c)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            self.add(c, name, Status::Skipped, format!("skipped: {why}"), None);
        }
    }

    pub fn count(&self, status: Status) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }

    /// No check failed (warnings and skips do not fail; a skip always follows a failure).
    pub fn passed(&self) -> bool {
        self.count(Status::Fail) == 0
    }

    /// The report as text, one line per check (and one per hint), grouped by category;
    /// `colour` adds ANSI colours.
    pub fn text(&self, colour: bool) -> String {
        let paint = |code: &str, s: &str| {
            if colour {
                format!("\x1b[{code}m{s}\x1b[0m")
            } else {
                s.to_string()
            }
        };
        let mut out = String::new();
        let mut current = None;
        for c in &self.checks {
            if current != Some(c.category) {
                if current.is_some() {
                    out.push('\n');
                }
                let title = serde_json::to_value(c.category)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                let _ = writeln!(out, "{}", paint("1", &title));
                let _ = writeln!(out, "{}", "-".repeat(title.len()));
                current = Some(c.category);
            }
            let mark = match c.status {
                Status::Ok => paint("32", "✔"),
                Status::Warn => paint("33", "‼"),
                Status::Fail => paint("31", "✖"),
                Status::Skipped => paint("2", "·"),
            };
            let _ = writeln!(out, "{mark} {}: {}", c.name, c.message);
            if let Some(h) = &c.hint {
                let _ = writeln!(out, "    fix: {h}");
            }
        }
        let (fail, warn) = (self.count(Status::Fail), self.count(Status::Warn));
        let summary = match (fail, warn) {
            (0, 0) => paint("32", "✔ all checks passed"),
            (0, w) => paint("33", &format!("‼ all checks passed, {w} warning(s)")),
            (f, w) => paint("31", &format!("✖ {f} check(s) failed, {w} warning(s)")),
        };
        let _ = write!(out, "\n{summary}\n");
        out
    }

    /// The report as JSON: `{schema, passed, summary: {ok, warn, fail, skipped}, checks: [{category,
    /// name, status, message, hint}]}`.
    pub fn json(&self) -> String {
        let v = serde_json::json!({
            "schema": JSON_SCHEMA,
            "passed": self.passed(),
            "summary": {
                "ok": self.count(Status::Ok),
                "warn": self.count(Status::Warn),
                "fail": self.count(Status::Fail),
                "skipped": self.count(Status::Skipped),
            },
            "checks": self.checks,
        });
        let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// Colour on a terminal only, and never with `NO_COLOR` set to something (no-color.org), as
/// for logs.
pub fn use_colour(is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

// === the checks ===

/// Runs every check against the cluster of `opts.connect`.
pub async fn run(opts: &Options) -> Report {
    use Category as C;
    let mut r = Report::default();
    let Some(client) = kubernetes_api(&mut r, opts).await else {
        r.skip(
            &[
                C::GatewayApiCrds,
                C::Rbac,
                C::Gateways,
                C::PodNetwork,
                C::Mesh,
            ],
            "the API server cannot be used",
        );
        return r;
    };
    let crds_ok = crds(&mut r, &client, opts).await;
    let reads_ok = rbac(&mut r, &client, opts).await;
    if !crds_ok || !reads_ok {
        let why = if crds_ok {
            "pier's identity cannot read what pier watches (see rbac)"
        } else {
            "Gateway API CRDs pier needs are missing"
        };
        r.skip(&[C::Gateways, C::PodNetwork, C::Mesh], why);
        return r;
    }
    let Some(translation) = gateways(&mut r, &client, opts).await else {
        r.skip(&[C::PodNetwork, C::Mesh], "pier would serve no Gateway");
        return r;
    };
    reachability(&mut r, &translation, opts).await;
    mesh(&mut r, &translation, opts);
    r
}

async fn bounded<T, E: std::fmt::Display>(
    t: Duration,
    f: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(t, f).await {
        Err(_) => Err(format!("no answer within {} s", t.as_secs())),
        Ok(r) => r.map_err(|e| e.to_string()),
    }
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Step 1: the kubeconfig, the API server and its version, and who we are to it.
async fn kubernetes_api(r: &mut Report, opts: &Options) -> Option<Client> {
    use Category::KubernetesApi as K;
    let from = match &opts.connect.kubeconfig {
        Some(p) => p.display().to_string(),
        None => "KUBECONFIG, ~/.kube/config or the in-cluster service account".to_string(),
    };
    let (client, server) = match opts.connect.client_and_server().await {
        Ok(c) => c,
        Err(e) => {
            r.fail(
                K,
                "kubeconfig",
                format!("{e:#}"),
                "give a readable kubeconfig (--kubeconfig FILE, --context NAME); \
                 config/rbac/make-kubeconfig.sh makes one for pier's ServiceAccount",
            );
            return None;
        }
    };
    r.ok(K, "kubeconfig", format!("loaded {from}: server {server}"));
    // The socket, DNS or TLS cause, not `ServiceError: client error (Connect)`.
    let version = client.apiserver_version();
    let version = bounded(opts.api_timeout, async move {
        version
            .await
            .map_err(|e| crate::source::kube::reach::describe(&e))
    });
    match version.await {
        Ok(v) => {
            r.ok(K, "api-server", format!("{server} is reachable"));
            r.ok(
                K,
                "api-version",
                format!("Kubernetes {} ({})", v.git_version, v.platform),
            );
        }
        Err(e) => {
            r.fail(
                K,
                "api-server",
                format!("cannot reach {server}: {e}"),
                "check the server URL in the kubeconfig and that this VM can reach it (DNS, \
                 routes, firewalls, proxies)",
            );
            return None;
        }
    }
    let review = SelfSubjectReview::default();
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    match tokio::time::timeout(
        opts.api_timeout,
        api.create(&PostParams::default(), &review),
    )
    .await
    {
        Ok(Ok(s)) => {
            let user = s.status.and_then(|s| s.user_info).unwrap_or_default();
            r.ok(
                K,
                "credentials",
                format!(
                    "authenticated as {}",
                    user.username.as_deref().unwrap_or("(unknown)")
                ),
            );
        }
        Ok(Err(e)) if api_code(&e) == Some(401) => {
            r.fail(
                K,
                "credentials",
                format!("the API server rejected the credentials: {e}"),
                "the token or certificate is invalid or expired: make a new kubeconfig \
                 (config/rbac/make-kubeconfig.sh)",
            );
            return None;
        }
        Ok(Err(e)) => r.warn(
            K,
            "credentials",
            format!("cannot ask the API server who this identity is: {e}"),
            "SelfSubjectReview needs Kubernetes 1.28 or later; the RBAC checks below still run",
        ),
        Err(_) => {
            r.fail(
                K,
                "credentials",
                format!("no answer within {} s", opts.api_timeout.as_secs()),
                "the API server is overloaded or a proxy swallows requests",
            );
            return None;
        }
    }
    Some(client)
}

/// `v1.5.1` -> (1, 5, 1).
pub fn parse_bundle_version(v: &str) -> Option<(u64, u64, u64)> {
    let mut parts = v.strip_prefix('v')?.split(['.', '-']);
    let mut n = || parts.next()?.parse::<u64>().ok();
    Some((n()?, n()?, n()?))
}

/// Step 2: the CRDs of every Gateway API kind pier watches, served and at which bundle version,
/// and pier's own (SecurityPolicy: served or not). Returns false when one pier cannot do
/// without is missing.
async fn crds(r: &mut Report, client: &Client, opts: &Options) -> bool {
    use Category::GatewayApiCrds as G;
    // Discovery: readable by every authenticated user, unlike the CRDs themselves.
    let mut served: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    match bounded(opts.api_timeout, client.list_api_groups()).await {
        Ok(groups) => {
            let ours = |g: &&k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup| {
                g.name == GATEWAY_GROUP || g.name == PIER_GROUP
            };
            for g in groups.groups.iter().filter(ours) {
                for v in &g.versions {
                    let list = bounded(
                        opts.api_timeout,
                        client.list_api_group_resources(&v.group_version),
                    )
                    .await;
                    for res in list.map(|l| l.resources).unwrap_or_default() {
                        if !res.name.contains('/') {
                            let key = format!("{}.{}", res.name, g.name);
                            served.entry(key).or_default().push(v.version.clone());
                        }
                    }
                }
            }
        }
        Err(e) => {
            r.fail(
                G,
                "discovery",
                format!("cannot list the API groups: {e}"),
                "the API server's discovery must be readable by every authenticated user",
            );
            return false;
        }
    }
    let built = parse_bundle_version(crate::crds::BUNDLE_VERSION);
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut ok = true;
    for kind in WatchKind::ALL {
        let (group, plural) = kind.resource();
        if group != GATEWAY_GROUP && group != PIER_GROUP {
            continue;
        }
        let name = format!("{plural}.{group}");
        let check = format!("crd/{name}");
        let Some(versions) = served.get(&name) else {
            if group == PIER_GROUP {
                r.warn(
                    G,
                    check,
                    format!(
                        "not installed: no {kind} can be created until it is (pier runs without)"
                    ),
                    CRD_HINT,
                );
            } else if kind.is_optional() {
                r.warn(
                    G,
                    check,
                    format!("not installed: pier serves no {kind} until it is"),
                    CRD_HINT,
                );
            } else {
                ok = false;
                r.fail(
                    G,
                    check,
                    format!("not installed: pier cannot serve without {kind}s"),
                    CRD_HINT,
                );
            }
            continue;
        };
        let served_as = format!("served as {}", versions.join(", "));
        if let Some(v) = kind
            .required_version()
            .filter(|v| !versions.iter().any(|s| s == v))
        {
            // Installed, but not in the version pier reads: nothing of it would be served, and
            // nothing else would say so.
            r.warn(
                G,
                check,
                format!(
                    "{served_as} only: pier reads {kind} {v} (Gateway API v1.7) and serves no \
                     {kind} until that version is served"
                ),
                CRD_HINT,
            );
            continue;
        }
        if group == PIER_GROUP {
            // pier's own API: no Gateway API bundle to compare.
            r.ok(G, check, served_as);
            continue;
        }
        let crd = bounded(opts.api_timeout, api.get_opt(&name)).await;
        let annotations = match crd {
            Ok(Some(crd)) => crd.metadata.annotations.unwrap_or_default(),
            // Not readable by this identity (pier's RBAC reads three of them): presence is
            // what matters; the version of the readable ones stands for the bundle.
            _ => {
                r.ok(
                    G,
                    check,
                    format!("{served_as} (bundle version not readable)"),
                );
                continue;
            }
        };
        let channel = annotations
            .get(CHANNEL_ANNOTATION)
            .map(|c| format!(", {c} channel"))
            .unwrap_or_default();
        match annotations.get(BUNDLE_VERSION_ANNOTATION) {
            None => r.warn(
                G,
                check,
                format!("{served_as}, without a {BUNDLE_VERSION_ANNOTATION} annotation"),
                CRD_HINT,
            ),
            Some(v) if parse_bundle_version(v) < built => r.warn(
                G,
                check,
                format!(
                    "{served_as}, Gateway API {v}{channel}: older than {} pier was built for \
                     (newer fields are dropped by the API server)",
                    crate::crds::BUNDLE_VERSION
                ),
                CRD_HINT,
            ),
            Some(v) => r.ok(G, check, format!("{served_as}, Gateway API {v}{channel}")),
        }
    }
    ok
}

/// Step 3: every verb of [`rbac::RULES`] (SelfSubjectAccessReview), then "none more"
/// (SelfSubjectRulesReview). Returns false when a read pier cannot do without is denied.
async fn rbac(r: &mut Report, client: &Client, opts: &Options) -> bool {
    use Category::Rbac as R;
    use futures::StreamExt;
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    // (rule index, resource, verb, name) -> allowed
    let mut asks = vec![];
    for (i, rule) in rbac::RULES.iter().enumerate() {
        if rule.need == rbac::Need::StatusWrite && !opts.status_writes {
            continue;
        }
        for res in rule.resources {
            for verb in rule.verbs {
                let names: &[&str] = if rule.names.is_empty() {
                    &[""]
                } else {
                    rule.names
                };
                for name in names {
                    asks.push((i, *res, *verb, *name));
                }
            }
        }
    }
    let answers: Vec<_> = futures::stream::iter(asks.iter().map(|&(i, res, verb, name)| {
        let rule = &rbac::RULES[i];
        let (resource, sub) = match res.split_once('/') {
            Some((r, s)) => (r, Some(s.to_string())),
            None => (res, None),
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(rule.group.to_string()),
                    resource: Some(resource.to_string()),
                    subresource: sub,
                    verb: Some(verb.to_string()),
                    name: (!name.is_empty()).then(|| name.to_string()),
                    namespace: (rule.scope == rbac::Scope::LeaseNamespace)
                        .then(|| opts.lease_namespace.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api = api.clone();
        async move {
            bounded(
                opts.api_timeout,
                api.create(&PostParams::default(), &review),
            )
            .await
            .map(|a| a.status.is_some_and(|s| s.allowed))
        }
    }))
    .buffered(16)
    .collect()
    .await;
    let mut reads_ok = true;
    // One line per (rule, resource), in table order.
    let mut i = 0;
    while i < asks.len() {
        let (rule_i, res, _, _) = asks[i];
        let rule = &rbac::RULES[rule_i];
        let mut granted = vec![];
        let mut denied = vec![];
        let mut errors = vec![];
        while i < asks.len() && asks[i].0 == rule_i && asks[i].1 == res {
            let (_, _, verb, name) = asks[i];
            let what = if name.is_empty() {
                verb.to_string()
            } else {
                format!("{verb} {name}")
            };
            match &answers[i] {
                Ok(true) => granted.push(what),
                Ok(false) => denied.push(what),
                Err(e) => errors.push(format!("{what}: {e}")),
            }
            i += 1;
        }
        let group = if rule.group.is_empty() {
            String::new()
        } else {
            format!(".{}", rule.group)
        };
        let name = format!("rbac/{res}{group}");
        let where_ = match rule.scope {
            rbac::Scope::Cluster => "cluster-wide".to_string(),
            rbac::Scope::LeaseNamespace => format!("in namespace {}", opts.lease_namespace),
        };
        if !errors.is_empty() {
            reads_ok &= rule.need != rbac::Need::Read;
            r.fail(
                R,
                name,
                format!("cannot ask the API server: {}", errors.join("; ")),
                "SelfSubjectAccessReview must be allowed (every authenticated user may, by default)",
            );
        } else if denied.is_empty() {
            r.ok(R, name, format!("{} granted {where_}", granted.join(", ")));
        } else {
            let msg = format!("{} not granted {where_}", denied.join(", "));
            match rule.need {
                rbac::Need::Optional(why) => r.warn(R, name, format!("{msg}: {why}"), RBAC_HINT),
                rbac::Need::Read => {
                    reads_ok = false;
                    r.fail(
                        R,
                        name,
                        format!("{msg}: pier never becomes ready"),
                        RBAC_HINT,
                    );
                }
                rbac::Need::StatusWrite => r.fail(
                    R,
                    name,
                    format!("{msg}: pier cannot write status (or run with --no-status)"),
                    RBAC_HINT,
                ),
            }
        }
    }
    // None more.
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(opts.lease_namespace.clone()),
        },
        ..Default::default()
    };
    let api: Api<SelfSubjectRulesReview> = Api::all(client.clone());
    match bounded(
        opts.api_timeout,
        api.create(&PostParams::default(), &review),
    )
    .await
    {
        Ok(rv) => {
            let status = rv.status.unwrap_or_default();
            let extra = rbac::beyond(&status.resource_rules);
            let ns = &opts.lease_namespace;
            if extra.is_empty() {
                let incomplete = if status.incomplete {
                    " (the answer is incomplete: an authorizer besides RBAC cannot list rules)"
                } else {
                    ""
                };
                r.ok(
                    R,
                    "rbac/none-more",
                    format!(
                        "no grants beyond pier's in namespace {ns} or cluster-wide{incomplete}"
                    ),
                );
            } else {
                const SHOWN: usize = 12;
                let more = extra
                    .len()
                    .checked_sub(SHOWN)
                    .filter(|n| *n > 0)
                    .map(|n| format!(" and {n} more"))
                    .unwrap_or_default();
                let shown: Vec<&str> = extra.iter().take(SHOWN).map(String::as_str).collect();
                r.warn(
                    R,
                    "rbac/none-more",
                    format!(
                        "this identity may do more than pier needs (in namespace {ns} or \
                         cluster-wide): {}{more}",
                        shown.join(", ")
                    ),
                    "run pier as its own ServiceAccount bound only to config/rbac/ \
                     (config/rbac/make-kubeconfig.sh), not as an administrator",
                );
            }
        }
        Err(e) => r.warn(
            R,
            "rbac/none-more",
            format!("cannot list this identity's rules: {e}"),
            "SelfSubjectRulesReview must be allowed (every authenticated user may, by default)",
        ),
    }
    reads_ok
}

/// Step 4: list everything as `pier run` would, translate, and report the GatewayClasses and
/// Gateways pier would serve. `None` when it would serve none.
async fn gateways(r: &mut Report, client: &Client, opts: &Options) -> Option<Translation> {
    use Category::Gateways as G;
    let (source, mut changes) = KubeSource::start(client, &opts.scope, KubeMetrics::default());
    let listed = tokio::time::timeout(opts.api_timeout, changes.recv()).await;
    let pending = source.pending();
    let resources = source.stores.resources();
    source.stop();
    if !matches!(listed, Ok(Some(()))) {
        let kinds: Vec<String> = pending.iter().map(ToString::to_string).collect();
        r.fail(
            G,
            "list",
            format!(
                "not every watched kind listed within {} s: waiting for {}",
                opts.api_timeout.as_secs(),
                kinds.join(", ")
            ),
            "see the rbac and gateway-api-crds checks; run with RUST_LOG=info for the watch errors",
        );
        return None;
    }
    let mut settings = opts.settings.clone();
    if let Some(Ok(pem)) = &opts.client_cert {
        settings.client_identity = Some(pem.clone());
    }
    let resources_count = resources.gateways.len();
    let translation = crate::translate::translate(&resources, &settings);
    let controller = &settings.controller_name;
    let status = &translation.status;
    if status.gateway_classes.is_empty() {
        r.fail(
            G,
            "gatewayclass",
            format!("no GatewayClass has spec.controllerName {controller}"),
            &format!(
                "kubectl apply a GatewayClass with spec.controllerName: {controller} (or pass \
                 --controller-name)"
            ),
        );
        return None;
    }
    for (name, s) in &status.gateway_classes {
        let accepted = s
            .conditions
            .iter()
            .find(|c| c.type_.to_string() == "Accepted");
        match accepted {
            Some(c) if c.status => r.ok(
                G,
                format!("gatewayclass/{name}"),
                format!("accepted (controller {controller})"),
            ),
            Some(c) => r.fail(
                G,
                format!("gatewayclass/{name}"),
                format!("not accepted: {}: {}", c.reason, c.message),
                "fix the GatewayClass as the message says",
            ),
            None => r.ok(G, format!("gatewayclass/{name}"), "pier's"),
        }
    }
    if status.gateways.is_empty() {
        let msg = match &settings.gateway {
            Some(g) => format!("Gateway {g} does not exist or its class is not pier's"),
            None => format!(
                "no Gateway uses a GatewayClass of {controller} ({resources_count} Gateways in \
                 the cluster)"
            ),
        };
        r.fail(
            G,
            "gateways",
            msg,
            "kubectl apply a Gateway whose spec.gatewayClassName is one of the classes above",
        );
        return None;
    }
    let mut serving = false;
    for (key, s) in &status.gateways {
        let cond = |t: &str| s.conditions.iter().find(|c| c.type_.to_string() == t);
        let name = format!("gateway/{key}");
        let listeners: Vec<String> = s
            .listeners
            .iter()
            .map(|l| format!("{} ({} routes)", l.name, l.attached_routes))
            .collect();
        let bad_listeners: Vec<String> = s
            .listeners
            .iter()
            .filter_map(|l| {
                let c = l.conditions.iter().find(|c| {
                    !c.status && {
                        let t = c.type_.to_string();
                        t == "Accepted" || t == "Programmed" || t == "ResolvedRefs"
                    }
                })?;
                Some(format!("{}: {} {}", l.name, c.reason, c.message))
            })
            .collect();
        match (cond("Accepted"), cond("Programmed")) {
            (Some(a), _) if !a.status => r.fail(
                G,
                name,
                format!("not accepted: {}: {}", a.reason, a.message),
                "fix the Gateway as the message says (kubectl describe gateway)",
            ),
            (_, Some(p)) if !p.status => r.fail(
                G,
                name,
                format!("accepted, not programmed: {}: {}", p.reason, p.message),
                "fix the Gateway as the message says (kubectl describe gateway)",
            ),
            _ if !bad_listeners.is_empty() => {
                serving = true;
                r.warn(
                    G,
                    name,
                    format!(
                        "accepted and programmed, but listeners have problems: {}",
                        bad_listeners.join("; ")
                    ),
                    "fix the listeners as the messages say (kubectl describe gateway)",
                );
            }
            _ => {
                serving = true;
                r.ok(
                    G,
                    name,
                    format!(
                        "accepted and programmed; listeners: {}",
                        listeners.join(", ")
                    ),
                );
            }
        }
    }
    serving.then_some(translation)
}

/// Step 5: a TCP (and TLS) probe of a sample of each Gateway's endpoint addresses.
async fn reachability(r: &mut Report, t: &Translation, opts: &Options) {
    use Category::PodNetwork as P;
    let mut targets = vec![];
    for key in t.status.gateways.keys() {
        let (sample, total) = probe::sample(&t.snapshot, key, opts.probe_sample);
        if sample.is_empty() {
            r.warn(
                P,
                format!("reach/{key}"),
                "no endpoint addresses to probe: no routes, or their Services have no ready \
                 endpoints",
                "attach a route with backends that have ready endpoints",
            );
            continue;
        }
        if total > sample.len() {
            r.ok(
                P,
                format!("reach/{key}"),
                format!(
                    "probing {} of {total} endpoint addresses (--probe-sample)",
                    sample.len()
                ),
            );
        }
        targets.extend(sample.into_iter().map(|s| (key.clone(), s)));
    }
    // At most this many probes at once, whatever the number of Gateways.
    const CONCURRENT_PROBES: usize = 64;
    use futures::StreamExt;
    let outcomes: Vec<_> = futures::stream::iter(
        targets
            .iter()
            .map(|(_, t)| probe::probe(t, opts.probe_timeout)),
    )
    .buffered(CONCURRENT_PROBES)
    .collect()
    .await;
    for ((gw, target), outcome) in targets.iter().zip(outcomes) {
        let name = format!("reach/{gw}/{}", target.addr);
        let about = format!("Service {}, route {}", target.backend, target.route);
        match outcome {
            probe::Outcome::Reached(m) => r.ok(P, name, format!("{about}: {m}")),
            probe::Outcome::Unreachable(m) => {
                r.fail(P, name, format!("{about}: {m}"), NETWORK_HINT)
            }
            probe::Outcome::TlsFailed(m) => r.fail(
                P,
                name,
                format!("{about}: {m}"),
                "the pod answers but TLS fails: the mesh must trust pier's CA (pier mesh \
                 export-trust) and spec.mesh.trustBundle must hold the mesh's CA",
            ),
        }
    }
}

/// Step 6: per Gateway, its backend TLS condition, the mesh trust bundle's CAs and pier's
/// client certificate (chain to its CA, expiry).
fn mesh(r: &mut Report, t: &Translation, opts: &Options) {
    use Category::Mesh as M;
    if let Some(Err(e)) = &opts.client_cert {
        r.fail(
            M,
            "client-cert-files",
            e.clone(),
            "give --client-cert and --client-key a readable PEM chain (leaf first) and its key",
        );
    }
    for summary in &t.tls {
        let key = &summary.gateway;
        let Some(status) = t.status.gateways.get(key) else {
            continue;
        };
        let backend_tls = status
            .conditions
            .iter()
            .find(|c| c.type_.to_string() == crate::translate::status::BACKEND_TLS_CONDITION);
        if backend_tls.is_none()
            && summary.trust_bundle.is_empty()
            && summary.client_chain.is_empty()
        {
            r.ok(
                M,
                format!("mesh/{key}"),
                "no mesh and no client certificate configured: backends get plain connections",
            );
            continue;
        }
        if let Some(c) = backend_tls {
            if c.status {
                r.ok(M, format!("mesh/{key}"), c.message.clone());
            } else {
                r.fail(
                    M,
                    format!("mesh/{key}"),
                    format!("{}: {}", c.reason, c.message),
                    "fix spec.mesh / spec.tls.backend as the message says; meshed routes answer \
                     503 until then",
                );
            }
        }
        if !summary.trust_bundle.is_empty() {
            trust_bundle_check(r, key, &summary.trust_bundle, opts.now);
        }
        if !summary.client_chain.is_empty() {
            client_cert_check(r, key, &summary.client_chain, opts.now);
        }
    }
}

fn trust_bundle_check(
    r: &mut Report,
    key: &ObjectRef,
    bundle: &[rustls_pki_types::CertificateDer<'static>],
    now: i64,
) {
    use Category::Mesh as M;
    let name = format!("mesh/{key}/trust-bundle");
    let mut worst = (Status::Ok, String::new());
    for (i, der) in bundle.iter().enumerate() {
        let Some(f) = certs::facts(der) else {
            r.fail(
                M,
                name,
                format!("certificate {i} of the trust bundle does not parse"),
                "replace the trust bundle with the mesh's CA certificates (PEM)",
            );
            return;
        };
        let (s, m) = certs::expiry(&f, now);
        let rank = |s: Status| match s {
            Status::Fail => 2,
            Status::Warn => 1,
            _ => 0,
        };
        if rank(s) > rank(worst.0) || worst.1.is_empty() {
            worst = (s, format!("{}: {m}", f.name));
        }
    }
    let msg = format!("{} CA certificate(s); {}", bundle.len(), worst.1);
    let hint = "update the mesh trust bundle (spec.mesh.trustBundle) with the mesh's current CA";
    match worst.0 {
        Status::Fail => r.fail(M, name, msg, hint),
        Status::Warn => r.warn(M, name, msg, hint),
        _ => r.ok(M, name, msg),
    }
}

fn client_cert_check(
    r: &mut Report,
    key: &ObjectRef,
    chain: &[rustls_pki_types::CertificateDer<'static>],
    now: i64,
) {
    use Category::Mesh as M;
    let name = format!("mesh/{key}/client-certificate");
    let Some(leaf) = certs::facts(&chain[0]) else {
        r.fail(
            M,
            name,
            "pier's client certificate does not parse",
            "give pier a valid PEM certificate",
        );
        return;
    };
    let renew = "renew pier's client certificate (--client-cert, or the Secret of \
                 spec.tls.backend.clientCertificateRef)";
    let (s, m) = certs::expiry(&leaf, now);
    let msg = format!("{}: {m}", leaf.name);
    match s {
        Status::Fail => r.fail(M, name.clone(), msg, renew),
        Status::Warn => r.warn(M, name.clone(), msg, renew),
        _ => r.ok(M, name.clone(), msg),
    }
    let chain_name = format!("mesh/{key}/client-chain");
    match certs::verify_client_chain(chain) {
        Ok(cas) => r.ok(
            M,
            chain_name,
            format!(
                "chains to {} (what pier mesh export-trust gives the mesh)",
                cas.join(", ")
            ),
        ),
        Err(e @ certs::ChainError::NoCa) => r.warn(
            M,
            chain_name,
            e.to_string(),
            "append the issuing CA to pier's certificate chain so the mesh can be told to trust it",
        ),
        Err(e) => r.fail(
            M,
            chain_name,
            e.to_string(),
            "pier's certificate must be issued by the CA its chain carries, for client \
             authentication (extendedKeyUsage clientAuth)",
        ),
    }
    for ca in chain.iter().skip(1) {
        if let Some(f) = certs::facts(ca).filter(|f| f.is_ca) {
            let (s, m) = certs::expiry(&f, now);
            let msg = format!("issuing CA {}: {m}", f.name);
            match s {
                Status::Fail => r.fail(M, chain_name_ca(key), msg, renew),
                Status::Warn => r.warn(M, chain_name_ca(key), msg, renew),
                _ => {}
            }
        }
    }
}

fn chain_name_ca(key: &ObjectRef) -> String {
    format!("mesh/{key}/client-ca")
}

#[cfg(test)]
mod tests;
