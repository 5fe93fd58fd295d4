//! nginx from Debian as a real third-party peer: an HTTPS origin that requires a client
//! certificate (`ssl_verify_client on`). Started per test on a free loopback port, in its own
//! temporary prefix, as a single foreground process; killed on drop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Nginx {
    pub addr: SocketAddr,
    child: Child,
    dir: tempfile::TempDir,
}

fn binary() -> PathBuf {
    for p in ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"] {
        if std::path::Path::new(p).exists() {
            return p.into();
        }
    }
    panic!(
        "nginx is not installed: run ./scripts/test (it installs Debian's nginx) or apt-get install nginx"
    );
}

impl Nginx {
    /// An mTLS origin serving `cert_pem`/`key_pem`, requiring a client certificate that chains
    /// to `client_ca_pem`. Every answer is 200 with body
    /// `verify=<$ssl_client_verify> dn=<$ssl_client_s_dn> proto=<$server_protocol>`.
    pub async fn mtls(cert_pem: &str, key_pem: &str, client_ca_pem: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(p.join("server.crt"), cert_pem).unwrap();
        std::fs::write(p.join("server.key"), key_pem).unwrap();
        std::fs::write(p.join("client-ca.crt"), client_ca_pem).unwrap();
        std::fs::create_dir_all(p.join("tmp")).unwrap();
        let port = super::free_port();
        let conf = format!(
            "daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {dir}/server.crt;
        ssl_certificate_key {dir}/server.key;
        ssl_client_certificate {dir}/client-ca.crt;
        ssl_verify_client on;
        ssl_verify_depth 2;
        location / {{
            default_type text/plain;
            return 200 \"verify=$ssl_client_verify dn=$ssl_client_s_dn proto=$server_protocol host=$host\\n\";
        }}
    }}
}}
",
            dir = p.display()
        );
        std::fs::write(p.join("nginx.conf"), conf).unwrap();
        let child = Command::new(binary())
            .arg("-p")
            .arg(p)
            .arg("-c")
            .arg(p.join("nginx.conf"))
            .arg("-e")
            .arg(p.join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut n = Self { addr, child, dir };
        let start = Instant::now();
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            if let Some(status) = n.child.try_wait().unwrap() {
                panic!("nginx exited with {status}: {}", n.error_log());
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "nginx did not start: {}",
                n.error_log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        n
    }

    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
