//! TLS for the data plane. `server` terminates client TLS on HTTPS ports with certificates
//! from the snapshot; `client` builds the upstream configs (mesh mTLS, BackendTLSPolicy) that
//! translation puts into the snapshot and the connector uses.

pub mod client;
pub mod pem;
pub mod provider;
pub mod server;
