use super::*;

fn key() -> CookieKey {
    CookieKey::derive(b"0123456789abcdef0123456789abcdef", b"default/login")
}

#[test]
fn a_sealed_value_opens_only_with_its_key_and_name() {
    let k = key();
    let v = k.seal("s", b"hello");
    assert_eq!(k.open("s", v.as_bytes()).as_deref(), Some(&b"hello"[..]));
    assert_eq!(k.open("t", v.as_bytes()), None, "another cookie's name");
    let other = CookieKey::derive(b"0123456789abcdef0123456789abcdef", b"default/other");
    assert_eq!(other.open("s", v.as_bytes()), None, "another context");
    assert_ne!(k.seal("s", b"hello"), v, "a fresh nonce each time");
}

#[test]
fn a_changed_character_never_opens() {
    let k = key();
    let v = k.seal("s", b"some session");
    for i in 0..v.len() {
        let mut b = v.clone().into_bytes();
        b[i] = if b[i] == b'A' { b'B' } else { b'A' };
        assert_eq!(k.open("s", &b), None, "position {i}");
    }
    assert_eq!(k.open("s", &v.as_bytes()[..v.len() - 1]), None, "truncated");
}

#[test]
fn pairs_are_trimmed_and_pairs_without_equals_skipped() {
    let h = [&b"a=1; b = 2 ;junk; c="[..], &b"d=4=5"[..]];
    let got: Vec<_> = pairs(h.into_iter()).collect();
    assert_eq!(
        got,
        vec![
            (&b"a"[..], &b"1"[..]),
            (&b"b"[..], &b"2"[..]),
            (&b"c"[..], &b""[..]),
            (&b"d"[..], &b"4=5"[..]),
        ]
    );
}

#[test]
fn a_long_value_splits_into_chunks_that_join_back() {
    let value = "x".repeat(CHUNK * 2 + 10);
    let set = set("s", &value, &CookieAttrs::default(), Some(60), 5).unwrap();
    assert_eq!(set.len(), 5, "three chunks and two leftovers cleared");
    assert!(set[0].starts_with("s.0=xxx"));
    assert!(set[0].ends_with("; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=60"));
    assert!(set[3].starts_with("s.3=; ") && set[3].ends_with("Max-Age=0"));
    let header: String = set[..3]
        .iter()
        .map(|c| c.split(';').next().unwrap())
        .collect::<Vec<_>>()
        .join("; ");
    let joined = joined("s", pairs(std::iter::once(header.as_bytes()))).unwrap();
    assert_eq!(joined, value.as_bytes());
    assert_eq!(count("s", pairs(std::iter::once(header.as_bytes()))), 3);
}

#[test]
fn a_gap_ends_the_chunks_and_no_first_chunk_is_no_value() {
    let h = b"s.0=ab; s.2=ef; s.1x=zz; s.10=no";
    assert_eq!(
        joined("s", pairs(std::iter::once(&h[..]))).as_deref(),
        Some(&b"ab"[..])
    );
    assert_eq!(joined("s", pairs(std::iter::once(&b"s.1=cd"[..]))), None);
    assert!(
        set(
            "s",
            &"x".repeat(CHUNK * MAX_CHUNKS + 1),
            &CookieAttrs::default(),
            None,
            0
        )
        .is_none()
    );
}

#[test]
fn domain_is_set_when_asked() {
    let attrs = CookieAttrs {
        domain: Some("example.com".into()),
    };
    let c = clear("s", &attrs, 2);
    assert_eq!(c.len(), 2);
    assert!(c[1].contains("; Domain=example.com; Max-Age=0"), "{}", c[1]);
}

mod props {
    //! Untrusted cookie bytes never panic the parser or the decryption, and no change to a
    //! sealed value opens. Cases: `PROPTEST_CASES` (default 64).

    use proptest::prelude::*;
    use proptest::test_runner::Config;

    use super::*;

    fn config() -> Config {
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(64);
        // About 1 case in 256 mutates a byte into itself and is rejected: at 10⁶ cases that is
        // far past proptest's default of 1024 rejects.
        Config {
            cases,
            max_global_rejects: cases / 4 + 1024,
            ..Config::default()
        }
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_cookie_header_parses_without_panic(h in prop::collection::vec(any::<u8>(), 0..512), base in "[a-z.0-9]{0,6}") {
            let all: Vec<_> = pairs(std::iter::once(&h[..])).collect();
            let _ = joined(&base, all.iter().copied());
            let _ = count(&base, all.iter().copied());
            for (n, v) in all {
                let _ = key().open(std::str::from_utf8(n).unwrap_or(""), v);
            }
        }

        #[test]
        fn any_value_opens_to_none_without_panic(v in prop::collection::vec(any::<u8>(), 0..256)) {
            prop_assert_eq!(key().open("s", &v), None);
        }

        #[test]
        fn a_mutated_sealed_value_never_opens(plain in prop::collection::vec(any::<u8>(), 0..64), at in any::<prop::sample::Index>(), to in any::<u8>()) {
            let k = key();
            let v = k.seal("s", &plain).into_bytes();
            let mut bad = v.clone();
            let i = at.index(bad.len());
            bad[i] = to;
            prop_assume!(bad != v);
            // Another base64 spelling of the same bytes (the last character's unused bits)
            // decodes to the same sealed bytes: that is not a change of the value.
            let same = URL_SAFE_NO_PAD.decode(&bad).ok() == URL_SAFE_NO_PAD.decode(&v).ok();
            prop_assume!(!same);
            prop_assert_eq!(k.open("s", &bad), None);
        }
    }
}
