//! Standalone mode: every `*.yaml` / `*.yml` below a directory, multi-document.
//!
//! Names starting with `.` are skipped (editor swap files, atomic-write temp files, the
//! `..data` indirection of a Kubernetes ConfigMap volume — the visible names are symlinks into
//! it and are followed), and so are pier's own stdout and stderr when they are redirected to a
//! file in the directory ([`ManifestFiles`]). The directory, not each file, is watched, so a
//! file replaced by rename is seen like any other change.
//!
//! The watcher reacts only to what a load would read: a change to a manifest, a directory
//! (not hidden) created, removed or renamed, and the rename of a `..data` link by which a
//! Kubernetes volume swaps all its files at once. Anything else in the directory (`notes.txt`,
//! `sub/data.json`, an editor's `.route.yaml.swp`, a log pier writes there) is ignored: with
//! `pier run --manifests . > run.out`, each log line would otherwise reload, and the reload's
//! log line would trigger the next one.
//!
//! Changes are coalesced: a reload runs after [`QUIET`] without events, and at the latest
//! [`MAX_DELAY`] after the first one, so a constant stream of writes cannot hold a change back.
//!
//! Half-written files: a tool that rewrites a file in place (open with truncate, write, close)
//! leaves a valid-looking prefix on disk while it writes; a pause longer than [`QUIET`] would
//! publish that prefix, and every route in the rest of the file would 404. So a manifest seen
//! created or modified but not yet closed after writing (inotify `IN_CLOSE_WRITE`, which notify
//! reports as `Access(Close(Write))`) holds the reload back until it is closed, or at most
//! [`OPEN_WRITE_LIMIT`] (then it is read as it is, with a warning). The kernel closes the files
//! of a writer that dies, so a crash does not wait for the limit. Rename-into-place needs none
//! of this: the name switches from the complete old file to the complete new one.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::translate::Resources;
use crate::translate::manifest::{self, ManifestError, SkippedKind, UnknownFields};

pub const QUIET: Duration = Duration::from_millis(100);
pub const MAX_DELAY: Duration = Duration::from_millis(500);
/// How long a file written in place and not yet closed holds a reload back. Writers that
/// stall longer (or keep the file open) get it read as it is, with a warning.
pub const OPEN_WRITE_LIMIT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The I/O error is the source and not in the message, so `{:#}` prints it once; logs
    /// use [`LoadError::chain`].
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The message already holds the manifest error's text, so it is not chained as a
    /// source too (`{:#}` would print it twice).
    #[error("{path}: {error}")]
    Parse {
        path: PathBuf,
        error: Box<ManifestError>,
    },
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    #[error(
        "{path} is {size} bytes, over the limit of {limit} bytes per file (--max-manifest-file-bytes)"
    )]
    FileTooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    #[error(
        "the manifests below {dir} are {size} bytes, over the limit of {limit} bytes (--max-manifest-bytes)"
    )]
    TooLarge { dir: PathBuf, size: u64, limit: u64 },
    #[error(
        "{path}: {count} objects up to this file, over the limit of {limit} (--max-manifest-objects)"
    )]
    TooManyObjects {
        path: PathBuf,
        count: usize,
        limit: usize,
    },
}

/// Bounds on what one load reads, so a runaway directory (a generated file gone wrong) gets a
/// clear error instead of minutes of CPU and gigabytes of memory; the last good configuration
/// stays. Sizes are checked from file metadata before anything is read (and enforced again
/// while reading, for a file that grows), objects by counting documents before parsing.
///
/// Defaults: decoding costs 45-65 µs of CPU and about 2.6 KiB of peak memory per small object
/// (100 000 small ConfigMaps, 13 MB: 4.3-6.5 s, 260 MiB RSS; BENCHMARKS.md), so 100 000 objects
/// bound a load to seconds and a few hundred MiB, well above what a large cluster's Gateway
/// API objects, Services and EndpointSlices come to. 64 MiB in all and 16 MiB per file leave
/// room for big Secrets and trust bundles, and stop a 50 MB file before it is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Total bytes of all manifest files.
    pub total_bytes: u64,
    /// Bytes of one manifest file.
    pub file_bytes: u64,
    /// Documents (objects) in all files.
    pub objects: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            total_bytes: 64 << 20,
            file_bytes: 16 << 20,
            objects: 100_000,
        }
    }
}

