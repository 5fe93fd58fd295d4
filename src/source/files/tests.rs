use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Limits, LoadError, MAX_DELAY, OPEN_WRITE_LIMIT, QUIET, Raw, coalesce, load};

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

/// `n` ConfigMaps named `{prefix}{i}`.
fn config_maps(prefix: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {prefix}{i}}}\n"))
        .collect::<Vec<_>>()
        .join("---\n")
}

fn dir_with(files: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

#[test]
fn a_file_over_the_per_file_limit_is_not_read() {
    let dir = dir_with(&[
        ("a.yaml", config_maps("a", 2)),
        ("big.yaml", config_maps("b", 50)),
    ]);
    let limits = Limits {
        file_bytes: 1000,
        ..Limits::default()
    };
    let e = load(dir.path(), &limits).unwrap_err();
    assert!(
        matches!(e, LoadError::FileTooLarge { limit: 1000, .. }),
        "{e}"
    );
    let msg = e.to_string();
    assert!(msg.contains("big.yaml"), "{msg}");
    assert!(msg.contains("--max-manifest-file-bytes"), "{msg}");
}

#[test]
fn files_over_the_total_limit_are_not_read() {
    let dir = dir_with(&[
        ("a.yaml", config_maps("a", 20)),
        ("b.yaml", config_maps("b", 20)),
    ]);
    let one = std::fs::metadata(dir.path().join("a.yaml")).unwrap().len();
    let limits = Limits {
        total_bytes: one + one / 2,
        ..Limits::default()
    };
    let e = load(dir.path(), &limits).unwrap_err();
    assert!(
        matches!(e, LoadError::TooLarge { size, .. } if size == 2 * one),
        "{e}"
    );
    assert!(e.to_string().contains("--max-manifest-bytes"), "{e}");
    let limits = Limits {
        total_bytes: 2 * one,
        ..Limits::default()
    };
    assert_eq!(
        load(dir.path(), &limits)
            .unwrap()
            .resources
            .config_maps
            .len(),
        40
    );
}

#[test]
fn objects_over_the_limit_are_counted_before_any_is_parsed() {
    // A parse of a.yaml would fail on its last document: the count must come first.
    let broken = format!("{}---\nkind: ConfigMap\nmetadata: [\n", config_maps("a", 5));
    let dir = dir_with(&[("a.yaml", broken), ("b.yaml", config_maps("b", 5))]);
    let limits = Limits {
        objects: 10,
        ..Limits::default()
    };
    let e = load(dir.path(), &limits).unwrap_err();
    assert!(
        matches!(
            e,
            LoadError::TooManyObjects {
                count: 11,
                limit: 10,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("b.yaml"), "{e}");
    let limits = Limits {
        objects: 11,
        ..Limits::default()
    };
    let e = load(dir.path(), &limits).unwrap_err();
    assert!(matches!(e, LoadError::Parse { .. }), "{e}");
}

/// The same object in two files: the later file (in path order) wins, and the load says so,
/// naming both places; two different objects of one name but different kinds are no duplicate.
#[test]
fn an_object_defined_in_two_files_is_reported_with_the_winner() {
    let dir = tempfile::tempdir().unwrap();
    let ns = |name: &str| format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}\n");
    let svc = "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: a}\n";
    std::fs::write(dir.path().join("a.yaml"), format!("{}---\n{svc}", ns("a"))).unwrap();
    std::fs::write(
        dir.path().join("b.yaml"),
        format!("{}---\n{}", ns("other"), ns("a")),
    )
    .unwrap();
    let loaded = load(dir.path(), &Limits::default()).unwrap();
    let [d] = loaded.duplicates.as_slice() else {
        panic!("{:?}", loaded.duplicates)
    };
    assert_eq!((d.kind.as_str(), d.name.as_str()), ("Namespace", "a"));
    assert_eq!(
        d.replaced.to_string(),
        format!("{}:1", dir.path().join("a.yaml").display())
    );
    assert_eq!(
        d.winner.to_string(),
        format!("{}:5", dir.path().join("b.yaml").display())
    );
    assert_eq!(loaded.resources.namespaces.len(), 2);
    assert_eq!(loaded.resources.services.len(), 1);
}

/// A directory that is not there: the OS reason is the error's source, not repeated in its
/// message, so a chain (`{:#}`, [`LoadError::chain`]) says it once.
#[test]
fn a_missing_directory_says_the_os_reason_once() {
    let e = load(
        std::path::Path::new("/nonexistent/pier"),
        &Limits::default(),
    )
    .unwrap_err();
    let chain = e.chain();
    assert_eq!(
        chain.matches("No such file or directory").count(),
        1,
        "{chain}"
    );
    assert!(
        chain.starts_with("cannot read /nonexistent/pier: "),
        "{chain}"
    );
}
