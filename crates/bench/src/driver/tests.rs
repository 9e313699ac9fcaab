//! Drivers against an in-process target whose latency and failures are scripted.

use super::*;
use crate::workload::WorkloadSpec;

/// What the scripted target does with the n-th operation (counted over all connections).
#[derive(Clone, Copy, Debug)]
enum Act {
    Answer(Duration),
    /// The connection breaks.
    Break,
    /// Never answers.
    Hang,
}

type Script = Arc<dyn Fn(u64) -> Act + Send + Sync>;

struct Scripted {
    executed: Arc<AtomicU64>,
    script: Script,
}

impl Target for Scripted {
    async fn execute(&mut self, _op: &BenchOp) -> Result<Outcome, TargetError> {
        let n = self.executed.fetch_add(1, Ordering::SeqCst);
        match (self.script)(n) {
            Act::Answer(d) if d.is_zero() => tokio::task::yield_now().await,
            Act::Answer(d) => tokio::time::sleep(d).await,
            Act::Break => return Err(TargetError::Transport("scripted break".into())),
            Act::Hang => std::future::pending::<()>().await,
        }
        Ok(Outcome::Ok)
    }
}

struct Fixture {
    executed: Arc<AtomicU64>,
    connects: Arc<AtomicU64>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture { executed: Arc::default(), connects: Arc::default() }
    }

    fn connect(
        &self,
        script: impl Fn(u64) -> Act + Send + Sync + 'static,
    ) -> impl Fn(usize) -> std::future::Ready<Result<Scripted, TargetError>> + Send + Sync + 'static {
        let script: Script = Arc::new(script);
        let (executed, connects) = (self.executed.clone(), self.connects.clone());
        move |_| {
            connects.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok(Scripted { executed: executed.clone(), script: script.clone() }))
        }
    }
}

fn workload(letter: &str) -> Workload {
    Workload::new(WorkloadSpec::preset(letter).unwrap()).unwrap()
}