impl LoadError {
    /// The message with its sources, `: `-separated, for a log line.
    pub fn chain(&self) -> String {
        let mut out = self.to_string();
        let mut next = std::error::Error::source(self);
        while let Some(e) = next {
            out.push_str(": ");
            out.push_str(&e.to_string());
            next = e.source();
        }
        out
    }

    /// The file the error is about, for logs and the reload-error metric.
    pub fn path(&self) -> &Path {
        match self {
            Self::Read { path, .. }
            | Self::Parse { path, .. }
            | Self::NotADirectory(path)
            | Self::FileTooLarge { path, .. }
            | Self::TooManyObjects { path, .. }
            | Self::TooLarge { dir: path, .. } => path,
        }
    }
}

/// The result of reading the directory once.
#[derive(Debug, Default)]
pub struct Loaded {
    pub resources: Resources,
    pub files: usize,
    /// Documents of kinds pier does not read, with their files.
    pub skipped: Vec<(PathBuf, SkippedKind)>,
    /// Objects defined more than once (files are read in path order; the last one wins).
    pub duplicates: Vec<Duplicate>,
    /// Objects with fields their kinds do not have, with their files.
    pub unknown: Vec<(PathBuf, UnknownFields)>,
}

/// An object (kind, namespace and name) found in two places: `winner` replaced `replaced`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    pub kind: String,
    /// `namespace/name`, or `name` for cluster-scoped kinds.
    pub name: String,
    pub replaced: Place,
    pub winner: Place,
}

/// A file and the line of a document in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    pub path: PathBuf,
    pub line: usize,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.path.display(), self.line)
    }
}

/// Reads every manifest below `dir`, within `limits`. Blocking: call from `spawn_blocking`
/// on a runtime.
pub fn load(dir: &Path, limits: &Limits) -> Result<Loaded, LoadError> {
    let meta = std::fs::metadata(dir).map_err(|source| LoadError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(LoadError::NotADirectory(dir.to_path_buf()));
    }
    let mut files = Vec::new();
    collect(&ManifestFiles::new(dir), dir, &mut files)?;
    files.sort();
    let mut total: u64 = 0;
    for (path, size) in &files {
        if *size > limits.file_bytes {
            return Err(LoadError::FileTooLarge {
                path: path.clone(),
                size: *size,
                limit: limits.file_bytes,
            });
        }
        total = total.saturating_add(*size);
    }
    if total > limits.total_bytes {
        return Err(LoadError::TooLarge {
            dir: dir.to_path_buf(),
            size: total,
            limit: limits.total_bytes,
        });
    }
    let mut out = Loaded {
        files: files.len(),
        ..Loaded::default()
    };
    // Every file is read and its objects counted before any is parsed, so a directory over
    // the object limit costs a read (at most `total_bytes`), not a parse.
    let mut texts = Vec::with_capacity(files.len());
    let mut objects = 0;
    for (path, _) in files {
        let text = read_bounded(&path, limits.file_bytes)?;
        objects += manifest::count_documents(&text);
        if objects > limits.objects {
            return Err(LoadError::TooManyObjects {
                path,
                count: objects,
                limit: limits.objects,
            });
        }
        texts.push((path, text));
    }
    // Where each object was last read, to name both places of a duplicate.
    let mut seen: HashMap<(String, String), Place> = HashMap::new();
    for (path, text) in texts {
        let parsed =
            manifest::parse_manifests_placed(&text, &mut out.resources).map_err(|error| {
                LoadError::Parse {
                    path: path.clone(),
                    error: Box::new(error),
                }
            })?;
        out.skipped
            .extend(parsed.skipped.into_iter().map(|k| (path.clone(), k)));
        out.unknown
            .extend(parsed.unknown.into_iter().map(|u| (path.clone(), u)));
        for o in parsed.objects {
            let winner = Place {
                path: path.clone(),
                line: o.line,
            };
            if let Some(replaced) = seen.insert((o.kind.clone(), o.name.clone()), winner.clone()) {
                out.duplicates.push(Duplicate {
                    kind: o.kind,
                    name: o.name,
                    replaced,
                    winner,
                });
            }
        }
    }
    Ok(out)
}

