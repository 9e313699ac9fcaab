//! Link emulation: delay, jitter, bandwidth, loss and block on the directed links between
//! replicas, set at run time through the admin HTTP API (docs/faults.md).
//!
//! The test machines' kernel has no `netem`, so the replica transport emulates the network
//! itself, on the sending side: each outbound per-peer task (`transport.rs`) owns a
//! [`Emulator`] and consults the [`Link`] the admin handlers write. A link with nothing set is
//! *inactive* and costs the task one relaxed atomic load per batch of messages: no extra task,
//! no timer, no allocation (the fast path is the transport as it was).
//!
//! Model of one active directed link, per message of `size` bytes entering it at `now`:
//!
//! 1. `block`: dropped (also when it is still in the link as the block starts, which is what a
//!    partition does to packets in flight). The TCP connection stays up, so lifting the block
//!    restores delivery at once.
//! 2. `loss`: dropped with that probability.
//! 3. The link serializes bytes at `bandwidth_mbit`: the message starts when the link is free,
//!    occupies it for `size × 8 / rate`, and so queues behind the messages before it (1 MB at
//!    100 Mbit/s takes ≈ 80 ms). Then it travels `delay_ms` ± jitter (uniform on
//!    [delay − jitter, delay + jitter] as netem does by default, or normal with standard
//!    deviation `jitter_ms`; clamped at 0).
//! 4. It is released (written to the socket) at that time, but never before the message ahead
//!    of it: the link is FIFO like the TCP stream it emulates, so jitter is latency variation
//!    with head-of-line blocking, not reordering (reordering is the simulator's business).
//!
//! A node-wide **egress budget** ([`Egress`], `POST /fault/egress`) stands for the host's NIC
//! (Crossword's setting shapes each host, not each link): every outbound link of the replica
//! shares it, so a message starts when both its link and the NIC are free and occupies the
//! NIC for `size × 8 / egress rate` — a leader sending 1 MB to each of four followers over a
//! 100 Mbit/s NIC needs ≈ 320 ms, whatever the per-link caps.
//!
//! Jitter `pareto` is heavy-tailed: the delay is `delay_ms` plus a Pareto-distributed extra
//! with mean `jitter_ms` and shape `jitter_shape` (default 2.5; smaller = heavier tail), never
//! below `delay_ms` — tails decide small-value latency in the Crossword evaluation.
//!
//! The emulated link buffers at most [`LINK_QUEUE_BYTES`] / [`LINK_QUEUE_MESSAGES`]; beyond
//! that messages are dropped at the tail, like a router's buffer, so a slow link cannot eat
//! the replica's memory.

use crate::node::Clock;
use bytes::Bytes;
use metrics::Counter;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use synod_core::NodeId;
use tokio::time::Instant;

/// Most bytes held in one emulated link.
pub const LINK_QUEUE_BYTES: usize = 64 << 20;
/// Most messages held in one emulated link.
pub const LINK_QUEUE_MESSAGES: usize = 64 * 1024;

/// How the per-message delay varies around `delay_ms`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JitterDistribution {
    /// Uniform on [delay − jitter, delay + jitter].
    #[default]
    Uniform,
    /// Normal with mean delay and standard deviation jitter.
    Normal,
    /// Delay plus a Pareto extra with mean jitter and shape `jitter_shape` (heavy tail).
    Pareto,
}

/// Shape of the Pareto jitter when `jitter_shape` is not given.
pub const DEFAULT_PARETO_SHAPE: f64 = 2.5;

/// The emulation of one directed link. The default is a normal link.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    #[serde(default)]
    pub delay_ms: f64,
    #[serde(default)]
    pub jitter_ms: f64,
    #[serde(default)]
    pub jitter_distribution: JitterDistribution,
    /// Shape α > 1 of the Pareto jitter (None: [`DEFAULT_PARETO_SHAPE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_shape: Option<f64>,
    /// `None`: unlimited.
    #[serde(default)]
    pub bandwidth_mbit: Option<f64>,
    /// Probability that a message is dropped, in [0, 1].
    #[serde(default)]
    pub loss: f64,
    #[serde(default)]
    pub block: bool,
}

impl LinkSpec {
    /// A link that only drops everything.
    pub fn blocked() -> LinkSpec {
        LinkSpec { block: true, ..LinkSpec::default() }
    }

