use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{MAX_DELAY, OPEN_WRITE_LIMIT, QUIET, Raw, coalesce};

/// Feeds `raw` events (each after its delay) to [`coalesce`]; returns when the first reload
/// signal came, counted from the start.
async fn first_signal(raw: Vec<(Duration, Raw)>) -> Duration {
    let (raw_tx, raw_rx) = mpsc::unbounded_channel();
    let (tx, mut rx) = mpsc::channel(1);
    let task = tokio::spawn(coalesce(raw_rx, tx));
    let start = Instant::now();
    let feeder = tokio::spawn(async move {
        for (after, r) in raw {
            tokio::time::sleep(after).await;
            raw_tx.send(r).unwrap();
        }
        // Keep the channel open: closing it would end the coalescer.
        std::future::pending::<()>().await;
    });
    rx.recv().await.unwrap();
    let took = start.elapsed();
    feeder.abort();
    task.abort();
    took
}

fn file() -> PathBuf {
    PathBuf::from("/m/route.yaml")
}

#[tokio::test(start_paused = true)]
async fn a_plain_change_reloads_after_the_quiet_period() {
    let took = first_signal(vec![(Duration::ZERO, Raw::Changed)]).await;
    assert_eq!(took, QUIET);
}

#[tokio::test(start_paused = true)]
async fn a_file_open_for_writing_holds_the_reload_until_it_is_closed() {
    let took = first_signal(vec![
        (Duration::ZERO, Raw::Writing(file())),
        // A stall far longer than QUIET and MAX_DELAY.
        (Duration::from_secs(2), Raw::Done(file())),
    ])
    .await;
    assert_eq!(took, Duration::from_secs(2) + QUIET);
}

#[tokio::test(start_paused = true)]
async fn a_file_never_closed_is_read_after_the_limit() {
    let took = first_signal(vec![(Duration::ZERO, Raw::Writing(file()))]).await;
    assert_eq!(took, OPEN_WRITE_LIMIT);
}

#[tokio::test(start_paused = true)]
async fn a_stream_of_plain_changes_is_capped_by_max_delay() {
    let every = QUIET / 2;
    let raw = (0..100).map(|_| (every, Raw::Changed)).collect();
    let took = first_signal(raw).await;
    assert_eq!(took, every + MAX_DELAY);
}
