//! Server certificates of an HTTPS port, chosen by SNI: an exact name, then the longest
//! matching wildcard, then the port's default. Built and checked at translation time, so the
//! handshake only does map lookups.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::sign::CertifiedKey;
use serde::Serialize;

#[derive(Clone, Default)]
pub struct CertTable {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// (suffix starting with '.', cert), longest suffix first.
    wildcard: Vec<(String, Arc<CertifiedKey>)>,
    default: Option<Arc<CertifiedKey>>,
}

impl CertTable {
    /// Adds a certificate under each name (lower-case; `*.example.com` for wildcards).
    /// The first certificate added for a name keeps it; the first one overall is the default
    /// for clients that send no SNI or an unknown name.
    pub fn add(&mut self, names: &[String], key: Arc<CertifiedKey>) {
        for n in names {
            let n = n.to_ascii_lowercase();
            match n.strip_prefix('*') {
                Some(suffix) if suffix.starts_with('.') => {
                    if !self.wildcard.iter().any(|(s, _)| s == suffix) {
                        self.wildcard.push((suffix.to_string(), key.clone()));
                        self.wildcard.sort_by_key(|w| std::cmp::Reverse(w.0.len()));
                    }
                }
                _ => {
                    self.exact.entry(n).or_insert_with(|| key.clone());
                }
            }
        }
        if self.default.is_none() {
            self.default = Some(key);
        }
    }

    pub fn resolve(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        if let Some(name) = sni {
            // rustls hands SNI over lower-cased already.
            if let Some(k) = self.exact.get(name) {
                return Some(k.clone());
            }
            if let Some((_, k)) = self
                .wildcard
                .iter()
                .find(|(s, _)| name.len() > s.len() && name.ends_with(s.as_str()))
            {
                return Some(k.clone());
            }
        }
        self.default.clone()
    }

    pub fn is_empty(&self) -> bool {
        self.default.is_none()
    }

    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .exact
            .keys()
            .cloned()
            .chain(self.wildcard.iter().map(|(s, _)| format!("*{s}")))
            .collect();
        v.sort();
        v
    }
}

impl std::fmt::Debug for CertTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertTable")
            .field("names", &self.names())
            .finish()
    }
}

/// Only the names are shown; certificates and keys never leave the process.
impl Serialize for CertTable {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("CertTable", 1)?;
        st.serialize_field("serverNames", &self.names())?;
        st.end()
    }
}