    /// Check the ranges; the error says which field is wrong and why.
    pub fn validate(&self) -> Result<(), String> {
        let non_negative = |name: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(format!("{name} must be a finite number >= 0, got {v}"))
            }
        };
        non_negative("delay_ms", self.delay_ms)?;
        non_negative("jitter_ms", self.jitter_ms)?;
        if let Some(b) = self.bandwidth_mbit {
            if !(b.is_finite() && b > 0.0) {
                return Err(format!("bandwidth_mbit must be a finite number > 0 or null (unlimited), got {b}"));
            }
        }
        if let Some(a) = self.jitter_shape {
            if !(a.is_finite() && a > 1.0) {
                return Err(format!(
                    "jitter_shape must be a finite number > 1 (the Pareto mean is infinite otherwise), got {a}"
                ));
            }
        }
        if !(0.0..=1.0).contains(&self.loss) {
            return Err(format!("loss must be a probability in [0, 1], got {}", self.loss));
        }
        Ok(())
    }

    /// Whether this spec changes nothing (the link is then inactive: the fast path).
    pub fn is_normal(&self) -> bool {
        !self.block
            && self.loss == 0.0
            && self.delay_ms == 0.0
            && self.jitter_ms == 0.0
            && self.bandwidth_mbit.is_none()
    }

    /// One message's propagation delay: `delay_ms` with jitter, clamped at zero.
    fn sample_delay(&self, rng: &mut impl rand::Rng) -> Duration {
        let jitter = if self.jitter_ms == 0.0 {
            0.0
        } else {
            match self.jitter_distribution {
                JitterDistribution::Uniform => self.jitter_ms * (2.0 * rng.gen::<f64>() - 1.0),
                JitterDistribution::Normal => self.jitter_ms * standard_normal(rng),
                JitterDistribution::Pareto => {
                    // Pareto(x_m, α) − x_m has mean x_m / (α − 1) = jitter_ms.
                    let alpha = self.jitter_shape.unwrap_or(DEFAULT_PARETO_SHAPE);
                    let x_m = self.jitter_ms * (alpha - 1.0);
                    let u: f64 = 1.0 - rng.gen::<f64>(); // (0, 1]
                    (x_m * (u.powf(-1.0 / alpha) - 1.0)).min(1e7)
                }
            }
        };
        Duration::from_secs_f64(((self.delay_ms + jitter) / 1e3).max(0.0))
    }

    /// How long `bytes` occupy the link.
    fn transmission(&self, bytes: usize) -> Duration {
        match self.bandwidth_mbit {
            Some(mbit) => Duration::from_secs_f64(bytes as f64 * 8.0 / (mbit * 1e6)),
            None => Duration::ZERO,
        }
    }
}

/// A standard normal sample (Box–Muller).
fn standard_normal(rng: &mut impl rand::Rng) -> f64 {
    let u1: f64 = 1.0 - rng.gen::<f64>(); // (0, 1]: ln is finite
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Why the emulation dropped a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    Block,
    Loss,
    QueueFull,
}

/// A replica's NIC: an egress rate shared by all its outbound links (None: unlimited).
#[derive(Debug, Default)]
pub struct Egress {
    active: AtomicBool,
    state: Mutex<EgressState>,
}

#[derive(Debug, Default)]
struct EgressState {
    mbit: Option<f64>,
    /// When the NIC has finished serializing the last message admitted on any link.
    free_at: Option<Instant>,
}

impl Egress {
    /// Set (or with None lift) the node's egress rate.
    pub fn set(&self, mbit: Option<f64>) -> Result<(), String> {
        if let Some(b) = mbit {
            if !(b.is_finite() && b > 0.0) {
                return Err(format!("bandwidth_mbit must be a finite number > 0 or null (unlimited), got {b}"));
            }
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.mbit = mbit;
        if mbit.is_none() {
            st.free_at = None;
        }
        self.active.store(mbit.is_some(), Ordering::Relaxed);
        Ok(())
    }

    pub fn mbit(&self) -> Option<f64> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).mbit
    }

    /// A message of `size` bytes wants to start at `earliest`: when it starts on the NIC
    /// (after the messages before it) and when the NIC is done with it; the NIC is booked.
    fn book(&self, earliest: Instant, size: usize, link_tx: Duration) -> (Instant, Instant) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mbit) = st.mbit else { return (earliest, earliest + link_tx) };
        let start = match st.free_at {
            Some(free) if free > earliest => free,
            _ => earliest,
        };
        let nic_tx = Duration::from_secs_f64(size as f64 * 8.0 / (mbit * 1e6));
        st.free_at = Some(start + nic_tx);
        (start, start + nic_tx.max(link_tx))
    }
}

