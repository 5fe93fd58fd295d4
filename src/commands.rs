//! The subcommands behind the CLI.

use anyhow::Context;

use crate::cli::{CheckArgs, Command, RunArgs};
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
    }
}

async fn run_cmd(a: RunArgs) -> anyhow::Result<()> {
    let running = run::start(RunOptions {
        manifests: a.manifests,
        listen_host: a.listen_host,
        admin: a.admin,
        translate: a.common.translate_settings(),
        access_log: a.access_log,
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
    let translation =
        crate::translate::translate(&loaded.resources, &a.common.translate_settings());
    serde_saphyr::to_string(&translation.status.objects())
        .context("cannot render the status as YAML")
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
