//! The process from the command line to its exit code: parse the CLI, start logging, build the
//! runtime, run the command. In the library rather than the binary (`src/main.rs` only calls
//! [`main`]): code that a binary reaches through generic functions (the runtime's `block_on` of
//! the command's future, the log layers) is compiled again in the binary's crate, which was 26 to
//! 38 s of a first build's serial end (BENCHMARKS.md, "the first build").

use clap::Parser;

use crate::cli::{Cli, Command, LogFormat};

pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let format = match &cli.command {
        Command::Run(a) => a.log_format,
        _ => LogFormat::Text,
    };
    // `pier check --kubeconfig` reports what goes wrong itself; the watches it starts would
    // log the same problems again.
    let quiet = matches!(&cli.command, Command::Check(a) if a.kubeconfig.is_some());
    init_logging(format, quiet);
    #[cfg(feature = "jemalloc")]
    if matches!(cli.command, Command::Run(_)) {
        purge_in_the_background();
    }
    // One crypto provider for the whole process (kube's client, listeners, upstream TLS).
    crate::tls::provider::install_default();
    let workers = match worker_threads() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let workers =
        workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let (spin, shared_runtime) = match (idle_spin(workers), work_stealing()) {
        (Ok(s), Ok(w)) => (s, w),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // One worker: a current-thread runtime (no work-stealing queues, no cross-thread wakeups),
    // as a 1-worker nginx runs one event loop. Several: thread per core (one current-thread
    // runtime per worker, each accepting on its own SO_REUSEPORT socket, as nginx's worker
    // processes), the control plane on the main thread's runtime; or, with
    // PIER_WORK_STEALING=1, one work-stealing pool for everything.
    // Commands other than `run` serve no traffic: no worker threads for them.
    let per_core = workers > 1 && !shared_runtime && matches!(cli.command, Command::Run(_));
    let mut builder = if workers > 1 && !per_core {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    if per_core {
        match crate::proxy::workers::Workers::start(workers, spin) {
            Ok(w) => w.install(),
            Err(e) => {
                eprintln!("error: cannot start the worker threads: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    } else {
        crate::proxy::workers::spin_before_parking(&mut builder, spin);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(crate::commands::dispatch(cli.command)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `PIER_WORKER_THREADS`: the number of runtime worker threads (default: one per core). Pinned
/// benchmarks run pier with 1 on one core, like the 1-worker nginx and HAProxy they compare to.
fn worker_threads() -> Result<Option<usize>, String> {
    const NAME: &str = "PIER_WORKER_THREADS";
    match env_number(NAME)? {
        None => Ok(None),
        Some(n) if n > 0 => Ok(Some(n as usize)),
        Some(n) => Err(format!("{NAME} must be a positive integer, got {n}")),
    }
}

/// `PIER_WORK_STEALING`: 1 runs the data plane on one work-stealing runtime instead of thread
/// per core (the default with several workers); 0 or unset: thread per core.
fn work_stealing() -> Result<bool, String> {
    const NAME: &str = "PIER_WORK_STEALING";
    match env_number(NAME)? {
        None | Some(0) => Ok(false),
        Some(1) => Ok(true),
        Some(n) => Err(format!("{NAME} must be 0 or 1, got {n}")),
    }
}

/// `PIER_IDLE_SPIN_US`: how long a runtime worker spins before it sleeps for I/O, in
/// microseconds; 0 turns it off. Default: 20 with one worker (a pinned single worker owns its
/// core), 0 with several, where a spinning worker takes the CPU that the other workers, the
/// kernel's network processing and neighbours need (docs/src/history/benchmarks.md, "Two workers").
fn idle_spin(workers: usize) -> Result<std::time::Duration, String> {
    const NAME: &str = "PIER_IDLE_SPIN_US";
    let default = if workers > 1 { 0 } else { 20 };
    match env_number(NAME)?.unwrap_or(default) {
        us if us <= 10_000 => Ok(std::time::Duration::from_micros(us)),
        us => Err(format!(
            "{NAME} must be a number of microseconds from 0 to 10000, got {us}"
        )),
    }
}

/// A whole number from the environment variable `name`; `None` when unset or empty.
fn env_number(name: &str) -> Result<Option<u64>, String> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) => Ok(Some(n)),
            Err(_) => Err(format!("{name} must be a whole number, got {v:?}")),
        },
        Err(e) => Err(format!("{name}: {e}")),
    }
}

/// Colour in text logs only on a terminal, and never with `NO_COLOR` set (no-color.org):
/// journald, files and pipes get plain text.
fn log_colour() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// jemalloc hands freed pages back to the system only as the process allocates and frees, so
/// an idle gateway (thousands of parked keep-alive connections, no traffic) would keep the
/// memory of its last burst resident; its background thread purges on a timer instead (9 000
/// idle connections: 2.5–2.9 against 3.5–4.6 KiB each, BENCHMARKS.md). An explicit
/// `background_thread` in `_RJEM_MALLOC_CONF` wins.
#[cfg(feature = "jemalloc")]
fn purge_in_the_background() {
    let chosen = std::env::var("_RJEM_MALLOC_CONF").is_ok_and(|c| c.contains("background_thread"));
    if chosen {
        return;
    }
    // One thread is enough for a proxy's arenas (jemalloc's default is one per CPU).
    let started = tikv_jemalloc_ctl::max_background_threads::write(1)
        .and_then(|()| tikv_jemalloc_ctl::background_thread::write(true));
    if let Err(error) = started {
        tracing::warn!(%error, "jemalloc's background purging thread did not start");
    }
}

fn init_logging(format: LogFormat, quiet: bool) {
    use crate::log_limit::RateLimited;
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::prelude::*;
    // kube's client logs every failed request at ERROR, without saying what it was for; pier
    // logs watch failures itself, once for all kinds while the API server is unreachable.
    let default = if quiet {
        "error,kube_client::client::builder=off"
    } else {
        "info,kube_client::client::builder=off"
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let registry = tracing_subscriber::registry().with(filter);
    // Repeated warnings (an attack can raise thousands a second) are rate-limited per call
    // site; see `crate::log_limit`.
    match format {
        LogFormat::Json => registry
            .with(RateLimited::new(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            ))
            .init(),
        LogFormat::Text => registry
            .with(RateLimited::new(
                tracing_subscriber::fmt::layer()
                    .with_ansi(log_colour())
                    .with_writer(std::io::stderr),
            ))
            .init(),
    }
}
