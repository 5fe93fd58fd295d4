//! The subcommands behind the CLI.

use anyhow::Context;

use crate::cli::{
    CheckArgs, CheckOutput, ClusterArgs, Command, CommonArgs, ExportTrustArgs, MeshCommand,
    RunArgs, WatchArgs,
};
use crate::process::{print_stdout, shutdown_signal};
use crate::run::{self, ClusterOptions, RunOptions, Source};
use crate::source::kube::{Connect, WatchScope};
use crate::status_writer::{self, LeaseOptions, StatusOptions};

/// Where a pod finds its namespace.
const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
/// The Lease namespace outside a cluster (where `config/rbac/` grants the Lease).
pub const DEFAULT_LEASE_NAMESPACE: &str = "pier-system";

pub async fn dispatch(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Run(a) => run_cmd(a).await,
        Command::Check(a) if a.kubeconfig.is_some() => check_cluster(&a).await,
        Command::Check(a) => {
            let output = a
                .output_file
                .as_deref()
                .map(|f| CheckOutputFile::new(f, &a));
            let output = output.transpose()?;
            let yaml = check(&a)?;
            match output {
                Some(file) => file.write(&yaml),
                None => print_stdout(&yaml),
            }
        }
        Command::Demo(a) => crate::demo::run(a).await,
        Command::Echo(a) => {
            let server = match (a.tls_cert, a.tls_key) {
                (Some(cert), Some(key)) => {
                    let files = crate::echo::TlsFiles {
                        cert,
                        key,
                        client_ca: a.client_ca,
                    };
                    let config = crate::echo::files_server_config(&files)?;
                    crate::echo::spawn_tls(a.listen, &a.name, config).await
                }
                _ => crate::echo::spawn(a.listen, &a.name).await,
            }
            .with_context(|| format!("cannot bind {}", a.listen))?;
            eprintln!("echo backend {:?} listening on {}", a.name, server.addr);
            shutdown_signal().await;
            Ok(())
        }
        Command::Mesh(MeshCommand::ExportTrust(a)) => print_stdout(&export_trust(&a)?),
        Command::Crds(a) => print_stdout(&crds_yaml(a.mesh)?),
    }
}

/// `pier crds`: the CRDs ([`crate::crds::bundle`]: Gateway API's, then pier's own) as one
/// multi-document YAML stream.
pub fn crds_yaml(mesh: bool) -> anyhow::Result<String> {
    let mut out = String::new();
    for crd in crate::crds::bundle(mesh) {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd).context("cannot render a CRD as YAML")?);
    }
    Ok(out)
}

async fn run_cmd(a: RunArgs) -> anyhow::Result<()> {
    let source = match (a.manifests, a.kubeconfig) {
        (Some(dir), None) => Source::Manifests(dir),
        (None, Some(kubeconfig)) => Source::Cluster(cluster_options(
            Connect {
                kubeconfig,
                context: a.context,
            },
            &a.cluster,
            &a.common,
        )),
        _ => anyhow::bail!("give exactly one of --manifests and --kubeconfig"),
    };
    let running = run::start(RunOptions {
        source,
        listen_host: a.listen_host,
        admin: a.admin,
        admin_socket: a.admin_socket.clone(),
        translate: {
            let mut t = a.common.translate_settings();
            if t.advertise.is_empty() && !a.listen_host.is_unspecified() {
                t.advertise.push(a.listen_host);
            }
            t
        },
        access_log: a.access_log,
        access_log_fields: a.access_log_fields,
        reuse_port: a.reuse_port,
        tls_session_resumption: !a.no_tls_session_resumption,
        trusted_proxies: crate::proxy::TrustedProxies::new(a.trusted_proxies.clone()),
        limits: a.limits.limits(),
        tracing: a
            .otlp_endpoint
            .clone()
            .map(|endpoint| crate::proxy::trace::TraceConfig {
                tls: crate::proxy::trace::TlsFiles {
                    ca_file: a.otlp_ca_file.clone(),
                    client_cert: a.otlp_client_cert.clone().zip(a.otlp_client_key.clone()),
                },
                ..crate::proxy::trace::TraceConfig::new(endpoint, a.trace_sample_ratio)
            }),
        admin_token_file: a.admin_token_file.clone(),
        client_cert: a.common.client_cert.files(),
        spiffe_endpoint: spiffe_endpoint(
            a.spiffe_socket.as_deref(),
            a.common.client_cert.files().is_some(),
            |k| std::env::var(k).ok(),
        )?,
        manifest_limits: a.manifest_limits.limits(),
        probe_interval: (a.probe_interval > 0)
            .then(|| std::time::Duration::from_secs(a.probe_interval)),
        ready_requires_listener: a.ready_requires_listener,
    })
    .await?;
    tracing::info!(admin = %running.admin_addr, "admin server listening");
    // SIGHUP (`systemctl reload`): re-read the files now; the default action would end pier.
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot handle SIGHUP")?;
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = hup.recv() => running.reload(),
        }
    }
    tracing::info!("shutting down; draining in-flight requests");
    running.shutdown().await;
    Ok(())
}

