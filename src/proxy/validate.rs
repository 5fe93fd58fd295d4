//! Checks on a request head that both request paths (the HTTP/1.1 fast path and hyper's)
//! make before routing, and the path normalisation that matching and forwarding both see.
//! Pure: no I/O, no snapshot.
//!
//! - **Host** (RFC 9112 §3.2, RFC 9113 §8.3.1): an HTTP/1.1 request without a Host header, a
//!   request with two, an empty or syntactically invalid one, or an authority with userinfo
//!   (`u:p@host`, deprecated by RFC 9110 §4.2.4 and forbidden in HTTP/2's `:authority`) is
//!   answered 400. An HTTP/2 `:authority` and a Host header that name different hosts: 400.
//! - **Transfer codings** (RFC 9112 §6.1): pier forwards `chunked` only; a request with any
//!   other coding (`gzip, chunked`) gets 501, as nginx answers, rather than having the coding
//!   label dropped on the way to the backend.
//! - **Sizes**: a request target longer than `--max-request-target` (8 KiB, nginx's line
//!   buffer) is 414; a declared body longer than `--max-request-body` (when set) is 413.
//! - **Path** (RFC 3986 §6.2.2): percent-encoded unreserved characters are decoded, other
//!   percent-encodings upper-cased, dot segments removed and, when configured, runs of `/`
//!   merged — so `/a/../old` and `/a/%2e%2e/old` are `/old` both for matching and for the
//!   backend, as Envoy's `normalize_path` does. A malformed percent-encoding is 400. `%2F`
//!   stays encoded (it is not a segment separator).

use std::borrow::Cow;

use http::{HeaderMap, Version, header};

use crate::model::{EscapedSlashes, Underscores};

/// Why a request is refused before routing; each is a 4xx/5xx of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("an HTTP/1.1 request without a Host header")]
    MissingHost,
    #[error("more than one Host header")]
    DuplicateHost,
    #[error("an empty or malformed Host")]
    BadHost,
    #[error("userinfo in the request authority")]
    Userinfo,
    #[error("the :authority and Host headers disagree")]
    HostMismatch,
    #[error("a malformed percent-encoding in the path")]
    BadPath,
    #[error("an escaped slash (%2F or %5C) in the path, which the listener refuses")]
    EscapedSlash,
    #[error("a header name with an underscore, which the listener refuses")]
    Underscore,
    #[error("a transfer coding other than chunked")]
    TransferCoding,
    #[error("a request target over the maximum length")]
    TargetTooLong,
    #[error("a Content-Length over the maximum request body")]
    BodyTooLarge,
}

/// The request target's length (414 above `max_target`) and the declared body length (413
/// above `max_body`, when there is a maximum). A streamed body is counted as it arrives
/// (`body::ClientBody`).
pub fn check_sizes(
    target_len: usize,
    content_length: Option<u64>,
    max_target: usize,
    max_body: Option<u64>,
) -> Result<(), Invalid> {
    if target_len > max_target {
        return Err(Invalid::TargetTooLong);
    }
    match (content_length, max_body) {
        (Some(len), Some(max)) if len > max => Err(Invalid::BodyTooLarge),
        _ => Ok(()),
    }
}

/// Checks the Host header lines and the target's authority (absolute-form or `:authority`).
pub fn check_host(
    version: Version,
    headers: &HeaderMap,
    authority: Option<&http::uri::Authority>,
) -> Result<(), Invalid> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(Invalid::DuplicateHost);
    }
    // Without userinfo, the host is empty only where the authority is empty or starts with
    // its port (not `Authority::host`, which scans it twice).
    if let Some(a) = authority
        && (a.as_str().contains('@') || a.as_str().is_empty() || a.as_str().starts_with(':'))
    {
        return Err(if a.as_str().contains('@') {
            Invalid::Userinfo
        } else {
            Invalid::BadHost
        });
    }
    match host {
        Some(v) => {
            let v = std::str::from_utf8(v.as_bytes()).map_err(|_| Invalid::BadHost)?;
            host_value_ok(v)?;
            // HTTP/2 and HTTP/3: Host may accompany `:authority` only if it names the same thing.
            // (HTTP/1.1 absolute-form: the target wins and Host is ignored, RFC 9112 §3.2.2.)
            if version >= Version::HTTP_2
                && let Some(a) = authority
                && !a.as_str().eq_ignore_ascii_case(v)
            {
                return Err(Invalid::HostMismatch);
            }
            Ok(())
        }
        None if version == Version::HTTP_11 => Err(Invalid::MissingHost),
        None if version >= Version::HTTP_2 && authority.is_none() => Err(Invalid::MissingHost),
        None => Ok(()),
    }
}

