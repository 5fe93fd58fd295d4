//! A closed-loop HTTP/3 load generator: `-c` QUIC connections, each with `-m` request loops
//! (streams in flight), each sending `GET URL` and reading the whole answer, then the next,
//! for `-d` seconds. Prints h2load's summary lines that scripts read (`finished in ...,
//! N req/s`, `requests: ... succeeded, F failed, E errored`) and the latency percentiles in
//! ms. One thread (pin it with `taskset`); certificates are not verified (as h2load), the
//! handshake's signatures are.
//!
//! Usage: h3-load -c CONNS -m STREAMS -d SECS [--sni NAME] https://IP:PORT/PATH

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms, aws_lc_rs};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

struct Args {
    conns: usize,
    streams: usize,
    secs: f64,
    sni: String,
    addr: SocketAddr,
    authority: String,
    path: String,
}

fn usage(why: &str) -> ! {
    eprintln!("h3-load: {why}");
    eprintln!("usage: h3-load -c CONNS -m STREAMS -d SECS [--sni NAME] https://IP:PORT/PATH");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let (mut conns, mut streams, mut secs, mut sni, mut url) = (16, 10, 5.0, None, None);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .unwrap_or_else(|| usage(&format!("{name} needs a value")))
        };
        match a.as_str() {
            "-c" => conns = value("-c").parse().unwrap_or_else(|_| usage("-c: a number")),
            "-m" => streams = value("-m").parse().unwrap_or_else(|_| usage("-m: a number")),
            "-d" => secs = value("-d").parse().unwrap_or_else(|_| usage("-d: seconds")),
            "--sni" => sni = Some(value("--sni")),
            u if u.starts_with("https://") => url = Some(u.to_string()),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    let url: http::Uri = url
        .unwrap_or_else(|| usage("no URL"))
        .parse()
        .unwrap_or_else(|_| usage("a bad URL"));
    let authority = url.authority().unwrap_or_else(|| usage("no host")).to_string();
    let addr: SocketAddr = authority
        .parse()
        .unwrap_or_else(|_| usage("the URL's host must be IP:PORT"));
    let path = url.path_and_query().map_or("/", |p| p.as_str()).to_string();
    Args {
        conns,
        streams,
        secs,
        sni: sni.unwrap_or_else(|| addr.ip().to_string()),
        addr,
        authority,
        path,
    }
}

/// Accepts any certificate; checks the handshake's signatures.
#[derive(Debug)]
struct AnyCert(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCert {
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
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[derive(Default)]
struct Tally {
    ok: u64,
    failed: u64,
    errored: u64,
    /// Microseconds per request (successful and failed answers).
    times: Vec<u32>,
}

fn main() {
    let args = parse_args();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, run(args));
}

async fn run(args: Args) {
    let provider = Arc::new(aws_lc_rs::default_provider());
    let verifier = Arc::new(AnyCert(provider.signature_verification_algorithms));
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone() as Arc<CryptoProvider>)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(tls)).unwrap();
    let config = quinn::ClientConfig::new(Arc::new(crypto));
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(config);
    let tally = Rc::new(RefCell::new(Tally::default()));
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.secs);
    let uri: http::Uri = format!("https://{}{}", args.authority, args.path).parse().unwrap();
    let mut conns = Vec::new();
    for _ in 0..args.conns {
        let conn = match endpoint.connect(args.addr, &args.sni).unwrap().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("h3-load: connection failed: {e}");
                tally.borrow_mut().errored += 1;
                continue;
            }
        };
        let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn)).await.unwrap();
        tokio::task::spawn_local(async move {
            std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        for _ in 0..args.streams {
            let (mut send, tally, uri) = (send.clone(), tally.clone(), uri.clone());
            conns.push(tokio::task::spawn_local(async move {
                while Instant::now() < end {
                    let t = Instant::now();
                    let result = one(&mut send, &uri).await;
                    let us = u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX);
                    let mut tally = tally.borrow_mut();
                    match result {
                        Ok(true) => tally.ok += 1,
                        Ok(false) => tally.failed += 1,
                        Err(e) => {
                            tally.errored += 1;
                            if tally.errored < 5 {
                                eprintln!("h3-load: {e}");
                            }
                            drop(tally);
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    }
                    tally.times.push(us);
                }
            }));
        }
    }
    for c in conns {
        let _ = c.await;
    }
    let secs = start.elapsed().as_secs_f64();
    let mut t = tally.borrow_mut();
    let total = t.ok + t.failed + t.errored;
    println!(
        "finished in {secs:.2}s, {:.2} req/s, 0B/s",
        (t.ok + t.failed) as f64 / secs
    );
    println!(
        "requests: {total} total, {total} started, {total} done, {} succeeded, {} failed, {} errored, 0 timeout",
        t.ok, t.failed, t.errored
    );
    t.times.sort_unstable();
    let pct = |p: f64| -> f64 {
        if t.times.is_empty() {
            return 0.0;
        }
        let i = ((t.times.len() as f64 * p) as usize).min(t.times.len() - 1);
        f64::from(t.times[i]) / 1000.0
    };
    println!(
        "latency ms: p50 {:.2} p90 {:.2} p99 {:.2} max {:.2}",
        pct(0.50),
        pct(0.90),
        pct(0.99),
        pct(1.0)
    );
    endpoint.close(0u32.into(), b"");
}

/// One GET: `Ok(true)` for a 2xx answer read to its end.
async fn one(
    send: &mut h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    uri: &http::Uri,
) -> Result<bool, String> {
    let req = http::Request::get(uri.clone()).body(()).unwrap();
    let mut stream = send.send_request(req).await.map_err(|e| e.to_string())?;
    stream.finish().await.map_err(|e| e.to_string())?;
    let resp = stream.recv_response().await.map_err(|e| e.to_string())?;
    while let Some(mut chunk) = stream.recv_data().await.map_err(|e| e.to_string())? {
        chunk.advance(chunk.remaining());
    }
    Ok(resp.status().is_success())
}
