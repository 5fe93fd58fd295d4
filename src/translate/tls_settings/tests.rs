use super::*;

fn tls(f: impl FnOnce(&mut ClientTls)) -> Result<TlsProfile, String> {
    let mut t = ClientTls::default();
    f(&mut t);
    tls_profile(&t)
}

#[test]
fn versions_narrow_what_is_offered() {
    let p = tls(|t| t.min_version = Some("1.3".into())).unwrap();
    assert!(!p.tls12 && p.tls13);
    let p = tls(|t| t.max_version = Some("1.2".into())).unwrap();
    assert!(p.tls12 && !p.tls13);
    let p = tls(|t| t.min_version = Some("Auto".into())).unwrap();
    assert!(p.is_default());
}

#[test]
fn what_rustls_cannot_do_is_refused_with_the_reason() {
    let e = tls(|t| t.min_version = Some("1.0".into())).unwrap_err();
    assert!(e.contains("rustls implements TLS 1.2 and 1.3 only"), "{e}");
    let e = tls(|t| t.max_version = Some("1.4".into())).unwrap_err();
    assert!(e.contains("not a TLS version"), "{e}");
    let e = tls(|t| {
        t.min_version = Some("1.3".into());
        t.max_version = Some("1.2".into());
    })
    .unwrap_err();
    assert!(e.contains("above tls.maxVersion"), "{e}");
    let e = tls(|t| t.ciphers = vec!["AES128-SHA".into()]).unwrap_err();
    assert!(
        e.contains("\"AES128-SHA\" is not a cipher suite rustls implements"),
        "{e}"
    );
    assert!(
        e.contains("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"),
        "lists them: {e}"
    );
    let e = tls(|t| t.ecdh_curves = vec!["X448".into()]).unwrap_err();
    assert!(e.contains("\"X448\" is not a group"), "{e}");
    let e = tls(|t| t.alpn_protocols = Some(vec!["h3".into()])).unwrap_err();
    assert!(e.contains("\"h3\" is not a protocol pier serves"), "{e}");
    let e = tls(|t| {
        t.max_version = Some("1.2".into());
        t.ciphers = vec!["TLS_AES_128_GCM_SHA256".into()];
    })
    .unwrap_err();
    assert!(e.contains("no TLS 1.2 suite"), "{e}");
}

#[test]
fn envoy_style_ciphers_keep_tls13_and_groups_are_deduplicated() {
    let p = tls(|t| {
        t.ciphers = vec!["[ECDHE-ECDSA-AES256-GCM-SHA384|ECDHE-RSA-AES256-GCM-SHA384]".into()];
        t.ecdh_curves = vec!["P-384".into(), "secp384r1".into(), "X25519".into()];
        t.alpn_protocols = Some(vec!["http/1.1".into()]);
    })
    .unwrap();
    let ciphers = p.ciphers.unwrap();
    assert_eq!(ciphers[0], "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384");
    assert_eq!(ciphers[1], "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384");
    assert!(
        ciphers[2..].iter().all(|c| c.starts_with("TLS13_")),
        "{ciphers:?}"
    );
    assert_eq!(ciphers.len(), 5);
    assert_eq!(p.groups.unwrap(), ["secp384r1", "X25519"]);
    assert_eq!(p.alpn.unwrap(), ["http/1.1"]);

    // Naming a TLS 1.3 suite restricts TLS 1.3 to it.
    let p = tls(|t| t.ciphers = vec!["TLS13_AES_256_GCM_SHA384".into()]).unwrap();
    assert_eq!(p.ciphers.unwrap(), ["TLS13_AES_256_GCM_SHA384"]);
}

#[test]
fn listener_options_say_the_same_under_pier_prefix() {
    let opts = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let p = options_profile(&opts(&[
        ("pier.dev/min-version", "1.3"),
        ("pier.dev/ecdh-curves", "X25519, P-256"),
        ("pier.dev/alpn-protocols", "http/1.1"),
        ("example.com/other", "ignored"),
    ]))
    .unwrap()
    .unwrap();
    assert!(!p.tls12 && p.tls13);
    assert_eq!(p.groups.unwrap(), ["X25519", "secp256r1"]);
    assert_eq!(p.alpn.unwrap(), ["http/1.1"]);

    assert_eq!(options_profile(&opts(&[("example.com/x", "y")])), Ok(None));
    assert_eq!(
        options_profile(&opts(&[("pier.dev/min-version", "Auto")])),
        Ok(None),
        "pier's defaults need no profile"
    );
    let e = options_profile(&opts(&[("pier.dev/min-version", "1.1")])).unwrap_err();
    assert!(e.starts_with("pier.dev/min-version: TLS 1.1"), "{e}");
    let e = options_profile(&opts(&[("pier.dev/min-versoin", "1.3")])).unwrap_err();
    assert!(
        e.contains("pier.dev/min-versoin is not an option pier reads"),
        "{e}"
    );
}
