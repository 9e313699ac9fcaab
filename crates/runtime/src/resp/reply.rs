//! Replies: one value type for both protocol versions, encoded with `redis-protocol`'s RESP2
//! or RESP3 encoder depending on what the connection negotiated (`HELLO 3`). The differences
//! that matter to clients: a missing value is `$-1` in RESP2 and `_` in RESP3, and field/value
//! replies (HGETALL, CONFIG GET, HELLO) are flat arrays in RESP2 and maps in RESP3.

use bytes::{Bytes, BytesMut};
use redis_protocol::bytes_utils::Str;
use redis_protocol::resp2::types::BytesFrame as Frame2;
use redis_protocol::resp3::types::BytesFrame as Frame3;

/// A reply before encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RespValue {
    Simple(String),
    /// An error line: a code word (`ERR`, `WRONGTYPE`, `NOAUTH`, …) then the message.
    Error(String),
    Int(i64),
    Bulk(Bytes),
    /// A floating-point number as text (a sorted-set score): a bulk string in RESP2, a double
    /// (`,3.5`) in RESP3, as Redis 7 sends ZSCORE, ZINCRBY, ZMSCORE and ZADD INCR replies.
    Double(Bytes),
    Null,
    /// Sorted-set members and scores (ZRANGE … WITHSCORES, ZPOPMIN): a flat array of bulk
    /// strings in RESP2; in RESP3, as Redis 7 sends them, scores are doubles and, when
    /// `nested`, each (member, score) is its own array.
    ScorePairs {
        pairs: Vec<(Bytes, Bytes)>,
        nested: bool,
    },
    /// Field/value pairs (HRANDFIELD … WITHVALUES): a flat array of bulk strings in RESP2,
    /// an array of two-element arrays in RESP3.
    Pairs(Vec<(Bytes, Bytes)>),
    /// A null array: `*-1` in RESP2 (EXEC of an aborted transaction), `_` in RESP3.
    NullArray,
    Array(Vec<RespValue>),
    /// Field/value pairs: a map in RESP3, a flat array in RESP2.
    Map(Vec<(RespValue, RespValue)>),
}

impl RespValue {
    pub fn ok() -> RespValue {
        RespValue::Simple("OK".into())
    }

    /// An error; a message without a code word gets `ERR`, and line breaks (which would break
    /// the framing) become spaces.
    pub fn err(msg: impl AsRef<str>) -> RespValue {
        let msg = msg.as_ref().replace(['\r', '\n'], " ");
        let first = msg.split(' ').next().unwrap_or("");
        let coded = first.len() >= 3 && first.bytes().all(|b| b.is_ascii_uppercase());
        RespValue::Error(if coded { msg } else { format!("ERR {msg}") })
    }

    pub fn bulk(b: impl Into<Bytes>) -> RespValue {
        RespValue::Bulk(b.into())
    }

    pub fn text(s: impl Into<String>) -> RespValue {
        RespValue::Bulk(Bytes::from(s.into()))
    }

    pub fn opt(v: Option<Bytes>) -> RespValue {
        v.map_or(RespValue::Null, RespValue::Bulk)
    }

    /// A score, or null.
    pub fn opt_double(v: Option<Bytes>) -> RespValue {
        v.map_or(RespValue::Null, RespValue::Double)
    }

    pub fn is_error(&self) -> bool {
        matches!(self, RespValue::Error(_))
    }

    /// Append the encoding for protocol version `proto` (2 or 3) to `out`.
    pub fn encode(&self, proto: u8, out: &mut BytesMut) {
        // The encoders only fail on frames they cannot represent, and we build none of those;
        // should one ever fail, the client gets an error reply rather than a broken stream.
        if proto < 3 && *self == RespValue::NullArray {
            out.extend_from_slice(b"*-1\r\n");
            return;
        }
        let ok = if proto >= 3 {
            redis_protocol::resp3::encode::complete::extend_encode(out, &self.to_resp3(), false).is_ok()
        } else {
            redis_protocol::resp2::encode::extend_encode(out, &self.to_resp2(), false).is_ok()
        };
        if !ok {
            out.extend_from_slice(b"-ERR internal error: reply could not be encoded\r\n");
        }
    }

    fn to_resp2(&self) -> Frame2 {
        match self {
            RespValue::Simple(s) => Frame2::SimpleString(Bytes::from(s.clone())),
            RespValue::Error(e) => Frame2::Error(Str::from(e.as_str())),
            RespValue::Int(i) => Frame2::Integer(*i),
            RespValue::Bulk(b) | RespValue::Double(b) => Frame2::BulkString(b.clone()),
            RespValue::Null | RespValue::NullArray => Frame2::Null,
            RespValue::Array(items) => Frame2::Array(items.iter().map(|v| v.to_resp2()).collect()),
            RespValue::Map(pairs) => {
                Frame2::Array(pairs.iter().flat_map(|(k, v)| [k.to_resp2(), v.to_resp2()]).collect())
            }
            RespValue::Pairs(pairs) => Frame2::Array(
                pairs
                    .iter()
                    .flat_map(|(f, v)| [Frame2::BulkString(f.clone()), Frame2::BulkString(v.clone())])
                    .collect(),
            ),
            RespValue::ScorePairs { pairs, .. } => Frame2::Array(
                pairs
                    .iter()
                    .flat_map(|(m, s)| [Frame2::BulkString(m.clone()), Frame2::BulkString(s.clone())])
                    .collect(),
            ),
        }
    }

