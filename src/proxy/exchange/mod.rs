//! The exchange stage: what happens between a routed request and its upstream connection.
//! [`Shared`] (what every connection and request reads) and admission; [`send`]: the endpoint
//! pick, one attempt within its timeout and passive outlier detection on its outcome;
//! [`retry`] (attempts, budgets), [`mirror`] (copies, fire and forget) and [`session`]
//! (session persistence). Below `downstream` and `phase`; calls `upstream` and `observe`.

pub mod ext_auth;
pub mod mirror;
pub mod rate_limit;
pub mod retry;
pub mod send;
pub mod session;
mod shared;
pub mod unary;

pub use shared::Shared;
