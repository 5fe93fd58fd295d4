//! Global rate limits: one `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` call
//! per request (every descriptor of the rule's global limits in it), over pier's own upstream
//! pool (h2c), within the service's timeout.
//!
//! ```text
//! ask ─> pick_endpoint ─> POST /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
//!     <─ Answer::Ok | Answer::OverLimit(what the 429 says)
//!     <─ NoAnswer (no endpoint, unreachable, timed out, a gRPC error, garbage): the caller
//!        lets the request through, or refuses it under `failClosed`
//! ```
//!
//! The messages are declared here with prost's derive (only the fields pier uses), field
//! numbers from envoyproxy/data-plane-api `envoy/service/ratelimit/v3/rls.proto` and
//! `envoy/extensions/common/ratelimit/v3/ratelimit.proto`; `tests` pins them against bytes
//! encoded by hand.

use std::time::Duration;

use ::http::{HeaderMap, Request};
use prost::Message;

use super::Shared;
use super::send::{outcome, pick_endpoint};
use crate::model::traffic::{Descriptor, RateLimitService};
use crate::proxy::body;
use crate::ratelimit::Limit;

/// The method's path.
pub const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Most bytes of an answer pier reads.
const MAX_ANSWER: usize = 64 * 1024;

/// `envoy.service.ratelimit.v3.RateLimitRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitRequest {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(message, repeated, tag = "2")]
    pub descriptors: Vec<RateLimitDescriptor>,
    #[prost(uint32, tag = "3")]
    pub hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitDescriptor {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<Entry>,
}

/// `RateLimitDescriptor.Entry`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Entry {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `envoy.service.ratelimit.v3.RateLimitResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimitResponse {
    /// `Code`: 0 UNKNOWN, 1 OK, 2 OVER_LIMIT.
    #[prost(int32, tag = "1")]
    pub overall_code: i32,
    #[prost(message, repeated, tag = "2")]
    pub statuses: Vec<DescriptorStatus>,
}

/// `RateLimitResponse.DescriptorStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DescriptorStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(message, optional, tag = "2")]
    pub current_limit: Option<RateLimit>,
    #[prost(uint32, tag = "3")]
    pub limit_remaining: u32,
    #[prost(message, optional, tag = "4")]
    pub duration_until_reset: Option<ProtoDuration>,
}

/// `RateLimitResponse.RateLimit`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RateLimit {
    #[prost(uint32, tag = "1")]
    pub requests_per_unit: u32,
    /// `Unit`: 0 UNKNOWN, 1 SECOND, 2 MINUTE, 3 HOUR, 4 DAY, 5 MONTH, 6 YEAR, 7 WEEK.
    #[prost(int32, tag = "2")]
    pub unit: i32,
    #[prost(string, tag = "3")]
    pub name: String,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ProtoDuration {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

const OK: i32 = 1;
const OVER_LIMIT: i32 = 2;

/// What the service said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Ok,
    /// Over a limit: the first descriptor over its limit, as the 429 reports it.
    OverLimit {
        limit: Limit,
        reset: Duration,
    },
}

/// Why there is no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoAnswer {
    /// No endpoint, or it cannot be reached.
    Unreachable,
    Timeout,
    /// A gRPC error status, or bytes that are not a RateLimitResponse.
    Garbage,
}

impl NoAnswer {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unreachable => "unreachable",
            Self::Timeout => "timeout",
            Self::Garbage => "error",
        }
    }
}

/// The call for `descriptors` in the service's domain.
pub fn request(
    service: &RateLimitService,
    descriptors: Vec<Descriptor>,
) -> Result<Request<body::ProxyBody>, ::http::Error> {
    let message = RateLimitRequest {
        domain: service.domain.clone(),
        descriptors: descriptors
            .into_iter()
            .map(|d| RateLimitDescriptor {
                entries: (d.into_iter())
                    .map(|(key, value)| Entry { key, value })
                    .collect(),
            })
            .collect(),
        hits_addend: 0,
    }
    .encode_to_vec();
    super::unary::request(PATH, &service.authority, &message)
}

/// Asks `service` about `descriptors` (not empty).
pub async fn ask(
    shared: &Shared,
    service: &RateLimitService,
    descriptors: Vec<Descriptor>,
) -> Result<Answer, NoAnswer> {
    use crate::proxy::upstream::Target;
    use http_body_util::BodyExt;
    let backend = &*service.backend;
    let endpoint = pick_endpoint(shared, backend).map_err(|_| NoAnswer::Unreachable)?;
    let req = request(service, descriptors).map_err(|_| NoAnswer::Garbage)?;
    let target = Target {
        backend,
        endpoint,
        upgrade: false,
    };
    let exchange = async {
        let sent = shared.upstream.send(target, req).await;
        outcome(shared, backend, endpoint, sent.as_ref().map(|r| r.status()));
        let resp = sent.map_err(|_| NoAnswer::Unreachable)?;
        let (head, body) = resp.into_parts();
        let collected = http_body_util::Limited::new(body, MAX_ANSWER)
            .collect()
            .await
            .map_err(|_| NoAnswer::Garbage)?;
        let trailers = collected.trailers().cloned();
        Ok((head.headers, collected.to_bytes(), trailers))
    };
    let (headers, body, trailers) = tokio::time::timeout(service.timeout, exchange)
        .await
        .map_err(|_| NoAnswer::Timeout)??;
    answer(&headers, trailers.as_ref(), &body)
}

/// What an answer's bytes come to: `headers` (or `trailers`) carry `grpc-status`, `body` the
/// length-prefixed message.
pub fn answer(
    headers: &HeaderMap,
    trailers: Option<&HeaderMap>,
    body: &[u8],
) -> Result<Answer, NoAnswer> {
    let message = super::unary::message(headers, trailers, body).ok_or(NoAnswer::Garbage)?;
    let r = RateLimitResponse::decode(message).map_err(|_| NoAnswer::Garbage)?;
    match r.overall_code {
        OK => Ok(Answer::Ok),
        OVER_LIMIT => {
            let over = r.statuses.iter().find(|s| s.code == OVER_LIMIT);
            let limit = over.and_then(|s| s.current_limit.as_ref());
            let period = limit.and_then(|l| unit(l.unit));
            let reset = over.and_then(|s| s.duration_until_reset.as_ref()).map(|d| {
                let secs = u64::try_from(d.seconds).unwrap_or(0);
                let nanos = u32::try_from(d.nanos).unwrap_or(0).min(999_999_999);
                Duration::new(secs, nanos)
            });
            Ok(Answer::OverLimit {
                limit: Limit {
                    requests: limit.map_or(0, |l| u64::from(l.requests_per_unit)),
                    period: period.unwrap_or(Duration::ZERO),
                },
                reset: reset.or(period).unwrap_or(Duration::from_secs(1)),
            })
        }
        _ => Err(NoAnswer::Garbage),
    }
}

fn unit(u: i32) -> Option<Duration> {
    let day = 86_400;
    Some(Duration::from_secs(match u {
        1 => 1,
        2 => 60,
        3 => 3600,
        4 => day,
        5 => 30 * day,
        6 => 365 * day,
        7 => 7 * day,
        _ => return None,
    }))
}

#[cfg(test)]
mod tests;
