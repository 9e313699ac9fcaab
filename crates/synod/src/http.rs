//! A minimal blocking HTTP/1.0 GET for the replicas' admin endpoints (`/health`, `/status`).
//! HTTP/1.0 makes the server close the connection after the response, so the body is
//! everything after the header, with no chunked encoding to undo.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// GET `path` from `addr`; returns the status code and the body.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed HTTP response");
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or_else(bad)?;
    Ok((code, body.to_string()))
}
