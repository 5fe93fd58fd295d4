//! The admin server: `/healthz`, `/readyz`, `/metrics`, `/config`, `/status`.
//! Loopback by default (`--admin 127.0.0.1:9901`). `/config` summarises the active configuration
//! ([`summary`]); `/config?full` shows the whole snapshot, which by construction holds no key
//! material (certificates are shown by name only). With a token
//! (`--admin-token-file`) every path but the probes (`/healthz`, `/readyz`) needs
//! `Authorization: Bearer <token>`, for operators who expose the admin port beyond loopback.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

use crate::publish::{Readiness, Shared};

pub mod summary;

pub struct AdminState {
    pub shared: Arc<Shared>,
    /// `--listen-host`: where ports without a Gateway address of their own are bound.
    pub listen_host: std::net::IpAddr,
    pub registry: Registry,
    /// Required as a bearer token on everything but the probes, when set; replaced when its
    /// file changes ([`watch_token`]).
    pub token: arc_swap::ArcSwapOption<AdminToken>,
}

/// The admin bearer token. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(Arc<[u8]>);

impl AdminToken {
    /// The token in `path` (surrounding white space trimmed); an empty one is an error.
    pub fn read(path: &std::path::Path) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the admin token file {}", path.display()))?;
        let token = text.trim();
        anyhow::ensure!(
            !token.is_empty(),
            "the admin token file {} is empty",
            path.display()
        );
        Ok(Self(token.as_bytes().into()))
    }

    /// Does the request carry `Authorization: Bearer <this token>`? Compared in constant time.
    fn admits<B>(&self, req: &Request<B>) -> bool {
        let Some(given) = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        else {
            return false;
        };
        given.len() == self.0.len()
            && given
                .iter()
                .zip(self.0.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// Re-reads the token file whenever it changes (written in place or replaced by rename, as
/// a Secret volume or `install` does) until `shutdown`: new requests need the new token at
/// once. A file that cannot be read or is empty keeps the previous token (a WARN says so).
pub fn watch_token(
    path: std::path::PathBuf,
    state: Arc<AdminState>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use anyhow::Context as _;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path.file_name().map(ToOwned::to_owned);
    let (guard, mut changes) = crate::source::files::watch(&dir, move |p, e| {
        e == crate::source::files::Entry::File
            && p.file_name().is_some_and(|n| Some(n) == name.as_deref())
    })
    .with_context(|| {
        format!(
            "cannot watch the admin token file's directory {}",
            dir.display()
        )
    })?;
    Ok(tokio::spawn(async move {
        let _guard = guard;
        loop {
            tokio::select! {
                change = changes.recv() => if change.is_none() { return },
                _ = shutdown.wait_for(|s| *s) => return,
            }
            let read = {
                let path = path.clone();
                tokio::task::spawn_blocking(move || AdminToken::read(&path)).await
            };
            match read {
                Ok(Ok(token)) => {
                    if state.token.load().as_deref() != Some(&token) {
                        state.token.store(Some(Arc::new(token)));
                        tracing::info!(file = %path.display(), "admin token reloaded");
                    }
                }
                Ok(Err(e)) => tracing::warn!(
                    error = format!("{e:#}"),
                    "cannot reload the admin token; the previous token stays"
                ),
                Err(e) => tracing::warn!(error = %e, "admin token reload failed"),
            }
        }
    }))
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

/// Serves until `shutdown` turns true.
pub async fn serve(listener: TcpListener, state: Arc<AdminState>, shutdown: watch::Receiver<bool>) {
    accept_loop(
        || async { listener.accept().await.map(|(s, _)| s) },
        state,
        shutdown,
    )
    .await;
}

/// [`serve`] on a Unix socket (`--admin-socket`); removes the socket file when it stops.
pub async fn serve_unix(
    listener: UnixListener,
    path: PathBuf,
    state: Arc<AdminState>,
    shutdown: watch::Receiver<bool>,
) {
    accept_loop(
        || async { listener.accept().await.map(|(s, _)| s) },
        state,
        shutdown,
    )
    .await;
    let _ = std::fs::remove_file(&path);
}

/// Accepts connections with `accept` and serves each, until `shutdown` turns true.
async fn accept_loop<A, F, S>(
    mut accept: A,
    state: Arc<AdminState>,
    mut shutdown: watch::Receiver<bool>,
) where
    A: FnMut() -> F,
    F: std::future::Future<Output = std::io::Result<S>>,
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    loop {
        let stream = tokio::select! {
            r = accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    continue;
                }
            },
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => return,
        };
        serve_connection(stream, state.clone(), shutdown.clone());
    }
}

/// Binds the admin Unix socket at `path`, readable and writable by its owner and group only
/// (0660): who may talk to it is the file's permissions. A socket file left by an earlier run is
/// replaced; any other file at `path` is an error (it is never deleted).
pub fn bind_unix(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    Ok(listener)
}

/// Serves one connection; at shutdown a keep-alive connection is closed once its request in
/// progress is answered (a scraper's connection does not outlive pier's shutdown).
fn serve_connection<S>(stream: S, state: Arc<AdminState>, mut shutdown: watch::Receiver<bool>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let svc = service_fn(move |req| {
            let state = state.clone();
            async move { Ok::<_, Infallible>(handle(&state, &req)) }
        });
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(std::time::Duration::from_secs(5))
            .serve_connection(TokioIo::new(stream), svc);
        tokio::pin!(conn);
        let result = tokio::select! {
            r = conn.as_mut() => r,
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "admin connection error");
        }
    });
}

/// The admin listener; with `reuse_port` (`--reuse-port`) a new pier can bind it during a
/// zero-downtime restart (either process may then answer until the old one exits).
pub async fn bind(addr: SocketAddr, reuse_port: bool) -> std::io::Result<TcpListener> {
    crate::proxy::listen(addr, reuse_port)
}

fn handle(state: &AdminState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    let probe = matches!(req.uri().path(), "/healthz" | "/readyz");
    if let Some(token) = &*state.token.load()
        && !probe
        && !token.admits(req)
    {
        let mut resp = text(StatusCode::UNAUTHORIZED, "a bearer token is required\n");
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
        return resp;
    }
    match req.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" => match state.shared.readiness() {
            Readiness::Ready => text(StatusCode::OK, "ready\n"),
            Readiness::ServingNothing(why) => text(StatusCode::OK, format!("ready, {why}\n")),
            Readiness::NotReady(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        },
        "/metrics" => {
            let mut out = String::new();
            match prometheus_client::encoding::text::encode(&mut out, &state.registry) {
                Ok(()) => Response::builder()
                    .header(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )
                    .body(Full::new(Bytes::from(out)))
                    .expect("static response parts are valid"),
                Err(_) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "metrics encoding failed\n",
                ),
            }
        }
        "/config" if wants_full(req.uri().query()) => json(&*state.shared.snapshot.load_full()),
        "/config" => json(&summary::summary(
            &state.shared.snapshot.load_full(),
            &state.shared.unserved.load(),
            &state.shared.mesh.load(),
            state.listen_host,
            unix_now(),
        )),
        "/status" => json(&**state.shared.translation_status.load()),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /healthz /readyz /metrics /config /status\n",
        ),
    }
}

/// `/config?full` (any value, e.g. `?full=1`): the whole snapshot instead of the summary.
fn wants_full(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|kv| kv.split('=').next() == Some("full")))
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(body.into()))
        .expect("static response parts are valid")
}

fn json<T: serde::Serialize + ?Sized>(v: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec_pretty(v) {
        Ok(body) => Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("static response parts are valid"),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "serialization failed\n"),
    }
}
