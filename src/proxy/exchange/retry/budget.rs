//! Retry budgets: how many retries a backend may receive, so that retries never multiply the
//! load on a backend that is failing (a retry storm).
//!
//! A retry is allowed when, over the sliding window (10 one-second slots by default), the
//! backend's retries stay under [`RetryBudgetConfig::percent`] (20 %) of the requests its
//! retrying rules sent it (those that could be retried: the first attempts that
//! `proxy::retry` sends; requests of rules without retries take the HTTP/1.1 fast path,
//! which must not take a lock per request), or when fewer than [`RetryBudgetConfig::min_retries`] (10)
//! retries went to it within [`RetryBudgetConfig::min_interval`] (the current second), so a backend with little traffic can still have
//! its few failures retried. The same idea as linkerd2's and Finagle's budgets (20 % of
//! requests over 10 s, at least 10 retries a second), and Envoy's `retry_budget` (20 % of
//! active requests, at least 3 concurrent retries). A failing backend receives at most about
//! 1.2 times its normal traffic, however many attempts the rules allow.
//!
//! Budgets are per backend (Service port), shared by every rule that sends to it, and live
//! outside the snapshot: a reload neither resets nor forgets them (a changed XBackendTrafficPolicy
//! starts the Service's budget afresh). A budget unused for a whole window holds nothing and
//! is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::model::BackendId;
use crate::proxy::config::RetryBudgetConfig;

/// One backend's budget. Callers pass the time (milliseconds on the proxy's monotonic clock),
/// so the arithmetic is tested without a clock.
#[derive(Debug)]
pub struct RetryBudget {
    config: RetryBudgetConfig,
    slots: Mutex<Vec<Slot>>,
}

/// Counts of one second of the window.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// Which second (since the clock's start) the counts are of.
    second: u64,
    requests: u64,
    retries: u64,
}

/// Every backend's budget, by backend.
#[derive(Debug, Default)]
pub struct RetryBudgets {
    config: RetryBudgetConfig,
    by_backend: Mutex<HashMap<BackendId, Arc<RetryBudget>>>,
}

// === impl RetryBudget ===

impl RetryBudget {
    pub fn new(config: RetryBudgetConfig) -> Self {
        let n = config.window.max(config.min_interval).as_secs().max(1) as usize;
        Self {
            config,
            slots: Mutex::new(vec![Slot::default(); n]),
        }
    }

    /// Counts a request (a first attempt) to the backend.
    pub fn deposit(&self, now_ms: u64) {
        self.with_slot(now_ms, |slots, _, i| slots[i].requests += 1);
    }

    /// Takes a retry from the budget: false when it is spent (the retry must not be sent).
    pub fn withdraw(&self, now_ms: u64) -> bool {
        let RetryBudgetConfig {
            percent,
            min_retries,
            min_interval,
            window,
        } = self.config;
        let (window, min_interval) = (secs(window), secs(min_interval));
        self.with_slot(now_ms, |slots, second, i| {
            let (requests, retries) = counts(slots, second, window);
            let (_, recent) = counts(slots, second, min_interval);
            let allowed =
                retries * 100 < requests * u64::from(percent) || recent < u64::from(min_retries);
            if allowed {
                slots[i].retries += 1;
            }
            allowed
        })
    }

    /// Made with `config`.
    pub fn has(&self, config: &RetryBudgetConfig) -> bool {
        self.config == *config
    }

    /// Whether nothing in the window is left: the budget is as good as a new one.
    fn is_idle(&self, now_ms: u64) -> bool {
        let slots = self.lock();
        let (requests, retries) = counts(&slots, now_ms / 1000, slots.len() as u64);
        requests + retries == 0
    }

    /// Runs `f` on the slots, the current second and its slot's index.
    fn with_slot<R>(&self, now_ms: u64, f: impl FnOnce(&mut [Slot], u64, usize) -> R) -> R {
        let mut slots = self.lock();
        // Callers read the clock before taking the lock, so one may come a little late: it
        // counts in the newest second rather than wiping it.
        let newest = slots.iter().map(|s| s.second).max().unwrap_or(0);
        let second = (now_ms / 1000).max(newest);
        let i = (second % slots.len() as u64) as usize;
        if slots[i].second != second {
            // The slot holds a second that has left the window (or none yet).
            slots[i] = Slot {
                second,
                ..Slot::default()
            };
        }
        f(&mut slots, second, i)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        // Never held across an await; counts stay consistent if a holder panicked.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A duration in whole seconds, at least one.
fn secs(d: std::time::Duration) -> u64 {
    d.as_secs().max(1)
}

/// (requests, retries) of the `n` seconds that end at `second` (the slots hold at least as
/// many).
fn counts(slots: &[Slot], second: u64, n: u64) -> (u64, u64) {
    slots
        .iter()
        .filter(|s| s.second <= second && second - s.second < n)
        .fold((0, 0), |(q, r), s| (q + s.requests, r + s.retries))
}

// === impl RetryBudgets ===

impl RetryBudgets {
    pub fn new(config: RetryBudgetConfig) -> Self {
        Self {
            config,
            by_backend: Mutex::default(),
        }
    }

    /// The budget of `backend`, made on first use, with `own` (its XBackendTrafficPolicy's
    /// knobs) or pier's. Making one also drops the budgets that have been idle for a whole
    /// window, so the map holds only backends retried lately.
    pub fn of(
        &self,
        backend: &BackendId,
        own: Option<&RetryBudgetConfig>,
        now_ms: u64,
    ) -> Arc<RetryBudget> {
        let config = own.unwrap_or(&self.config);
        let mut map = self
            .by_backend
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(b) = map.get(backend).filter(|b| b.has(config)) {
            return b.clone();
        }
        map.retain(|_, b| !b.is_idle(now_ms));
        let budget = Arc::new(RetryBudget::new(*config));
        map.insert(backend.clone(), budget.clone());
        budget
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_backend
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests;
