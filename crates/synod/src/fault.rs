//! `synod fault`: the nemesis. Hurts a running cluster described by `cluster.toml` (see
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

use crate::cluster::{ClusterFile, NodeEntry, NodeState};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;
use std::time::{Duration, Instant};
use synod_core::NodeId;

/// Timeout of one admin HTTP request (a paused replica accepts connections but never answers).
const HTTP_TIMEOUT: Duration = Duration::from_secs(1);
/// How long `restart` waits for the supervisor to respawn a node and for it to be healthy.
const RESTART_TIMEOUT: Duration = Duration::from_secs(30);
/// How long "leader" may take to resolve (an election may be under way).
const LEADER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(clap::Args, Debug)]
#[command(after_help = "The cluster is the cluster.toml that `synod local` (or a scenario) prints, or its \
    directory.\nExit codes: 0 done, 1 the fault could not be applied, 2 bad usage.")]
pub struct Args {
    /// cluster.toml of the running cluster, or the directory holding it.
    #[arg(long, env = "SYNOD_CLUSTER")]
    pub cluster: PathBuf,
    #[command(subcommand)]
    pub action: Action,
}

/// Just the action, for parsing a scenario's `action = "..."` strings.
#[derive(Parser, Debug)]
#[command(name = "action", no_binary_name = true, disable_help_subcommand = true)]
struct ActionOnly {
    #[command(subcommand)]
    action: Action,
}

/// A replica, or whichever one leads right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeSel {
    Id(NodeId),
    Leader,
}

impl FromStr for NodeSel {
    type Err = String;
    fn from_str(s: &str) -> Result<NodeSel, String> {
        match s {
            "leader" => Ok(NodeSel::Leader),
            _ => s.parse().map(NodeSel::Id).map_err(|_| format!("`{s}` is neither a node id nor `leader`")),
        }
    }
}

/// A replica, or all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeOrAll {
    Id(NodeId),
    All,
}

impl FromStr for NodeOrAll {
    type Err = String;
    fn from_str(s: &str) -> Result<NodeOrAll, String> {
        match s {
            "all" => Ok(NodeOrAll::All),
            _ => s.parse().map(NodeOrAll::Id).map_err(|_| format!("`{s}` is neither a node id nor `all`")),
        }
    }
}

/// The partial partitions of HoliPaxos (§2.2, §3.1.2, Fig. 2, 3, 5a, 5b; evaluated in Fig. 9).
/// Roles are assigned from the current leader: see [`Shape::cuts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shape {
    /// 5 nodes (Fig. 2): every node keeps only its link to one stable node; the leader keeps
    /// answering heartbeats from it but has no quorum, and nobody else can win an election.
    LeaderQuorumLoss,
    /// 3 nodes (Fig. 3): the leader and one follower cannot reach each other, both reach the
    /// third node.
    LeaderChurn,
    /// 5 nodes (Fig. 5a): one follower can reach only one other follower (no quorum), and
    /// disrupts the leader through it with higher ballots.
    QuorumDisconnected,
    /// 5 nodes (Fig. 5b): the leader and a follower cannot reach each other, two other
    /// followers cannot reach each other but both reach both of them (a 4-cycle in which every
    /// node is quorum-connected); the fifth node is cut off.
    QuorumConnected,
}

impl Shape {
    /// Replica count the shape is defined for (as in the paper).
    pub fn nodes(self) -> usize {
        match self {
            Shape::LeaderChurn => 3,
            _ => 5,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Shape::LeaderQuorumLoss => "leader-quorum-loss",
            Shape::LeaderChurn => "leader-churn",
            Shape::QuorumDisconnected => "quorum-disconnected",
            Shape::QuorumConnected => "quorum-connected",
        }
    }

    /// The cut (undirected) links for `roles`: `roles[0]` is the leader, the rest the
    /// followers in the order the shape uses them:
    /// - leader-churn `[A, B, C]`: A–C cut (A leader, B the common node);
    /// - leader-quorum-loss `[B, E, x, y, z]`: every link not touching the stable node E cut;
    /// - quorum-disconnected `[L, M, D, x, y]`: D keeps only its link to M;
    /// - quorum-connected `[B, C, D, E, A]`: B–C and D–E cut, A cut from everyone.
    pub fn cuts(self, roles: &[NodeId]) -> Vec<(NodeId, NodeId)> {
        let mut cuts = Vec::new();
        let all_pairs = |cuts: &mut Vec<(NodeId, NodeId)>, keep: &dyn Fn(NodeId, NodeId) -> bool| {
            for (i, &a) in roles.iter().enumerate() {
                for &b in &roles[i + 1..] {
                    if !keep(a, b) {
                        cuts.push((a, b));
                    }
                }
            }
        };
        match self {
            Shape::LeaderChurn => cuts.push((roles[0], roles[2])),
            Shape::LeaderQuorumLoss => {
                let stable = roles[1];
                all_pairs(&mut cuts, &|a, b| a == stable || b == stable);
            }
            Shape::QuorumDisconnected => {
                let (m, d) = (roles[1], roles[2]);
                for &x in roles {
                    if x != d && x != m {
                        cuts.push((d, x));
                    }
                }
            }
            Shape::QuorumConnected => {
                cuts.push((roles[0], roles[1]));
                cuts.push((roles[2], roles[3]));
                for &x in &roles[..4] {
                    cuts.push((roles[4], x));
                }
            }
        }
        cuts
    }
}

