//! YCSB core workloads A–F, their key choosers and value sizes.
//!
//! The definitions follow YCSB's `CoreWorkload` and its `workloads/workload[a-f]` files, so
//! that numbers measured here are comparable with the papers that report YCSB:
//!
//! | workload | mix | request distribution |
//! |---|---|---|
//! | A | 50% read, 50% update | zipfian |
//! | B | 95% read, 5% update | zipfian |
//! | C | 100% read | zipfian |
//! | D | 95% read, 5% insert | latest |
//! | E | 95% scan, 5% insert (scan length uniform in 1..=100) | zipfian |
//! | F | 50% read, 50% read-modify-write | zipfian |
//!
//! Keys are YCSB's: `"user"` followed by the FNV-64 hash of the record number in decimal,
//! zero-padded to the key size (YCSB's `insertorder=hashed`), so consecutive record numbers are
//! scattered over the key space and a range scan starting at a key reads unrelated records.
//!
//! The whole operation stream is a deterministic function of the seed: one [`Workload`]
//! generates every operation of a run (drivers share it), so two runs with the same seed issue
//! the same operations in the same order.

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use serde::Serialize;
use std::fmt;

/// One operation the load generator issues, independent of the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BenchOp {
    Read {
        key: Bytes,
    },
    Update {
        key: Bytes,
        value: Bytes,
    },
    /// A new record (YCSB insert): `key` did not exist before this run's inserts.
    Insert {
        key: Bytes,
        value: Bytes,
    },
    /// `count` records in key order starting at `start` (inclusive). `record` is the record
    /// number of `start`, for targets that emulate scans by record number (Redis).
    Scan {
        start: Bytes,
        record: u64,
        count: u32,
    },
    /// Read `key`, then write `value` to it (two round trips, measured as one operation).
    ReadModifyWrite {
        key: Bytes,
        value: Bytes,
    },
}

impl BenchOp {
    /// The statistics class this operation is counted under.
    pub fn class(&self) -> OpClass {
        match self {
            BenchOp::Read { .. } => OpClass::Read,
            BenchOp::Update { .. } | BenchOp::Insert { .. } => OpClass::Write,
            BenchOp::Scan { .. } => OpClass::Scan,
            BenchOp::ReadModifyWrite { .. } => OpClass::Rmw,
        }
    }
}

/// Statistics classes: latency is recorded per class because their costs differ by orders of
/// magnitude (a scan of 100 records vs. a point read) and a merged histogram would hide that.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OpClass {
    Read,
    /// Updates and inserts.
    Write,
    Scan,
    Rmw,
}

impl OpClass {
    pub const ALL: [OpClass; 4] = [OpClass::Read, OpClass::Write, OpClass::Scan, OpClass::Rmw];

    pub fn name(self) -> &'static str {
        match self {
            OpClass::Read => "read",
            OpClass::Write => "write",
            OpClass::Scan => "scan",
            OpClass::Rmw => "rmw",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for OpClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An invalid workload parameter; the message says which and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError(msg.into()))
}

/// Operation proportions (they need not sum to 1: they are normalized).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mix {
    pub read: f64,
    pub update: f64,
    pub insert: f64,
    pub scan: f64,
    pub rmw: f64,
}

impl Mix {
    fn total(&self) -> f64 {
        self.read + self.update + self.insert + self.scan + self.rmw
    }

