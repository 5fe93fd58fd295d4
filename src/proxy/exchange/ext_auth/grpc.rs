//! gRPC mode: Envoy's `envoy.service.auth.v3.Authorization/Check` over HTTP/2 (h2c, or h2
//! under a BackendTLSPolicy), one unary call per request, with the messages of [`proto`].
//!
//! A gRPC error status (an authorizer that failed), a message that does not decode, a
//! compressed message (pier offers no compression) or a body that is not exactly one message
//! is [`Failure::Garbage`]: the request fails closed. An OK CheckResponse allows, with its
//! header mutations; any other CheckResponse status denies, with the denied response's status
//! (403 when unset), headers and body.

use std::collections::HashMap;

use ::http::header::{self, HeaderName};
use ::http::{HeaderMap, HeaderValue, Request, StatusCode};
use bytes::Bytes;
use prost::Message;

use super::proto::{
    Address, AttributeContext, CheckRequest, CheckResponse, DeniedHttpResponse, HeaderValueOption,
    HttpRequest, Peer, Request as AttrRequest, SocketAddress,
};
use super::{Asked, Denial, Failure, Mutation, Verdict, is_framing};
use crate::model::ext_auth::ExtAuth;
use crate::proxy::body::ProxyBody;
use crate::proxy::observe::access::protocol_name;

/// The method's path.
pub const CHECK_PATH: &str = "/envoy.service.auth.v3.Authorization/Check";

/// The Check call for `asked`.
pub fn request(ext: &ExtAuth, asked: &Asked<'_>) -> Result<Request<ProxyBody>, ::http::Error> {
    let message = check_request(ext, asked).encode_to_vec();
    crate::proxy::exchange::unary::request(CHECK_PATH, &ext.authority, &message)
}

/// The CheckRequest: the client, the request line, the selected headers (lower-case names,
/// repeated values joined by `,`, as Envoy sends them), and the body when asked for.
pub fn check_request(ext: &ExtAuth, asked: &Asked<'_>) -> CheckRequest {
    let mut headers: HashMap<String, String> = HashMap::new();
    for (name, value) in asked.headers {
        if is_framing(name) && *name != header::CONTENT_LENGTH {
            continue;
        }
        if !ext.headers_to_ext_auth.contains(name) && *name != header::AUTHORIZATION {
            continue;
        }
        let value = String::from_utf8_lossy(value.as_bytes());
        headers
            .entry(name.as_str().to_string())
            .and_modify(|v| {
                v.push(',');
                v.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    let (body, raw_body) = match asked.body {
        None => (String::new(), Vec::new()),
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => (s.to_string(), Vec::new()),
            Err(_) => (String::new(), b.to_vec()),
        },
    };
    let http = HttpRequest {
        id: asked.request_id.to_string(),
        method: asked.method.as_str().to_string(),
        headers,
        path: asked
            .uri
            .path_and_query()
            .map_or("/", |pq| pq.as_str())
            .to_string(),
        host: asked.host.to_string(),
        scheme: if asked.https { "https" } else { "http" }.to_string(),
        size: asked
            .body_len
            .and_then(|n| i64::try_from(n).ok())
            .unwrap_or(-1),
        protocol: protocol_name(asked.version).to_string(),
        body,
        raw_body,
    };
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: Some(Address {
                    socket_address: Some(SocketAddress {
                        address: asked.client.to_string(),
                        port_value: 0,
                    }),
                }),
                principal: String::new(),
            }),
            destination: None,
            request: Some(AttrRequest { http: Some(http) }),
        }),
    }
}

/// What the call's answer comes to: `headers` (and `trailers`, absent in a Trailers-Only
/// answer) carry `grpc-status`; `body` holds the length-prefixed message.
pub fn verdict(
    headers: &HeaderMap,
    trailers: Option<&HeaderMap>,
    body: &[u8],
) -> Result<Verdict, Failure> {
    let message = crate::proxy::exchange::unary::message(headers, trailers, body);
    let response =
        CheckResponse::decode(message.ok_or(Failure::Garbage)?).map_err(|_| Failure::Garbage)?;
    check_verdict(response)
}

