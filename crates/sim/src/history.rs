//! Operation histories: what the simulated clients invoked, when, and what they were told.
//!
//! A history is the input of both linearizability checkers (the Rust one in
//! [`crate::linearizability`] and the Go oracle in `tools/porcupine`). Its JSON form is
//! documented in `docs/history-format.md`; [`History::to_json`] and [`History::from_json`]
//! implement exactly that format so the two checkers see the same bytes.

use serde::{Deserialize, Serialize};
use std::fmt;
use synod_core::{Op, OpResult};

/// The single-key operations the simulated clients issue (scans are never generated, so a
/// history decomposes per key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvOp {
    Get {
        key: String,
    },
    Put {
        key: String,
        value: String,
    },
    Delete {
        key: String,
    },
    /// Compare-and-swap: `expect` None = key absent; `new` None = delete.
    Cas {
        key: String,
        expect: Option<String>,
        new: Option<String>,
    },
    /// Any state-machine operation (`synod check --workload rich`: lists, INCR, APPEND,
    /// multi-key ops, scans, MULTI/EXEC with WATCH), checked against the state machine's own
    /// sequential semantics (`synod_core::kv::KvStore`). `stamp` is the version the command
    /// gave the keys it wrote (`synod_core::session::command_stamp` of the copy that was
    /// applied; None if no replica applied it), which WATCH compares.
    Rich {
        op: Op,
        stamp: Option<u64>,
    },
}

impl KvOp {
    /// Whether the operation changes nothing (a get, or a rich operation that writes no key).
    pub fn is_read(&self) -> bool {
        match self {
            KvOp::Get { .. } => true,
            KvOp::Rich { op, .. } => !op.is_write(),
            _ => false,
        }
    }

    /// The key of a single-key operation of the classic kinds ("" for `Rich`).
    pub fn key(&self) -> &str {
        match self {
            KvOp::Get { key } | KvOp::Put { key, .. } | KvOp::Delete { key } | KvOp::Cas { key, .. } => key,
            KvOp::Rich { .. } => "",
        }
    }
}

/// What a completed operation returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvOutput {
    /// Get: the value read (None = absent).
    Value(Option<String>),
    /// Put.
    Done,
    /// Delete: whether the key existed.
    Deleted(bool),
    /// Cas: whether the swap happened, and the value found.
    Cas { ok: bool, current: Option<String> },
    /// A `Rich` operation's result.
    Result(OpResult),
    /// Refused for good (a definitive reject, e.g. IDEM when every replica refused): the
    /// operation must never take effect, so the rest of the history must be linearizable
    /// without it.
    Rejected,
}

/// One operation of a history. `ret == None` means indeterminate: the client never got an
/// answer (it gave up, or the run ended), so the operation may or may not have taken effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// Client session id.
    pub client: u64,
    pub op: KvOp,
    /// Invocation time (virtual nanoseconds).
    pub call: u64,
    /// Return time; None = indeterminate (return at +infinity).
    pub ret: Option<u64>,
    /// The result; None exactly when `ret` is None.
    pub output: Option<KvOutput>,
}

impl Operation {
    pub fn is_indeterminate(&self) -> bool {
        self.ret.is_none()
    }

    /// Whether the operation was rejected for good (see [`KvOutput::Rejected`]).
    pub fn is_rejected(&self) -> bool {
        self.output == Some(KvOutput::Rejected)
    }
}

fn show(v: &Option<String>) -> String {
    match v {
        Some(s) => format!("{s:?}"),
        None => "∅".to_string(),
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match &self.op {
            KvOp::Get { key } => format!("get({key})"),
            KvOp::Put { key, value } => format!("put({key}, {value:?})"),
            KvOp::Delete { key } => format!("delete({key})"),
            KvOp::Cas { key, expect, new } => format!("cas({key}, {} -> {})", show(expect), show(new)),
            KvOp::Rich { op, .. } => format!("{op:?}"),
        };
        let out = match &self.output {
            None => "?".to_string(),
            Some(KvOutput::Value(v)) => show(v),
            Some(KvOutput::Done) => "ok".to_string(),
            Some(KvOutput::Deleted(b)) => format!("existed={b}"),
            Some(KvOutput::Cas { ok, current }) => format!("ok={ok} current={}", show(current)),
            Some(KvOutput::Result(r)) => format!("{r:?}"),
            Some(KvOutput::Rejected) => "rejected (never takes effect)".to_string(),
        };
        let ret = match self.ret {
            Some(r) => format!("{:.6}s", r as f64 / 1e9),
            None => "never".to_string(),
        };
        write!(f, "client {:x}: [{:.6}s, {ret}] {op} -> {out}", self.client, self.call as f64 / 1e9)
    }
}

