//! A closed-loop load generator for new connections: `-c` clients, each opening a connection,
//! doing the TLS handshake (full, or resumed with `--resume`), sending one `Connection: close`
//! request and reading the response, then starting over. It times the **whole connection**, from
//! `connect()` to the last byte of the response, so the time a connection waits in the server's
//! accept queue and for its handshake is in the figure. wrk's latency starts after the handshake.
//!
//! Output uses wrk's line formats for what `scripts/bench-peers.sh` reads (percentiles, request
//! count, `Requests/sec`, socket errors, non-2xx), plus the handshake kinds seen and per-phase
//! percentiles. One thread (pin it with `taskset`); the TLS client is rustls with aws-lc-rs,
//! X25519 only (what wrk's OpenSSL 3.0 sends), no ALPN; certificates are not verified (as wrk),
//! handshake signatures are.
//!
//! Usage: conn-load -c CONNS -d SECS [--resume] [--sni NAME] [--timeout SECS] URL
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::Resumption;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms, aws_lc_rs};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, HandshakeKind, SignatureScheme};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

struct Args {
    conns: usize,
    secs: f64,
    resume: bool,
    sni: Option<String>,
    timeout: Duration,
    tls: bool,
    addr: SocketAddr,
    host: String,
    path: String,
}

fn usage(why: &str) -> ! {
    eprintln!("conn-load: {why}");
    eprintln!("usage: conn-load -c CONNS -d SECS [--resume] [--sni NAME] [--timeout SECS] URL");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut conns = 64;
    let mut secs = 5.0;
    let mut resume = false;
    let mut sni = None;
    let mut timeout = Duration::from_secs(2);
    let mut url = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .unwrap_or_else(|| usage(&format!("{name} needs a value")))
        };
        match a.as_str() {
            "-c" => {
                conns = value("-c")
                    .parse()
                    .unwrap_or_else(|_| usage("-c: a number"))
            }
            "-d" => {
                let v = value("-d");
                secs = v
                    .trim_end_matches('s')
                    .parse()
                    .unwrap_or_else(|_| usage("-d: seconds"))
            }
            "--resume" => resume = true,
            "--sni" => sni = Some(value("--sni")),
            "--timeout" => {
                let v: f64 = value("--timeout")
                    .parse()
                    .unwrap_or_else(|_| usage("--timeout: seconds"));
                timeout = Duration::from_secs_f64(v)
            }
            _ if a.starts_with('-') => usage(&format!("unknown option {a}")),
            _ => url = Some(a),
        }
    }
    let url = url.unwrap_or_else(|| usage("no URL"));
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        usage("the URL must start with http:// or https://")
    };
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr: SocketAddr = host
        .parse()
        .unwrap_or_else(|_| usage("the URL's host must be IP:PORT"));
    if conns == 0 || secs <= 0.0 {
        usage("-c and -d must be positive")
    }
    Args {
        conns,
        secs,
        resume,
        sni,
        timeout,
        tls,
        addr,
        host: host.to_string(),
        path: path.to_string(),
    }
}

/// Accepts any certificate (wrk does not verify either) but checks the handshake's signature
/// with it, so the client does the work a real one does for the server's proof of its key.
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

fn tls_config(resume: bool) -> Arc<rustls::ClientConfig> {
    let provider = CryptoProvider {
        kx_groups: vec![aws_lc_rs::kx_group::X25519],
        ..aws_lc_rs::default_provider()
    };
    let algs = provider.signature_verification_algorithms;
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(algs)))
        .with_no_client_auth();
    config.resumption = if resume {
        Resumption::in_memory_sessions(1024)
    } else {
        Resumption::disabled()
    };
    Arc::new(config)
}

#[derive(Default)]
struct Stats {
    whole: Vec<u32>,
    connect: Vec<u32>,
    handshake: Vec<u32>,
    response: Vec<u32>,
    bytes: u64,
    non2xx: u64,
    err_connect: u64,
    err_read: u64,
    err_write: u64,
    err_timeout: u64,
    full: u64,
    resumed: u64,
    retried: u64,
}

enum Failure {
    Connect,
    Read,
    Write,
}

struct Done {
    connect: Duration,
    handshake: Duration,
    status: u16,
    bytes: usize,
    kind: Option<HandshakeKind>,
}

/// Reads one response (headers, then a Content-Length body or up to EOF); its status and size.
async fn response<S: AsyncRead + Unpin>(s: &mut S) -> Result<(u16, usize), Failure> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let mut head_end = None;
    loop {
        let n = s.read(&mut chunk).await.map_err(|_| Failure::Read)?;
        if n == 0 {
            // EOF: a response without a length ends here; one cut short is an error.
            return match head_end {
                Some(_) if content_length(&buf).is_none() => Ok((status(&buf)?, buf.len())),
                _ => Err(Failure::Read),
            };
        }
        buf.extend_from_slice(&chunk[..n]);
        if head_end.is_none() {
            head_end = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
        }
        if let Some(h) = head_end
            && let Some(len) = content_length(&buf[..h])
            && buf.len() >= h + len
        {
            return Ok((status(&buf)?, buf.len()));
        }
    }
}

fn status(buf: &[u8]) -> Result<u16, Failure> {
    let line = buf.split(|&b| b == b'\n').next().ok_or(Failure::Read)?;
    let code = line.split(|&b| b == b' ').nth(1).ok_or(Failure::Read)?;
    std::str::from_utf8(code)
        .ok()
        .and_then(|c| c.trim().parse().ok())
        .ok_or(Failure::Read)
}

