//! Rate-limited warnings: under attack the same warning can fire thousands of times a second
//! (the HTTP/2 library warns once per connection it closes for a reset flood; an accept loop
//! at the open-files limit warns every 50 ms). [`RateLimited`] wraps the log output layer and
//! lets each WARN or ERROR call site through at most [`BURST`] times per [`WINDOW`]; the rest
//! are counted, and the first one let through after a window that dropped some is preceded by
//! one `pier::log` warning that says how many were suppressed and where. INFO and below (the
//! access log among them) are never limited.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::callsite::Identifier;
use tracing::field::Value;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Events per call site per window.
pub const BURST: u32 = 10;
pub const WINDOW: Duration = Duration::from_secs(10);

/// A layer that passes events to `inner`, rate-limiting warnings and errors per call site.
pub struct RateLimited<L> {
    inner: L,
    sites: Mutex<HashMap<Identifier, Site>>,
}

#[derive(Debug)]
struct Site {
    window: Instant,
    passed: u32,
    suppressed: u64,
}

/// What to do with one event.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Pass,
    /// Pass, after saying that this many were dropped.
    PassAfter(u64),
    Drop,
}

impl<L> RateLimited<L> {
    pub fn new(inner: L) -> Self {
        // Register the summary's call site now, not from inside an event.
        let _ = summary_metadata();
        Self {
            inner,
            sites: Mutex::new(HashMap::new()),
        }
    }

    fn verdict(&self, meta: &Metadata<'_>, now: Instant) -> Verdict {
        if *meta.level() > Level::WARN {
            return Verdict::Pass;
        }
        let mut sites = self.sites.lock().unwrap_or_else(|e| e.into_inner());
        let site = sites.entry(meta.callsite()).or_insert(Site {
            window: now,
            passed: 0,
            suppressed: 0,
        });
        site.admit(now)
    }
}

impl Site {
    fn admit(&mut self, now: Instant) -> Verdict {
        if now.duration_since(self.window) >= WINDOW {
            let dropped = std::mem::take(&mut self.suppressed);
            self.window = now;
            self.passed = 1;
            return if dropped > 0 {
                Verdict::PassAfter(dropped)
            } else {
                Verdict::Pass
            };
        }
        if self.passed < BURST {
            self.passed += 1;
            Verdict::Pass
        } else {
            self.suppressed += 1;
            Verdict::Drop
        }
    }
}

fn summary_metadata() -> &'static Metadata<'static> {
    use tracing::callsite::Callsite;
    let cs = tracing::callsite! {
        name: "log_suppressed",
        kind: tracing::metadata::Kind::EVENT,
        target: "pier::log",
        level: Level::WARN,
        fields: message, suppressed, target, location
    };
    cs.metadata()
}

impl<S, L> Layer<S> for RateLimited<L>
where
    S: Subscriber,
    L: Layer<S>,
{
    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        self.inner.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.inner.on_layer(subscriber);
    }

    fn register_callsite(
        &self,
        metadata: &'static Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        self.inner.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.enabled(metadata, ctx)
    }

    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        self.inner.on_new_span(attrs, id, ctx);
    }

    fn on_record(
        &self,
        span: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: Context<'_, S>,
    ) {
        self.inner.on_record(span, values, ctx);
    }

    fn on_follows_from(
        &self,
        span: &tracing::span::Id,
        follows: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        self.inner.on_follows_from(span, follows, ctx);
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let meta = event.metadata();
        match self.verdict(meta, Instant::now()) {
            Verdict::Drop => {}
            Verdict::Pass => self.inner.on_event(event, ctx),
            Verdict::PassAfter(n) => {
                let summary = summary_metadata();
                let fields = summary.fields();
                let location = format!(
                    "{}:{}",
                    meta.file().unwrap_or("?"),
                    meta.line().unwrap_or(0)
                );
                let message = format_args!("repeated warnings suppressed in the last {WINDOW:?}");
                let (Some(f_message), Some(f_suppressed), Some(f_target), Some(f_location)) = (
                    fields.field("message"),
                    fields.field("suppressed"),
                    fields.field("target"),
                    fields.field("location"),
                ) else {
                    return self.inner.on_event(event, ctx);
                };
                let values: [(&tracing::field::Field, Option<&dyn Value>); 4] = [
                    (&f_message, Some(&message as &dyn Value)),
                    (&f_suppressed, Some(&n as &dyn Value)),
                    (&f_target, Some(&meta.target() as &dyn Value)),
                    (&f_location, Some(&location.as_str() as &dyn Value)),
                ];
                let values = fields.value_set(&values);
                let summary_event = Event::new(summary, &values);
                self.inner.on_event(&summary_event, ctx.clone());
                self.inner.on_event(event, ctx);
            }
        }
    }

    fn on_enter(&self, id: &tracing::span::Id, ctx: Context<'_, S>) {
        self.inner.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &tracing::span::Id, ctx: Context<'_, S>) {
        self.inner.on_exit(id, ctx);
    }

    fn on_close(&self, id: tracing::span::Id, ctx: Context<'_, S>) {
        self.inner.on_close(id, ctx);
    }

    fn on_id_change(&self, old: &tracing::span::Id, new: &tracing::span::Id, ctx: Context<'_, S>) {
        self.inner.on_id_change(old, new, ctx);
    }
}

/// For unit tests that look at what was logged.
#[cfg(test)]
pub(crate) mod capture {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    /// A writer into a shared buffer (give a clone to the subscriber).
    #[derive(Clone, Default)]
    pub struct Buf(pub Arc<Mutex<Vec<u8>>>);

    impl Buf {
        /// What was written so far.
        pub fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// Runs `f` with its log lines (DEBUG and up, plain text, no time) captured: its result and
    /// the lines.
    pub fn logged<R>(f: impl FnOnce() -> R) -> (R, String) {
        let captured = Buf::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_max_level(tracing::Level::DEBUG)
            .without_time()
            .with_ansi(false)
            .finish();
        let r = tracing::subscriber::with_default(subscriber, f);
        (r, captured.text())
    }

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::capture::Buf;
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn a_site_passes_its_burst_then_drops_then_reports_the_count() {
        let t0 = Instant::now();
        let mut site = Site {
            window: t0,
            passed: 0,
            suppressed: 0,
        };
        for _ in 0..BURST {
            assert_eq!(site.admit(t0), Verdict::Pass);
        }
        for _ in 0..5000 {
            assert_eq!(site.admit(t0 + Duration::from_secs(1)), Verdict::Drop);
        }
        assert_eq!(site.admit(t0 + WINDOW), Verdict::PassAfter(5000));
        assert_eq!(site.admit(t0 + WINDOW), Verdict::Pass);
    }

    #[test]
    fn a_flood_of_one_warning_writes_a_burst_and_info_is_never_limited() {
        let buf = Buf::default();
        let writer = buf.clone();
        let fmt = tracing_subscriber::fmt::layer()
            .with_writer(move || writer.clone())
            .with_ansi(false);
        let subscriber = tracing_subscriber::registry().with(RateLimited::new(fmt));
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..5000 {
                tracing::warn!(i, "flooded warning");
                tracing::info!(i, "access line");
            }
        });
        let out = buf.text();
        assert_eq!(out.matches("flooded warning").count(), BURST as usize);
        assert_eq!(out.matches("access line").count(), 5000);
    }
}