/// A decoded CheckResponse's verdict.
pub fn check_verdict(r: CheckResponse) -> Result<Verdict, Failure> {
    let code = r.status.as_ref().map_or(0, |s| s.code);
    if code == 0 {
        let mut mutations = Vec::new();
        if let Some(ok) = r.ok_response {
            for option in &ok.headers {
                if let Some(m) = mutation(option)? {
                    mutations.push(m);
                }
            }
            for name in &ok.headers_to_remove {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| Failure::Garbage)?;
                if !is_framing(&name) {
                    mutations.push(Mutation::Remove(name));
                }
            }
        }
        return Ok(Verdict::Allow(mutations));
    }
    let denied = r.denied_response.or(r.error_response);
    Ok(Verdict::Deny(denial(denied)?))
}

fn denial(denied: Option<DeniedHttpResponse>) -> Result<Denial, Failure> {
    let Some(d) = denied else {
        return Ok(Denial {
            status: StatusCode::FORBIDDEN,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        });
    };
    // Unset (0) or not an HTTP status: Envoy's default, 403.
    let status = d
        .status
        .and_then(|s| u16::try_from(s.code).ok())
        .filter(|c| (100..=599).contains(c))
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::FORBIDDEN);
    let mut headers = HeaderMap::new();
    for option in &d.headers {
        if let Some(m) = mutation(option)? {
            match m {
                Mutation::Append(n, v) => {
                    headers.append(n, v);
                }
                Mutation::Set(n, v)
                | Mutation::AddIfAbsent(n, v)
                | Mutation::OverwriteIfExists(n, v) => {
                    headers.insert(n, v);
                }
                Mutation::Remove(_) => {}
            }
        }
    }
    Ok(Denial {
        status,
        headers,
        body: Bytes::from(d.body),
    })
}