/// Directed links: `1-2` (both directions), `1>2` (1 cannot send to 2), `1<2`, `*` (every
/// link), comma-separated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkSet {
    pub all: bool,
    pub links: BTreeSet<(NodeId, NodeId)>,
}

impl FromStr for LinkSet {
    type Err = String;
    fn from_str(s: &str) -> Result<LinkSet, String> {
        let mut set = LinkSet { all: false, links: BTreeSet::new() };
        for item in s.split(',').map(str::trim) {
            if item == "*" {
                set.all = true;
                continue;
            }
            let (a, b, both, rev) = if let Some((a, b)) = item.split_once('-') {
                (a, b, true, false)
            } else if let Some((a, b)) = item.split_once('>') {
                (a, b, false, false)
            } else if let Some((a, b)) = item.split_once('<') {
                (a, b, false, true)
            } else {
                return Err(format!("link `{item}`: expected A-B (both ways), A>B or A<B (one way), or *"));
            };
            let id = |x: &str| -> Result<NodeId, String> {
                x.trim().parse().map_err(|_| format!("link `{item}`: `{}` is not a node id", x.trim()))
            };
            let (a, b) = (id(a)?, id(b)?);
            if a == b {
                return Err(format!("link `{item}`: a node has no link to itself"));
            }
            if both || !rev {
                set.links.insert((a, b));
            }
            if both || rev {
                set.links.insert((b, a));
            }
        }
        if !set.all && set.links.is_empty() {
            return Err(format!("`{s}`: no links"));
        }
        Ok(set)
    }
}

impl LinkSet {
    /// The directed links among `ids`.
    fn resolve(&self, ids: &[NodeId]) -> BTreeSet<(NodeId, NodeId)> {
        if self.all {
            ids.iter().flat_map(|&a| ids.iter().filter(move |&&b| b != a).map(move |&b| (a, b))).collect()
        } else {
            self.links.clone()
        }
    }

    fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.links.iter().flat_map(|&(a, b)| [a, b])
    }
}

/// CPU quota: a percentage of one CPU, or `off`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Quota {
    Percent(f64),
    Off,
}

impl FromStr for Quota {
    type Err = String;
    fn from_str(s: &str) -> Result<Quota, String> {
        if s == "off" {
            return Ok(Quota::Off);
        }
        let p: f64 = s.trim_end_matches('%').parse().map_err(|_| format!("`{s}` is not a percentage or `off`"))?;
        if !(p >= 1.0 && p.is_finite()) {
            return Err(format!("quota {s}: must be at least 1 (percent of one CPU)"));
        }
        Ok(Quota::Percent(p))
    }
}

/// An egress rate in Mbit/s, or `off` (unlimited).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate(pub Option<f64>);

impl FromStr for Rate {
    type Err = String;
    fn from_str(s: &str) -> Result<Rate, String> {
        if s == "off" {
            return Ok(Rate(None));
        }
        let r: f64 = s.parse().map_err(|_| format!("`{s}` is not a rate in Mbit/s or `off`"))?;
        if !(r > 0.0 && r.is_finite()) {
            return Err(format!("rate {s}: must be a positive number of Mbit/s"));
        }
        Ok(Rate(Some(r)))
    }
}