/// Reads a file as UTF-8, failing once it is over `limit` bytes (it may have grown since its
/// size was checked).
fn read_bounded(path: &Path, limit: u64) -> Result<String, LoadError> {
    use std::io::Read;
    let read_err = |source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut text = String::new();
    file.take(limit.saturating_add(1))
        .read_to_string(&mut text)
        .map_err(read_err)?;
    let size = text.len() as u64;
    if size > limit {
        return Err(LoadError::FileTooLarge {
            path: path.to_path_buf(),
            size,
            limit,
        });
    }
    Ok(text)
}

/// Every manifest below `dir` with its size.
fn collect(
    reads: &ManifestFiles,
    dir: &Path,
    out: &mut Vec<(PathBuf, u64)>,
) -> Result<(), LoadError> {
    let entries = std::fs::read_dir(dir).map_err(|source| LoadError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| LoadError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        // Follows symlinks (ConfigMap volumes); a dangling link is skipped as it is being swapped.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            collect(reads, &path, out)?;
        } else if is_manifest(&path) {
            if reads.is_own(&meta) {
                tracing::info!(file = %path.display(), "not reading pier's own output as a manifest");
                continue;
            }
            out.push((path, meta.len()));
        }
    }
    Ok(())
}

/// What the watcher callback passes on to the coalescing task.
#[derive(Debug)]
enum Raw {
    /// Something changed; nothing is known to be half written.
    Changed,
    /// A relevant file was created or written and has not been closed yet.
    Writing(PathBuf),
    /// A relevant file was closed after writing, removed or renamed: complete (or gone).
    Done(PathBuf),
}

/// Whether `path` names a file [`load`] reads (a `*.yaml` / `*.yml` not starting with `.`).
/// [`ManifestFiles::reads`] also looks at the directories above it.
pub fn is_manifest(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .is_none_or(|n| n.to_string_lossy().starts_with('.'));
    !hidden
        && matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        )
}

/// What a watcher event is about, for the relevance filter of [`watch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A file, or an entry gone before its event was seen that was not a known directory.
    File,
    /// A directory created, removed or renamed.
    Dir,
}

/// The files [`load`] reads below a directory, and so the changes [`watch`] of that directory
/// must react to: manifests with no hidden path component below the directory, except files
/// pier itself writes.
#[derive(Clone, Debug)]
pub struct ManifestFiles {
    dir: PathBuf,
    /// `(device, inode)` of files pier writes: its stdout and stderr when they are regular
    /// files. A log redirected into the directory as `run.yaml` would otherwise be read as a
    /// manifest (and fail), and each line written would be a change.
    own: Vec<(u64, u64)>,
}

impl ManifestFiles {
    /// The manifests below `dir`, not counting this process's stdout and stderr.
    pub fn new(dir: &Path) -> Self {
        use std::os::fd::AsFd;
        let out = std::io::stdout();
        let err = std::io::stderr();
        let own = [
            out.as_fd().try_clone_to_owned(),
            err.as_fd().try_clone_to_owned(),
        ]
        .into_iter()
        .filter_map(|fd| std::fs::File::from(fd.ok()?).metadata().ok())
        .filter(std::fs::Metadata::is_file)
        .map(|m| (m.dev(), m.ino()))
        .collect();
        Self {
            dir: dir.to_path_buf(),
            own,
        }
    }

    /// Also leaves out `path`, a file pier writes (if it exists).
    pub fn ignoring(mut self, path: &Path) -> Self {
        if let Ok(m) = std::fs::metadata(path) {
            self.own.push((m.dev(), m.ino()));
        }
        self
    }

    /// Whether [`load`] reads `path` (when it exists).
    pub fn reads(&self, path: &Path) -> bool {
        is_manifest(path)
            && !self.hidden(path)
            && (self.own.is_empty() || !std::fs::metadata(path).is_ok_and(|m| self.is_own(&m)))
    }

    /// The filter for [`watch`]: manifests [`load`] reads, and directories they may be in.
    pub fn relevant(&self, path: &Path, entry: Entry) -> bool {
        match entry {
            Entry::File => self.reads(path),
            Entry::Dir => !self.hidden(path),
        }
    }

