//! Link faults through each replica's admin API: cut links (partitions), delay, jitter,
//! bandwidth and loss. A replica's transport emulates its *outgoing* links, so cutting A→B
//! is a setting on A.

use super::{FaultError, HTTP_TIMEOUT};
use crate::cluster::{ClusterFile, NodeEntry, NodeState};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use synod_core::NodeId;

/// `1>2 1>3 ...`, compressing pairs cut both ways to `1-2`.
pub(super) fn describe_links(links: &BTreeSet<(NodeId, NodeId)>) -> String {
    if links.is_empty() {
        return "(none)".into();
    }
    let mut parts = Vec::new();
    for &(a, b) in links {
        if links.contains(&(b, a)) {
            if a < b {
                parts.push(format!("{a}-{b}"));
            }
        } else {
            parts.push(format!("{a}>{b}"));
        }
    }
    parts.join(",")
}

/// One directed link's emulation settings, as the admin API has them.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkSettings {
    /// Added delay per message.
    pub delay_ms: f64,
    /// Jitter around the delay (see `jitter_distribution`).
    pub jitter_ms: f64,
    /// `uniform`, `normal` or `pareto`.
    pub jitter_distribution: String,
    /// Shape of the pareto jitter (None: the replica's default).
    pub jitter_shape: Option<f64>,
    /// Bandwidth cap of the link (None: unlimited).
    pub bandwidth_mbit: Option<f64>,
    /// Probability of dropping each message, 0..1.
    pub loss: f64,
    /// The link is cut.
    pub block: bool,
}

impl Default for LinkSettings {
    fn default() -> LinkSettings {
        LinkSettings {
            delay_ms: 0.0,
            jitter_ms: 0.0,
            jitter_distribution: "uniform".into(),
            jitter_shape: None,
            bandwidth_mbit: None,
            loss: 0.0,
            block: false,
        }
    }
}

impl LinkSettings {
    pub(super) fn from_json(v: &Value) -> LinkSettings {
        LinkSettings {
            delay_ms: v["delay_ms"].as_f64().unwrap_or(0.0),
            jitter_ms: v["jitter_ms"].as_f64().unwrap_or(0.0),
            jitter_distribution: v["jitter_distribution"].as_str().unwrap_or("uniform").to_string(),
            jitter_shape: v["jitter_shape"].as_f64(),
            bandwidth_mbit: v["bandwidth_mbit"].as_f64(),
            loss: v["loss"].as_f64().unwrap_or(0.0),
            block: v["block"].as_bool().unwrap_or(false),
        }
    }

    fn to_json(&self, to: &[NodeId]) -> Value {
        json!({
            "to": to,
            "delay_ms": self.delay_ms,
            "jitter_ms": self.jitter_ms,
            "jitter_distribution": self.jitter_distribution,
            "jitter_shape": self.jitter_shape,
            "bandwidth_mbit": self.bandwidth_mbit,
            "loss": self.loss,
            "block": self.block,
        })
    }
}

/// For every running replica, read its links (`GET /fault`), let `change(from, to, current)`
/// decide each outgoing link's new settings (None: leave it), and post the changes, grouped by
/// identical settings. Unreachable replicas are reported, not fatal, unless none is reachable.
pub(super) fn apply_links(
    c: &ClusterFile,
    change: impl Fn(NodeId, NodeId, LinkSettings) -> Option<LinkSettings>,
) -> Result<Vec<String>, FaultError> {
    let mut out = Vec::new();
    let mut reached = 0;
    let running: Vec<&NodeEntry> = c.nodes.iter().filter(|n| n.state == NodeState::Running).collect();
    for n in &running {
        let current = match n.admin().get("/fault", HTTP_TIMEOUT) {
            Ok((200, body)) => serde_json::from_str::<Value>(&body).unwrap_or(Value::Null),
            Ok((code, body)) => {
                out.push(format!("node {}: GET /fault answered {code}: {}", n.id, body.trim()));
                continue;
            }
            Err(e) => {
                out.push(format!("node {}: unreachable ({e}); its links are unchanged", n.id));
                continue;
            }
        };
        let mut groups: Vec<(LinkSettings, Vec<NodeId>)> = Vec::new();
        for peer in c.nodes.iter().filter(|p| p.id != n.id) {
            let now = LinkSettings::from_json(&current["links"][peer.id.to_string()]);
            if let Some(new) = change(n.id, peer.id, now) {
                match groups.iter_mut().find(|g| g.0 == new) {
                    Some(g) => g.1.push(peer.id),
                    None => groups.push((new, vec![peer.id])),
                }
            }
        }
        let mut ok = true;
        for (settings, to) in &groups {
            if let Err(e) = admin_post(n, "/fault/link", &settings.to_json(to)) {
                out.push(format!("node {}: {e}", n.id));
                ok = false;
            }
        }
        if ok {
            reached += 1;
            let blocked: Vec<String> =
                groups.iter().filter(|g| g.0.block).flat_map(|g| g.1.iter().map(|t| t.to_string())).collect();
            out.push(format!(
                "node {}: {} outgoing link(s) set{}",
                n.id,
                groups.iter().map(|g| g.1.len()).sum::<usize>(),
                if blocked.is_empty() { String::new() } else { format!(", blocked to {}", blocked.join(",")) }
            ));
        }
    }
    if reached == 0 {
        return Err(FaultError::Failed(format!("no replica accepted the link settings: {}", out.join("; "))));
    }
    Ok(out)
}

pub(super) fn admin_post(n: &NodeEntry, path: &str, body: &Value) -> Result<(), String> {
    let admin = n.admin();
    let url = admin.url(path);
    match admin.post_json(path, &body.to_string(), HTTP_TIMEOUT) {
        Ok((200..=299, _)) => Ok(()),
        Ok((401, _)) => Err(format!(
            "POST {url}: 401, the replica wants the admin token of its config ({}: [admin] token)",
            n.config.display()
        )),
        Ok((404, _)) => {
            Err(format!("POST {url}: 404, this replica's runtime has no fault API (built before link emulation?)"))
        }
        Ok((code, text)) => Err(format!("POST {url}: {code} {}", text.trim())),
        Err(e) => Err(format!("POST {url}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::LinkSet;

    #[test]
    fn link_sets() {
        let l: LinkSet = "1-2,2>3,4<3".parse().unwrap();
        assert_eq!(l.links, BTreeSet::from([(1, 2), (2, 1), (2, 3), (3, 4)]));
        assert_eq!(describe_links(&l.links), "1-2,2>3,3>4");
        let all: LinkSet = "*".parse().unwrap();
        assert_eq!(all.resolve(&[1, 2, 3]).len(), 6);
        assert!("1-1".parse::<LinkSet>().unwrap_err().contains("itself"));
        assert!("a-2".parse::<LinkSet>().unwrap_err().contains("not a node id"));
    }
}
