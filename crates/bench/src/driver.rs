//! Load drivers: closed loop and open loop.
//!
//! **Closed loop** (YCSB's model): `C` clients, each with one outstanding request; a client
//! sends its next request when the previous one is answered (after an optional think time).
//! Throughput is what the system sustains at that concurrency; latency is per request.
//!
//! **Open loop**: requests arrive as a Poisson process at a target rate, independently of
//! the answers, and are served by `C` connections with one request outstanding each. A
//! request's latency is measured from its *intended* send time (its arrival), not from when
//! a connection was free to send it: when the system stalls, the requests that pile up behind
//! the stall are charged the time they waited. Measuring from the actual send time would hide
//! exactly that queueing ("coordinated omission"). Arrivals beyond `max_outstanding` (queued
//! plus in flight) are dropped and counted, never silently delayed.
//!
//! Both drivers exclude a warm-up period from the statistics, stop after a duration or an
//! operation count or when the [`Stop`] signal is raised, and give in-flight requests a grace
//! period to finish (those that do not are counted as errors).
//!
//! Arrivals are paced by a dedicated OS thread: tokio's timer has millisecond granularity,
//! which would add up to a millisecond of fake queueing to every open-loop request against a
//! sub-millisecond system; `std::thread::sleep` wakes within tens of microseconds.

use crate::stats::{Completion, Recorder, Summary};
use crate::target::{Outcome, Target, TargetError};
use crate::workload::{BenchOp, OpClass, Workload};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Closed or open loop.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum LoadMode {
    Closed {
        #[serde(with = "secs")]
        think: Duration,
    },
    Open {
        /// Mean arrivals per second.
        rate: f64,
        /// Queued plus in-flight requests beyond which arrivals are dropped.
        max_outstanding: usize,
    },
}

/// When the measured part of a run ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunBound {
    #[serde(with = "secs")]
    Duration(Duration),
    /// This many measured operations (open loop: arrivals).
    Ops(u64),
}

mod secs {
    pub fn serialize<S: serde::Serializer>(d: &std::time::Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

/// Parameters of one run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunConfig {
    /// Connections (simulated clients).
    pub clients: usize,
    pub mode: LoadMode,
    #[serde(with = "secs")]
    pub warmup: Duration,
    pub bound: RunBound,
    /// Timeline resolution.
    #[serde(with = "secs")]
    pub interval: Duration,
    /// One operation taking longer than this is an error, and its connection is reopened.
    #[serde(with = "secs")]
    pub op_timeout: Duration,
    /// How long in-flight operations may take to finish after the end.
    #[serde(with = "secs")]
    pub grace: Duration,
    /// Print a progress line to stderr with this label.
    #[serde(skip)]
    pub progress: Option<String>,
    /// Filled with the start of measurement as soon as it is known (after the connections
    /// are open), for callers that time events against the run while it runs (a scenario
    /// firing faults at given seconds of the timeline).
    #[serde(skip)]
    pub start_slot: Option<Arc<std::sync::OnceLock<Instant>>>,
    /// Open loop: the arrival rate can be changed while the run goes on (a scenario's
    /// `rate 60%` steps). When set, the pacer reads it before each arrival instead of using
    /// the fixed rate of [`LoadMode::Open`] (which is only the initial value).
    #[serde(skip)]
    pub rate_control: Option<RateControl>,
    /// Closed loop: after a rejected operation (definitive or ambivalent) the client waits a
    /// uniformly random time in `[min, max]` before its next request (IDEM §7: 50–100 ms).
    #[serde(with = "backoff_secs")]
    pub reject_backoff: Option<(Duration, Duration)>,
}

mod backoff_secs {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(b: &Option<(Duration, Duration)>, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&b.map(|(lo, hi)| [lo.as_secs_f64(), hi.as_secs_f64()]), s)
    }
}

