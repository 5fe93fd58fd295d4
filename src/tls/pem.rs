//! PEM errors in words: rustls-pki-types prints a missing end line as its bytes
//! (`missing section end marker: [45, 45, 45, …]`); this says `the "-----END CERTIFICATE-----"
//! line is missing`. Never prints the PEM's content: only the marker lines, which name the
//! section's type.

use rustls::pki_types::pem;

/// A PEM decoding error, shown in words.
#[derive(Debug)]
pub struct PemError(pub pem::Error);

impl std::fmt::Display for PemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            // The marker is the section's label (`CERTIFICATE`).
            pem::Error::MissingSectionEnd { end_marker } => write!(
                f,
                "the \"-----END {}-----\" line is missing (the file is cut short or corrupt)",
                marker(end_marker)
            ),
            pem::Error::IllegalSectionStart { line } => write!(
                f,
                "\"{}\" is not a valid \"-----BEGIN …-----\" line",
                marker(line)
            ),
            pem::Error::Base64Decode(e) => {
                write!(
                    f,
                    "the text between the BEGIN and END lines is not valid base64 ({e})"
                )
            }
            pem::Error::NoItemsFound => f.write_str("no PEM section of the expected type"),
            other => other.fmt(f),
        }
    }
}

impl std::error::Error for PemError {}

impl From<pem::Error> for PemError {
    fn from(e: pem::Error) -> Self {
        Self(e)
    }
}

/// A marker line as text, at most 80 characters (it is the line that starts a section, never
/// the base64 body).
fn marker(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    match text.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    fn error_of(pem: &str) -> String {
        let e = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap_err();
        PemError(e).to_string()
    }

    #[test]
    fn a_cut_pem_names_the_missing_end_line_not_its_bytes() {
        let shown = error_of("-----BEGIN CERTIFICATE-----\nMIIB\n");
        assert_eq!(
            shown,
            "the \"-----END CERTIFICATE-----\" line is missing (the file is cut short or corrupt)"
        );
    }

    #[test]
    fn bad_base64_says_so() {
        let shown = error_of("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n");
        assert!(
            shown.starts_with("the text between the BEGIN and END lines is not valid base64"),
            "{shown}"
        );
    }
}
