//! Command-line interface. The flags here are a contract: scripts and tests outside the repo
//! depend on their names.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::{ArgGroup, Parser, Subcommand, ValueEnum};

use crate::model::ObjectRef;

#[derive(Debug, Parser)]
#[command(
    name = "pier",
    version,
    about = "An out-of-cluster Gateway API gateway that speaks mesh mTLS to pods",
    after_help = ENVIRONMENT
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The environment variables pier reads, shown after `--help`.
const ENVIRONMENT: &str = "Environment:
  RUST_LOG                log filter (tracing EnvFilter syntax) [default: info], e.g.
                          RUST_LOG=pier=debug or RUST_LOG=info,pier::access=off
  PIER_WORKER_THREADS     data-plane worker threads [default: one per core]; each runs
                          its own runtime and accepts on its own SO_REUSEPORT socket
                          of every port (thread per core); 1: one single-threaded
                          runtime for everything
  PIER_WORK_STEALING      1: the workers share one work-stealing runtime instead
  PIER_IDLE_SPIN_US       microseconds a worker spins before it sleeps for I/O, 0-10000
                          [default: 20 with one worker, 0 with several]
  _RJEM_MALLOC_CONF       jemalloc options; `run` starts one background thread that
                          returns freed memory to the system, unless this names
                          background_thread
  NO_COLOR                any non-empty value: no colour in text logs (logs are coloured
                          only on a terminal)
  SPIFFE_ENDPOINT_SOCKET  the SPIFFE Workload API for `run` when neither --spiffe-socket nor
                          --client-cert is given
  KUBECONFIG              for `run --kubeconfig` without a value";

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the Gateways of a directory of Gateway API manifests (`--manifests`) or of a
    /// cluster (`--kubeconfig`).
    Run(RunArgs),
    /// `--manifests`: load and translate manifests, print the status of every object as YAML.
    /// `--kubeconfig`: check a live cluster from this machine (API server, CRDs, RBAC,
    /// Gateways, pod network reachability, mesh certificates), one line per check.
    Check(CheckArgs),
    /// Start pier on built-in example manifests with built-in echo backends on loopback.
    Demo(DemoArgs),
    /// Run a small echo backend (for trying the examples).
    Echo(EchoArgs),
    /// Mesh helpers.
    #[command(subcommand)]
    Mesh(MeshCommand),
    /// Print the CRDs pier reads, as YAML (`pier crds | kubectl apply -f -`): the Gateway API
    /// ones, then pier's own SecurityPolicy, BackendTrafficPolicy and ClientTrafficPolicy
    /// (`pier.dev/v1alpha1`).
    Crds(CrdsArgs),
}

#[derive(Debug, Subcommand)]
pub enum MeshCommand {
    /// Print the ConfigMap and the Mesh resource (GEP-3951 `spec.ocg.trustBundle`) the mesh needs
    /// to trust pier's client certificate: from `--client-cert`, or from the Secret a Gateway's
    /// `spec.tls.backend.clientCertificateRef` names (`--manifests DIR --gateway NS/NAME`).
    ExportTrust(ExportTrustArgs),
}

#[derive(Debug, clap::Args)]
pub struct ExportTrustArgs {
    /// pier's client certificate chain (PEM, leaf first) whose CA the mesh must trust.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["manifests", "gateway"])]
    pub client_cert: Option<PathBuf>,
    /// A directory of manifests holding the Gateway of `--gateway` and its client certificate
    /// Secret.
    #[arg(long, value_name = "DIR", requires = "gateway")]
    pub manifests: Option<PathBuf>,
    /// The Gateway whose `spec.tls.backend.clientCertificateRef` names pier's certificate.
    #[arg(long, value_name = "NS/NAME", value_parser = parse_object_ref, requires = "manifests")]
    pub gateway: Option<ObjectRef>,
    /// Namespace of the emitted ConfigMap and Mesh.
    #[arg(long, value_name = "NS", default_value = "istio-system")]
    pub namespace: String,
    /// Name of the emitted ConfigMap and Mesh.
    #[arg(long, value_name = "NAME", default_value = "pier-gateway-trust")]
    pub name: String,
}

