//! TLS for synod, with rustls (docs/security.md, "TLS").
//!
//! - **Between replicas: mutual TLS.** Every replica holds a certificate signed by the
//!   cluster's CA whose subject alternative names include [`node_name`]`(id)`
//!   (`synod-node-<id>`). The dialer checks that the replica it called presents the name of the
//!   member it meant to reach; the acceptor asks for a client certificate, checks its chain
//!   against the CA, and after the hello checks that the certificate names the member the
//!   hello claims to be ([`peer_is`]). A connection that fails any of this is closed before
//!   anything it sent reaches the protocol.
//! - **Client ports (native and Redis): server-authenticated TLS.** The replica presents the
//!   same certificate; clients check it against the CA file they are given and the host they
//!   dialed (an IP address SAN for `127.0.0.1:…` endpoints). Clients present no certificate
//!   (the password authenticates them).
//! - [`generate`]: a throwaway CA and node certificates (rcgen), for `synod local --tls`.
//!
//! [`Stream`] is a TCP connection with or without TLS; its halves ([`ReadHalf`],
//! [`WriteHalf`]) are the plain TCP halves when there is no TLS, so a cluster without TLS
//! runs exactly the code it ran before. Writers on a TLS stream must `flush` after
//! `write_all`: rustls may hold the tail of a record until then.

pub use rustls;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
pub use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The DNS name a replica's certificate must carry: `synod-node-<id>`.
pub fn node_name(id: u32) -> String {
    format!("synod-node-{id}")
}

/// Why TLS could not be set up or a peer's certificate was refused.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} file {path}: {source}")]
    Read { what: &'static str, path: PathBuf, source: io::Error },
    #[error("{what} file {path}: {reason}")]
    Pem { what: &'static str, path: PathBuf, reason: String },
    #[error("TLS setup: {0}")]
    Setup(String),
    #[error("peer certificate: {0}")]
    Peer(String),
}

/// The crypto provider of every config built here (explicit: no process-wide default).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { what, path: path.into(), source })
}

/// Every certificate of a PEM file (a chain: the node's certificate first).
pub fn load_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().map_err(|e| TlsError::Pem {
        what,
        path: path.into(),
        reason: e.to_string(),
    })?;
    if certs.is_empty() {
        return Err(TlsError::Pem { what, path: path.into(), reason: "no CERTIFICATE block in it".into() });
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read("key", path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Pem {
        what: "key",
        path: path.into(),
        reason: format!("no usable private key in it ({e})"),
    })
}

fn roots(ca: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in load_certs("CA", ca)? {
        store.add(cert).map_err(|e| TlsError::Pem { what: "CA", path: ca.into(), reason: e.to_string() })?;
    }
    Ok(Arc::new(store))
}

/// The files of one replica's TLS identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFiles {
    /// The cluster's CA certificate(s): what peers' (and, for clients, replicas')
    /// certificates must chain to.
    pub ca: PathBuf,
    /// This replica's certificate chain (SAN `synod-node-<id>`).
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A replica's TLS machinery, built once at startup from its files.
#[derive(Clone)]
pub struct NodeTls {
    /// Accepts peers: a client certificate chaining to the CA is required.
    pub peer_acceptor: TlsAcceptor,
    /// Dials peers: presents this replica's certificate, checks the peer's name.
    pub peer_connector: TlsConnector,
    /// Accepts clients (native and Redis ports): no client certificate asked.
    pub client_acceptor: TlsAcceptor,
    /// Dials other replicas' native client ports (the Redis front end forwards there).
    pub client_connector: TlsConnector,
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeTls")
    }
}

