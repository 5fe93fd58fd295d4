//! A listener's route table: every (hostname, match) of every rule of every attached HTTPRoute,
//! indexed by hostname and pre-sorted by precedence, so `find` returns the first hit.
//!
//! Precedence (HTTPRoute spec): the most specific matching hostname (exact, then longest
//! wildcard, then none), then, among routes whose hostnames intersect the listener's to the
//! same name, the most specific hostname the route itself wrote (Gateway API v1.7's
//! `GatewayRouteHostnameIntersectionPrecedence`: a route for `abc.example.com` beats one for
//! `*.example.com` on a listener for `abc.example.com`), then [`MatchRank`], then the oldest
//! Route, then `namespace/name`, then rule order, then match order. Hostname rank dominates,
//! so buckets are searched from most to least specific and the first matching entry in the
//! first bucket with one wins.
//!
//! A bucket with many entries (many routes on one hostname) also gets a [`PathIndex`]: the
//! entries that can only match one exact path, or paths below one prefix, are listed under that
//! path, so a lookup visits the few entries whose path can match (one hash lookup per path
//! segment) instead of scanning them all. The index only narrows the search: every candidate
//! still goes through the full matcher, and the answer is the same first match in precedence
//! order.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use super::ObjectRef;
use super::backend::{Backend, Timeouts};
use super::filter::Filters;
use super::host::{HostRank, HostnameMatch};
use super::matcher::{MatchRank, PathMatch, RequestMatch, RequestParts};
use super::policy::AccessPolicy;
use super::retry::RetryPolicy;
use super::session::SessionPolicy;

/// One HTTPRoute rule as the data plane runs it.
#[derive(Clone, Debug, Serialize)]
pub struct Rule {
    pub route: ObjectRef,
    /// The Route's kind: `HTTPRoute`, `GRPCRoute` or `TLSRoute` (for `/config`).
    pub kind: &'static str,
    pub index: usize,
    /// The rule's `name` (Gateway API named route rules), for `/config` and logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Filters::is_empty")]
    pub filters: Filters,
    pub backends: BackendSet,
    pub timeouts: Timeouts,
    /// GEP-1731 retries; `None`: every request gets one attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// GEP-1619 session persistence: requests with a live session go to its endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionPolicy>,
    /// Who may come in (`proxy::phase` checks it after routing); `None`: anyone, at the cost
    /// of one branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<Arc<AccessPolicy>>,
    /// How much traffic may come in (a BackendTrafficPolicy's rate limits, `proxy::phase`
    /// checks them after access); `None`: no limit, at the cost of one branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traffic: Option<Arc<super::traffic::RuleTraffic>>,
    /// A BackendTrafficPolicy's active health check of the rule's backends (`proxy::health`
    /// runs it; nothing per request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Arc<super::health::ActiveCheck>>,
}

/// What a weighted backendRef resolved to.
#[derive(Clone, Debug, Serialize)]
pub enum BackendTarget {
    Service(Arc<Backend>),
    /// A reference that did not resolve (missing Service, cross-namespace without
    /// ReferenceGrant, unsupported kind): its share of the traffic gets a 500.
    Invalid,
}

#[derive(Clone, Debug, Serialize)]
pub struct WeightedBackend {
    pub weight: u32,
    pub target: BackendTarget,
    #[serde(skip_serializing_if = "Filters::is_empty")]
    pub filters: Filters,
}

/// The backendRefs of a rule. An empty set (or all weights zero) answers 500.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BackendSet {
    pub backends: Vec<WeightedBackend>,
    #[serde(skip)]
    pub total_weight: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    #[serde(rename = "match")]
    pub matcher: RequestMatch,
    pub rule: Arc<Rule>,
}

impl Rule {
    /// The retry policy, when it allows a retry (`attempts: 0` retries nothing).
    pub fn retries(&self) -> Option<&RetryPolicy> {
        self.retry.as_ref().filter(|p| p.attempts > 0)
    }

    /// This rule under the policies attached to it, its route, its listener or its Gateway:
    /// an access policy (SecurityPolicy) and traffic limits (BackendTrafficPolicy).
    pub fn with_policies(
        &self,
        access: Option<Arc<AccessPolicy>>,
        traffic: Option<Arc<super::traffic::RuleTraffic>>,
    ) -> Self {
        Self {
            access,
            traffic,
            ..self.clone()
        }
    }

