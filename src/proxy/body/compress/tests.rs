use std::io::Write;

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::sync::mpsc;

use super::*;

const ALL: [Encoding; 3] = [Encoding::Gzip, Encoding::Brotli, Encoding::Zstd];

/// A decoder that is fed the compressed stream piece by piece and says what it has decoded.
enum Decoder {
    Gzip(Box<flate2::write::GzDecoder<Vec<u8>>>),
    Brotli(Box<brotli::DecompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Decoder<'static, Vec<u8>>),
}

impl Decoder {
    fn new(e: Encoding) -> Self {
        match e {
            Encoding::Gzip => Decoder::Gzip(Box::new(flate2::write::GzDecoder::new(Vec::new()))),
            Encoding::Brotli => {
                Decoder::Brotli(Box::new(brotli::DecompressorWriter::new(Vec::new(), 4096)))
            }
            Encoding::Zstd => Decoder::Zstd(zstd::stream::write::Decoder::new(Vec::new()).unwrap()),
        }
    }

    fn feed(&mut self, b: &[u8]) -> &[u8] {
        match self {
            Decoder::Gzip(d) => {
                d.write_all(b).unwrap();
                d.flush().unwrap();
                d.get_ref()
            }
            Decoder::Brotli(d) => {
                d.write_all(b).unwrap();
                d.flush().unwrap();
                d.get_ref()
            }
            Decoder::Zstd(d) => {
                d.write_all(b).unwrap();
                d.flush().unwrap();
                d.get_ref()
            }
        }
    }
}

fn channel_body() -> (mpsc::Sender<Result<Frame<Bytes>, BoxError>>, ProxyBody) {
    let (tx, rx) = mpsc::channel(16);
    let stream = tokio_stream_of(rx);
    (tx, http_body_util::StreamBody::new(stream).boxed_unsync())
}

fn tokio_stream_of(
    mut rx: mpsc::Receiver<Result<Frame<Bytes>, BoxError>>,
) -> impl futures::Stream<Item = Result<Frame<Bytes>, BoxError>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn text(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| b"the quick brown fox jumps over the lazy dog; "[i % 45])
        .collect()
}

#[tokio::test]
async fn every_encoding_round_trips_and_shrinks_text() {
    let input = text(300_000);
    for e in ALL {
        let tally = Tally::default();
        let body = super::super::full(Bytes::from(input.clone()));
        let out = Compressed::new(body, e, tally.clone())
            .ok()
            .unwrap()
            .collect()
            .await
            .unwrap()
            .to_bytes();
        let mut d = Decoder::new(e);
        assert_eq!(d.feed(&out), &input[..], "{e:?}");
        assert!(out.len() < input.len() / 20, "{e:?}: {} bytes", out.len());
        assert_eq!(tally.bytes_in.get(), input.len() as u64);
        assert_eq!(tally.bytes_out.get(), out.len() as u64);
    }
}

#[tokio::test]
async fn an_empty_body_is_a_valid_empty_stream() {
    for e in ALL {
        let body = super::super::empty();
        let out = Compressed::new(body, e, Tally::default())
            .ok()
            .unwrap()
            .collect()
            .await
            .unwrap()
            .to_bytes();
        assert!(!out.is_empty(), "{e:?}");
        let mut d = Decoder::new(e);
        assert!(d.feed(&out).is_empty(), "{e:?}");
    }
}

/// What a pause in the upstream lets through: the chunks sent so far, decodable, before any
/// more arrive (a stream is not held back until the encoder's buffer fills).
#[tokio::test]
async fn a_pause_upstream_flushes_what_came_so_far() {
    for e in ALL {
        let (tx, body) = channel_body();
        let mut c = Compressed::new(body, e, Tally::default()).ok().unwrap();
        let mut d = Decoder::new(e);
        let mut sent = Vec::new();
        for i in 0..3 {
            let chunk = format!("{{\"event\": {i}}}\n");
            sent.extend_from_slice(chunk.as_bytes());
            tx.send(Ok(Frame::data(Bytes::from(chunk)))).await.unwrap();
            let frame = c.frame().await.unwrap().unwrap();
            let data = frame.into_data().unwrap();
            assert_eq!(d.feed(&data), &sent[..], "{e:?} after event {i}");
        }
        // Trailers come after the stream's end.
        let mut t = HeaderMap::new();
        t.insert("x-done", "1".parse().unwrap());
        tx.send(Ok(Frame::trailers(t))).await.unwrap();
        drop(tx);
        let mut rest = Vec::new();
        let mut trailers = None;
        while let Some(f) = c.frame().await {
            let f = f.unwrap();
            match f.into_data() {
                Ok(b) => rest.extend_from_slice(&b),
                Err(f) => trailers = f.into_trailers().ok(),
            }
        }
        assert_eq!(d.feed(&rest), &sent[..]);
        assert_eq!(trailers.unwrap().get("x-done").unwrap(), "1", "{e:?}");
        assert!(c.is_end_stream());
    }
}

/// A very compressible body that arrives all at once: the encoder takes at most
/// `IN_PER_POLL` per poll and yields, and its output stays small.
#[tokio::test]
async fn a_fast_upstream_is_taken_in_bounded_steps() {
    let (tx, body) = channel_body();
    tokio::spawn(async move {
        let zeros = Bytes::from(vec![0u8; 64 * 1024]);
        for _ in 0..256 {
            if tx.send(Ok(Frame::data(zeros.clone()))).await.is_err() {
                return;
            }
        }
    });
    let mut c = Compressed::new(body, Encoding::Gzip, Tally::default())
        .ok()
        .unwrap();
    let mut total = 0;
    let mut frames = 0;
    while let Some(f) = c.frame().await {
        let b = f.unwrap().into_data().unwrap();
        assert!(b.len() <= OUT + 1024);
        total += b.len();
        frames += 1;
    }
    // 16 MiB of zeros is ~16 KiB of gzip.
    assert!(total < 64 * 1024, "{total}");
    assert!(frames >= 1);
}

#[tokio::test]
async fn an_upstream_error_passes_through() {
    let (tx, body) = channel_body();
    let mut c = Compressed::new(body, Encoding::Zstd, Tally::default())
        .ok()
        .unwrap();
    tx.send(Ok(Frame::data(Bytes::from_static(b"partial"))))
        .await
        .unwrap();
    tx.send(Err("upstream reset".into())).await.unwrap();
    let mut failed = false;
    while let Some(f) = c.frame().await {
        if f.is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed);
}
