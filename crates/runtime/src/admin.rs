//! Admin HTTP: `/status` (JSON), `/metrics` (Prometheus text), `/health`.
//!
//! Handlers never touch the node loop: the loop publishes its latest `Status` into a watch
//! channel after every batch, and metrics live in the process-wide recorder.

use crate::config::Member;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use synod_core::Status;
use tokio::sync::watch;

#[derive(Clone)]
pub struct AdminState {
    pub me: Member,
    pub status: watch::Receiver<Status>,
}

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/health", get(|| async { "ok" }))
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