/// The control of one directed link (this replica → `peer`), shared by the admin handlers
/// (which write it) and the link's outbound task (which reads it).
pub struct Link {
    /// False while the spec is normal: the outbound task then takes its fast path.
    active: AtomicBool,
    /// The replica's NIC, shared by all its links.
    egress: Arc<Egress>,
    spec: Mutex<LinkSpec>,
    dropped_block: Counter,
    dropped_loss: Counter,
    dropped_queue: Counter,
}

impl Link {
    /// A normal link from `node` to `peer` (the ids label its drop counters), with a NIC of
    /// its own.
    pub fn new(node: NodeId, peer: NodeId) -> Link {
        Link::with_egress(node, peer, Arc::new(Egress::default()))
    }

    /// A normal link from `node` to `peer` through the shared NIC `egress`.
    pub fn with_egress(node: NodeId, peer: NodeId, egress: Arc<Egress>) -> Link {
        let counter = |reason: &'static str| metrics::counter!("synod_link_dropped_total", "node" => node.to_string(), "peer" => peer.to_string(), "reason" => reason);
        Link {
            active: AtomicBool::new(false),
            egress,
            spec: Mutex::new(LinkSpec::default()),
            dropped_block: counter("block"),
            dropped_loss: counter("loss"),
            dropped_queue: counter("queue_full"),
        }
    }

    /// Whether anything is emulated on this link. One relaxed load: the fast-path check.
    #[inline]
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed) || self.egress.active.load(Ordering::Relaxed)
    }

    pub fn egress(&self) -> &Arc<Egress> {
        &self.egress
    }

    pub fn spec(&self) -> LinkSpec {
        self.spec.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replace the emulation (validated by the caller).
    pub fn set(&self, spec: LinkSpec) {
        let mut guard = self.spec.lock().unwrap_or_else(|e| e.into_inner());
        self.active.store(!spec.is_normal(), Ordering::Relaxed);
        *guard = spec;
    }

    fn count_drop(&self, reason: DropReason) {
        match reason {
            DropReason::Block => self.dropped_block.increment(1),
            DropReason::Loss => self.dropped_loss.increment(1),
            DropReason::QueueFull => self.dropped_queue.increment(1),
        }
    }
}

/// The messages inside one emulated link, owned by its outbound task: encoded frames with the
/// time each may be written to the socket (non-decreasing: FIFO).
#[derive(Default)]
pub struct Emulator {
    queue: VecDeque<(Instant, Bytes)>,
    queued_bytes: usize,
    /// When the emulated wire has finished serializing the last admitted message.
    wire_free_at: Option<Instant>,
    /// Release time of the last admitted message (FIFO floor for the next one).
    last_release: Option<Instant>,
}

impl Emulator {
    /// Nothing in the link: with an inactive [`Link`], the transport may bypass the emulator.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// When the next message is due, if any.
    pub fn next_release(&self) -> Option<Instant> {
        self.queue.front().map(|(t, _)| *t)
    }

    /// Messages held in the link.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// An encoded frame enters the link at `now`: queue it with its release time, or drop it.
    pub fn admit(
        &mut self,
        link: &Link,
        spec: &LinkSpec,
        frame: Bytes,
        now: Instant,
        rng: &mut impl rand::Rng,
    ) -> Result<(), DropReason> {
        let verdict = self.decide(spec, &link.egress, frame.len(), now, rng);
        match verdict {
            Ok(release) => {
                self.queued_bytes += frame.len();
                self.queue.push_back((release, frame));
                Ok(())
            }
            Err(reason) => {
                link.count_drop(reason);
                Err(reason)
            }
        }
    }

