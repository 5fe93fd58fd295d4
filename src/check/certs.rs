//! The mesh checks on certificates: pure functions of DER certificates and a clock value.
//!
//! - pier's client certificate chains to the CA certificates its chain carries (what
//!   `pier mesh export-trust` hands the mesh), for client authentication, and is in date;
//! - the mesh trust bundle's CAs are in date.
//!
//! Expired is a failure; expiring within [`WARN_WITHIN`] a warning.

use rustls_pki_types::{CertificateDer, UnixTime};

use super::Status;

/// A certificate expiring sooner than this is a warning.
pub const WARN_WITHIN: i64 = 7 * 24 * 3600;

/// What the checks read of one certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The subject (`CN=..`), else the first URI SAN (mesh certificates often have no subject).
    pub name: String,
    pub not_before: i64,
    pub not_after: i64,
    pub is_ca: bool,
}

/// Reads `der`; `None` when it is not an X.509 certificate.
pub fn facts(der: &[u8]) -> Option<Facts> {
    let (_, c) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = c.subject().to_string();
    let uri = c.subject_alternative_name().ok().flatten().and_then(|san| {
        san.value.general_names.iter().find_map(|n| match n {
            x509_parser::extensions::GeneralName::URI(u) => Some(u.to_string()),
            _ => None,
        })
    });
    let name = match (subject.is_empty(), uri) {
        (false, Some(u)) => format!("{subject} ({u})"),
        (false, None) => subject,
        (true, Some(u)) => u,
        (true, None) => "(no subject)".to_string(),
    };
    Some(Facts {
        name,
        not_before: c.validity().not_before.timestamp(),
        not_after: c.validity().not_after.timestamp(),
        is_ca: c.is_ca(),
    })
}

/// The status of a certificate's validity period at `now`, and a phrase for it.
pub fn expiry(f: &Facts, now: i64) -> (Status, String) {
    if now > f.not_after {
        (Status::Fail, format!("expired {}", date(f.not_after)))
    } else if now < f.not_before {
        (
            Status::Fail,
            format!("not valid before {}", date(f.not_before)),
        )
    } else if f.not_after - now < WARN_WITHIN {
        (
            Status::Warn,
            format!(
                "expires {} (in {} h)",
                date(f.not_after),
                (f.not_after - now) / 3600
            ),
        )
    } else {
        (Status::Ok, format!("valid until {}", date(f.not_after)))
    }
}

/// Why a client chain does not verify.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("the chain is empty")]
    Empty,
    #[error("certificate {0} of the chain is not a valid X.509 certificate")]
    Bad(usize),
    #[error(
        "the chain carries no CA certificate after the leaf, so `pier mesh export-trust` has \
         nothing to give the mesh"
    )]
    NoCa,
    #[error("the leaf does not verify against the CA certificates of its chain: {0}")]
    Invalid(String),
}

/// Verifies the chain's leaf for client authentication against the CA certificates that follow
/// it (what `pier mesh export-trust` exports). Validity dates are checked at a time inside the
/// leaf's own period, so an expired leaf is reported by [`expiry`], not here. Returns the
/// anchors' names.
pub fn verify_client_chain(chain: &[CertificateDer<'static>]) -> Result<Vec<String>, ChainError> {
    let leaf = chain.first().ok_or(ChainError::Empty)?;
    let leaf_facts = facts(leaf).ok_or(ChainError::Bad(0))?;
    let mut cas = vec![];
    for (i, c) in chain.iter().enumerate().skip(1) {
        let f = facts(c).ok_or(ChainError::Bad(i))?;
        if f.is_ca {
            cas.push((c, f));
        }
    }
    if cas.is_empty() {
        return Err(ChainError::NoCa);
    }
    let anchors: Vec<_> = cas
        .iter()
        .filter_map(|(c, _)| webpki::anchor_from_trusted_cert(c).ok())
        .collect();
    let intermediates: Vec<CertificateDer<'_>> = chain[1..].to_vec();
    let ee = webpki::EndEntityCert::try_from(leaf).map_err(|_| ChainError::Bad(0))?;
    let at = (leaf_facts.not_before + leaf_facts.not_after) / 2;
    let time = UnixTime::since_unix_epoch(std::time::Duration::from_secs(at.max(0) as u64));
    let algs = crate::tls::provider::signature_algorithms().all;
    ee.verify_for_usage(
        algs,
        &anchors,
        &intermediates,
        time,
        webpki::KeyUsage::client_auth(),
        None,
        None,
    )
    .map_err(|e| ChainError::Invalid(format!("{e:?}")))?;
    Ok(cas.into_iter().map(|(_, f)| f.name).collect())
}

/// `2026-11-26T18:00:00Z` for Unix seconds (UTC).
pub fn date(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };

    fn ca(cn: &str) -> (CertificateDer<'static>, Issuer<'static, KeyPair>) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let der = p.self_signed(&key).unwrap().der().clone();
        (der, Issuer::new(p, key))
    }

    fn client(issuer: &Issuer<'static, KeyPair>, eku: ExtendedKeyUsagePurpose) -> Vec<u8> {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, "pier");
        p.extended_key_usages = vec![eku];
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        p.signed_by(&key, issuer).unwrap().der().to_vec()
    }

    #[test]
    fn a_client_chain_verifies_against_its_own_ca_even_when_expired() {
        let (ca_der, issuer) = ca("pier client CA");
        let leaf = CertificateDer::from(client(&issuer, ExtendedKeyUsagePurpose::ClientAuth));
        let names = verify_client_chain(&[leaf.clone(), ca_der.clone()]).unwrap();
        assert_eq!(names, ["CN=pier client CA"]);
        let f = facts(&leaf).unwrap();
        assert_eq!(expiry(&f, f.not_after + 1).0, Status::Fail);
        assert_eq!(
            expiry(&f, f.not_after + 1).1,
            "expired 2021-01-01T00:00:00Z"
        );
    }

    #[test]
    fn a_chain_fails_without_its_ca_or_with_another_or_without_client_auth() {
        let (ca_der, issuer) = ca("pier client CA");
        let (other, _) = ca("other CA");
        let leaf = CertificateDer::from(client(&issuer, ExtendedKeyUsagePurpose::ClientAuth));
        assert_eq!(
            verify_client_chain(std::slice::from_ref(&leaf)),
            Err(ChainError::NoCa)
        );
        assert!(matches!(
            verify_client_chain(&[leaf, other]),
            Err(ChainError::Invalid(_))
        ));
        let server_only =
            CertificateDer::from(client(&issuer, ExtendedKeyUsagePurpose::ServerAuth));
        assert!(matches!(
            verify_client_chain(&[server_only, ca_der]),
            Err(ChainError::Invalid(_))
        ));
    }

    #[test]
    fn expiry_warns_within_a_week() {
        let f = Facts {
            name: "x".into(),
            not_before: 0,
            not_after: 1_000_000,
            is_ca: false,
        };
        assert_eq!(expiry(&f, 1_000_000 - WARN_WITHIN - 1).0, Status::Ok);
        assert_eq!(expiry(&f, 1_000_000 - 3600).0, Status::Warn);
        assert_eq!(expiry(&f, 1_000_001).0, Status::Fail);
        assert_eq!(expiry(&f, -1).0, Status::Fail);
    }

    #[test]
    fn dates_are_utc_iso8601() {
        assert_eq!(date(0), "1970-01-01T00:00:00Z");
        assert_eq!(date(1_795_723_200), "2026-11-26T20:00:00Z");
        assert_eq!(date(951_782_400), "2000-02-29T00:00:00Z");
    }
}
