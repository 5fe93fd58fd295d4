//! A listener's route table: every (hostname, match) of every rule of every attached HTTPRoute,
//! indexed by hostname and pre-sorted by precedence, so `find` returns the first hit.
//!
//! Precedence (HTTPRoute spec): the most specific matching hostname (exact, then longest
//! wildcard, then none), then [`MatchRank`], then the oldest Route, then `namespace/name`,
//! then rule order, then match order. Hostname rank dominates, so buckets are searched from
//! most to least specific and the first matching entry in the first bucket with one wins.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use super::ObjectRef;
use super::backend::{BackendSet, Timeouts};
use super::filter::Filters;
use super::host::HostnameMatch;
use super::matcher::{MatchRank, RequestMatch, RequestParts};

/// One HTTPRoute rule as the data plane runs it.
#[derive(Debug, Serialize)]
pub struct Rule {
    pub route: ObjectRef,
    pub index: usize,
    #[serde(skip_serializing_if = "Filters::is_empty")]
    pub filters: Filters,
    pub backends: BackendSet,
    pub timeouts: Timeouts,
}

#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    #[serde(rename = "match")]
    pub matcher: RequestMatch,
    pub rule: Arc<Rule>,
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
    exact: HashMap<String, Vec<Entry>>,
    /// Longest suffix first.
    wildcard: Vec<(String, Vec<Entry>)>,
    any: Vec<Entry>,
}

/// Collects entries with their tie-break order, then sorts once.
#[derive(Debug, Default)]
pub struct RouteTableBuilder {
    exact: HashMap<String, Vec<(SortKey, Entry)>>,
    wildcard: HashMap<String, Vec<(SortKey, Entry)>>,
    any: Vec<(SortKey, Entry)>,
}

/// Sort key: higher rank first, then lower `order` (route age/name, rule, match).
type SortKey = (Reverse<MatchRank>, (usize, usize, usize));

// === impl RouteTable ===

impl RouteTable {
    pub fn builder() -> RouteTableBuilder {
        RouteTableBuilder::default()
    }

    /// `host` is normalised (lower-case, no port).
    pub fn find(&self, host: &str, req: &RequestParts<'_>) -> Option<&Entry> {
        if let Some(entries) = self.exact.get(host)
            && let Some(e) = first_match(entries, req)
        {
            return Some(e);
        }
        for (suffix, entries) in &self.wildcard {
            if host.len() > suffix.len()
                && host.ends_with(suffix.as_str())
                && let Some(e) = first_match(entries, req)
            {
                return Some(e);
            }
        }
        first_match(&self.any, req)
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty() && self.any.is_empty()
    }

    /// Number of (hostname, match) entries.
    pub fn len(&self) -> usize {
        self.exact.values().map(Vec::len).sum::<usize>()
            + self.wildcard.iter().map(|(_, v)| v.len()).sum::<usize>()
            + self.any.len()
    }

    /// The hostname buckets in lookup order, for stable dumps (tests, `pier check`): exact
    /// names sorted, then wildcards longest suffix first, then `None` for any host.
    pub fn buckets(&self) -> Vec<(Option<HostnameMatch>, &[Entry])> {
        let mut exact: Vec<_> = self.exact.iter().collect();
        exact.sort_by(|a, b| a.0.cmp(b.0));
        exact
            .into_iter()
            .map(|(h, v)| (Some(HostnameMatch::Exact(h.clone())), v.as_slice()))
            .chain(
                self.wildcard
                    .iter()
                    .map(|(s, v)| (Some(HostnameMatch::Wildcard(s.clone())), v.as_slice())),
            )
            .chain((!self.any.is_empty()).then_some((None, self.any.as_slice())))
            .collect()
    }

    /// Every rule in the table (with repeats), for carrying state across snapshots.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.exact
            .values()
            .flatten()
            .chain(self.wildcard.iter().flat_map(|(_, v)| v))
            .chain(&self.any)
    }
}

fn first_match<'a>(entries: &'a [Entry], req: &RequestParts<'_>) -> Option<&'a Entry> {
    entries.iter().find(|e| e.matcher.matches(req))
}

// === impl RouteTableBuilder ===

impl RouteTableBuilder {
    /// Adds one match of one rule. `hostnames` are the effective hostnames (route ∩ listener);
    /// empty means any host. `order` is (route order, rule index, match index), where route
    /// order sorts Routes by creation time, then `namespace/name`.
    pub fn add(
        &mut self,
        hostnames: &[HostnameMatch],
        matcher: RequestMatch,
        rule: &Arc<Rule>,
        order: (usize, usize, usize),
    ) {
        let key = (Reverse(matcher.rank()), order);
        let entry = Entry {
            matcher,
            rule: rule.clone(),
        };
        if hostnames.is_empty() {
            self.any.push((key, entry));
            return;
        }
        for h in hostnames {
            let bucket = match h {
                HostnameMatch::Exact(n) => self.exact.entry(n.clone()).or_default(),
                HostnameMatch::Wildcard(s) => self.wildcard.entry(s.clone()).or_default(),
            };
            bucket.push((key, entry.clone()));
        }
    }

    pub fn build(self) -> RouteTable {
        fn sorted(mut v: Vec<(SortKey, Entry)>) -> Vec<Entry> {
            v.sort_by_key(|e| e.0);
            v.into_iter().map(|(_, e)| e).collect()
        }
        let mut wildcard: Vec<_> = self
            .wildcard
            .into_iter()
            .map(|(s, v)| (s, sorted(v)))
            .collect();
        wildcard.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        RouteTable {
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

#[cfg(test)]
mod tests;
