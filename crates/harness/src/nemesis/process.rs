//! Process faults: signals to the replicas' pids (checked against `/proc/<pid>/cmdline`
//! first, so a stale `cluster.toml` never signals an unrelated process), and requests to the
//! supervisor (restart, join, retire) through files in the cluster's `control/` directory.

use super::NodeOrAll;
use super::{FaultError, HTTP_TIMEOUT};
use crate::cluster::{ClusterFile, NodeEntry, NodeState};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long `restart` waits for the supervisor to respawn a node and for it to be healthy.
pub(super) const RESTART_TIMEOUT: Duration = Duration::from_secs(30);

/// The pid of node `n` if that process is alive (not a zombie) and really runs its config.
pub(super) fn live_pid(n: &NodeEntry) -> Option<u32> {
    let pid = n.pid?;
    if n.state != NodeState::Running || !process_alive(pid) {
        return None;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmdline = String::from_utf8_lossy(&cmdline);
    cmdline.contains(&*n.config.to_string_lossy()).then_some(pid)
}

/// Whether `pid` exists and has not exited (a zombie has exited, it only waits to be reaped).
pub fn process_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the parenthesised command name, which may itself contain ')'.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z') | Some('X') | None)
}

pub(super) fn send(pid: u32, sig: libc::c_int) -> Result<(), String> {
    // SAFETY: kill(2) with a pid just checked to be the replica's live process.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } == 0 {
        Ok(())
    } else {
        Err(format!("signal to pid {pid} failed: {}", std::io::Error::last_os_error()))
    }
}

/// Write control request `name` for the supervisor and wait until cluster.toml satisfies
/// `done`.
pub(super) fn supervise_request(
    file_path: &Path,
    c: &ClusterFile,
    name: &str,
    done: impl Fn(&ClusterFile) -> bool,
) -> Result<String, FaultError> {
    if !process_alive(c.supervisor_pid) {
        return Err(FaultError::Failed(format!(
            "the supervisor (pid {}) of this cluster is not running: cannot {name}",
            c.supervisor_pid
        )));
    }
    let control = c.control_dir();
    std::fs::create_dir_all(&control)
        .map_err(|e| FaultError::Failed(format!("cannot create {}: {e}", control.display())))?;
    let req = control.join(name);
    std::fs::write(&req, b"").map_err(|e| FaultError::Failed(format!("cannot write {}: {e}", req.display())))?;
    let deadline = Instant::now() + RESTART_TIMEOUT;
    loop {
        if let Ok((_, f)) = ClusterFile::load(file_path) {
            if done(&f) {
                return Ok(format!("supervisor: {name} done"));
            }
        }
        if Instant::now() >= deadline {
            return Err(FaultError::Failed(format!("supervisor did not do {name} within {RESTART_TIMEOUT:?}")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ask the supervisor to start nodes again and wait until they answer `/health`.
pub(super) fn restart(file_path: &Path, c: &ClusterFile, sel: NodeOrAll) -> Result<Vec<String>, FaultError> {
    let targets: Vec<&NodeEntry> = match sel {
        NodeOrAll::Id(id) => {
            let n = c.node(id).map_err(FaultError::Usage)?;
            if let Some(pid) = live_pid(n) {
                return Err(FaultError::Failed(format!("node {id} is running (pid {pid}); kill it first")));
            }
            vec![n]
        }
        NodeOrAll::All => c.nodes.iter().filter(|n| live_pid(n).is_none()).collect(),
    };
    if targets.is_empty() {
        return Ok(vec!["every node is running: nothing to restart".into()]);
    }
    if !process_alive(c.supervisor_pid) {
        return Err(FaultError::Failed(format!(
            "the supervisor (pid {}) of this cluster is not running, so nobody can restart replicas; \
             start the cluster again with `synod local --data-dir {}`",
            c.supervisor_pid,
            c.dir.display()
        )));
    }
    let control = c.control_dir();
    std::fs::create_dir_all(&control)
        .map_err(|e| FaultError::Failed(format!("cannot create {}: {e}", control.display())))?;
    for n in &targets {
        let req = control.join(format!("restart-{}", n.id));
        std::fs::write(&req, b"").map_err(|e| FaultError::Failed(format!("cannot write {}: {e}", req.display())))?;
    }
    let deadline = Instant::now() + RESTART_TIMEOUT;
    let mut out = Vec::new();
    for n in &targets {
        loop {
            let now = ClusterFile::load(file_path).ok().and_then(|(_, f)| f.node(n.id).ok().cloned());
            if let Some(now) = now.filter(|m| m.starts > n.starts && m.state == NodeState::Running) {
                if matches!(now.admin().get("/health", HTTP_TIMEOUT), Ok((200, _))) {
                    let note = if c.in_memory { " (in memory: it comes back empty)" } else { " from its WAL" };
                    out.push(format!("restarted node {} (pid {}){note}", n.id, now.pid.unwrap_or(0)));
                    break;
                }
            }
            if Instant::now() >= deadline {
                return Err(FaultError::Failed(format!(
                    "node {} was not running and healthy {RESTART_TIMEOUT:?} after the restart request; \
                     see the supervisor's output and {}",
                    n.id,
                    n.log.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_liveness() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(u32::MAX - 1));
    }
}