    /// Whether deciding the request reads its headers whatever the rule matches on: a CORS
    /// filter (Origin, Access-Control-Request-*), an access policy or a rate limit that reads
    /// headers.
    pub fn needs_headers(&self) -> bool {
        self.has_cors()
            || self.access.as_ref().is_some_and(|a| a.needs_headers())
            || self
                .traffic
                .as_ref()
                .is_some_and(|t| t.policy.needs_headers)
    }

    /// The external authorizers a request on this rule must pass, in order: its
    /// SecurityPolicy's `extAuth`, then its `ExternalAuth` filter. Empty for most rules.
    pub fn ext_auths(&self) -> impl Iterator<Item = &super::ext_auth::ExtAuth> {
        let policy = self.access.as_ref().and_then(|a| a.ext_auth.as_deref());
        policy.into_iter().chain(self.filters.ext_auth.as_deref())
    }

    /// Whether an external authorizer is asked about the rule's requests (hyper's path then
    /// serves them: the fast path does not wait on a second exchange).
    pub fn has_ext_auth(&self) -> bool {
        self.filters.ext_auth.is_some()
            || self.access.as_ref().is_some_and(|a| a.ext_auth.is_some())
    }

    /// Whether the rule's SecurityPolicy logs clients in with OIDC.
    pub fn has_oidc(&self) -> bool {
        self.access.as_ref().is_some_and(|a| a.oidc.is_some())
    }

    /// Whether a BackendTrafficPolicy gives the rule global rate limits (a call to the
    /// rate-limit service per request).
    pub fn has_global_limits(&self) -> bool {
        self.traffic.as_ref().is_some_and(|t| t.global.is_some())
    }

    /// Whether the rule or one of its backendRefs has a CORS filter.
    pub fn has_cors(&self) -> bool {
        self.filters.cors.is_some()
            || self
                .backends
                .backends
                .iter()
                .any(|b| b.filters.cors.is_some())
    }
}

