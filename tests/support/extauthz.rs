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
    let mut child = Command::new(binary())
        .args(["-slow", slow])
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
