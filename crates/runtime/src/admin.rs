//! Admin HTTP: `/status` (JSON), `/metrics` (Prometheus text), `/health`, and the fault API
//! (`/fault`, `/fault/link`, `/fault/heal`, `/fault/clock`; docs/faults.md).
//!
//! Handlers never touch the node loop: the loop publishes its latest `Status` into a watch
//! channel after every batch, metrics live in the process-wide recorder, and faults are
//! shared atomics and mutexes the transport and the clock read ([`crate::link::Faults`]).

use crate::config::Member;
use crate::link::{FaultState, Faults, JitterDistribution, LinkSpec, Peers};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use synod_core::NodeId;
use synod_core::Status;
use tokio::sync::watch;

#[derive(Clone)]
pub struct AdminState {
    pub me: Member,
    pub status: watch::Receiver<Status>,
    pub faults: Faults,
}

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/health", get(|| async { "ok" }))
        .route("/fault", get(fault_state))
        .route("/fault/link", post(fault_link))
        .route("/fault/heal", post(fault_heal))
        .route("/fault/clock", post(fault_clock))
        .with_state(state)
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
