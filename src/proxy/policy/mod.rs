//! The policy stage: what a request comes to, decided purely from the snapshot and the request
//! head (no I/O, no `Shared`). [`route`]: listener, route, rule, redirect and CORS answers, the
//! backendRef; [`head`]: request and response header rewrites; [`access`]: the rule's access
//! policies (who may come in); [`compress`]: which encoding a response may get. Both request
//! paths reach these through `phase`.

pub mod access;
pub mod compress;
pub mod head;
pub mod route;
