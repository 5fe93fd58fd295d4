//! zitadel/oidc's example OpenID Provider (built by `scripts/oidc-provider.sh`): an in-memory
//! OP at `http://localhost:<port>/` with discovery, a JWKS, the code flow with PKCE and a
//! login form (user `test-user@localhost`, password `verysecure`; client `web`, secret
//! `secret`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::web::{Child, eventually, try_get};

pub const USER: &str = "test-user@localhost";
pub const PASSWORD: &str = "verysecure";
pub const CLIENT_ID: &str = "web";
pub const CLIENT_SECRET: &str = "secret";

pub struct Provider {
    pub port: u16,
    _child: Child,
}

fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("PIER_OIDC_PROVIDER") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("PIER_OIDC_PROVIDER_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/pier/oidc-provider")
        });
    let version = std::env::var("PIER_OIDC_PROVIDER_VERSION").unwrap_or_else(|_| {
        super::pinned_version(
            include_str!("../../scripts/oidc-provider.sh"),
            "OIDC_PROVIDER_VERSION",
        )
    });
    let bin = cache.join(format!("v{version}/oidc-provider"));
    assert!(
        bin.is_file(),
        "{} not found: run `scripts/oidc-provider.sh build`, or set PIER_OIDC_PROVIDER",
        bin.display()
    );
    bin
}

impl Provider {
    /// Starts the provider, accepting logins that come back to `redirect_uris`.
    pub async fn start(redirect_uris: &[String]) -> Provider {
        let port = super::free_port();
        let child = Child(
            Command::new(binary())
                .env("PORT", port.to_string())
                .env("REDIRECT_URI", redirect_uris.join(","))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("the OIDC provider starts"),
        );
        eventually(Duration::from_secs(20), || async move {
            try_get(
                &format!("http://127.0.0.1:{port}/.well-known/openid-configuration"),
                &[],
            )
            .await
            .is_some_and(|r| r.status == 200)
        })
        .await;
        Provider {
            port,
            _child: child,
        }
    }

    pub fn issuer(&self) -> String {
        format!("http://localhost:{}/", self.port)
    }
}
