use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::*;

fn ready(closed: Closed<'_>) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    pin!(closed).poll(&mut cx) == Poll::Ready(())
}

#[test]
fn the_longest_waiting_connections_are_closed_first_and_busy_ones_never() {
    let reclaim = Reclaim::new();
    let t0 = Instant::now() + Duration::from_secs(1);
    let conns: Vec<Registration> = (0..6).map(|_| reclaim.register()).collect();
    // Each waits from a later moment than the one before; #1 and #4 are serving requests.
    for (i, c) in conns.iter().enumerate() {
        assert!(c.busy());
        c.wait(t0 + Duration::from_secs(i as u64));
    }
    assert!(conns[1].busy());
    assert!(conns[4].busy());

    assert_eq!(reclaim.close_longest_waiting(2), 2);
    let closed: Vec<bool> = conns.iter().map(|c| ready(c.closed())).collect();
    assert_eq!(closed, [true, false, true, false, false, false]);
    // A closed connection cannot start serving, nor wait again.
    assert!(!conns[0].busy());
    conns[0].wait(t0);
    assert!(ready(conns[0].closed()));

    // Only #3 and #5 are left waiting; busy ones are never closed.
    assert_eq!(reclaim.close_longest_waiting(10), 2);
    assert!(conns[1].busy() && conns[4].busy());
    assert_eq!(reclaim.close_longest_waiting(10), 0);
    assert_eq!(reclaim.len(), 6);
    drop(conns);
    assert!(reclaim.is_empty());
}

#[test]
fn a_new_connection_waits_from_its_accept_and_keeps_that_start() {
    let reclaim = Reclaim::new();
    let old = reclaim.register();
    std::thread::sleep(Duration::from_millis(5));
    let young = reclaim.register();
    // Waiting again (a TLS connection reaching its first head) keeps the accept time.
    old.wait(Instant::now() + Duration::from_secs(60));
    assert_eq!(reclaim.close_longest_waiting(1), 1);
    assert!(ready(old.closed()));
    assert!(!ready(young.closed()));
}

#[test]
fn closing_wakes_the_connection() {
    let reclaim = Reclaim::new();
    let conn = reclaim.register();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let reclaim2 = reclaim.clone();
        let closer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            reclaim2.close_longest_waiting(1)
        });
        tokio::time::timeout(Duration::from_secs(5), conn.closed())
            .await
            .expect("the close woke the waiting connection");
        assert_eq!(closer.await.unwrap(), 1);
    });
}

/// Clones of a registration share one slot: closing it closes them all, and the registry
/// keeps it until the last clone is dropped.
#[test]
fn clones_share_one_slot_which_leaves_with_the_last_of_them() {
    let reclaim = Reclaim::new();
    let a = reclaim.register();
    let b = a.clone();
    assert_eq!(reclaim.len(), 1);
    assert_eq!(reclaim.close_longest_waiting(1), 1);
    assert!(a.is_closed() && b.is_closed() && ready(b.closed()));
    drop(a);
    assert_eq!(reclaim.len(), 1);
    assert_eq!(reclaim.close_longest_waiting(1), 0);
    drop(b);
    assert!(reclaim.is_empty());
    // The slot's key is free again.
    let c = reclaim.register();
    assert!(!c.is_closed());
    assert_eq!(reclaim.len(), 1);
}