/// The SPIFFE Workload API endpoint: `--spiffe-socket`, else `SPIFFE_ENDPOINT_SOCKET` (the
/// SPIFFE convention) unless pier was given `--client-cert`: an explicit identity wins over an
/// ambient variable (the CLI refuses the two flags together).
pub fn spiffe_endpoint(
    flag: Option<&str>,
    client_cert: bool,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<Option<String>> {
    const ENV: &str = "SPIFFE_ENDPOINT_SOCKET";
    let (arg, from) = match flag {
        Some(f) => (f.to_string(), "--spiffe-socket"),
        None if client_cert => {
            if env(ENV).is_some_and(|v| !v.trim().is_empty()) {
                tracing::info!(
                    "{ENV} is set but not used: --client-cert/--client-key name pier's identity"
                );
            }
            return Ok(None);
        }
        None => match env(ENV).filter(|v| !v.trim().is_empty()) {
            Some(v) => (v, ENV),
            None => return Ok(None),
        },
    };
    crate::source::spiffe::parse_endpoint(arg.trim())
        .map(Some)
        .context(from)
}

fn cluster_options(connect: Connect, c: &ClusterArgs, common: &CommonArgs) -> ClusterOptions {
    let lease = LeaseOptions {
        namespace: c
            .lease_namespace
            .clone()
            .unwrap_or_else(default_lease_namespace),
        name: c
            .lease_name
            .clone()
            .unwrap_or_else(|| status_writer::default_name(&common.controller_name)),
        identity: c.lease_identity.clone().unwrap_or_else(lease_identity),
        duration_secs: status_writer::DEFAULT_DURATION_SECS,
        grace_secs: status_writer::DEFAULT_GRACE_SECS,
    };
    ClusterOptions {
        connect,
        scope: watch_scope(&c.watch),
        status: (!c.no_status).then(|| StatusOptions::new(lease)),
    }
}

fn watch_scope(w: &WatchArgs) -> WatchScope {
    WatchScope {
        config_maps_label_selector: w.configmap_label_selector.clone(),
        secrets_field_selector: Some(w.secret_field_selector.clone()).filter(|s| !s.is_empty()),
    }
}

/// The pod's namespace when run in a cluster, else [`DEFAULT_LEASE_NAMESPACE`].
fn default_lease_namespace() -> String {
    std::fs::read_to_string(POD_NAMESPACE_FILE)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_LEASE_NAMESPACE.to_string())
}

/// `<host name>-<6 random characters>`: unique per replica (pod names are host names), and
/// still unique for two replicas on one host.
fn lease_identity() -> String {
    use rand::Rng;
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "pier".to_string());
    let suffix: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(6)
        .map(|b| char::from(b).to_ascii_lowercase())
        .collect();
    format!("{host}-{suffix}")
}

