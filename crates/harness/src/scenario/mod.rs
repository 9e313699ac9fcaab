//! Fault scenarios (`synod scenario run FILE`): start a cluster, drive a workload, fire faults at given times,
//! and write the results (CSV, JSON, PNG timelines with the faults marked, summary.txt).
//!
//! A scenario is a TOML file:
//!
//! ```toml
//! name = "leader-crash"
//! duration = "60s"            # measured time (after the workload's warm-up)
//! window = "10s"              # tumbling windows (HoliPaxos Fig. 9-11 use 10 s)
//! sample = "500ms"            # replica memory / log-length sampling period
//! [cluster]
//! protocols = ["multipaxos", "raft+", "holipaxos[trim=quorum]"]   # run one after another
//! replicas = 3
//! fsync = "batch"             # in_memory, fsync, data_dir, log_level, [cluster.params]
//! cpu_quota = 40              # optional: every replica capped at 40% of one CPU from its
//!                             # start (cgroup v1), e.g. to give each its own share of a
//!                             # small machine; faults' `cpu` quotas then set it lower
//! slow = { node = 3, cpu_quota = 20 }  # optional: one slow replica from its start
//! [sites]                     # optional, wide-area runs (EPaxos Fig. 4): one site per
//! names = ["CA", "VA", "EU"]  # replica, symmetric RTTs; replica links get half the RTT
//! rtt_ms = [[0, 72, 151], [72, 0, 80], [151, 80, 0]]   # each way, clients reach other
//! clients_per_site = 10       # sites' replicas through delaying relays, latency is
//! leader_site = "CA"          # reported per site (sites.csv); leader-based protocols'
//!                             # leader is placed at leader_site
//! [workload]                  # any `synod bench` option, named as on its command line
//! workload = "a"
//! clients = 16
//! [load]                      # optional: open loop at a rate, found by calibration
//! calibrate = "20s"           # closed-loop run before measurement: max throughput
//! rate = "60%"                # of the calibrated max, or ops/s (rate = 4000)
//! [[schedule]]
//! at = "20s"
//! action = "kill leader"      # any `synod fault` action, or a scenario action (below)
//! ```
//!
//! **Variants.** Each entry of `protocols` is `[LABEL:]PROTOCOL[KEY=VALUE,...]`: a
//! registered protocol with its own parameters applied on top of `[cluster.params]` through
//! [`ProtocolParams::set`](synod_core::ProtocolParams::set) (fields such as `snapshot_every=0`, anything else a protocol
//! option such as `trim=quorum`), checked by building the protocol once, so a misspelled
//! option fails at parse time. The label (default: the text as written) names the variant in
//! plots, `normalized.csv` and summaries; its folder is the label with `+` spelled `-plus`
//! and other punctuation turned into `-` (`holipaxos[trim=quorum]` → `holipaxos-trim-quorum`).
//!
//! **Scenario actions** besides the `synod fault` ones (HoliPaxos Fig. 10 and 11):
//! - `rate 60%` / `rate 4000`: change the open-loop arrival rate (percent of the calibrated
//!   maximum, or operations per second); needs an open-loop run (`[load] rate`).
//! - `cpu leader --ramp 100:40 --over 600s [--every 60s]`: a CPU quota ramp, expanded at
//!   parse time into `cpu N --quota PCT` steps every `--every` (default `--over`/10) from
//!   100% to 40% of one CPU, on the node resolved once at the ramp's first step (the leader
//!   *then*: a later leader change does not move the ramp). Each step goes through
//!   [`crate::nemesis::execute`]; only the first is drawn as a marker.
//! - `cpu all --quota PCT|off`: the quota on every replica, as one event.
//! - `isolate follower|leader|N`: cut every link of one replica both ways (a `partition
//!   --links` resolved when it fires; `follower` is the first replica after the leader in id
//!   order); `heal` ends it.
//!
//! The cluster is the one `synod local` runs ([`crate::cluster`], on free ports), this
//! process supervising it; the workload is `synod bench`'s (its argument struct parses the
//! `[workload]` table, so every option and check is the same); the faults are
//! [`crate::nemesis::execute`] on the cluster's `cluster.toml`, exactly as `synod fault` does it.
//! Fault times count from the start of measurement (the timeline's zero). While the run
//! goes on a sampler reads every replica's resident memory (`/proc/<pid>/status`, pids from
//! `cluster.toml`, so restarted and added nodes are followed) and its `/metrics` log and
//! snapshot gauges.
//!
//! Modules, in the order a run uses them: `spec` parses and checks a file into a
//! [`Scenario`] (nothing runs), its protocols through `variant` ([`Variant`]); `run`
//! ([`run_scenario`]) starts the cluster, drives the workload and fires the schedule;
//! `analysis` holds the pure computations on what was measured (windows, dips, leader
//! changes); `report` writes the files and the summaries.

mod analysis;
mod report;
mod run;
mod spec;
mod variant;

pub use analysis::{analyze, leader_changes, offered, params_changed, windows, Event, WindowRow};
pub use run::run_scenario;
pub use spec::{Load, RateSpec, Scenario, Sites, Step, StepKind, Who};
pub use variant::{split_variants, Variant};
