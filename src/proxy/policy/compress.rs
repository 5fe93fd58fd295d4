//! Response compression (BackendTrafficPolicy `compressor`), the pure part: the encoding a
//! request accepts ([`negotiate`]), whether a response may be compressed at all
//! ([`eligible`]), and the head of one that is ([`compressed_head`], [`vary`]). The body is
//! `body::compress`'s; `phase::compress` puts the two together.
//!
//! Not compressed: a response to HEAD, 1xx, 204, 206 and 304, one with a `Content-Encoding`
//! other than `identity` or a `Content-Range`, one marked `Cache-Control: no-transform`, one
//! whose `Content-Length` is below the compressor's `minContentLength`, and one whose type is
//! not in [`compressible`]'s list (no `Content-Type`: not compressed, as its bytes are unknown).

use http::header::{
    ACCEPT_ENCODING, ACCEPT_RANGES, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE,
    CONTENT_TYPE, ETAG, VARY,
};
use http::{HeaderMap, HeaderValue, Method, StatusCode};

use crate::model::traffic::{Compression, Compressor, Encoding};
use crate::proxy::headers::list_items;

/// `Accept-Encoding` entries read, at most: a client that lists thousands is answered by its
/// first ones (the header's size is bounded anyway; this bounds the work).
const MAX_CODINGS: usize = 32;

/// What a request's response may get: the rule's compressors and the one the client accepts
/// best, if any.
#[derive(Clone, Copy, Debug)]
pub struct Negotiated<'a> {
    pub compression: &'a Compression,
    /// Highest `q` above 0 among the compressors (ties: the policy's order); `None` for HEAD.
    pub chosen: Option<Compressor>,
}

/// The encoding among `c`'s that `headers`' `Accept-Encoding` weighs highest (RFC 9110
/// §12.5.3: `q` from 0 to 1, `*` for any coding not listed, `x-gzip` for gzip); none when the
/// client names none of them, or weighs them all 0.
pub fn negotiate<'a>(c: &'a Compression, method: &Method, headers: &HeaderMap) -> Negotiated<'a> {
    let chosen = match *method == Method::HEAD {
        true => None,
        false => choose(&c.compressors, headers),
    };
    Negotiated {
        compression: c,
        chosen,
    }
}

fn choose(compressors: &[Compressor], headers: &HeaderMap) -> Option<Compressor> {
    // Per compressor its explicit weight; and the weight of `*`.
    let mut explicit = [None::<u16>; 3];
    let mut star = None::<u16>;
    let codings = list_items(headers, ACCEPT_ENCODING).take(MAX_CODINGS);
    for item in codings {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim();
        if coding.is_empty() {
            continue;
        }
        let mut q = Some(1000);
        for param in parts {
            let Some((k, v)) = param.split_once('=') else {
                continue;
            };
            if k.trim().eq_ignore_ascii_case("q") {
                q = qvalue(v.trim());
            }
        }
        // An entry with a malformed weight is ignored.
        let Some(q) = q else { continue };
        if coding == "*" {
            star.get_or_insert(q);
            continue;
        }
        for (i, c) in compressors.iter().enumerate().take(explicit.len()) {
            let token = c.encoding.token();
            let named = coding.eq_ignore_ascii_case(token)
                || (c.encoding == Encoding::Gzip && coding.eq_ignore_ascii_case("x-gzip"));
            if named {
                explicit[i].get_or_insert(q);
            }
        }
    }
    let mut best: Option<(u16, Compressor)> = None;
    for (i, c) in compressors.iter().enumerate().take(explicit.len()) {
        let q = explicit[i].or(star).unwrap_or(0);
        if q > 0 && best.is_none_or(|(b, _)| q > b) {
            best = Some((q, *c));
        }
    }
    best.map(|(_, c)| c)
}

