//! A unary gRPC call as pier makes it to its side services (the external authorizer's
//! `Check`, the rate-limit service's `ShouldRateLimit`): one length-prefixed, uncompressed
//! message each way over HTTP/2.

use ::http::header;
use ::http::{HeaderMap, HeaderValue, Method, Request};
use bytes::{BufMut, BytesMut};

use crate::proxy::body::{self, ProxyBody};

/// `POST path` to `authority` carrying `message` (already encoded) in one gRPC frame.
pub fn request(
    path: &str,
    authority: &str,
    message: &[u8],
) -> Result<Request<ProxyBody>, ::http::Error> {
    let mut framed = BytesMut::with_capacity(5 + message.len());
    framed.put_u8(0);
    framed.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    framed.put_slice(message);
    Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::HOST, authority)
        .header(header::CONTENT_TYPE, "application/grpc")
        .header(header::TE, "trailers")
        .body(body::full(framed.freeze()))
}

/// The answer's message: `grpc-status` 0 (in the trailers, or in the headers of a
/// Trailers-Only answer) and a body that is exactly one uncompressed frame. `None` for a gRPC
/// error, a compressed frame, or bytes that do not frame.
pub fn message<'b>(
    headers: &HeaderMap,
    trailers: Option<&HeaderMap>,
    body: &'b [u8],
) -> Option<&'b [u8]> {
    let status = trailers
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| headers.get("grpc-status"));
    if status.map(HeaderValue::as_bytes) != Some(b"0") {
        return None;
    }
    // Compressed (flag 1), or shorter than a frame header.
    let [0, l0, l1, l2, l3, message @ ..] = body else {
        return None;
    };
    let len = u32::from_be_bytes([*l0, *l1, *l2, *l3]);
    (usize::try_from(len).ok() == Some(message.len())).then_some(message)
}