/// `pier check --kubeconfig`: run the checks of [`crate::check`], print the report, and fail
/// (exit status 1) when a check failed.
async fn check_cluster(a: &CheckArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let report = crate::check::run(&check_options(a)).await;
    let out = match a.output {
        CheckOutput::Json => report.json(),
        CheckOutput::Text => report.text(crate::check::use_colour(
            std::io::stdout().is_terminal(),
            std::env::var_os("NO_COLOR"),
        )),
    };
    print_stdout(&out)?;
    let failed = report.count(crate::check::Status::Fail);
    anyhow::ensure!(failed == 0, "{failed} check(s) failed");
    Ok(())
}

/// What `pier check --kubeconfig` checks, from the same flags `pier run` takes.
pub fn check_options(a: &CheckArgs) -> crate::check::Options {
    let connect = Connect {
        kubeconfig: a.kubeconfig.clone().flatten(),
        context: a.context.clone(),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    crate::check::Options {
        lease_namespace: a
            .cluster
            .lease_namespace
            .clone()
            .unwrap_or_else(default_lease_namespace),
        status_writes: !a.cluster.no_status,
        connect,
        scope: watch_scope(&a.cluster.watch),
        settings: a.common.translate_settings(),
        client_cert: a
            .common
            .client_cert
            .files()
            .map(|f| f.load().map_err(|e| format!("{e:#}"))),
        probe_timeout: std::time::Duration::from_secs(a.probe_timeout.max(1)),
        probe_sample: a.probe_sample,
        api_timeout: std::time::Duration::from_secs(a.api_timeout.max(1)),
        now,
    }
}

/// `pier check --manifests DIR --output-file FILE`: where the status YAML goes, checked before
/// anything is loaded.
#[derive(Debug)]
struct CheckOutputFile(std::path::PathBuf);

/// Why `--output-file` cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputFileError {
    /// The file is a manifest of the directory: the next `pier check` or `pier run` of it
    /// would read the status YAML as manifests (and fail on it, or worse, read it).
    #[error(
        "--output-file {output} is inside --manifests {dir}, where the next load would read it \
         as a manifest; write it outside that directory"
    )]
    InsideManifests {
        output: std::path::PathBuf,
        dir: std::path::PathBuf,
    },
    #[error("cannot write --output-file {path}")]
    Write {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl CheckOutputFile {
    /// Refuses a file that a load of `--manifests` would read.
    fn new(path: &std::path::Path, a: &CheckArgs) -> Result<Self, OutputFileError> {
        if let Some(dir) = &a.manifests
            && output_is_read_by_load(path, dir)
        {
            return Err(OutputFileError::InsideManifests {
                output: path.to_path_buf(),
                dir: dir.clone(),
            });
        }
        Ok(Self(path.to_path_buf()))
    }

    fn write(&self, yaml: &str) -> anyhow::Result<()> {
        std::fs::write(&self.0, yaml).map_err(|source| OutputFileError::Write {
            path: self.0.clone(),
            source,
        })?;
        Ok(())
    }
}

/// Whether a load of `dir` would read `output` once written. Both are resolved (symlinks,
/// `..`, relative paths), so `--manifests . --output-file ./x/../check.yaml` is caught; a
/// file whose directory does not exist cannot be written and is left to the write to report.
fn output_is_read_by_load(output: &std::path::Path, dir: &std::path::Path) -> bool {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return false;
    };
    let resolved = std::fs::canonicalize(output).or_else(|_| {
        let parent = match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        let name = output.file_name().ok_or(std::io::ErrorKind::InvalidInput)?;
        std::fs::canonicalize(parent).map(|p| p.join(name))
    });
    resolved.is_ok_and(|out| {
        out.starts_with(&dir) && crate::source::files::ManifestFiles::new(&dir).reads(&out)
    })
}

