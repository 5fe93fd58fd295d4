//! TEMPORARY stub on main; replaced by the proxy branch.
pub struct EchoServer {
    pub addr: std::net::SocketAddr,
}
pub async fn spawn(addr: std::net::SocketAddr, _name: &str) -> std::io::Result<EchoServer> {
    Ok(EchoServer { addr })
}
