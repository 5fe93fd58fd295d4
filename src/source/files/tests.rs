use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{
    Entry, Limits, LoadError, MAX_DELAY, ManifestFiles, OPEN_WRITE_LIMIT, QUIET, Raw, coalesce,
    load, watch, watch_raw,
};

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

// === the watcher ===

/// How long a test waits for an event that must come (a positive control).
const EVENT: Duration = Duration::from_secs(10);

/// The raw events of a watcher over `dir` with the manifest filter, until `until` is true of
/// one (included). Events come in the order of the changes, so the ones before it are all the
/// earlier changes gave.
async fn raw_until(
    rx: &mut mpsc::UnboundedReceiver<Raw>,
    until: impl Fn(&Raw) -> bool,
) -> Vec<Raw> {
    let mut seen = Vec::new();
    loop {
        let raw = tokio::time::timeout(EVENT, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no expected event within {EVENT:?}; saw {seen:?}"))
            .expect("watcher gone");
        let done = until(&raw);
        seen.push(raw);
        if done {
            return seen;
        }
    }
}

/// Writes the files of a manifests directory that pier does not read: an editor's swap file,
/// a text file, JSON in a subdirectory, a manifest in a hidden directory.
fn write_unread_files(dir: &std::path::Path) {
    std::fs::write(dir.join(".route.yaml.swp"), "swap").unwrap();
    std::fs::write(dir.join("notes.txt"), "notes").unwrap();
    std::fs::write(dir.join("sub/data.json"), "{}").unwrap();
    std::fs::write(dir.join(".git/config.yaml"), "a: b").unwrap();
    std::fs::write(dir.join("sub/.x.yml"), "a: b").unwrap();
}

/// A manifests directory with `sub/` and `.git/`, and a `run.yaml` standing for pier's own
/// output redirected into it; the filter leaves that file out.
fn manifests_dir() -> (tempfile::TempDir, ManifestFiles) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    std::fs::write(dir.path().join("run.yaml"), "").unwrap();
    let reads = ManifestFiles::new(dir.path()).ignoring(&dir.path().join("run.yaml"));
    (dir, reads)
}

fn append(path: &std::path::Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

#[test]
fn the_manifest_filter_reads_visible_yaml_files_only() {
    let (dir, reads) = manifests_dir();
    let d = dir.path();
    for yes in ["a.yaml", "a.yml", "sub/a.yaml", "sub/deeper/a.yml"] {
        assert!(reads.relevant(&d.join(yes), Entry::File), "{yes}");
    }
    for no in [
        ".a.yaml",
        ".route.yaml.swp",
        "notes.txt",
        "sub/data.json",
        ".git/config.yaml",
        "sub/.hidden/a.yaml",
        "run.yaml",
    ] {
        assert!(!reads.relevant(&d.join(no), Entry::File), "{no}");
    }
    assert!(reads.relevant(&d.join("sub"), Entry::Dir));
    assert!(!reads.relevant(&d.join(".git"), Entry::Dir));
    assert!(!reads.relevant(&d.join("sub/.cache"), Entry::Dir));
    // Hidden directories above the manifests directory do not matter.
    let under_hidden = ManifestFiles::new(&d.join(".git"));
    assert!(under_hidden.relevant(&d.join(".git/a.yaml"), Entry::File));
}

/// pier's own output, redirected into the directory under a manifest's name, is not read.
#[test]
fn a_load_does_not_read_pier_s_own_output() {
    let (dir, reads) = manifests_dir();
    append(
        &dir.path().join("run.yaml"),
        "INFO pier: configuration loaded\n",
    );
    let mut files = Vec::new();
    super::collect(&reads, dir.path(), &mut files).unwrap();
    assert!(files.is_empty(), "{files:?}");
}

/// Changes to files pier does not read give the coalescer nothing: every raw event up to a
/// manifest's write is about that manifest.
#[tokio::test]
async fn only_changes_to_manifests_reach_the_coalescer() {
    let (dir, reads) = manifests_dir();
    let (_watcher, mut rx) = watch_raw(dir.path(), move |p, e| reads.relevant(p, e)).unwrap();
    write_unread_files(dir.path());
    append(&dir.path().join("run.yaml"), "INFO pier: listening\n");
    std::fs::create_dir(dir.path().join(".cache")).unwrap();
    let route = dir.path().join("sub/route.yaml");
    std::fs::write(&route, config_maps("r", 1)).unwrap();
    let seen = raw_until(&mut rx, |r| matches!(r, Raw::Done(p) if *p == route)).await;
    assert!(
        seen.iter()
            .all(|r| matches!(r, Raw::Writing(p) | Raw::Done(p) if *p == route)),
        "{seen:?}"
    );
}

/// A directory moved in or out may add or remove many manifests with no event of their own;
/// the swap of a Kubernetes volume's `..data` link changes every file behind it.
#[tokio::test]
async fn directories_and_volume_swaps_still_reload() {
    let (dir, reads) = manifests_dir();
    let d = dir.path();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(outside.path().join("more")).unwrap();
    std::fs::write(outside.path().join("more/a.yaml"), config_maps("a", 1)).unwrap();
    std::fs::create_dir(d.join("..2026_01")).unwrap();
    std::os::unix::fs::symlink("..2026_01", d.join("..data")).unwrap();
    let (_watcher, mut rx) = watch_raw(d, move |p, e| reads.relevant(p, e)).unwrap();
    let changed = |r: &Raw| matches!(r, Raw::Changed);

    std::fs::rename(outside.path().join("more"), d.join("more")).unwrap();
    raw_until(&mut rx, changed).await;
    std::fs::rename(d.join("sub"), outside.path().join("sub")).unwrap();
    raw_until(&mut rx, changed).await;
    std::fs::create_dir(d.join("..2026_02")).unwrap();
    std::os::unix::fs::symlink("..2026_02", d.join("..data_tmp")).unwrap();
    std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
    raw_until(&mut rx, changed).await;
}

/// End to end through the coalescer: a manifest written reloads once; then files pier does not
/// read (its own output among them) give no reload.
#[tokio::test]
async fn files_pier_does_not_read_do_not_reload() {
    let (dir, reads) = manifests_dir();
    let (_guard, mut rx) = watch(dir.path(), move |p, e| reads.relevant(p, e)).unwrap();
    std::fs::write(dir.path().join("route.yaml"), config_maps("r", 1)).unwrap();
    tokio::time::timeout(EVENT, rx.recv())
        .await
        .expect("a manifest written reloads")
        .unwrap();
    write_unread_files(dir.path());
    append(
        &dir.path().join("run.yaml"),
        "INFO pier: configuration loaded\n",
    );
    // Longer than a reload of these changes would take to come.
    let wait = QUIET + MAX_DELAY + Duration::from_millis(400);
    assert!(
        tokio::time::timeout(wait, rx.recv()).await.is_err(),
        "a change pier does not read reloaded"
    );
}