#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Gateways")]
pub struct CommonArgs {
    /// Only this Gateway: `run` serves it alone, `check` checks it alone.
    #[arg(long, value_name = "NS/NAME", value_parser = parse_object_ref)]
    pub gateway: Option<ObjectRef>,
    /// pier's Gateways are those whose GatewayClass has this `spec.controllerName`.
    #[arg(long, value_name = "NAME", default_value = crate::DEFAULT_CONTROLLER_NAME)]
    pub controller_name: String,
    /// Cluster DNS domain, for the SNI of meshed backends (`<svc>.<ns>.svc.<domain>`).
    #[arg(long, value_name = "DOMAIN", default_value = crate::translate::DEFAULT_CLUSTER_DOMAIN)]
    pub cluster_domain: String,
    #[command(flatten)]
    pub client_cert: ClientCertArgs,
    /// The addresses clients reach pier at (an edge VM's or its load balancer's IPs), written
    /// to Gateway `status.addresses` and checked against `spec.addresses` [default:
    /// `--listen-host` when it is a concrete IP].
    #[arg(
        long,
        value_name = "IP[,...]",
        value_delimiter = ',',
        help_heading = "Gateways"
    )]
    pub advertise_address: Vec<IpAddr>,
    /// Give each Gateway an address of its own from these (IPs and IPv4 CIDR blocks), which
    /// its listeners bind and its status reports, so Gateways may share port numbers. The
    /// addresses must be configured on this host.
    #[arg(long, value_name = "IP|CIDR[,...]", value_delimiter = ',', value_parser = parse_pool_entry, help_heading = "Gateways")]
    pub gateway_address_pool: Vec<PoolEntry>,
    #[command(flatten)]
    pub rate_limit: RateLimitArgs,
}

/// Envoy's rate-limit service (`envoyproxy/ratelimit` with Redis, or any server of
/// `envoy.service.ratelimit.v3.RateLimitService`), which keeps BackendTrafficPolicy
/// `rateLimit.global` limits for every pier instance that asks it.
#[derive(Clone, Debug, clap::Args)]
pub struct RateLimitArgs {
    /// The service's gRPC address (HTTP/2 without TLS). Without it, a policy with
    /// `rateLimit.global` is not accepted.
    #[arg(long, value_name = "IP:PORT", help_heading = "Rate limits")]
    pub rate_limit_service: Option<std::net::SocketAddr>,
    /// How long a request waits for the service's answer; then it goes on (or gets a 500 under
    /// `failClosed`).
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 50,
        help_heading = "Rate limits"
    )]
    pub rate_limit_timeout_ms: u64,
    /// The domain of the descriptors pier sends (the service's config names it).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "pier",
        help_heading = "Rate limits"
    )]
    pub rate_limit_domain: String,
    /// Write the service's configuration for the `rateLimit.global` rules in force (its YAML:
    /// the domain, a descriptor per rule) to this file whenever they change, atomically; point
    /// the service's runtime directory at it.
    #[arg(long, value_name = "FILE", help_heading = "Rate limits")]
    pub rate_limit_config: Option<std::path::PathBuf>,
}

/// One `--gateway-address-pool` entry, expanded.
#[derive(Clone, Debug)]
pub struct PoolEntry(Vec<IpAddr>);

fn parse_pool_entry(s: &str) -> Result<PoolEntry, String> {
    crate::translate::addresses::parse_pool(&[s.to_string()]).map(PoolEntry)
}

/// pier's own client identity for backend (mesh) mTLS, from the edge VM's PKI. A Gateway's
/// `spec.tls.backend.clientCertificateRef` takes precedence. Watched and reloaded.
#[derive(Clone, Debug, Default, clap::Args)]
#[command(next_help_heading = "Mesh identity")]
pub struct ClientCertArgs {
    /// PEM certificate chain (leaf first) pier presents to meshed backends.
    #[arg(long, value_name = "FILE", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// PEM private key of `--client-cert`.
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
}

impl ClientCertArgs {
    pub fn files(&self) -> Option<crate::run::ClientCertFiles> {
        Some(crate::run::ClientCertFiles {
            cert: self.client_cert.clone()?,
            key: self.client_key.clone()?,
        })
    }
}