#[derive(Subcommand, Clone, Debug, PartialEq)]
pub enum Action {
    /// Start a new replica on free ports under the supervisor (`synod server --join`) and
    /// add it to the configuration through the leader (MultiPaxos / HoliPaxos membership
    /// change); cluster.toml then lists it. Id: one above the highest.
    AddNode,
    /// Remove a replica (N or `leader`) from the configuration through the leader, then
    /// stop it and drop it from cluster.toml.
    RemoveNode { node: NodeSel },
    /// SIGKILL a replica (N or `leader`); the supervisor keeps the others running.
    Kill { node: NodeSel },
    /// Start a killed replica again (N, or `all` for every replica that is down), from its WAL.
    Restart { node: NodeOrAll },
    /// SIGSTOP a replica (N or `leader`): it keeps its sockets but does nothing.
    Pause { node: NodeSel },
    /// SIGCONT a paused replica (N or `all`).
    Resume { node: NodeOrAll },
    /// Cut links: a HoliPaxos shape and/or --links. Replaces any earlier partition (other
    /// link settings such as delay stay).
    Partition {
        /// leader-quorum-loss (5 nodes), leader-churn (3), quorum-disconnected (5),
        /// quorum-connected (5).
        shape: Option<Shape>,
        /// Extra cut links: 1-2 (both ways), 1>2 (1 cannot send to 2), 1<2, comma-separated.
        #[arg(long)]
        links: Option<LinkSet>,
        /// Pin the shape's roles instead of deriving them from the leader: the leader role
        /// first, then the followers in the shape's order (see docs/faults.md).
        #[arg(long, value_delimiter = ',')]
        roles: Vec<NodeId>,
    },
    /// Every link of every replica back to normal, clock offsets 0.
    Heal,
    /// Emulate slow links: delay, jitter, bandwidth cap, loss (on --links, default all).
    Link {
        /// Links to change: 1-2, 1>2, 1<2 or *, comma-separated.
        #[arg(long, default_value = "*")]
        links: LinkSet,
        #[arg(long, default_value_t = 0.0)]
        delay_ms: f64,
        #[arg(long, default_value_t = 0.0)]
        jitter_ms: f64,
        /// How jitter is drawn: uniform on [delay - jitter, delay + jitter], normal(delay,
        /// jitter), or pareto (delay + a heavy-tailed extra with mean jitter).
        #[arg(long, default_value = "uniform", value_parser = ["uniform", "normal", "pareto"])]
        jitter_distribution: String,
        /// Shape of the pareto jitter (> 1; smaller = heavier tail; default 2.5).
        #[arg(long)]
        jitter_shape: Option<f64>,
        /// Bandwidth cap in Mbit/s (none by default).
        #[arg(long)]
        bandwidth_mbit: Option<f64>,
        /// Probability of dropping each message, 0..1.
        #[arg(long, default_value_t = 0.0)]
        loss: f64,
    },
    /// Cap a replica's total outgoing rate, shared by all its links like a NIC (Mbit/s, or
    /// `off`).
    Egress {
        node: NodeOrAll,
        #[arg(long)]
        mbit: Rate,
    },
    /// Limit a replica's CPU with a cgroup quota (percent of one CPU, or `off`).
    Cpu {
        node: NodeSel,
        #[arg(long)]
        quota: Quota,
    },
    /// Shift a replica's clock (as its runtime sees it) by --offset-ms.
    Clock {
        node: NodeSel,
        #[arg(long, allow_hyphen_values = true)]
        offset_ms: i64,
    },
    /// Show each replica's process state, role and fault settings.
    Show,
}