    /// Whether a component of `path` below the directory starts with `.`. A path not below it
    /// (a watcher may report it otherwise spelt) is judged by its file name only.
    fn hidden(&self, path: &Path) -> bool {
        let below = match path.strip_prefix(&self.dir) {
            Ok(below) => below,
            Err(_) => path.file_name().map_or(path, Path::new),
        };
        below
            .components()
            .any(|c| matches!(c, Component::Normal(n) if n.to_string_lossy().starts_with('.')))
    }

    fn is_own(&self, meta: &std::fs::Metadata) -> bool {
        self.own.contains(&(meta.dev(), meta.ino()))
    }
}

/// Watches `dir` and sends `()` once per coalesced burst of changes that `relevant` accepts
/// (or that may hide one: a watcher error, the swap of a Kubernetes volume's `..data` link).
/// The watcher lives as long as the returned guard.
///
/// `relevant` is asked about files (any event) and directories (created, removed, renamed:
/// they may hold files that matter); for a manifests directory it is
/// [`ManifestFiles::relevant`].
///
/// A relevant file written in place but not yet closed (inotify's `IN_CLOSE_WRITE`) holds the
/// reload back until it is closed, or at most [`OPEN_WRITE_LIMIT`]: a writer that stalls
/// halfway must not get half a file published. Only inotify reports closes; with another
/// backend only the quiet period applies.
pub fn watch(
    dir: &Path,
    relevant: impl Fn(&Path, Entry) -> bool + Send + 'static,
) -> notify::Result<(WatchGuard, mpsc::Receiver<()>)> {
    let (watcher, raw_rx) = watch_raw(dir, relevant)?;
    let (tx, rx) = mpsc::channel(1);
    let task = tokio::spawn(coalesce(raw_rx, tx));
    Ok((
        WatchGuard {
            _watcher: watcher,
            task,
        },
        rx,
    ))
}

/// [`watch`] before coalescing: one [`Raw`] per relevant change, in the order of the events.
fn watch_raw(
    dir: &Path,
    relevant: impl Fn(&Path, Entry) -> bool + Send + 'static,
) -> notify::Result<(notify::RecommendedWatcher, mpsc::UnboundedReceiver<Raw>)> {
    let tracks_closes = matches!(
        notify::RecommendedWatcher::kind(),
        notify::WatcherKind::Inotify
    );
    let mut classify = Classify::new(dir, relevant, tracks_closes);
    let (raw_tx, raw_rx) = mpsc::unbounded_channel::<Raw>();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        for raw in classify.event(ev) {
            let _ = raw_tx.send(raw);
        }
    })?;
    watcher.watch(dir, RecursiveMode::Recursive)?;
    Ok((watcher, raw_rx))
}

/// Turns watcher events into [`Raw`]s, keeping only those about relevant entries.
struct Classify<F> {
    relevant: F,
    tracks_closes: bool,
    /// The watched directory and the relevant directories below it, from a walk at the start
    /// and from events since: a directory removed or renamed away is gone when its event is
    /// seen (and inotify does not say a rename was of a directory), so this says it was one.
    dirs: HashSet<PathBuf>,
}

impl<F: Fn(&Path, Entry) -> bool> Classify<F> {
    fn new(dir: &Path, relevant: F, tracks_closes: bool) -> Self {
        let mut c = Self {
            relevant,
            tracks_closes,
            dirs: HashSet::new(),
        };
        c.add_tree(dir);
        c
    }

