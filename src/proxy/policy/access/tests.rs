//! Access checks on what the request path derived: credentials found where the policy says,
//! API keys compared by digest, edits for the upstream request, the right error.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Method};

use super::*;
use crate::model::policy::AccessPolicy;

fn api_key_policy(sanitize: bool) -> AccessPolicy {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, b"s3cret");
    let mut keys = HashMap::new();
    keys.insert(
        <[u8; 32]>::try_from(digest.as_ref()).unwrap(),
        "alice".to_string(),
    );
    AccessPolicy {
        source: "ns/keys".into(),
        invalid: None,
        jwt: None,
        basic: None,
        oidc: None,
        api_key: Some(ApiKeyAuthn {
            keys: Arc::new(keys),
            extract_from: vec![
                CredentialSource::Header {
                    name: HeaderName::from_static("x-api-key"),
                    prefix: None,
                },
                CredentialSource::Param("key".into()),
                CredentialSource::Cookie("key".into()),
            ],
            forward_client_id_header: Some(HeaderName::from_static("x-client")),
            sanitize,
        }),
        authorization: None,
        ext_auth: None,
    }
}

fn run(
    policy: &AccessPolicy,
    headers: &[(&'static str, &'static str)],
    query: Option<&str>,
) -> Result<Admitted, ProxyError> {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        map.append(*k, HeaderValue::from_static(v));
    }
    check(
        policy,
        &AccessRequest {
            client: "192.0.2.1".parse().unwrap(),
            client_sans: &[],
            method: &Method::GET,
            headers: &map,
            query,
            authenticated: None,
            basic: None,
        },
    )
}

#[test]
fn an_api_key_is_found_in_a_header_a_parameter_or_a_cookie() {
    let p = api_key_policy(false);
    for (headers, query) in [
        (&[("x-api-key", "s3cret")][..], None),
        (&[][..], Some("a=1&key=s3cret")),
        (&[("cookie", "theme=dark; key=s3cret")][..], None),
    ] {
        let a = run(&p, headers, query).unwrap_or_else(|e| panic!("{headers:?} {query:?}: {e}"));
        assert_eq!(a.authenticated.principal.as_deref(), Some("apikey:alice"));
        assert!(matches!(&a.edits[..], [Edit::Set(h, v)] if h == "x-client" && v == "alice"));
    }
}

#[test]
fn a_missing_or_wrong_key_is_401_with_a_challenge() {
    let p = api_key_policy(false);
    for (headers, query) in [
        (&[][..], None),
        (&[("x-api-key", "wrong")][..], None),
        (&[("x-api-key", "")][..], Some("key=")),
        (&[("cookie", "keyx=s3cret")][..], None),
    ] {
        let e = run(&p, headers, query).unwrap_err();
        assert!(
            matches!(e, ProxyError::Unauthenticated(Challenge::ApiKey)),
            "{headers:?} {query:?}: {e:?}"
        );
        let resp = e.to_response();
        assert_eq!(resp.status(), 401);
        assert!(resp.headers().contains_key(header::WWW_AUTHENTICATE));
    }
}

#[test]
fn sanitize_removes_the_key_header() {
    let p = api_key_policy(true);
    let a = run(&p, &[("x-api-key", "s3cret")], None).unwrap();
    assert!(
        a.edits
            .iter()
            .any(|e| matches!(e, Edit::Remove(h) if h == "x-api-key"))
    );
}

#[test]
fn an_invalid_policy_is_500_whatever_the_request() {
    let mut p = api_key_policy(false);
    p.invalid = Some("broken".into());
    let e = run(&p, &[("x-api-key", "s3cret")], None).unwrap_err();
    assert_eq!(e.status(), 500);
}

#[test]
fn a_bearer_prefix_is_matched_without_case_and_removed() {
    let source = CredentialSource::Header {
        name: header::AUTHORIZATION,
        prefix: Some("Bearer ".into()),
    };
    let mut map = HeaderMap::new();
    map.insert(
        header::AUTHORIZATION,
        HeaderValue::from_static("bearer abc.def"),
    );
    let req = AccessRequest {
        client: "192.0.2.1".parse().unwrap(),
        client_sans: &[],
        method: &Method::GET,
        headers: &map,
        query: None,
        authenticated: None,
        basic: None,
    };
    assert_eq!(credential(&source, &req), Some(&b"abc.def"[..]));
    let mut basic = HeaderMap::new();
    basic.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
    let req = AccessRequest {
        headers: &basic,
        ..req
    };
    assert_eq!(credential(&source, &req), None);
}
