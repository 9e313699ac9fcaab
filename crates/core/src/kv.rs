//! The key-value state machine: commands, results, and the store they run against.
//!
//! Keys and values are byte strings. Commands declare the keys they touch and whether they
//! write ([`Op::footprint`], [`Op::is_write`]) so that leaderless protocols (EPaxos, Nezha)
//! can decide interference / commutativity without knowing the operations.

use crate::params::Limits;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Bound;

/// One operation on the store.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    Get {
        key: Bytes,
    },
    Put {
        key: Bytes,
        value: Bytes,
    },
    Delete {
        key: Bytes,
    },
    /// Compare-and-swap: if the current value equals `expect` (None = absent), set it to
    /// `new` (None = delete).
    Cas {
        key: Bytes,
        expect: Option<Bytes>,
        new: Option<Bytes>,
    },
    /// Keys in `[start, end)` (empty `end` = unbounded), at most `limit` pairs (0 = no limit).
    Scan {
        start: Bytes,
        end: Bytes,
        limit: u32,
    },
    /// Does nothing; leaders commit it to fill holes or to mark a new term.
    Noop,
}

/// What an operation touches, for interference checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Footprint<'a> {
    None,
    Key(&'a [u8]),
    Range { start: &'a [u8], end: &'a [u8] },
}

impl Op {
    pub fn is_write(&self) -> bool {
        matches!(self, Op::Put { .. } | Op::Delete { .. } | Op::Cas { .. })
    }

    pub fn footprint(&self) -> Footprint<'_> {
        match self {
            Op::Get { key } | Op::Put { key, .. } | Op::Delete { key } | Op::Cas { key, .. } => Footprint::Key(key),
            Op::Scan { start, end, .. } => Footprint::Range { start, end },
            Op::Noop => Footprint::None,
        }
    }

    /// Whether two operations interfere: they touch a common key and at least one writes.
    /// Non-interfering operations commute (EPaxos §4.1, Nezha's commutativity optimization).
    pub fn interferes(&self, other: &Op) -> bool {
        if !self.is_write() && !other.is_write() {
            return false;
        }
        fn in_range(k: &[u8], start: &[u8], end: &[u8]) -> bool {
            k >= start && (end.is_empty() || k < end)
        }
        match (self.footprint(), other.footprint()) {
            (Footprint::None, _) | (_, Footprint::None) => false,
            (Footprint::Key(a), Footprint::Key(b)) => a == b,
            (Footprint::Key(k), Footprint::Range { start, end })
            | (Footprint::Range { start, end }, Footprint::Key(k)) => in_range(k, start, end),
            (Footprint::Range { start: s1, end: e1 }, Footprint::Range { start: s2, end: e2 }) => {
                (e2.is_empty() || s1 < e2) && (e1.is_empty() || s2 < e1)
            }
        }
    }

    /// Approximate size in bytes (for batching limits and bandwidth accounting).
    pub fn size(&self) -> usize {
        match self {
            Op::Get { key } | Op::Delete { key } => key.len(),
            Op::Put { key, value } => key.len() + value.len(),
            Op::Cas { key, expect, new } => {
                key.len() + expect.as_ref().map_or(0, |v| v.len()) + new.as_ref().map_or(0, |v| v.len())
            }
            Op::Scan { start, end, .. } => start.len() + end.len(),
            Op::Noop => 0,
        }
    }

    /// Check the operation against the limits; the error is what the client is told.
    pub fn validate(&self, limits: &Limits) -> Result<(), CommandError> {
        let check_key = |k: &Bytes| {
            if k.len() > limits.max_key_bytes {
                Err(CommandError::KeyTooLarge { size: k.len(), limit: limits.max_key_bytes })
            } else {
                Ok(())
            }
        };
        let check_value = |v: &Bytes| {
            if v.len() > limits.max_value_bytes {
                Err(CommandError::ValueTooLarge { size: v.len(), limit: limits.max_value_bytes })
            } else {
                Ok(())
            }
        };
        match self {
            Op::Get { key } | Op::Delete { key } => check_key(key),
            Op::Put { key, value } => check_key(key).and(check_value(value)),
            Op::Cas { key, expect, new } => {
                check_key(key)?;
                if let Some(v) = expect {
                    check_value(v)?;
                }
                if let Some(v) = new {
                    check_value(v)?;
                }
                Ok(())
            }
            Op::Scan { start, end, .. } => check_key(start).and(check_key(end)),
            Op::Noop => Ok(()),
        }
    }
}