impl Action {
    /// Parse a scenario's action string, e.g. `partition leader-churn` or `kill leader`.
    pub fn parse_words(s: &str) -> Result<Action, String> {
        let words: Vec<&str> = s.split_whitespace().collect();
        if words.is_empty() {
            return Err("empty action".into());
        }
        ActionOnly::try_parse_from(words).map(|a| a.action).map_err(|e| {
            // clap's rendering ends with a usage hint for the command line; keep the first lines.
            let text = e.to_string();
            let first: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).take(2).collect();
            format!("action `{s}`: {}", first.join(" ").trim_start_matches("error: "))
        })
    }

    /// Check the node ids and shape sizes against a cluster of `ids`.
    pub fn check(&self, ids: &[NodeId]) -> Result<(), String> {
        let known = |id: NodeId| -> Result<(), String> {
            if ids.contains(&id) {
                Ok(())
            } else {
                Err(format!("no node {id} in a cluster of {} (ids {:?})", ids.len(), ids))
            }
        };
        match self {
            Action::Kill { node: NodeSel::Id(id) }
            | Action::Pause { node: NodeSel::Id(id) }
            | Action::Cpu { node: NodeSel::Id(id), .. }
            | Action::Clock { node: NodeSel::Id(id), .. }
            | Action::Restart { node: NodeOrAll::Id(id) }
            | Action::RemoveNode { node: NodeSel::Id(id) }
            | Action::Resume { node: NodeOrAll::Id(id) } => known(*id),
            Action::Partition { shape, links, roles } => {
                if shape.is_none() && links.is_none() {
                    return Err("partition needs a shape or --links".into());
                }
                if let Some(shape) = shape {
                    if ids.len() != shape.nodes() {
                        return Err(format!(
                            "partition {} is defined for {} replicas, this cluster has {}",
                            shape.name(),
                            shape.nodes(),
                            ids.len()
                        ));
                    }
                    if !roles.is_empty() {
                        let distinct: BTreeSet<_> = roles.iter().collect();
                        if roles.len() != ids.len() || distinct.len() != roles.len() {
                            return Err(format!("--roles must list each of the {} nodes once", ids.len()));
                        }
                        roles.iter().try_for_each(|r| known(*r))?;
                    }
                } else if !roles.is_empty() {
                    return Err("--roles needs a shape".into());
                }
                if let Some(l) = links {
                    l.ids().try_for_each(known)?;
                }
                Ok(())
            }
            Action::Link { links, loss, bandwidth_mbit, delay_ms, jitter_ms, .. } => {
                links.ids().try_for_each(known)?;
                if !(*delay_ms >= 0.0 && *jitter_ms >= 0.0 && delay_ms.is_finite() && jitter_ms.is_finite()) {
                    return Err("--delay-ms and --jitter-ms must be >= 0".into());
                }
                if !(0.0..=1.0).contains(loss) {
                    return Err(format!("--loss {loss}: must be between 0 and 1"));
                }
                if bandwidth_mbit.is_some_and(|b| !(b > 0.0 && b.is_finite())) {
                    return Err("--bandwidth-mbit must be positive".into());
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Why an action failed: bad usage (exit 2) or the cluster did not cooperate (exit 1).
#[derive(Debug)]
pub enum FaultError {
    Usage(String),
    Failed(String),
}

impl std::fmt::Display for FaultError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FaultError::Usage(m) | FaultError::Failed(m) => f.write_str(m),
        }
    }
}

pub fn main(args: Args) -> ExitCode {
    match execute(&args.cluster, &args.action) {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            ExitCode::SUCCESS
        }
        Err(FaultError::Usage(m)) => {
            eprintln!("error: {m}");
            ExitCode::from(2)
        }
        Err(FaultError::Failed(m)) => {
            eprintln!("error: {m}");
            ExitCode::FAILURE
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
        Action::AddNode => add_node(&file_path, &c),
        Action::RemoveNode { node } => {
            let (id, why) = resolve(&c, *node)?;
            let mut out = vec![change_membership(&c, &json!({ "id": id }), "remove").map_err(fail)?];
            out[0] = format!("{}{why}", out[0]);
            out.push(supervise_request(&file_path, &c, &format!("retire-{id}"), |f| f.node(id).is_err())?);
            Ok(out)
        }
        Action::Kill { node } => {
            let (id, why) = resolve(&c, *node)?;
            let n = c.node(id).map_err(FaultError::Usage)?;
            let pid = live_pid(n).ok_or_else(|| fail(format!("node {id} is not running")))?;
            send(pid, libc::SIGKILL).map_err(fail)?;
            Ok(vec![format!("killed node {id}{why} (pid {pid}, SIGKILL)")])
        }
        Action::Restart { node } => restart(&file_path, &c, *node),
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
        Action::Egress { node, mbit } => {
            let ids = match node {
                NodeOrAll::All => c.ids(),
                NodeOrAll::Id(id) => vec![*id],
            };
            let mut out = Vec::new();
            for id in ids {
                let n = c.node(id).map_err(FaultError::Usage)?;
                admin_post(n, "/fault/egress", &json!({ "bandwidth_mbit": mbit.0 })).map_err(fail)?;
                out.push(format!(
                    "node {id}: egress {}",
                    mbit.0.map_or("unlimited".to_string(), |b| format!("{b} Mbit/s shared by all links"))
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
            let what = cpu_quota(&c.dir, id, pid, *quota).map_err(fail)?;
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

/// `1>2 1>3 ...`, compressing pairs cut both ways to `1-2`.
fn describe_links(links: &BTreeSet<(NodeId, NodeId)>) -> String {
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

/// The leader according to the replicas' `/status`: the one node claiming the role, or the
/// leader most replicas name.
pub fn find_leader(c: &ClusterFile) -> Result<NodeId, String> {
    let mut claims = Vec::new();
    let mut named: BTreeMap<NodeId, usize> = BTreeMap::new();
    let mut seen = Vec::new();
    for n in c.nodes.iter().filter(|n| n.state == NodeState::Running) {
        let Ok((200, body)) = crate::http::get(n.admin_addr, "/status", HTTP_TIMEOUT) else {
            seen.push(format!("{}: no answer", n.id));
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(&body) else { continue };
        let role = v["role"].as_str().unwrap_or("?").to_string();
        if role == "leader" {
            claims.push(n.id);
        }
        if let Some(l) = v["leader"].as_u64() {
            *named.entry(l as NodeId).or_default() += 1;
        }
        seen.push(format!("{}: {role}", n.id));
    }
    if claims.len() == 1 {
        return Ok(claims[0]);
    }
    let best = named.iter().max_by_key(|(_, &count)| count);
    match best {
        Some((&id, _)) if claims.is_empty() || claims.contains(&id) => Ok(id),
        _ => Err(format!("no single leader right now ({})", seen.join(", "))),
    }
}

/// The pid of node `n` if that process is alive (not a zombie) and really runs its config.
fn live_pid(n: &NodeEntry) -> Option<u32> {
    let pid = n.pid?;
    if n.state != NodeState::Running || !process_alive(pid) {
        return None;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmdline = String::from_utf8_lossy(&cmdline);
    cmdline.contains(&*n.config.to_string_lossy()).then_some(pid)
}

/// Whether `pid` exists and has not exited (a zombie has exited, it only waits to be reaped).
pub fn process_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the parenthesised command name, which may itself contain ')'.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z') | Some('X') | None)
}

fn send(pid: u32, sig: libc::c_int) -> Result<(), String> {
    // SAFETY: kill(2) with a pid just checked to be the replica's live process.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } == 0 {
        Ok(())
    } else {
        Err(format!("signal to pid {pid} failed: {}", std::io::Error::last_os_error()))
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
            match crate::http::post_json(
                n.admin_addr,
                &format!("/members/{op}"),
                &body.to_string(),
                n.admin_token().as_deref(),
                Duration::from_secs(12),
            ) {
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

/// Write control request `name` for the supervisor and wait until cluster.toml satisfies
/// `done`.
fn supervise_request(
    file_path: &Path,
    c: &ClusterFile,
    name: &str,
    done: impl Fn(&ClusterFile) -> bool,
) -> Result<String, FaultError> {
    if !process_alive(c.supervisor_pid) {
        return Err(FaultError::Failed(format!(
            "the supervisor (pid {}) of this cluster is not running: cannot {name}",
            c.supervisor_pid
        )));
    }
    let control = c.control_dir();
    std::fs::create_dir_all(&control)
        .map_err(|e| FaultError::Failed(format!("cannot create {}: {e}", control.display())))?;
    let req = control.join(name);
    std::fs::write(&req, b"").map_err(|e| FaultError::Failed(format!("cannot write {}: {e}", req.display())))?;
    let deadline = Instant::now() + RESTART_TIMEOUT;
    loop {
        if let Ok((_, f)) = ClusterFile::load(file_path) {
            if done(&f) {
                return Ok(format!("supervisor: {name} done"));
            }
        }
        if Instant::now() >= deadline {
            return Err(FaultError::Failed(format!("supervisor did not do {name} within {RESTART_TIMEOUT:?}")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `add-node`: the supervisor starts a joining replica, then the leader adds it.
fn add_node(file_path: &Path, c: &ClusterFile) -> Result<Vec<String>, FaultError> {
    let id = c.ids().into_iter().max().unwrap_or(0) + 1;
    let mut out = vec![supervise_request(file_path, c, &format!("join-{id}"), |f| {
        f.node(id).is_ok_and(|n| n.state == NodeState::Running)
    })?];
    let (_, now) = ClusterFile::load(file_path).map_err(FaultError::Failed)?;
    let n = now.node(id).map_err(FaultError::Failed)?.clone();
    let deadline = Instant::now() + RESTART_TIMEOUT;
    while !matches!(crate::http::get(n.admin_addr, "/health", HTTP_TIMEOUT), Ok((200, _))) {
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

/// Ask the supervisor to start nodes again and wait until they answer `/health`.
fn restart(file_path: &Path, c: &ClusterFile, sel: NodeOrAll) -> Result<Vec<String>, FaultError> {
    let targets: Vec<&NodeEntry> = match sel {
        NodeOrAll::Id(id) => {
            let n = c.node(id).map_err(FaultError::Usage)?;
            if let Some(pid) = live_pid(n) {
                return Err(FaultError::Failed(format!("node {id} is running (pid {pid}); kill it first")));
            }
            vec![n]
        }
        NodeOrAll::All => c.nodes.iter().filter(|n| live_pid(n).is_none()).collect(),
    };
    if targets.is_empty() {
        return Ok(vec!["every node is running: nothing to restart".into()]);
    }
    if !process_alive(c.supervisor_pid) {
        return Err(FaultError::Failed(format!(
            "the supervisor (pid {}) of this cluster is not running, so nobody can restart replicas; \
             start the cluster again with `synod local --data-dir {}`",
            c.supervisor_pid,
            c.dir.display()
        )));
    }
    let control = c.control_dir();
    std::fs::create_dir_all(&control)
        .map_err(|e| FaultError::Failed(format!("cannot create {}: {e}", control.display())))?;
    for n in &targets {
        let req = control.join(format!("restart-{}", n.id));
        std::fs::write(&req, b"").map_err(|e| FaultError::Failed(format!("cannot write {}: {e}", req.display())))?;
    }
    let deadline = Instant::now() + RESTART_TIMEOUT;
    let mut out = Vec::new();
    for n in &targets {
        loop {
            let now = ClusterFile::load(file_path).ok().and_then(|(_, f)| f.node(n.id).ok().cloned());
            if let Some(now) = now.filter(|m| m.starts > n.starts && m.state == NodeState::Running) {
                if matches!(crate::http::get(now.admin_addr, "/health", HTTP_TIMEOUT), Ok((200, _))) {
                    let note = if c.in_memory { " (in memory: it comes back empty)" } else { " from its WAL" };
                    out.push(format!("restarted node {} (pid {}){note}", n.id, now.pid.unwrap_or(0)));
                    break;
                }
            }
            if Instant::now() >= deadline {
                return Err(FaultError::Failed(format!(
                    "node {} was not running and healthy {RESTART_TIMEOUT:?} after the restart request; \
                     see the supervisor's output and {}",
                    n.id,
                    n.log.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(out)
}

/// One directed link's emulation settings, as the admin API has them.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkSettings {
    pub delay_ms: f64,
    pub jitter_ms: f64,
    pub jitter_distribution: String,
    pub jitter_shape: Option<f64>,
    pub bandwidth_mbit: Option<f64>,
    pub loss: f64,
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
    fn from_json(v: &Value) -> LinkSettings {
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
fn apply_links(
    c: &ClusterFile,
    change: impl Fn(NodeId, NodeId, LinkSettings) -> Option<LinkSettings>,
) -> Result<Vec<String>, FaultError> {
    let mut out = Vec::new();
    let mut reached = 0;
    let running: Vec<&NodeEntry> = c.nodes.iter().filter(|n| n.state == NodeState::Running).collect();
    for n in &running {
        let current = match crate::http::get(n.admin_addr, "/fault", HTTP_TIMEOUT) {
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

fn admin_post(n: &NodeEntry, path: &str, body: &Value) -> Result<(), String> {
    match crate::http::post_json(n.admin_addr, path, &body.to_string(), n.admin_token().as_deref(), HTTP_TIMEOUT) {
        Ok((200..=299, _)) => Ok(()),
        Ok((401, _)) => Err(format!(
            "POST http://{}{path}: 401, the replica wants the admin token of its config ({}: [admin] token)",
            n.admin_addr,
            n.config.display()
        )),
        Ok((404, _)) => Err(format!(
            "POST http://{}{path}: 404, this replica's runtime has no fault API (built before link emulation?)",
            n.admin_addr
        )),
        Ok((code, text)) => Err(format!("POST http://{}{path}: {code} {}", n.admin_addr, text.trim())),
        Err(e) => Err(format!("POST http://{}{path}: {e}", n.admin_addr)),
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
        let role = crate::http::get(n.admin_addr, "/status", HTTP_TIMEOUT)
            .ok()
            .and_then(|(_, b)| serde_json::from_str::<Value>(&b).ok())
            .and_then(|v| v["role"].as_str().map(String::from))
            .unwrap_or_else(|| "-".into());
        let faults = match crate::http::get(n.admin_addr, "/fault", HTTP_TIMEOUT) {
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

// --- CPU quota through cgroups ------------------------------------------------------------

/// A cgroup hierarchy with a cpu controller.
enum CpuCgroup {
    /// cgroup v1 `cpu` hierarchy mounted at this path: cpu.cfs_quota_us / cpu.cfs_period_us.
    V1(PathBuf),
    /// cgroup v2 mounted here with the cpu controller available: cpu.max.
    V2(PathBuf),
}

/// Find a usable cpu controller in /proc/self/mountinfo: a v1 hierarchy with `cpu` among its
/// super options, else a v2 mount whose cgroup.controllers lists `cpu`.
fn find_cpu_cgroup() -> Result<CpuCgroup, String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let mut v2 = None;
    for line in info.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let mount_point = left.split_whitespace().nth(4).unwrap_or("");
        let mut r = right.split_whitespace();
        let fstype = r.next().unwrap_or("");
        let super_opts = r.nth(1).unwrap_or("");
        if fstype == "cgroup" && super_opts.split(',').any(|o| o == "cpu") {
            return Ok(CpuCgroup::V1(PathBuf::from(mount_point)));
        }
        if fstype == "cgroup2" {
            let controllers =
                std::fs::read_to_string(Path::new(mount_point).join("cgroup.controllers")).unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "cpu") {
                v2 = Some(PathBuf::from(mount_point));
            }
        }
    }
    v2.map(CpuCgroup::V2).ok_or_else(|| {
        "no usable cgroup cpu controller: neither a cgroup v1 `cpu` hierarchy nor a cgroup v2 mount with the \
         `cpu` controller in cgroup.controllers (see /proc/self/mountinfo); CPU quotas are not possible here"
            .to_string()
    })
}

/// Cgroup names of one cluster: `synod-<hash of its directory>-node<id>`.
fn cgroup_prefix(cluster_dir: &Path) -> String {
    // FNV-1a: stable across runs and builds (unlike std's hasher), so `synod fault cpu` and
    // the supervisor's cleanup agree on the names.
    let h = cluster_dir
        .to_string_lossy()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("synod-{:08x}-", h as u32)
}

fn write_file(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("cannot write `{value}` to {}: {e}", path.display()))
}

/// Put `pid` in the node's cgroup with `quota`, or take it out again (`off`).
fn cpu_quota(cluster_dir: &Path, id: NodeId, pid: u32, quota: Quota) -> Result<String, String> {
    // A 10 ms enforcement period, not the kernel's default 100 ms: with 100 ms a replica at
    // 40% runs up to 40 ms, then stalls up to 60 ms whenever a burst of work exhausts its
    // budget early, i.e. a "slower CPU" that is really a full-speed CPU with 60 ms pauses.
    // Those pauses are what the slowdown detector measures (in-flight spikes), so with
    // 100 ms a healthy leader near its quota looked slow. 10 ms bounds a stall to 6 ms.
    // Below 10% the quota would drop under the kernel's 1 ms minimum: use 100 ms there.
    const PERIOD_US: u64 = 10_000;
    const LONG_PERIOD_US: u64 = 100_000;
    let cg = find_cpu_cgroup()?;
    let (root, v1) = match &cg {
        CpuCgroup::V1(p) => (p.clone(), true),
        CpuCgroup::V2(p) => (p.clone(), false),
    };
    let group = root.join(format!("{}node{id}", cgroup_prefix(cluster_dir)));
    match quota {
        Quota::Off => {
            if group.exists() {
                if v1 {
                    write_file(&group.join("cpu.cfs_quota_us"), "-1")?;
                } else {
                    write_file(&group.join("cpu.max"), &format!("max {PERIOD_US}"))?;
                }
                // Back to the root group, so the child group can be removed.
                let _ = write_file(&root.join("cgroup.procs"), &pid.to_string());
                let _ = std::fs::remove_dir(&group);
            }
            Ok("CPU quota removed".into())
        }
        Quota::Percent(p) => {
            if !group.exists() {
                if !v1 {
                    // v2: the parent must delegate the cpu controller to its children.
                    write_file(&root.join("cgroup.subtree_control"), "+cpu")?;
                }
                std::fs::create_dir(&group).map_err(|e| format!("cannot create cgroup {}: {e}", group.display()))?;
            }
            let period_us = if p < 10.0 { LONG_PERIOD_US } else { PERIOD_US };
            let quota_us = ((p / 100.0) * period_us as f64).round() as u64;
            if v1 {
                // Quota first when shortening the period (the kernel checks the pair).
                write_file(&group.join("cpu.cfs_quota_us"), "-1")?;
                write_file(&group.join("cpu.cfs_period_us"), &period_us.to_string())?;
                write_file(&group.join("cpu.cfs_quota_us"), &quota_us.to_string())?;
            } else {
                write_file(&group.join("cpu.max"), &format!("{quota_us} {period_us}"))?;
            }
            write_file(&group.join("cgroup.procs"), &pid.to_string())?;
            Ok(format!(
                "CPU quota {p}% of one CPU ({quota_us} us per {period_us} us, cgroup {} {})",
                if v1 { "v1" } else { "v2" },
                group.display()
            ))
        }
    }
}

/// Remove the (empty, once the replicas are gone) cpu cgroups of the cluster in `dir`.
pub fn remove_cpu_cgroups(dir: &Path) {
    let Ok(cg) = find_cpu_cgroup() else { return };
    let root = match cg {
        CpuCgroup::V1(p) | CpuCgroup::V2(p) => p,
    };
    let prefix = cgroup_prefix(dir);
    if let Ok(entries) = std::fs::read_dir(&root) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_parse_from_words() {
        assert_eq!(Action::parse_words("kill leader").unwrap(), Action::Kill { node: NodeSel::Leader });
        assert_eq!(Action::parse_words("restart all").unwrap(), Action::Restart { node: NodeOrAll::All });
        assert_eq!(Action::parse_words("pause 2").unwrap(), Action::Pause { node: NodeSel::Id(2) });
        assert_eq!(
            Action::parse_words("clock 3 --offset-ms -250").unwrap(),
            Action::Clock { node: NodeSel::Id(3), offset_ms: -250 }
        );
        match Action::parse_words("partition leader-churn").unwrap() {
            Action::Partition { shape: Some(Shape::LeaderChurn), links: None, roles } => assert!(roles.is_empty()),
            other => panic!("{other:?}"),
        }
        match Action::parse_words("link --links 1>2,3-1 --delay-ms 50 --bandwidth-mbit 100").unwrap() {
            Action::Link { links, delay_ms, bandwidth_mbit: Some(b), .. } => {
                assert_eq!((delay_ms, b), (50.0, 100.0));
                assert_eq!(links.links, BTreeSet::from([(1, 2), (3, 1), (1, 3)]));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            Action::parse_words("cpu leader --quota 25").unwrap(),
            Action::Cpu { node: NodeSel::Leader, quota: Quota::Percent(25.0) }
        );
    }

    #[test]
    fn bad_actions_are_clear() {
        let e = Action::parse_words("explode 1").unwrap_err();
        assert!(e.contains("explode"), "{e}");
        let e = Action::parse_words("kill two").unwrap_err();
        assert!(e.contains("neither a node id nor `leader`"), "{e}");
        let e = Action::parse_words("partition triangle").unwrap_err();
        assert!(e.contains("triangle"), "{e}");
        let e = Action::parse_words("link --links 1~2").unwrap_err();
        assert!(e.contains("A-B"), "{e}");
        assert!(Action::parse_words("").unwrap_err().contains("empty"));
        let e = Action::parse_words("cpu 1 --quota 0").unwrap_err();
        assert!(e.contains("at least 1"), "{e}");
    }

    #[test]
    fn checks_against_the_cluster() {
        let three = [1, 2, 3];
        let five = [1, 2, 3, 4, 5];
        assert!(Action::parse_words("partition leader-churn").unwrap().check(&three).is_ok());
        let e = Action::parse_words("partition leader-quorum-loss").unwrap().check(&three).unwrap_err();
        assert!(e.contains("defined for 5 replicas, this cluster has 3"), "{e}");
        let e = Action::parse_words("kill 7").unwrap().check(&five).unwrap_err();
        assert!(e.contains("no node 7"), "{e}");
        let e = Action::parse_words("partition --links 1-9").unwrap().check(&five).unwrap_err();
        assert!(e.contains("no node 9"), "{e}");
        let e = Action::parse_words("partition").unwrap().check(&five).unwrap_err();
        assert!(e.contains("shape or --links"), "{e}");
        let e = Action::parse_words("partition leader-churn --roles 1,1,2").unwrap().check(&three).unwrap_err();
        assert!(e.contains("each of the 3 nodes once"), "{e}");
        let e = Action::parse_words("link --loss 2").unwrap().check(&three).unwrap_err();
        assert!(e.contains("between 0 and 1"), "{e}");
    }

    fn directed(cuts: &[(NodeId, NodeId)]) -> BTreeSet<(NodeId, NodeId)> {
        cuts.iter().flat_map(|&(a, b)| [(a, b), (b, a)]).collect()
    }

    /// Who each node can still reach (both ways) after the cut.
    fn reach(n: NodeId, ids: &[NodeId], cut: &BTreeSet<(NodeId, NodeId)>) -> Vec<NodeId> {
        ids.iter().copied().filter(|&o| o != n && !cut.contains(&(n, o))).collect()
    }

    #[test]
    fn holipaxos_shapes() {
        // Fig. 3: A (leader) and C cannot talk, both reach B.
        let cut = directed(&Shape::LeaderChurn.cuts(&[1, 2, 3]));
        assert_eq!(cut, BTreeSet::from([(1, 3), (3, 1)]));

        // Fig. 2: leader 2, stable node 3: everyone reaches only 3, 3 reaches everyone.
        let ids = [2, 3, 4, 5, 1];
        let cut = directed(&Shape::LeaderQuorumLoss.cuts(&ids));
        assert_eq!(reach(3, &ids, &cut), vec![2, 4, 5, 1]);
        for n in [2, 4, 5, 1] {
            assert_eq!(reach(n, &ids, &cut), vec![3], "node {n}");
        }

        // Fig. 5a: D = 3 reaches only M = 2 (2 of 5: no quorum); everyone else fully connected.
        let ids = [1, 2, 3, 4, 5];
        let cut = directed(&Shape::QuorumDisconnected.cuts(&ids));
        assert_eq!(reach(3, &ids, &cut), vec![2]);
        assert_eq!(reach(1, &ids, &cut), vec![2, 4, 5]);
        assert_eq!(reach(2, &ids, &cut), vec![1, 3, 4, 5]);

        // Fig. 5b: leader B=1 and C=2 cut, D=3 and E=4 cut, both reach B and C; A=5 isolated.
        let cut = directed(&Shape::QuorumConnected.cuts(&ids));
        assert_eq!(reach(1, &ids, &cut), vec![3, 4]);
        assert_eq!(reach(2, &ids, &cut), vec![3, 4]);
        assert_eq!(reach(3, &ids, &cut), vec![1, 2]);
        assert_eq!(reach(4, &ids, &cut), vec![1, 2]);
        assert!(reach(5, &ids, &cut).is_empty());
        // Every node of the cycle is quorum-connected (itself + 2 of 5).
        for n in 1..=4 {
            assert!(reach(n, &ids, &cut).len() + 1 >= 3);
        }
    }

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

    #[test]
    fn process_liveness_and_cgroup_discovery() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(u32::MAX - 1));
        // Either a controller is found or the error says why; both are fine, a panic is not.
        match find_cpu_cgroup() {
            Ok(CpuCgroup::V1(p)) | Ok(CpuCgroup::V2(p)) => assert!(p.is_dir(), "{}", p.display()),
            Err(e) => assert!(e.contains("no usable cgroup cpu controller"), "{e}"),
        }
    }
}