#[derive(Debug, clap::Args)]
#[command(
    group(ArgGroup::new("source").required(true).args(["manifests", "kubeconfig"])),
    after_help = ENVIRONMENT
)]
pub struct RunArgs {
    /// Standalone: a directory of manifests (every *.yaml / *.yml below it), watched for
    /// changes.
    #[arg(long, value_name = "DIR", help_heading = "Source")]
    pub manifests: Option<PathBuf>,
    /// Cluster mode: watch the cluster of this kubeconfig. Without a value: `KUBECONFIG`, then
    /// `~/.kube/config`, then the in-cluster service account (when run as a pod).
    #[arg(long, value_name = "PATH", help_heading = "Source")]
    pub kubeconfig: Option<Option<PathBuf>>,
    /// The kubeconfig context to use instead of its current one.
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with = "manifests",
        help_heading = "Source"
    )]
    pub context: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Address the listeners bind to.
    #[arg(
        long,
        value_name = "IP",
        default_value = "0.0.0.0",
        help_heading = "Listeners and TLS"
    )]
    pub listen_host: IpAddr,
    /// Admin server address (/healthz /readyz /metrics /config /status).
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:9901", value_parser = parse_socket_addr, help_heading = "Admin")]
    pub admin: SocketAddr,
    /// A file holding a token the admin server then requires as `Authorization: Bearer` on
    /// everything but /healthz and /readyz.
    #[arg(long, value_name = "FILE", help_heading = "Admin")]
    pub admin_token_file: Option<PathBuf>,
    /// Also serve the admin API on this Unix socket (mode 0660: its owner and group may use
    /// it), for operators who must reach it from beyond loopback without a TCP port.
    #[arg(long, value_name = "PATH", help_heading = "Admin")]
    pub admin_socket: Option<PathBuf>,
    /// /readyz answers 503 while the configuration serves no listener (no Gateway, or none of
    /// its listeners can be served: a missing certificate Secret, say), for a health check
    /// that must take such an instance out of a load balancer. Off by default: /readyz is 200
    /// once the configuration is served, and its body says when that is no listener.
    #[arg(long, env = "PIER_READY_REQUIRES_LISTENER", help_heading = "Admin")]
    pub ready_requires_listener: bool,
    #[command(flatten)]
    pub common: CommonArgs,
    /// pier's client certificate (its X.509-SVID) and the bundles of `pier.dev/SPIFFEWorkloadAPI`
    /// trust bundle references from the SPIFFE Workload API at this socket (a path,
    /// `unix:///path`), streamed and rotated without a restart [default: `SPIFFE_ENDPOINT_SOCKET`
    /// unless `--client-cert` is given]. A Gateway's `clientCertificateRef` still wins.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["client_cert", "client_key"], help_heading = "Mesh identity")]
    pub spiffe_socket: Option<String>,
    /// Log lines as plain text or as one JSON object per line (to stderr).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text, help_heading = "Observability")]
    pub log_format: LogFormat,
    /// Log one line per request (target `pier::access`); a Gateway's `pier.dev/access-log`
    /// annotation overrides it for its listeners.
    #[arg(long, help_heading = "Observability")]
    pub access_log: bool,
    /// The fields of an access log line, comma-separated (`all`, or some of: client, peer, via,
    /// request_id, trace_id, method, host, path, protocol, status, bytes_in, bytes_out,
    /// listener, route, rule, backend, upstream, workload_identity, duration_ms, error,
    /// tls_failure, principal). Time, level and target are always there.
    #[arg(
        long,
        value_name = "FIELD[,...]",
        default_value = "all",
        help_heading = "Observability"
    )]
    pub access_log_fields: crate::proxy::AccessLogFields,
    /// Bind listener ports (and the admin port) with `SO_REUSEPORT`, so a new pier can bind
    /// them while this one runs: start the new one, wait until it is ready, then SIGTERM this
    /// one (zero-downtime restart; docs/src/operations/restarts.md). Off by default: two
    /// instances would share traffic silently instead of the second failing to bind.
    #[arg(long, help_heading = "Listeners and TLS")]
    pub reuse_port: bool,
    /// Turn TLS session resumption off on listeners: no session tickets, no session-ID cache,
    /// so every client connection is a full handshake (nginx's `ssl_session_tickets off` plus
    /// `ssl_session_cache off`). On by default: a resumed handshake skips the certificate
    /// signature.
    #[arg(long, help_heading = "Listeners and TLS")]
    pub no_tls_session_resumption: bool,
    /// Believe `X-Forwarded-For/-Proto/-Host`, `Forwarded` and `X-Request-Id` from clients at
    /// these addresses (IPs and CIDRs, IPv4 or IPv6; on a PROXY protocol port, the address its
    /// header names); from anyone else pier replaces them [default: nobody].
    #[arg(
        long,
        value_name = "CIDR[,...]",
        value_delimiter = ',',
        help_heading = "Listeners and TLS"
    )]
    pub trusted_proxies: Vec<crate::proxy::Cidr>,
    /// Trace requests: continue W3C `traceparent`/`tracestate` (pier's span becomes the
    /// parent upstream) and export sampled spans over OTLP/HTTP protobuf to this `http://` or
    /// `https://` URL (`/v1/traces` is added when it has no path; `https://` verifies the
    /// collector's certificate and name against the host's roots, e.g. /etc/ssl/certs). Off
    /// by default: trace headers pass through untouched.
    #[arg(
        long,
        value_name = "URL",
        env = "PIER_OTLP_ENDPOINT",
        help_heading = "Observability"
    )]
    pub otlp_endpoint: Option<crate::proxy::trace::OtlpEndpoint>,
    /// Trust only the CA certificates in this PEM file for the `https://` OTLP endpoint,
    /// instead of the host's roots.
    #[arg(
        long,
        value_name = "FILE",
        env = "PIER_OTLP_CA_FILE",
        requires = "otlp_endpoint",
        help_heading = "Observability"
    )]
    pub otlp_ca_file: Option<PathBuf>,
    /// Present this certificate chain (PEM, leaf first) to the `https://` OTLP endpoint (mTLS);
    /// with `--otlp-client-key`.
    #[arg(
        long,
        value_name = "FILE",
        env = "PIER_OTLP_CLIENT_CERT",
        requires_all = ["otlp_endpoint", "otlp_client_key"], help_heading = "Observability")]
    pub otlp_client_cert: Option<PathBuf>,
    /// The private key (PEM) of `--otlp-client-cert`.
    #[arg(
        long,
        value_name = "FILE",
        env = "PIER_OTLP_CLIENT_KEY",
        requires = "otlp_client_cert",
        help_heading = "Observability"
    )]
    pub otlp_client_key: Option<PathBuf>,
    /// The fraction of new traces pier samples (0 to 1). A parent's sampled flag is honoured
    /// only from `--trusted-proxies`.
    #[arg(
        long,
        value_name = "RATIO",
        env = "PIER_TRACE_SAMPLE_RATIO",
        default_value_t = crate::proxy::trace::SampleRatio::DEFAULT,
        requires = "otlp_endpoint", help_heading = "Observability")]
    pub trace_sample_ratio: crate::proxy::trace::SampleRatio,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub manifest_limits: ManifestLimitArgs,
    /// Every this many seconds, probe up to 8 endpoint addresses of each Gateway's routes from
    /// this host (TCP, and the TLS handshake of meshed routes), as `pier check --kubeconfig`
    /// does: `pier_pod_network_*` metrics, and a warning when one becomes unreachable (0: off).
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 60,
        help_heading = "Cluster mode (--kubeconfig)"
    )]
    pub probe_interval: u64,
}

