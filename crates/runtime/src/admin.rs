//! Admin HTTP: `/status` (JSON), `/metrics` (Prometheus text), `/health`, the fault API
//! (`/fault`, `/fault/link`, `/fault/heal`, `/fault/clock`; docs/faults.md) and membership
//! changes (`GET /members`, `POST /members/add`, `POST /members/remove`; docs/design.md,
//! "Membership").
//!
//! With `[tls] admin = true` the port speaks HTTPS only ([`serve`]): the replica's certificate
//! (the one its client ports present), no client certificate; a plain-HTTP request gets a
//! 400 that says to use HTTPS (docs/security.md, "Admin API").
//!
//! Handlers never touch the node loop: the loop publishes its latest `Status` into a watch
//! channel after every batch, metrics live in the process-wide recorder, and faults are
//! shared atomics and mutexes the transport and the clock read ([`crate::link::Faults`]).

use crate::client::ClientInput;
use crate::config::Member;
use crate::link::{FaultState, Faults, JitterDistribution, LinkSpec, Peers};
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use subtle::ConstantTimeEq;
use synod_core::wire::ServerMsg;
use synod_core::NodeId;
use synod_core::{MemberChange, ReplyBody, Status};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

#[derive(Clone)]
pub struct AdminState {
    pub me: Member,
    pub status: watch::Receiver<Status>,
    pub faults: Faults,
    /// Membership changes go through the node loop (None: the endpoints answer 503).
    pub control: Option<AdminControl>,
    /// Who may call the endpoints that change the cluster.
    pub access: AdminAccess,
}

/// Access rules of the endpoints that change the cluster (`POST /fault/*`, `/members/*`);
/// reading endpoints are open. See docs/security.md.
#[derive(Clone, Debug)]
pub struct AdminAccess {
    /// Required as `Authorization: Bearer <token>`; None = no token asked.
    pub token: Option<Arc<str>>,
    /// False: fault injection is switched off (403), whatever the token.
    pub faults: bool,
}

impl Default for AdminAccess {
    fn default() -> Self {
        AdminAccess { token: None, faults: true }
    }
}

/// What the membership endpoints need: the node loop's inbox (a change is an event like a
/// client request, answered on a connection of its own) and the current configuration.
#[derive(Clone)]
pub struct AdminControl {
    pub inbox: mpsc::Sender<ClientInput>,
    pub next_conn: Arc<AtomicU64>,
    /// The current members and their peer addresses (kept by the transport's `PeerSet`).
    pub members: Arc<Mutex<Vec<(NodeId, String)>>>,
}

/// How long a membership change may take before the endpoint gives up (the change may
/// still complete: check `GET /members`).
const RECONFIGURE_TIMEOUT: Duration = Duration::from_secs(10);

pub fn router(state: AdminState) -> Router {
    let faults = Router::new()
        .route("/fault/link", post(fault_link))
        .route("/fault/heal", post(fault_heal))
        .route("/fault/clock", post(fault_clock))
        .route("/fault/egress", post(fault_egress))
        .route_layer(middleware::from_fn_with_state(state.clone(), faults_enabled));
    let changes = Router::new()
        .route("/members/add", post(members_add))
        .route("/members/remove", post(members_remove))
        .merge(faults)
        .route_layer(middleware::from_fn_with_state(state.clone(), authorized));
    Router::new()
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/health", get(|| async { "ok" }))
        .route("/fault", get(fault_state))
        .route("/members", get(members))
        .merge(changes)
        .with_state(state)
}

/// How long a connection may take to send its first byte and finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a plain-HTTP request to an HTTPS admin port is told.
pub const PLAIN_HTTP_REFUSED: &str = "this admin port speaks HTTPS only ([tls] admin = true in the node config): \
use https:// with the cluster's CA, e.g. `curl --cacert <ca.pem> https://<admin_addr>/status` \
(synod fault, synod ctl and the harness read the CA from the node config)\n";

/// Serve the admin API on `listener`: plain HTTP without `tls`, HTTPS only with it.
pub async fn serve(listener: TcpListener, router: Router, tls: Option<synod_tls::TlsAcceptor>) {
    let Some(acceptor) = tls else {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!("admin HTTP server failed: {e}");
        }
        return;
    };
    loop {
        let (tcp, remote) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                tracing::warn!("admin: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (acceptor, router) = (acceptor.clone(), router.clone());
        tokio::spawn(async move {
            if let Err(e) = serve_https(tcp, acceptor, router).await {
                tracing::warn!(%remote, "admin: closing connection: {e}");
            }
        });
    }
}

