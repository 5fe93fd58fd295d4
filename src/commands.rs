//! The subcommands behind the CLI.

use anyhow::Context;

use crate::cli::{CheckArgs, Command, ExportTrustArgs, MeshCommand, RunArgs};
use crate::run::{self, RunOptions};

pub async fn dispatch(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Run(a) => run_cmd(a).await,
        Command::Check(a) => {
            let out = check(&a)?;
            print!("{out}");
            Ok(())
        }
        Command::Demo(a) => crate::demo::run(a.listen_host).await,
        Command::Echo(a) => {
            let server = crate::echo::spawn(a.listen, &a.name)
                .await
                .with_context(|| format!("cannot bind {}", a.listen))?;
            eprintln!("echo backend {:?} listening on {}", a.name, server.addr);
            shutdown_signal().await;
            Ok(())
        }
        Command::Mesh(MeshCommand::ExportTrust(a)) => {
            print!("{}", export_trust(&a)?);
            Ok(())
        }
    }
}

async fn run_cmd(a: RunArgs) -> anyhow::Result<()> {
    let running = run::start(RunOptions {
        manifests: a.manifests,
        listen_host: a.listen_host,
        admin: a.admin,
        translate: a.common.translate_settings(),
        access_log: a.access_log,
        client_cert: a.common.client_cert.files(),
    })
    .await?;
    tracing::info!(admin = %running.admin_addr, "admin server listening");
    shutdown_signal().await;
    tracing::info!("shutting down; draining in-flight requests");
    running.shutdown().await;
    Ok(())
}

/// `pier check`: load, translate, render every computed status as YAML.
pub fn check(a: &CheckArgs) -> anyhow::Result<String> {
    let loaded = crate::source::files::load(&a.manifests)?;
    for (path, kind) in &loaded.skipped {
        eprintln!("skipped {kind} in {}", path.display());
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
    let loaded = crate::source::files::load(dir)?;
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

/// Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
