//! The observe stage, a leaf every stage may call and that calls no stage: the request record
//! ([`record::Seen`]), the request's forwarding identity ([`forwarded::Edge`]: client,
//! request ID, trace context), the metrics and their label enums, the access log and span
//! export.

pub mod access;
pub mod forwarded;
pub mod metrics;
pub mod record;
pub mod trace;
