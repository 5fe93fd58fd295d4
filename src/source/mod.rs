//! Where [`Resources`](crate::translate::Resources) come from: a directory of manifests
//! (`files`) or a cluster (`kube`: watches through a kubeconfig). A source only reads; it hands
//! whole `Resources` to the publisher and never translates.

pub mod files;
pub mod kube;
