use super::*;

fn per_second(requests: u64) -> Buckets {
    Buckets::new(
        Limit {
            requests,
            period: Duration::from_secs(1),
        },
        64,
    )
}

fn admitted(d: Decision) -> bool {
    matches!(d, Decision::Admit { .. })
}

#[test]
fn a_bucket_admits_a_burst_of_its_limit_then_one_per_interval() {
    let b = per_second(10);
    let t0 = Instant::now();
    for i in 0..10 {
        match b.take(1, t0) {
            Decision::Admit { remaining, .. } => assert_eq!(remaining, 9 - i),
            refused => panic!("request {i} refused: {refused:?}"),
        }
    }
    let Decision::Refuse { retry_after, .. } = b.take(1, t0) else {
        panic!("the 11th request in the same instant was admitted");
    };
    assert_eq!(retry_after, Duration::from_millis(100));
    assert!(!admitted(b.take(1, t0 + Duration::from_millis(99))));
    assert!(admitted(b.take(1, t0 + Duration::from_millis(100))));
    // Another key has a bucket of its own.
    assert!(admitted(b.take(2, t0)));
}

#[test]
fn over_a_long_run_the_admitted_rate_is_the_limit() {
    let b = per_second(100);
    let t0 = Instant::now();
    // 1 000 requests a second for 10 s, evenly spaced.
    let admitted_count = (0..10_000u64)
        .filter(|i| admitted(b.take(7, t0 + Duration::from_millis(*i))))
        .count();
    // The first second's burst (100) plus 100 a second after it.
    assert!(
        (1_090..=1_100).contains(&admitted_count),
        "{admitted_count}"
    );
}

#[test]
fn a_full_bucket_reports_its_reset() {
    let b = per_second(4);
    let t0 = Instant::now();
    let Decision::Admit { remaining, reset } = b.take(1, t0) else {
        panic!()
    };
    assert_eq!((remaining, reset), (3, Duration::from_millis(250)));
}

#[test]
fn spoofed_keys_never_grow_the_table_past_its_capacity() {
    let b = per_second(1);
    let t0 = Instant::now();
    for key in 0..100_000u64 {
        b.take(key.wrapping_mul(0x9e37_79b9_7f4a_7c15), t0);
    }
    assert!(b.len() <= b.capacity(), "{} > {}", b.len(), b.capacity());
}

#[test]
fn a_full_shard_drops_full_buckets_before_any_in_use() {
    let mut shard: HashMap<u64, u64, foldhash::fast::FixedState> = HashMap::default();
    // TATs: 5 and 7 are past at t = 10 (full buckets), 20 and 30 are in use.
    shard.extend([(1, 5), (2, 20), (3, 7), (4, 30)]);
    make_room(&mut shard, 10);
    let mut left: Vec<u64> = shard.keys().copied().collect();
    left.sort();
    assert_eq!(left, [2, 4]);
    // None full: the one nearest to full (lowest TAT) goes.
    make_room(&mut shard, 10);
    assert_eq!(shard.keys().copied().collect::<Vec<_>>(), [4]);
}

#[test]
fn a_limit_of_zero_requests_or_time_still_works() {
    let b = Buckets::new(
        Limit {
            requests: 0,
            period: Duration::ZERO,
        },
        1,
    );
    b.take(1, Instant::now());
}

#[test]
fn a_single_bucket_table_admits_exactly_like_a_keyed_one() {
    let limit = Limit {
        requests: 7,
        period: Duration::from_secs(1),
    };
    let single = Buckets::new(limit, 1);
    let keyed = Buckets::new(limit, 64);
    assert_eq!(single.capacity(), 1);
    let t0 = Instant::now();
    for step in 0..500u64 {
        let now = t0 + Duration::from_micros(step * 37_000 % 900_000 + step * 3_000);
        assert_eq!(single.take(99, now), keyed.take(5, now), "step {step}");
    }
    assert_eq!(single.len(), 1);
}

#[test]
fn a_single_bucket_under_threads_admits_the_burst_once() {
    let b = std::sync::Arc::new(Buckets::new(
        Limit {
            requests: 1000,
            period: Duration::from_secs(3600),
        },
        1,
    ));
    let now = Instant::now();
    let admitted: usize = (0..4)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || {
                (0..1000)
                    .filter(|_| matches!(b.take(0, now), Decision::Admit { .. }))
                    .count()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .sum();
    assert_eq!(admitted, 1000);
}
