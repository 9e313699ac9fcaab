//! Admission control: the acceptance test of IDEM §5.1, shared by every protocol that rejects
//! requests under overload (IDEM runs it at every replica, Paxos-LBR at the leader only).
//!
//! A replica counts its *active* requests (accepted and not yet executed) and decides for each
//! new request whether to accept it:
//!
//! * **reject threshold** `RT` — never more than `RT` active requests ("tail drop" alone, the
//!   paper's basic form);
//! * **active queue management** — once `aqm_start` percent of `RT` is in use, requests of
//!   clients outside the *prioritized group* are rejected with probability `p = r_now / RT`
//!   already below the threshold, while prioritized clients are only tail-dropped;
//! * **fair prioritisation with time slices** — every client belongs to one of `groups`
//!   groups (by a hash of its session id); time is cut into slices of `slice` and in slice
//!   `k` group `k mod groups` is prioritized, so each client regularly is;
//! * **one pseudo-random draw per request** — the draw is a hash of the request id
//!   (client, seq), not of local state, so replicas that see the same load decide alike
//!   ("replicas employ a pseudo-random function with the same seed for each request").
//!
//! Everything is a pure function of the configuration, the request id, the active count and
//! `now` (the replica's clock, `ctx.now`): deterministic and IO-free. [`RejectCache`] keeps the
//! requests a replica rejected, so that a rejection is sticky (a retransmission is rejected
//! again without re-running the test) and the request body stays at hand if other replicas
//! accepted it (§5.2, "caching of recently rejected requests").

use std::collections::{BTreeMap, VecDeque};
use std::str::FromStr;
use std::time::Duration;
use synod_core::{ClientRef, Command, ProtocolParams, Time};

/// Which acceptance test runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Accept everything (IDEM_noPR, the paper's ablation without proactive rejection).
    Off,
    /// Reject only at the threshold ("tail drop"; the `idem-noaqm` ablation).
    TailDrop,
    /// Tail drop for prioritized clients, probabilistic early rejection for the others (§5.1).
    Aqm,
}

impl Mode {
    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "off" | "none" => Ok(Mode::Off),
            "taildrop" | "tail-drop" | "tail_drop" => Ok(Mode::TailDrop),
            "aqm" => Ok(Mode::Aqm),
            _ => Err(format!("option admission: expected off|taildrop|aqm, got {s:?}")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::TailDrop => "taildrop",
            Mode::Aqm => "aqm",
        }
    }
}

/// The knobs of the acceptance test (protocol options `admission`, `reject_threshold`,
/// `aqm_start_pct`, `slice_ms`, `groups`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionConfig {
    pub mode: Mode,
    /// RT: most concurrently active requests at one replica (the paper's default is 50).
    pub threshold: usize,
    /// Active queue management starts at this percentage of `threshold` (the paper: 60%).
    pub aqm_start_pct: u32,
    /// Length of a priority time slice (the paper: 2 s).
    pub slice: Duration,
    /// Number of client groups taking turns at being prioritized.
    pub groups: u64,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig { mode: Mode::Aqm, threshold: 50, aqm_start_pct: 60, slice: Duration::from_secs(2), groups: 4 }
    }
}

/// The option names [`AdmissionConfig::from_params`] reads.
pub const OPTIONS: &[&str] = &["admission", "reject_threshold", "aqm_start_pct", "slice_ms", "groups"];

fn number<T: FromStr>(p: &ProtocolParams, name: &str, default: T) -> Result<T, String> {
    match p.options.get(name) {
        None => Ok(default),
        Some(v) => v.trim().parse().map_err(|_| format!("option {name}: expected a number, got {v:?}")),
    }
}

