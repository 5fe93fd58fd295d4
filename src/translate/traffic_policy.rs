//! BackendTrafficPolicy (`pier.dev/v1alpha1`) ─> the [`TrafficPolicy`] of each (Gateway,
//! listener, Route, rule), and the policies' GEP-713 status (`super::attach`).
//!
//! ```text
//! policies ─> parse each spec (invalid: the last valid version stays in force, or none)
//!          ─> attach::Policies: targets, precedence, status
//! rules    ─> the effective policy's RuleTraffic: bucket tables carried by key
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, Method};

use super::Settings;
use super::api::{self, BackendTrafficPolicy, BackendTrafficPolicySpec};
use super::attach::{self, Entry};
use super::resources::Resources;
use crate::model::backend::BackendOverride;
use crate::model::health::{ActiveCheck, Probe};
use crate::model::matcher::{PathMatch, ValueMatch};
use crate::model::traffic::{
    Abort, Balance, Compression, Compressor, Encoding, FaultAbort, FaultDelay, Faults,
    GlobalLimits, HashOn, HeaderSelect, LimitRule, PathSelect, RULE_KEY, RateLimitService,
    RuleTraffic, Selector, Share, SourceSelect, TrafficPolicy,
};
use crate::model::{Carried, ObjectRef, OutlierOverride};
use crate::ratelimit::{Buckets, Limit};

const KIND: &str = "BackendTrafficPolicy";

/// Every BackendTrafficPolicy of `resources`, attached.
pub type Policies = attach::Policies<TrafficPolicy>;

/// Reads every BackendTrafficPolicy of `resources`; an invalid one keeps the version in
/// force in `carried` (the previous snapshot's), if any.
pub fn policies(resources: &Resources, carried: &Carried, settings: &Settings) -> Policies {
    let service = settings.rate_limit_service.is_some();
    let entries = resources
        .backend_traffic_policies
        .iter()
        .map(|((ns, name), p)| entry(ObjectRef::new(ns, name), p, carried, service))
        .collect();
    Policies::new(KIND, entries)
}

/// The bucket tables of one translation: carried over by key, or new.
pub struct Tables<'c> {
    carried: &'c HashMap<String, Arc<Buckets>>,
    made: HashMap<String, Arc<Buckets>>,
    service: Option<Arc<RateLimitService>>,
}

impl<'c> Tables<'c> {
    pub fn new(carried: &'c Carried, settings: &Settings) -> Self {
        Self {
            carried: &carried.limits,
            made: HashMap::new(),
            service: settings.rate_limit_service.clone(),
        }
    }

    /// `policy` as a rule of `route` sees it.
    pub fn rule(&mut self, policy: &Arc<TrafficPolicy>, route: &ObjectRef) -> Option<RuleTraffic> {
        if !policy.acts_per_request() {
            return None;
        }
        let global = match &self.service {
            Some(service) if !policy.global.is_empty() => Some(GlobalLimits {
                service: service.clone(),
                values: (0..policy.global.len())
                    .map(|i| Arc::from(policy.global_value(i, route)))
                    .collect(),
            }),
            _ => None,
        };
        let traffic = policy.for_route(route, global, |key, limit, capacity| {
            if let Some(b) = self.made.get(key) {
                return b.clone();
            }
            let b = match self.carried.get(key) {
                // The same key means the same limit; the capacity follows from the selectors,
                // which are part of the key too.
                Some(b) => b.clone(),
                None => Arc::new(Buckets::new(limit, capacity)),
            };
            self.made.insert(key.to_string(), b.clone());
            b
        });
        Some(traffic)
    }
}

fn entry(
    key: ObjectRef,
    p: &BackendTrafficPolicy,
    carried: &Carried,
    service: bool,
) -> Entry<TrafficPolicy> {
    let targets = (p.spec.target_refs.iter())
        .map(|t| attach::target(KIND, true, &key, t))
        .collect();
    let source = key.to_string();
    let (policy, invalid) = attach::in_force(
        traffic_policy(&source, &p.spec, service),
        carried.traffic.get(&source),
        || TrafficPolicy {
            source: source.clone(),
            local: vec![],
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
        },
        "nothing of this policy is in force",
    );
    Entry {
        generation: p.metadata.generation,
        created: api::creation_time(&p.metadata),
        key,
        policy,
        invalid,
        targets,
        conditions: vec![],
    }
}

