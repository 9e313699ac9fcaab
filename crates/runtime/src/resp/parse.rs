//! Reading requests: RESP multibulk (`*N\r\n$len\r\nbytes\r\n…`) and inline commands
//! (`SET k v\r\n`, what a person types into `nc`), the two forms Redis's own server accepts.
//!
//! Why not `redis-protocol`'s decoder (which encodes our replies): it decodes *any* RESP
//! frame, recursively, because it is written for clients. A server must accept only arrays of
//! bulk strings, and a hostile client sending a million nested `*1\r\n` would drive that
//! recursion into a stack overflow, i.e. abort the replica. It also re-parses a partial
//! request from its start on every read (quadratic for a large MSET arriving in pieces), has
//! no size limits and no inline commands. This parser is incremental, iterative and bounded:
//! it keeps its position across reads, refuses a request larger than the configured limit as
//! soon as a length header says so (before buffering the payload), and reports every
//! malformation as a Redis-style `Protocol error` that the connection answers before closing
//! (as Redis does: after a framing error the byte stream cannot be resynchronized).

use bytes::{Buf, Bytes, BytesMut};

/// Longest inline command and longest length line, as in Redis (`PROTO_INLINE_MAX_SIZE`).
pub const MAX_INLINE: usize = 64 * 1024;
/// Most arguments in one multibulk request (Redis accepts up to INT_MAX; a million is plenty
/// and keeps the per-request `Vec` bounded).
pub const MAX_ARGS: usize = 1024 * 1024;

/// A framing error: the connection answers `-ERR Protocol error: <msg>` and closes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Protocol error: {}", self.0)
    }
}

fn perr<T>(msg: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(msg.into()))
}

/// Incremental request parser for one connection.
#[derive(Debug)]
pub struct RequestParser {
    /// Largest request (sum of argument lengths) accepted.
    max_request: usize,
    /// Inside a multibulk request: arguments still to read.
    remaining: usize,
    /// Length of the bulk argument whose header was read, if any.
    bulk_len: Option<usize>,
    args: Vec<Bytes>,
    /// Bytes of arguments announced so far in this request.
    size: usize,
    /// Bytes of the complete arguments of the request being read (held outside the buffer).
    held: usize,
}

impl RequestParser {
    pub fn new(max_request: usize) -> Self {
        RequestParser { max_request, remaining: 0, bulk_len: None, args: Vec::new(), size: 0, held: 0 }
    }

    /// Bytes of a partly received request held by the parser (its complete arguments); with
    /// the read buffer, what the connection holds of the memory budget.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Take the next complete request off the front of `buf`: `Ok(None)` = more bytes are
    /// needed (whatever was consumed is remembered). Empty requests (`*0`, blank lines) are
    /// skipped, as Redis does.
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        loop {
            if self.remaining == 0 {
                if buf.is_empty() {
                    return Ok(None);
                }
                if buf[0] != b'*' {
                    match self.inline(buf)? {
                        None => return Ok(None),
                        Some(args) if args.is_empty() => continue,
                        Some(args) => return Ok(Some(args)),
                    }
                }
                let Some(line) = take_line(buf, "too big mbulk count string")? else { return Ok(None) };
                let n = match parse_len(&line[1..]) {
                    Some(n) if n <= MAX_ARGS as i64 => n,
                    _ => return perr("invalid multibulk length"),
                };
                if n <= 0 {
                    continue;
                }
                self.remaining = n as usize;
                self.args = Vec::with_capacity(self.remaining.min(1024));
                self.size = 0;
                self.held = 0;
            }
            while self.remaining > 0 {
                let len = match self.bulk_len {
                    Some(len) => len,
                    None => {
                        let Some(line) = take_line(buf, "too big bulk count string")? else { return Ok(None) };
                        // An empty line (a bare CRLF where a bulk header belongs) has no
                        // first byte: Redis reports the CR it found there.
                        let first = line.first().copied().unwrap_or(b'\r');
                        if first != b'$' {
                            return perr(format!("expected '$', got '{}'", printable(first)));
                        }
                        let len = match parse_len(&line[1..]) {
                            Some(n) if n >= 0 => n as usize,
                            _ => return perr("invalid bulk length"),
                        };
                        self.size = self.size.saturating_add(len);
                        if self.size > self.max_request {
                            return perr(format!(
                                "request larger than {} bytes (limits.max_frame_bytes)",
                                self.max_request
                            ));
                        }
                        self.bulk_len = Some(len);
                        len
                    }
                };
                if buf.len() < len + 2 {
                    // In steps: the buffer grows with the bytes that arrive, not with the
                    // length the client announced (docs/security.md, resource caps).
                    buf.reserve((len + 2 - buf.len()).min(1 << 20));
                    return Ok(None);
                }
                if &buf[len..len + 2] != b"\r\n" {
                    return perr("expected CRLF after a bulk string");
                }
                let arg = buf.split_to(len).freeze();
                buf.advance(2);
                self.held += arg.len();
                self.args.push(arg);
                self.bulk_len = None;
                self.remaining -= 1;
            }
            self.held = 0;
            return Ok(Some(std::mem::take(&mut self.args)));
        }
    }

    /// One inline command line, split like Redis's `sdssplitargs` (quotes and escapes).
    fn inline(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let Some(nl) = buf.iter().take(MAX_INLINE).position(|&b| b == b'\n') else {
            return if buf.len() >= MAX_INLINE { perr("too big inline request") } else { Ok(None) };
        };
        let line = buf.split_to(nl + 1);
        let line = line.strip_suffix(b"\n").unwrap_or(&line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        split_args(line).map(Some).ok_or_else(|| ProtocolError("unbalanced quotes in request".into()))
    }
}

