//! Where [`Resources`](crate::translate::Resources) come from: a directory of manifests
//! (`files`), later a cluster. A source only reads; it hands whole `Resources` to the
//! publisher and never translates.

pub mod files;
