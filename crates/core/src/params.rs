//! Settings handed to a protocol at construction, and limits on client input.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Timing and batching knobs shared by the protocols, plus protocol-specific options.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProtocolParams {
    /// Interval between leader heartbeats.
    pub heartbeat_ms: u64,
    /// Election timeout is drawn uniformly from [min, max] (randomized, per node).
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// Most client commands in one log entry (batch).
    pub max_batch: usize,
    /// Most instances a leader keeps in flight (proposed, not yet committed).
    pub pipeline_window: usize,
    /// Most instances sent in one catch-up message to a lagging replica.
    pub catchup_chunk: usize,
    /// Take a snapshot of the state machine every this many executed entries (0 = never).
    /// etcd's default is 10,000.
    pub snapshot_every: u64,
    /// Entries kept in the log behind a snapshot so slightly lagging followers catch up from
    /// the log instead of receiving the snapshot (etcd keeps 5,000).
    pub snapshot_keep: u64,
    /// Snapshot bytes per InstallSnapshot chunk.
    pub snapshot_chunk_bytes: usize,
    /// Protocol-specific options (e.g. `prevote = "true"`), validated by the protocol.
    pub options: BTreeMap<String, String>,
}

impl Default for ProtocolParams {
    fn default() -> Self {
        ProtocolParams {
            heartbeat_ms: 50,
            election_timeout_min_ms: 300,
            election_timeout_max_ms: 600,
            max_batch: 256,
            pipeline_window: 64,
            catchup_chunk: 256,
            snapshot_every: 10_000,
            snapshot_keep: 5_000,
            snapshot_chunk_bytes: 1 << 20,
            options: BTreeMap::new(),
        }
    }
}

impl ProtocolParams {
    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms)
    }

    /// Check the values for consistency; the error says which setting is wrong.
    /// Set one parameter from a `KEY=VALUE` pair of the command line: a field name sets that
    /// field (an integer), anything else is a protocol option (checked by the protocol when it
    /// is built, so a misspelled option is still an error there).
    pub fn set(&mut self, assignment: &str) -> Result<(), String> {
        let (key, value) = assignment
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("parameter {assignment:?}: expected KEY=VALUE"))?;
        let int =
            || value.parse::<u64>().map_err(|_| format!("parameter {key}: {value:?} is not a non-negative integer"));
        match key {
            "heartbeat_ms" => self.heartbeat_ms = int()?,
            "election_timeout_min_ms" => self.election_timeout_min_ms = int()?,
            "election_timeout_max_ms" => self.election_timeout_max_ms = int()?,
            "max_batch" => self.max_batch = int()? as usize,
            "pipeline_window" => self.pipeline_window = int()? as usize,
            "catchup_chunk" => self.catchup_chunk = int()? as usize,
            "snapshot_every" => self.snapshot_every = int()?,
            "snapshot_keep" => self.snapshot_keep = int()?,
            "snapshot_chunk_bytes" => self.snapshot_chunk_bytes = int()? as usize,
            option => {
                let option = option.strip_prefix("options.").unwrap_or(option);
                self.options.insert(option.to_string(), value.to_string());
            }
        }
        self.validate().map_err(|e| format!("parameter {key}: {e}"))
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.heartbeat_ms == 0 {
            return Err("heartbeat_ms must be > 0".into());
        }
        if self.election_timeout_min_ms == 0 || self.election_timeout_min_ms > self.election_timeout_max_ms {
            return Err(format!(
                "election timeout range {}..{} ms is invalid (need 0 < min <= max)",
                self.election_timeout_min_ms, self.election_timeout_max_ms
            ));
        }
        if self.heartbeat_ms >= self.election_timeout_min_ms {
            return Err(format!(
                "heartbeat_ms ({}) must be below election_timeout_min_ms ({})",
                self.heartbeat_ms, self.election_timeout_min_ms
            ));
        }
        if self.max_batch == 0 || self.pipeline_window == 0 || self.catchup_chunk == 0 {
            return Err("max_batch, pipeline_window and catchup_chunk must be > 0".into());
        }
        if self.snapshot_chunk_bytes == 0 {
            return Err("snapshot_chunk_bytes must be > 0".into());
        }
        Ok(())
    }

    /// Refuse options the protocol does not know (`known` lists the ones it does).
    pub fn check_options(&self, protocol: &str, known: &[&str]) -> Result<(), String> {
        match self.options.keys().find(|k| !known.contains(&k.as_str())) {
            None => Ok(()),
            Some(k) if known.is_empty() => Err(format!("{protocol} has no option {k:?}")),
            Some(k) => Err(format!("{protocol} has no option {k:?} (known: {})", known.join(", "))),
        }
    }

    /// Read a boolean protocol option (absent = `default`).
    pub fn flag(&self, name: &str, default: bool) -> Result<bool, String> {
        match self.options.get(name).map(|s| s.as_str()) {
            None => Ok(default),
            Some("true" | "on" | "1" | "yes") => Ok(true),
            Some("false" | "off" | "0" | "no") => Ok(false),
            Some(v) => Err(format!("option {name}: expected true/false, got {v:?}")),
        }
    }
}

/// Limits on what clients may submit. Requests beyond them are refused with a clear error
/// before they reach the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    pub max_key_bytes: usize,
    pub max_value_bytes: usize,
    /// Largest frame accepted on a client or peer connection.
    pub max_frame_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_key_bytes: 64 * 1024, max_value_bytes: 16 * 1024 * 1024, max_frame_bytes: 64 * 1024 * 1024 }
    }
}

#[cfg(test)]
mod set_tests {
    use super::*;

    #[test]
    fn command_line_assignments() {
        let mut p = ProtocolParams::default();
        p.set("snapshot_every=0").unwrap();
        p.set("prevote = true").unwrap();
        p.set("options.trim=gle").unwrap();
        assert_eq!(p.snapshot_every, 0);
        assert_eq!(p.options.get("prevote").map(String::as_str), Some("true"));
        assert_eq!(p.options.get("trim").map(String::as_str), Some("gle"));
        assert!(p.set("heartbeat_ms=fast").unwrap_err().contains("not a non-negative integer"));
        assert!(p.set("novalue").unwrap_err().contains("KEY=VALUE"));
        assert!(p.set("=3").is_err());
    }
}