/// A shared, changeable open-loop arrival rate (operations per second).
///
/// The pacer draws each inter-arrival gap as `Exp(1) / rate` with the rate current at that
/// arrival, so a change takes effect from the next arrival on (within one gap; with the
/// same seed and a constant rate the arrival times are those of a fixed-rate run).
#[derive(Clone, Debug)]
pub struct RateControl(Arc<AtomicU64>);

impl RateControl {
    /// `rate` must be positive and finite.
    pub fn new(rate: f64) -> RateControl {
        RateControl(Arc::new(AtomicU64::new(rate.to_bits())))
    }

    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::SeqCst))
    }

    /// Set a new rate; refused (unchanged) unless positive and finite.
    pub fn set(&self, rate: f64) -> Result<(), String> {
        if !(rate > 0.0 && rate.is_finite()) {
            return Err(format!("rate {rate}: must be a positive number of operations per second"));
        }
        self.0.store(rate.to_bits(), Ordering::SeqCst);
        Ok(())
    }
}

impl RunConfig {
    /// A closed-loop run with the defaults used in tests and by the CLI.
    pub fn closed(clients: usize, bound: RunBound) -> RunConfig {
        RunConfig {
            clients,
            mode: LoadMode::Closed { think: Duration::ZERO },
            warmup: Duration::ZERO,
            bound,
            interval: Duration::from_secs(1),
            op_timeout: Duration::from_secs(30),
            grace: Duration::from_secs(5),
            progress: None,
            start_slot: None,
            rate_control: None,
            reject_backoff: None,
        }
    }
}

/// Raised to end a run early (Ctrl-C); the run still reports what it measured.
#[derive(Clone, Debug, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    pub fn raise(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn raised(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// What one run measured.
#[derive(Debug)]
pub struct RunResult {
    pub recorder: Recorder,
    /// Measured time (warm-up excluded).
    pub elapsed: Duration,
    pub summary: Summary,
    /// The run was cut short by [`Stop`].
    pub interrupted: bool,
    /// When measurement started (end of warm-up): the zero of the timeline, so that events
    /// timed elsewhere (faults injected by a scenario) can be placed on it exactly.
    pub measure_start: Instant,
    /// Why operations failed (errors and ambiguous answers), with counts: at most a few
    /// distinct reasons, so a failing run says why.
    pub error_reasons: Vec<(String, u64)>,
}

/// State shared by the tasks of one run.
struct Shared {
    workload: Mutex<Workload>,
    recorder: Mutex<Recorder>,
    /// Start of measurement (end of warm-up).
    measure_start: Instant,
    /// End of measurement for a duration bound.
    measure_end: Option<Instant>,
    op_limit: Option<u64>,
    /// Measured operations so far (for the op-count bound).
    measured: AtomicU64,
    /// Completion time of the last measured operation, in ns after `measure_start`.
    last_done_ns: AtomicU64,
    /// Set when no new operation may start.
    done: AtomicBool,
    stop: Stop,
    /// Operations started and not yet finished that count in the measurement.
    inflight: AtomicUsize,
    /// Why measured operations failed: count per distinct reason (at most
    /// [`MAX_ERROR_REASONS`] reasons; later new ones are counted under "other").
    error_reasons: Mutex<BTreeMap<String, u64>>,
}

/// Distinct error reasons a run keeps (a broken target can produce one per operation).
const MAX_ERROR_REASONS: usize = 8;

/// Why an operation ended as an error or an ambiguous answer, if it did.
fn error_reason(
    r: &Result<Result<Outcome, TargetError>, tokio::time::error::Elapsed>,
    timeout: Duration,
) -> Option<String> {
    match r {
        Ok(Ok(Outcome::Error(why))) => Some(why.clone()),
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!("no answer within the operation timeout ({timeout:?})")),
        Ok(Ok(_)) => None,
    }
}

impl Shared {
    /// Count a measured operation's error under its reason.
    fn note_error(&self, reason: String) {
        self.note_errors(reason, 1);
    }

