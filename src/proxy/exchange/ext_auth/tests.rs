//! Property tests of the parsers that read an authorizer's answer (untrusted bytes): whatever
//! arrives, they return a verdict or a failure, never panic, and never let framing headers
//! through. `PROPTEST_CASES=1000000` runs them at 10⁶ cases: done on 2026-11-29 (debug build,
//! two cores shared with other builds), all passing; the HTTP one took 327 s, the two gRPC ones
//! under 15 min together.

use ::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use bytes::Bytes;
use proptest::prelude::*;

use super::{Verdict, apply, grpc, http, is_framing};
use crate::model::ext_auth::{AllowStatus, HeaderSelection};

fn grpc_ok() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("grpc-status", HeaderValue::from_static("0"));
    h
}

/// A frame header for `message`, so the decoder (not the framing check) sees the bytes.
fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    out.extend_from_slice(message);
    out
}

fn no_framing(v: &Verdict) -> bool {
    match v {
        Verdict::Allow(m) => m.iter().all(|m| {
            let (super::Mutation::Set(n, _)
            | super::Mutation::Append(n, _)
            | super::Mutation::AddIfAbsent(n, _)
            | super::Mutation::OverwriteIfExists(n, _)
            | super::Mutation::Remove(n)) = m;
            !is_framing(n)
        }),
        Verdict::Deny(d) => d.headers.keys().all(|n| !is_framing(n)),
    }
}

proptest! {
    #[test]
    fn grpc_answers_of_arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(v) = grpc::verdict(&grpc_ok(), None, &body) {
            prop_assert!(no_framing(&v));
        }
    }

    #[test]
    fn grpc_messages_of_arbitrary_bytes_never_panic(message in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(v) = grpc::verdict(&grpc_ok(), None, &framed(&message)) {
            prop_assert!(no_framing(&v));
            let mut headers = HeaderMap::new();
            if let Verdict::Allow(m) = &v {
                apply(m, &mut headers);
            }
        }
    }

    #[test]
    fn http_answers_allow_only_on_their_allowing_statuses(
        code in 100u16..600,
        any_2xx in any::<bool>(),
        names in proptest::collection::vec("[a-z-]{1,12}", 0..6),
        body in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let status = StatusCode::from_u16(code).unwrap();
        let mut headers = HeaderMap::new();
        for n in &names {
            headers.append(HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_static("v"));
        }
        let allow = if any_2xx { AllowStatus::Any2xx } else { AllowStatus::Only200 };
        let v = http::verdict(status, &headers, Bytes::from(body.clone()), (allow, &HeaderSelection::All));
        prop_assert!(no_framing(&v));
        match v {
            Verdict::Allow(_) => prop_assert!(allow.allows(status)),
            Verdict::Deny(d) => {
                prop_assert!(!allow.allows(status));
                prop_assert_eq!(d.status, status);
                prop_assert_eq!(&d.body[..], &body[..]);
            }
        }
    }
}