/// Why a command was refused before it reached the log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum CommandError {
    #[error("value of {size} bytes exceeds the limit of {limit} bytes (max_value_bytes)")]
    ValueTooLarge { size: usize, limit: usize },
    #[error("key of {size} bytes exceeds the limit of {limit} bytes (max_key_bytes)")]
    KeyTooLarge { size: usize, limit: usize },
}

/// A client command: the operation plus the session identity that makes retries idempotent.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Command {
    /// Client session id (unique per client; chosen at random by the client library).
    pub client: u64,
    /// Sequence number within the session, starting at 1, strictly increasing per request.
    /// Retries of the same request reuse it.
    pub seq: u64,
    /// Every request of this session with a sequence number below this has received its
    /// reply: the state machine may forget their results (Raft thesis §6.3).
    pub acked_below: u64,
    pub op: Op,
}

impl Command {
    /// A no-op command outside any session (client 0).
    pub fn noop() -> Command {
        Command { client: 0, seq: 0, acked_below: 0, op: Op::Noop }
    }
}

/// The result of an operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpResult {
    /// Get: the value, or None if absent.
    Value(Option<Bytes>),
    /// Put / Noop.
    Done,
    /// Delete: whether the key existed.
    Deleted(bool),
    /// Cas: whether the swap happened, and the value found.
    Cas {
        ok: bool,
        current: Option<Bytes>,
    },
    Scan(Vec<(Bytes, Bytes)>),
    /// The state machine refused the command (deterministically, on every replica).
    Error(String),
}

/// The ordered key-value store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvStore {
    map: BTreeMap<Bytes, Bytes>,
    bytes: usize,
}