impl Entry {
    /// The matched PathPrefix (no trailing `/`), which ReplacePrefixMatch needs.
    pub fn matched_prefix(&self) -> Option<&str> {
        match &self.matcher.path {
            super::PathMatch::Prefix(p) => Some(p),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct RouteTable {
    exact: HashMap<String, Bucket>,
    /// Longest suffix first.
    wildcard: Vec<(String, Bucket)>,
    any: Bucket,
    /// Whether any entry matches on headers: only then does routing need the request's
    /// headers as a map (the HTTP/1.1 fast path skips building one otherwise).
    #[serde(skip)]
    header_matches: bool,
}

/// The entries of one hostname, in precedence order, and their path index when there are
/// enough of them for it to pay.
#[derive(Clone, Debug, Default)]
struct Bucket {
    entries: Vec<Entry>,
    index: Option<PathIndex>,
}

/// Below this many entries a bucket is scanned: a scan of a few matchers is cheaper than the
/// hash lookups.
const INDEX_MIN_ENTRIES: usize = 16;

/// Entry positions (ascending, so precedence order) by the path they need.
#[derive(Clone, Debug, Default)]
struct PathIndex {
    /// `Exact` path matches, by path.
    exact: HashMap<Box<str>, Vec<u32>>,
    /// `PathPrefix` matches, by prefix as stored (no trailing `/`; `/` is "").
    prefix: HashMap<Box<str>, Vec<u32>>,
    /// Regular expressions: always candidates.
    other: Vec<u32>,
}

/// Collects entries with their tie-break order, then sorts once.
#[derive(Debug, Default)]
pub struct RouteTableBuilder {
    exact: HashMap<String, Vec<(SortKey, Entry)>>,
    wildcard: HashMap<String, Vec<(SortKey, Entry)>>,
    any: Vec<(SortKey, Entry)>,
}

/// Sort key: the more specific hostname the route wrote first, then higher match rank, then
/// lower `order` (route age/name, rule, match).
type SortKey = (Reverse<HostRank>, Reverse<MatchRank>, (usize, usize, usize));

// === impl RouteTable ===

impl RouteTable {
    pub fn builder() -> RouteTableBuilder {
        RouteTableBuilder::default()
    }

    /// `host` is normalised (lower-case, no port).
    pub fn find(&self, host: &str, req: &RequestParts<'_>) -> Option<&Entry> {
        if let Some(bucket) = self.exact.get(host)
            && let Some(e) = bucket.first_match(req)
        {
            return Some(e);
        }
        for (suffix, bucket) in &self.wildcard {
            if host.len() > suffix.len()
                && host.ends_with(suffix.as_str())
                && let Some(e) = bucket.first_match(req)
            {
                return Some(e);
            }
        }
        self.any.first_match(req)
    }

    /// Whether [`RouteTable::find`] looks at request headers.
    pub fn matches_headers(&self) -> bool {
        self.header_matches
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty() && self.any.entries.is_empty()
    }

    /// Number of (hostname, match) entries.
    pub fn len(&self) -> usize {
        self.exact.values().map(|b| b.entries.len()).sum::<usize>()
            + self
                .wildcard
                .iter()
                .map(|(_, b)| b.entries.len())
                .sum::<usize>()
            + self.any.entries.len()
    }

    /// The hostname buckets in lookup order, for stable dumps (tests, `pier check`): exact
    /// names sorted, then wildcards longest suffix first, then `None` for any host.
    pub fn buckets(&self) -> Vec<(Option<HostnameMatch>, &[Entry])> {
        let mut exact: Vec<_> = self.exact.iter().collect();
        exact.sort_by(|a, b| a.0.cmp(b.0));
        exact
            .into_iter()
            .map(|(h, b)| (Some(HostnameMatch::Exact(h.clone())), b.entries.as_slice()))
            .chain(self.wildcard.iter().map(|(s, b)| {
                (
                    Some(HostnameMatch::Wildcard(s.clone())),
                    b.entries.as_slice(),
                )
            }))
            .chain((!self.any.entries.is_empty()).then_some((None, self.any.entries.as_slice())))
            .collect()
    }

    /// Every rule in the table (with repeats), for carrying state across snapshots.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.exact
            .values()
            .flat_map(|b| &b.entries)
            .chain(self.wildcard.iter().flat_map(|(_, b)| &b.entries))
            .chain(&self.any.entries)
    }
}

// === impl Bucket ===

impl Bucket {
    fn new(entries: Vec<Entry>) -> Self {
        let index = (entries.len() >= INDEX_MIN_ENTRIES).then(|| PathIndex::new(&entries));
        Self { entries, index }
    }

    /// The first entry, in precedence order, that matches `req`.
    fn first_match(&self, req: &RequestParts<'_>) -> Option<&Entry> {
        let Some(index) = &self.index else {
            return self.entries.iter().find(|e| e.matcher.matches(req));
        };
        // Each candidate list is in precedence order, so its first match is its best; the
        // answer is the best of those.
        let mut best: Option<u32> = None;
        let mut consider = |list: &[u32]| {
            let bound = best.unwrap_or(u32::MAX);
            if let Some(&i) = list
                .iter()
                .take_while(|&&i| i < bound)
                .find(|&&i| self.entries[i as usize].matcher.matches(req))
            {
                best = Some(i);
            }
        };
        let path = req.path;
        if let Some(list) = index.exact.get(path) {
            consider(list);
        }
        // Prefixes that `path` is under: the path up to each `/`, and the whole path.
        for (i, b) in path.bytes().enumerate() {
            if b == b'/'
                && let Some(list) = index.prefix.get(&path[..i])
            {
                consider(list);
            }
        }
        if let Some(list) = index.prefix.get(path) {
            consider(list);
        }
        consider(&index.other);
        best.map(|i| &self.entries[i as usize])
    }
}

/// The `/config` dump shows the entries only.
impl Serialize for Bucket {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.entries.serialize(s)
    }
}

// === impl PathIndex ===

impl PathIndex {
    fn new(entries: &[Entry]) -> Self {
        let mut index = Self::default();
        for (i, e) in entries.iter().enumerate() {
            let i = u32::try_from(i).expect("fewer than 2^32 entries in one bucket");
            match &e.matcher.path {
                PathMatch::Exact(p) => index.exact.entry(p.as_str().into()).or_default().push(i),
                PathMatch::Prefix(p) => index.prefix.entry(p.as_str().into()).or_default().push(i),
                PathMatch::RegularExpression(_) => index.other.push(i),
            }
        }
        index
    }
}

// === impl RouteTableBuilder ===

impl RouteTableBuilder {
    /// Adds one match of one rule. `hostnames` are the effective hostnames (route ∩ listener);
    /// empty means any host. `order` is (route order, rule index, match index), where route
    /// order sorts Routes by creation time, then `namespace/name`. Each hostname ranks as the
    /// route's own (right when the listener has no hostname; else see [`Self::add_ranked`]).
    pub fn add(
        &mut self,
        hostnames: &[HostnameMatch],
        matcher: RequestMatch,
        rule: &Arc<Rule>,
        order: (usize, usize, usize),
    ) {
        let ranks: Vec<HostRank> = hostnames.iter().map(HostnameMatch::rank).collect();
        self.add_ranked(hostnames, &ranks, matcher, rule, order);
    }

