//! CPU quotas through cgroups: the nemesis' `cpu` fault puts a replica in a cgroup of its own
//! with a cpu quota; the supervisor removes a cluster's cgroups when it stops.
//!
//! A leaf module (no cluster or nemesis types): cgroup names derive from the cluster
//! directory, so `synod fault cpu` (one process) and the supervisor (another) agree on them.

use std::path::{Path, PathBuf};
use synod_core::NodeId;

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

/// Put `pid` (replica `id` of the cluster in `cluster_dir`) in the node's cgroup with a quota of
/// `percent` of one CPU, or take it out again (None: `off`). Returns what was done.
pub fn set_cpu_quota(cluster_dir: &Path, id: NodeId, pid: u32, percent: Option<f64>) -> Result<String, String> {
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
    match percent {
        None => {
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
        Some(p) => {
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
    fn cgroup_discovery() {
        // Either a controller is found or the error says why; both are fine, a panic is not.
        match find_cpu_cgroup() {
            Ok(CpuCgroup::V1(p)) | Ok(CpuCgroup::V2(p)) => assert!(p.is_dir(), "{}", p.display()),
            Err(e) => assert!(e.contains("no usable cgroup cpu controller"), "{e}"),
        }
    }
}