impl KvStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Total bytes of keys and values held.
    pub fn size_bytes(&self) -> usize {
        self.bytes
    }

    pub fn get(&self, key: &[u8]) -> Option<&Bytes> {
        self.map.get(key)
    }

    fn put(&mut self, key: Bytes, value: Bytes) {
        self.bytes += value.len();
        match self.map.insert(key.clone(), value) {
            Some(old) => self.bytes -= old.len(),
            None => self.bytes += key.len(),
        }
    }

    fn delete(&mut self, key: &[u8]) -> Option<Bytes> {
        let (k, v) = self.map.remove_entry(key)?;
        self.bytes -= k.len() + v.len();
        Some(v)
    }

    /// Run one operation. Deterministic: the same sequence of operations gives the same
    /// results and state on every replica.
    pub fn apply(&mut self, op: &Op) -> OpResult {
        match op {
            Op::Get { key } => OpResult::Value(self.map.get(key).cloned()),
            Op::Put { key, value } => {
                self.put(key.clone(), value.clone());
                OpResult::Done
            }
            Op::Delete { key } => OpResult::Deleted(self.delete(key).is_some()),
            Op::Cas { key, expect, new } => {
                let current = self.map.get(key).cloned();
                if current == *expect {
                    match new {
                        Some(v) => self.put(key.clone(), v.clone()),
                        None => {
                            self.delete(key);
                        }
                    }
                    OpResult::Cas { ok: true, current }
                } else {
                    OpResult::Cas { ok: false, current }
                }
            }
            Op::Scan { .. } | Op::Noop => self.read(op),
        }
    }

    /// Run a read-only operation without mutating (for local/lease reads). Writes are refused.
    pub fn read(&self, op: &Op) -> OpResult {
        match op {
            Op::Get { key } => OpResult::Value(self.map.get(key).cloned()),
            Op::Scan { start, end, limit } => {
                if !end.is_empty() && end <= start {
                    return OpResult::Scan(Vec::new());
                }
                let upper = if end.is_empty() { Bound::Unbounded } else { Bound::Excluded(end.clone()) };
                let it = self.map.range((Bound::Included(start.clone()), upper)).map(|(k, v)| (k.clone(), v.clone()));
                OpResult::Scan(if *limit == 0 { it.collect() } else { it.take(*limit as usize).collect() })
            }
            Op::Noop => OpResult::Done,
            _ => OpResult::Error("write operation on the read-only path".into()),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Bytes, &Bytes)> {
        self.map.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn put_get_delete_cas_scan() {
        let mut kv = KvStore::new();
        assert_eq!(kv.apply(&Op::Get { key: b("a") }), OpResult::Value(None));
        assert_eq!(kv.apply(&Op::Put { key: b("a"), value: b("1") }), OpResult::Done);
        assert_eq!(kv.apply(&Op::Get { key: b("a") }), OpResult::Value(Some(b("1"))));
        assert_eq!(
            kv.apply(&Op::Cas { key: b("a"), expect: Some(b("2")), new: Some(b("3")) }),
            OpResult::Cas { ok: false, current: Some(b("1")) }
        );
        assert_eq!(
            kv.apply(&Op::Cas { key: b("a"), expect: Some(b("1")), new: Some(b("3")) }),
            OpResult::Cas { ok: true, current: Some(b("1")) }
        );
        assert_eq!(
            kv.apply(&Op::Cas { key: b("n"), expect: None, new: Some(b("x")) }),
            OpResult::Cas { ok: true, current: None }
        );
        kv.apply(&Op::Put { key: b("c"), value: b("cc") });
        assert_eq!(
            kv.apply(&Op::Scan { start: b("a"), end: b("d"), limit: 0 }),
            OpResult::Scan(vec![(b("a"), b("3")), (b("c"), b("cc"))])
        );
        assert_eq!(
            kv.apply(&Op::Scan { start: b("b"), end: b(""), limit: 1 }),
            OpResult::Scan(vec![(b("c"), b("cc"))])
        );
        assert_eq!(kv.apply(&Op::Scan { start: b("z"), end: b("a"), limit: 0 }), OpResult::Scan(vec![]));
        assert_eq!(kv.apply(&Op::Delete { key: b("a") }), OpResult::Deleted(true));
        assert_eq!(kv.apply(&Op::Delete { key: b("a") }), OpResult::Deleted(false));
        assert_eq!(kv.size_bytes(), 1 + 1 + 1 + 2);
    }

    #[test]
    fn interference() {
        let put = |k: &str| Op::Put { key: b(k), value: b("v") };
        let get = |k: &str| Op::Get { key: b(k) };
        assert!(put("a").interferes(&put("a")));
        assert!(put("a").interferes(&get("a")));
        assert!(!get("a").interferes(&get("a")));
        assert!(!put("a").interferes(&put("b")));
        let scan = Op::Scan { start: b("a"), end: b("c"), limit: 0 };
        assert!(scan.interferes(&put("b")));
        assert!(!scan.interferes(&put("c")));
        assert!(!scan.interferes(&Op::Noop));
    }

    #[test]
    fn limits() {
        let l = Limits { max_key_bytes: 4, max_value_bytes: 8, max_frame_bytes: 100 };
        assert!(Op::Put { key: b("abcd"), value: b("12345678") }.validate(&l).is_ok());
        assert_eq!(
            Op::Put { key: b("abcd"), value: b("123456789") }.validate(&l),
            Err(CommandError::ValueTooLarge { size: 9, limit: 8 })
        );
        assert_eq!(Op::Get { key: b("abcde") }.validate(&l), Err(CommandError::KeyTooLarge { size: 5, limit: 4 }));
    }
}
