//! Standalone mode: every `*.yaml` / `*.yml` below a directory, multi-document.
//!
//! Names starting with `.` are skipped (editor swap files, atomic-write temp files, the
//! `..data` indirection of a Kubernetes ConfigMap volume — the visible names are symlinks into
//! it and are followed). The directory, not each file, is watched, so a file replaced by rename
//! is seen like any other change. Changes are coalesced: a reload runs after [`QUIET`] without
//! events, and at the latest [`MAX_DELAY`] after the first one, so a constant stream of writes
//! cannot hold a change back.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::translate::Resources;
use crate::translate::manifest::{self, ManifestError};

pub const QUIET: Duration = Duration::from_millis(100);
pub const MAX_DELAY: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: ManifestError,
    },
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
}

impl LoadError {
    /// The file the error is about, for logs and the reload-error metric.
    pub fn path(&self) -> &Path {
        match self {
            Self::Read { path, .. } | Self::Parse { path, .. } | Self::NotADirectory(path) => path,
        }
    }
}

/// The result of reading the directory once.
#[derive(Debug, Default)]
pub struct Loaded {
    pub resources: Resources,
    pub files: usize,
    /// `(file, apiVersion/kind)` of documents pier does not read.
    pub skipped: Vec<(PathBuf, String)>,
}

/// Reads every manifest below `dir`. Blocking: call from `spawn_blocking` on a runtime.
pub fn load(dir: &Path) -> Result<Loaded, LoadError> {
    let meta = std::fs::metadata(dir).map_err(|source| LoadError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(LoadError::NotADirectory(dir.to_path_buf()));
    }
    let mut files = Vec::new();
    collect(dir, &mut files)?;
    files.sort();
    let mut out = Loaded {
        files: files.len(),
        ..Loaded::default()
    };
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Read {
            path: path.clone(),
            source,
        })?;
        let skipped = manifest::parse_manifests(&text, &mut out.resources).map_err(|source| {
            LoadError::Parse {
                path: path.clone(),
                source,
            }
        })?;
        out.skipped
            .extend(skipped.into_iter().map(|k| (path.clone(), k.to_string())));
    }
    Ok(out)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), LoadError> {
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
            collect(&path, out)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
    Ok(())
}

/// Watches `dir` and sends `()` once per coalesced burst of changes. The watcher lives as long
/// as the returned guard.
pub fn watch(dir: &Path) -> notify::Result<(WatchGuard, mpsc::Receiver<()>)> {
    let (raw_tx, mut raw_rx) = mpsc::unbounded_channel::<()>();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        if let Ok(ev) = ev
            && !matches!(ev.kind, notify::EventKind::Access(_))
        {
            let _ = raw_tx.send(());
        }
    })?;
    watcher.watch(dir, RecursiveMode::Recursive)?;
    let (tx, rx) = mpsc::channel(1);
    let task = tokio::spawn(async move {
        while raw_rx.recv().await.is_some() {
            let deadline = tokio::time::Instant::now() + MAX_DELAY;
            loop {
                let quiet = tokio::time::sleep(QUIET);
                tokio::select! {
                    ev = raw_rx.recv() => if ev.is_none() { break },
                    () = quiet => break,
                    () = tokio::time::sleep_until(deadline) => break,
                }
            }
            // A full channel already holds a pending reload: nothing is lost.
            if let Err(mpsc::error::TrySendError::Closed(())) = tx.try_send(()) {
                return;
            }
        }
    });
    Ok((
        WatchGuard {
            _watcher: watcher,
            task,
        },
        rx,
    ))
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