/// Limits on what a client may make pier hold (`proxy::Limits`).
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Limits and timeouts")]
pub struct LimitArgs {
    /// Close an HTTP/2 (or hyper-served HTTP/1.1) connection with no request in progress for
    /// this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub idle_timeout: u64,
    /// A request body going to an HTTP/1.1 backend that sends nothing for this many seconds
    /// is cut off with 408 (0: no bound).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub request_body_timeout: u64,
    /// ... and after its first 5 s it must have averaged at least this many bytes a second
    /// (0: no minimum).
    #[arg(long, value_name = "BYTES", default_value_t = 240)]
    pub request_body_min_rate: u32,
    /// Merge runs of `/` in request paths before matching and forwarding (dot segments and
    /// escaped unreserved characters are always normalised).
    #[arg(long)]
    pub merge_slashes: bool,
    /// Open client connections per listener port. At the cap a new client takes the place of
    /// the connection that has waited on its client longest (idle, or a slow head or TLS
    /// handshake); with every connection busy pier stops accepting until one closes or idles.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Close a TLS stream (TLSRoute) that has carried no byte either way for this many
    /// seconds.
    #[arg(long, value_name = "SECS", default_value_t = 3600)]
    pub stream_idle_timeout: u64,
    /// End a UDP flow (one client address on a UDP listener, UDPRoute) that has carried no
    /// datagram either way for this many seconds; its next datagram starts a new flow.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub udp_idle_timeout: u64,
    /// Most UDP flows per UDP port (each holds a socket to its endpoint); past it a new
    /// client's datagrams are dropped until a flow ends, so spoofed sources cannot exhaust
    /// sockets.
    #[arg(long, value_name = "N", default_value_t = 16 * 1024,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_udp_flows: u64,
    /// HTTP/3: with this many QUIC handshakes under way on a port, new clients must first
    /// prove their address (a Retry round trip), so a flood of spoofed Initial packets costs
    /// pier no state (0: always).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub quic_validate_above: usize,
    /// Longest request target (path and query); a longer one is answered 414 (nginx's
    /// default line buffer is 8 KiB). Suffixes K, M: powers of 1024.
    #[arg(long, value_name = "BYTES", default_value = "8K", value_parser = parse_bytes)]
    pub max_request_target: u64,
    /// Largest request body, declared or streamed; a larger one is answered 413 (0: no
    /// maximum, the default: bodies stream to the backend and are never held whole).
    #[arg(long, value_name = "BYTES", default_value = "0", value_parser = parse_bytes)]
    pub max_request_body: u64,
    /// Most HTTP requests in flight to one backend (Service port) at once; over it 503
    /// without contacting it (circuit breaking). A Service's `pier.dev/max-requests`
    /// annotation overrides it. 0: no maximum.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_requests_per_backend: u32,
    /// Requests over that maximum that wait for a slot, at most the connect timeout (2 s),
    /// instead of a 503 at once; the oldest goes first. A Service's
    /// `pier.dev/max-pending-requests` overrides it. 0: none wait.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_pending_requests_per_backend: u32,
    /// Gateway failures in a row (502/503/504 from an endpoint, resets, failed TLS handshakes)
    /// that eject an endpoint (passive outlier detection); 0: failures never eject (a refused
    /// connect still does). A Service's `pier.dev/outlier-consecutive-failures` overrides it.
    #[arg(long, value_name = "N", default_value_t = crate::model::CONSECUTIVE_FAILURES)]
    pub outlier_consecutive_failures: u32,
    /// How long an ejected endpoint is left out the first time, in milliseconds; each ejection
    /// in a row lasts one more of these, up to 300 s. A Service's `pier.dev/outlier-ejection`
    /// (a duration: `30s`, `500ms`) overrides it.
    #[arg(long, value_name = "MS", default_value_t = crate::model::EJECTION.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub outlier_ejection_ms: u64,
}

