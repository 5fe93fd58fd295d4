//! The downstream stage: the request paths. [`h1`] is the HTTP/1.1 fast path (its own parser
//! and writer, pooled raw upstream sockets); [`service`] is hyper's (HTTP/2, and HTTP/1.1 for
//! what the fast path hands over); [`stream`] relays TLSRoute passthrough streams; [`tunnel`]
//! carries upgraded connections. Both request paths call `phase`'s functions in the same
//! order, so a route's policies and filters cannot differ between them.

pub mod datagram;
pub mod h1;
pub mod h3;
pub mod service;
pub mod stream;
pub mod tunnel;