    fn note_errors(&self, reason: String, count: u64) {
        let mut reasons = self.error_reasons.lock().expect("error reasons lock");
        let key = if reasons.contains_key(&reason) || reasons.len() < MAX_ERROR_REASONS {
            reason
        } else {
            "other reasons".to_string()
        };
        *reasons.entry(key).or_insert(0) += count;
    }

    fn finished(&self) -> bool {
        self.done.load(Ordering::SeqCst) || self.stop.raised()
    }

    /// Whether an operation starting (or intended) at `t` belongs to the measurement, and
    /// claim its slot in the op-count bound.
    fn admit(&self, t: Instant) -> Admit {
        if let Some(end) = self.measure_end {
            if t >= end {
                self.done.store(true, Ordering::SeqCst);
                return Admit::Stop;
            }
        }
        if t < self.measure_start {
            return Admit::Warmup;
        }
        if let Some(limit) = self.op_limit {
            let n = self.measured.fetch_add(1, Ordering::SeqCst) + 1;
            if n > limit {
                self.done.store(true, Ordering::SeqCst);
                return Admit::Stop;
            }
            if n == limit {
                self.done.store(true, Ordering::SeqCst);
            }
        }
        Admit::Measured
    }

    fn record(&self, class: OpClass, intended: Instant, done: Instant, completion: Completion) {
        let at = done.saturating_duration_since(self.measure_start);
        // An operation that started inside the window but ended after it lands in the last
        // interval rather than opening a mostly empty one.
        let at = match self.measure_end {
            Some(end) => at.min((end - self.measure_start).saturating_sub(Duration::from_nanos(1))),
            None => at,
        };
        self.last_done_ns.fetch_max(at.as_nanos() as u64, Ordering::SeqCst);
        self.recorder.lock().expect("recorder lock").record(class, at, done - intended, completion);
    }
}

enum Admit {
    Warmup,
    Measured,
    Stop,
}

fn completion_of(r: &Result<Result<Outcome, TargetError>, tokio::time::error::Elapsed>) -> (Completion, bool) {
    match r {
        Ok(Ok(Outcome::Ok)) => (Completion::Ok, false),
        Ok(Ok(Outcome::Rejected(_))) => (Completion::Rejected, false),
        Ok(Ok(Outcome::Ambivalent(_))) => (Completion::Ambivalent, false),
        Ok(Ok(Outcome::Error(_))) => (Completion::Error, false),
        // The connection is broken or in an unknown state: reopen it.
        Ok(Err(_)) | Err(_) => (Completion::Error, true),
    }
}