    /// Parse `read=0.5,update=0.5` (keys: read, update, insert, scan, rmw; missing = 0).
    pub fn parse(s: &str) -> Result<Mix, SpecError> {
        let mut m = Mix { read: 0.0, update: 0.0, insert: 0.0, scan: 0.0, rmw: 0.0 };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                return err(format!("mix entry `{part}`: expected NAME=PROPORTION, e.g. read=0.95"));
            };
            let v: f64 =
                v.trim().parse().map_err(|_| SpecError(format!("mix entry `{part}`: `{v}` is not a number")))?;
            if !(v.is_finite() && v >= 0.0) {
                return err(format!("mix entry `{part}`: proportion must be >= 0"));
            }
            match k.trim() {
                "read" => m.read = v,
                "update" => m.update = v,
                "insert" => m.insert = v,
                "scan" => m.scan = v,
                "rmw" | "readmodifywrite" => m.rmw = v,
                other => {
                    return err(format!(
                        "mix entry `{part}`: unknown operation `{other}` (read, update, insert, scan, rmw)"
                    ))
                }
            }
        }
        if m.total() <= 0.0 {
            return err(format!("mix `{s}`: proportions sum to 0"));
        }
        Ok(m)
    }
}

/// How keys of reads, updates, scans and RMWs are chosen among the existing records.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum KeyDist {
    Uniform,
    /// YCSB's scrambled zipfian: zipfian ranks over the record count, hashed to record numbers
    /// so the hot records are spread over the key space.
    Zipfian {
        theta: f64,
    },
    /// YCSB's skewed-latest: zipfian over recency, the most recent insert is the hottest.
    Latest {
        theta: f64,
    },
}

impl KeyDist {
    /// Parse `uniform`, `zipfian`, `zipfian:0.8`, `latest`, `latest:0.99`.
    pub fn parse(s: &str) -> Result<KeyDist, SpecError> {
        let (name, theta) = match s.split_once(':') {
            Some((n, t)) => {
                let t: f64 =
                    t.parse().map_err(|_| SpecError(format!("distribution `{s}`: theta `{t}` is not a number")))?;
                (n, Some(t))
            }
            None => (s, None),
        };
        if let Some(t) = theta {
            if !(t > 0.0 && t < 1.0) {
                return err(format!("distribution `{s}`: theta must be in (0, 1) (YCSB's generator needs theta < 1)"));
            }
        }
        match name {
            "uniform" if theta.is_none() => Ok(KeyDist::Uniform),
            "uniform" => err("distribution `uniform` takes no parameter"),
            "zipfian" => Ok(KeyDist::Zipfian { theta: theta.unwrap_or(ZIPFIAN_CONSTANT) }),
            "latest" => Ok(KeyDist::Latest { theta: theta.unwrap_or(ZIPFIAN_CONSTANT) }),
            other => err(format!("unknown key distribution `{other}` (uniform, zipfian[:THETA], latest[:THETA])")),
        }
    }
}

/// Value sizes in bytes.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ValueSize {
    Fixed {
        bytes: usize,
    },
    /// Normal with the given mean and standard deviation (Crossword used sd = 10% of the
    /// mean), rounded and clamped to at least 1 byte.
    Normal {
        mean: f64,
        sd: f64,
    },
    /// Discrete mix of sizes with probabilities, e.g. small and huge values.
    Mix {
        choices: Vec<(usize, f64)>,
    },
}