fn content_length(head: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(head).ok()?;
    text.split("\r\n").find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    request: &[u8],
) -> Result<(u16, usize), Failure> {
    s.write_all(request).await.map_err(|_| Failure::Write)?;
    s.flush().await.map_err(|_| Failure::Write)?;
    response(s).await
}

async fn one(
    args: &Args,
    tls: &Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    request: &[u8],
) -> Result<Done, Failure> {
    let t0 = Instant::now();
    let tcp = TcpStream::connect(args.addr)
        .await
        .map_err(|_| Failure::Connect)?;
    let _ = tcp.set_nodelay(true);
    let connect = t0.elapsed();
    match tls {
        None => {
            let mut tcp = tcp;
            let (status, bytes) = exchange(&mut tcp, request).await?;
            Ok(Done {
                connect,
                handshake: Duration::ZERO,
                status,
                bytes,
                kind: None,
            })
        }
        Some((connector, name)) => {
            let mut s = connector
                .connect(name.clone(), tcp)
                .await
                .map_err(|_| Failure::Read)?;
            let handshake = t0.elapsed() - connect;
            let kind = s.get_ref().1.handshake_kind();
            let (status, bytes) = exchange(&mut s, request).await?;
            Ok(Done {
                connect,
                handshake,
                status,
                bytes,
                kind,
            })
        }
    }
}

fn us(d: Duration) -> u32 {
    d.as_micros().min(u32::MAX as u128) as u32
}

async fn client(args: Rc<Args>, stats: Rc<RefCell<Stats>>, end: Instant) {
    let tls = args.tls.then(|| {
        let name = match &args.sni {
            Some(n) => {
                ServerName::try_from(n.clone()).unwrap_or_else(|_| usage("--sni: not a DNS name"))
            }
            None => ServerName::IpAddress(args.addr.ip().into()),
        };
        (
            tokio_rustls::TlsConnector::from(tls_config(args.resume)),
            name,
        )
    });
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        args.path, args.host
    );
    while Instant::now() < end {
        let t0 = Instant::now();
        let r = tokio::time::timeout(args.timeout, one(&args, &tls, request.as_bytes())).await;
        let done = Instant::now();
        if done > end {
            break;
        }
        let mut s = stats.borrow_mut();
        match r {
            Err(_) => s.err_timeout += 1,
            Ok(Err(Failure::Connect)) => s.err_connect += 1,
            Ok(Err(Failure::Read)) => s.err_read += 1,
            Ok(Err(Failure::Write)) => s.err_write += 1,
            Ok(Ok(d)) => {
                s.whole.push(us(done - t0));
                s.connect.push(us(d.connect));
                s.response.push(us(done - t0 - d.connect - d.handshake));
                if args.tls {
                    s.handshake.push(us(d.handshake));
                }
                s.bytes += d.bytes as u64;
                if !(200..400).contains(&d.status) {
                    s.non2xx += 1;
                }
                match d.kind {
                    Some(HandshakeKind::Resumed) => s.resumed += 1,
                    Some(HandshakeKind::FullWithHelloRetryRequest) => s.retried += 1,
                    Some(HandshakeKind::Full) => s.full += 1,
                    None => {}
                }
            }
        }
    }
}

fn pct(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

fn main() {
    let args = Rc::new(parse_args());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    let stats = Rc::new(RefCell::new(Stats::default()));
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.secs);
    local.block_on(&rt, async {
        for _ in 0..args.conns {
            tokio::task::spawn_local(client(args.clone(), stats.clone(), end));
        }
        tokio::time::sleep_until(end.into()).await;
    });
    let mut s = stats.take();
    for v in [
        &mut s.whole,
        &mut s.connect,
        &mut s.handshake,
        &mut s.response,
    ] {
        v.sort_unstable();
    }
    let n = s.whole.len();
    let kind = if !args.tls {
        "plain"
    } else if args.resume {
        "TLS, the client keeps its session"
    } else {
        "TLS, the client keeps no session"
    };
    println!(
        "conn-load {} c={} {:.0}s, a new connection per request ({kind})",
        args.host, args.conns, args.secs
    );
    println!(
        "  Latency Distribution (the whole connection: connect, handshake, request, response)"
    );
    for p in [50.0, 75.0, 90.0, 99.0] {
        println!("  {:>3}%  {}us", p as u32, pct(&s.whole, p));
    }
    println!(
        "  {n} requests in {:.2}s, {} bytes read",
        args.secs, s.bytes
    );
    println!(
        "  Socket errors: connect {}, read {}, write {}, timeout {}",
        s.err_connect, s.err_read, s.err_write, s.err_timeout
    );
    if s.non2xx > 0 {
        println!("  Non-2xx or 3xx responses: {}", s.non2xx);
    }
    println!("Requests/sec: {:.2}", n as f64 / args.secs);
    if args.tls {
        println!(
            "Handshakes: full {}, resumed {}, full after a hello retry {}",
            s.full, s.resumed, s.retried
        );
    }
    let phase = |v: &[u32]| format!("p50 {}us p99 {}us", pct(v, 50.0), pct(v, 99.0));
    println!(
        "Phases: connect {}; handshake (accept queue included) {}; request to response {}",
        phase(&s.connect),
        phase(&s.handshake),
        phase(&s.response)
    );
    // Connections still open at the end are dropped, not waited for.
    std::process::exit(0);
}
