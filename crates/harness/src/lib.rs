//! synod's test harness as a library: what `synod local`, `synod fault` and
//! `synod scenario` do, usable from tests and other tools.
//!
//! Top-down:
//! - [`scenario`]: fault scenarios — a TOML file ([`scenario::Scenario`]) naming a cluster, a
//!   workload and a fault schedule; [`scenario::run_scenario`] runs it and writes CSV, JSON,
//!   PNG and summaries, with the dip/recovery analysis of each fault.
//! - [`nemesis`]: faults on a running cluster ([`nemesis::Action`], applied by
//!   [`nemesis::execute`]): kill/restart, pause/resume, partitions, link delay/loss/bandwidth,
//!   CPU quotas, clock offsets, membership changes.
//! - [`cluster`]: supervision of a cluster of replica processes on this machine
//!   ([`cluster::Cluster`]) and its description file `cluster.toml`
//!   ([`cluster::ClusterFile`]), through which the nemesis finds the replicas.
//! - Leaves shared by the above: [`http`] (the replicas' admin API) and [`cgroup`] (CPU
//!   quotas).
//!
//! Dependencies go one way: scenario → nemesis → cluster → (http, cgroup).
//!
//! The replicas are the synod binary run as `synod server --config nodeN.toml`. Inside the
//! synod binary that is the running executable; any other program sets
//! [`cluster::Spec::server_exe`] (or [`scenario::Scenario::server_exe`]) to the binary's path.

#![warn(missing_docs)]

pub mod cgroup;
pub mod cluster;
pub mod http;
pub mod nemesis;
pub mod scenario;
