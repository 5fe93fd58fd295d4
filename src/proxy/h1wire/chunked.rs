//! Chunked framing (RFC 9112 §7.1), no I/O. [`Chunked::feed`] finds the end of a chunked
//! body in bytes that are relayed unchanged: the fast path passes chunked responses through
//! as they are and only needs to know where the message ends (so the connection can be
//! reused) and that the framing is sound. [`Chunked::next`] tells data from framing, for
//! the upstream stage, which hands hyper's request path the data and the trailers alone.

/// Chunk size lines longer than this many hex digits overflow `u64`.
const MAX_SIZE_DIGITS: u8 = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Hex digits of a chunk size.
    Size,
    /// Whitespace after the size (before `;` or CR).
    SizeSpace,
    /// A chunk extension, up to CR.
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// Start of a trailer line, or the CR of the final empty line.
    TrailerStart,
    /// The field name of a trailer line, up to its colon.
    TrailerName,
    /// The field value of a trailer line, up to CR.
    Trailer,
    TrailerLf,
    EndLf,
    Done,
}

#[derive(Debug)]
pub struct Chunked {
    state: State,
    size: u64,
    digits: u8,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid chunked framing from the upstream")]
pub struct ChunkError;

/// What [`Chunked::next`] found at the front of the bytes it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// This many bytes of a chunk's data (at least one).
    Data(usize),
    /// This many bytes of framing: chunk sizes, extensions, line ends, the trailer section.
    Framing(usize),
}

impl Default for Chunked {
    fn default() -> Self {
        Self {
            state: State::Size,
            size: 0,
            digits: 0,
        }
    }
}

impl Chunked {
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Reads `bytes` (the next bytes of the body) and returns how many belong to the message:
    /// all of them, or fewer when the message ends inside them.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<usize, ChunkError> {
        let mut i = 0;
        while i < bytes.len() {
            if self.state == State::Done {
                return Ok(i);
            }
            if self.state == State::Data {
                let take = (bytes.len() - i).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                i += take;
                self.size -= take as u64;
                if self.size == 0 {
                    self.state = State::DataCr;
                }
                continue;
            }
            self.step(bytes[i])?;
            i += 1;
        }
        Ok(i)
    }

    /// In the trailer section (its final empty line included): the last chunk has been read.
    pub fn in_trailers(&self) -> bool {
        matches!(
            self.state,
            State::TrailerStart
                | State::TrailerName
                | State::Trailer
                | State::TrailerLf
                | State::EndLf
        )
    }

    /// Reads the front of `bytes` (the next bytes of the body): a run of chunk data, or of
    /// framing up to where data, the trailer section or the end of the message begins (so
    /// that a caller that asks [`in_trailers`](Self::in_trailers) between calls gets the
    /// trailer section's bytes alone). `Framing(0)` for no bytes, or once done.
    pub fn next(&mut self, bytes: &[u8]) -> Result<Piece, ChunkError> {
        if self.state == State::Data && !bytes.is_empty() {
            let take = (bytes.len() as u64).min(self.size);
            self.size -= take;
            if self.size == 0 {
                self.state = State::DataCr;
            }
            // At most `bytes.len()`.
            return Ok(Piece::Data(take as usize));
        }
        let mut i = 0;
        while i < bytes.len() && !matches!(self.state, State::Data | State::Done) {
            let last_chunk = self.state == State::SizeLf;
            self.step(bytes[i])?;
            i += 1;
            if last_chunk && self.state == State::TrailerStart {
                break;
            }
        }
        Ok(Piece::Framing(i))
    }

    fn step(&mut self, b: u8) -> Result<(), ChunkError> {
        self.state = match (self.state, b) {
            (State::Size, b) if b.is_ascii_hexdigit() => {
                if self.digits == MAX_SIZE_DIGITS {
                    return Err(ChunkError);
                }
                self.digits += 1;
                let v = (b as char).to_digit(16).unwrap_or(0);
                self.size = (self.size << 4) | u64::from(v);
                State::Size
            }
            (State::Size, b' ' | b'\t') if self.digits > 0 => State::SizeSpace,
            (State::Size | State::SizeSpace, b';') if self.digits > 0 => State::Extension,
            (State::Size | State::SizeSpace, b'\r') if self.digits > 0 => State::SizeLf,
            (State::SizeSpace, b' ' | b'\t') => State::SizeSpace,
            (State::Extension, b'\r') => State::SizeLf,
            (State::Extension, b'\n') => return Err(ChunkError),
            (State::Extension, _) => State::Extension,
            (State::SizeLf, b'\n') => {
                self.digits = 0;
                if self.size == 0 {
                    State::TrailerStart
                } else {
                    State::Data
                }
            }
            (State::DataCr, b'\r') => State::DataLf,
            (State::DataLf, b'\n') => State::Size,
            (State::TrailerStart, b'\r') => State::EndLf,
            // A trailer line is a field line (RFC 9112 §7.1.2): a token, a colon, a value of
            // visible characters, spaces and tabs. Anything else ends the message as invalid,
            // as hyper (and so the client) would read it.
            (State::TrailerStart | State::TrailerName, b) if is_tchar(b) => State::TrailerName,
            (State::TrailerName, b':') => State::Trailer,
            (State::Trailer, b'\r') => State::TrailerLf,
            (State::Trailer, b'\t' | b' '..=b'~' | 0x80..=0xff) => State::Trailer,
            (State::TrailerLf, b'\n') => State::TrailerStart,
            (State::EndLf, b'\n') => State::Done,
            _ => return Err(ChunkError),
        };
        Ok(())
    }
}

