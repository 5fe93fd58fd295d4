//! The budget's arithmetic, on a clock the tests move by hand (milliseconds).

use super::*;
use std::time::Duration;

fn budget(percent: u32, min_per_second: u32, window_secs: u64) -> RetryBudget {
    RetryBudget::new(RetryBudgetConfig {
        percent,
        min_retries: min_per_second,
        min_interval: Duration::from_secs(1),
        window: Duration::from_secs(window_secs),
    })
}

/// Withdraws until refused; how many were allowed.
fn drain(b: &RetryBudget, now_ms: u64) -> u32 {
    let mut n = 0;
    while b.withdraw(now_ms) {
        n += 1;
        assert!(n < 1_000_000, "the budget never ran out");
    }
    n
}

#[test]
fn defaults_are_20_percent_over_10s_and_10_a_second() {
    let c = RetryBudgetConfig::default();
    assert_eq!(
        (c.percent, c.min_retries, c.min_interval, c.window),
        (20, 10, Duration::from_secs(1), Duration::from_secs(10))
    );
}

#[test]
fn without_requests_only_the_minimum_per_second_is_allowed() {
    let b = budget(20, 3, 10);
    assert_eq!(drain(&b, 0), 3);
    // The next second brings the minimum again.
    assert_eq!(drain(&b, 1_000), 3);
    assert_eq!(drain(&b, 1_999), 0);
}

#[test]
fn retries_may_be_the_ratio_of_requests_over_the_window() {
    let b = budget(20, 0, 10);
    for t in 0..100 {
        b.deposit(t * 10);
    }
    // 100 requests at 20 %: 20 retries.
    assert_eq!(drain(&b, 1_000), 20);
    // More requests earn more retries: 10 more requests, 2 more retries.
    for _ in 0..10 {
        b.deposit(2_000);
    }
    assert_eq!(drain(&b, 2_000), 2);
}

#[test]
fn the_minimum_adds_to_nothing_once_the_ratio_is_spent() {
    let b = budget(20, 2, 10);
    for _ in 0..10 {
        b.deposit(0);
    }
    // The ratio allows 2 (20 % of 10); the minimum lets 2 through in this second, and those
    // count against the ratio too: 2 in all, not 4.
    assert_eq!(drain(&b, 0), 2);
}

#[test]
fn requests_and_retries_leave_the_window_after_it() {
    let b = budget(50, 0, 3);
    for _ in 0..10 {
        b.deposit(0);
    }
    assert_eq!(drain(&b, 500), 5);
    // Still in the window at 2.9 s: nothing more.
    assert!(!b.withdraw(2_900));
    // At 3 s the first second has left the window: no requests, no retries.
    assert!(!b.withdraw(3_000), "no requests in the window, no minimum");
    b.deposit(3_000);
    b.deposit(3_000);
    assert_eq!(drain(&b, 3_000), 1);
}

#[test]
fn a_late_caller_counts_in_the_newest_second() {
    let b = budget(100, 0, 1);
    b.deposit(5_000);
    // Read the clock at 4.9 s but took the lock after the 5 s deposit: the deposit stays.
    b.deposit(4_900);
    assert_eq!(drain(&b, 5_000), 2);
}

#[test]
fn budgets_are_per_backend_and_idle_ones_are_dropped() {
    let budgets = RetryBudgets::new(RetryBudgetConfig {
        percent: 0,
        min_retries: 1,
        min_interval: Duration::from_secs(1),
        window: Duration::from_secs(10),
    });
    let id = |n: &str| BackendId {
        service: crate::model::ObjectRef::new("ns", n),
        port: 80,
    };
    let a = budgets.of(&id("a"), None, 0);
    assert!(a.withdraw(0));
    assert!(!a.withdraw(0));
    // Another backend has its own.
    assert!(budgets.of(&id("b"), None, 0).withdraw(0));
    // The same backend gets the same budget back.
    assert!(!budgets.of(&id("a"), None, 0).withdraw(0));
    assert_eq!(budgets.len(), 2);
    // A window later both are idle; making a new one drops them.
    let _c = budgets.of(&id("c"), None, 10_000);
    assert_eq!(budgets.len(), 1);
}

/// XBackendTrafficPolicy's `minRetryRate` over more than a second: the minimum counts over
/// its interval, not per second.
#[test]
fn a_minimum_rate_over_an_interval_counts_over_the_interval() {
    let b = RetryBudget::new(RetryBudgetConfig {
        percent: 0,
        min_retries: 3,
        min_interval: Duration::from_secs(5),
        window: Duration::from_secs(10),
    });
    assert_eq!(drain(&b, 0), 3);
    // Two seconds later the three still count.
    assert_eq!(drain(&b, 2_000), 0);
    // Five seconds after them they have left the interval.
    assert_eq!(drain(&b, 5_000), 3);
}

/// A Service whose policy changes gets a budget with the new knobs.
#[test]
fn a_backend_with_its_own_knobs_gets_its_own_budget() {
    let budgets = RetryBudgets::new(RetryBudgetConfig::default());
    let id = BackendId {
        service: crate::model::ObjectRef::new("ns", "a"),
        port: 80,
    };
    let none = RetryBudgetConfig {
        percent: 0,
        min_retries: 0,
        ..RetryBudgetConfig::default()
    };
    assert!(budgets.of(&id, None, 0).withdraw(0));
    assert!(!budgets.of(&id, Some(&none), 0).withdraw(0));
    assert!(budgets.of(&id, None, 0).withdraw(0));
}
