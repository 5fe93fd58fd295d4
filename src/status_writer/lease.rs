//! Leader election for the status writer: a `coordination.k8s.io/v1` Lease, held through
//! kube-lease-manager (server-side apply on the Lease, so two replicas cannot both take it).
//! Every replica serves traffic; only the holder writes status.
//!
//! The manager needs the API server to start (it reads or creates the Lease), so starting is
//! retried with backoff. On shutdown the Lease is released, so another replica takes over
//! without waiting for it to expire.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

use crate::source::kube::Reconnect;

/// How long the holder may go without renewing before another replica may take the Lease.
pub const DEFAULT_DURATION_SECS: u64 = 15;
/// The holder renews this long before the Lease expires.
pub const DEFAULT_GRACE_SECS: u64 = 5;
/// Bound for releasing the Lease on shutdown.
const RELEASE_BOUND: Duration = Duration::from_secs(3);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseOptions {
    pub namespace: String,
    pub name: String,
    /// This replica's `holderIdentity`; unique per replica.
    pub identity: String,
    pub duration_secs: u64,
    pub grace_secs: u64,
}

/// The default Lease name for a controller name: one Lease per `--controller-name`, so two
/// pier deployments for different classes each have a writer. Lowercase alphanumerics, `-`
/// and `.` (a DNS subdomain), e.g. `pier.dev-gateway-controller`.
pub fn default_name(controller_name: &str) -> String {
    let name: String = controller_name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.' | '-') => c,
            _ => '-',
        })
        .collect();
    let name = name.trim_matches(|c| c == '-' || c == '.');
    if name.is_empty() {
        "pier".to_string()
    } else {
        name.chars().take(253).collect()
    }
}

/// Runs until `shutdown` turns true, keeping `leader` equal to "this replica holds the Lease".
pub async fn run(
    client: Client,
    opts: LeaseOptions,
    leader: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Reconnect::new(Duration::from_secs(1), Duration::from_secs(10));
    let mut failures = 0u32;
    loop {
        let built = LeaseManagerBuilder::new(client.clone(), &opts.name)
            .with_namespace(&opts.namespace)
            .with_identity(&opts.identity)
            .with_duration(opts.duration_secs)
            .with_grace(opts.grace_secs)
            .build()
            .await;
        let manager = match built {
            Ok(m) => m,
            Err(e) => {
                // Once, then every ~minute while it keeps failing.
                if failures.is_multiple_of(10) {
                    tracing::warn!(
                        lease = %opts.name,
                        namespace = %opts.namespace,
                        error = %crate::source::kube::reach::describe(&e),
                        "cannot use the status-writer Lease; retrying (status is not written meanwhile)"
                    );
                }
                failures += 1;
                let pause = backoff.next().unwrap_or(Duration::from_secs(10));
                tokio::select! {
                    () = tokio::time::sleep(pause) => continue,
                    () = stopped(&mut shutdown) => return,
                }
            }
        };
        failures = 0;
        tracing::info!(lease = %opts.name, namespace = %opts.namespace, identity = %opts.identity, "joined leader election for the status writer");
        let (mut held, task) = manager.watch().await;
        loop {
            tokio::select! {
                r = held.changed() => {
                    if r.is_err() {
                        // The manager's task ended (it logs why); start over.
                        leader.send_replace(false);
                        break;
                    }
                    let is_leader = *held.borrow_and_update();
                    if leader.send_replace(is_leader) != is_leader {
                        tracing::info!(identity = %opts.identity, is_leader, "status-writer Lease changed hands");
                    }
                }
                () = stopped(&mut shutdown) => {
                    // Dropping the receiver makes the manager release the Lease and return.
                    drop(held);
                    leader.send_replace(false);
                    let _ = tokio::time::timeout(RELEASE_BOUND, task).await;
                    return;
                }
            }
        }
        let _ = task.await;
    }
}

/// Resolves once `shutdown` is (or was) set, or its sender is gone.
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}
