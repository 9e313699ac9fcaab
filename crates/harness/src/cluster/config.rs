//! The replicas' configuration files: ports (a fixed layout or free ones), one
//! `nodeN.toml` per replica in the cluster directory, a fresh peer secret and admin token.

use super::{Ports, Spec};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};
use synod_runtime::{Member, NodeConfig};

/// Check the ports, create the directory and write one config per node.
pub(super) fn prepare(spec: &Spec) -> Result<(PathBuf, Vec<(NodeConfig, PathBuf)>), String> {
    let n = spec.nodes;
    if n == 0 {
        return Err("a cluster needs at least one replica".into());
    }
    synod_protocols::registry::find(&spec.protocol).map_err(|e| format!("protocol: {e}"))?;
    let addr = |port: u16| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let members: Vec<Member> = match spec.ports {
        Ports::Base(base) => {
            if u32::from(base) + 300 + n > u32::from(u16::MAX) {
                return Err(format!(
                    "--base-port {base} leaves no room for {n} nodes (needs base + 300 + nodes <= 65535)"
                ));
            }
            let p = |off: u32| addr((u32::from(base) + off) as u16);
            (1..=n)
                .map(|i| Member {
                    id: i,
                    peer_addr: p(i),
                    client_addr: p(100 + i),
                    admin_addr: p(200 + i),
                    resp_addr: Some(p(300 + i)),
                })
                .collect()
        }
        Ports::Free => {
            // Bound together so they are distinct, released just before the replicas bind.
            let listeners: Vec<TcpListener> = (0..3 * n)
                .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("cannot find free ports: {e}"))?;
            let ports: Vec<u16> = listeners.iter().filter_map(|l| l.local_addr().ok()).map(|a| a.port()).collect();
            (1..=n)
                .map(|i| {
                    let k = 3 * (i - 1) as usize;
                    Member {
                        id: i,
                        peer_addr: addr(ports[k]),
                        client_addr: addr(ports[k + 1]),
                        admin_addr: addr(ports[k + 2]),
                        resp_addr: None,
                    }
                })
                .collect()
        }
    };
    for m in &members {
        let resp = m.resp_addr.map(|a| ("RESP", a));
        for (kind, a) in
            [("peer", m.peer_addr), ("client", m.client_addr), ("admin", m.admin_addr)].into_iter().chain(resp)
        {
            if let Err(e) = TcpListener::bind(a) {
                return Err(format!(
                    "port {} ({kind} port of node {}) is not available: {e}; choose another --base-port",
                    a.port(),
                    m.id
                ));
            }
        }
    }
    let dir = match &spec.data_dir {
        Some(d) => d.clone(),
        None => {
            let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
            std::env::temp_dir().join(format!("synod-local-{}-{stamp}", std::process::id()))
        }
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let dir = dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut configs = Vec::new();
    // Every local cluster gets its own peer secret and admin token (docs/security.md): the
    // default is authenticated, and `synod fault` reads the token from the node configs.
    let cluster_secret = synod_runtime::peer_auth::random_hex(32);
    let admin_token = synod_runtime::peer_auth::random_hex(24);
    let tls = if spec.tls {
        let nodes: Vec<_> = members
            .iter()
            .map(|m| {
                let mut ips = vec![m.client_addr.ip(), m.peer_addr.ip(), m.admin_addr.ip()];
                ips.extend(m.resp_addr.map(|a| a.ip()));
                (m.id, ips)
            })
            .chain(spec.extra_certs.iter().map(|&id| (id, vec![std::net::IpAddr::from([127, 0, 0, 1])])))
            .collect();
        Some(synod_runtime::tls::generate(&dir.join("tls"), &nodes).map_err(|e| e.to_string())?)
    } else {
        None
    };
    for m in &members {
        let config = NodeConfig {
            id: m.id,
            cluster: "synod-local".into(),
            protocol: spec.protocol.clone(),
            data_dir: Some(dir.join(format!("node{}", m.id))),
            in_memory: spec.in_memory,
            fsync: spec.fsync,
            members: members.clone(),
            params: spec.params.clone(),
            limits: synod_core::Limits::default(),
            log_level: Some(spec.log_level.clone()),
            password: spec.password.clone(),
            cluster_secret: Some(cluster_secret.clone()),
            cluster_secret_file: None,
            admin: synod_runtime::AdminConfig { token: Some(admin_token.clone()), ..Default::default() },
            max_connections: synod_runtime::NodeConfig::DEFAULT_MAX_CONNECTIONS,
            max_pending_bytes: synod_runtime::NodeConfig::DEFAULT_MAX_PENDING_BYTES,
            clock_error_us: 0,
            tls: tls.as_ref().map(|g| {
                let files = &g.nodes.iter().find(|(id, _)| *id == m.id).expect("a certificate per member").1;
                synod_runtime::TlsConfig {
                    ca: files.ca.clone(),
                    cert: files.cert.clone(),
                    key: files.key.clone(),
                    peers: true,
                    native: true,
                    redis: true,
                    admin: true,
                }
            }),
        };
        config.validate().map_err(|e| e.to_string())?;
        let text = toml::to_string(&config).map_err(|e| format!("cannot render the config of node {}: {e}", m.id))?;
        let path = dir.join(format!("node{}.toml", m.id));
        let text = format!("# Written by `synod local`; run with `synod server --config {}`.\n{text}", path.display());
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        configs.push((config, path));
    }
    Ok((dir, configs))
}
