//! Session persistence on the way through (GEP-1619): the live session a request carries,
//! and the session handed out (or refreshed) with the response of the endpoint that answered.

use std::net::SocketAddr;

use http::Response;

use crate::model::session::{Session, SessionPolicy};

/// A request under a session persistence policy.
pub struct SessionReq<'s> {
    pub policy: &'s SessionPolicy,
    /// Unix seconds.
    pub now: u64,
    /// The live session the request carries, if any.
    pub carried: Option<Session>,
    pub https: bool,
}

impl SessionReq<'_> {
    /// Hands out (or refreshes) the session for the endpoint that answered.
    pub fn answer<B>(&self, resp: &mut Response<B>, endpoint: SocketAddr) {
        let session = self
            .policy
            .continue_or_start(self.carried, endpoint, self.now);
        if let Some((name, value)) = self.policy.issue(session, self.carried, self.https) {
            resp.headers_mut().append(name, value);
        }
    }
}

/// Wall-clock Unix seconds (session tokens carry them; everything else uses the monotonic
/// clock).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