/// `pier check`: load, translate, render every computed status as YAML.
pub fn check(a: &CheckArgs) -> anyhow::Result<String> {
    let dir = a
        .manifests
        .as_deref()
        .context("give --manifests DIR or --kubeconfig [PATH]")?;
    let loaded = crate::source::files::load(dir, &a.manifest_limits.limits())?;
    for (path, skipped) in &loaded.skipped {
        match skipped.mistake() {
            Some(mistake) => eprintln!("warning: {}:{}: {mistake}", path.display(), skipped.line),
            None => eprintln!("skipped {skipped} in {}", path.display()),
        }
    }
    for (path, u) in &loaded.unknown {
        eprintln!("warning: {}:{}: {u}", path.display(), u.line);
    }
    for d in &loaded.duplicates {
        eprintln!(
            "warning: {} {} is defined twice: using {}, ignoring {} (files are read in path order)",
            d.kind, d.name, d.winner, d.replaced
        );
    }
    let mut settings = a.common.translate_settings();
    if let Some(files) = a.common.client_cert.files() {
        settings.client_identity = Some(files.load()?);
    }
    let translation = crate::translate::translate(&loaded.resources, &settings);
    serde_saphyr::to_string(&translation.status.objects())
        .context("cannot render the status as YAML")
}

/// `pier mesh export-trust`: what the mesh must trust so that it accepts pier's client
/// certificate, from `--client-cert` or from a Gateway's client certificate Secret.
pub fn export_trust(a: &ExportTrustArgs) -> anyhow::Result<String> {
    let chain = match (&a.client_cert, &a.manifests, &a.gateway) {
        (Some(path), _, _) => {
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?
        }
        (None, Some(dir), Some(gw)) => gateway_client_cert(dir, gw)?,
        _ => anyhow::bail!("give --client-cert FILE, or --manifests DIR --gateway NS/NAME"),
    };
    crate::translate::mesh::export_trust(&chain, &a.namespace, &a.name)
        .context("cannot export the trust bundle")
}

/// `tls.crt` of the Secret named by the Gateway's `spec.tls.backend.clientCertificateRef`.
fn gateway_client_cert(
    dir: &std::path::Path,
    gw: &crate::model::ObjectRef,
) -> anyhow::Result<Vec<u8>> {
    let loaded = crate::source::files::load(dir, &crate::source::files::Limits::default())?;
    let gateway = loaded
        .resources
        .gateways
        .get(&(gw.namespace.clone(), gw.name.clone()))
        .with_context(|| format!("Gateway {gw} not found in {}", dir.display()))?;
    let r = gateway
        .spec
        .base
        .tls
        .as_ref()
        .and_then(|t| t.backend.as_ref())
        .and_then(|b| b.client_certificate_ref.as_ref())
        .with_context(|| format!("Gateway {gw} has no spec.tls.backend.clientCertificateRef"))?;
    let ns = r.namespace.clone().unwrap_or_else(|| gw.namespace.clone());
    let secret = loaded
        .resources
        .secrets
        .get(&(ns.clone(), r.name.clone()))
        .with_context(|| format!("Secret {ns}/{} not found", r.name))?;
    let crt = secret
        .data
        .as_ref()
        .and_then(|d| d.get("tls.crt"))
        .with_context(|| format!("Secret {ns}/{} has no tls.crt", r.name))?;
    Ok(crt.0.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spiffe_socket_flag_then_env_unless_client_cert() {
        let env = |k: &str| (k == "SPIFFE_ENDPOINT_SOCKET").then(|| "unix:///env.sock".to_string());
        let none = |_: &str| None;
        let flag = Some("/flag.sock");
        assert_eq!(
            spiffe_endpoint(flag, false, env).unwrap().as_deref(),
            Some("unix:///flag.sock")
        );
        assert_eq!(
            spiffe_endpoint(None, false, env).unwrap().as_deref(),
            Some("unix:///env.sock")
        );
        // An explicit --client-cert wins over the ambient variable, and the log says so.
        let (chosen, logged) =
            crate::log_limit::capture::logged(|| spiffe_endpoint(None, true, env).unwrap());
        assert_eq!(chosen, None);
        assert!(
            logged.contains("SPIFFE_ENDPOINT_SOCKET is set but not used"),
            "{logged}"
        );
        assert_eq!(spiffe_endpoint(None, false, none).unwrap(), None);
        let err = spiffe_endpoint(Some("unix://host/x"), false, none).unwrap_err();
        assert!(
            format!("{err:#}").starts_with("--spiffe-socket: "),
            "{err:#}"
        );
    }
}
