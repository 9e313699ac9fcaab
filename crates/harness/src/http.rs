//! A minimal blocking HTTP/1.0 client for the replicas' admin endpoints (`/health`,
//! `/status`, `/fault/...`). HTTP/1.0 makes the server close the connection after the
//! response, so the body is everything after the header, with no chunked encoding to undo.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// GET `path` from `addr`; returns the status code and the body.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    request(addr, "GET", path, None, None, timeout)
}

/// POST a JSON `body` to `path` on `addr`, with the admin bearer `token` if there is one;
/// returns the status code and the body.
pub fn post_json(
    addr: SocketAddr,
    path: &str,
    body: &str,
    token: Option<&str>,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    request(addr, "POST", path, Some(body), token, timeout)
}

fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    if let Some(b) = body {
        req.push_str(b);
    }
    stream.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed HTTP response");
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or_else(bad)?;
    Ok((code, body.to_string()))
}
