//! The leader and membership changes: who leads according to the replicas' `/status`, and
//! adding or removing a replica through the leader's admin API (`synod fault add-node` /
//! `remove-node`, `synod ctl member`).

use super::{process::supervise_request, FaultError, HTTP_TIMEOUT};
use crate::cluster::{ClusterFile, NodeState};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use synod_core::NodeId;

/// The leader according to the replicas' `/status`: the one node claiming the role, or the
/// leader most replicas name; in a leaderless cluster (replicas in role `replica`), the
/// running replica with the lowest id.
pub fn find_leader(c: &ClusterFile) -> Result<NodeId, String> {
    let mut claims = Vec::new();
    let mut named: BTreeMap<NodeId, usize> = BTreeMap::new();
    let mut seen = Vec::new();
    let mut leaderless = Vec::new();
    for n in c.nodes.iter().filter(|n| n.state == NodeState::Running) {
        let Ok((200, body)) = n.admin().get("/status", HTTP_TIMEOUT) else {
            seen.push(format!("{}: no answer", n.id));
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(&body) else { continue };
        let role = v["role"].as_str().unwrap_or("?").to_string();
        if role == "leader" {
            claims.push(n.id);
        }
        if role == "replica" {
            leaderless.push(n.id);
        }
        if let Some(l) = v["leader"].as_u64() {
            *named.entry(l as NodeId).or_default() += 1;
        }
        seen.push(format!("{}: {role}", n.id));
    }
    if claims.len() == 1 {
        return Ok(claims[0]);
    }
    // A leaderless protocol (EPaxos, Mencius): every replica leads commands; `leader` names
    // the first running replica, so one scenario can fail "the leader" of every protocol.
    if claims.is_empty() && named.is_empty() && !leaderless.is_empty() {
        return leaderless.iter().min().copied().ok_or_else(|| "no replica answered".into());
    }
    let best = named.iter().max_by_key(|(_, &count)| count);
    match best {
        Some((&id, _)) if claims.is_empty() || claims.contains(&id) => Ok(id),
        _ => Err(format!("no single leader right now ({})", seen.join(", "))),
    }
}

/// How long a membership change may take (leader changes and retries included).
const MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(30);

/// POST a membership change (`op` = add | remove, `body` its JSON) to the leader's admin
/// API, following `not the leader` answers and retrying while another change is in
/// progress or no leader is known. Shared with `synod ctl member`.
pub fn change_membership(c: &ClusterFile, body: &Value, op: &str) -> Result<String, String> {
    let deadline = Instant::now() + MEMBERSHIP_TIMEOUT;
    let mut target = find_leader(c).ok();
    let mut last = String::from("no leader found");
    loop {
        if let Some(n) = target.and_then(|id| c.node(id).ok()) {
            match n.admin().post_json(&format!("/members/{op}"), &body.to_string(), Duration::from_secs(12)) {
                Ok((200, _)) => return Ok(format!("membership: {op} {body} committed (leader node {})", n.id)),
                Ok((409, b)) => {
                    last = format!("node {} is not the leader: {b}", n.id);
                    let hint = serde_json::from_str::<Value>(&b).ok().and_then(|v| v["leader"].as_u64());
                    target = hint.map(|l| l as NodeId).filter(|l| c.node(*l).is_ok());
                    if target.is_some() {
                        continue;
                    }
                }
                Ok((400, b)) => return Err(format!("membership {op} refused: {b}")),
                Ok((code, b)) => last = format!("node {} answered {code}: {b}", n.id),
                Err(e) => last = format!("node {}: {e}", n.id),
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("membership {op} {body} not done within {MEMBERSHIP_TIMEOUT:?}: {last}"));
        }
        std::thread::sleep(Duration::from_millis(200));
        target = find_leader(c).ok();
    }
}

/// `add-node`: the supervisor starts a joining replica, then the leader adds it.
pub(super) fn add_node(file_path: &Path, c: &ClusterFile) -> Result<Vec<String>, FaultError> {
    let id = c.ids().into_iter().max().unwrap_or(0) + 1;
    let mut out = vec![supervise_request(file_path, c, &format!("join-{id}"), |f| {
        f.node(id).is_ok_and(|n| n.state == NodeState::Running)
    })?];
    let (_, now) = ClusterFile::load(file_path).map_err(FaultError::Failed)?;
    let n = now.node(id).map_err(FaultError::Failed)?.clone();
    let deadline = Instant::now() + super::process::RESTART_TIMEOUT;
    while !matches!(n.admin().get("/health", HTTP_TIMEOUT), Ok((200, _))) {
        if Instant::now() >= deadline {
            return Err(FaultError::Failed(format!("new node {id} never answered /health; see {}", n.log.display())));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    out.push(format!("node {id} started (pid {}, peer {}, client {})", n.pid.unwrap_or(0), n.peer_addr, n.client_addr));
    let body = json!({ "id": id, "peer_addr": n.peer_addr.to_string() });
    out.push(change_membership(&now, &body, "add").map_err(FaultError::Failed)?);
    Ok(out)
}
