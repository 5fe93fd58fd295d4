//! End-to-end tests of the data plane over loopback: the real `Proxy`, `pier::echo` backends,
//! and hyper clients that never follow redirects. Snapshots are built in code
//! (`support::snap`), not translated.

#[path = "../support/mod.rs"]
mod support;

mod bodies;
mod cors;
mod errors;
mod fast_path;
mod filters;
mod forwarded;
mod hostile;
mod lifecycle;
mod observability;
mod parked;
mod phases;
mod protocols;
mod retry;
mod routing;
mod tls;
mod upstream;
mod upstream_tls;
