use ::http::HeaderValue;
use proptest::prelude::*;

use super::*;

fn grpc_ok() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("grpc-status", HeaderValue::from_static("0"));
    h
}

fn framed(message: &[u8]) -> Vec<u8> {
    let mut b = vec![0];
    b.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    b.extend_from_slice(message);
    b
}

#[test]
fn the_request_has_the_field_numbers_of_rls_proto() {
    let r = RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "k".into(),
                value: "v".into(),
            }],
        }],
        hits_addend: 0,
    };
    // domain (1), descriptors (2) { entries (1) { key (1), value (2) } }, encoded by hand.
    let want = [
        0x0a, 0x01, b'd', 0x12, 0x08, 0x0a, 0x06, 0x0a, 0x01, b'k', 0x12, 0x01, b'v',
    ];
    assert_eq!(r.encode_to_vec(), want);
}

#[test]
fn over_limit_reports_the_limit_and_the_reset_of_the_descriptor_over_it() {
    // overall_code (1) = OVER_LIMIT; statuses (2) { code (1) = 2, current_limit (2)
    // { requests_per_unit (1) = 5, unit (2) = MINUTE }, duration_until_reset (4) { seconds = 30 } }
    let message = [
        0x08, 0x02, 0x12, 0x0c, 0x08, 0x02, 0x12, 0x04, 0x08, 0x05, 0x10, 0x02, 0x22, 0x02, 0x08,
        0x1e,
    ];
    let a = answer(&grpc_ok(), None, &framed(&message)).unwrap();
    assert_eq!(
        a,
        Answer::OverLimit {
            limit: Limit {
                requests: 5,
                period: Duration::from_secs(60)
            },
            reset: Duration::from_secs(30),
        }
    );
    assert_eq!(
        answer(&grpc_ok(), None, &framed(&[0x08, 0x01])).unwrap(),
        Answer::Ok
    );
}

#[test]
fn errors_unknown_codes_and_bad_frames_are_no_answer() {
    let mut unavailable = HeaderMap::new();
    unavailable.insert("grpc-status", HeaderValue::from_static("14"));
    assert_eq!(
        answer(&unavailable, None, &framed(&[0x08, 0x01])),
        Err(NoAnswer::Garbage)
    );
    // UNKNOWN (0): neither allowed nor refused.
    assert_eq!(
        answer(&grpc_ok(), None, &framed(&[])),
        Err(NoAnswer::Garbage)
    );
    // A length that does not fit, a compressed frame.
    assert_eq!(
        answer(&grpc_ok(), None, &[0, 0, 0, 0, 9, 0x08, 0x01]),
        Err(NoAnswer::Garbage)
    );
    assert_eq!(
        answer(&grpc_ok(), None, &[1, 0, 0, 0, 2, 0x08, 0x01]),
        Err(NoAnswer::Garbage)
    );
    // The trailers' status wins over the headers'.
    assert_eq!(
        answer(&HeaderMap::new(), Some(&grpc_ok()), &framed(&[0x08, 0x01])),
        Ok(Answer::Ok)
    );
}

proptest! {
    // The service's answer is untrusted bytes: any of them is an answer or NoAnswer, never a
    // panic (PROPTEST_CASES=1000000 for the 10⁶).
    #[test]
    fn any_answer_bytes_are_handled(body in proptest::collection::vec(any::<u8>(), 0..96)) {
        let _ = answer(&grpc_ok(), None, &body);
        let _ = answer(&grpc_ok(), None, &framed(&body));
    }
}