fn open(rate: f64, clients: usize, max_outstanding: usize, d: Duration) -> RunConfig {
    RunConfig { mode: LoadMode::Open { rate, max_outstanding }, ..RunConfig::closed(clients, RunBound::Duration(d)) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_stops_at_the_op_count_with_the_workload_mix() {
    let f = Fixture::new();
    let cfg = RunConfig::closed(4, RunBound::Ops(4000));
    let r = run(f.connect(|_| Act::Answer(Duration::ZERO)), workload("a"), &cfg, Stop::new()).await.unwrap();
    assert_eq!(r.summary.all().ok, 4000);
    let reads = r.summary.class("read").unwrap().ok as f64;
    assert!((reads / 4000.0 - 0.5).abs() < 0.05, "read share {}", reads / 4000.0);
    assert_eq!(r.summary.all().errors, 0);
    assert!(!r.interrupted);
    assert_eq!(f.connects.load(Ordering::SeqCst), 4, "one connection per client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_throughput_follows_latency_and_concurrency() {
    let f = Fixture::new();
    let mut cfg = RunConfig::closed(4, RunBound::Duration(Duration::from_millis(1000)));
    cfg.interval = Duration::from_millis(250);
    let r = run(f.connect(|_| Act::Answer(Duration::from_millis(10))), workload("c"), &cfg, Stop::new()).await.unwrap();
    let all = r.summary.all();
    // 4 clients / ~10-11 ms per op (the timer rounds up to the millisecond) ≈ 360-400 ops/s.
    assert!(all.throughput > 250.0 && all.throughput <= 410.0, "throughput {}", all.throughput);
    assert!(all.p50_ms >= 10.0 && all.p50_ms < 20.0, "p50 {}", all.p50_ms);
    assert_eq!(r.recorder.timeline.len(), 4, "1 s at 250 ms per interval");
    assert!((r.summary.elapsed_s - 1.0).abs() < 1e-9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warmup_operations_are_not_measured() {
    let f = Fixture::new();
    let mut cfg = RunConfig::closed(1, RunBound::Duration(Duration::from_millis(300)));
    cfg.warmup = Duration::from_millis(300);
    let r = run(f.connect(|_| Act::Answer(Duration::from_millis(2))), workload("c"), &cfg, Stop::new()).await.unwrap();
    let executed = f.executed.load(Ordering::SeqCst);
    let measured = r.summary.all().ok;
    assert!(measured > 50, "measured {measured}");
    assert!(executed as f64 > measured as f64 * 1.6, "executed {executed} vs measured {measured}: warm-up counted?");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_offers_the_requested_rate() {
    let f = Fixture::new();
    let cfg = open(2000.0, 4, 1000, Duration::from_secs(1));
    let r = run(f.connect(|_| Act::Answer(Duration::ZERO)), workload("a"), &cfg, Stop::new()).await.unwrap();
    let n = r.summary.all().ok as f64;
    // Poisson with mean 2000: sd ≈ 45.
    assert!((n - 2000.0).abs() < 250.0, "{n} arrivals in 1 s at 2000/s");
    assert_eq!(r.summary.dropped, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_rate_changes_while_running() {
    let f = Fixture::new();
    let mut cfg = open(500.0, 4, 1000, Duration::from_millis(1200));
    cfg.interval = Duration::from_millis(400);
    let control = RateControl::new(500.0);
    cfg.rate_control = Some(control.clone());
    let slot = Arc::new(std::sync::OnceLock::new());
    cfg.start_slot = Some(slot.clone());
    let changer = tokio::spawn(async move {
        while slot.get().is_none() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep_until(tokio::time::Instant::from_std(*slot.get().unwrap() + Duration::from_millis(400)))
            .await;
        control.set(3000.0).unwrap();
        assert!(control.set(0.0).unwrap_err().contains("positive"));
        assert!(control.set(f64::NAN).is_err());
        assert_eq!(control.get(), 3000.0, "a refused rate leaves the rate unchanged");
    });
    let r = run(f.connect(|_| Act::Answer(Duration::ZERO)), workload("a"), &cfg, Stop::new()).await.unwrap();
    changer.await.unwrap();
    let rows = r.recorder.timeline_rows();
    let ok = |i: usize| rows[i].classes.last().unwrap().ok as f64;
    // 0.4 s at 500/s ≈ 200 (sd 14), then 0.4 s at 3000/s ≈ 1200 (sd 35).
    assert!((ok(0) - 200.0).abs() < 80.0, "first interval {}", ok(0));
    assert!((ok(2) - 1200.0).abs() < 250.0, "last interval {}", ok(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_charges_queueing_behind_a_stall() {
    // One connection; the 300th operation stalls 300 ms. At 1000 ops/s about 300 arrivals
    // queue behind it: measured from their intended send times, they are all slow.
    let f = Fixture::new();
    let cfg = open(1000.0, 1, 100_000, Duration::from_millis(1500));
    let script = |n| if n == 300 { Act::Answer(Duration::from_millis(300)) } else { Act::Answer(Duration::ZERO) };
    let r = run(f.connect(script), workload("c"), &cfg, Stop::new()).await.unwrap();
    let hist = &r.recorder.classes[OpClass::Read.index()].hist;
    let slow = hist.count_between(50_000, u64::MAX);
    assert!(slow > 150, "only {slow} operations were charged more than 50 ms");
    assert!(r.summary.all().max_ms >= 290.0, "max {}", r.summary.all().max_ms);
    // A closed-loop measurement of the same target would see a single slow operation.
    let f = Fixture::new();
    let cfg = RunConfig::closed(1, RunBound::Duration(Duration::from_millis(600)));
    let r = run(f.connect(script), workload("c"), &cfg, Stop::new()).await.unwrap();
    let slow = r.recorder.classes[OpClass::Read.index()].hist.count_between(50_000, u64::MAX);
    assert!(slow <= 1, "closed loop hides the queueing: {slow}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_drops_beyond_max_outstanding() {
    let f = Fixture::new();
    // Capacity 1 connection / 20 ms = 50 ops/s, offered 1000 ops/s, at most 5 outstanding.
    let cfg = open(1000.0, 1, 5, Duration::from_secs(1));
    let r = run(f.connect(|_| Act::Answer(Duration::from_millis(20))), workload("c"), &cfg, Stop::new()).await.unwrap();
    assert!(r.summary.dropped > 800, "dropped {}", r.summary.dropped);
    let ok = r.summary.all().ok;
    assert!(ok > 20 && ok < 80, "served {ok}");
    // Bounded queue: latency stays within ~5 services (100 ms) plus slack.
    assert!(r.summary.all().max_ms < 250.0, "max {}", r.summary.all().max_ms);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_connections_are_counted_and_reopened() {
    let f = Fixture::new();
    let cfg = RunConfig::closed(1, RunBound::Ops(100));
    let script = |n| if n == 10 { Act::Break } else { Act::Answer(Duration::ZERO) };
    let r = run(f.connect(script), workload("a"), &cfg, Stop::new()).await.unwrap();
    assert_eq!(r.summary.all().errors, 1);
    assert_eq!(r.summary.all().ok, 99);
    assert_eq!(f.connects.load(Ordering::SeqCst), 2);
    // The run says why its operation failed.
    assert_eq!(r.error_reasons, vec![("connection failed: scripted break".to_string(), 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_operations_time_out_as_errors() {
    let f = Fixture::new();
    let mut cfg = RunConfig::closed(1, RunBound::Ops(20));
    cfg.op_timeout = Duration::from_millis(100);
    let script = |n| if n == 3 { Act::Hang } else { Act::Answer(Duration::ZERO) };
    let r = run(f.connect(script), workload("c"), &cfg, Stop::new()).await.unwrap();
    assert_eq!(r.summary.all().errors, 1);
    assert_eq!(r.summary.all().ok, 19);
    assert_eq!(r.error_reasons, vec![("no answer within the operation timeout (100ms)".to_string(), 1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_reasons_are_bounded() {
    // A target failing every operation with a new reason: a few reasons are kept, the rest
    // are counted together, every error is counted once.
    struct Distinct(u64);
    impl Target for Distinct {
        async fn execute(&mut self, _op: &BenchOp) -> Result<Outcome, TargetError> {
            self.0 += 1;
            Ok(Outcome::Error(format!("failure {}", self.0)))
        }
    }
    let cfg = RunConfig::closed(1, RunBound::Ops(50));
    let r = run(|_| std::future::ready(Ok(Distinct(0))), workload("c"), &cfg, Stop::new()).await.unwrap();
    assert_eq!(r.summary.all().errors, 50);
    assert_eq!(r.error_reasons.len(), MAX_ERROR_REASONS + 1);
    assert_eq!(r.error_reasons.iter().map(|(_, n)| n).sum::<u64>(), 50);
    assert!(r.error_reasons.contains(&("other reasons".to_string(), 50 - MAX_ERROR_REASONS as u64)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_a_run_early_and_keeps_its_measurements() {
    let f = Fixture::new();
    let cfg = RunConfig::closed(2, RunBound::Duration(Duration::from_secs(60)));
    let stop = Stop::new();
    let s = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        s.raise();
    });
    let started = Instant::now();
    let r = run(f.connect(|_| Act::Answer(Duration::from_millis(1))), workload("a"), &cfg, stop).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(r.interrupted);
    assert!(r.summary.all().ok > 50);
    assert!(r.summary.elapsed_s < 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_inserts_every_record_once() {
    let f = Fixture::new();
    let failed = load(f.connect(|_| Act::Answer(Duration::ZERO)), workload("a"), 1000, 4).await.unwrap();
    assert_eq!(failed, 0);
    assert_eq!(f.executed.load(Ordering::SeqCst), 1000);
}

#[test]
fn a_rejected_client_backs_off_in_its_range() {
    let ms = Duration::from_millis;
    let pause = Pause { think: ms(1), backoff: Some((ms(50), ms(100))) };
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    assert_eq!(pause.after(Completion::Ok, &mut rng), ms(1), "no back-off after a success");
    assert_eq!(pause.after(Completion::Error, &mut rng), ms(1), "nor after an error");
    let waits: Vec<Duration> = (0..200)
        .map(|i| pause.after(if i % 2 == 0 { Completion::Rejected } else { Completion::Ambivalent }, &mut rng))
        .collect();
    assert!(waits.iter().all(|w| *w >= ms(51) && *w <= ms(101)), "{waits:?}");
    assert!(waits.iter().any(|w| *w < ms(70)) && waits.iter().any(|w| *w > ms(80)), "spread over the range");
    let none = Pause { think: Duration::ZERO, backoff: None };
    assert_eq!(none.after(Completion::Rejected, &mut rng), Duration::ZERO);
}