impl NodeTls {
    /// Load and check the files; every error names the file.
    pub fn load(files: &NodeFiles) -> Result<NodeTls, TlsError> {
        let roots = roots(&files.ca)?;
        let chain = load_certs("certificate", &files.cert)?;
        let key = load_key(&files.key)?;
        let setup = |e: rustls::Error| TlsError::Setup(e.to_string());
        let versions = rustls::DEFAULT_VERSIONS;

        let client_verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| TlsError::Setup(e.to_string()))?;
        let peer_server = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .map_err(setup)?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| TlsError::Setup(format!("{} / {}: {e}", files.cert.display(), files.key.display())))?;
        let peer_client = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .map_err(setup)?
            .with_root_certificates(roots.clone())
            .with_client_auth_cert(chain.clone(), key.clone_key())
            .map_err(setup)?;
        let client_server = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(versions)
            .map_err(setup)?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(setup)?;
        Ok(NodeTls {
            peer_acceptor: TlsAcceptor::from(Arc::new(peer_server)),
            peer_connector: TlsConnector::from(Arc::new(peer_client)),
            client_acceptor: TlsAcceptor::from(Arc::new(client_server)),
            client_connector: client_connector(&files.ca)?,
        })
    }
}

/// A connector for clients: trusts the CA in `ca`, presents no certificate.
pub fn client_connector(ca: &Path) -> Result<TlsConnector, TlsError> {
    Ok(TlsConnector::from(client_config(ca)?))
}

/// The rustls configuration of a client that trusts the CA in `ca` and presents no
/// certificate (also for blocking clients: `rustls::ClientConnection`).
pub fn client_config(ca: &Path) -> Result<Arc<ClientConfig>, TlsError> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(rustls::DEFAULT_VERSIONS)
        .map_err(|e| TlsError::Setup(e.to_string()))?
        .with_root_certificates(roots(ca)?)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The name a client checks a replica's certificate against when it dialed `endpoint`
/// (`host:port`): the host, an IP address or a DNS name.
pub fn server_name_of(endpoint: &str) -> Result<ServerName<'static>, TlsError> {
    let host = match endpoint.rsplit_once(':') {
        Some((host, _port)) => host.trim_start_matches('[').trim_end_matches(']'),
        None => endpoint,
    };
    ServerName::try_from(host.to_owned())
        .map_err(|e| TlsError::Setup(format!("{host:?} is not a TLS server name: {e}")))
}

/// The name peer `id`'s certificate must carry, as a rustls server name.
pub fn peer_server_name(id: u32) -> ServerName<'static> {
    ServerName::try_from(node_name(id)).expect("synod-node-<n> is a valid DNS name")
}

/// Check that the certificate a peer presented on an accepted connection names member `id`.
/// Its chain was verified against the CA during the handshake.
pub fn peer_is(stream: &tokio_rustls::server::TlsStream<TcpStream>, id: u32) -> Result<(), TlsError> {
    let certs = stream.get_ref().1.peer_certificates().unwrap_or_default();
    let leaf = certs.first().ok_or_else(|| TlsError::Peer("the peer presented no certificate".into()))?;
    cert_names(leaf, id)
}

/// [`peer_is`] on an accepted [`Stream`]; a plain or client-side stream has no peer
/// certificate to check and fails.
pub fn stream_peer_is(stream: &Stream, id: u32) -> Result<(), TlsError> {
    match stream {
        Stream::Tls(s) => match &**s {
            tokio_rustls::TlsStream::Server(s) => peer_is(s, id),
            tokio_rustls::TlsStream::Client(_) => Err(TlsError::Peer("not an accepted connection".into())),
        },
        Stream::Plain(_) => Err(TlsError::Peer("the connection is not TLS".into())),
    }
}

/// Whether `cert` is valid for `synod-node-<id>`.
pub fn cert_names(cert: &CertificateDer<'_>, id: u32) -> Result<(), TlsError> {
    let parsed = webpki::EndEntityCert::try_from(cert).map_err(|e| TlsError::Peer(format!("unreadable: {e}")))?;
    parsed.verify_is_valid_for_subject_name(&peer_server_name(id)).map_err(|_| {
        TlsError::Peer(format!("the certificate does not name {} (a certificate of another member?)", node_name(id)))
    })
}

/// Files written by [`generate`].
#[derive(Clone, Debug)]
pub struct Generated {
    pub ca: PathBuf,
    /// Per node id, in the order given.
    pub nodes: Vec<(u32, NodeFiles)>,
}