impl LimitArgs {
    pub fn limits(&self) -> crate::proxy::Limits {
        use std::time::Duration;
        let defaults = crate::proxy::Limits::default();
        let grace = defaults
            .body_pace
            .map_or(Duration::from_secs(5), |p| p.grace);
        crate::proxy::Limits {
            idle_timeout: Duration::from_secs(self.idle_timeout.max(1)),
            body_pace: (self.request_body_timeout > 0).then(|| crate::proxy::BodyPace {
                idle: Duration::from_secs(self.request_body_timeout),
                min_rate: self.request_body_min_rate,
                grace,
            }),
            merge_slashes: self.merge_slashes,
            max_connections: self.max_connections,
            stream_idle_timeout: Duration::from_secs(self.stream_idle_timeout.max(1)),
            udp_idle_timeout: Duration::from_secs(self.udp_idle_timeout.max(1)),
            max_udp_flows: usize::try_from(self.max_udp_flows).unwrap_or(usize::MAX),
            quic_validate_above: self.quic_validate_above,
            max_request_target: usize::try_from(self.max_request_target.max(1))
                .unwrap_or(usize::MAX),
            max_request_body: (self.max_request_body > 0).then_some(self.max_request_body),
            max_requests_per_backend: (self.max_requests_per_backend > 0)
                .then_some(self.max_requests_per_backend),
            max_pending_requests_per_backend: self.max_pending_requests_per_backend,
            outlier: crate::model::Outlier {
                consecutive_failures: self.outlier_consecutive_failures,
                ejection: Duration::from_millis(self.outlier_ejection_ms),
                ..Default::default()
            },
        }
    }
}

/// Bounds on what one load of `--manifests` reads (a load over them fails with an error
/// naming the limit, and `run` keeps the last good configuration).
#[derive(Clone, Debug, clap::Args)]
#[command(next_help_heading = "Manifests (--manifests)")]
pub struct ManifestLimitArgs {
    /// Most bytes of all manifest files together (suffixes K, M, G: powers of 1024).
    #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = parse_bytes)]
    pub max_manifest_bytes: u64,
    /// Most bytes of one manifest file (suffixes K, M, G).
    #[arg(long, value_name = "BYTES", default_value = "16M", value_parser = parse_bytes)]
    pub max_manifest_file_bytes: u64,
    /// Most objects (YAML documents) in all manifest files together.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub max_manifest_objects: usize,
}

impl ManifestLimitArgs {
    pub fn limits(&self) -> crate::source::files::Limits {
        crate::source::files::Limits {
            total_bytes: self.max_manifest_bytes,
            file_bytes: self.max_manifest_file_bytes,
            objects: self.max_manifest_objects,
        }
    }
}

/// `pier run` flags for cluster mode only.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Cluster mode (--kubeconfig)")]
pub struct ClusterArgs {
    /// Namespace of the status-writer Lease [default: the pod's namespace when run in a
    /// cluster, else pier-system].
    #[arg(long, value_name = "NS", conflicts_with = "manifests")]
    pub lease_namespace: Option<String>,
    /// Name of the status-writer Lease [default: --controller-name with `/` as `-`].
    #[arg(long, value_name = "NAME", conflicts_with = "manifests")]
    pub lease_name: Option<String>,
    /// This replica's Lease holder identity [default: the host name and a random suffix].
    #[arg(long, value_name = "ID", conflicts_with = "manifests")]
    pub lease_identity: Option<String>,
    /// Never write status (and take no Lease): for a read-only identity.
    #[arg(long, conflicts_with = "manifests")]
    pub no_status: bool,
    #[command(flatten)]
    pub watch: WatchArgs,
}

/// `pier check --kubeconfig` flags that say how `pier run --kubeconfig` will use the cluster
/// (what its RBAC must allow), without those of serving only (the Lease's name and holder).
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Cluster mode (--kubeconfig)")]
pub struct CheckClusterArgs {
    /// The namespace of the status-writer Lease `pier run` takes, where its RBAC is checked
    /// [default: the pod's namespace when run in a cluster, else pier-system].
    #[arg(long, value_name = "NS", conflicts_with = "manifests")]
    pub lease_namespace: Option<String>,
    /// Check for a `pier run --no-status`: no status or Lease writes are needed.
    #[arg(long, conflicts_with = "manifests")]
    pub no_status: bool,
    #[command(flatten)]
    pub watch: WatchArgs,
}