impl ValueSize {
    /// Parse `500`, `fixed:500`, `normal:500` (sd 10%), `normal:500,20`,
    /// `mix:8@0.5,131072@0.5`.
    pub fn parse(s: &str) -> Result<ValueSize, SpecError> {
        let size = |t: &str| -> Result<usize, SpecError> {
            t.trim().parse::<usize>().map_err(|_| SpecError(format!("value size `{s}`: `{t}` is not a byte count")))
        };
        let (kind, rest) = s.split_once(':').unwrap_or(("fixed", s));
        match kind {
            "fixed" => {
                let bytes = size(rest)?;
                Ok(ValueSize::Fixed { bytes })
            }
            "normal" => {
                let mut parts = rest.split(',');
                let mean: f64 = parts
                    .next()
                    .unwrap_or("")
                    .trim()
                    .parse()
                    .map_err(|_| SpecError(format!("value size `{s}`: mean is not a number")))?;
                let sd = match parts.next() {
                    Some(t) => t
                        .trim()
                        .parse::<f64>()
                        .map_err(|_| SpecError(format!("value size `{s}`: sd `{t}` is not a number")))?,
                    None => mean * 0.1,
                };
                if parts.next().is_some() {
                    return err(format!("value size `{s}`: expected normal:MEAN or normal:MEAN,SD"));
                }
                if !(mean.is_finite() && mean >= 1.0 && sd.is_finite() && sd >= 0.0) {
                    return err(format!("value size `{s}`: need mean >= 1 and sd >= 0"));
                }
                Ok(ValueSize::Normal { mean, sd })
            }
            "mix" => {
                let mut choices = Vec::new();
                for part in rest.split(',') {
                    let Some((b, p)) = part.split_once('@') else {
                        return err(format!("value size `{s}`: mix entry `{part}` should be BYTES@PROBABILITY"));
                    };
                    let p: f64 = p
                        .trim()
                        .parse()
                        .map_err(|_| SpecError(format!("value size `{s}`: `{p}` is not a probability")))?;
                    if !(p.is_finite() && p >= 0.0) {
                        return err(format!("value size `{s}`: probability `{p}` must be >= 0"));
                    }
                    choices.push((size(b)?, p));
                }
                let total: f64 = choices.iter().map(|c| c.1).sum();
                if total <= 0.0 {
                    return err(format!("value size `{s}`: probabilities sum to 0"));
                }
                for c in &mut choices {
                    c.1 /= total;
                }
                Ok(ValueSize::Mix { choices })
            }
            other => err(format!("unknown value size kind `{other}` (fixed:N, normal:MEAN[,SD], mix:N@P,...)")),
        }
    }

    /// The largest size this can produce (for sizing the shared value buffer).
    fn max(&self) -> usize {
        match self {
            ValueSize::Fixed { bytes } => *bytes,
            ValueSize::Normal { mean, sd } => (mean + 8.0 * sd).ceil() as usize,
            ValueSize::Mix { choices } => choices.iter().map(|c| c.0).max().unwrap_or(0),
        }
    }
}

/// A complete workload description.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkloadSpec {
    /// Preset letter it came from (for labels), or `custom`.
    pub name: String,
    pub mix: Mix,
    pub key_dist: KeyDist,
    /// Records loaded before the run (YCSB `recordcount`).
    pub record_count: u64,
    /// Key length in bytes, `"user"` included.
    pub key_size: usize,
    pub value_size: ValueSize,
    /// Scan length is uniform in `1..=max_scan_len` (YCSB `maxscanlength`).
    pub max_scan_len: u32,
    /// Percentage (0–100) of updates and RMWs that go to one hot key, as in EPaxos'
    /// evaluation: they all conflict with each other.
    pub conflict_pct: f64,
    pub seed: u64,
}

/// YCSB's default zipfian constant.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

impl WorkloadSpec {
    /// The YCSB core workload `letter` (a–f) with this crate's defaults for the rest:
    /// 1000 records, 23-byte keys, 500-byte values (HoliPaxos' sizes), no conflicts, seed 1.
    pub fn preset(letter: &str) -> Result<WorkloadSpec, SpecError> {
        let z = KeyDist::Zipfian { theta: ZIPFIAN_CONSTANT };
        let m = |read, update, insert, scan, rmw| Mix { read, update, insert, scan, rmw };
        let (mix, key_dist) = match letter.to_ascii_lowercase().as_str() {
            "a" => (m(0.5, 0.5, 0.0, 0.0, 0.0), z),
            "b" => (m(0.95, 0.05, 0.0, 0.0, 0.0), z),
            "c" => (m(1.0, 0.0, 0.0, 0.0, 0.0), z),
            "d" => (m(0.95, 0.0, 0.05, 0.0, 0.0), KeyDist::Latest { theta: ZIPFIAN_CONSTANT }),
            "e" => (m(0.0, 0.0, 0.05, 0.95, 0.0), z),
            "f" => (m(0.5, 0.0, 0.0, 0.0, 0.5), z),
            other => return err(format!("unknown YCSB workload `{other}` (a, b, c, d, e, f)")),
        };
        Ok(WorkloadSpec {
            name: letter.to_ascii_uppercase(),
            mix,
            key_dist,
            record_count: 1000,
            key_size: 23,
            value_size: ValueSize::Fixed { bytes: 500 },
            max_scan_len: 100,
            conflict_pct: 0.0,
            seed: 1,
        })
    }