/// A Host header value: `host[:port]` with host a reg-name, an IPv4 address or a bracketed
/// IPv6 literal (RFC 9110 §7.2, RFC 3986 §3.2.2). Userinfo is refused by name.
pub fn host_value_ok(v: &str) -> Result<(), Invalid> {
    if let Some(rest) = v.strip_prefix('[') {
        if v.contains('@') {
            return Err(Invalid::Userinfo);
        }
        let (inside, after) = rest.split_once(']').ok_or(Invalid::BadHost)?;
        if inside.is_empty()
            || !inside
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        {
            return Err(Invalid::BadHost);
        }
        return match after {
            "" => Ok(()),
            p => port_ok(p.strip_prefix(':').ok_or(Invalid::BadHost)?.as_bytes()),
        };
    }
    // One pass (this runs on every request): the last `:` splits off the port; `@` anywhere
    // is userinfo, named as such even after a byte that is already bad.
    // (An earlier `:` stays in the host, where `reg_name_byte` refuses it.)
    let bytes = v.as_bytes();
    let mut colon = None;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b':' {
            colon = Some(i);
        } else if b == b'@' {
            return Err(Invalid::Userinfo);
        }
    }
    let (host, port) = match colon {
        Some(i) => (&bytes[..i], &bytes[i + 1..]),
        None => (bytes, &[][..]),
    };
    if host.is_empty() || !host.iter().all(|&b| reg_name_byte(b)) {
        return Err(Invalid::BadHost);
    }
    port_ok(port)
}

/// A port: digits, possibly none (`host:` is allowed, RFC 3986 §3.2.3).
fn port_ok(p: &[u8]) -> Result<(), Invalid> {
    if p.iter().all(u8::is_ascii_digit) {
        Ok(())
    } else {
        Err(Invalid::BadHost)
    }
}

/// RFC 3986 reg-name: unreserved, sub-delims and percent-encodings.
fn reg_name_byte(b: u8) -> bool {
    REG_NAME[usize::from(b)]
}

/// [`reg_name_byte`] as a table: one load per byte of every request's Host.
const REG_NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
            );
        b += 1;
    }
    t
};

/// `Transfer-Encoding` may name `chunked` only (hyper has already refused a request whose
/// last coding is not `chunked`).
pub fn check_transfer_coding(headers: &HeaderMap) -> Result<(), Invalid> {
    for v in headers.get_all(header::TRANSFER_ENCODING) {
        let ok = v.to_str().is_ok_and(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .all(|t| t.eq_ignore_ascii_case("chunked"))
        });
        if !ok {
            return Err(Invalid::TransferCoding);
        }
    }
    Ok(())
}

/// How a connection's paths are normalised beyond RFC 3986's rules (`--merge-slashes`, and the
/// port's ClientTrafficPolicy `path`), and what its header names with `_` come to (`headers`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestRules {
    pub merge_slashes: bool,
    pub escaped_slashes: EscapedSlashes,
    pub underscores: Underscores,
}

/// Header names with `_` under `rule`: `Ok(true)` when some are to be dropped, `Err` when the
/// request is refused (400). Costs nothing under `Allow`, pier's default.
pub fn underscores<'n>(
    rule: Underscores,
    mut names: impl Iterator<Item = &'n str>,
) -> Result<bool, Invalid> {
    if rule == Underscores::Allow || !names.any(|n| n.contains('_')) {
        return Ok(false);
    }
    match rule {
        Underscores::RejectRequest => Err(Invalid::Underscore),
        _ => Ok(true),
    }
}

/// Does `path` need [`normalize_path`] at all? A cheap scan, so that the common path costs
/// one pass over its bytes and no allocation.
fn needs_normalizing(path: &[u8], merge_slashes: bool) -> bool {
    if path.contains(&b'%') {
        return true;
    }
    path.windows(2).any(|w| match w {
        [b'/', b'.'] => true,
        [b'/', b'/'] => merge_slashes,
        _ => false,
    })
}

/// The normalised form of an origin-form path (RFC 3986 §6.2.2 syntax-based normalisation;
/// see the module docs); borrowed when it is already normal.
pub fn normalize_path(path: &str, rules: RequestRules) -> Result<Cow<'_, str>, Invalid> {
    let merge_slashes = rules.merge_slashes;
    if !needs_normalizing(path.as_bytes(), merge_slashes) {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode_unreserved(path, rules.escaped_slashes)?;
    let rooted = decoded.strip_prefix('/').unwrap_or(&decoded);
    let segments: Vec<&str> = rooted.split('/').collect();
    let last = segments.len() - 1;
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    for (i, s) in segments.into_iter().enumerate() {
        match s {
            "." => {}
            ".." => {
                out.pop();
            }
            "" if merge_slashes && i != last => continue,
            s => {
                out.push(s);
                continue;
            }
        }
        // A path ending in a dot segment names a directory: keep its trailing slash.
        if i == last {
            out.push("");
        }
    }
    let mut normal = String::with_capacity(decoded.len());
    for s in &out {
        normal.push('/');
        normal.push_str(s);
    }
    if normal.is_empty() {
        normal.push('/');
    }
    if normal == path {
        return Ok(Cow::Borrowed(path));
    }
    Ok(Cow::Owned(normal))
}