/// What pier watches in a cluster (`run` and `check`).
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Cluster mode (--kubeconfig)")]
pub struct WatchArgs {
    /// Watch only the ConfigMaps with these labels (a label selector) [default: all].
    #[arg(long, value_name = "SELECTOR", conflicts_with = "manifests")]
    pub configmap_label_selector: Option<String>,
    /// Watch only the Secrets matching this field selector; `''` watches all (needed for mesh
    /// trust bundles kept in Opaque Secrets).
    #[arg(
        long,
        value_name = "SELECTOR",
        default_value = crate::source::kube::TLS_SECRETS,
        conflicts_with = "manifests"
    )]
    pub secret_field_selector: String,
}

#[derive(Debug, clap::Args)]
#[command(
    group(ArgGroup::new("source").required(true).args(["manifests", "kubeconfig"])),
    after_help = CHECK_HELP
)]
pub struct CheckArgs {
    /// The directory of manifests (every *.yaml / *.yml below it): print the status of every
    /// object as YAML.
    #[arg(long, value_name = "DIR")]
    pub manifests: Option<PathBuf>,
    /// Check a live cluster as `pier run --kubeconfig` would use it: API server, Gateway API
    /// CRDs, RBAC, the Gateways pier would serve, pod network reachability from this machine,
    /// mesh certificates. Without a value: `KUBECONFIG`, then `~/.kube/config`, then the
    /// in-cluster service account.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<Option<PathBuf>>,
    /// The kubeconfig context to use instead of its current one.
    #[arg(long, value_name = "NAME", conflicts_with = "manifests")]
    pub context: Option<String>,
    /// `--manifests`: write the status YAML to this file instead of stdout. A file the next
    /// load of the directory would read (a `*.yaml` / `*.yml` inside it) is refused.
    #[arg(long, value_name = "FILE", conflicts_with = "kubeconfig")]
    pub output_file: Option<PathBuf>,
    /// `--kubeconfig` report format: one line per check, or JSON for machines.
    #[arg(
        short = 'o',
        long,
        value_enum,
        value_name = "FORMAT",
        default_value_t = CheckOutput::Text,
        conflicts_with = "manifests"
    )]
    pub output: CheckOutput,
    /// `--kubeconfig`: seconds each pod network probe (TCP connect and TLS handshake) may take.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 3,
        conflicts_with = "manifests"
    )]
    pub probe_timeout: u64,
    /// `--kubeconfig`: endpoint addresses probed per Gateway at most.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 8,
        conflicts_with = "manifests"
    )]
    pub probe_sample: usize,
    /// `--kubeconfig`: seconds to wait for each API server answer and for the first list of
    /// every kind.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 30,
        conflicts_with = "manifests"
    )]
    pub api_timeout: u64,
    #[command(flatten)]
    pub cluster: CheckClusterArgs,
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub manifest_limits: ManifestLimitArgs,
}

/// `pier check --help`, after the flags.
const CHECK_HELP: &str =
    "Exit status with --kubeconfig: 0 when no check fails (warnings ‼ do not fail),
1 when one does (✖). Colour only on a terminal; NO_COLOR turns it off.";

/// `pier check --kubeconfig -o FORMAT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CheckOutput {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
#[command(after_help = ENVIRONMENT)]
pub struct DemoArgs {
    /// Address the demo listeners bind to.
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    pub listen_host: IpAddr,
    /// The quickstart Gateway's HTTP port; the demo also serves the three ports after it
    /// (meshed HTTP, gRPC, meshed gRPC). 0 picks four free ports (printed).
    #[arg(long, value_name = "PORT", default_value_t = 8080)]
    pub port: u16,
    /// The first of the four echo backends' ports on 127.0.0.1 (the next three are the
    /// others). 0 picks free ports.
    #[arg(long, value_name = "PORT", default_value_t = 18081)]
    pub backend_port: u16,
    /// Admin server address (/readyz /metrics /status /config).
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:9901", value_parser = parse_socket_addr)]
    pub admin: SocketAddr,
}

#[derive(Debug, clap::Args)]
pub struct EchoArgs {
    /// Address to listen on, e.g. 127.0.0.1:18081.
    #[arg(long, value_name = "IP:PORT", value_parser = parse_socket_addr)]
    pub listen: SocketAddr,
    /// Reported in every response as `backend`.
    #[arg(long, value_name = "NAME", default_value = "echo")]
    pub name: String,
    /// Serve TLS with this PEM certificate chain (leaf first), read again when it changes.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of `--tls-cert`.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates that this PEM CA bundle verifies (mTLS).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// The Gateway CRD with pier's `spec.mesh` schema instead of the plain one.
    #[arg(long)]
    pub mesh: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `1048576`, `1024K`, `64M`, `1G` (powers of 1024).
fn parse_bytes(s: &str) -> Result<u64, String> {
    let (digits, shift) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a size (a number, optionally followed by K, M or G)"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// `IP:PORT` (`[IPv6]:PORT`). What was given is in clap's message (`invalid value '9901' for
/// '--admin <IP:PORT>'`); this says what is missing and what to write instead. The address
/// suggested is loopback: these flags serve pier's own endpoints, and reaching them from
/// other hosts must be a choice someone makes, not one an error message made for them.
fn parse_socket_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        let example = SocketAddr::new(ip, 9901);
        return Err(format!(
            "an address without a port; give IP:PORT, e.g. {example}"
        ));
    }
    if let Ok(port) = s.strip_prefix(':').unwrap_or(s).parse::<u16>() {
        return Err(format!(
            "a port without an address; give IP:PORT, e.g. 127.0.0.1:{port} to listen on \
             loopback only"
        ));
    }
    let example = match s.rsplit_once(':').map(|(_, p)| p.parse::<u16>()) {
        Some(Ok(port)) => format!("127.0.0.1:{port}"),
        _ => "127.0.0.1:9901".to_string(),
    };
    Err(format!(
        "not an IP:PORT address (host names are not resolved); give e.g. {example}"
    ))
}