/// A whole history, plus where it came from (for humans and the corpus).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    pub ops: Vec<Operation>,
    /// Free-form provenance ("multipaxos seed 17", "hand-written: stale read").
    pub note: String,
    /// For corpus files: the expected verdict, if recorded.
    pub expect: Option<bool>,
}

/// The JSON format, `synod-history-v1` (see docs/history-format.md).
pub const FORMAT: &str = "synod-history-v1";

#[derive(Serialize, Deserialize)]
struct JsonHistory {
    format: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    note: String,
    /// "linearizable" or "not-linearizable".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expect: Option<String>,
    ops: Vec<JsonOp>,
}

#[derive(Serialize, Deserialize)]
struct JsonOp {
    client: u64,
    kind: String,
    key: String,
    /// put: the value; cas: the new value (null = delete).
    #[serde(default)]
    value: Option<String>,
    /// cas: the expected value (null = absent).
    #[serde(default)]
    expect: Option<String>,
    call: u64,
    #[serde(rename = "return")]
    ret: Option<u64>,
    output: Option<JsonOutput>,
    /// kind "op": the operation (synod_core::Op as serde JSON) and its stamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    op: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stamp: Option<u64>,
}

#[derive(Serialize, Deserialize, Default)]
struct JsonOutput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    existed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    current: Option<String>,
    /// Rejected for good: the operation must never take effect (any kind).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    rejected: bool,
    /// kind "op": the result (synod_core::OpResult as serde JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<serde_json::Value>,
}

impl History {
    /// Serialize to the documented JSON format (one operation per line, for diffs).
    pub fn to_json(&self) -> String {
        let mut out = String::from("{\n");
        out.push_str(&format!("  \"format\": {},\n", serde_json::to_string(FORMAT).expect("string")));
        if !self.note.is_empty() {
            out.push_str(&format!("  \"note\": {},\n", serde_json::to_string(&self.note).expect("string")));
        }
        if let Some(e) = self.expect {
            let e = if e { "linearizable" } else { "not-linearizable" };
            out.push_str(&format!("  \"expect\": \"{e}\",\n"));
        }
        out.push_str("  \"ops\": [");
        for (i, op) in self.ops.iter().enumerate() {
            out.push_str(if i == 0 { "\n    " } else { ",\n    " });
            out.push_str(&serde_json::to_string(&to_json_op(op)).expect("ops serialize"));
        }
        out.push_str("\n  ]\n}\n");
        out
    }

    /// Parse the documented JSON format; errors name the offending operation.
    pub fn from_json(text: &str) -> Result<History, String> {
        let h: JsonHistory = serde_json::from_str(text).map_err(|e| format!("malformed history JSON: {e}"))?;
        if h.format != FORMAT {
            return Err(format!("unknown history format {:?} (want {FORMAT})", h.format));
        }
        let expect = match h.expect.as_deref() {
            None => None,
            Some("linearizable") => Some(true),
            Some("not-linearizable") => Some(false),
            Some(other) => return Err(format!("expect must be linearizable or not-linearizable, got {other:?}")),
        };
        let ops = h.ops.into_iter().enumerate().map(|(i, o)| from_json_op(o).map_err(|e| format!("op {i}: {e}")));
        Ok(History { ops: ops.collect::<Result<_, _>>()?, note: h.note, expect })
    }
}

