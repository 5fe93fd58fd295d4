use super::*;

fn compression(encodings: &[Encoding]) -> Compression {
    Compression {
        compressors: encodings
            .iter()
            .map(|&encoding| Compressor {
                encoding,
                min_content_length: 30,
            })
            .collect(),
    }
}

fn accept(values: &[&str]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for v in values {
        h.append(ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
    }
    h
}

fn chosen(c: &Compression, values: &[&str]) -> Option<Encoding> {
    negotiate(c, &Method::GET, &accept(values))
        .chosen
        .map(|c| c.encoding)
}

use Encoding::*;

#[test]
fn the_highest_weight_wins_and_the_policy_order_breaks_ties() {
    let all = compression(&[Zstd, Brotli, Gzip]);
    assert_eq!(chosen(&all, &["gzip, deflate, br, zstd"]), Some(Zstd));
    assert_eq!(chosen(&all, &["gzip;q=1.0, br;q=0.9"]), Some(Gzip));
    assert_eq!(chosen(&all, &["gzip;q=0.5", "br;q=0.8"]), Some(Brotli));
    let gzip_first = compression(&[Gzip, Brotli]);
    assert_eq!(chosen(&gzip_first, &["br, gzip"]), Some(Gzip));
    // Names and `q` in any case, spaces around the parts.
    assert_eq!(chosen(&all, &[" GZIP ; Q=0.3 , Br ;q=0.2"]), Some(Gzip));
    // `x-gzip` is gzip (RFC 9110 §8.4.1.3).
    assert_eq!(chosen(&gzip_first, &["x-gzip"]), Some(Gzip));
}

#[test]
fn zero_weight_star_and_nothing_acceptable() {
    let all = compression(&[Zstd, Brotli, Gzip]);
    // Nothing listed, or only codings pier does not have.
    assert_eq!(chosen(&all, &[]), None);
    assert_eq!(chosen(&all, &["deflate, compress"]), None);
    assert_eq!(chosen(&all, &["identity"]), None);
    // q=0 is "not acceptable".
    assert_eq!(chosen(&all, &["gzip;q=0, br;q=0.000"]), None);
    assert_eq!(chosen(&all, &["gzip;q=0, br;q=0.001"]), Some(Brotli));
    // `*` stands for every coding not named; a named one keeps its own weight.
    assert_eq!(chosen(&all, &["*"]), Some(Zstd));
    assert_eq!(chosen(&all, &["zstd;q=0, *;q=0.5"]), Some(Brotli));
    assert_eq!(chosen(&all, &["*;q=0, gzip"]), Some(Gzip));
    // The first of two entries for one coding counts.
    assert_eq!(chosen(&all, &["br;q=0, br;q=1"]), None);
}

#[test]
fn malformed_weights_are_ignored_not_guessed() {
    let all = compression(&[Zstd, Brotli, Gzip]);
    for bad in [
        "gzip;q=2",
        "gzip;q=1.5",
        "gzip;q=0.1234",
        "gzip;q=",
        "gzip;q=abc",
        "gzip;q=-1",
    ] {
        assert_eq!(chosen(&all, &[bad]), None, "{bad}");
    }
    // Other parameters, and empty entries, are skipped.
    assert_eq!(chosen(&all, &[",,gzip;level=9,"]), Some(Gzip));
    assert_eq!(qvalue("0.5"), Some(500));
    assert_eq!(qvalue("1.000"), Some(1000));
    assert_eq!(qvalue("1.001"), None);
    assert_eq!(qvalue("0.05"), Some(50));
}

#[test]
fn a_client_listing_every_coding_many_times_gets_one() {
    let all = compression(&[Gzip, Brotli, Zstd]);
    let many = vec!["zstd;q=0.1, br;q=0.2, gzip;q=0.3, deflate, x-custom"; 1000].join(", ");
    assert_eq!(chosen(&all, &[&many]), Some(Gzip));
    // Only the first entries are read: a coding named after them is not seen.
    let late = format!("{}, br", vec!["deflate"; 100].join(", "));
    assert_eq!(chosen(&all, &[&late]), None);
}

#[test]
fn head_gets_no_encoding() {
    let all = compression(&[Gzip]);
    let n = negotiate(&all, &Method::HEAD, &accept(&["gzip"]));
    assert!(n.chosen.is_none());
}

fn head(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

#[test]
fn what_may_be_compressed() {
    let ok = StatusCode::OK;
    let text = [("content-type", "text/html; charset=utf-8")];
    assert!(eligible(ok, &head(&text), 30));
    assert!(eligible(StatusCode::NOT_FOUND, &head(&text), 30));
    for status in [
        StatusCode::CONTINUE,
        StatusCode::SWITCHING_PROTOCOLS,
        StatusCode::NO_CONTENT,
        StatusCode::PARTIAL_CONTENT,
        StatusCode::NOT_MODIFIED,
    ] {
        assert!(!eligible(status, &head(&text), 30), "{status}");
    }
    let with = |extra: (&'static str, &'static str)| {
        let mut h = text.to_vec();
        h.push(extra);
        eligible(ok, &head(&h), 30)
    };
    assert!(!with(("content-encoding", "gzip")));
    assert!(!with(("content-encoding", "br")));
    assert!(with(("content-encoding", "identity")));
    assert!(!with(("content-range", "bytes 0-9/100")));
    assert!(!with(("cache-control", "public, No-Transform")));
    assert!(with(("cache-control", "no-cache")));
    // Length against the minimum; unknown (streamed) is compressed.
    assert!(!with(("content-length", "29")));
    assert!(with(("content-length", "30")));
    assert!(!with(("content-length", "0")));
    assert!(eligible(
        ok,
        &head(&[("content-type", "text/plain")]),
        1 << 20
    ));
    assert!(!eligible(
        ok,
        &head(&[("content-type", "text/plain"), ("content-length", "30")]),
        31
    ));
    // No type: not compressed.
    assert!(!eligible(ok, &head(&[]), 30));
}

#[test]
fn compressible_types() {
    for t in [
        "text/html",
        "text/plain; charset=utf-8",
        "TEXT/CSS",
        "application/json",
        "application/problem+json",
        "application/atom+xml",
        "application/javascript",
        "image/svg+xml",
        "application/wasm",
        "font/ttf",
    ] {
        assert!(compressible(&HeaderValue::from_static(t)), "{t}");
    }
    for t in [
        "text/event-stream",
        "image/png",
        "image/jpeg",
        "application/octet-stream",
        "application/zip",
        "application/grpc",
        "font/woff2",
        "video/mp4",
        "json",
        "",
    ] {
        assert!(!compressible(&HeaderValue::from_static(t)), "{t}");
    }
}

#[test]
fn the_compressed_head() {
    let mut h = head(&[
        ("content-type", "text/html"),
        ("content-length", "1000"),
        ("accept-ranges", "bytes"),
        ("etag", "\"abc\""),
    ]);
    compressed_head(&mut h, Brotli);
    assert_eq!(h.get(CONTENT_ENCODING).unwrap(), "br");
    assert!(h.get(CONTENT_LENGTH).is_none());
    assert!(h.get(ACCEPT_RANGES).is_none());
    assert_eq!(h.get(ETAG).unwrap(), "W/\"abc\"");
    // A weak ETag stays as it is.
    let mut h = head(&[("etag", "W/\"abc\"")]);
    compressed_head(&mut h, Gzip);
    assert_eq!(h.get(ETAG).unwrap(), "W/\"abc\"");
}

#[test]
fn vary_names_accept_encoding_once() {
    let mut h = HeaderMap::new();
    vary(&mut h);
    vary(&mut h);
    assert_eq!(h.get_all(VARY).iter().count(), 1);
    let mut h = head(&[("vary", "Origin, Accept-Encoding")]);
    vary(&mut h);
    assert_eq!(h.get_all(VARY).iter().count(), 1);
    let mut h = head(&[("vary", "*")]);
    vary(&mut h);
    assert_eq!(h.get_all(VARY).iter().count(), 1);
    let mut h = head(&[("vary", "origin")]);
    vary(&mut h);
    let all: Vec<_> = h.get_all(VARY).iter().collect();
    assert_eq!(all, ["origin", "accept-encoding"]);
}