/// A `tchar` of RFC 9110 §5.6.2 (field names).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(body: &[u8]) -> Result<(usize, bool), ChunkError> {
        let mut c = Chunked::default();
        let n = c.feed(body)?;
        Ok((n, c.is_done()))
    }

    #[test]
    fn finds_the_end_of_a_body_and_leaves_what_follows() {
        let body = b"5\r\nhello\r\n7 ;ext=1\r\n, world\r\n0\r\n\r\nHTTP/1.1 200 OK";
        let end = body.len() - b"HTTP/1.1 200 OK".len();
        assert_eq!(whole(body), Ok((end, true)));
    }

    #[test]
    fn trailers_belong_to_the_message() {
        let body = b"3\r\nabc\r\n0\r\nx-checksum: 1\r\nx-more: 2\r\n\r\n";
        assert_eq!(whole(body), Ok((body.len(), true)));
    }

    #[test]
    fn any_split_of_the_input_gives_the_same_end() {
        let body =
            b"A\r\n0123456789\r\n1F\r\n0123456789012345678901234567890\r\n0\r\nt: 1\r\n\r\nrest";
        let end = body.len() - 4;
        for cut in 0..body.len() {
            for cut2 in cut..body.len() {
                let mut c = Chunked::default();
                let mut used = 0;
                for part in [&body[..cut], &body[cut..cut2], &body[cut2..]] {
                    if c.is_done() {
                        break;
                    }
                    used += c.feed(part).unwrap();
                }
                assert!(c.is_done(), "split at {cut}/{cut2}");
                assert_eq!(used, end, "split at {cut}/{cut2}");
            }
        }
    }

    /// A chunked body's data, its trailer section, and what followed the message.
    type Dechunked = (Vec<u8>, Vec<u8>, Vec<u8>);

    /// De-chunks `parts` (the body, cut anywhere).
    fn dechunk(parts: &[&[u8]]) -> Result<Dechunked, ChunkError> {
        let mut c = Chunked::default();
        let (mut data, mut trailers, mut rest) = (vec![], vec![], vec![]);
        for part in parts {
            let mut at = 0;
            while at < part.len() {
                if c.is_done() {
                    rest.extend_from_slice(&part[at..]);
                    break;
                }
                let in_trailers = c.in_trailers();
                let n = match c.next(&part[at..])? {
                    Piece::Data(n) => {
                        assert!(n > 0);
                        data.extend_from_slice(&part[at..at + n]);
                        n
                    }
                    Piece::Framing(n) => {
                        if in_trailers {
                            trailers.extend_from_slice(&part[at..at + n]);
                        }
                        n
                    }
                };
                assert!(n > 0 || c.is_done(), "no progress at {at}");
                at += n;
            }
        }
        assert!(c.is_done(), "not done");
        Ok((data, trailers, rest))
    }

    #[test]
    fn next_splits_data_from_framing_and_trailers_at_any_cut() {
        let body = b"A\r\n0123456789\r\n3;x=y\r\nabc\r\n0\r\nt: 1\r\nu: 2\r\n\r\nrest";
        for cut in 0..body.len() {
            for cut2 in cut..body.len() {
                let parts = [&body[..cut], &body[cut..cut2], &body[cut2..]];
                let (data, trailers, rest) = dechunk(&parts).unwrap();
                assert_eq!(data, b"0123456789abc", "split at {cut}/{cut2}");
                assert_eq!(trailers, b"t: 1\r\nu: 2\r\n\r\n", "split at {cut}/{cut2}");
                assert_eq!(rest, b"rest", "split at {cut}/{cut2}");
            }
        }
        let (data, trailers, rest) = dechunk(&[b"0\r\n\r\n"]).unwrap();
        assert_eq!(
            (&data[..], &trailers[..], &rest[..]),
            (&b""[..], &b"\r\n"[..], &b""[..])
        );
        assert_eq!(dechunk(&[b"5\r\nhelloXY"]).map(|_| ()), Err(ChunkError));
    }

    #[test]
    fn an_unfinished_body_is_not_done() {
        assert_eq!(whole(b"5\r\nhel"), Ok((6, false)));
        assert_eq!(whole(b"0\r\n"), Ok((3, false)));
    }

    #[test]
    fn bad_framing_is_an_error() {
        for bad in [
            &b"x\r\n"[..],
            b"\r\n",
            b"5\nhello",
            b"5\r\nhelloXY",
            b"11111111111111111\r\n",
            b"0\r\n\n",
            b"5 5\r\nhello\r\n",
            b"0\r\nx: a\n\r\n",
            // Trailer lines that are not field lines (found by the differential test with
            // hyper, which refuses them).
            b"0\r\nffff\r\n\r\n",
            b"0\r\n: v\r\n\r\n",
            b"0\r\nx y: v\r\n\r\n",
            b"0\r\nx: a\0b\r\n\r\n",
        ] {
            assert_eq!(
                whole(bad),
                Err(ChunkError),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
