use proptest::prelude::*;

use super::*;

const SPEC_EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn traceparent_spec_example_parses() {
    let p = parse_traceparent(SPEC_EXAMPLE.as_bytes()).expect("valid");
    assert_eq!(hex(&p.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(hex(&p.span_id), "00f067aa0ba902b7");
    assert!(p.sampled());
    let unsampled = parse_traceparent(SPEC_EXAMPLE.replace("-01", "-00").as_bytes()).unwrap();
    assert!(!unsampled.sampled());
    // Other flag bits do not make it sampled; whitespace around the value is OWS.
    assert!(
        !parse_traceparent(SPEC_EXAMPLE.replace("-01", "-02").as_bytes())
            .unwrap()
            .sampled()
    );
    assert!(parse_traceparent(format!("  {SPEC_EXAMPLE}\t").as_bytes()).is_some());
}

#[test]
fn traceparent_invalid_values_are_rejected() {
    let bad = [
        // Uppercase hex.
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
        // All-zero trace ID and parent ID.
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        // Version ff, and a non-hex version.
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        // Version 00 is exactly 55 characters.
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        // Separators.
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
        // A later version followed by something other than `-`.
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        "",
    ];
    for v in bad {
        assert_eq!(parse_traceparent(v.as_bytes()), None, "{v:?}");
    }
}

#[test]
fn traceparent_later_versions_read_by_version_00_rules() {
    let v = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next";
    let p = parse_traceparent(v.as_bytes()).expect("forward compatible");
    assert_eq!(hex(&p.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert!(parse_traceparent(&v.as_bytes()[..55]).is_some());
}

#[test]
fn traceparent_written_as_version_00() {
    let t = [0xab; 16];
    let s = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08];
    let v = format_traceparent(&t, &s, true);
    assert_eq!(
        std::str::from_utf8(&v).unwrap(),
        "00-abababababababababababababababab-0102030405060708-01"
    );
    let v = format_traceparent(&t, &s, false);
    assert!(v.ends_with(b"-00"));
}

#[test]
fn only_one_traceparent_line_is_a_parent() {
    let lines = [("traceparent", SPEC_EXAMPLE.as_bytes())];
    assert!(Received::read(lines.into_iter()).parent().is_some());
    let lines = [
        ("TraceParent", SPEC_EXAMPLE.as_bytes()),
        ("traceparent", SPEC_EXAMPLE.as_bytes()),
    ];
    assert_eq!(Received::read(lines.into_iter()).parent(), None);
}

#[test]
fn tracestate_is_joined_and_bounded() {
    let lines = [
        (
            "tracestate",
            &b"rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"[..],
        ),
        ("TRACESTATE", &b"vendor=x"[..]),
        ("x-other", &b"y"[..]),
    ];
    let state = Received::read(lines.into_iter()).state().unwrap();
    assert_eq!(state, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE,vendor=x");

    let long = format!("a={}", "x".repeat(MAX_TRACESTATE));
    let lines = [("tracestate", long.as_bytes())];
    assert_eq!(Received::read(lines.into_iter()).state(), None);

    let many: Vec<String> = (0..=MAX_TRACESTATE_MEMBERS)
        .map(|i| format!("k{i}=v"))
        .collect();
    let many = many.join(",");
    let lines = [("tracestate", many.as_bytes())];
    assert_eq!(Received::read(lines.into_iter()).state(), None);
    assert_eq!(Received::read(std::iter::empty()).state(), None);
}

#[test]
fn otlp_endpoint_is_an_http_or_https_url() {
    let e: OtlpEndpoint = "http://127.0.0.1:4318".parse().unwrap();
    assert_eq!(e.to_string(), "http://127.0.0.1:4318/v1/traces");
    assert!(!e.is_https());
    let e: OtlpEndpoint = "https://collector.example:4318".parse().unwrap();
    assert_eq!(e.to_string(), "https://collector.example:4318/v1/traces");
    assert!(e.is_https());
    let e: OtlpEndpoint = "http://collector:4318/".parse().unwrap();
    assert_eq!(e.to_string(), "http://collector:4318/v1/traces");
    let e: OtlpEndpoint = "http://collector/custom/path".parse().unwrap();
    assert_eq!(e.to_string(), "http://collector/custom/path");
    assert_eq!(
        "ftp://collector:4318".parse::<OtlpEndpoint>(),
        Err(ConfigError::Scheme)
    );
    assert_eq!(
        "collector:4318".parse::<OtlpEndpoint>(),
        Err(ConfigError::Url)
    );
    assert_eq!("/v1/traces".parse::<OtlpEndpoint>(), Err(ConfigError::Url));
    assert_eq!("not a url".parse::<OtlpEndpoint>(), Err(ConfigError::Url));
}

#[test]
fn sample_ratio_is_between_0_and_1() {
    assert_eq!("0.25".parse::<SampleRatio>().unwrap().get(), 0.25);
    assert_eq!("0".parse::<SampleRatio>().unwrap().get(), 0.0);
    assert_eq!("1".parse::<SampleRatio>().unwrap().get(), 1.0);
    for bad in ["1.5", "-0.1", "NaN", "inf", "", "one"] {
        assert_eq!(bad.parse::<SampleRatio>(), Err(ConfigError::Ratio), "{bad}");
    }
    assert!((0..1000).all(|_| !Sample::of(SampleRatio(0.0)).draw()));
    assert!((0..1000).all(|_| Sample::of(SampleRatio(1.0)).draw()));
    let half = Sample::of(SampleRatio(0.5));
    let n = (0..10_000).filter(|_| half.draw()).count();
    assert!((4_000..6_000).contains(&n), "{n} of 10000 at 0.5");
}

#[test]
fn server_address_and_port_from_the_host() {
    assert_eq!(split_host("example.com"), ("example.com", None));
    assert_eq!(split_host("example.com:8080"), ("example.com", Some(8080)));
    assert_eq!(split_host("[::1]:443"), ("::1", Some(443)));
    assert_eq!(split_host("[::1]"), ("::1", None));
    assert_eq!(split_host("example.com:x"), ("example.com:x", None));
}

fn lower_hex(n: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(b"0123456789abcdef".to_vec()), n)
        .prop_map(|v| String::from_utf8(v).unwrap())
}

proptest! {
    #[test]
    fn traceparent_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        let _ = parse_traceparent(&bytes);
    }

    #[test]
    fn traceparent_format_parse_round_trip(
        trace_id in any::<[u8; 16]>().prop_filter("non-zero", |t| *t != [0; 16]),
        span_id in any::<[u8; 8]>().prop_filter("non-zero", |s| *s != [0; 8]),
        sampled in any::<bool>(),
    ) {
        let text = format_traceparent(&trace_id, &span_id, sampled);
        let p = parse_traceparent(&text).unwrap();
        prop_assert_eq!(p.trace_id, trace_id);
        prop_assert_eq!(p.span_id, span_id);
        prop_assert_eq!(p.sampled(), sampled);
    }

    /// A well-formed value parses to its parts; changing any one character to one that is
    /// not lowercase hex (or, at a separator, not `-`) makes it invalid.
    #[test]
    fn traceparent_one_bad_character_invalidates(
        trace in lower_hex(32).prop_filter("non-zero", |t| t.bytes().any(|b| b != b'0')),
        span in lower_hex(16).prop_filter("non-zero", |s| s.bytes().any(|b| b != b'0')),
        flags in lower_hex(2),
        at in 0usize..55,
        bad in proptest::sample::select(b"ABCDEFGxz -_+/0".to_vec()),
    ) {
        let good = format!("00-{trace}-{span}-{flags}");
        let p = parse_traceparent(good.as_bytes()).unwrap();
        prop_assert_eq!(hex(&p.trace_id), trace);
        prop_assert_eq!(hex(&p.span_id), span);
        let mut v = good.into_bytes();
        let separator = matches!(at, 2 | 35 | 52);
        let valid_there = if separator { bad == b'-' } else { bad.is_ascii_digit() || (b'a'..=b'f').contains(&bad) };
        prop_assume!(!valid_there);
        v[at] = bad;
        prop_assert_eq!(parse_traceparent(&v), None);
    }
}