fn parse_object_ref(s: &str) -> Result<ObjectRef, String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(ObjectRef::new(ns, name))
        }
        _ => Err(format!("expected NAMESPACE/NAME, got {s:?}")),
    }
}

impl RateLimitArgs {
    /// The service as translation hands it to rules, when one is named.
    pub fn service(&self) -> Option<std::sync::Arc<crate::model::traffic::RateLimitService>> {
        let addr = self.rate_limit_service?;
        Some(std::sync::Arc::new(
            crate::model::traffic::RateLimitService::new(
                addr,
                std::time::Duration::from_millis(self.rate_limit_timeout_ms.max(1)),
                self.rate_limit_domain.clone(),
            ),
        ))
    }
}

impl CommonArgs {
    pub fn translate_settings(&self) -> crate::translate::Settings {
        crate::translate::Settings {
            controller_name: self.controller_name.clone(),
            gateway: self.gateway.clone(),
            cluster_domain: self.cluster_domain.clone(),
            client_identity: None,
            workload_api: None,
            reachability: Default::default(),
            remote_jwks: Default::default(),
            advertise: self.advertise_address.clone(),
            rate_limit_service: self.rate_limit.service(),
            rate_limit_config: self.rate_limit.rate_limit_config.clone(),
            address_pool: self
                .gateway_address_pool
                .iter()
                .flat_map(|e| e.0.iter().copied())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_flag_needs_namespace_and_name() {
        assert_eq!(parse_object_ref("ns/gw"), Ok(ObjectRef::new("ns", "gw")));
        assert!(parse_object_ref("gw").is_err());
        assert!(parse_object_ref("/gw").is_err());
        assert!(parse_object_ref("a/b/c").is_err());
    }

    #[test]
    fn manifest_limits_take_sizes_with_binary_suffixes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("16K"), Ok(16 << 10));
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("1g"), Ok(1 << 30));
        assert!(parse_bytes("M").is_err());
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("99999999999G").is_err());
        let Command::Check(c) = Cli::try_parse_from(["pier", "check", "--manifests", "d"])
            .unwrap()
            .command
        else {
            panic!("not check")
        };
        assert_eq!(
            c.manifest_limits.limits(),
            crate::source::files::Limits::default()
        );
        let Command::Check(c) = Cli::try_parse_from([
            "pier",
            "check",
            "--manifests",
            "d",
            "--max-manifest-objects",
            "5",
            "--max-manifest-file-bytes",
            "1K",
        ])
        .unwrap()
        .command
        else {
            panic!("not check")
        };
        assert_eq!(c.manifest_limits.limits().objects, 5);
        assert_eq!(c.manifest_limits.limits().file_bytes, 1024);
    }

    /// What `parse_socket_addr` says when `args` (with `value`) are parsed.
    fn address_error(args: &[&str], value: &str) -> String {
        let err = Cli::try_parse_from(["pier"].iter().chain(args).chain([&value]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("'{value}'")),
            "the value given: {err}"
        );
        err
    }

    #[test]
    fn a_bare_port_for_an_address_flag_suggests_its_loopback_address() {
        for (args, port) in [
            (&["run", "--manifests", "d", "--admin"][..], "9901"),
            (&["demo", "--admin"], "9902"),
            (&["echo", "--listen"], "18081"),
        ] {
            let err = address_error(args, port);
            assert!(err.contains(&format!("e.g. 127.0.0.1:{port} ")), "{err}");
            assert!(!err.contains("0.0.0.0"), "{err}");
            assert!(!err.contains("invalid socket address syntax"), "{err}");
        }
        let err = address_error(&["run", "--manifests", "d", "--admin"], ":9901");
        assert!(err.contains("e.g. 127.0.0.1:9901 "), "{err}");
    }

    #[test]
    fn an_address_flag_without_a_port_or_with_a_host_name_says_what_to_write() {
        let run = &["run", "--manifests", "d", "--admin"][..];
        let err = address_error(run, "127.0.0.1");
        assert!(
            err.contains("without a port; give IP:PORT, e.g. 127.0.0.1:9901"),
            "{err}"
        );
        let err = address_error(run, "::1");
        assert!(err.contains("e.g. [::1]:9901"), "{err}");
        let err = address_error(run, "localhost:9902");
        assert!(err.contains("host names are not resolved"), "{err}");
        assert!(err.contains("e.g. 127.0.0.1:9902"), "{err}");
        let a = run_args(&["--manifests", "d", "--admin", "[::1]:9901"]).unwrap();
        assert_eq!(a.admin.to_string(), "[::1]:9901");
    }

    #[test]
    fn run_defaults_match_the_contract() {
        let cli = Cli::try_parse_from(["pier", "run", "--manifests", "d"]).unwrap();
        let Command::Run(a) = cli.command else {
            panic!("run")
        };
        assert_eq!(a.listen_host.to_string(), "0.0.0.0");
        assert_eq!(a.admin.to_string(), "127.0.0.1:9901");
        assert_eq!(a.common.controller_name, "pier.dev/gateway-controller");
        assert_eq!(a.log_format, LogFormat::Text);
        assert_eq!(a.manifests.as_deref(), Some(std::path::Path::new("d")));
        assert!(a.kubeconfig.is_none());
    }

    fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let cli = Cli::try_parse_from(["pier", "run"].iter().chain(args))?;
        match cli.command {
            Command::Run(a) => Ok(a),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn run_needs_exactly_one_source() {
        assert!(run_args(&[]).is_err());
        assert!(run_args(&["--manifests", "d", "--kubeconfig", "k"]).is_err());
        assert!(run_args(&["--manifests", "d", "--kubeconfig"]).is_err());
    }

    #[test]
    fn kubeconfig_value_is_optional() {
        let a = run_args(&["--kubeconfig", "/k", "--context", "c"]).unwrap();
        assert_eq!(a.kubeconfig, Some(Some(PathBuf::from("/k"))));
        assert_eq!(a.context.as_deref(), Some("c"));
        let a = run_args(&["--kubeconfig", "--listen-host", "127.0.0.1"]).unwrap();
        assert_eq!(a.kubeconfig, Some(None));
        assert_eq!(a.listen_host.to_string(), "127.0.0.1");
    }

    #[test]
    fn tracing_flags_are_checked_and_off_by_default() {
        let a = run_args(&["--manifests", "d"]).unwrap();
        assert_eq!(a.otlp_endpoint, None);
        assert_eq!(a.trace_sample_ratio.get(), 0.01);
        let a = run_args(&[
            "--manifests",
            "d",
            "--otlp-endpoint",
            "http://127.0.0.1:4318",
            "--trace-sample-ratio",
            "0.5",
        ])
        .unwrap();
        assert_eq!(
            a.otlp_endpoint.map(|e| e.to_string()).as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        assert_eq!(a.trace_sample_ratio.get(), 0.5);
        let a = run_args(&[
            "--manifests",
            "d",
            "--otlp-endpoint",
            "https://collector.example",
            "--otlp-ca-file",
            "/ca.pem",
            "--otlp-client-cert",
            "/c.pem",
            "--otlp-client-key",
            "/k.pem",
        ])
        .unwrap();
        assert_eq!(
            a.otlp_endpoint.map(|e| e.to_string()).as_deref(),
            Some("https://collector.example/v1/traces")
        );
        assert_eq!(a.otlp_ca_file, Some(PathBuf::from("/ca.pem")));
        assert_eq!(a.otlp_client_key, Some(PathBuf::from("/k.pem")));
        for bad in [
            &["--otlp-endpoint", "ftp://collector:4318"][..],
            &["--otlp-endpoint", "collector:4318"],
            // TLS files without an endpoint, a client certificate without its key.
            &["--otlp-ca-file", "/ca.pem"],
            &[
                "--otlp-endpoint",
                "https://c",
                "--otlp-client-cert",
                "/c.pem",
            ],
            &[
                "--otlp-endpoint",
                "https://c",
                "--otlp-client-key",
                "/k.pem",
            ],
            &[
                "--otlp-endpoint",
                "http://c:4318",
                "--trace-sample-ratio",
                "1.5",
            ],
            // A ratio without an endpoint would do nothing.
            &["--trace-sample-ratio", "0.5"],
        ] {
            let mut args = vec!["--manifests", "d"];
            args.extend(bad);
            let err = run_args(&args).unwrap_err().to_string();
            assert!(
                err.contains("otlp-") || err.contains("trace-sample-ratio"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn cluster_flags_need_kubeconfig() {
        for flags in [
            &["--context", "c"][..],
            &["--lease-namespace", "ns"],
            &["--no-status"],
            &["--configmap-label-selector", "a=b"],
            &["--secret-field-selector", ""],
        ] {
            let mut args = vec!["--manifests", "d"];
            args.extend(flags);
            assert!(run_args(&args).is_err(), "{flags:?}");
            let mut args = vec!["--kubeconfig", "k"];
            args.extend(flags);
            assert!(run_args(&args).is_ok(), "{flags:?}");
        }
    }
}