    fn to_resp3(&self) -> Frame3 {
        match self {
            RespValue::Simple(s) => Frame3::SimpleString { data: Bytes::from(s.clone()), attributes: None },
            RespValue::Error(e) => Frame3::SimpleError { data: Str::from(e.as_str()), attributes: None },
            RespValue::Int(i) => Frame3::Number { data: *i, attributes: None },
            RespValue::Bulk(b) => Frame3::BlobString { data: b.clone(), attributes: None },
            RespValue::Double(b) => double3(b),
            RespValue::Null | RespValue::NullArray => Frame3::Null,
            RespValue::Array(items) => {
                Frame3::Array { data: items.iter().map(|v| v.to_resp3()).collect(), attributes: None }
            }
            RespValue::Pairs(pairs) => {
                let bulk = |b: &Bytes| Frame3::BlobString { data: b.clone(), attributes: None };
                let data = pairs
                    .iter()
                    .map(|(f, v)| Frame3::Array { data: vec![bulk(f), bulk(v)], attributes: None })
                    .collect();
                Frame3::Array { data, attributes: None }
            }
            RespValue::ScorePairs { pairs, nested } => {
                let double = double3;
                let member = |m: &Bytes| Frame3::BlobString { data: m.clone(), attributes: None };
                let data = if *nested {
                    pairs
                        .iter()
                        .map(|(m, s)| Frame3::Array { data: vec![member(m), double(s)], attributes: None })
                        .collect()
                } else {
                    pairs.iter().flat_map(|(m, s)| [member(m), double(s)]).collect()
                };
                Frame3::Array { data, attributes: None }
            }
            RespValue::Map(pairs) => Frame3::Map {
                data: pairs.iter().map(|(k, v)| (k.to_resp3(), v.to_resp3())).collect(),
                attributes: None,
            },
        }
    }
}

/// A score as a RESP3 double; the text was printed by the store, so it parses (NaN otherwise,
/// which the encoder renders as `nan` rather than failing).
fn double3(text: &Bytes) -> Frame3 {
    Frame3::Double { data: synod_core::kv::parse_score(text).unwrap_or(f64::NAN), attributes: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: &RespValue, proto: u8) -> String {
        let mut out = BytesMut::new();
        v.encode(proto, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn resp2_and_resp3_encodings() {
        assert_eq!(enc(&RespValue::ok(), 2), "+OK\r\n");
        assert_eq!(enc(&RespValue::Null, 2), "$-1\r\n");
        assert_eq!(enc(&RespValue::Null, 3), "_\r\n");
        assert_eq!(enc(&RespValue::NullArray, 2), "*-1\r\n");
        assert_eq!(enc(&RespValue::NullArray, 3), "_\r\n");
        let pairs = |nested| RespValue::ScorePairs { pairs: vec![(Bytes::from("m"), Bytes::from("1.5"))], nested };
        assert_eq!(enc(&pairs(true), 2), "*2\r\n$1\r\nm\r\n$3\r\n1.5\r\n");
        assert_eq!(enc(&pairs(true), 3), "*1\r\n*2\r\n$1\r\nm\r\n,1.5\r\n");
        assert_eq!(enc(&pairs(false), 3), "*2\r\n$1\r\nm\r\n,1.5\r\n");
        let fv = RespValue::Pairs(vec![(Bytes::from("f"), Bytes::from("v"))]);
        assert_eq!(enc(&fv, 2), "*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert_eq!(enc(&fv, 3), "*1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert_eq!(enc(&RespValue::Double(Bytes::from("3.5")), 2), "$3\r\n3.5\r\n");
        assert_eq!(enc(&RespValue::Double(Bytes::from("3.5")), 3), ",3.5\r\n");
        assert_eq!(enc(&RespValue::Double(Bytes::from("-inf")), 3), ",-inf\r\n");
        assert_eq!(enc(&RespValue::opt_double(None), 3), "_\r\n");
        assert_eq!(enc(&RespValue::Int(-7), 3), ":-7\r\n");
        assert_eq!(enc(&RespValue::bulk("a\r\nb"), 2), "$4\r\na\r\nb\r\n");
        let map = RespValue::Map(vec![(RespValue::text("f"), RespValue::text("v"))]);
        assert_eq!(enc(&map, 2), "*2\r\n$1\r\nf\r\n$1\r\nv\r\n");
        assert_eq!(enc(&map, 3), "%1\r\n$1\r\nf\r\n$1\r\nv\r\n");
        let arr = RespValue::Array(vec![RespValue::Null, RespValue::Int(1)]);
        assert_eq!(enc(&arr, 2), "*2\r\n$-1\r\n:1\r\n");
    }

    #[test]
    fn errors_get_a_code_and_no_line_breaks() {
        assert_eq!(RespValue::err("boom\r\nx"), RespValue::Error("ERR boom  x".into()));
        assert_eq!(RespValue::err("WRONGTYPE Operation"), RespValue::Error("WRONGTYPE Operation".into()));
        assert_eq!(RespValue::err("stale request"), RespValue::Error("ERR stale request".into()));
        assert_eq!(enc(&RespValue::err("NOAUTH Authentication required."), 3), "-NOAUTH Authentication required.\r\n");
    }
}
