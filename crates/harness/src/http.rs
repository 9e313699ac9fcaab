//! A minimal blocking HTTP/1.0 client for the replicas' admin endpoints (`/health`,
//! `/status`, `/fault/...`), over plain TCP or, when the node config has `[tls] admin = true`,
//! over TLS checked against the cluster's CA (docs/security.md, "Admin API"). HTTP/1.0 makes
//! the server close the connection after the response, so the body is everything after the
//! header, with no chunked encoding to undo.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;
use synod_runtime::tls::rustls;
use synod_runtime::NodeConfig;

/// One replica's admin endpoint: its address, whether it speaks HTTPS (with the CA to check
/// its certificate) and the bearer token for the endpoints that change the cluster.
#[derive(Clone)]
pub struct Admin {
    /// The admin HTTP address (`admin_addr` of the node config).
    pub addr: SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    token: Option<String>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").field("addr", &self.addr).field("tls", &self.tls.is_some()).finish()
    }
}

impl Admin {
    /// Plain HTTP, no token.
    pub fn plain(addr: SocketAddr) -> Admin {
        Admin { addr, tls: None, token: None }
    }

    /// HTTPS checked against the CA file `ca`, or plain without one; with `token` for POSTs.
    pub fn new(addr: SocketAddr, ca: Option<&std::path::Path>, token: Option<String>) -> Result<Admin, String> {
        let tls = match ca {
            Some(ca) => Some(synod_runtime::tls::client_config(ca).map_err(|e| format!("admin TLS: {e}"))?),
            None => None,
        };
        Ok(Admin { addr, tls, token })
    }

    /// The admin endpoint of the replica `config` describes: HTTPS when its `[tls]` has
    /// `admin = true`, with its admin token.
    pub fn of(config: &NodeConfig) -> Result<Admin, String> {
        let ca = config.tls.as_ref().filter(|t| t.admin).map(|t| t.ca.as_path());
        let token = config.admin_token().map_err(|e| e.to_string())?;
        Admin::new(config.me().admin_addr, ca, token)
    }

    /// The admin endpoint of the replica whose config file is `path`.
    pub fn of_file(path: &std::path::Path) -> Result<Admin, String> {
        let config = NodeConfig::load(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Admin::of(&config)
    }

    /// Whether requests go over TLS (`https://`).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// `http://addr/path` or `https://addr/path`, for messages.
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", if self.is_tls() { "https" } else { "http" }, self.addr)
    }

    /// GET `path`; returns the status code and the body.
    pub fn get(&self, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
        self.request("GET", path, None, timeout)
    }

    /// POST a JSON `body` to `path`, with the admin bearer token if there is one; returns the
    /// status code and the body.
    pub fn post_json(&self, path: &str, body: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
        self.request("POST", path, Some(body), timeout)
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        timeout: Duration,
    ) -> std::io::Result<(u16, String)> {
        let addr = self.addr;
        let tcp = TcpStream::connect_timeout(&addr, timeout)?;
        tcp.set_read_timeout(Some(timeout))?;
        tcp.set_write_timeout(Some(timeout))?;
        let mut req = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n");
        if let (Some(t), Some(_)) = (&self.token, body) {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        if let Some(b) = body {
            req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len()));
        }
        req.push_str("\r\n");
        if let Some(b) = body {
            req.push_str(b);
        }
        let raw = match &self.tls {
            None => exchange(tcp, req.as_bytes())?,
            Some(config) => {
                let name = synod_runtime::tls::server_name_of(&addr.to_string())
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
                let conn = rustls::ClientConnection::new(config.clone(), name).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("TLS to {addr}: {e}"))
                })?;
                exchange(rustls::StreamOwned::new(conn, tcp), req.as_bytes())
                    .map_err(|e| std::io::Error::new(e.kind(), format!("TLS to admin {addr}: {e}")))?
            }
        };
        let text = String::from_utf8_lossy(&raw);
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed HTTP response");
        let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
        let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or_else(bad)?;
        Ok((code, body.to_string()))
    }
}

/// Send `req` and read until the server closes. A TLS server that closes without
/// close_notify after a complete answer is not an error here (the answer is all there).
fn exchange(mut stream: impl Read + Write, req: &[u8]) -> std::io::Result<Vec<u8>> {
    stream.write_all(req)?;
    stream.flush()?;
    let mut raw = Vec::new();
    match stream.read_to_end(&mut raw) {
        Ok(_) => Ok(raw),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => Ok(raw),
        Err(e) => Err(e),
    }
}
