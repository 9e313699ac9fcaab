//! What a fault is: [`Action`] and its arguments, parsed by clap from the command line of
//! `synod fault` or from a scenario's `action = "..."` words, and checked against a cluster.

use clap::{Parser, Subcommand, ValueEnum};
use std::collections::BTreeSet;
use std::str::FromStr;
use synod_core::NodeId;

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
    /// This replica.
    Id(NodeId),
    /// The leader, resolved when the action is applied.
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
    /// This replica.
    Id(NodeId),
    /// Every replica.
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

    /// The shape's name on the command line.
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
    /// `*`: every link among the cluster's nodes.
    pub all: bool,
    /// The listed directed links (from, to).
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
    pub(super) fn resolve(&self, ids: &[NodeId]) -> BTreeSet<(NodeId, NodeId)> {
        if self.all {
            ids.iter().flat_map(|&a| ids.iter().filter(move |&&b| b != a).map(move |&b| (a, b))).collect()
        } else {
            self.links.clone()
        }
    }

    pub(super) fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.links.iter().flat_map(|&(a, b)| [a, b])
    }
}

/// CPU quota: a percentage of one CPU, or `off`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Quota {
    /// This percentage of one CPU (at least 1).
    Percent(f64),
    /// No quota.
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

/// How a shaped NIC orders the frames of its links (docs/faults.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Qdisc {
    /// Per-peer flows, fair and idle flows first (Linux's default fq_codel).
    #[default]
    Fq,
    /// One FIFO for all links.
    Fifo,
}

impl Qdisc {
    pub fn as_str(self) -> &'static str {
        match self {
            Qdisc::Fq => "fq",
            Qdisc::Fifo => "fifo",
        }
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

/// One fault (or `show`): a `synod fault` subcommand, also a scenario's `action = "..."`.
///
/// The variants' doc comments are the command-line help; the fields have none (a doc comment
/// on a field would become its help text), hence the `allow`.
#[derive(Subcommand, Clone, Debug, PartialEq)]
#[allow(missing_docs)]
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
        /// How the NIC orders frames: per-peer fair queueing (`fq`, Linux's default) or one
        /// FIFO for all links (`fifo`).
        #[arg(long, value_enum, default_value_t = Qdisc::Fq)]
        qdisc: Qdisc,
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
}
