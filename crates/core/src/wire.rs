//! The native client protocol and the length-prefixed framing shared by client and peer
//! connections: a 4-byte big-endian length, then a postcard payload.

use crate::client_policy::RequestMeta;
use crate::kv::Command;
use crate::protocol::{Reply, Status};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

/// First bytes a client sends, so a stray connection (HTTP, Redis) is recognized and closed
/// with a clear log line instead of being parsed as frames.
pub const CLIENT_MAGIC: &[u8; 8] = b"SYNODCL1";
/// First bytes a peer sends, followed by a [`PeerHello`] frame. Before that, the accepting
/// replica sends [`PEER_NONCE_BYTES`] random bytes (the challenge the hello's `mac` answers).
pub const PEER_MAGIC: &[u8; 8] = b"SYNODPR2";
/// Length of the accepting replica's challenge on a peer connection.
pub const PEER_NONCE_BYTES: usize = 32;

/// Client → replica. (A request is by far the common variant; boxing it to shrink the rare
/// `Status` would cost an allocation per request.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
pub enum ClientMsg {
    /// A request, with what the client policy stamped on this send (`RequestMeta`).
    Request {
        cmd: Command,
        meta: RequestMeta,
    },
    Status,
    /// The password of the replica (its config's `password`): required as the first message
    /// when one is configured; without it (or with a wrong one) the replica answers
    /// `ServerMsg::Refused` and closes the connection.
    Auth {
        password: String,
    },
}

/// Replica → client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ServerMsg {
    Reply(Reply),
    Status(Status),
    /// The replica refuses this connection (e.g. too many clients) and closes it.
    Refused {
        reason: String,
    },
}

/// First frame on a peer connection: who is calling, and which cluster it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerHello {
    pub cluster: String,
    pub from: u32,
    /// Chosen at random when the replica process starts (never 0). A dial from a new
    /// incarnation tells the receiver that the peer restarted and its own outbound socket to
    /// it may be stale; a redial from the same incarnation (a lost connection) does not.
    pub incarnation: u64,
    /// The replica this connection is meant for (the MAC covers it, so a hello cannot be
    /// replayed to another member).
    pub to: u32,
    /// HMAC-SHA256 with the cluster secret over the challenge and the fields above; empty
    /// when the dialer has no secret. A replica with a secret refuses a hello whose MAC is
    /// missing or wrong (runtime `peer_auth`).
    pub mac: Vec<u8>,
}

/// Errors while reading frames. Every one closes the connection; none panics.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("malformed frame: {0}")]
    Malformed(String),
    #[error("bad connection preamble (not a synod {0} connection)")]
    BadMagic(&'static str),
}

/// Append one frame (length + payload) to `out`.
pub fn put_frame(out: &mut BytesMut, payload: &[u8]) {
    out.reserve(4 + payload.len());
    out.put_u32(payload.len() as u32);
    out.put_slice(payload);
}

/// Encode a message as one frame.
pub fn frame<M: Serialize>(msg: &M) -> Bytes {
    let payload = crate::protocol::to_exact_vec(msg);
    let mut out = BytesMut::with_capacity(4 + payload.len());
    put_frame(&mut out, &payload);
    out.freeze()
}

/// Split one complete frame off the front of `buf`, if there is one. A length above `limit`
/// is an error before any of the payload is buffered.
pub fn take_frame(buf: &mut BytesMut, limit: usize) -> Result<Option<Bytes>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > limit {
        return Err(FrameError::TooLarge { size: len, limit });
    }
    if buf.len() < 4 + len {
        // Room grows with the bytes that actually arrive (the reader reserves as it reads),
        // never with the announced length: a peer announcing a 64 MiB frame and sending
        // nothing more must not make us reserve 64 MiB.
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(len).freeze()))
}

/// Decode a frame payload.
pub fn decode_payload<'de, M: Deserialize<'de>>(payload: &'de [u8]) -> Result<M, FrameError> {
    postcard::from_bytes(payload).map_err(|e| FrameError::Malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{Command, Op};

    #[test]
    fn frames_round_trip_and_split() {
        let m = ClientMsg::Request {
            cmd: Command {
                client: 1,
                seq: 2,
                acked_below: 1,
                now_ms: 0,
                op: Op::Get { key: Bytes::from_static(b"k") },
            },
            meta: RequestMeta { sent_at: crate::Time::from_millis(5), ext: Bytes::from_static(b"x") },
        };
        let f = frame(&m);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&f[..3]);
        assert_eq!(take_frame(&mut buf, 1024).unwrap(), None);
        buf.extend_from_slice(&f[3..]);
        buf.extend_from_slice(&f);
        let p = take_frame(&mut buf, 1024).unwrap().unwrap();
        assert_eq!(decode_payload::<ClientMsg>(&p).unwrap(), m);
        assert!(take_frame(&mut buf, 1024).unwrap().is_some());
        assert!(buf.is_empty());
    }

    #[test]
    fn oversized_and_garbage_are_errors() {
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 1, 2][..]);
        assert!(matches!(take_frame(&mut buf, 1024), Err(FrameError::TooLarge { .. })));
        assert!(decode_payload::<ClientMsg>(&[0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn an_announced_length_reserves_nothing_until_the_bytes_arrive() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&(60u32 << 20).to_be_bytes());
        buf.extend_from_slice(b"tiny");
        let before = buf.capacity();
        assert_eq!(take_frame(&mut buf, 64 << 20), Ok(None));
        assert!(buf.capacity() <= before.max(64), "reserved {} bytes for a frame announced as 60 MiB", buf.capacity());
    }
}