/// Decodes `%XX` where it stands for an unreserved character; upper-cases the others. `%2F`
/// and `%5C` (escaped `/` and `\`) as `escaped` says.
fn decode_unreserved(path: &str, escaped: EscapedSlashes) -> Result<Cow<'_, str>, Invalid> {
    if !path.contains('%') {
        return Ok(Cow::Borrowed(path));
    }
    let b = path.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            // Copy up to the next '%' (char boundaries are safe: '%' is ASCII).
            let next = path[i..].find('%').map_or(b.len(), |n| i + n);
            out.push_str(&path[i..next]);
            i = next;
            continue;
        }
        let hex = |c: u8| (c as char).to_digit(16);
        let (Some(hi), Some(lo)) = (
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) else {
            return Err(Invalid::BadPath);
        };
        let byte = (hi * 16 + lo) as u8;
        let slash = matches!(byte, b'/' | b'\\');
        if slash && escaped == EscapedSlashes::RejectRequest {
            return Err(Invalid::EscapedSlash);
        }
        if byte.is_ascii_alphanumeric()
            || matches!(byte, b'-' | b'.' | b'_' | b'~')
            || (slash && escaped == EscapedSlashes::UnescapeAndForward)
        {
            out.push(byte as char);
        } else {
            out.push('%');
            out.push(b[i + 1].to_ascii_uppercase() as char);
            out.push(b[i + 2].to_ascii_uppercase() as char);
        }
        i += 3;
    }
    Ok(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    const MERGE: RequestRules = RequestRules {
        merge_slashes: true,
        escaped_slashes: EscapedSlashes::KeepUnchanged,
        underscores: Underscores::Allow,
    };

    #[test]
    fn header_names_with_underscores_pass_drop_or_refuse() {
        let names = ["host", "x_user", "accept"];
        assert_eq!(
            underscores(Underscores::Allow, names.into_iter()),
            Ok(false)
        );
        assert_eq!(
            underscores(Underscores::DropHeader, names.into_iter()),
            Ok(true)
        );
        assert_eq!(
            underscores(Underscores::RejectRequest, names.into_iter()),
            Err(Invalid::Underscore)
        );
        let clean = ["host", "x-user"];
        assert_eq!(
            underscores(Underscores::RejectRequest, clean.into_iter()),
            Ok(false)
        );
    }

    #[test]
    fn escaped_slashes_are_kept_refused_or_decoded_as_the_listener_says() {
        let rules = |escaped_slashes| RequestRules {
            merge_slashes: false,
            escaped_slashes,
            underscores: Underscores::Allow,
        };
        let path = "/a%2f..%2Fb%5c";
        let keep = normalize_path(path, rules(EscapedSlashes::KeepUnchanged)).unwrap();
        assert_eq!(keep, "/a%2F..%2Fb%5C");
        assert_eq!(
            normalize_path(path, rules(EscapedSlashes::RejectRequest)),
            Err(Invalid::EscapedSlash)
        );
        let decoded = normalize_path(path, rules(EscapedSlashes::UnescapeAndForward)).unwrap();
        assert_eq!(decoded, "/b\\", "decoded, then the dot segment removed");
        assert_eq!(
            normalize_path("/a%41", rules(EscapedSlashes::RejectRequest)).unwrap(),
            "/aA",
            "other escapes as always"
        );
    }

    use super::*;

    fn norm(p: &str) -> String {
        normalize_path(p, RequestRules::default())
            .unwrap()
            .into_owned()
    }

    #[test]
    fn dot_segments_are_removed() {
        for (input, want) in [
            ("/a/../old", "/old"),
            ("/a/%2e%2e/old", "/old"),
            ("/a/%2E%2E/old", "/old"),
            ("/a/.%2e/old", "/old"),
            ("/a/./b", "/a/b"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/..", "/"),
            ("/../../x", "/x"),
            ("/.", "/"),
            ("/a//../b", "/a/b"),
            ("/a/.b/..c", "/a/.b/..c"),
        ] {
            assert_eq!(norm(input), want, "{input}");
        }
    }

    #[test]
    fn unreserved_escapes_are_decoded_and_the_rest_kept() {
        assert_eq!(norm("/%61%62c"), "/abc");
        assert_eq!(norm("/a%2fb"), "/a%2Fb");
        assert_eq!(norm("/a%2Fb/../c"), "/c");
        assert_eq!(norm("/%7euser"), "/~user");
        assert_eq!(norm("/caf%c3%a9"), "/caf%C3%A9");
        assert_eq!(
            normalize_path("/a%zz", RequestRules::default()),
            Err(Invalid::BadPath)
        );
        assert_eq!(
            normalize_path("/a%2", RequestRules::default()),
            Err(Invalid::BadPath)
        );
    }

    #[test]
    fn normal_paths_are_borrowed() {
        for p in ["/", "/a/b", "/a/b/", "/a//b", "/a.b/c..d"] {
            assert!(
                matches!(
                    normalize_path(p, RequestRules::default()),
                    Ok(Cow::Borrowed(_))
                ),
                "{p}"
            );
        }
        assert!(matches!(normalize_path("/a//b", MERGE), Ok(Cow::Owned(_))));
    }

    #[test]
    fn slashes_merge_only_when_asked() {
        assert_eq!(norm("/a//b"), "/a//b");
        assert_eq!(normalize_path("//a///b//", MERGE).unwrap(), "/a/b/");
        assert_eq!(normalize_path("//", MERGE).unwrap(), "/");
    }

    #[test]
    fn host_values() {
        for ok in [
            "a.example",
            "a.example:8080",
            "127.0.0.1",
            "[::1]",
            "[::1]:80",
            "x_y",
        ] {
            assert_eq!(host_value_ok(ok), Ok(()), "{ok}");
        }
        assert_eq!(host_value_ok("u:p@host"), Err(Invalid::Userinfo));
        for bad in ["", ":80", "a b", "a/b", "[::1", "[]", "a:8x", "[::1]x"] {
            assert_eq!(host_value_ok(bad), Err(Invalid::BadHost), "{bad}");
        }
    }

    /// The two-pass form `host_value_ok` had before it became one pass: the reference.
    fn host_value_ok_reference(v: &str) -> Result<(), Invalid> {
        if v.contains('@') {
            return Err(Invalid::Userinfo);
        }
        let (host, port) = if let Some(rest) = v.strip_prefix('[') {
            let (inside, after) = rest.split_once(']').ok_or(Invalid::BadHost)?;
            if inside.is_empty()
                || !inside
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
            {
                return Err(Invalid::BadHost);
            }
            match after {
                "" => ("x", None),
                p => ("x", Some(p.strip_prefix(':').ok_or(Invalid::BadHost)?)),
            }
        } else {
            match v.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (v, None),
            }
        };
        if host.is_empty() || !host.bytes().all(reg_name_byte) {
            return Err(Invalid::BadHost);
        }
        if let Some(p) = port
            && !p.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(Invalid::BadHost);
        }
        Ok(())
    }

    proptest::proptest! {
        #[test]
        fn host_value_ok_agrees_with_its_reference(v in "[a-zA-Z0-9:@\\[\\]._%~ /é-]{0,24}") {
            proptest::prop_assert_eq!(host_value_ok(&v), host_value_ok_reference(&v), "{:?}", v);
        }
    }

    fn headers(hosts: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in hosts {
            h.append(header::HOST, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn host_header_rules() {
        let v11 = Version::HTTP_11;
        assert_eq!(check_host(v11, &headers(&["a"]), None), Ok(()));
        assert_eq!(
            check_host(v11, &headers(&[]), None),
            Err(Invalid::MissingHost)
        );
        assert_eq!(check_host(Version::HTTP_10, &headers(&[]), None), Ok(()));
        assert_eq!(
            check_host(v11, &headers(&["a", "a"]), None),
            Err(Invalid::DuplicateHost)
        );
        assert_eq!(
            check_host(v11, &headers(&[""]), None),
            Err(Invalid::BadHost)
        );
        let userinfo: http::Uri = "http://u:p@host/a".parse().unwrap();
        assert_eq!(
            check_host(v11, &headers(&["host"]), userinfo.authority()),
            Err(Invalid::Userinfo)
        );
        // h2: `:authority` alone is enough; a Host that disagrees is not.
        let h2: http::Uri = "https://a.example/x".parse().unwrap();
        assert_eq!(
            check_host(Version::HTTP_2, &headers(&[]), h2.authority()),
            Ok(())
        );
        assert_eq!(
            check_host(Version::HTTP_2, &headers(&["a.example"]), h2.authority()),
            Ok(())
        );
        assert_eq!(
            check_host(Version::HTTP_2, &headers(&["b.example"]), h2.authority()),
            Err(Invalid::HostMismatch)
        );
        assert_eq!(
            check_host(Version::HTTP_2, &headers(&[]), None),
            Err(Invalid::MissingHost)
        );
    }

    #[test]
    fn only_chunked_is_forwarded() {
        let mut h = HeaderMap::new();
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        assert_eq!(check_transfer_coding(&h), Ok(()));
        h.insert(header::TRANSFER_ENCODING, "gzip, chunked".parse().unwrap());
        assert_eq!(check_transfer_coding(&h), Err(Invalid::TransferCoding));
    }
}