/// A throwaway CA and one certificate per node under `dir` (created), for a local cluster.
/// Node `id`'s certificate names `synod-node-<id>`, `localhost` and the IP addresses given
/// for it (what clients dial). Files already there are reused, so a restarted cluster keeps
/// its certificates. Keys are written readable by the owner only.
pub fn generate(dir: &Path, nodes: &[(u32, Vec<IpAddr>)]) -> Result<Generated, TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
    };
    let gen = |e: rcgen::Error| TlsError::Setup(format!("generating certificates: {e}"));
    let write = |path: &Path, text: &str, private: bool| -> Result<(), TlsError> {
        let io = |source| TlsError::Read { what: "generated", path: path.into(), source };
        std::fs::write(path, text).map_err(io)?;
        if private {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
        }
        Ok(())
    };
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Read {
        what: "TLS directory",
        path: dir.into(),
        source,
    })?;
    let ca_path = dir.join("ca.pem");
    let files = |id: u32| NodeFiles {
        ca: ca_path.clone(),
        cert: dir.join(format!("node{id}.pem")),
        key: dir.join(format!("node{id}.key")),
    };
    let all_there = ca_path.exists() && nodes.iter().all(|(id, _)| files(*id).cert.exists() && files(*id).key.exists());
    if !all_there {
        let ca_key = KeyPair::generate().map_err(gen)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(gen)?;
        ca.distinguished_name.push(DnType::CommonName, "synod throwaway CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca_cert = ca.self_signed(&ca_key).map_err(gen)?;
        for (id, ips) in nodes {
            let key = KeyPair::generate().map_err(gen)?;
            let mut p = CertificateParams::new(vec![node_name(*id), "localhost".to_string()]).map_err(gen)?;
            for ip in ips {
                if !p.subject_alt_names.contains(&SanType::IpAddress(*ip)) {
                    p.subject_alt_names.push(SanType::IpAddress(*ip));
                }
            }
            p.distinguished_name.push(DnType::CommonName, node_name(*id));
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
            let cert = p.signed_by(&key, &ca_cert, &ca_key).map_err(gen)?;
            let f = files(*id);
            write(&f.cert, &cert.pem(), false)?;
            write(&f.key, &key.serialize_pem(), true)?;
        }
        write(&ca_path, &ca_cert.pem(), false)?;
    }
    Ok(Generated { ca: ca_path.clone(), nodes: nodes.iter().map(|(id, _)| (*id, files(*id))).collect() })
}

/// A TCP connection, with or without TLS.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

/// The read half of a [`Stream`].
pub enum ReadHalf {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<Box<tokio_rustls::TlsStream<TcpStream>>>),
}

/// The write half of a [`Stream`].
pub enum WriteHalf {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<Box<tokio_rustls::TlsStream<TcpStream>>>),
}

impl Stream {
    /// Split into halves that can be used from two tasks.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Stream::Plain(s) => {
                let (r, w) = s.into_split();
                (ReadHalf::Plain(r), WriteHalf::Plain(w))
            }
            Stream::Tls(s) => {
                let (r, w) = tokio::io::split(s);
                (ReadHalf::Tls(r), WriteHalf::Tls(w))
            }
        }
    }

    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// Client side: TLS to `name` through `connector`, or plain without one.
    pub async fn connect(tcp: TcpStream, tls: Option<(&TlsConnector, ServerName<'static>)>) -> io::Result<Stream> {
        match tls {
            None => Ok(Stream::Plain(tcp)),
            Some((connector, name)) => {
                let s = connector.connect(name, tcp).await?;
                Ok(Stream::Tls(Box::new(tokio_rustls::TlsStream::Client(s))))
            }
        }
    }

    /// Server side: the TLS handshake through `acceptor`, or plain without one.
    pub async fn accept(tcp: TcpStream, acceptor: Option<&TlsAcceptor>) -> io::Result<Stream> {
        match acceptor {
            None => Ok(Stream::Plain(tcp)),
            Some(a) => Ok(Stream::Tls(Box::new(tokio_rustls::TlsStream::Server(a.accept(tcp).await?)))),
        }
    }
}

