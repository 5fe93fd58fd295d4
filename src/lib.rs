//! pier: an out-of-cluster Gateway API gateway.
//!
//! ```text
//! kube watchers ─┐                     ┌─> ArcSwap<Snapshot> ─> proxy/, tls/ (read only)
//! file watcher ──┴─> Resources ─> translate() ─> Translation { snapshot, statuses }
//!                                      └─> /status, `pier check`, status_writer (cluster)
//! ```
//!
//! Configuration flows one way. `model` and `translate` are pure: no I/O, no kube client,
//! tokio or hyper.
#![forbid(unsafe_code)]

pub mod admin;
pub mod cli;
pub mod commands;
pub mod crds;
pub mod demo;
pub mod echo;
pub mod log_limit;
pub mod metrics;
pub mod model;
pub mod proxy;
pub mod publish;
pub mod run;
pub mod source;
pub mod status_writer;
pub mod tls;
pub mod translate;

/// The default `spec.controllerName` pier serves.
pub const DEFAULT_CONTROLLER_NAME: &str = "pier.dev/gateway-controller";