    /// Check the combination of parameters.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.record_count == 0 {
            return err("record count must be at least 1");
        }
        if self.key_size < MIN_KEY_SIZE {
            return err(format!(
                "key size {} is too small: keys are \"user\" + at least 4 digits ({MIN_KEY_SIZE} bytes)",
                self.key_size
            ));
        }
        if self.max_scan_len == 0 && self.mix.scan > 0.0 {
            return err("max scan length must be at least 1 when the mix has scans");
        }
        if !(0.0..=100.0).contains(&self.conflict_pct) {
            return err(format!("conflict percentage {} is not in 0..=100", self.conflict_pct));
        }
        if self.value_size.max() > MAX_VALUE_SIZE {
            return err(format!(
                "value sizes up to {} bytes exceed the generator's limit of {MAX_VALUE_SIZE}",
                self.value_size.max()
            ));
        }
        Ok(())
    }
}

const MIN_KEY_SIZE: usize = 8;
const MAX_VALUE_SIZE: usize = 64 << 20;

/// FNV-1a 64 over the 8 little-endian bytes of `v`, as YCSB's `Utils.fnvhash64` (which then
/// takes the absolute value; we clear the sign bit to the same effect).
pub fn fnv64(v: u64) -> u64 {
    const OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
    const PRIME: u64 = 1_099_511_628_211;
    let mut h = OFFSET;
    let mut v = v;
    for _ in 0..8 {
        let octet = v & 0xff;
        v >>= 8;
        h ^= octet;
        h = h.wrapping_mul(PRIME);
    }
    h & (i64::MAX as u64)
}

/// YCSB's key for record `n`: `"user"` + decimal FNV hash, zero-padded to `key_size`. When
/// the key is shorter than 4 + 19 digits the hash is reduced modulo the digit space, which can
/// map two records to one key (harmless for load generation, noted for small key sizes).
pub fn key_for(n: u64, key_size: usize) -> Bytes {
    let digits = key_size.saturating_sub(4).max(1);
    let mut h = fnv64(n);
    if digits < 19 {
        h %= 10u64.pow(digits as u32);
    }
    Bytes::from(format!("user{h:0digits$}"))
}

/// YCSB's `ZipfianGenerator` (Gray et al., "Quickly generating billion-record synthetic
/// databases", SIGMOD 1994): rank 0 is the most popular, P(rank i) ∝ 1/(i+1)^θ.
///
/// The item count may grow (for `latest`); ζ(n) is then extended incrementally as YCSB does.
#[derive(Clone, Debug)]
pub struct Zipfian {
    theta: f64,
    items: u64,
    zetan: f64,
    alpha: f64,
    eta: f64,
    zeta2theta: f64,
}

impl Zipfian {
    pub fn new(items: u64, theta: f64) -> Zipfian {
        assert!(items >= 1 && theta > 0.0 && theta < 1.0, "validated by the caller");
        let zeta2theta = zeta(0, 2, theta, 0.0);
        let zetan = zeta(0, items, theta, 0.0);
        let mut z = Zipfian { theta, items, zetan, alpha: 1.0 / (1.0 - theta), eta: 0.0, zeta2theta };
        z.eta = z.compute_eta();
        z
    }

    fn compute_eta(&self) -> f64 {
        (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2theta / self.zetan)
    }

    pub fn items(&self) -> u64 {
        self.items
    }