    fn event(&mut self, ev: notify::Result<notify::Event>) -> Vec<Raw> {
        use notify::event::{AccessKind, AccessMode, CreateKind, EventKind, ModifyKind};

        // An error (an inotify queue overflow) may hide any change: reload.
        let Ok(ev) = ev else {
            return vec![Raw::Changed];
        };
        let writing = match ev.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => Some(false),
            // Our own reads (open, close-without-write) are not changes.
            EventKind::Access(_) => return Vec::new(),
            EventKind::Create(CreateKind::File | CreateKind::Any)
            | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => Some(true),
            EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_)) => Some(false),
            _ => None,
        };
        let mut out = Vec::new();
        for path in &ev.paths {
            if is_volume_swap(path) || self.directory_changed(&ev.kind, path) {
                out.push(Raw::Changed);
            } else if (self.relevant)(path, Entry::File) {
                out.push(match (self.tracks_closes, writing) {
                    (true, Some(true)) => Raw::Writing(path.clone()),
                    (true, Some(false)) => Raw::Done(path.clone()),
                    _ => Raw::Changed,
                });
            }
        }
        out
    }

    /// Whether the event is a relevant directory appearing or going away (which may add or
    /// remove many files with no event of their own).
    fn directory_changed(&mut self, kind: &notify::EventKind, path: &Path) -> bool {
        use notify::event::{CreateKind, EventKind, ModifyKind, RemoveKind};

        // Files written in place and closed are no directories: no need to look.
        let maybe_dir = matches!(
            kind,
            EventKind::Create(CreateKind::Folder | CreateKind::Any | CreateKind::Other)
                | EventKind::Remove(RemoveKind::Folder | RemoveKind::Any | RemoveKind::Other)
                | EventKind::Modify(ModifyKind::Name(_))
        );
        if !maybe_dir {
            return false;
        }
        if path.is_dir() {
            if !(self.relevant)(path, Entry::Dir) {
                return false;
            }
            self.add_tree(path);
            return true;
        }
        let before = self.dirs.len();
        self.dirs.retain(|d| !d.starts_with(path));
        self.dirs.len() != before
    }

    /// Notes `dir` and the relevant directories below it (symlinks are not followed, so a
    /// link loop cannot hold the watcher up).
    fn add_tree(&mut self, dir: &Path) {
        self.dirs.insert(dir.to_path_buf());
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) && (self.relevant)(&path, Entry::Dir) {
                self.add_tree(&path);
            }
        }
    }
}

/// Whether `path` is (or is below) the `..data` link of a Kubernetes ConfigMap or Secret
/// volume. The kubelet writes a new hidden directory and renames a new `..data` link over the
/// old one; the visible names are links through `..data`, so that rename is the only event
/// for a change of all of them.
fn is_volume_swap(path: &Path) -> bool {
    path.components()
        .any(|c| matches!(c, Component::Normal(n) if n == "..data"))
}

/// Sends one `()` per burst of raw events: after [`QUIET`] without events or [`MAX_DELAY`]
/// after the first, but never while a file is open for writing (up to [`OPEN_WRITE_LIMIT`]).
async fn coalesce(mut raw_rx: mpsc::UnboundedReceiver<Raw>, tx: mpsc::Sender<()>) {
    use tokio::time::{Instant, sleep_until};

    // Files written but not closed, with when the first unclosed write was seen.
    let mut writing: HashMap<PathBuf, Instant> = HashMap::new();
    // Whether the event finished a write that held the reload back.
    let note = |writing: &mut HashMap<PathBuf, Instant>, raw: Raw| match raw {
        Raw::Changed => false,
        Raw::Writing(path) => {
            writing.entry(path).or_insert_with(Instant::now);
            false
        }
        Raw::Done(path) => writing.remove(&path).is_some(),
    };
    while let Some(raw) = raw_rx.recv().await {
        note(&mut writing, raw);
        let mut first = Instant::now();
        let mut last = first;
        loop {
            let settled = (last + QUIET).min(first + MAX_DELAY);
            let due = writing
                .values()
                .map(|since| *since + OPEN_WRITE_LIMIT)
                .fold(settled, Instant::max);
            tokio::select! {
                raw = raw_rx.recv() => match raw {
                    Some(raw) => {
                        last = Instant::now();
                        // A close after a held write starts the burst over, so writes to
                        // other files right after it are coalesced with it.
                        if note(&mut writing, raw) {
                            first = last;
                        }
                    }
                    None => return,
                },
                () = sleep_until(due) => break,
            }
        }
        // Every file still open has been for OPEN_WRITE_LIMIT: read it as it is.
        for path in writing.keys() {
            tracing::warn!(
                file = %path.display(),
                limit_ms = OPEN_WRITE_LIMIT.as_millis() as u64,
                "file still open for writing; reading it anyway"
            );
        }
        writing.clear();
        // A full channel already holds a pending reload: nothing is lost.
        if let Err(mpsc::error::TrySendError::Closed(())) = tx.try_send(()) {
            return;
        }
    }
}

pub struct WatchGuard {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests;