impl AdmissionConfig {
    /// Read the options (absent = the paper's defaults, with `default_mode`).
    pub fn from_params(p: &ProtocolParams, default_mode: Mode) -> Result<AdmissionConfig, String> {
        let d = AdmissionConfig { mode: default_mode, ..AdmissionConfig::default() };
        let mode = match p.options.get("admission") {
            None => d.mode,
            Some(s) => Mode::parse(s.trim())?,
        };
        let cfg = AdmissionConfig {
            mode,
            threshold: number(p, "reject_threshold", d.threshold)?,
            aqm_start_pct: number(p, "aqm_start_pct", d.aqm_start_pct)?,
            slice: Duration::from_millis(number(p, "slice_ms", d.slice.as_millis() as u64)?),
            groups: number(p, "groups", d.groups)?,
        };
        if cfg.threshold == 0 {
            return Err("option reject_threshold must be > 0".into());
        }
        if cfg.aqm_start_pct > 100 {
            return Err("option aqm_start_pct must be at most 100".into());
        }
        if cfg.slice.is_zero() || cfg.groups == 0 {
            return Err("options slice_ms and groups must be > 0".into());
        }
        Ok(cfg)
    }
}

/// The decision of the acceptance test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    /// Rejected; the reason is for humans (it travels in `ReplyBody::Rejected`).
    Reject(String),
}

/// splitmix64: a fixed, well-mixed hash (the same on every replica and every platform).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The acceptance test (§5.1).
#[derive(Clone, Copy, Debug)]
pub struct AcceptanceTest {
    cfg: AdmissionConfig,
}

impl AcceptanceTest {
    pub fn new(cfg: AdmissionConfig) -> AcceptanceTest {
        AcceptanceTest { cfg }
    }

    pub fn config(&self) -> &AdmissionConfig {
        &self.cfg
    }

    /// The group `client` belongs to.
    pub fn group(&self, client: u64) -> u64 {
        mix(client ^ 0x1DE7_0000) % self.cfg.groups
    }

    /// Whether `client` is prioritized at `now` (its group owns the current time slice).
    pub fn prioritized(&self, now: Time, client: u64) -> bool {
        let slice = (now.as_nanos() / self.cfg.slice.as_nanos().max(1) as u64) % self.cfg.groups;
        self.group(client) == slice
    }

    /// The request's draw in `[0, threshold)`: the same on every replica for one request id.
    pub fn draw(&self, client: u64, seq: u64) -> usize {
        (mix(mix(client) ^ seq) % self.cfg.threshold as u64) as usize
    }

    /// Decide on the request `(client, seq)` arriving at `now` while `active` requests are
    /// active at this replica.
    pub fn test(&self, now: Time, client: u64, seq: u64, active: usize) -> Verdict {
        let rt = self.cfg.threshold;
        match self.cfg.mode {
            Mode::Off => Verdict::Accept,
            _ if active >= rt => Verdict::Reject(format!("overloaded: {active} active requests (threshold {rt})")),
            Mode::TailDrop => Verdict::Accept,
            Mode::Aqm => {
                // Below aqm_start% of RT everyone is accepted; above it, non-prioritized
                // clients are rejected with probability active / RT.
                if active * 100 < rt * self.cfg.aqm_start_pct as usize || self.prioritized(now, client) {
                    return Verdict::Accept;
                }
                if self.draw(client, seq) < active {
                    Verdict::Reject(format!("overloaded: early rejection at {active} of {rt} active requests"))
                } else {
                    Verdict::Accept
                }
            }
        }
    }
}

/// A request id: (client session, seq).
pub type ReqId = (u64, u64);

/// One cached rejection: the request (so it can be proposed if others accepted it) and the
/// client connected here that sent it (answered if the request executes after all).
#[derive(Clone, Debug)]
pub struct Rejected {
    pub cmd: Command,
    pub client: Option<ClientRef>,
}

/// The requests this replica rejected most recently, at most `capacity` (oldest evicted
/// first). Membership makes a rejection sticky: a retransmission is rejected again.
#[derive(Clone, Debug)]
pub struct RejectCache {
    capacity: usize,
    entries: BTreeMap<ReqId, Rejected>,
    order: VecDeque<ReqId>,
}