    /// As [`Self::add`], with `ranks[i]` the rank of the hostname the route wrote that
    /// `hostnames[i]` comes from (the most specific one when several intersect to it;
    /// [`HostRank::Any`] for a route without hostnames). `ranks` is as long as `hostnames`.
    pub fn add_ranked(
        &mut self,
        hostnames: &[HostnameMatch],
        ranks: &[HostRank],
        matcher: RequestMatch,
        rule: &Arc<Rule>,
        order: (usize, usize, usize),
    ) {
        debug_assert_eq!(hostnames.len(), ranks.len());
        let match_rank = Reverse(matcher.rank());
        let entry = Entry {
            matcher,
            rule: rule.clone(),
        };
        if hostnames.is_empty() {
            self.any
                .push(((Reverse(HostRank::Any), match_rank, order), entry));
            return;
        }
        for (h, rank) in hostnames.iter().zip(ranks) {
            let key = (Reverse(*rank), match_rank, order);
            let bucket = match h {
                HostnameMatch::Exact(n) => self.exact.entry(n.clone()).or_default(),
                HostnameMatch::Wildcard(s) => self.wildcard.entry(s.clone()).or_default(),
            };
            bucket.push((key, entry.clone()));
        }
    }

    pub fn build(self) -> RouteTable {
        let header_matches = self
            .exact
            .values()
            .chain(self.wildcard.values())
            .flatten()
            .chain(&self.any)
            .any(|(_, e)| !e.matcher.headers.is_empty());
        fn sorted(mut v: Vec<(SortKey, Entry)>) -> Bucket {
            v.sort_by_key(|e| e.0);
            Bucket::new(v.into_iter().map(|(_, e)| e).collect())
        }
        let mut wildcard: Vec<_> = self
            .wildcard
            .into_iter()
            .map(|(s, v)| (s, sorted(v)))
            .collect();
        wildcard.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        RouteTable {
            header_matches,
            exact: self
                .exact
                .into_iter()
                .map(|(h, v)| (h, sorted(v)))
                .collect(),
            wildcard,
            any: sorted(self.any),
        }
    }
}

// === impl BackendSet ===

impl BackendSet {
    /// These backends with a policy's settings (outlier detection, circuit breaking, connect
    /// timeout) over their Services' own: copies that share the endpoints' and the backends'
    /// load state.
    pub fn with_override(&self, o: &super::backend::BackendOverride) -> Self {
        let backends = (self.backends.iter())
            .map(|wb| {
                let target = match &wb.target {
                    BackendTarget::Service(b) => BackendTarget::Service(Arc::new(o.over(b))),
                    BackendTarget::Invalid => BackendTarget::Invalid,
                };
                WeightedBackend {
                    target,
                    ..wb.clone()
                }
            })
            .collect();
        Self {
            backends,
            total_weight: self.total_weight,
        }
    }

    pub fn new(backends: Vec<WeightedBackend>) -> Self {
        let total_weight = backends.iter().map(|b| b.weight).sum();
        Self {
            backends,
            total_weight,
        }
    }

    /// Picks a backend by weight; `roll` is uniform in `[0, total_weight)`. `None` when the
    /// set is empty or every weight is zero.
    pub fn pick(&self, roll: u32) -> Option<&WeightedBackend> {
        let mut acc = 0;
        for b in &self.backends {
            acc += b.weight;
            if roll < acc {
                return Some(b);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