/// One `HeaderValueOption` as a mutation (`None`: a framing header, ignored). In an
/// OkHttpResponse `append` defaults to false (Envoy's docs): set, unless `append: true` or an
/// `append_action` says otherwise.
fn mutation(o: &HeaderValueOption) -> Result<Option<Mutation>, Failure> {
    let Some(h) = &o.header else {
        return Err(Failure::Garbage);
    };
    let name = HeaderName::from_bytes(h.key.as_bytes()).map_err(|_| Failure::Garbage)?;
    if is_framing(&name) {
        return Ok(None);
    }
    let raw = if h.raw_value.is_empty() {
        h.value.as_bytes()
    } else {
        &h.raw_value
    };
    let value = HeaderValue::from_bytes(raw).map_err(|_| Failure::Garbage)?;
    Ok(Some(
        match (o.append.as_ref().map(|b| b.value), o.append_action) {
            (Some(true), _) => Mutation::Append(name, value),
            (Some(false), _) | (None, 0 | 2) => Mutation::Set(name, value),
            (None, 1) => Mutation::AddIfAbsent(name, value),
            (None, 3) => Mutation::OverwriteIfExists(name, value),
            (None, _) => return Err(Failure::Garbage),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::super::proto::{HeaderValue as PHeader, HttpStatus, OkHttpResponse, RpcStatus};
    use super::*;

    fn framed(r: &CheckResponse) -> Vec<u8> {
        let m = r.encode_to_vec();
        let mut out = vec![0];
        out.extend_from_slice(&u32::try_from(m.len()).unwrap().to_be_bytes());
        out.extend_from_slice(&m);
        out
    }

    fn ok_status() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("grpc-status", HeaderValue::from_static("0"));
        h
    }

    fn option(k: &str, v: &str, action: i32) -> HeaderValueOption {
        HeaderValueOption {
            header: Some(PHeader {
                key: k.into(),
                value: v.into(),
                raw_value: vec![],
            }),
            append: None,
            append_action: action,
        }
    }

    #[test]
    fn ok_allows_with_its_header_mutations() {
        let r = CheckResponse {
            status: Some(RpcStatus {
                code: 0,
                message: String::new(),
            }),
            ok_response: Some(OkHttpResponse {
                headers: vec![
                    option("x-user", "alice", 0),
                    option("x-if-absent", "1", 1),
                    option("content-length", "9", 0),
                ],
                headers_to_remove: vec!["x-secret".into()],
            }),
            ..Default::default()
        };
        let v = verdict(&HeaderMap::new(), Some(&ok_status()), &framed(&r)).unwrap();
        let Verdict::Allow(m) = v else {
            panic!("OK allows")
        };
        let mut headers = HeaderMap::new();
        headers.insert("x-user", HeaderValue::from_static("mallory"));
        headers.insert("x-if-absent", HeaderValue::from_static("0"));
        headers.insert("x-secret", HeaderValue::from_static("s"));
        super::super::apply(&m, &mut headers);
        assert_eq!(
            headers["x-user"], "alice",
            "set replaces the client's value"
        );
        assert_eq!(headers["x-if-absent"], "0");
        assert!(!headers.contains_key("x-secret"));
        assert!(
            !headers.contains_key("content-length"),
            "framing is never set"
        );
    }

    #[test]
    fn a_denial_is_its_status_headers_and_body_403_when_unset() {
        let mut r = CheckResponse {
            status: Some(RpcStatus {
                code: 7,
                message: String::new(),
            }),
            denied_response: Some(DeniedHttpResponse {
                status: Some(HttpStatus { code: 401 }),
                headers: vec![option("www-authenticate", "Bearer", 0)],
                body: "who?".into(),
            }),
            ..Default::default()
        };
        let Ok(Verdict::Deny(d)) = verdict(&ok_status(), None, &framed(&r)) else {
            panic!("denied")
        };
        assert_eq!(d.status, StatusCode::UNAUTHORIZED);
        assert_eq!(d.headers["www-authenticate"], "Bearer");
        assert_eq!(d.body, "who?");
        r.denied_response = None;
        let Ok(Verdict::Deny(d)) = verdict(&ok_status(), None, &framed(&r)) else {
            panic!("denied")
        };
        assert_eq!(d.status, StatusCode::FORBIDDEN);
    }

    #[test]
    fn grpc_errors_and_bad_frames_are_garbage() {
        let r = CheckResponse::default();
        let mut unavailable = HeaderMap::new();
        unavailable.insert("grpc-status", HeaderValue::from_static("14"));
        assert_eq!(
            verdict(&unavailable, None, &[]).unwrap_err(),
            Failure::Garbage
        );
        assert!(
            verdict(&HeaderMap::new(), None, &framed(&r)).is_err(),
            "no status"
        );
        let mut compressed = framed(&r);
        compressed[0] = 1;
        assert!(verdict(&ok_status(), None, &compressed).is_err());
        let mut long = framed(&r);
        long.push(0);
        assert!(verdict(&ok_status(), None, &long).is_err(), "two messages");
        assert!(
            verdict(&ok_status(), None, &[0, 0, 0, 0, 2, 0xff, 0xff]).is_err(),
            "not a CheckResponse"
        );
    }

    proptest::proptest! {
        // The authorizer's answer is untrusted bytes: any of them is a verdict or Garbage,
        // never a panic, raw or framed (PROPTEST_CASES=1000000 for the 10⁶).
        #[test]
        fn any_answer_bytes_are_a_verdict_or_garbage(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..160)
        ) {
            let _ = verdict(&ok_status(), None, &body);
            let mut framed = vec![0];
            framed.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes());
            framed.extend_from_slice(&body);
            let _ = verdict(&ok_status(), None, &framed);
        }
    }
}