impl RejectCache {
    pub fn new(capacity: usize) -> RejectCache {
        RejectCache { capacity: capacity.max(1), entries: BTreeMap::new(), order: VecDeque::new() }
    }

    pub fn insert(&mut self, cmd: Command, client: Option<ClientRef>) {
        let id = (cmd.client, cmd.seq);
        if self.entries.insert(id, Rejected { cmd, client }).is_none() {
            self.order.push_back(id);
        }
        while self.entries.len() > self.capacity {
            match self.order.pop_front() {
                Some(old) => {
                    self.entries.remove(&old);
                }
                None => break,
            }
        }
    }

    pub fn get(&self, id: &ReqId) -> Option<&Rejected> {
        self.entries.get(id)
    }

    pub fn contains(&self, id: &ReqId) -> bool {
        self.entries.contains_key(id)
    }

    /// Forget the client of a rejected request (it executed and was answered).
    pub fn take_client(&mut self, id: &ReqId) -> Option<ClientRef> {
        self.entries.get_mut(id).and_then(|r| r.client.take())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The verdict a replica gave a request, as a durable record (`Verdicts::record`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VerdictRecord {
    pub id: ReqId,
    pub accepted: bool,
}

/// Every verdict this replica gave, per request id, kept until the client's session moved
/// past the request — durably, so that a verdict outlives a restart.
///
/// Why (a decision the paper leaves open; its replicas never restart): a client concludes
/// *failure* — the request never executes — from `n` REJECTs of distinct replicas. That is
/// sound only if no replica ever both rejects and accepts one request id, in any order and
/// across restarts. Two rules give it:
/// * a replica's first verdict on an id is final for its own acceptance test: a rejected id
///   is rejected again, an accepted id accepted again (after a restart, or after the held
///   request was released), without re-running the test;
/// * the only way to accept an id after rejecting it is a FORWARD (§5.2) or the retry of an
///   executed request, and both exist only because some replica accepted the id first.
///
/// So the first acceptance of an id anywhere is an acceptance test passed at a replica that
/// had no verdict on it, which then never rejects it: a client with `n` REJECTs has one from
/// a replica that never accepted its request, from every replica — nobody accepted it, and
/// nobody will (the first acceptance would need a test at a replica that already rejected).
/// The verdict must be durable before the REJECT or the REQUIRE/FORWARD it causes leaves
/// (the driver contract of `Persist`), else a replica that rejected, crashed and restarted
/// could accept a retransmission, forward it, and execute a request its client saw rejected
/// by every replica (`synod check --protocol idem --seed 419 --param reject_threshold=2`).
///
/// Garbage collection follows the session table (`synod_core::session`): once a request of
/// client `c` with seq `s` executed, the state machine never executes `(c, s')` with
/// `s' < s` (it answers it as stale), so the verdicts below `s` can no longer matter and are
/// dropped (from memory now, from the durable image at its next compaction).
#[derive(Clone, Debug, Default)]
pub struct Verdicts {
    by_client: BTreeMap<u64, BTreeMap<u64, bool>>,
}

impl Verdicts {
    pub fn get(&self, id: &ReqId) -> Option<bool> {
        self.by_client.get(&id.0).and_then(|s| s.get(&id.1)).copied()
    }

    /// Note a verdict; `Some(record)` when it is new and must be persisted. An acceptance
    /// replaces a rejection (a forward of a request someone accepted), never the reverse.
    pub fn note(&mut self, id: ReqId, accepted: bool) -> Option<VerdictRecord> {
        let seqs = self.by_client.entry(id.0).or_default();
        match seqs.get(&id.1) {
            Some(true) => None,
            Some(false) if !accepted => None,
            _ => {
                seqs.insert(id.1, accepted);
                Some(VerdictRecord { id, accepted })
            }
        }
    }

    /// Replay a durable record (recovery).
    pub fn replay(&mut self, r: VerdictRecord) {
        self.note(r.id, r.accepted);
    }

    /// Request `(client, seq)` executed: forget the client's verdicts below `seq`.
    pub fn executed(&mut self, client: u64, seq: u64) {
        if let Some(seqs) = self.by_client.get_mut(&client) {
            *seqs = seqs.split_off(&seq);
            if seqs.is_empty() {
                self.by_client.remove(&client);
            }
        }
    }

    /// Every live verdict, for a compacted durable image.
    pub fn records(&self) -> impl Iterator<Item = VerdictRecord> + '_ {
        self.by_client
            .iter()
            .flat_map(|(c, seqs)| seqs.iter().map(move |(s, a)| VerdictRecord { id: (*c, *s), accepted: *a }))
    }

    pub fn len(&self) -> usize {
        self.by_client.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_client.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use synod_core::Op;

    fn cfg(mode: Mode) -> AdmissionConfig {
        AdmissionConfig { mode, threshold: 10, aqm_start_pct: 60, slice: Duration::from_secs(2), groups: 4 }
    }

    fn cmd(client: u64, seq: u64) -> Command {
        Command { client, seq, acked_below: seq, now_ms: 0, op: Op::Noop }
    }

    #[test]
    fn tail_drop_rejects_exactly_at_the_threshold() {
        let t = AcceptanceTest::new(cfg(Mode::TailDrop));
        for active in 0..10 {
            assert_eq!(t.test(Time::ZERO, 1, 1, active), Verdict::Accept, "active {active}");
        }
        assert!(matches!(t.test(Time::ZERO, 1, 1, 10), Verdict::Reject(_)));
        assert!(matches!(t.test(Time::ZERO, 1, 1, 11), Verdict::Reject(_)));
    }

    #[test]
    fn off_accepts_everything() {
        let t = AcceptanceTest::new(cfg(Mode::Off));
        assert_eq!(t.test(Time::ZERO, 1, 1, 1_000_000), Verdict::Accept);
    }

    #[test]
    fn aqm_accepts_everyone_below_its_start() {
        let t = AcceptanceTest::new(cfg(Mode::Aqm));
        for client in 0..200 {
            for active in 0..6 {
                assert_eq!(t.test(Time::ZERO, client, 7, active), Verdict::Accept);
            }
        }
    }

    /// Above 60% of RT, a prioritized client is only tail-dropped, the others are rejected
    /// with probability active / RT (measured over many request ids).
    #[test]
    fn aqm_rejects_non_prioritized_clients_with_probability_active_over_rt() {
        let t = AcceptanceTest::new(cfg(Mode::Aqm));
        let now = Time::ZERO;
        let (mut prio, mut other) = (Vec::new(), Vec::new());
        for c in 0..400u64 {
            if t.prioritized(now, c) {
                prio.push(c)
            } else {
                other.push(c)
            }
        }
        assert!(!prio.is_empty() && !other.is_empty());
        for &c in &prio {
            assert_eq!(t.test(now, c, 1, 9), Verdict::Accept);
            assert!(matches!(t.test(now, c, 1, 10), Verdict::Reject(_)));
        }
        let mut rejected = 0;
        let mut total = 0;
        for &c in &other {
            for seq in 1..50 {
                total += 1;
                if matches!(t.test(now, c, seq, 8), Verdict::Reject(_)) {
                    rejected += 1;
                }
            }
        }
        let share = rejected as f64 / total as f64;
        assert!((0.72..0.88).contains(&share), "reject share {share} for p = 0.8");
    }

    /// The decision depends only on the request id, the load and the slice: two replicas with
    /// the same load decide alike.
    #[test]
    fn the_draw_is_seeded_by_the_request_id() {
        let a = AcceptanceTest::new(cfg(Mode::Aqm));
        let b = AcceptanceTest::new(cfg(Mode::Aqm));
        let now = Time(123_456_789);
        for c in 0..50 {
            for s in 0..20 {
                assert_eq!(a.test(now, c, s, 7), b.test(now, c, s, 7));
            }
        }
        let draws: std::collections::BTreeSet<usize> = (0..100).map(|s| a.draw(3, s)).collect();
        assert!(draws.len() > 5, "draws vary across requests: {draws:?}");
    }

    /// Every group is prioritized in turn, one slice each.
    #[test]
    fn groups_take_turns_by_time_slice() {
        let t = AcceptanceTest::new(cfg(Mode::Aqm));
        let client = 42;
        let slices: Vec<bool> = (0..8u64).map(|k| t.prioritized(Time(k * 2_000_000_000 + 1), client)).collect();
        assert_eq!(slices.iter().filter(|p| **p).count(), 2, "{slices:?}");
        let group = t.group(client) as usize;
        assert!(slices[group] && slices[group + 4]);
    }

    #[test]
    fn options_are_parsed_and_checked() {
        let mut p = ProtocolParams::default();
        assert_eq!(AdmissionConfig::from_params(&p, Mode::Aqm).unwrap(), AdmissionConfig::default());
        p.set("admission=taildrop").unwrap();
        p.set("reject_threshold=20").unwrap();
        let c = AdmissionConfig::from_params(&p, Mode::Aqm).unwrap();
        assert_eq!((c.mode, c.threshold), (Mode::TailDrop, 20));
        p.set("reject_threshold=0").unwrap();
        assert!(AdmissionConfig::from_params(&p, Mode::Aqm).is_err());
        p.set("reject_threshold=5").unwrap();
        p.set("admission=sometimes").unwrap();
        assert!(AdmissionConfig::from_params(&p, Mode::Aqm).is_err());
    }

    #[test]
    fn verdicts_keep_the_first_rejection_until_an_acceptance_and_follow_the_sessions() {
        let mut v = Verdicts::default();
        assert_eq!(v.note((1, 5), false), Some(VerdictRecord { id: (1, 5), accepted: false }));
        assert_eq!(v.note((1, 5), false), None, "a repeated verdict is not persisted twice");
        assert_eq!(v.note((1, 5), true), Some(VerdictRecord { id: (1, 5), accepted: true }));
        assert_eq!(v.note((1, 5), false), None, "an acceptance is never turned into a rejection");
        assert_eq!(v.get(&(1, 5)), Some(true));
        v.note((1, 6), false);
        v.note((2, 1), false);
        let mut replayed = Verdicts::default();
        for r in v.records() {
            replayed.replay(r);
        }
        assert_eq!(
            (replayed.get(&(1, 5)), replayed.get(&(1, 6)), replayed.get(&(2, 1))),
            (Some(true), Some(false), Some(false))
        );
        // Client 1's seq 6 executed: seq 5 can never execute any more, seq 6 is kept.
        v.executed(1, 6);
        assert_eq!((v.get(&(1, 5)), v.get(&(1, 6)), v.len()), (None, Some(false), 2));
        v.executed(2, 2);
        assert_eq!(v.get(&(2, 1)), None);
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn reject_cache_is_sticky_and_bounded() {
        let mut c = RejectCache::new(3);
        for s in 1..=5 {
            c.insert(cmd(1, s), None);
        }
        assert_eq!(c.len(), 3);
        assert!(!c.contains(&(1, 1)) && !c.contains(&(1, 2)));
        assert!(c.contains(&(1, 3)) && c.contains(&(1, 5)));
        // Re-inserting does not duplicate the entry in the eviction order.
        c.insert(cmd(1, 5), Some(ClientRef { node: 1, conn: 9 }));
        assert_eq!(c.len(), 3);
        assert_eq!(c.take_client(&(1, 5)), Some(ClientRef { node: 1, conn: 9 }));
        assert_eq!(c.take_client(&(1, 5)), None);
    }
}