/// One HTTPS connection. A first byte other than a TLS handshake record (0x16) is a client
/// speaking plain HTTP (or something else): it gets [`PLAIN_HTTP_REFUSED`] as an HTTP 400
/// instead of a TLS alert it cannot read.
async fn serve_https(mut tcp: TcpStream, acceptor: synod_tls::TlsAcceptor, router: Router) -> Result<(), String> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tcp.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        Ok(Ok(_)) => return Ok(()), // closed before sending anything
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err(format!("nothing received within {HANDSHAKE_TIMEOUT:?}")),
    }
    if first[0] != 0x16 {
        let answer = format!(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{PLAIN_HTTP_REFUSED}",
            PLAIN_HTTP_REFUSED.len()
        );
        let _ = tokio::time::timeout(Duration::from_secs(1), tcp.write_all(answer.as_bytes())).await;
        let _ = tcp.shutdown().await;
        return Err("plain HTTP (no TLS) on the HTTPS admin port: answered 400".into());
    }
    let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("TLS handshake failed: {e}")),
        Err(_) => return Err(format!("TLS handshake not done within {HANDSHAKE_TIMEOUT:?}")),
    };
    let service = hyper_util::service::TowerToHyperService::new(router);
    hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
        .await
        .map_err(|e| format!("HTTP: {e}"))
}

/// 401 unless the request carries the configured bearer token (compared in constant time).
async fn authorized(State(state): State<AdminState>, req: Request, next: Next) -> Response {
    if let Some(token) = &state.access.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
            tracing::warn!(path = %req.uri().path(), "admin: refused a request without the right bearer token");
            let body = "this endpoint needs `Authorization: Bearer <token>` with the admin token of the node config ([admin] token)\n";
            return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response();
        }
    }
    next.run(req).await
}

/// 403 when fault injection is switched off (`[admin] faults = false`).
async fn faults_enabled(State(state): State<AdminState>, req: Request, next: Next) -> Response {
    if !state.access.faults {
        let body = "fault injection is switched off on this replica ([admin] faults = false)\n";
        return (StatusCode::FORBIDDEN, body).into_response();
    }
    next.run(req).await
}

/// The protocol's status plus this node's addresses.
async fn status(State(state): State<AdminState>) -> Json<serde_json::Value> {
    let status = state.status.borrow().clone();
    let mut v = serde_json::to_value(&status).expect("status serializes");
    if let Some(obj) = v.as_object_mut() {
        obj.insert("peer_addr".into(), state.me.peer_addr.to_string().into());
        obj.insert("client_addr".into(), state.me.client_addr.to_string().into());
        obj.insert("admin_addr".into(), state.me.admin_addr.to_string().into());
    }
    Json(v)
}

