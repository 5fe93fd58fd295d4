//! TLS settings a listener offers its clients, as a ClientTrafficPolicy's `tls` or a
//! listener's `tls.options` (`pier.dev/min-version` …) give them: checked against what rustls
//! implements, so the proxy builds a listener's server config without failing. Chosen where
//! the API is silent: a value rustls cannot serve (a version or suite it lacks) is refused
//! with the reason, never quietly raised or dropped.

use std::collections::BTreeMap;

use super::api::ClientTls;
use crate::model::TlsProfile;

/// A policy's `tls` as the handshake it asks for, or why rustls cannot do it.
pub fn tls_profile(tls: &ClientTls) -> Result<TlsProfile, String> {
    let version = |field: &str, v: &Option<String>, auto: u8| -> Result<u8, String> {
        match v.as_deref().map(str::trim) {
            None | Some("Auto") => Ok(auto),
            Some("1.2") => Ok(2),
            Some("1.3") => Ok(3),
            Some(v @ ("1.0" | "1.1")) => Err(format!(
                "tls.{field}: TLS {v} is not offered (rustls implements TLS 1.2 and 1.3 only)"
            )),
            Some(v) => Err(format!(
                "tls.{field}: {v:?} is not a TLS version (Auto, 1.2 or 1.3)"
            )),
        }
    };
    let min = version("minVersion", &tls.min_version, 2)?;
    let max = version("maxVersion", &tls.max_version, 3)?;
    if min > max {
        return Err(format!(
            "tls.minVersion 1.{min} is above tls.maxVersion 1.{max}"
        ));
    }
    let (tls12, tls13) = (min <= 2, max >= 3);
    let ciphers = ciphers(&tls.ciphers, tls12, tls13)?;
    let groups = if tls.ecdh_curves.is_empty() {
        None
    } else {
        let mut out: Vec<String> = vec![];
        for name in &tls.ecdh_curves {
            let Some(g) = crate::tls::provider::kx_group(name) else {
                return Err(format!(
                    "tls.ecdhCurves: {name:?} is not a group rustls implements ({})",
                    crate::tls::provider::kx_groups().join(", ")
                ));
            };
            if !out.contains(&g) {
                out.push(g);
            }
        }
        Some(out)
    };
    let alpn = match &tls.alpn_protocols {
        None => None,
        Some(list) => {
            let mut out: Vec<String> = vec![];
            for p in list {
                match p.trim() {
                    // HTTP/1.0 clients are served by the HTTP/1.1 server, as Envoy does.
                    v @ ("h2" | "http/1.1" | "http/1.0") => {
                        if !out.iter().any(|o| o == v) {
                            out.push(v.to_string());
                        }
                    }
                    v => {
                        return Err(format!(
                            "tls.alpnProtocols: {v:?} is not a protocol pier serves \
                             (h2, http/1.1, http/1.0)"
                        ));
                    }
                }
            }
            Some(out)
        }
    };
    Ok(TlsProfile {
        tls12,
        tls13,
        ciphers,
        groups,
        alpn,
    })
}

/// The suites of `names` in order. A list without TLS 1.3 suites (Envoy's `ciphers` name TLS
/// 1.2 suites only) keeps every TLS 1.3 suite after them; one with some restricts TLS 1.3 too.
fn ciphers(names: &[String], tls12: bool, tls13: bool) -> Result<Option<Vec<String>>, String> {
    if names.is_empty() {
        return Ok(None);
    }
    let mut out: Vec<(String, bool)> = vec![];
    for raw in names {
        // Envoy's equal-preference groups: `[A|B]`.
        for name in raw.trim_matches(|c| c == '[' || c == ']').split('|') {
            let Some(s) = crate::tls::provider::cipher_suite(name) else {
                let known: Vec<String> = crate::tls::provider::cipher_suites()
                    .into_iter()
                    .map(|(n, _)| n)
                    .collect();
                return Err(format!(
                    "tls.ciphers: {:?} is not a cipher suite rustls implements ({})",
                    name.trim(),
                    known.join(", ")
                ));
            };
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    if !out.iter().any(|(_, v13)| *v13) {
        out.extend(
            crate::tls::provider::cipher_suites()
                .into_iter()
                .filter(|(_, v13)| *v13),
        );
    }
    if tls12 && !tls13 && !out.iter().any(|(_, v13)| !v13) {
        return Err("tls.ciphers: no TLS 1.2 suite for tls.maxVersion 1.2".into());
    }
    Ok(Some(out.into_iter().map(|(n, _)| n).collect()))
}

/// The prefix of pier's listener `tls.options` keys.
pub const OPTION_PREFIX: &str = "pier.dev/";

/// A listener's `tls.options` with pier's prefix as the handshake they ask for: `min-version`,
/// `max-version`, `ciphers`, `ecdh-curves` and `alpn-protocols` (lists comma-separated), the
/// same values as a ClientTrafficPolicy's `tls`. `Ok(None)`: none of pier's keys. Keys with
/// another prefix are other implementations' and are left alone.
pub fn options_profile(options: &BTreeMap<String, String>) -> Result<Option<TlsProfile>, String> {
    let mut tls = ClientTls::default();
    let mut any = false;
    let list = |v: &str| -> Vec<String> {
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    for (key, value) in options {
        let Some(name) = key.strip_prefix(OPTION_PREFIX) else {
            continue;
        };
        any = true;
        match name {
            "min-version" => tls.min_version = Some(value.trim().to_string()),
            "max-version" => tls.max_version = Some(value.trim().to_string()),
            "ciphers" => tls.ciphers = list(value),
            "ecdh-curves" => tls.ecdh_curves = list(value),
            "alpn-protocols" => tls.alpn_protocols = Some(list(value)),
            other => {
                return Err(format!(
                    "{OPTION_PREFIX}{other} is not an option pier reads (min-version, \
                     max-version, ciphers, ecdh-curves, alpn-protocols)"
                ));
            }
        }
    }
    if !any {
        return Ok(None);
    }
    let renamed = |why: String| {
        [
            ("tls.minVersion", "min-version"),
            ("tls.maxVersion", "max-version"),
            ("tls.ciphers", "ciphers"),
            ("tls.ecdhCurves", "ecdh-curves"),
            ("tls.alpnProtocols", "alpn-protocols"),
        ]
        .iter()
        .fold(why, |w, (from, to)| {
            w.replace(from, &format!("{OPTION_PREFIX}{to}"))
        })
    };
    match tls_profile(&tls) {
        Ok(p) => Ok(Some(p).filter(|p| !p.is_default())),
        Err(why) => Err(renamed(why)),
    }
}

#[cfg(test)]
mod tests;