    fn decide(
        &mut self,
        spec: &LinkSpec,
        egress: &Egress,
        size: usize,
        now: Instant,
        rng: &mut impl rand::Rng,
    ) -> Result<Instant, DropReason> {
        if spec.block {
            return Err(DropReason::Block);
        }
        if spec.loss > 0.0 && rng.gen::<f64>() < spec.loss {
            return Err(DropReason::Loss);
        }
        if self.queue.len() >= LINK_QUEUE_MESSAGES || self.queued_bytes + size > LINK_QUEUE_BYTES {
            return Err(DropReason::QueueFull);
        }
        let link_free = match self.wire_free_at {
            Some(free) if free > now => free,
            _ => now,
        };
        // The message needs its link and the node's NIC: it starts when both are free.
        let link_tx = spec.transmission(size);
        let (start, serialized) = egress.book(link_free, size, link_tx);
        self.wire_free_at = Some(start + link_tx);
        let arrival = serialized + spec.sample_delay(rng);
        let release = match self.last_release {
            Some(previous) if previous > arrival => previous,
            _ => arrival,
        };
        self.last_release = Some(release);
        Ok(release)
    }

    /// Take the frames due at `now` (at most about `max_bytes`, at least one if any is due)
    /// and append them to `out`. A link blocked meanwhile drops them instead.
    pub fn release_due(
        &mut self,
        link: &Link,
        blocked: bool,
        now: Instant,
        out: &mut bytes::BytesMut,
        max_bytes: usize,
    ) {
        while let Some((due, _)) = self.queue.front() {
            if *due > now || (!out.is_empty() && out.len() >= max_bytes) {
                break;
            }
            let (_, frame) = self.queue.pop_front().expect("front exists");
            self.queued_bytes -= frame.len();
            if blocked {
                link.count_drop(DropReason::Block);
            } else {
                out.extend_from_slice(&frame);
            }
        }
    }
}

/// The fault state of one replica, shared by the admin handlers, the outbound tasks (one
/// [`Link`] each) and the node loop (through the [`Clock`]).
#[derive(Clone)]
pub struct Faults {
    me: NodeId,
    links: Arc<BTreeMap<NodeId, Arc<Link>>>,
    egress: Arc<Egress>,
    clock: Clock,
}

/// Which peers a `POST /fault/link` concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peers {
    All,
    Some(Vec<NodeId>),
}

/// What `GET /fault` answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultState {
    /// Keyed by peer id (JSON object keys are strings).
    pub links: BTreeMap<String, LinkSpec>,
    /// The node-wide egress rate (None: unlimited).
    #[serde(default)]
    pub egress_mbit: Option<f64>,
    pub clock_offset_ms: i64,
}

impl Faults {
    /// Normal links to `peers`, and the clock whose offset the API moves.
    pub fn new(me: NodeId, peers: impl IntoIterator<Item = NodeId>, clock: Clock) -> Faults {
        let egress = Arc::new(Egress::default());
        let links: Vec<_> = peers
            .into_iter()
            .filter(|p| *p != me)
            .map(|p| (p, Arc::new(Link::with_egress(me, p, egress.clone()))))
            .collect();
        Faults::with_links(me, links, egress, clock)
    }

    /// Over links made beforehand (the outbound tasks hold them before the clock exists),
    /// all through `egress`.
    pub fn with_links(
        me: NodeId,
        links: impl IntoIterator<Item = (NodeId, Arc<Link>)>,
        egress: Arc<Egress>,
        clock: Clock,
    ) -> Faults {
        Faults { me, links: Arc::new(links.into_iter().collect()), egress, clock }
    }

    /// Set (or lift, with None) the node-wide egress rate.
    pub fn set_egress(&self, mbit: Option<f64>) -> Result<(), String> {
        self.egress.set(mbit)
    }

    /// The control of the link to `peer` (for its outbound task).
    pub fn link(&self, peer: NodeId) -> Option<Arc<Link>> {
        self.links.get(&peer).cloned()
    }

    /// Replace the emulation of the links to `peers`. Unknown ids (or our own) are an error
    /// and change nothing.
    pub fn set_links(&self, peers: &Peers, spec: &LinkSpec) -> Result<(), String> {
        spec.validate()?;
        let targets: Vec<&Arc<Link>> = match peers {
            Peers::All => self.links.values().collect(),
            Peers::Some(ids) => {
                if ids.is_empty() {
                    return Err("\"to\" names no peer; use \"*\" for every peer".into());
                }
                let mut targets = Vec::with_capacity(ids.len());
                for id in ids {
                    match self.links.get(id) {
                        Some(link) => targets.push(link),
                        None => {
                            let known: Vec<String> = self.links.keys().map(|k| k.to_string()).collect();
                            let why = if *id == self.me { "this replica itself" } else { "not a peer" };
                            return Err(format!("replica {id} is {why}; peers of {}: {}", self.me, known.join(", ")));
                        }
                    }
                }
                targets
            }
        };
        for link in targets {
            link.set(spec.clone());
        }
        Ok(())
    }

