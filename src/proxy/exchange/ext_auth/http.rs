//! HTTP mode: the client's request, as the authorizer sees it, and what its answer means.
//! Envoy's `http_service` and GEP-1494's HTTP protocol agree: the method, the path prefixed
//! by `path`, `Host`, `Authorization`, a `Content-Length` that is the length actually sent,
//! the selected headers and (when asked for) the body; any other answer than an allowing one
//! is what the client gets. Which statuses allow ([`AllowStatus`]): any 2xx for a
//! SecurityPolicy (as nginx's `auth_request`: oauth2-proxy's `/oauth2/auth` answers 202), 200
//! for the ExternalAuth filter (GEP-1494 says so).

use ::http::header::{self, HeaderName};
use ::http::uri::PathAndQuery;
use ::http::{HeaderMap, HeaderValue, Request, StatusCode};
use bytes::Bytes;

use super::{Asked, Denial, Mutation, Verdict, is_framing};
use crate::model::ext_auth::{AllowStatus, ExtAuth, HeaderSelection};
use crate::proxy::body::{self, ProxyBody};

/// The check request for `asked`.
pub fn request(
    ext: &ExtAuth,
    path_prefix: &str,
    asked: &Asked<'_>,
) -> Result<Request<ProxyBody>, ::http::Error> {
    let pq = asked.uri.path_and_query().map_or("/", PathAndQuery::as_str);
    let path = PathAndQuery::try_from(format!("{path_prefix}{pq}"))?;
    let body = asked.body.map(Bytes::copy_from_slice).unwrap_or_default();
    let mut req = Request::new(body::full(body.clone()));
    *req.method_mut() = asked.method.clone();
    *req.uri_mut() = path.into();
    let headers = req.headers_mut();
    for (name, value) in asked.headers {
        if !is_framing(name)
            && (*name == header::AUTHORIZATION || ext.headers_to_ext_auth.contains(name))
        {
            headers.append(name.clone(), value.clone());
        }
    }
    headers.insert(header::HOST, HeaderValue::from_str(asked.host)?);
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    Ok(req)
}

/// What an answer comes to: a status `allow` allows lets the request through, with the
/// `to_backend` headers of the answer set on the upstream request; anything else is the
/// client's answer (framing headers dropped).
pub fn verdict(
    status: StatusCode,
    headers: &HeaderMap,
    body: Bytes,
    (allow, to_backend): (AllowStatus, &HeaderSelection),
) -> Verdict {
    if allow.allows(status) {
        let mut mutations = Vec::new();
        for name in headers.keys() {
            if is_framing(name) || !to_backend.contains(name) || describes_answer(name) {
                continue;
            }
            let mut values = headers.get_all(name).iter();
            if let Some(first) = values.next() {
                mutations.push(Mutation::Set(name.clone(), first.clone()));
            }
            mutations.extend(values.map(|v| Mutation::Append(name.clone(), v.clone())));
        }
        return Verdict::Allow(mutations);
    }
    let mut kept = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if !is_framing(name) {
            kept.append(name.clone(), value.clone());
        }
    }
    Verdict::Deny(Denial {
        status,
        headers: kept,
        body,
    })
}

/// Headers that describe the authorizer's answer itself, never copied onto the request when
/// every header is (GEP-1494's empty `allowedResponseHeaders`): named, they are copied.
fn describes_answer(name: &HeaderName) -> bool {
    matches!(
        *name,
        header::DATE | header::SERVER | header::CONTENT_TYPE | header::CONTENT_ENCODING
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn ok_copies_only_the_named_headers_onto_the_request() {
        let answer = map(&[("x-user", "alice"), ("x-other", "1"), ("date", "now")]);
        let only = HeaderSelection::Only(vec![HeaderName::from_static("x-user")]);
        let Verdict::Allow(m) = verdict(
            StatusCode::OK,
            &answer,
            Bytes::new(),
            (AllowStatus::Only200, &only),
        ) else {
            panic!("200 allows");
        };
        assert_eq!(
            m,
            [Mutation::Set(
                HeaderName::from_static("x-user"),
                HeaderValue::from_static("alice")
            )]
        );
        let Verdict::Allow(all) = verdict(
            StatusCode::OK,
            &answer,
            Bytes::new(),
            (AllowStatus::Only200, &HeaderSelection::All),
        ) else {
            panic!("200 allows");
        };
        assert_eq!(all.len(), 2, "every header but the answer's own: {all:?}");
    }

    #[test]
    fn a_policy_allows_any_2xx_the_filter_200_only() {
        let all = &HeaderSelection::All;
        let accepted = StatusCode::ACCEPTED;
        let policy = verdict(
            accepted,
            &HeaderMap::new(),
            Bytes::new(),
            (AllowStatus::Any2xx, all),
        );
        assert!(matches!(policy, Verdict::Allow(_)), "oauth2-proxy's 202");
        let filter = verdict(
            accepted,
            &HeaderMap::new(),
            Bytes::new(),
            (AllowStatus::Only200, all),
        );
        assert!(matches!(filter, Verdict::Deny(_)));
    }

    #[test]
    fn any_other_status_is_the_clients_answer() {
        for status in [
            StatusCode::NO_CONTENT,
            StatusCode::FOUND,
            StatusCode::UNAUTHORIZED,
        ] {
            let answer = map(&[("location", "/login"), ("transfer-encoding", "chunked")]);
            let all = (AllowStatus::Only200, &HeaderSelection::All);
            let Verdict::Deny(d) = verdict(status, &answer, Bytes::from("no"), all) else {
                panic!("{status} denies");
            };
            assert_eq!(d.status, status);
            assert_eq!(d.body, "no");
            assert!(d.headers.contains_key("location"));
            assert!(!d.headers.contains_key("transfer-encoding"));
        }
    }
}
