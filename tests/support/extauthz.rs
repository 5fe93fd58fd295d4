//! The real external authorizer (`tests/extauthz`, built by `scripts/extauthz.sh`): Envoy's
//! ext_authz gRPC service from go-control-plane and an HTTP authorizer with the same decision
//! (`Bearer good` allowed with `x-user: alice`; `Bearer slow`, `Bearer garbage`; others
//! denied: 403, or 401 without credentials).
//!
//! The binary comes from `PIER_EXTAUTHZ`, else from the cache `scripts/extauthz.sh build`
//! fills; missing, the test fails (never skips). The process is killed on drop.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::web::Child;

pub struct Authorizer {
    _child: Child,
    /// Envoy's `Authorization/Check` over h2c.
    pub grpc: SocketAddr,
    /// The HTTP authorizer.
    pub http: SocketAddr,
}

pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("PIER_EXTAUTHZ") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("PIER_EXTAUTHZ_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").expect("HOME is set")).join(".cache/pier/extauthz")
        });
    let version = std::env::var("PIER_EXTAUTHZ_VERSION").unwrap_or_else(|_| {
        super::pinned_version(
            include_str!("../../scripts/extauthz.sh"),
            "EXTAUTHZ_VERSION",
        )
    });
    let bin = cache.join(format!("v{version}/extauthz"));
    assert!(
        bin.is_file(),
        "{} not found: run `scripts/extauthz.sh build`, or set PIER_EXTAUTHZ",
        bin.display()
    );
    bin
}

/// Starts the authorizer on two free loopback ports; `slow` is how long `Bearer slow` waits.
pub fn start(slow: &str) -> Authorizer {
    start_at(slow, std::net::Ipv4Addr::LOCALHOST.into())
}

/// [`start`] on two free ports of `ip` (a cluster's EndpointSlice may not name loopback).
pub fn start_at(slow: &str, ip: std::net::IpAddr) -> Authorizer {
    let listen = SocketAddr::new(ip, 0).to_string();
    let mut child = Command::new(binary())
        .args(["-slow", slow, "-grpc", &listen, "-http", &listen])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("extauthz starts");
    let stdout = child.stdout.take().unwrap();
    let child = Child(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("extauthz prints its addresses");
    let addr = |key: &str| -> SocketAddr {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {line:?}"))
            .parse()
            .unwrap()
    };
    Authorizer {
        grpc: addr("grpc="),
        http: addr("http="),
        _child: child,
    }
}

/// oauth2-proxy (`scripts/oauth2-proxy.sh`): `PIER_OAUTH2_PROXY`, else the cache; missing,
/// the test fails.
pub fn oauth2_proxy_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("PIER_OAUTH2_PROXY") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("PIER_OAUTH2_PROXY_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/pier/oauth2-proxy")
        });
    let version = std::env::var("PIER_OAUTH2_PROXY_VERSION").unwrap_or_else(|_| {
        super::pinned_version(
            include_str!("../../scripts/oauth2-proxy.sh"),
            "OAUTH2_PROXY_VERSION",
        )
    });
    let bin = cache.join(format!("v{version}/oauth2-proxy"));
    assert!(
        bin.is_file(),
        "{} not found: run `scripts/oauth2-proxy.sh build`, or set PIER_OAUTH2_PROXY",
        bin.display()
    );
    bin
}

/// oauth2-proxy on `addr`, its users in the htpasswd file `users` (signing in with
/// `Authorization: Basic`), its upstream a static 202: `/oauth2/auth...` answers 202 with
/// `X-Auth-Request-User` to a signed-in user, a 403 sign-in page to anyone else.
pub fn oauth2_proxy(addr: SocketAddr, users: &Path) -> Child {
    let child = Command::new(oauth2_proxy_binary())
        .args([
            format!("--http-address={addr}"),
            "--provider=github".into(),
            "--client-id=pier".into(),
            "--client-secret=pier".into(),
            "--cookie-secret=0123456789abcdef0123456789abcdef".into(),
            "--cookie-secure=false".into(),
            "--email-domain=*".into(),
            "--upstream=static://202".into(),
            format!("--htpasswd-file={}", users.display()),
            "--set-xauthrequest".into(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("oauth2-proxy starts");
    Child(child)
}