/// The spec as the data plane applies it, or why it cannot be.
fn traffic_policy(
    source: &str,
    spec: &BackendTrafficPolicySpec,
    service: bool,
) -> Result<TrafficPolicy, String> {
    if spec.target_refs.is_empty() {
        return Err("targetRefs is empty".into());
    }
    let rate_limit = spec.rate_limit.as_ref();
    let rules = |field: &'static str, rules: Option<&Vec<api::RateLimitRule>>| {
        let Some(rules) = rules else {
            return Ok(vec![]);
        };
        if rules.is_empty() {
            return Err(format!("rateLimit.{field}.rules is empty"));
        }
        (rules.iter().enumerate())
            .map(|(i, r)| {
                limit_rule(&format!("{source}|{field}"), i, r)
                    .map_err(|e| format!("rateLimit.{field}.rules[{i}].{e}"))
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let local = rules(
        "local",
        rate_limit.and_then(|r| r.local.as_ref()).map(|l| &l.rules),
    )?;
    let global_spec = rate_limit.and_then(|r| r.global.as_ref());
    let global = rules("global", global_spec.map(|g| &g.rules))?;
    if !global.is_empty() && !service {
        return Err(
            "rateLimit.global: pier has no rate-limit service to keep global limits \
                    (pier run --rate-limit-service IP:PORT)"
                .into(),
        );
    }
    let needs_headers =
        (local.iter().chain(&global).flat_map(|r| &r.selectors)).any(|s| !s.headers.is_empty());
    Ok(TrafficPolicy {
        source: source.to_string(),
        local,
        global,
        fail_closed: global_spec.and_then(|g| g.fail_closed).unwrap_or(false),
        needs_headers,
        compression: compression(spec)?,
        faults: faults(spec.fault_injection.as_ref())?,
        request_timeout: request_timeout(spec.timeout.as_ref())?,
        balance: balance(spec.load_balancer.as_ref())?,
        health: active_check(source, spec.health_check.as_ref())?.map(Arc::new),
        request_buffer: request_buffer(spec.request_buffer.as_ref())?,
        backends: BackendOverride {
            outlier: passive_check(spec.health_check.as_ref())?.unwrap_or_default(),
            max_requests: (spec.circuit_breaker.as_ref())
                .and_then(|c| c.max_parallel_requests)
                .map(|n| positive(n, "circuitBreaker.maxParallelRequests"))
                .transpose()?,
            max_pending: (spec.circuit_breaker.as_ref()).and_then(|c| c.max_pending_requests),
            max_connections: (spec.circuit_breaker.as_ref())
                .and_then(|c| c.max_connections)
                .map(|n| positive(n, "circuitBreaker.maxConnections"))
                .transpose()?,
            max_retries: (spec.circuit_breaker.as_ref()).and_then(|c| c.max_parallel_retries),
            connect_timeout: connect_timeout(spec.timeout.as_ref())?,
        },
    })
}

fn positive(n: u32, field: &str) -> Result<u32, String> {
    if n == 0 {
        Err(format!("{field}: must be at least 1"))
    } else {
        Ok(n)
    }
}

/// `timeout.tcp.connectTimeout`.
fn connect_timeout(t: Option<&api::Timeout>) -> Result<Option<Duration>, String> {
    let Some(s) = t.and_then(|t| t.tcp.as_ref()?.connect_timeout.as_deref()) else {
        return Ok(None);
    };
    match super::api::duration(s) {
        Some(d) if !d.is_zero() && d <= Duration::from_secs(300) => Ok(Some(d)),
        _ => Err(format!(
            "timeout.tcp.connectTimeout: {s:?} is not a duration from 1ms to 5m (such as 5s)"
        )),
    }
}

/// `healthCheck.passive`, with Envoy Gateway's defaults: five 5xx in a row, 30 s.
fn passive_check(h: Option<&api::HealthCheck>) -> Result<Option<OutlierOverride>, String> {
    let Some(p) = h.and_then(|h| h.passive.as_ref()) else {
        return Ok(None);
    };
    let (count, any_5xx) = match (p.consecutive_5xx_errors, p.consecutive_gateway_errors) {
        (Some(_), Some(_)) => {
            return Err(
                "healthCheck.passive: pier counts one kind of failure in a row: give \
                        consecutive5XxErrors or consecutiveGatewayErrors"
                    .into(),
            );
        }
        (Some(n), None) => (n, true),
        (None, Some(n)) => (n, false),
        (None, None) => (5, true),
    };
    let ejection = match &p.base_ejection_time {
        None => Duration::from_secs(30),
        Some(s) => super::api::duration(s)
            .filter(|d| !d.is_zero() && *d <= Duration::from_secs(3600))
            .ok_or_else(|| {
                format!(
                    "healthCheck.passive.baseEjectionTime: {s:?} is not a duration from 1ms \
                     to 1h"
                )
            })?,
    };
    let interval = match &p.interval {
        None => None,
        Some(s) => Some(
            super::api::duration(s)
                .filter(|d| !d.is_zero() && *d <= Duration::from_secs(3600))
                .ok_or_else(|| {
                    format!("healthCheck.passive.interval: {s:?} is not a duration from 1ms to 1h")
                })?,
        ),
    };
    let max_ejection_percent = match p.max_ejection_percent {
        None => None,
        Some(n @ 0..=100) => Some(n as u8),
        Some(n) => {
            return Err(format!(
                "healthCheck.passive.maxEjectionPercent: {n} is not a percentage (0 to 100)"
            ));
        }
    };
    Ok(Some(OutlierOverride {
        consecutive_failures: Some(count),
        ejection: Some(ejection),
        any_5xx: Some(any_5xx),
        interval,
        max_ejection_percent,
    }))
}

/// `healthCheck.active`, with Envoy Gateway's defaults.
fn active_check(source: &str, h: Option<&api::HealthCheck>) -> Result<Option<ActiveCheck>, String> {
    let Some(h) = h else { return Ok(None) };
    if h.active.is_none() && h.passive.is_none() {
        return Err("healthCheck: neither active nor passive is given".into());
    }
    let Some(a) = &h.active else { return Ok(None) };
    let at = |e: &str| format!("healthCheck.active.{e}");
    let duration = |field: &str, given: Option<&String>, default: Duration| match given {
        None => Ok(default),
        Some(s) => super::api::duration(s)
            .filter(|d| !d.is_zero() && *d <= Duration::from_secs(3600))
            .ok_or_else(|| at(&format!("{field}: {s:?} is not a duration from 1ms to 1h"))),
    };
    let interval = duration("interval", a.interval.as_ref(), ActiveCheck::INTERVAL)?;
    let timeout = duration("timeout", a.timeout.as_ref(), ActiveCheck::TIMEOUT)?;
    let threshold = |field: &str, given: Option<u32>, default: u32| match given {
        None => Ok(default),
        Some(n) if n >= 1 => Ok(n),
        Some(_) => Err(at(&format!("{field}: must be at least 1"))),
    };
    let unhealthy_threshold = threshold(
        "unhealthyThreshold",
        a.unhealthy_threshold,
        ActiveCheck::UNHEALTHY_THRESHOLD,
    )?;
    let healthy_threshold = threshold(
        "healthyThreshold",
        a.healthy_threshold,
        ActiveCheck::HEALTHY_THRESHOLD,
    )?;
    let other = |given: bool, field: &str| {
        if given {
            Err(at(&format!("{field}: given for type {}", a.type_)))
        } else {
            Ok(())
        }
    };
    let probe = match a.type_.as_str() {
        "HTTP" => {
            other(a.grpc.is_some(), "grpc")?;
            let Some(http) = &a.http else {
                return Err(at("http: type HTTP needs http.path"));
            };
            if !http.path.starts_with('/') || http.path.parse::<http::Uri>().is_err() {
                return Err(at(&format!(
                    "http.path: {:?} is not a path starting with /",
                    http.path
                )));
            }
            let head = match http.method.as_deref() {
                None | Some("GET") => false,
                Some("HEAD") => true,
                Some(m) => {
                    return Err(at(&format!("http.method: {m:?} is not GET or HEAD")));
                }
            };
            if let Some(h) = &http.hostname
                && http::HeaderValue::from_str(h).is_err()
            {
                return Err(at(&format!("http.hostname: {h:?} is not a valid Host")));
            }
            let mut expected = Vec::new();
            for &s in &http.expected_statuses {
                match u16::try_from(s) {
                    Ok(s) if (100..=599).contains(&s) => expected.push(s),
                    _ => {
                        return Err(at(&format!(
                            "http.expectedStatuses: {s} is not a status from 100 to 599"
                        )));
                    }
                }
            }
            if expected.is_empty() {
                expected.push(200);
            }
            let body = match &http.expected_response {
                None => None,
                Some(p) => {
                    let bytes = match (p.type_.as_str(), &p.text, &p.binary) {
                        ("Text", Some(t), None) => t.as_bytes().to_vec(),
                        ("Binary", None, Some(b)) => {
                            use base64::Engine;
                            base64::engine::general_purpose::STANDARD
                                .decode(b)
                                .map_err(|_| at("http.expectedResponse.binary: not base64"))?
                        }
                        _ => {
                            return Err(at(
                                "http.expectedResponse: give type Text with text, or Binary with binary",
                            ));
                        }
                    };
                    if bytes.is_empty() || head {
                        return Err(at(
                            "http.expectedResponse: empty, or asked of a HEAD check (no body)",
                        ));
                    }
                    Some(bytes.into())
                }
            };
            Probe::Http {
                path: http.path.clone(),
                host: http.hostname.clone(),
                head,
                expected: expected.into(),
                body,
            }
        }
        "TCP" => {
            other(a.http.is_some(), "http")?;
            other(a.grpc.is_some(), "grpc")?;
            Probe::Tcp
        }
        "GRPC" => {
            other(a.http.is_some(), "http")?;
            Probe::Grpc {
                service: (a.grpc.as_ref())
                    .and_then(|g| g.service.clone())
                    .unwrap_or_default(),
            }
        }
        other => return Err(at(&format!("type: {other:?} is not HTTP, TCP or GRPC"))),
    };
    Ok(Some(ActiveCheck {
        probe,
        interval,
        timeout,
        unhealthy_threshold,
        healthy_threshold,
        source: source.to_string(),
    }))
}

/// `loadBalancer`, as the data plane applies it (`LeastRequest`: pier's default, nothing).
fn balance(lb: Option<&api::LoadBalancer>) -> Result<Option<Balance>, String> {
    let Some(lb) = lb else {
        return Ok(None);
    };
    let hash = lb.consistent_hash.as_ref();
    if hash.is_some() && lb.type_ != "ConsistentHash" {
        return Err(format!(
            "loadBalancer.consistentHash: given for type {}, not ConsistentHash",
            lb.type_
        ));
    }
    Ok(match lb.type_.as_str() {
        "LeastRequest" => None,
        "RoundRobin" => Some(Balance::RoundRobin),
        "Random" => Some(Balance::Random),
        "ConsistentHash" => {
            let at = |e: &str| format!("loadBalancer.consistentHash.{e}");
            let Some(h) = hash else {
                return Err(at("type: ConsistentHash needs consistentHash"));
            };
            let on = match h.type_.as_str() {
                "SourceIP" => HashOn::SourceIp,
                "Header" => {
                    let name = h
                        .header
                        .as_ref()
                        .ok_or_else(|| at("header: missing for type Header"))?;
                    let name = HeaderName::from_bytes(name.name.as_bytes()).map_err(|_| {
                        at(&format!(
                            "header.name: {:?} is not a header name",
                            name.name
                        ))
                    })?;
                    HashOn::Header(name)
                }
                "Cookie" => {
                    let c = h
                        .cookie
                        .as_ref()
                        .ok_or_else(|| at("cookie: missing for type Cookie"))?;
                    if c.name.is_empty() || c.name.contains([';', '=', ' ', ',']) {
                        return Err(at(&format!(
                            "cookie.name: {:?} is not a cookie name",
                            c.name
                        )));
                    }
                    let ttl = match &c.ttl {
                        None => None,
                        Some(t) => Some(
                            super::api::duration(t)
                                .filter(|d| d.as_secs() >= 1)
                                .ok_or_else(|| {
                                    at(&format!(
                                        "cookie.ttl: {t:?} is not a duration of a second or more"
                                    ))
                                })?,
                        ),
                    };
                    HashOn::Cookie {
                        name: c.name.clone(),
                        ttl,
                    }
                }
                other => {
                    return Err(at(&format!(
                        "type: {other:?} is not one of SourceIP, Header, Cookie"
                    )));
                }
            };
            Some(Balance::Hash(on))
        }
        other => {
            return Err(format!(
                "loadBalancer.type: {other:?} is not one of LeastRequest, RoundRobin, Random, \
                 ConsistentHash"
            ));
        }
    })
}

/// `timeout.http.requestTimeout`.
fn request_timeout(t: Option<&api::Timeout>) -> Result<Option<Duration>, String> {
    let Some(s) = t.and_then(|t| t.http.as_ref()?.request_timeout.as_deref()) else {
        return Ok(None);
    };
    match super::api::duration(s) {
        Some(d) if !d.is_zero() => Ok(Some(d)),
        _ => Err(format!(
            "timeout.http.requestTimeout: {s:?} is not a duration above zero (such as 10s, 1m)"
        )),
    }
}

/// `faultInjection`, as the data plane applies it.
fn faults(f: Option<&api::FaultInjection>) -> Result<Option<Faults>, String> {
    let Some(f) = f else {
        return Ok(None);
    };
    if f.delay.is_none() && f.abort.is_none() {
        return Err("faultInjection: neither delay nor abort is given".into());
    }
    let delay = match &f.delay {
        None => None,
        Some(d) => {
            let at = |e: &str| format!("faultInjection.delay.{e}");
            let delay = super::api::duration(&d.fixed_delay)
                .filter(|d| !d.is_zero() && *d <= Duration::from_secs(3600))
                .ok_or_else(|| {
                    at(&format!(
                        "fixedDelay: {:?} is not a duration from 1ms to 1h (such as 500ms, 2s)",
                        d.fixed_delay
                    ))
                })?;
            let share = share(d.percentage).map_err(|e| at(&e))?;
            Some(FaultDelay { delay, share })
        }
    };
    let abort = match &f.abort {
        None => None,
        Some(a) => {
            let at = |e: &str| format!("faultInjection.abort.{e}");
            let abort = match (a.http_status, a.grpc_status) {
                (Some(s), None) if (200..=599).contains(&s) => Abort::Http(s as u16),
                (Some(s), None) => {
                    return Err(at(&format!("httpStatus: {s} is not from 200 to 599")));
                }
                (None, Some(c)) if (0..=16).contains(&c) => Abort::Grpc(c as u16),
                (None, Some(c)) => return Err(at(&format!("grpcStatus: {c} is not from 0 to 16"))),
                (Some(_), Some(_)) => return Err(at("httpStatus and grpcStatus are both given")),
                (None, None) => return Err(at("httpStatus or grpcStatus: neither is given")),
            };
            let share = share(a.percentage).map_err(|e| at(&e))?;
            Some(FaultAbort { abort, share })
        }
    };
    Ok(Some(Faults { delay, abort }))
}

/// `percentage` (0 to 100, default 100) in millionths.
fn share(p: Option<f32>) -> Result<Share, String> {
    let p = p.unwrap_or(100.0);
    if !p.is_finite() || !(0.0..=100.0).contains(&p) {
        return Err(format!("percentage: {p} is not from 0 to 100"));
    }
    Ok(Share((f64::from(p) * 10_000.0).round() as u32))
}

/// `compressor` (or Envoy Gateway's older `compression`), as the data plane applies it.
fn compression(spec: &BackendTrafficPolicySpec) -> Result<Option<Compression>, String> {
    let (field, list) = match (spec.compressor.is_empty(), spec.compression.is_empty()) {
        (true, true) => return Ok(None),
        (false, false) => {
            return Err("compressor and compression (its older name) are both given".into());
        }
        (false, true) => ("compressor", &spec.compressor),
        (true, false) => ("compression", &spec.compression),
    };
    let mut compressors: Vec<Compressor> = Vec::with_capacity(list.len());
    for (i, c) in list.iter().enumerate() {
        let at = |e: String| format!("{field}[{i}].{e}");
        let encoding = match c.type_.as_str() {
            "Gzip" => Encoding::Gzip,
            "Brotli" => Encoding::Brotli,
            "Zstd" => Encoding::Zstd,
            other => {
                return Err(at(format!(
                    "type: {other:?} is not one of Gzip, Brotli, Zstd"
                )));
            }
        };
        let settings = [
            ("gzip", c.gzip.is_some(), Encoding::Gzip),
            ("brotli", c.brotli.is_some(), Encoding::Brotli),
            ("zstd", c.zstd.is_some(), Encoding::Zstd),
        ];
        if let Some((name, ..)) = settings.iter().find(|(_, set, e)| *set && *e != encoding) {
            return Err(at(format!(
                "{name}: settings for another type than {}",
                c.type_
            )));
        }
        if compressors.iter().any(|c| c.encoding == encoding) {
            return Err(at(format!("type: {} is listed twice", c.type_)));
        }
        let min_content_length = match &c.min_content_length {
            None => DEFAULT_MIN_CONTENT_LENGTH,
            Some(q) => quantity(&q.0).map_err(|e| at(format!("minContentLength: {e}")))?,
        };
        compressors.push(Compressor {
            encoding,
            min_content_length,
        });
    }
    Ok(Some(Compression {
        compressors: compressors.into(),
    }))
}

/// The largest `requestBuffer.limit`: every request of a rule under it may hold this much
/// memory while its body is read.
const MAX_REQUEST_BUFFER: u64 = 64 << 20;

/// `requestBuffer.limit`, from 1 byte to [`MAX_REQUEST_BUFFER`].
fn request_buffer(b: Option<&api::RequestBuffer>) -> Result<Option<u64>, String> {
    let Some(b) = b else { return Ok(None) };
    match quantity(&b.limit.0) {
        Ok(n) if (1..=MAX_REQUEST_BUFFER).contains(&n) => Ok(Some(n)),
        Ok(n) => Err(format!(
            "requestBuffer.limit: {n} bytes is not from 1 byte to 64Mi (the body is held in \
             memory)"
        )),
        Err(e) => Err(format!("requestBuffer.limit: {e}")),
    }
}

/// Envoy's default `min_content_length`.
const DEFAULT_MIN_CONTENT_LENGTH: u64 = 30;

/// A Kubernetes quantity of bytes (`1024`, `1Ki`, `1.5Mi`, `2k`), rounded up to a whole byte.
pub(super) fn quantity(q: &str) -> Result<u64, String> {
    let bad = || format!("{q:?} is not a quantity of bytes (such as 1024, 64Ki, 1Mi)");
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let unit: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => return Err(bad()),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return Err(bad());
    }
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(fraction) || fraction.len() > 9 {
        return Err(bad());
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    let scale = 10u64.pow(fraction.len() as u32);
    let fraction: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().map_err(|_| bad())?
    };
    let total = (whole.checked_mul(unit))
        .and_then(|w| w.checked_add((fraction * unit).div_ceil(scale)))
        .ok_or_else(bad)?;
    Ok(total)
}

fn limit_rule(source: &str, i: usize, r: &api::RateLimitRule) -> Result<LimitRule, String> {
    let requests = r.limit.requests;
    if requests == 0 {
        return Err("limit.requests: must be at least 1".into());
    }
    let period = match r.limit.unit.as_str() {
        "Second" => Duration::from_secs(1),
        "Minute" => Duration::from_secs(60),
        "Hour" => Duration::from_secs(3600),
        "Day" => Duration::from_secs(86_400),
        other => {
            return Err(format!(
                "limit.unit: {other:?} is not Second, Minute, Hour or Day"
            ));
        }
    };
    let selectors = (r.client_selectors.iter().enumerate())
        .map(|(j, s)| selector(s).map_err(|e| format!("clientSelectors[{j}].{e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let limit = Limit { requests, period };
    let shared = r.shared.unwrap_or(false);
    let key = format!("{source}|{i}|{requests}/{period:?}|shared={shared}|{selectors:?}");
    Ok(LimitRule {
        selectors,
        limit,
        shared,
        key,
    })
}

fn selector(s: &api::RateLimitSelectCondition) -> Result<Selector, String> {
    let headers = (s.headers.iter())
        .map(|h| {
            let name = HeaderName::from_bytes(h.name.as_bytes())
                .map_err(|_| format!("headers: {:?} is not a header name", h.name))?;
            let invert = h.invert.unwrap_or(false);
            let value = || {
                h.value
                    .as_deref()
                    .ok_or_else(|| format!("headers: {} has no value", h.name))
            };
            match h.type_.as_deref().unwrap_or("Exact") {
                "Exact" => Ok(HeaderSelect::Match {
                    name,
                    value: ValueMatch::Exact(value()?.to_string()),
                    invert,
                }),
                "RegularExpression" => Ok(HeaderSelect::Match {
                    value: ValueMatch::regex(value()?)
                        .map_err(|e| format!("headers: {}: {e}", h.name))?,
                    name,
                    invert,
                }),
                "Distinct" if invert => Err(format!(
                    "headers: {}: a Distinct header cannot be inverted",
                    h.name
                )),
                "Distinct" if h.value.is_some() => Err(format!(
                    "headers: {}: a Distinct header has no value",
                    h.name
                )),
                "Distinct" => Ok(HeaderSelect::Distinct(name)),
                other => Err(format!(
                    "headers: {}: type {other:?} is not Exact, RegularExpression or Distinct",
                    h.name
                )),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let source = (s.source_cidr.as_ref())
        .map(|c| {
            let cidr = c
                .value
                .parse()
                .map_err(|e| format!("sourceCIDR.value: {:?}: {e}", c.value))?;
            let distinct = match c.type_.as_deref().unwrap_or("Exact") {
                "Exact" => false,
                "Distinct" => true,
                other => {
                    return Err(format!(
                        "sourceCIDR.type: {other:?} is not Exact or Distinct"
                    ));
                }
            };
            Ok(SourceSelect { cidr, distinct })
        })
        .transpose()?;
    let methods = (s.methods.iter())
        .map(|m| {
            let ok = !m.value.is_empty() && m.value.bytes().all(|b| b.is_ascii_uppercase());
            let method = ok
                .then(|| Method::from_bytes(m.value.as_bytes()).ok())
                .flatten();
            method
                .map(|method| (method, m.invert.unwrap_or(false)))
                .ok_or_else(|| format!("methods: {:?} is not an HTTP method", m.value))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let path = (s.path.as_ref())
        .map(|p| {
            let path = match p.type_.as_deref().unwrap_or("PathPrefix") {
                "Exact" => PathMatch::exact(&p.value),
                "PathPrefix" => PathMatch::prefix(&p.value),
                "RegularExpression" => PathMatch::regex(&p.value),
                other => {
                    return Err(format!(
                        "path.type: {other:?} is not Exact, PathPrefix or RegularExpression"
                    ));
                }
            };
            let path = path.map_err(|e| format!("path.value: {:?}: {e}", p.value))?;
            Ok(PathSelect {
                path,
                invert: p.invert.unwrap_or(false),
            })
        })
        .transpose()?;
    Ok(Selector {
        headers,
        source,
        methods,
        path,
    })
}

/// The rate-limit service's configuration (envoyproxy/ratelimit's YAML; written as JSON,
/// which is YAML) for the global rules `snapshot` enforces, in `domain`: one descriptor per
/// rule (and Route, unless shared) keyed [`RULE_KEY`], its Distinct entries nested under it in
/// the order pier sends them, the limit on the innermost. Sorted, so equal rules give equal
/// bytes and every pier instance writes the same file.
pub fn rate_limit_config(snapshot: &crate::model::Snapshot, domain: &str) -> String {
    use std::collections::BTreeMap;
    let mut rules: BTreeMap<&str, (&LimitRule, Vec<String>)> = BTreeMap::new();
    let entries = (snapshot.ports.iter())
        .flat_map(|p| &p.listeners)
        .flat_map(|l| l.routes.entries());
    for t in entries.filter_map(|e| e.rule.traffic.as_deref()) {
        let Some(g) = &t.global else { continue };
        for (rule, value) in t.policy.global.iter().zip(g.values.iter()) {
            rules
                .entry(value)
                .or_insert_with(|| (rule, rule.distinct_keys()));
        }
    }
    let units = |l: &crate::ratelimit::Limit| match l.period.as_secs() {
        1 => "second",
        60 => "minute",
        3600 => "hour",
        _ => "day",
    };
    let descriptors: Vec<serde_json::Value> = rules
        .into_iter()
        .map(|(value, (rule, keys))| {
            let limit = serde_json::json!({
                "unit": units(&rule.limit),
                "requests_per_unit": rule.limit.requests,
            });
            // Innermost first: the limit on the last Distinct key, or on the rule itself.
            let mut inner: Option<serde_json::Value> = None;
            for key in keys.iter().rev() {
                let mut d = serde_json::json!({ "key": key });
                match inner.take() {
                    None => d["rate_limit"] = limit.clone(),
                    Some(nested) => d["descriptors"] = serde_json::json!([nested]),
                }
                inner = Some(d);
            }
            let mut d = serde_json::json!({ "key": RULE_KEY, "value": value });
            match inner {
                None => d["rate_limit"] = limit,
                Some(nested) => d["descriptors"] = serde_json::json!([nested]),
            }
            d
        })
        .collect();
    let config = serde_json::json!({ "domain": domain, "descriptors": descriptors });
    let mut text = serde_json::to_string_pretty(&config).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests;
