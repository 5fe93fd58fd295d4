//! The JSON access log (as `--log-format json` writes it), captured per test thread.

use std::sync::{Arc, Mutex};

/// What a subscriber wrote.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// The `pier::access` lines so far, parsed: their `fields` (each line has a timestamp).
    pub fn access_lines(&self) -> Vec<serde_json::Value> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| v["target"] == "pier::access")
            .map(|v| {
                assert!(v["timestamp"].is_string(), "{v}");
                v["fields"].clone()
            })
            .collect()
    }
}

/// A JSON subscriber for this thread. On a current_thread runtime (`#[tokio::test]`'s
/// default) the proxy's tasks run here, so their lines are captured.
pub fn capture_json() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::INFO)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}
