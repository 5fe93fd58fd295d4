//! TEMPORARY: filled in after the echo server lands.
pub async fn run(_listen_host: std::net::IpAddr) -> anyhow::Result<()> {
    anyhow::bail!("demo: not yet")
}