async fn metrics() -> impl IntoResponse {
    let body = match crate::metrics::prometheus() {
        Some(h) => h.render(),
        None => "# no Prometheus recorder: another metrics recorder is installed in this process\n".into(),
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// `POST /fault/link` body. Every field but `to` defaults to a normal link: the request
/// replaces the emulation of those links.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkRequest {
    to: Target,
    #[serde(default)]
    delay_ms: f64,
    #[serde(default)]
    jitter_ms: f64,
    #[serde(default)]
    jitter_distribution: JitterDistribution,
    #[serde(default)]
    jitter_shape: Option<f64>,
    #[serde(default)]
    bandwidth_mbit: Option<f64>,
    #[serde(default)]
    loss: f64,
    #[serde(default)]
    block: bool,
}

/// `"*"` or a list of peer ids.
#[derive(Deserialize)]
#[serde(untagged)]
enum Target {
    Ids(Vec<NodeId>),
    Star(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClockRequest {
    offset_ms: i64,
}

/// A 400 with `{"error": ...}`.
fn bad_request(error: impl std::fmt::Display) -> Response {
    (StatusCode::BAD_REQUEST, Json(serde_json::json!({ "error": error.to_string() }))).into_response()
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("bad JSON body: {e}"))
}

async fn fault_state(State(state): State<AdminState>) -> Json<FaultState> {
    Json(state.faults.state())
}

async fn fault_link(State(state): State<AdminState>, body: Bytes) -> Response {
    let req: LinkRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    let peers = match req.to {
        Target::Ids(ids) => Peers::Some(ids),
        Target::Star(s) if s == "*" => Peers::All,
        Target::Star(s) => return bad_request(format!("\"to\" must be a list of peer ids or \"*\", got {s:?}")),
    };
    let spec = LinkSpec {
        delay_ms: req.delay_ms,
        jitter_ms: req.jitter_ms,
        jitter_distribution: req.jitter_distribution,
        jitter_shape: req.jitter_shape,
        bandwidth_mbit: req.bandwidth_mbit,
        loss: req.loss,
        block: req.block,
    };
    if let Err(e) = state.faults.set_links(&peers, &spec) {
        return bad_request(e);
    }
    tracing::info!(?peers, ?spec, "fault: link emulation set");
    Json(state.faults.state()).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EgressRequest {
    /// The node-wide egress rate; null lifts it.
    bandwidth_mbit: Option<f64>,
    /// How the NIC orders the frames of the links: "fq" (default) or "fifo".
    #[serde(default)]
    qdisc: crate::link::Qdisc,
}

/// `POST /fault/egress {"bandwidth_mbit": 100, "qdisc": "fq"}`: cap this replica's total
/// outgoing rate (all links share it, like a NIC); `null` lifts the cap. `qdisc` (default
/// `fq`) is how the NIC orders frames: per-peer fair queueing or one FIFO (docs/faults.md).
async fn fault_egress(State(state): State<AdminState>, body: Bytes) -> Response {
    let req: EgressRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    if let Err(e) = state.faults.set_egress(req.bandwidth_mbit, req.qdisc) {
        return bad_request(e);
    }
    tracing::info!(mbit = ?req.bandwidth_mbit, qdisc = %req.qdisc, "fault: node egress rate set");
    Json(state.faults.state()).into_response()
}

async fn fault_heal(State(state): State<AdminState>) -> Json<FaultState> {
    state.faults.heal();
    tracing::info!("fault: healed (links normal, clock offset 0)");
    Json(state.faults.state())
}

async fn fault_clock(State(state): State<AdminState>, body: Bytes) -> Response {
    let req: ClockRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    if let Err(e) = state.faults.set_clock_offset_ms(req.offset_ms) {
        return bad_request(e);
    }
    tracing::info!(offset_ms = req.offset_ms, "fault: clock offset set");
    Json(state.faults.state()).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddRequest {
    id: NodeId,
    peer_addr: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RemoveRequest {
    id: NodeId,
}

/// `GET /members`: the configuration this replica follows, with peer addresses, and the
/// leader it knows.
async fn members(State(state): State<AdminState>) -> Response {
    let Some(c) = &state.control else {
        return (StatusCode::SERVICE_UNAVAILABLE, "membership API not available").into_response();
    };
    let list: Vec<serde_json::Value> = c
        .members
        .lock()
        .expect("members lock")
        .iter()
        .map(|(id, addr)| serde_json::json!({ "id": id, "peer_addr": addr }))
        .collect();
    let leader = state.status.borrow().leader;
    Json(serde_json::json!({ "members": list, "leader": leader })).into_response()
}

async fn members_add(State(state): State<AdminState>, body: Bytes) -> Response {
    let req: AddRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    if let Err(e) = req.peer_addr.parse::<std::net::SocketAddr>() {
        return bad_request(format!("peer_addr {:?}: {e}", req.peer_addr));
    }
    reconfigure(&state, MemberChange::Add { id: req.id, addr: req.peer_addr }).await
}

async fn members_remove(State(state): State<AdminState>, body: Bytes) -> Response {
    let req: RemoveRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    reconfigure(&state, MemberChange::Remove { id: req.id }).await
}

/// Hand the change to the node loop on a connection of its own and map the protocol's
/// answer: 200 done; 409 `{"error", "leader"}` not the leader (ask that one); 503 refused
/// for now (another change in progress: retry); 400 invalid or unsupported; 504 no answer.
async fn reconfigure(state: &AdminState, change: MemberChange) -> Response {
    let Some(c) = &state.control else {
        return (StatusCode::SERVICE_UNAVAILABLE, "membership API not available").into_response();
    };
    let conn = c.next_conn.fetch_add(1, Ordering::Relaxed);
    let (tx, mut rx) = mpsc::channel(8);
    let desc = format!("{change:?}");
    if c.inbox.send(ClientInput::Open { conn, replies: tx }).await.is_err()
        || c.inbox.send(ClientInput::Reconfigure { conn, id: conn, change }).await.is_err()
    {
        return (StatusCode::SERVICE_UNAVAILABLE, "replica shutting down").into_response();
    }
    let answer = tokio::time::timeout(RECONFIGURE_TIMEOUT, async {
        while let Some(m) = rx.recv().await {
            if let ServerMsg::Reply(r) = m {
                if r.seq == conn {
                    return Some(r.body);
                }
            }
        }
        None
    })
    .await;
    let _ = c.inbox.send(ClientInput::Closed { conn }).await;
    let error = |code: StatusCode, v: serde_json::Value| (code, Json(v)).into_response();
    match answer {
        Ok(Some(ReplyBody::Done(_))) => {
            tracing::info!(change = %desc, "membership change committed");
            Json(serde_json::json!({ "ok": true })).into_response()
        }
        Ok(Some(ReplyBody::NotLeader { leader })) => {
            error(StatusCode::CONFLICT, serde_json::json!({ "error": "not the leader", "leader": leader }))
        }
        Ok(Some(ReplyBody::Rejected { reason })) => {
            error(StatusCode::SERVICE_UNAVAILABLE, serde_json::json!({ "error": reason, "retry": true }))
        }
        Ok(Some(ReplyBody::Invalid { reason })) => bad_request(reason),
        Ok(Some(other)) => bad_request(format!("unexpected answer {other:?}")),
        Ok(None) => (StatusCode::SERVICE_UNAVAILABLE, "replica shutting down").into_response(),
        Err(_) => error(
            StatusCode::GATEWAY_TIMEOUT,
            serde_json::json!({ "error": format!("no answer within {RECONFIGURE_TIMEOUT:?}; the change may still complete"), "retry": true }),
        ),
    }
}
