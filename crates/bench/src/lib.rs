//! synod's benchmark harness (`synod bench`).
//!
//! One load generator drives synod and real peers (redis-server, etcd) alike, so that
//! comparisons run side by side in one invocation under the same offered load:
//!
//! - [`workload`]: YCSB core workloads A–F, uniform / scrambled-zipfian / latest key choosers,
//!   value size distributions, EPaxos-style conflict rate; seeded and reproducible.
//! - [`target`]: one connection per simulated client to synod, Redis or etcd.
//! - [`driver`]: closed-loop and open-loop (Poisson, coordinated-omission-free) drivers.
//! - [`stats`]: HDR histograms per operation class and a per-interval timeline.
//! - [`report`] and [`plot`]: CSV, JSON and PNG output.
//! - [`resources`]: replica memory (RSS) and log/snapshot gauges sampled over a run.
//! - [`sites`]: client sites for wide-area runs (per-site placement, emulated client-to-replica
//!   distance, per-site latency).
//! - [`cli`]: the `synod bench` arguments and the sweep / comparison loop.

pub mod cli;
pub mod driver;
pub mod plot;
pub mod report;
pub mod resources;
pub mod sites;
pub mod stats;
pub mod target;
pub mod workload;
