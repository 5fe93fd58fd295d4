//! Where [`Resources`](crate::translate::Resources) come from: a directory of manifests
//! (`files`) or a cluster (`kube`: watches through a kubeconfig). A source only reads; it hands
//! whole `Resources` to the publisher and never translates. `spiffe` is the one source of
//! settings rather than objects: pier's X.509-SVID and bundles from the SPIFFE Workload API.
//! `jwks` fetches what the objects point at: the `remoteJWKS` key sets, over HTTPS.

pub mod files;
pub mod jwks;
pub mod kube;
pub mod spiffe;