/// A header line (`*N` or `$N`), without its CRLF; None if incomplete.
fn take_line(buf: &mut BytesMut, too_big: &str) -> Result<Option<BytesMut>, ProtocolError> {
    match buf.iter().take(MAX_INLINE).position(|&b| b == b'\r') {
        Some(cr) if cr + 1 < buf.len() => {
            if buf[cr + 1] != b'\n' {
                return perr("expected CRLF after a length");
            }
            let line = buf.split_to(cr);
            buf.advance(2);
            Ok(Some(line))
        }
        Some(_) => Ok(None),
        None if buf.len() >= MAX_INLINE => perr(too_big),
        None => Ok(None),
    }
}

/// A length: optional '-', decimal digits, nothing else.
fn parse_len(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: i64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if neg { -n } else { n })
}

fn printable(b: u8) -> String {
    if b.is_ascii_graphic() || b == b' ' {
        (b as char).to_string()
    } else {
        format!("\\x{b:02x}")
    }
}

/// Split an inline command into arguments: whitespace-separated, with "double quotes"
/// (escapes `\n \r \t \b \a \\ \" \xHH`) and 'single quotes' (`\'`). None = unbalanced quotes
/// or a closing quote not followed by a space.
pub fn split_args(line: &[u8]) -> Option<Vec<Bytes>> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == line.len() {
            return Some(args);
        }
        let mut cur = Vec::new();
        let (mut in_dq, mut in_sq) = (false, false);
        loop {
            let Some(&c) = line.get(i) else {
                if in_dq || in_sq {
                    return None;
                }
                break;
            };
            if in_dq {
                if c == b'\\' && i + 3 < line.len() && line[i + 1] == b'x' && is_hex(line[i + 2]) && is_hex(line[i + 3])
                {
                    cur.push(hex(line[i + 2]) * 16 + hex(line[i + 3]));
                    i += 3;
                } else if c == b'\\' && i + 1 < line.len() {
                    i += 1;
                    cur.push(match line[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                } else if c == b'"' {
                    if line.get(i + 1).is_some_and(|n| !n.is_ascii_whitespace()) {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(c);
                }
            } else if in_sq {
                if c == b'\\' && line.get(i + 1) == Some(&b'\'') {
                    i += 1;
                    cur.push(b'\'');
                } else if c == b'\'' {
                    if line.get(i + 1).is_some_and(|n| !n.is_ascii_whitespace()) {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(c);
                }
            } else if c.is_ascii_whitespace() {
                break;
            } else if c == b'"' {
                in_dq = true;
            } else if c == b'\'' {
                in_sq = true;
            } else {
                cur.push(c);
            }
            i += 1;
        }
        args.push(Bytes::from(cur));
    }
}

fn is_hex(c: u8) -> bool {
    c.is_ascii_hexdigit()
}

fn hex(c: u8) -> u8 {
    (c as char).to_digit(16).unwrap_or(0) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(input: &[u8], max: usize) -> Result<Vec<Vec<Bytes>>, ProtocolError> {
        let mut p = RequestParser::new(max);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(args) = p.next(&mut buf)? {
            out.push(args);
        }
        Ok(out)
    }

    fn strs(v: &[Bytes]) -> Vec<&str> {
        v.iter().map(|b| std::str::from_utf8(b).unwrap()).collect()
    }

    #[test]
    fn multibulk_pipeline_and_byte_by_byte() {
        let input =
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nva\r\nl\r\n*1\r\n$4\r\nPING\r\n*0\r\n*2\r\n$3\r\nGET\r\n$0\r\n\r\n";
        let all = parse_all(input, 1 << 20).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(strs(&all[0]), ["SET", "k", "va\r\nl"]);
        assert_eq!(strs(&all[1]), ["PING"]);
        assert_eq!(strs(&all[2]), ["GET", ""]);
        // The same bytes fed one at a time give the same requests.
        let mut p = RequestParser::new(1 << 20);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in input {
            buf.extend_from_slice(&[*b]);
            while let Some(args) = p.next(&mut buf).unwrap() {
                got.push(args);
            }
        }
        assert_eq!(got, all);
    }

    #[test]
    fn inline_commands_with_quotes() {
        let all = parse_all(b"PING\r\nset k \"a b\\n\\x41\"\nGET 'it\\'s'\r\n\r\n  \n", 1 << 20).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(strs(&all[0]), ["PING"]);
        assert_eq!(strs(&all[1]), ["set", "k", "a b\nA"]);
        assert_eq!(strs(&all[2]), ["GET", "it's"]);
        assert_eq!(parse_all(b"GET \"abc\r\n", 100), Err(ProtocolError("unbalanced quotes in request".into())));
        assert!(parse_all(b"GET \"a\"b\r\n", 100).is_err());
        // Incomplete inline line: wait for more.
        assert_eq!(parse_all(b"GET k", 100).unwrap(), Vec::<Vec<Bytes>>::new());
    }

    #[test]
    fn malformed_and_oversized_requests_are_errors() {
        let err = |input: &[u8]| parse_all(input, 1000).unwrap_err().0;
        assert_eq!(err(b"*x\r\n"), "invalid multibulk length");
        assert_eq!(err(b"*99999999999\r\n"), "invalid multibulk length");
        assert_eq!(err(b"*1\r\n*1\r\n"), "expected '$', got '*'");
        assert_eq!(err(b"*1\r\n$-5\r\n"), "invalid bulk length");
        assert_eq!(err(b"*1\r\n$abc\r\n"), "invalid bulk length");
        assert_eq!(err(b"*1\r\n$3\r\nabcXY"), "expected CRLF after a bulk string");
        assert_eq!(err(b"*1\r\n$1001\r\n"), "request larger than 1000 bytes (limits.max_frame_bytes)");
        let mut big = vec![b'a'; MAX_INLINE + 1];
        assert_eq!(err(&big), "too big inline request");
        big[0] = b'*';
        assert_eq!(err(&big), "too big mbulk count string");
        // Deep nesting is refused at the first nested header, not recursed into.
        let nested = b"*1\r\n".repeat(100_000);
        assert_eq!(err(&nested), "expected '$', got '*'");
    }

    #[test]
    fn total_request_size_is_bounded() {
        // Two 600-byte arguments exceed a 1000-byte limit at the second header.
        let mut input = b"*2\r\n$600\r\n".to_vec();
        input.extend(vec![b'x'; 600]);
        input.extend_from_slice(b"\r\n$600\r\n");
        assert_eq!(parse_all(&input, 1000).unwrap_err().0, "request larger than 1000 bytes (limits.max_frame_bytes)");
    }
}