/// Connect until it works or the run ends; `None` if the run ended first.
async fn reconnect<T, F, Fut>(connect: &F, client: usize, shared: &Shared) -> Option<T>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<T, TargetError>>,
{
    loop {
        if shared.finished() {
            return None;
        }
        match connect(client).await {
            Ok(t) => return Some(t),
            Err(e) => {
                tracing::warn!(client, "reconnect failed: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Run `workload` against the target that `connect(i)` opens for client `i`.
///
/// All connections are opened before the clock starts; a failure there aborts the run.
pub async fn run<T, F, Fut>(connect: F, workload: Workload, cfg: &RunConfig, stop: Stop) -> anyhow::Result<RunResult>
where
    T: Target + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, TargetError>> + Send + 'static,
{
    anyhow::ensure!(cfg.clients >= 1, "at least one client is needed");
    anyhow::ensure!(!cfg.interval.is_zero(), "the timeline interval must be positive");
    let mut targets = Vec::with_capacity(cfg.clients);
    for i in 0..cfg.clients {
        targets.push(connect(i).await?);
    }
    let t0 = Instant::now();
    let measure_start = t0 + cfg.warmup;
    if let Some(slot) = &cfg.start_slot {
        let _ = slot.set(measure_start);
    }
    let (measure_end, op_limit) = match cfg.bound {
        RunBound::Duration(d) => (Some(measure_start + d), None),
        RunBound::Ops(n) => (None, Some(n)),
    };
    let shared = Arc::new(Shared {
        workload: Mutex::new(workload),
        recorder: Mutex::new(Recorder::new(cfg.interval)),
        measure_start,
        measure_end,
        op_limit,
        measured: AtomicU64::new(0),
        last_done_ns: AtomicU64::new(0),
        done: AtomicBool::new(false),
        stop: stop.clone(),
        inflight: AtomicUsize::new(0),
        error_reasons: Mutex::new(BTreeMap::new()),
    });
    let connect = Arc::new(connect);
    let progress = cfg.progress.clone().map(|label| tokio::spawn(progress_loop(label, shared.clone(), cfg.bound)));

    let mut tasks = tokio::task::JoinSet::new();
    let mut pacer = None;
    match cfg.mode {
        LoadMode::Closed { think } => {
            for (i, target) in targets.into_iter().enumerate() {
                let pause = Pause { think, backoff: cfg.reject_backoff };
                tasks.spawn(closed_client(i, target, connect.clone(), shared.clone(), pause, cfg.op_timeout));
            }
        }
        LoadMode::Open { rate, max_outstanding } => {
            anyhow::ensure!(rate > 0.0 && rate.is_finite(), "the open-loop rate must be positive");
            anyhow::ensure!(max_outstanding >= 1, "max outstanding must be at least 1");
            let (tx, rx) = mpsc::unbounded_channel();
            let rx = Arc::new(tokio::sync::Mutex::new(rx));
            let outstanding = Arc::new(AtomicUsize::new(0));
            for (i, target) in targets.into_iter().enumerate() {
                tasks.spawn(open_worker(
                    i,
                    target,
                    connect.clone(),
                    shared.clone(),
                    rx.clone(),
                    outstanding.clone(),
                    cfg.op_timeout,
                ));
            }
            let seed = shared.workload.lock().expect("workload lock").spec().seed;
            let s = shared.clone();
            let rate = cfg.rate_control.clone().unwrap_or_else(|| RateControl::new(rate));
            pacer =
                Some(tokio::task::spawn_blocking(move || pace(s, t0, rate, max_outstanding, seed, tx, outstanding)));
        }
    }

    // Wait for the end of the window (or the op count, or a stop), then for the stragglers.
    while !shared.finished() && !tasks.is_empty() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            Some(r) = tasks.join_next() => r?,
        }
    }
    shared.done.store(true, Ordering::SeqCst);
    if let Some(p) = pacer {
        p.await?;
    }
    let grace_end = tokio::time::Instant::now() + cfg.grace;
    while !tasks.is_empty() {
        match tokio::time::timeout_at(grace_end, tasks.join_next()).await {
            Ok(Some(r)) => r?,
            Ok(None) => break,
            Err(_) => break,
        }
    }
    tasks.abort_all();
    if let Some(p) = progress {
        p.abort();
        eprintln!();
    }
    let interrupted = stop.raised();
    let elapsed = match (measure_end, interrupted) {
        (Some(end), false) => end - measure_start,
        _ => Duration::from_nanos(shared.last_done_ns.load(Ordering::SeqCst)).max(Duration::from_nanos(1)),
    };
    let unfinished = shared.inflight.load(Ordering::SeqCst);
    let mut recorder = shared.recorder.lock().expect("recorder lock").clone();
    if unfinished > 0 {
        tracing::warn!("{unfinished} operations had not finished {:?} after the end; counted as errors", cfg.grace);
        let at = elapsed.saturating_sub(Duration::from_nanos(1));
        shared.note_errors(format!("no answer {:?} after the end of the run", cfg.grace), unfinished as u64);
        for _ in 0..unfinished {
            recorder.record(OpClass::Read, at, Duration::ZERO, Completion::Error);
        }
    }
    recorder.extend_to(elapsed);
    let summary = recorder.summary(elapsed);
    let error_reasons =
        std::mem::take(&mut *shared.error_reasons.lock().expect("error reasons lock")).into_iter().collect();
    Ok(RunResult { recorder, elapsed, summary, interrupted, measure_start, error_reasons })
}

/// A closed-loop client's pauses: after every answer, and after a rejection.
#[derive(Clone, Copy, Debug)]
struct Pause {
    think: Duration,
    backoff: Option<(Duration, Duration)>,
}

impl Pause {
    /// How long to wait before the next request after `completion`.
    fn after(&self, completion: Completion, rng: &mut ChaCha8Rng) -> Duration {
        match (completion, self.backoff) {
            (Completion::Rejected | Completion::Ambivalent, Some((lo, hi))) => {
                let extra = if hi > lo { (hi - lo).mul_f64(rand::Rng::gen::<f64>(rng)) } else { Duration::ZERO };
                self.think + lo + extra
            }
            _ => self.think,
        }
    }
}

async fn closed_client<T, F, Fut>(
    id: usize,
    target: T,
    connect: Arc<F>,
    shared: Arc<Shared>,
    pause: Pause,
    op_timeout: Duration,
) where
    T: Target,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<T, TargetError>>,
{
    // Back-off draws: one stream per client, independent of the operation stream.
    let mut rng = ChaCha8Rng::seed_from_u64(0x6261_636b_6f66_6600 ^ id as u64);
    let mut target = Some(target);
    while !shared.finished() {
        let Some(t) = target.as_mut() else {
            target = reconnect(&*connect, id, &shared).await;
            continue;
        };
        let op: BenchOp = shared.workload.lock().expect("workload lock").next_op();
        let start = Instant::now();
        let measured = match shared.admit(start) {
            Admit::Stop => break,
            Admit::Warmup => false,
            Admit::Measured => true,
        };
        if measured {
            shared.inflight.fetch_add(1, Ordering::SeqCst);
        }
        let r = tokio::time::timeout(op_timeout, t.execute(&op)).await;
        let (completion, broken) = completion_of(&r);
        if measured {
            if let Some(why) = error_reason(&r, op_timeout) {
                shared.note_error(why);
            }
            shared.record(op.class(), start, Instant::now(), completion);
            shared.inflight.fetch_sub(1, Ordering::SeqCst);
        }
        if broken {
            target = None;
        }
        let wait = pause.after(completion, &mut rng);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// One arrival: when it was due, whether it counts, and the operation.
struct Job {
    intended: Instant,
    measured: bool,
    op: BenchOp,
}

/// The arrival process (runs on its own thread): Poisson arrivals from `t0`, each handed to
/// the workers or dropped if `max_outstanding` are already queued or in flight.
fn pace(
    shared: Arc<Shared>,
    t0: Instant,
    rate: RateControl,
    max_outstanding: usize,
    seed: u64,
    tx: mpsc::UnboundedSender<Job>,
    outstanding: Arc<AtomicUsize>,
) {
    // Its own stream, so the operation stream does not depend on the arrival times.
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6172_7269_7661_6c73);
    let gap = Exp::new(1.0).expect("constant");
    let mut next = t0;
    loop {
        next += Duration::from_secs_f64(gap.sample(&mut rng) / rate.get());
        // Sleep until the arrival, in slices so that a stop is noticed.
        loop {
            if shared.finished() {
                return;
            }
            let now = Instant::now();
            if now >= next {
                break;
            }
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
        }
        let measured = match shared.admit(next) {
            Admit::Stop => return,
            Admit::Warmup => false,
            Admit::Measured => true,
        };
        let op = shared.workload.lock().expect("workload lock").next_op();
        if outstanding.load(Ordering::SeqCst) >= max_outstanding {
            if measured {
                let at = next.saturating_duration_since(shared.measure_start);
                shared.recorder.lock().expect("recorder lock").record_drop(at);
            }
            continue;
        }
        outstanding.fetch_add(1, Ordering::SeqCst);
        if measured {
            shared.inflight.fetch_add(1, Ordering::SeqCst);
        }
        if tx.send(Job { intended: next, measured, op }).is_err() {
            return; // every worker is gone
        }
    }
}

async fn open_worker<T, F, Fut>(
    id: usize,
    target: T,
    connect: Arc<F>,
    shared: Arc<Shared>,
    rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Job>>>,
    outstanding: Arc<AtomicUsize>,
    op_timeout: Duration,
) where
    T: Target,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<T, TargetError>>,
{
    let mut target = Some(target);
    loop {
        if target.is_none() {
            target = reconnect(&*connect, id, &shared).await;
            if target.is_none() {
                return;
            }
        }
        let t = target.as_mut().expect("connected above");
        let Some(job) = rx.lock().await.recv().await else { return };
        let r = tokio::time::timeout(op_timeout, t.execute(&job.op)).await;
        let (completion, broken) = completion_of(&r);
        if job.measured {
            if let Some(why) = error_reason(&r, op_timeout) {
                shared.note_error(why);
            }
            shared.record(job.op.class(), job.intended, Instant::now(), completion);
            shared.inflight.fetch_sub(1, Ordering::SeqCst);
        }
        outstanding.fetch_sub(1, Ordering::SeqCst);
        if broken {
            target = None;
        }
    }
}

/// Once a second: time, throughput and p99 of the last full interval, errors so far.
async fn progress_loop(label: String, shared: Arc<Shared>, bound: RunBound) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let now = Instant::now();
        let line = if now < shared.measure_start {
            format!("[{label}] warming up, {:.0} s left", (shared.measure_start - now).as_secs_f64())
        } else {
            let t = (now - shared.measure_start).as_secs_f64();
            let goal = match bound {
                RunBound::Duration(d) => format!("{t:.0}/{:.0} s", d.as_secs_f64()),
                RunBound::Ops(n) => format!("{}/{n} ops", shared.measured.load(Ordering::SeqCst).min(n)),
            };
            let rec = shared.recorder.lock().expect("recorder lock");
            let all = rec.overall();
            let last = rec.timeline_rows().into_iter().rev().nth(1);
            let (tput, p99) = last.map_or((0.0, 0.0), |r| {
                let a = r.classes.last().expect("all class");
                (a.throughput, a.p99_ms)
            });
            format!(
                "[{label}] {goal}  {tput:.0} ops/s  p99 {p99:.2} ms  ok {} rejected {} ambivalent {} errors {} dropped {}",
                all.ok(),
                all.rejected,
                all.ambivalent,
                all.errors,
                rec.dropped
            )
        };
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{line}");
        let _ = err.flush();
    }
}

/// Load `records` records (YCSB's load phase) through `clients` connections, unmeasured.
/// Returns how many inserts failed.
pub async fn load<T, F, Fut>(connect: F, mut workload: Workload, records: u64, clients: usize) -> anyhow::Result<u64>
where
    T: Target + 'static,
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, TargetError>> + Send + 'static,
{
    let ops: Vec<BenchOp> = (0..records).map(|n| workload.load_op(n)).collect();
    let ops = Arc::new(ops);
    let next = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..clients.max(1) {
        let mut target = connect(i).await?;
        let (ops, next, failed) = (ops.clone(), next.clone(), failed.clone());
        tasks.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                let Some(op) = ops.get(n as usize) else { return Ok::<_, TargetError>(()) };
                match tokio::time::timeout(Duration::from_secs(30), target.execute(op)).await {
                    Ok(Ok(Outcome::Ok)) => {}
                    Ok(Ok(_)) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(_) => return Err(TargetError::Transport("a load insert took over 30 s".into())),
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok(failed.load(Ordering::SeqCst))
}

#[cfg(test)]
mod tests;