fn to_json_op(op: &Operation) -> JsonOp {
    let empty = String::new();
    let (kind, key, value, expect) = match &op.op {
        KvOp::Get { key } => ("get", key, None, None),
        KvOp::Put { key, value } => ("put", key, Some(value.clone()), None),
        KvOp::Delete { key } => ("delete", key, None, None),
        KvOp::Cas { key, expect, new } => ("cas", key, new.clone(), expect.clone()),
        KvOp::Rich { .. } => ("op", &empty, None, None),
    };
    let (rich, stamp) = match &op.op {
        KvOp::Rich { op, stamp } => (Some(serde_json::to_value(op).expect("ops serialize")), *stamp),
        _ => (None, None),
    };
    let output = op.output.as_ref().map(|o| match o {
        KvOutput::Value(v) => JsonOutput { value: v.clone(), ..Default::default() },
        KvOutput::Done => JsonOutput::default(),
        KvOutput::Deleted(existed) => JsonOutput { existed: *existed, ..Default::default() },
        KvOutput::Cas { ok, current } => JsonOutput { ok: *ok, current: current.clone(), ..Default::default() },
        KvOutput::Rejected => JsonOutput { rejected: true, ..Default::default() },
        KvOutput::Result(r) => {
            JsonOutput { result: Some(serde_json::to_value(r).expect("results serialize")), ..Default::default() }
        }
    });
    JsonOp {
        client: op.client,
        kind: kind.into(),
        key: key.clone(),
        value,
        expect,
        call: op.call,
        ret: op.ret,
        output,
        op: rich,
        stamp,
    }
}

fn from_json_op(o: JsonOp) -> Result<Operation, String> {
    let op = match o.kind.as_str() {
        "get" => KvOp::Get { key: o.key },
        "put" => KvOp::Put { key: o.key, value: o.value.ok_or("put without a value")? },
        "delete" => KvOp::Delete { key: o.key },
        "cas" => KvOp::Cas { key: o.key, expect: o.expect, new: o.value },
        "op" => {
            let op = o.op.ok_or("kind op without an op")?;
            let op: Op = serde_json::from_value(op).map_err(|e| format!("bad op: {e}"))?;
            KvOp::Rich { op, stamp: o.stamp }
        }
        other => return Err(format!("unknown kind {other:?} (want get, put, delete, cas or op)")),
    };
    let output = match (o.ret, o.output) {
        (None, _) => None,
        (Some(_), None) => return Err("returned operation without output".into()),
        (Some(r), Some(out)) => {
            if r < o.call {
                return Err(format!("returns at {r} before its call at {}", o.call));
            }
            Some(match &op {
                _ if out.rejected => KvOutput::Rejected,
                KvOp::Get { .. } => KvOutput::Value(out.value),
                KvOp::Put { .. } => KvOutput::Done,
                KvOp::Delete { .. } => KvOutput::Deleted(out.existed),
                KvOp::Cas { .. } => KvOutput::Cas { ok: out.ok, current: out.current },
                KvOp::Rich { .. } => {
                    let r = out.result.ok_or("op output without a result")?;
                    KvOutput::Result(serde_json::from_value(r).map_err(|e| format!("bad result: {e}"))?)
                }
            })
        }
    };
    Ok(Operation { client: o.client, op, call: o.call, ret: o.ret, output })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip() {
        let h = History {
            note: "t".into(),
            expect: Some(false),
            ops: vec![
                Operation {
                    client: 1,
                    op: KvOp::Put { key: "k".into(), value: "v".into() },
                    call: 1,
                    ret: Some(2),
                    output: Some(KvOutput::Done),
                },
                Operation {
                    client: 2,
                    op: KvOp::Cas { key: "k".into(), expect: None, new: Some("w".into()) },
                    call: 3,
                    ret: Some(4),
                    output: Some(KvOutput::Cas { ok: false, current: Some("v".into()) }),
                },
                Operation {
                    client: 2,
                    op: KvOp::Get { key: "k".into() },
                    call: 5,
                    ret: Some(6),
                    output: Some(KvOutput::Value(None)),
                },
                Operation { client: 3, op: KvOp::Delete { key: "k".into() }, call: 5, ret: None, output: None },
                Operation {
                    client: 5,
                    op: KvOp::Rich {
                        op: Op::ListPush {
                            key: bytes::Bytes::from_static(b"l"),
                            values: vec![bytes::Bytes::from_static(b"x")],
                            left: true,
                            only_existing: false,
                        },
                        stamp: Some(77),
                    },
                    call: 7,
                    ret: Some(8),
                    output: Some(KvOutput::Result(OpResult::Int(1))),
                },
                Operation {
                    client: 4,
                    op: KvOp::Put { key: "k".into(), value: "x".into() },
                    call: 6,
                    ret: Some(9),
                    output: Some(KvOutput::Rejected),
                },
            ],
        };
        assert_eq!(History::from_json(&h.to_json()).unwrap(), h);
        assert!(History::from_json("{}").is_err());
        assert!(History::from_json(r#"{"format":"x","ops":[]}"#).unwrap_err().contains("unknown history format"));
    }
}
