//! What `pier run` logs about a load.

use super::*;
use crate::log_limit::capture::logged;

/// A misspelled kind of a group pier reads is a WARN naming the file, the kind and the kind it
/// likely meant; a kind of another group stays an INFO.
#[test]
fn a_misspelled_kind_is_warned_with_the_file_and_the_nearest_kind() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("routes.yaml");
    std::fs::write(
        &file,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n---\n\
         apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRout\nmetadata: {name: r}\n",
    )
    .unwrap();
    let loaded = files::load(dir.path(), &files::Limits::default()).unwrap();
    let ((), log) = logged(|| log_loaded(&loaded));
    let warn = log
        .lines()
        .find(|l| l.contains("WARN"))
        .unwrap_or_else(|| panic!("no WARN in {log}"));
    assert!(warn.contains(&format!("file={}", file.display())), "{warn}");
    assert!(warn.contains("line=5"), "{warn}");
    assert!(
        warn.contains("kind=gateway.networking.k8s.io/v1/HTTPRout"),
        "{warn}"
    );
    assert!(warn.contains("(did you mean HTTPRoute?)"), "{warn}");
    let info = log
        .lines()
        .find(|l| l.contains("Deployment"))
        .unwrap_or_else(|| panic!("no line for the Deployment in {log}"));
    assert!(info.contains("INFO"), "{info}");
}
