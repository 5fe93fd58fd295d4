use super::*;
use crate::translate::api::{
    XBackendTrafficPolicyRetryConstraintBudget as Budget,
    XBackendTrafficPolicyRetryConstraintMinRetryRate as MinRate,
};

#[test]
fn the_api_defaults_fill_what_is_unset() {
    let c = constraint(&XBackendTrafficPolicyRetryConstraint::default()).unwrap();
    assert_eq!(c.budget, RetryBudgetConfig::default());
    let c = constraint(&XBackendTrafficPolicyRetryConstraint {
        budget: Some(Budget {
            percent: Some(0),
            interval: Some("1h".into()),
        }),
        min_retry_rate: Some(MinRate {
            count: Some(1_000_000),
            interval: Some("250ms".into()),
        }),
    })
    .unwrap();
    assert_eq!(c.budget.percent, 0);
    assert_eq!(c.budget.window, Duration::from_secs(3600));
    assert_eq!(c.budget.min_retries, 1_000_000);
    // pier counts whole seconds: a fraction rounds up.
    assert_eq!(c.budget.min_interval, Duration::from_secs(1));
}

#[test]
fn values_outside_the_api_bounds_are_refused_with_the_field() {
    let budget = |percent, interval: &str| XBackendTrafficPolicyRetryConstraint {
        budget: Some(Budget {
            percent: Some(percent),
            interval: Some(interval.into()),
        }),
        min_retry_rate: None,
    };
    let why = |c| constraint(&c).unwrap_err();
    assert!(why(budget(101, "10s")).contains("budget.percent: 101"));
    assert!(why(budget(-1, "10s")).contains("budget.percent: -1"));
    assert!(why(budget(20, "0s")).contains("budget.interval: 0s is not within 1s-1h"));
    assert!(why(budget(20, "2h")).contains("within 1s-1h"));
    assert!(why(budget(20, "soon")).contains("not a Gateway API duration"));
    let rate = |count| XBackendTrafficPolicyRetryConstraint {
        budget: None,
        min_retry_rate: Some(MinRate {
            count: Some(count),
            interval: None,
        }),
    };
    assert!(why(rate(0)).contains("minRetryRate.count: 0"));
}