    /// Grow to `items` (never shrinks), extending ζ(n) from the old count.
    pub fn grow(&mut self, items: u64) {
        if items > self.items {
            self.zetan = zeta(self.items, items, self.theta, self.zetan);
            self.items = items;
            self.eta = self.compute_eta();
        }
    }

    /// A rank in `0..items`.
    pub fn next(&self, rng: &mut impl Rng) -> u64 {
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.items - 1);
        }
        let r = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.items - 1)
    }
}

/// ζ(n) = Σ_{i=1..n} 1/i^θ, continued from `sum` = ζ(from).
fn zeta(from: u64, to: u64, theta: f64, sum: f64) -> f64 {
    let mut s = sum;
    for i in from..to {
        s += 1.0 / ((i + 1) as f64).powf(theta);
    }
    s
}

/// Chooses record numbers for reads, updates, scans and RMWs.
#[derive(Clone, Debug)]
enum KeyChooser {
    Uniform,
    /// Scrambled: `fnv(rank) % records`, as YCSB's `ScrambledZipfianGenerator`.
    Zipfian(Zipfian),
    /// `last_inserted - zipfian(records)`: recent inserts are hottest.
    Latest(Zipfian),
}

/// A factor on every value length drawn, changeable while a run goes on (a scenario's
/// `value-scale` step: the paper-style "payload size drops from 64 KB to 4 KB" at a given
/// time); 1 by default. Clones share the factor.
#[derive(Clone, Debug)]
pub struct ValueScale(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Default for ValueScale {
    fn default() -> Self {
        ValueScale(std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1f64.to_bits())))
    }
}