macro_rules! delegate_read {
    ($t:ty) => {
        impl AsyncRead for $t {
            fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
                    Self::Tls(s) => Pin::new(s).poll_read(cx, buf),
                }
            }
        }
    };
}

macro_rules! delegate_write {
    ($t:ty) => {
        impl AsyncWrite for $t {
            fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
                    Self::Tls(s) => Pin::new(s).poll_write(cx, buf),
                }
            }
            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_flush(cx),
                    Self::Tls(s) => Pin::new(s).poll_flush(cx),
                }
            }
            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
                    Self::Tls(s) => Pin::new(s).poll_shutdown(cx),
                }
            }
            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                match self.get_mut() {
                    Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                    Self::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
                }
            }
            fn is_write_vectored(&self) -> bool {
                match self {
                    Self::Plain(s) => s.is_write_vectored(),
                    Self::Tls(s) => s.is_write_vectored(),
                }
            }
        }
    };
}

delegate_read!(Stream);
delegate_read!(ReadHalf);
delegate_write!(Stream);
delegate_write!(WriteHalf);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn local() -> Vec<IpAddr> {
        vec!["127.0.0.1".parse().unwrap()]
    }

    #[test]
    fn generated_certificates_name_their_node_and_are_reused() {
        let dir = tempfile::tempdir().unwrap();
        let g = generate(dir.path(), &[(1, local()), (2, local())]).unwrap();
        let cert1 = load_certs("certificate", &g.nodes[0].1.cert).unwrap();
        assert!(cert_names(&cert1[0], 1).is_ok());
        assert!(cert_names(&cert1[0], 2).is_err(), "node 1's certificate does not name node 2");
        assert!(NodeTls::load(&g.nodes[1].1).is_ok());
        let before = std::fs::read(&g.ca).unwrap();
        generate(dir.path(), &[(1, local()), (2, local())]).unwrap();
        assert_eq!(std::fs::read(&g.ca).unwrap(), before, "existing files are kept");
        let err = NodeTls::load(&NodeFiles { key: dir.path().join("missing.key"), ..g.nodes[0].1.clone() });
        assert!(err.unwrap_err().to_string().contains("missing.key"));
        assert!(load_certs("CA", &g.nodes[0].1.key).is_err(), "a key file is no certificate");
    }

    /// Mutual TLS between two replicas of one CA works and names the dialer; a replica of
    /// another CA is refused by the handshake itself.
    #[tokio::test]
    async fn mutual_tls_accepts_the_cluster_and_refuses_strangers() {
        let dir = tempfile::tempdir().unwrap();
        let ours = generate(&dir.path().join("a"), &[(1, local()), (2, local())]).unwrap();
        let theirs = generate(&dir.path().join("b"), &[(2, local())]).unwrap();
        let node1 = NodeTls::load(&ours.nodes[0].1).unwrap();
        let node2 = NodeTls::load(&ours.nodes[1].1).unwrap();
        let stranger = NodeTls::load(&theirs.nodes[0].1).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = node1.peer_acceptor.clone();
        let server = tokio::spawn(async move {
            let mut results = Vec::new();
            for _ in 0..2 {
                let (tcp, _) = listener.accept().await.unwrap();
                results.push(match acceptor.accept(tcp).await {
                    Ok(mut s) => {
                        let named = peer_is(&s, 2).is_ok() && peer_is(&s, 3).is_err();
                        let mut got = [0u8; 5];
                        s.read_exact(&mut got).await.unwrap();
                        Ok((named, got))
                    }
                    Err(e) => Err(e.to_string()),
                });
            }
            results
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut s = Stream::connect(tcp, Some((&node2.peer_connector, peer_server_name(1)))).await.unwrap();
        s.write_all(b"hello").await.unwrap();
        s.flush().await.unwrap();
        let tcp = TcpStream::connect(addr).await.unwrap();
        let refused = Stream::connect(tcp, Some((&stranger.peer_connector, peer_server_name(1)))).await;
        assert!(refused.is_err(), "a server of another CA is not trusted");
        let results = server.await.unwrap();
        assert_eq!(results[0], Ok((true, *b"hello")));
        assert!(results[1].is_err(), "the stranger's client certificate is refused");
    }
}