    /// Every link back to normal, the clock back to no offset.
    pub fn heal(&self) {
        for link in self.links.values() {
            link.set(LinkSpec::default());
        }
        let _ = self.egress.set(None);
        self.clock.set_offset_nanos(0);
    }

    /// Run the clock `offset_ms` off the wall clock from now on.
    pub fn set_clock_offset_ms(&self, offset_ms: i64) -> Result<(), String> {
        let nanos = offset_ms
            .checked_mul(1_000_000)
            .ok_or_else(|| format!("offset_ms {offset_ms} is out of range (at most ±{} ms)", i64::MAX / 1_000_000))?;
        self.clock.set_offset_nanos(nanos);
        Ok(())
    }

    pub fn state(&self) -> FaultState {
        FaultState {
            links: self.links.iter().map(|(id, l)| (id.to_string(), l.spec())).collect(),
            egress_mbit: self.egress.mbit(),
            clock_offset_ms: self.clock.offset_nanos() / 1_000_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn rng() -> synod_core::Rng {
        synod_core::rng_from_seed(1)
    }

    #[test]
    fn bandwidth_serializes_messages_fifo_then_delay() {
        let link = Link::new(1, 2);
        let spec = LinkSpec { bandwidth_mbit: Some(100.0), delay_ms: 10.0, ..Default::default() };
        let mut emu = Emulator::default();
        let t0 = Instant::now();
        // 1 MB at 100 Mbit/s: 80 ms on the wire, then 10 ms of propagation.
        emu.admit(&link, &spec, Bytes::from(vec![0u8; 1_000_000]), t0, &mut rng()).unwrap();
        assert_eq!(emu.next_release(), Some(t0 + ms(90)));
        // A small message right behind it waits for the wire: 80 ms + 80 µs + 10 ms.
        emu.admit(&link, &spec, Bytes::from(vec![1u8; 1_000]), t0, &mut rng()).unwrap();
        let mut out = BytesMut::new();
        emu.release_due(&link, false, t0 + ms(89), &mut out, usize::MAX);
        assert!(out.is_empty());
        emu.release_due(&link, false, t0 + ms(90), &mut out, usize::MAX);
        assert_eq!(out.len(), 1_000_000);
        assert_eq!(emu.next_release(), Some(t0 + ms(90) + Duration::from_micros(80)));
        // Once the wire is idle again, a message only pays its own transmission and delay.
        emu.release_due(&link, false, t0 + ms(200), &mut out, usize::MAX);
        assert!(emu.is_empty());
        emu.admit(&link, &spec, Bytes::from(vec![2u8; 1_250]), t0 + ms(300), &mut rng()).unwrap();
        assert_eq!(emu.next_release(), Some(t0 + ms(310) + Duration::from_micros(100)));
    }

    #[test]
    fn jitter_never_reorders_and_stays_in_range() {
        let link = Link::new(1, 2);
        for dist in [JitterDistribution::Uniform, JitterDistribution::Normal] {
            let spec = LinkSpec { delay_ms: 20.0, jitter_ms: 10.0, jitter_distribution: dist, ..Default::default() };
            let mut emu = Emulator::default();
            let mut r = rng();
            let t0 = Instant::now();
            for i in 0..1000u64 {
                emu.admit(
                    &link,
                    &spec,
                    Bytes::from(i.to_le_bytes().to_vec()),
                    t0 + Duration::from_micros(i * 100),
                    &mut r,
                )
                .unwrap();
            }
            let times: Vec<Instant> = emu.queue.iter().map(|(t, _)| *t).collect();
            assert!(times.windows(2).all(|w| w[0] <= w[1]), "{dist:?}: release times are FIFO");
            let first = times[0] - t0;
            if dist == JitterDistribution::Uniform {
                assert!(first >= ms(10) && first <= ms(30), "{first:?}");
            }
            // The releases are spread: jitter shows, it is not one constant delay.
            let spread: Vec<Duration> =
                (0..1000).map(|i| times[i] - (t0 + Duration::from_micros(i as u64 * 100))).collect();
            let (lo, hi) = (spread.iter().min().unwrap(), spread.iter().max().unwrap());
            assert!(*hi - *lo > ms(5), "{dist:?}: {lo:?}..{hi:?}");
            let mut out = BytesMut::new();
            emu.release_due(&link, false, t0 + Duration::from_secs(10), &mut out, usize::MAX);
            let order: Vec<u64> = out.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
            assert_eq!(order, (0..1000).collect::<Vec<_>>(), "{dist:?}: delivered in order");
        }
    }

    #[test]
    fn normal_jitter_has_the_configured_spread() {
        let spec = LinkSpec {
            delay_ms: 50.0,
            jitter_ms: 5.0,
            jitter_distribution: JitterDistribution::Normal,
            ..Default::default()
        };
        let mut r = rng();
        let samples: Vec<f64> = (0..20_000).map(|_| spec.sample_delay(&mut r).as_secs_f64() * 1e3).collect();
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        let sd = (samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / samples.len() as f64).sqrt();
        assert!((mean - 50.0).abs() < 0.3, "mean {mean}");
        assert!((sd - 5.0).abs() < 0.3, "sd {sd}");
    }

    #[test]
    fn loss_block_and_queue_limits_drop() {
        let link = Link::new(1, 2);
        let mut emu = Emulator::default();
        let now = Instant::now();
        let all_lost = LinkSpec { loss: 1.0, ..Default::default() };
        for _ in 0..100 {
            assert_eq!(emu.admit(&link, &all_lost, Bytes::from_static(b"x"), now, &mut rng()), Err(DropReason::Loss));
        }
        let half = LinkSpec { loss: 0.5, ..Default::default() };
        let mut r = rng();
        let kept =
            (0..10_000).filter(|_| emu.admit(&link, &half, Bytes::from_static(b"x"), now, &mut r).is_ok()).count();
        assert!((4_500..5_500).contains(&kept), "{kept} of 10000 kept at loss 0.5");
        assert_eq!(
            emu.admit(&link, &LinkSpec::blocked(), Bytes::from_static(b"x"), now, &mut r),
            Err(DropReason::Block)
        );
        // Blocked while in flight: due frames are dropped, not written.
        let mut out = BytesMut::new();
        emu.release_due(&link, true, now, &mut out, usize::MAX);
        assert!(out.is_empty() && emu.is_empty());
        // The link's buffer is bounded.
        let slow = LinkSpec { bandwidth_mbit: Some(1.0), ..Default::default() };
        let big = Bytes::from(vec![0u8; LINK_QUEUE_BYTES / 2]);
        emu.admit(&link, &slow, big.clone(), now, &mut r).unwrap();
        emu.admit(&link, &slow, big.clone(), now, &mut r).unwrap();
        assert_eq!(emu.admit(&link, &slow, Bytes::from_static(b"x"), now, &mut r), Err(DropReason::QueueFull));
    }

    #[test]
    fn specs_validate_and_links_switch_between_fast_and_emulated() {
        assert!(LinkSpec::default().is_normal());
        assert!(LinkSpec::default().validate().is_ok());
        for (bad, field) in [
            (LinkSpec { loss: 1.5, ..Default::default() }, "loss"),
            (LinkSpec { delay_ms: -1.0, ..Default::default() }, "delay_ms"),
            (LinkSpec { jitter_ms: f64::NAN, ..Default::default() }, "jitter_ms"),
            (LinkSpec { bandwidth_mbit: Some(0.0), ..Default::default() }, "bandwidth_mbit"),
        ] {
            assert!(bad.validate().unwrap_err().starts_with(field), "{bad:?}");
        }
        let faults = Faults::new(1, [1, 2, 3], Clock::new());
        let (l2, l3) = (faults.link(2).unwrap(), faults.link(3).unwrap());
        assert!(faults.link(1).is_none(), "no link to itself");
        faults.set_links(&Peers::Some(vec![3]), &LinkSpec::blocked()).unwrap();
        assert!(!l2.active() && l3.active());
        assert!(faults.set_links(&Peers::Some(vec![2, 9]), &LinkSpec::blocked()).unwrap_err().contains("9"));
        assert!(faults.set_links(&Peers::Some(vec![1]), &LinkSpec::blocked()).unwrap_err().contains("itself"));
        assert!(!l2.active(), "a rejected request changes nothing");
        faults.set_links(&Peers::All, &LinkSpec { delay_ms: 5.0, ..Default::default() }).unwrap();
        assert!(l2.active() && l3.active());
        assert_eq!(faults.state().links["3"].delay_ms, 5.0);
        faults.set_clock_offset_ms(-2_000).unwrap();
        assert_eq!(faults.state().clock_offset_ms, -2_000);
        assert!(faults.set_clock_offset_ms(i64::MAX).is_err());
        faults.heal();
        assert!(!l2.active() && !l3.active());
        assert_eq!(faults.state().clock_offset_ms, 0);
        assert!(faults.state().links.values().all(LinkSpec::is_normal));
    }

    #[test]
    fn a_node_egress_budget_is_shared_by_all_links() {
        let egress = Arc::new(Egress::default());
        egress.set(Some(100.0)).unwrap();
        let (a, b) = (Link::with_egress(1, 2, egress.clone()), Link::with_egress(1, 3, egress.clone()));
        assert!(a.active() && b.active(), "a node budget activates every link");
        let (mut ea, mut eb) = (Emulator::default(), Emulator::default());
        let t0 = Instant::now();
        let spec = LinkSpec::default();
        // 1 MB to each of two peers at the same instant over one 100 Mbit/s NIC: the second
        // finishes ≈ 160 ms after the start, not 80 (each link alone is unlimited).
        ea.admit(&a, &spec, Bytes::from(vec![0u8; 1_000_000]), t0, &mut rng()).unwrap();
        eb.admit(&b, &spec, Bytes::from(vec![0u8; 1_000_000]), t0, &mut rng()).unwrap();
        let first = ea.next_release().unwrap() - t0;
        let second = eb.next_release().unwrap() - t0;
        assert!((79..=81).contains(&first.as_millis()), "{first:?}");
        assert!((159..=161).contains(&second.as_millis()), "{second:?}");
        // A per-link cap below the NIC's still applies on its own link.
        let slow = LinkSpec { bandwidth_mbit: Some(10.0), ..Default::default() };
        let t1 = t0 + ms(1000);
        ea.admit(&a, &slow, Bytes::from(vec![0u8; 100_000]), t1, &mut rng()).unwrap();
        assert!((79..=81).contains(&(ea.queue.back().unwrap().0 - t1).as_millis()));
        // Lifting it returns the links to the fast path.
        egress.set(None).unwrap();
        assert!(!a.active() && !b.active());
        assert!(egress.set(Some(0.0)).is_err() && egress.set(Some(f64::NAN)).is_err());
    }

    #[test]
    fn pareto_jitter_has_the_configured_mean_and_a_heavier_tail_than_uniform() {
        let mut r = rng();
        let quantiles = |spec: &LinkSpec, r: &mut synod_core::Rng| {
            let mut v: Vec<f64> = (0..20_000).map(|_| spec.sample_delay(r).as_secs_f64() * 1e3).collect();
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            (mean, v[v.len() / 2], v[v.len() * 999 / 1000], v[0])
        };
        let pareto = LinkSpec {
            delay_ms: 4.0,
            jitter_ms: 1.0,
            jitter_distribution: JitterDistribution::Pareto,
            ..Default::default()
        };
        let uniform = LinkSpec { jitter_distribution: JitterDistribution::Uniform, ..pareto.clone() };
        let (pm, p50, p999, pmin) = quantiles(&pareto, &mut r);
        let (um, u50, u999, _) = quantiles(&uniform, &mut r);
        assert!((pm - 5.0).abs() < 0.15, "pareto mean {pm} (delay 4 + mean extra 1)");
        assert!(pmin >= 4.0, "never below the base delay: {pmin}");
        assert!((um - 4.0).abs() < 0.05, "uniform mean {um}");
        assert!(p999 / p50 > 2.0 * (u999 / u50), "pareto tail {p999}/{p50} vs uniform {u999}/{u50}");
        assert!(LinkSpec { jitter_shape: Some(1.0), ..pareto.clone() }.validate().is_err());
        assert!(LinkSpec { jitter_shape: Some(1.5), ..pareto }.validate().is_ok());
    }
}