impl ValueScale {
    /// Set the factor (positive and finite; values longer than the workload's largest are
    /// cut to it).
    pub fn set(&self, factor: f64) -> Result<(), String> {
        if !(factor > 0.0 && factor.is_finite()) {
            return Err(format!("value scale {factor}: must be a positive number"));
        }
        self.0.store(factor.to_bits(), std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// The operation generator of one run. See the module documentation.
pub struct Workload {
    spec: WorkloadSpec,
    rng: ChaCha8Rng,
    chooser: KeyChooser,
    /// Records that exist (loaded + inserted so far); the next insert gets this number.
    records: u64,
    /// Cumulative proportions: read, update, insert, scan (rmw is the rest).
    cumulative: [f64; 4],
    /// Random bytes that values are sliced from (zero-copy), twice the largest value.
    value_pool: Bytes,
    hot_key: Bytes,
    normal: Option<Normal<f64>>,
    scale: ValueScale,
}

impl Workload {
    pub fn new(spec: WorkloadSpec) -> Result<Workload, SpecError> {
        spec.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
        let chooser = match spec.key_dist {
            KeyDist::Uniform => KeyChooser::Uniform,
            KeyDist::Zipfian { theta } => KeyChooser::Zipfian(Zipfian::new(spec.record_count, theta)),
            KeyDist::Latest { theta } => KeyChooser::Latest(Zipfian::new(spec.record_count, theta)),
        };
        let t = spec.mix.total();
        let m = &spec.mix;
        let cumulative = [
            m.read / t,
            (m.read + m.update) / t,
            (m.read + m.update + m.insert) / t,
            (m.read + m.update + m.insert + m.scan) / t,
        ];
        // Printable ASCII like YCSB's values, so they can be inspected with redis-cli.
        let pool_len = (2 * spec.value_size.max()).max(1 << 16);
        let pool: Vec<u8> = (0..pool_len).map(|_| rng.gen_range(b' '..=b'~')).collect();
        let normal = match spec.value_size {
            ValueSize::Normal { mean, sd } => {
                Some(Normal::new(mean, sd).map_err(|e| SpecError(format!("normal value size: {e}")))?)
            }
            _ => None,
        };
        // Outside the record space: a conflict key is never a loaded record.
        let hot_key = Bytes::from(format!("{:x<width$}", "hotkey", width = spec.key_size));
        Ok(Workload {
            records: spec.record_count,
            spec,
            rng,
            chooser,
            cumulative,
            value_pool: Bytes::from(pool),
            hot_key,
            normal,
            scale: ValueScale::default(),
        })
    }

    /// Scale every value length by `scale` (shared: the caller may change it during the run).
    pub fn with_value_scale(mut self, scale: ValueScale) -> Workload {
        self.scale = scale;
        self
    }

    pub fn spec(&self) -> &WorkloadSpec {
        &self.spec
    }

    /// The key every conflicting write goes to.
    pub fn hot_key(&self) -> &Bytes {
        &self.hot_key
    }

    /// Number of records that exist now (loaded plus inserted).
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The operation that loads record `n` (YCSB's load phase): an insert with a fresh value.
    pub fn load_op(&mut self, n: u64) -> BenchOp {
        BenchOp::Insert { key: key_for(n, self.spec.key_size), value: self.value() }
    }

    /// The next operation of the run.
    pub fn next_op(&mut self) -> BenchOp {
        let u: f64 = self.rng.gen();
        let c = self.cumulative;
        if u < c[0] {
            BenchOp::Read { key: self.existing_key() }
        } else if u < c[1] {
            let key = self.write_key();
            BenchOp::Update { key, value: self.value() }
        } else if u < c[2] {
            let n = self.records;
            self.records += 1;
            BenchOp::Insert { key: key_for(n, self.spec.key_size), value: self.value() }
        } else if u < c[3] {
            let record = self.existing_record();
            let count = self.rng.gen_range(1..=self.spec.max_scan_len);
            BenchOp::Scan { start: key_for(record, self.spec.key_size), record, count }
        } else {
            let key = self.write_key();
            BenchOp::ReadModifyWrite { key, value: self.value() }
        }
    }

    fn write_key(&mut self) -> Bytes {
        if self.spec.conflict_pct > 0.0 && self.rng.gen::<f64>() * 100.0 < self.spec.conflict_pct {
            self.hot_key.clone()
        } else {
            self.existing_key()
        }
    }

    fn existing_key(&mut self) -> Bytes {
        let n = self.existing_record();
        key_for(n, self.spec.key_size)
    }

    /// A record number among those that exist, drawn from the key distribution.
    pub fn existing_record(&mut self) -> u64 {
        let records = self.records;
        match &mut self.chooser {
            KeyChooser::Uniform => self.rng.gen_range(0..records),
            KeyChooser::Zipfian(z) => fnv64(z.next(&mut self.rng)) % z.items(),
            KeyChooser::Latest(z) => {
                z.grow(records);
                records - 1 - z.next(&mut self.rng)
            }
        }
    }

    /// A value of the configured size distribution, sliced from the random pool.
    pub fn value(&mut self) -> Bytes {
        let mut len = self.value_len();
        let factor = self.scale.get();
        if factor != 1.0 {
            len = ((len as f64 * factor).round().max(1.0) as usize).min(self.value_pool.len() / 2);
        }
        let start = self.rng.gen_range(0..=self.value_pool.len() - len);
        self.value_pool.slice(start..start + len)
    }

    /// A value length drawn from the configured distribution.
    pub fn value_len(&mut self) -> usize {
        match &self.spec.value_size {
            ValueSize::Fixed { bytes } => *bytes,
            ValueSize::Normal { .. } => {
                let x = self.normal.as_ref().expect("normal built in new").sample(&mut self.rng);
                (x.round().max(1.0) as usize).min(self.value_pool.len() / 2)
            }
            ValueSize::Mix { choices } => {
                let mut u: f64 = self.rng.gen();
                for &(b, p) in choices {
                    if u < p {
                        return b;
                    }
                    u -= p;
                }
                choices.last().map_or(0, |c| c.0)
            }
        }
    }
}

#[cfg(test)]
mod tests;
