//! The nemesis (`synod fault`). Hurts a running cluster described by `cluster.toml` (see
//! [`crate::cluster`]): kill -9 and restart, pause/resume, partitions (the HoliPaxos shapes
//! or any set of links, one-way too), link delay/jitter/bandwidth/loss, CPU quotas and clock
//! offsets.
//!
//! Process faults use signals on the pids in `cluster.toml` (checked against
//! `/proc/<pid>/cmdline` first, so a stale file never signals an unrelated process). Network
//! and clock faults go through each replica's admin HTTP API (`/fault/link`, `/fault/heal`,
//! `/fault/clock`, see docs/faults.md): the replica's transport emulates its *outgoing*
//! links, so cutting A→B is a setting on A. CPU slowdown uses a cgroup cpu quota.
//!
//! The same [`Action`] values are fired by `synod scenario run` at scheduled times: a
//! scenario's `action = "partition leader-churn"` is parsed by the same clap definition as the
//! command line.
//!
//! Modules: `action` (what a fault is, parsed from words and checked against a cluster),
//! `process` (signals and supervisor requests), `links` (link emulation through the admin
//! API), `membership` (the leader, membership changes); CPU quotas are [`crate::cgroup`].
//! The nemesis depends on [`crate::cluster`] for `cluster.toml`, never the reverse.

mod action;
mod links;
mod membership;
mod process;

pub use action::{Action, LinkSet, NodeOrAll, NodeSel, Quota, Rate, Shape};
pub use links::LinkSettings;
pub use membership::{change_membership, find_leader};
pub use process::process_alive;

use crate::cluster::{ClusterFile, NodeEntry};
use links::{admin_post, apply_links, describe_links};
use process::{live_pid, send};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};
use synod_core::NodeId;

/// Timeout of one admin HTTP request (a paused replica accepts connections but never answers).
const HTTP_TIMEOUT: Duration = Duration::from_secs(1);
/// How long "leader" may take to resolve (an election may be under way).
const LEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an action failed: bad usage (exit 2) or the cluster did not cooperate (exit 1).
#[derive(Debug)]
pub enum FaultError {
    /// The action does not fit the cluster (unknown node, wrong shape size, bad file).
    Usage(String),
    /// The cluster did not cooperate (process gone, replica unreachable, timeout).
    Failed(String),
}

impl std::fmt::Display for FaultError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FaultError::Usage(m) | FaultError::Failed(m) => f.write_str(m),
        }
    }
}

