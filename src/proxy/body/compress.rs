//! A response body compressed as it streams ([`Compressed`]): never whole in memory, flushed
//! whenever the upstream pauses, so a stream (server-sent JSON lines, a slow page) reaches the
//! client as it comes rather than when the encoder's buffer fills.
//!
//! ```text
//! upstream frame ─> encoder (no flush) ─> out ≥ 16 KiB: a frame to the client
//! upstream pending ─> flush ─> what the encoder had: a frame; then wait
//! upstream end (or trailers) ─> finish ─> the last frame (then the trailers)
//! ```
//!
//! Memory per response is the encoder's state, fixed by its settings: gzip level 5 about
//! 270 KiB; brotli quality 4 with a 512 KiB window about 1 MiB; zstd level 3 with a 512 KiB
//! window about 1.3 MiB; plus at most [`OUT`] of output. The output a frame makes is never more
//! than its input and a few bytes, and at most [`IN_PER_POLL`] of input is compressed per poll
//! before the task yields, so a fast upstream cannot hold a worker thread.

use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame};
use prometheus_client::metrics::counter::Counter;

use super::{BoxError, ProxyBody};
use crate::model::traffic::Encoding;

/// Output gathered before it goes to the client without waiting for a pause.
const OUT: usize = 16 * 1024;
/// Input compressed in one poll at most, before the task lets others run.
const IN_PER_POLL: usize = 256 * 1024;

/// gzip level (Caddy's default for dynamic responses; nginx's `gzip_comp_level` is 1).
pub const GZIP_LEVEL: u32 = 5;
/// brotli quality: its fast range (Envoy's default is 3; 11 is for static files).
pub const BROTLI_QUALITY: u32 = 4;
/// zstd level: the library's default.
pub const ZSTD_LEVEL: i32 = 3;
/// log2 of the brotli and zstd windows: 512 KiB, bounding their memory per response.
pub const WINDOW_LOG: u32 = 19;

enum Codec {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Codec {
    fn new(encoding: Encoding) -> std::io::Result<Self> {
        Ok(match encoding {
            Encoding::Gzip => Codec::Gzip(flate2::write::GzEncoder::new(
                Vec::with_capacity(OUT),
                flate2::Compression::new(GZIP_LEVEL),
            )),
            Encoding::Brotli => Codec::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::with_capacity(OUT),
                4096,
                BROTLI_QUALITY,
                WINDOW_LOG,
            ))),
            Encoding::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(Vec::with_capacity(OUT), ZSTD_LEVEL)?;
                e.window_log(WINDOW_LOG)?;
                Codec::Zstd(e)
            }
        })
    }

    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Codec::Gzip(e) => e.write_all(data),
            Codec::Brotli(e) => e.write_all(data),
            Codec::Zstd(e) => e.write_all(data),
        }
    }

    /// Everything written so far, out (a sync flush: the stream goes on after it).
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Codec::Gzip(e) => e.flush(),
            Codec::Brotli(e) => e.flush(),
            Codec::Zstd(e) => e.flush(),
        }
    }

    fn out(&mut self) -> &mut Vec<u8> {
        match self {
            Codec::Gzip(e) => e.get_mut(),
            Codec::Brotli(e) => e.get_mut(),
            Codec::Zstd(e) => e.get_mut(),
        }
    }

    /// The output so far, taken.
    fn take(&mut self) -> Bytes {
        Bytes::from(std::mem::replace(self.out(), Vec::with_capacity(OUT)))
    }

    /// The end of the stream: the rest of the output.
    fn finish(self) -> std::io::Result<Vec<u8>> {
        match self {
            Codec::Gzip(e) => e.finish(),
            Codec::Brotli(e) => Ok(e.into_inner()),
            Codec::Zstd(e) => e.finish(),
        }
    }
}

/// Counters a compressed body adds its bytes to (`pier_proxy_compression_bytes_total`).
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub bytes_in: Counter,
    pub bytes_out: Counter,
}

/// `inner`, compressed with one encoding.
pub struct Compressed {
    inner: ProxyBody,
    /// `None` once finished.
    codec: Option<Codec>,
    /// Input written since the last flush.
    unflushed: bool,
    trailers: Option<HeaderMap>,
    tally: Tally,
}

impl Compressed {
    /// `inner` compressed with `encoding`; when the encoder cannot start (zstd's allocation
    /// failed), the error and `inner` back.
    pub fn new(
        inner: ProxyBody,
        encoding: Encoding,
        tally: Tally,
    ) -> Result<Self, (std::io::Error, ProxyBody)> {
        match Codec::new(encoding) {
            Ok(codec) => Ok(Self {
                inner,
                codec: Some(codec),
                unflushed: false,
                trailers: None,
                tally,
            }),
            Err(e) => Err((e, inner)),
        }
    }

    fn data(&self, b: Bytes) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.tally.bytes_out.inc_by(b.len() as u64);
        Poll::Ready(Some(Ok(Frame::data(b))))
    }

    /// Ends the encoder's stream: its last bytes, or the trailers when there are none.
    fn finish(&mut self) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Some(codec) = self.codec.take() else {
            return Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))));
        };
        match codec.finish() {
            Ok(last) if !last.is_empty() => self.data(Bytes::from(last)),
            Ok(_) => Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t)))),
            Err(e) => Poll::Ready(Some(Err(e.into()))),
        }
    }
}

impl Body for Compressed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.codec.is_none() {
            return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
        }
        let mut taken = 0usize;
        loop {
            let Some(codec) = this.codec.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => {
                    // The upstream pauses: what the encoder holds goes out now.
                    if this.unflushed {
                        this.unflushed = false;
                        if let Err(e) = codec.flush() {
                            return Poll::Ready(Some(Err(e.into())));
                        }
                    }
                    if !codec.out().is_empty() {
                        let b = codec.take();
                        return this.data(b);
                    }
                    return Poll::Pending;
                }
                Poll::Ready(None) => return this.finish(),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        this.tally.bytes_in.inc_by(data.len() as u64);
                        taken += data.len();
                        if let Err(e) = codec.write(&data) {
                            return Poll::Ready(Some(Err(e.into())));
                        }
                        this.unflushed = true;
                        if codec.out().len() >= OUT {
                            let b = codec.take();
                            return this.data(b);
                        }
                        if taken >= IN_PER_POLL {
                            if !codec.out().is_empty() {
                                let b = codec.take();
                                return this.data(b);
                            }
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                    }
                    Err(frame) => {
                        // Trailers end the data: the encoder's stream ends before them.
                        this.trailers = frame.into_trailers().ok();
                        return this.finish();
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.codec.is_none() && self.trailers.is_none()
    }
}

#[cfg(test)]
mod tests;
