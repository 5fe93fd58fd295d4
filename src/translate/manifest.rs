//! TEMPORARY stub on main; replaced by the translate branch.
use super::Resources;

#[derive(Debug)]
pub struct SkippedKind {
    pub api_version: String,
    pub kind: String,
}

impl std::fmt::Display for SkippedKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("document {index}: {reason}")]
pub struct ManifestError {
    pub index: usize,
    pub reason: String,
}

pub fn parse_manifests(
    _text: &str,
    _resources: &mut Resources,
) -> Result<Vec<SkippedKind>, ManifestError> {
    Ok(vec![])
}