/// Apply `action` to the cluster described at `cluster` (file or directory); returns what was
/// done, one line per step.
pub fn execute(cluster: &Path, action: &Action) -> Result<Vec<String>, FaultError> {
    let (file_path, c) = ClusterFile::load(cluster).map_err(FaultError::Usage)?;
    action.check(&c.ids()).map_err(FaultError::Usage)?;
    let fail = FaultError::Failed;
    match action {
        Action::AddNode => membership::add_node(&file_path, &c),
        Action::RemoveNode { node } => {
            let (id, why) = resolve(&c, *node)?;
            let mut out = vec![change_membership(&c, &json!({ "id": id }), "remove").map_err(fail)?];
            out[0] = format!("{}{why}", out[0]);
            out.push(process::supervise_request(&file_path, &c, &format!("retire-{id}"), |f| f.node(id).is_err())?);
            Ok(out)
        }
        Action::Kill { node } => {
            let (id, why) = resolve(&c, *node)?;
            let n = c.node(id).map_err(FaultError::Usage)?;
            let pid = live_pid(n).ok_or_else(|| fail(format!("node {id} is not running")))?;
            send(pid, libc::SIGKILL).map_err(fail)?;
            Ok(vec![format!("killed node {id}{why} (pid {pid}, SIGKILL)")])
        }
        Action::Restart { node } => process::restart(&file_path, &c, *node),
        Action::Pause { node } => {
            let (id, why) = resolve(&c, *node)?;
            let n = c.node(id).map_err(FaultError::Usage)?;
            let pid = live_pid(n).ok_or_else(|| fail(format!("node {id} is not running")))?;
            send(pid, libc::SIGSTOP).map_err(fail)?;
            Ok(vec![format!("paused node {id}{why} (pid {pid}, SIGSTOP)")])
        }
        Action::Resume { node } => {
            let targets: Vec<&NodeEntry> = match node {
                NodeOrAll::Id(id) => vec![c.node(*id).map_err(FaultError::Usage)?],
                NodeOrAll::All => c.nodes.iter().collect(),
            };
            let mut out = Vec::new();
            for n in targets {
                match live_pid(n) {
                    Some(pid) => {
                        send(pid, libc::SIGCONT).map_err(fail)?;
                        out.push(format!("resumed node {} (pid {pid}, SIGCONT)", n.id));
                    }
                    None if matches!(node, NodeOrAll::Id(_)) => {
                        return Err(fail(format!("node {} is not running", n.id)))
                    }
                    None => out.push(format!("node {} is not running: nothing to resume", n.id)),
                }
            }
            Ok(out)
        }
        Action::Partition { shape, links, roles } => {
            let mut cut: BTreeSet<(NodeId, NodeId)> = BTreeSet::new();
            let mut out = Vec::new();
            if let Some(shape) = shape {
                let roles = if roles.is_empty() {
                    let (leader, _) = resolve(&c, NodeSel::Leader)?;
                    // The leader first, then the other nodes in id order starting after it.
                    let mut ids = c.ids();
                    ids.sort_unstable();
                    let at = ids.iter().position(|&i| i == leader).unwrap_or(0);
                    ids.rotate_left(at);
                    ids
                } else {
                    roles.clone()
                };
                for (a, b) in shape.cuts(&roles) {
                    cut.insert((a, b));
                    cut.insert((b, a));
                }
                out.push(format!("partition {} with roles {:?} (leader first)", shape.name(), roles));
            }
            if let Some(l) = links {
                cut.extend(l.resolve(&c.ids()));
            }
            out.push(format!("cut: {}", describe_links(&cut)));
            out.extend(apply_links(&c, |from, to, mut s| {
                s.block = cut.contains(&(from, to));
                Some(s)
            })?);
            Ok(out)
        }
        Action::Heal => {
            let mut out = Vec::new();
            let mut reached = 0;
            for n in &c.nodes {
                match admin_post(n, "/fault/heal", &json!({})) {
                    Ok(()) => {
                        reached += 1;
                        out.push(format!("healed node {}: all links normal, clock offset 0", n.id));
                    }
                    Err(e) => out.push(format!("node {}: not healed ({e})", n.id)),
                }
            }
            if reached == 0 {
                return Err(fail(format!("no replica could be healed: {}", out.join("; "))));
            }
            Ok(out)
        }
        Action::Egress { node, mbit, qdisc } => {
            let ids = match node {
                NodeOrAll::All => c.ids(),
                NodeOrAll::Id(id) => vec![*id],
            };
            let mut out = Vec::new();
            for id in ids {
                let n = c.node(id).map_err(FaultError::Usage)?;
                admin_post(n, "/fault/egress", &json!({ "bandwidth_mbit": mbit.0, "qdisc": qdisc.as_str() }))
                    .map_err(fail)?;
                out.push(format!(
                    "node {id}: egress {}",
                    mbit.0.map_or("unlimited".to_string(), |b| format!(
                        "{b} Mbit/s shared by all links ({})",
                        qdisc.as_str()
                    ))
                ));
            }
            Ok(out)
        }
        Action::Link { links, delay_ms, jitter_ms, jitter_distribution, jitter_shape, bandwidth_mbit, loss } => {
            let chosen = links.resolve(&c.ids());
            let mut out = vec![format!(
                "links {}: delay {delay_ms} ms, jitter {jitter_ms} ms ({jitter_distribution}), bandwidth {}, loss {loss}",
                describe_links(&chosen),
                bandwidth_mbit.map_or("unlimited".to_string(), |b| format!("{b} Mbit/s"))
            )];
            out.extend(apply_links(&c, |from, to, s| {
                chosen.contains(&(from, to)).then_some(LinkSettings {
                    delay_ms: *delay_ms,
                    jitter_ms: *jitter_ms,
                    jitter_distribution: jitter_distribution.clone(),
                    jitter_shape: *jitter_shape,
                    bandwidth_mbit: *bandwidth_mbit,
                    loss: *loss,
                    block: s.block,
                })
            })?);
            Ok(out)
        }
        Action::Cpu { node, quota } => {
            let (id, why) = resolve(&c, *node)?;
            let n = c.node(id).map_err(FaultError::Usage)?;
            let pid = live_pid(n).ok_or_else(|| fail(format!("node {id} is not running")))?;
            let percent = match quota {
                Quota::Percent(p) => Some(*p),
                Quota::Off => None,
            };
            let what = crate::cgroup::set_cpu_quota(&c.dir, id, pid, percent).map_err(fail)?;
            Ok(vec![format!("node {id}{why} (pid {pid}): {what}")])
        }
        Action::Clock { node, offset_ms } => {
            let (id, why) = resolve(&c, *node)?;
            let n = c.node(id).map_err(FaultError::Usage)?;
            admin_post(n, "/fault/clock", &json!({ "offset_ms": offset_ms })).map_err(fail)?;
            Ok(vec![format!("node {id}{why}: clock offset {offset_ms} ms")])
        }
        Action::Show => Ok(show(&c)),
    }
}

