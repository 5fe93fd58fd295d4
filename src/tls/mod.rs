//! TLS for the data plane. `server` terminates client TLS on HTTPS ports with certificates
//! from the snapshot; the upstream (mesh mTLS) client side will live next to it.

pub mod server;
