//! HTTPRoute `retry` (GEP-1731) as the data plane runs it: which answers are worth another
//! attempt, how many attempts, and how long to wait before each.
//!
//! Parsed at translation time (`translate::http_route`); the retry loop itself, the body
//! buffering it needs and the per-backend retry budget live in `proxy::retry`.

use std::time::Duration;

use serde::Serialize;

/// Retries when `retry.attempts` is not set (GEP-1731 leaves it to the implementation): one,
/// as Envoy's and linkerd's defaults. The retry budget bounds retries whatever this says.
pub const DEFAULT_RETRY_ATTEMPTS: u32 = 1;
/// The wait before a retry when `retry.backoff` is not set (Envoy's base interval).
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_millis(25);

/// A rule's retry policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RetryPolicy {
    /// Response statuses that are retried (400-599), sorted, no repeats. Connection failures
    /// and resets before a response, and `timeouts.backendRequest`, are retried whatever
    /// this lists.
    pub codes: Vec<u16>,
    /// Retries after the first attempt; 0: none.
    pub attempts: u32,
    /// The wait before each retry (the same before every one: GEP-1731's minimum, without
    /// growth or jitter).
    #[serde(serialize_with = "ser_ms")]
    pub backoff: Duration,
}

impl RetryPolicy {
    /// `codes` in any order, with repeats.
    pub fn new(mut codes: Vec<u16>, attempts: u32, backoff: Duration) -> Self {
        codes.sort_unstable();
        codes.dedup();
        Self {
            codes,
            attempts,
            backoff,
        }
    }

    /// Whether a response with `status` is retried.
    pub fn retries_status(&self, status: http::StatusCode) -> bool {
        self.codes.binary_search(&status.as_u16()).is_ok()
    }
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{}ms", d.as_millis()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn codes_are_sorted_and_deduplicated_and_only_they_are_retried() {
        let p = RetryPolicy::new(vec![503, 500, 503], 2, Duration::ZERO);
        assert_eq!(p.codes, [500, 503]);
        assert!(p.retries_status(StatusCode::INTERNAL_SERVER_ERROR));
        assert!(p.retries_status(StatusCode::SERVICE_UNAVAILABLE));
        assert!(!p.retries_status(StatusCode::BAD_GATEWAY));
        assert!(!p.retries_status(StatusCode::OK));
    }

    #[test]
    fn serialises_backoff_in_milliseconds() {
        let p = RetryPolicy::new(vec![500], 3, Duration::from_millis(1500));
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"codes": [500], "attempts": 3, "backoff": "1500ms"})
        );
    }
}

/// A retry budget's knobs: pier's defaults (linkerd2's and Finagle's: 20 % over 10 s, at least
/// 10 retries a second), or a Service's XBackendTrafficPolicy `retryConstraint` (Gateway API
/// v1.7: `budget {percent, interval}`, `minRetryRate {count, interval}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryBudgetConfig {
    /// Retries may be this many percent of the requests over the window.
    pub percent: u32,
    /// ... or, whatever the ratio, this many retries within the last `min_interval`.
    pub min_retries: u32,
    /// Whole seconds, at least one.
    #[serde(serialize_with = "ser_ms")]
    pub min_interval: Duration,
    /// The sliding window, in whole seconds (at least one).
    #[serde(serialize_with = "ser_ms")]
    pub window: Duration,
}

impl Default for RetryBudgetConfig {
    fn default() -> Self {
        Self {
            percent: 20,
            min_retries: 10,
            min_interval: Duration::from_secs(1),
            window: Duration::from_secs(10),
        }
    }
}

/// A Service's retry constraint (XBackendTrafficPolicy): its own budget, and once it is
/// spent a retry is not sent and the client gets **503** (the API's MUST), where pier's
/// default budget lets the last attempt's answer stand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RetryConstraint {
    pub budget: RetryBudgetConfig,
}