/// A `qvalue` in thousandths: `0`, `0.5`, `0.125`, `1`, `1.000`.
fn qvalue(v: &str) -> Option<u16> {
    let (whole, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut thousandths: u16 = 0;
    for (i, b) in frac.bytes().enumerate() {
        thousandths += u16::from(b - b'0') * [100, 10, 1][i];
    }
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Whether a response with this status and head may be compressed by a compressor whose
/// minimum is `min` (whatever the client accepts).
pub fn eligible(status: StatusCode, headers: &HeaderMap, min: u64) -> bool {
    if status.is_informational()
        || matches!(
            status,
            StatusCode::NO_CONTENT | StatusCode::PARTIAL_CONTENT | StatusCode::NOT_MODIFIED
        )
    {
        return false;
    }
    if let Some(ce) = headers.get(CONTENT_ENCODING)
        && !ce.as_bytes().trim_ascii().eq_ignore_ascii_case(b"identity")
    {
        return false;
    }
    if headers.contains_key(CONTENT_RANGE) || no_transform(headers) {
        return false;
    }
    if !headers.get(CONTENT_TYPE).is_some_and(compressible) {
        return false;
    }
    match headers.get(CONTENT_LENGTH) {
        Some(len) => std::str::from_utf8(len.as_bytes())
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .is_some_and(|n| n >= min),
        // Streamed (chunked, HTTP/2 without a length): its length is unknown.
        None => true,
    }
}

/// `Cache-Control: no-transform` (RFC 9111 §5.2.2.6): no intermediary may change the body.
fn no_transform(headers: &HeaderMap) -> bool {
    list_items(headers, CACHE_CONTROL).any(|d| d.eq_ignore_ascii_case("no-transform"))
}

/// Types whose bytes compress: text (but not `text/event-stream`, as Envoy), JSON, XML,
/// JavaScript, SVG, WebAssembly and uncompressed font formats, and any `+json` or `+xml` type.
/// Images, video, archives and fonts such as WOFF2 are compressed already.
pub fn compressible(content_type: &HeaderValue) -> bool {
    const APPLICATION: [&str; 10] = [
        "json",
        "javascript",
        "x-javascript",
        "ecmascript",
        "xml",
        "wasm",
        "x-ndjson",
        "vnd.ms-fontobject",
        "x-font-ttf",
        "graphql",
    ];
    let Ok(v) = content_type.to_str() else {
        return false;
    };
    let essence = v.split(';').next().unwrap_or("").trim();
    let Some((kind, sub)) = essence.split_once('/') else {
        return false;
    };
    let is = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    let ends =
        |suffix: &str| sub.len() >= suffix.len() && is(&sub[sub.len() - suffix.len()..], suffix);
    if is(kind, "text") {
        !is(sub, "event-stream")
    } else if is(kind, "application") {
        APPLICATION.iter().any(|a| is(sub, a)) || ends("+json") || ends("+xml")
    } else if is(kind, "image") {
        is(sub, "svg+xml")
    } else if is(kind, "font") {
        is(sub, "ttf") || is(sub, "otf")
    } else {
        false
    }
}

/// The head of a response compressed with `encoding`: its length is unknown now (chunked, or
/// HTTP/2 without one), ranges of it cannot be served, and a strong ETag no longer names its
/// bytes (weakened, as nginx does; RFC 9110 §8.8.3).
pub fn compressed_head(headers: &mut HeaderMap, encoding: Encoding) {
    headers.remove(CONTENT_LENGTH);
    headers.remove(ACCEPT_RANGES);
    headers.insert(CONTENT_ENCODING, HeaderValue::from_static(encoding.token()));
    if let Some(etag) = headers.get(ETAG)
        && !etag.as_bytes().starts_with(b"W/")
    {
        let mut weak = Vec::with_capacity(etag.len() + 2);
        weak.extend_from_slice(b"W/");
        weak.extend_from_slice(etag.as_bytes());
        if let Ok(weak) = HeaderValue::from_bytes(&weak) {
            headers.insert(ETAG, weak);
        }
    }
}

/// `Vary: Accept-Encoding` on a response that could have been compressed, whether or not this
/// one was, so that a cache keeps the two apart; unless `Vary` names it or `*` already.
pub fn vary(headers: &mut HeaderMap) {
    let covered =
        list_items(headers, VARY).any(|v| v == "*" || v.eq_ignore_ascii_case("accept-encoding"));
    if !covered {
        headers.append(VARY, HeaderValue::from_static("accept-encoding"));
    }
}

#[cfg(test)]
mod tests;