/// "leader" resolved to an id, with a note for the output.
fn resolve(c: &ClusterFile, sel: NodeSel) -> Result<(NodeId, String), FaultError> {
    match sel {
        NodeSel::Id(id) => Ok((id, String::new())),
        NodeSel::Leader => {
            let deadline = Instant::now() + LEADER_TIMEOUT;
            loop {
                match find_leader(c) {
                    Ok(id) => return Ok((id, " (the leader)".into())),
                    Err(e) if Instant::now() >= deadline => {
                        return Err(FaultError::Failed(format!("cannot resolve `leader`: {e}")))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        }
    }
}

fn show(c: &ClusterFile) -> Vec<String> {
    let mut out = vec![format!("{} cluster in {} (supervisor pid {})", c.protocol, c.dir.display(), c.supervisor_pid)];
    for n in &c.nodes {
        let proc_state = match n.pid {
            Some(pid) if process_alive(pid) => {
                let stopped = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().starts_with('T')))
                    .unwrap_or(false);
                format!("pid {pid}{}", if stopped { " PAUSED" } else { "" })
            }
            _ => "down".into(),
        };
        let role = n
            .admin()
            .get("/status", HTTP_TIMEOUT)
            .ok()
            .and_then(|(_, b)| serde_json::from_str::<Value>(&b).ok())
            .and_then(|v| v["role"].as_str().map(String::from))
            .unwrap_or_else(|| "-".into());
        let faults = match n.admin().get("/fault", HTTP_TIMEOUT) {
            Ok((200, b)) => {
                let v: Value = serde_json::from_str(&b).unwrap_or(Value::Null);
                let mut parts = Vec::new();
                if let Some(links) = v["links"].as_object() {
                    for (peer, l) in links {
                        let s = LinkSettings::from_json(l);
                        if s != LinkSettings::default() {
                            parts.push(format!("→{peer}: {s:?}"));
                        }
                    }
                }
                if let Some(off) = v["clock_offset_ms"].as_i64().filter(|o| *o != 0) {
                    parts.push(format!("clock {off:+} ms"));
                }
                if parts.is_empty() {
                    "no faults".into()
                } else {
                    parts.join("; ")
                }
            }
            Ok((code, _)) => format!("GET /fault: {code}"),
            Err(_) => "-".into(),
        };
        out.push(format!("node {}: {proc_state}, {role}, {faults}", n.id));
    }
    out
}
