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
//!
//! [`check`] (`pier check --kubeconfig`) is the one other module that talks to the API server:
//! it lists through [`source::kube`], decides through [`translate`], and adds only read-only
//! calls of its own (discovery, `/version`, self-reviews of identity and RBAC).
//!
//! pier's own client certificate for backend (mesh) mTLS, by precedence:
//!
//! 1. a Gateway's `spec.tls.backend.clientCertificateRef` (GEP-3155), for that Gateway;
//! 2. else the process-wide identity, one of (the CLI refuses both):
//!    - `--client-cert`/`--client-key` files, watched and reloaded (`run::CertWatch`);
//!    - `--spiffe-socket` (or `SPIFFE_ENDPOINT_SOCKET` when `--client-cert` is not given): the
//!      default X.509-SVID from the SPIFFE Workload API, streamed and rotated
//!      ([`source::spiffe`], [`translate::spiffe`]), which also serves mesh `trustBundle`
//!      references of kind `pier.dev/SPIFFEWorkloadAPI`.
//!
//! The Gateway's `pier.dev/BackendTLS` condition says which one is in use (for an SVID: its
//! SPIFFE ID), or why none is usable; without one, meshed routes fail closed (503).
#![forbid(unsafe_code)]

pub mod admin;
pub mod auth;
pub mod check;
pub mod cli;
pub mod commands;
pub mod crds;
pub mod demo;
pub mod echo;
pub mod log_limit;
pub mod metrics;
pub mod model;
pub mod process;
pub mod proxy;
pub mod publish;
pub mod ratelimit;
pub mod run;
pub mod source;
pub mod start;
pub mod status_writer;
pub mod tls;
pub mod translate;

/// The default `spec.controllerName` pier serves.
pub const DEFAULT_CONTROLLER_NAME: &str = "pier.dev/gateway-controller";
