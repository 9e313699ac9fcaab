//! The key-value state machine: commands, results, and the store they run against.
//!
//! Keys and values are byte strings. Commands declare the keys they touch and whether they
//! write ([`Op::footprint`], [`Op::is_write`]) so that leaderless protocols (EPaxos, Nezha)
//! can decide interference / commutativity without knowing the operations.

use crate::params::Limits;
use bytes::Bytes;
use imbl::{OrdMap, OrdSet};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;

/// Condition of a conditional set (Redis `SET … NX | XX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SetCond {
    Always,
    /// Only if the key does not exist (NX).
    IfAbsent,
    /// Only if the key exists (XX).
    IfPresent,
}

/// One operation on the store.
///
/// The first group is the native API (get/put/delete/cas/scan); the second gives the Redis
/// front end its semantics (typed values: strings and hashes; expiry; multi-key commands that
/// are atomic because they are one log entry). Times (`expire_at_ms`) are wall-clock
/// milliseconds; whether a key has expired is decided against the state machine's clock,
/// which advances with the time stamped on each command ([`Command::now_ms`]), so every
/// replica decides the same.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    Get {
        key: Bytes,
    },
    /// Set a string value (and clear any expiry).
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
    /// String values only.
    Scan {
        start: Bytes,
        end: Bytes,
        limit: u32,
    },
    /// Does nothing; leaders commit it to fill holes or to mark a new term.
    Noop,

    /// Redis SET with its options. `expire_at_ms` sets an absolute expiry; `keep_ttl` keeps
    /// the existing one; otherwise any expiry is cleared. With `get`, the old value is returned.
    Set {
        key: Bytes,
        value: Bytes,
        cond: SetCond,
        expire_at_ms: Option<u64>,
        keep_ttl: bool,
        get: bool,
    },
    /// Values of several keys (MGET): strings, None for absent or non-string keys.
    MultiGet {
        keys: Vec<Bytes>,
    },
    /// Set several string values atomically (MSET).
    MultiPut {
        pairs: Vec<(Bytes, Bytes)>,
    },
    /// Delete several keys (DEL); returns how many existed.
    MultiDelete {
        keys: Vec<Bytes>,
    },
    /// How many of the keys exist (EXISTS; a key named twice counts twice).
    Exists {
        keys: Vec<Bytes>,
    },
    /// Add `by` to the integer in a string value (INCR/INCRBY/DECR); absent = 0.
    IncrBy {
        key: Bytes,
        by: i64,
    },
    /// Append to a string value (APPEND); returns the new length.
    Append {
        key: Bytes,
        value: Bytes,
    },
    /// Length of a string value (STRLEN); 0 if absent.
    Strlen {
        key: Bytes,
    },
    /// Get a string value and delete the key (GETDEL).
    GetDel {
        key: Bytes,
    },
    /// Set fields of a hash (HSET/HMSET); returns how many fields were new.
    HashSet {
        key: Bytes,
        pairs: Vec<(Bytes, Bytes)>,
    },
    /// Values of fields of a hash (HGET/HMGET/HEXISTS).
    HashGet {
        key: Bytes,
        fields: Vec<Bytes>,
    },
    /// All field/value pairs of a hash (HGETALL).
    HashGetAll {
        key: Bytes,
    },
    /// Delete fields of a hash (HDEL); returns how many existed. An empty hash is removed.
    HashDelete {
        key: Bytes,
        fields: Vec<Bytes>,
    },
    /// Number of fields in a hash (HLEN).
    HashLen {
        key: Bytes,
    },
    /// The type of a key: "string", "hash" or "none" (TYPE).
    Type {
        key: Bytes,
    },
    /// Keys after `after` (exclusive; empty = from the start) matching the glob `pattern`
    /// and, if `of_type` is set, whose [`Op::Type`] name is `of_type` (lower case), examining
    /// at most `count` keys (SCAN with a key cursor; like Redis, the type filter applies after
    /// the `count` keys are taken, so a batch may be empty before the scan is done).
    KeyScan {
        after: Bytes,
        pattern: Option<Bytes>,
        count: u32,
        of_type: Option<Bytes>,
    },
    /// Number of keys (DBSIZE).
    DbSize,
    /// Redis SET with a relative expiry (EX/PX, SETEX/PSETEX): [`Op::Set`] with `expire_at_ms`
    /// = the state machine's clock when the command is applied + `ttl_ms`. Relative rather
    /// than absolute so that the expiry is computed from the very clock that later decides it
    /// (the replicated `Command::now_ms` stamps), whichever replica received the command and
    /// however far the front end's clock is from the leader's.
    SetWithTtl {
        key: Bytes,
        value: Bytes,
        cond: SetCond,
        ttl_ms: u64,
        get: bool,
    },
    /// The modification versions of keys (WATCH): 0 for an absent key. A key's version is
    /// the stamp of the last command that wrote it ([`KvStore::apply_stamped`]), unique per
    /// command, so a delete-and-recreate is a change too.
    Versions {
        keys: Vec<Bytes>,
    },
    /// A transaction (MULTI/EXEC): the operations run in order, atomically (one log entry).
    /// If a key of `watch` no longer has the version given (WATCH … EXEC), nothing runs and
    /// the result is `Multi(None)`. A failing operation gives its error and the others still
    /// run, as in Redis.
    Multi {
        ops: Vec<Op>,
        watch: Vec<(Bytes, u64)>,
    },
    /// Set a key's expiry (EXPIRE/PEXPIRE/EXPIREAT/PEXPIREAT): `ms` is relative to the
    /// state-machine clock when `relative`, else an absolute time. A time at or before the
    /// clock deletes the key. Returns 1 if set (or deleted), 0 if the key is absent or `cond`
    /// does not hold.
    Expire {
        key: Bytes,
        ms: i64,
        relative: bool,
        cond: ExpireCond,
    },
    /// Remaining time to live in ms (TTL/PTTL): -2 absent, -1 no expiry.
    Ttl {
        key: Bytes,
    },
    /// Remove a key's expiry (PERSIST): 1 if it had one.
    Persist {
        key: Bytes,
    },
    /// Substring of a string value with Redis's index rules (GETRANGE); "" if absent.
    GetRange {
        key: Bytes,
        start: i64,
        end: i64,
    },
    /// Overwrite part of a string value, zero-padding (SETRANGE); returns the new length.
    SetRange {
        key: Bytes,
        offset: u64,
        value: Bytes,
    },
    /// Get a string value and change its expiry (GETEX): `expire` as in [`Op::Expire`]
    /// (`(ms, relative)`), or remove it with `persist`.
    GetEx {
        key: Bytes,
        expire: Option<(i64, bool)>,
        persist: bool,
    },
    /// Add a float to a string value (INCRBYFLOAT); `by` is the number's text as the client
    /// sent it (checked by the front end), so the sum can be exact in decimal.
    IncrByFloat {
        key: Bytes,
        by: Bytes,
    },
    /// Move a key's value and expiry to another key (RENAME, RENAMENX with `nx`).
    Rename {
        from: Bytes,
        to: Bytes,
        nx: bool,
    },
    /// Copy a key's value and expiry (COPY [REPLACE]); 1 if copied.
    Copy {
        from: Bytes,
        to: Bytes,
        replace: bool,
    },
    /// Delete every key (FLUSHDB/FLUSHALL).
    FlushAll,
    /// Push values onto a list (LPUSH/RPUSH, at the head when `left`); with `only_existing`,
    /// only onto an existing list (LPUSHX/RPUSHX). Returns the new length.
    ListPush {
        key: Bytes,
        values: Vec<Bytes>,
        left: bool,
        only_existing: bool,
    },
    /// Pop from a list (LPOP/RPOP): one value (`count` None) or up to `count` values.
    ListPop {
        key: Bytes,
        left: bool,
        count: Option<u64>,
    },
    /// Elements `start..=stop` with Redis's index rules (LRANGE).
    ListRange {
        key: Bytes,
        start: i64,
        stop: i64,
    },
    /// Length of a list (LLEN).
    ListLen {
        key: Bytes,
    },
    /// Element at an index, negative from the end (LINDEX).
    ListIndex {
        key: Bytes,
        index: i64,
    },
    /// Replace the element at an index (LSET).
    ListSet {
        key: Bytes,
        index: i64,
        value: Bytes,
    },
    /// Remove occurrences of a value (LREM): `count` > 0 from the head, < 0 from the tail,
    /// 0 all. Returns how many were removed.
    ListRemove {
        key: Bytes,
        count: i64,
        value: Bytes,
    },
    /// Keep only `start..=stop` (LTRIM).
    ListTrim {
        key: Bytes,
        start: i64,
        stop: i64,
    },
    /// Add to the integer in a hash field (HINCRBY); absent = 0.
    HashIncrBy {
        key: Bytes,
        field: Bytes,
        by: i64,
    },
    /// Add to the float in a hash field (HINCRBYFLOAT), like [`Op::IncrByFloat`].
    HashIncrByFloat {
        key: Bytes,
        field: Bytes,
        by: Bytes,
    },
    /// Set a hash field only if it is absent (HSETNX); 1 if set.
    HashSetNx {
        key: Bytes,
        field: Bytes,
        value: Bytes,
    },
    /// Length of a hash field's value (HSTRLEN); 0 if absent.
    HashStrlen {
        key: Bytes,
        field: Bytes,
    },
    /// Add members to a set (SADD); returns how many were new.
    SetAdd {
        key: Bytes,
        members: Vec<Bytes>,
    },
    /// Remove members from a set (SREM); returns how many were there.
    SetRemove {
        key: Bytes,
        members: Vec<Bytes>,
    },
    /// All members, in byte order (SMEMBERS).
    SetMembers {
        key: Bytes,
    },
    /// Whether a member is in a set (SISMEMBER).
    SetIsMember {
        key: Bytes,
        member: Bytes,
    },
    /// Number of members (SCARD).
    SetCard {
        key: Bytes,
    },
    /// Intersection, union or difference of sets (SINTER/SUNION/SDIFF); absent keys are
    /// empty sets.
    SetCombine {
        keys: Vec<Bytes>,
        kind: SetCombine,
    },
    /// Remove and return members (SPOP): one (`count` None) or up to `count`. Which ones is
    /// decided by the command's stamp (see [`KvStore::apply_stamped`]), so every replica
    /// removes the same members.
    SetPop {
        key: Bytes,
        count: Option<u64>,
    },
    /// Members chosen like [`Op::SetPop`]'s, without removing them (SRANDMEMBER): one, or
    /// `count` distinct ones (count > 0), or |count| possibly repeated ones (count < 0).
    SetRandMember {
        key: Bytes,
        count: Option<i64>,
    },
    /// Pop from one end of `from` and push onto one end of `to`, atomically (LMOVE).
    ListMove {
        from: Bytes,
        to: Bytes,
        from_left: bool,
        to_left: bool,
    },
    // Sorted sets: after every older variant, so that WALs and snapshots written before
    // them (postcard numbers variants in order) still decode.
    /// ZADD: `pairs` are (score text, member), checked by the front end. NX/XX/GT/LT/CH as in
    /// Redis; with `incr` (one pair) the score is added, like ZINCRBY, and the new score (or
    /// None when a condition prevented it) is returned.
    ZAdd {
        key: Bytes,
        pairs: Vec<(Bytes, Bytes)>,
        flags: ZAddFlags,
    },
    /// Remove members (ZREM); returns how many were there.
    ZRem {
        key: Bytes,
        members: Vec<Bytes>,
    },
    /// Score of a member (ZSCORE), as Redis prints it.
    ZScore {
        key: Bytes,
        member: Bytes,
    },
    /// Scores of several members, None for a missing one (ZMSCORE).
    ZMScore {
        key: Bytes,
        members: Vec<Bytes>,
    },
    /// Number of members (ZCARD).
    ZCard {
        key: Bytes,
    },
    /// Rank of a member, by ascending score (or descending with `rev`) (ZRANK/ZREVRANK).
    ZRank {
        key: Bytes,
        member: Bytes,
        rev: bool,
    },
    /// Members with a score within the bounds (ZCOUNT).
    ZCount {
        key: Bytes,
        min: ScoreBound,
        max: ScoreBound,
    },
    /// Members within a lexicographic range (ZLEXCOUNT).
    ZLexCount {
        key: Bytes,
        min: LexBound,
        max: LexBound,
    },
    /// Members (with their scores when `with_scores`) by rank, score or name (ZRANGE,
    /// ZRANGEBYSCORE, ZREVRANGE): `limit` is (offset, count), count < 0 = all.
    ZRange {
        key: Bytes,
        by: ZRangeBy,
        rev: bool,
        limit: Option<(i64, i64)>,
        with_scores: bool,
    },
    /// Remove and return the lowest (or highest with `max`) members and scores (ZPOPMIN/MAX).
    ZPop {
        key: Bytes,
        max: bool,
        count: u64,
    },
    // New variants go last: a variant's index is its encoding in WAL records and snapshots.
    /// HSCAN / SSCAN / ZSCAN: the members of the hash, set or sorted set at `key` (refused
    /// with WRONGTYPE if it holds another type) after `after` (exclusive; empty = from the
    /// start) in member order, matching the glob `pattern`, examining at most `count`. A hash
    /// gives field, value, field, value, …; a sorted set member, score, …; a set members.
    MemberScan {
        key: Bytes,
        of: ScanOf,
        after: Bytes,
        pattern: Option<Bytes>,
        count: u32,
    },
    /// Fields of a hash chosen like [`Op::SetRandMember`]'s members (HRANDFIELD): one
    /// (`count` None), `count` distinct ones (count > 0) or |count| possibly repeated ones
    /// (count < 0); with `with_values` each field is followed by its value.
    HashRandField {
        key: Bytes,
        count: Option<i64>,
        with_values: bool,
    },
    /// The encoding redis-server 7.0 would report for the value at `key` (OBJECT ENCODING),
    /// computed from the value under Redis's default thresholds; null for a missing key.
    ObjectEncoding {
        key: Bytes,
    },
    /// SCAN / HSCAN / SSCAN / ZSCAN continued from a cursor the serving replica does not
    /// remember (handed out by another replica before a failover, or before a restart). A
    /// cursor is the [`scan_fingerprint`] of the key (member) the scan continues after; the
    /// state machine takes the smallest key (member) with that fingerprint and continues after
    /// it exactly as [`Op::KeyScan`] / [`Op::MemberScan`]. If none has it (deleted since), the
    /// scan starts again from the beginning: Redis's SCAN contract allows an element to be
    /// returned more than once, never to be missed. Linear in the collection, once per cursor
    /// that changes replica.
    ScanResume {
        target: ScanTarget,
        fingerprint: u64,
        pattern: Option<Bytes>,
        count: u32,
    },
}

/// What a resumed scan ([`Op::ScanResume`]) walks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScanTarget {
    /// The key space (SCAN), keys of type `of_type` only if set ([`Op::KeyScan`]).
    Keys { of_type: Option<Bytes> },
    /// The members of the hash, set or sorted set at `key` (HSCAN, SSCAN, ZSCAN).
    Members { key: Bytes, of: ScanOf },
}

/// The SCAN cursor standing for a key or member: 64-bit FNV-1a of its bytes (a fixed function,
/// so every replica and every version computes the same cursor), never 0 (cursor 0 means
/// "start" and "done" in Redis).
pub fn scan_fingerprint(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.max(1)
}

/// Options of ZADD.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ZAddFlags {
    pub nx: bool,
    pub xx: bool,
    pub gt: bool,
    pub lt: bool,
    pub ch: bool,
    pub incr: bool,
}

/// One end of a score range: the f64's bits, and whether the end is excluded (`(1.5`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ScoreBound {
    pub bits: u64,
    pub exclusive: bool,
}

impl ScoreBound {
    pub fn new(x: f64, exclusive: bool) -> ScoreBound {
        ScoreBound { bits: x.to_bits(), exclusive }
    }

    fn below_or_at(&self, x: f64) -> bool {
        let b = f64::from_bits(self.bits);
        if self.exclusive {
            b < x
        } else {
            b <= x
        }
    }

    fn above_or_at(&self, x: f64) -> bool {
        let b = f64::from_bits(self.bits);
        if self.exclusive {
            b > x
        } else {
            b >= x
        }
    }
}

/// How ZRANGE selects.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ZRangeBy {
    /// Ranks, Redis index rules (negative from the end).
    Index { start: i64, stop: i64 },
    /// Scores within [min, max] (the bounds as given, whatever `rev`).
    Score { min: ScoreBound, max: ScoreBound },
    /// Members within [min, max] by bytes (BYLEX; meant for sets whose scores are all equal,
    /// as in Redis, where the order of members with different scores is unspecified).
    Lex { min: LexBound, max: LexBound },
}

/// One end of a lexicographic range: `-`, `+`, `[member` (included), `(member` (excluded).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LexBound {
    Min,
    Max,
    Included(Bytes),
    Excluded(Bytes),
}

impl LexBound {
    /// Redis's syntax; None for anything else.
    pub fn parse(v: &[u8]) -> Option<LexBound> {
        match v {
            b"-" => Some(LexBound::Min),
            b"+" => Some(LexBound::Max),
            [b'[', rest @ ..] => Some(LexBound::Included(Bytes::copy_from_slice(rest))),
            [b'(', rest @ ..] => Some(LexBound::Excluded(Bytes::copy_from_slice(rest))),
            _ => None,
        }
    }

    /// Whether `m` is at or after this bound taken as a minimum.
    fn admits_from_below(&self, m: &[u8]) -> bool {
        match self {
            LexBound::Min => true,
            LexBound::Max => false,
            LexBound::Included(b) => m >= &b[..],
            LexBound::Excluded(b) => m > &b[..],
        }
    }

    /// Whether `m` is at or before this bound taken as a maximum.
    fn admits_from_above(&self, m: &[u8]) -> bool {
        match self {
            LexBound::Min => false,
            LexBound::Max => true,
            LexBound::Included(b) => m <= &b[..],
            LexBound::Excluded(b) => m < &b[..],
        }
    }

    /// The member it names (empty for `-` and `+`).
    fn name(&self) -> &[u8] {
        match self {
            LexBound::Min | LexBound::Max => b"",
            LexBound::Included(b) | LexBound::Excluded(b) => b,
        }
    }
}

/// A sorted-set score: an f64 with a total order (never NaN, -0 stored as 0).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Score(pub f64);

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0).is_eq()
    }
}
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A sorted set: members by name and by (score, member), and its size in bytes (members and
/// 8 per score) kept up to date, so that a write costs O(log n), not a pass over the set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZSet {
    scores: BTreeMap<Bytes, Score>,
    order: BTreeSet<(Score, Bytes)>,
    size: usize,
}

impl ZSet {
    fn insert(&mut self, member: Bytes, score: f64) {
        let score = Score(if score == 0.0 { 0.0 } else { score });
        match self.scores.insert(member.clone(), score) {
            Some(old) => {
                self.order.remove(&(old, member.clone()));
            }
            None => self.size += member.len() + 8,
        }
        self.order.insert((score, member));
    }

    fn remove(&mut self, member: &Bytes) -> bool {
        match self.scores.remove(member) {
            Some(old) => {
                self.size -= member.len() + 8;
                self.order.remove(&(old, member.clone()))
            }
            None => false,
        }
    }

    fn len(&self) -> usize {
        self.scores.len()
    }
}

/// A score as Redis 7.0 prints one: C's `%.17g` (`0.10000000000000001`, `1e+20`, `inf`).
pub fn format_score(x: f64) -> String {
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return "0".into();
    }
    let sci = format!("{x:.16e}");
    let (mantissa, exp) = sci.split_once('e').expect("exponent");
    let exp: i32 = exp.parse().expect("exponent");
    let trim = |m: &str| -> String {
        if m.contains('.') {
            m.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            m.to_string()
        }
    };
    if !(-4..17).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        let decimals = (16 - exp).max(0) as usize;
        trim(&format!("{x:.decimals$}"))
    }
}

/// A score as Redis parses one (ZADD, ZINCRBY): a float, infinities allowed, NaN refused.
pub fn parse_score(v: &[u8]) -> Option<f64> {
    parse_f64(v)
}

/// The type [`Op::MemberScan`] expects at its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScanOf {
    Hash,
    Set,
    ZSet,
}

/// Which combination of sets [`Op::SetCombine`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SetCombine {
    Inter,
    Union,
    /// The first set minus all the others.
    Diff,
}

/// Condition of an expiry change (EXPIRE … NX | XX | GT | LT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ExpireCond {
    Always,
    /// Only if the key has no expiry.
    IfNone,
    /// Only if the key has an expiry.
    IfSome,
    /// Only if the new expiry is later than the current one (no expiry = infinitely late).
    Greater,
    /// Only if the new expiry is earlier than the current one (no expiry = infinitely late).
    Less,
}

/// What an operation touches, for interference checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Footprint<'a> {
    None,
    Keys(Vec<&'a [u8]>),
    Range {
        start: &'a [u8],
        end: &'a [u8],
    },
    /// The whole key space (DBSIZE, SCAN).
    All,
}

impl Op {
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Op::Put { .. }
                | Op::Delete { .. }
                | Op::Cas { .. }
                | Op::Set { .. }
                | Op::SetWithTtl { .. }
                | Op::MultiPut { .. }
                | Op::MultiDelete { .. }
                | Op::IncrBy { .. }
                | Op::Append { .. }
                | Op::GetDel { .. }
                | Op::HashSet { .. }
                | Op::HashDelete { .. }
                | Op::Expire { .. }
                | Op::Persist { .. }
                | Op::SetRange { .. }
                | Op::GetEx { .. }
                | Op::IncrByFloat { .. }
                | Op::Rename { .. }
                | Op::Copy { .. }
                | Op::FlushAll
                | Op::ListPush { .. }
                | Op::ListPop { .. }
                | Op::ListSet { .. }
                | Op::ListRemove { .. }
                | Op::ListTrim { .. }
                | Op::ListMove { .. }
                | Op::SetAdd { .. }
                | Op::SetRemove { .. }
                | Op::SetPop { .. }
                | Op::HashIncrBy { .. }
                | Op::HashIncrByFloat { .. }
                | Op::HashSetNx { .. }
                | Op::ZAdd { .. }
                | Op::ZRem { .. }
                | Op::ZPop { .. }
        ) || matches!(self, Op::Multi { ops, .. } if ops.iter().any(Op::is_write))
    }

    pub fn footprint(&self) -> Footprint<'_> {
        match self {
            Op::Get { key }
            | Op::Put { key, .. }
            | Op::Delete { key }
            | Op::Cas { key, .. }
            | Op::Set { key, .. }
            | Op::SetWithTtl { key, .. }
            | Op::IncrBy { key, .. }
            | Op::Append { key, .. }
            | Op::Strlen { key }
            | Op::GetDel { key }
            | Op::HashSet { key, .. }
            | Op::HashGet { key, .. }
            | Op::HashGetAll { key }
            | Op::MemberScan { key, .. }
            | Op::HashDelete { key, .. }
            | Op::HashLen { key }
            | Op::Type { key }
            | Op::Expire { key, .. }
            | Op::Ttl { key }
            | Op::Persist { key }
            | Op::GetRange { key, .. }
            | Op::SetRange { key, .. }
            | Op::GetEx { key, .. }
            | Op::IncrByFloat { key, .. }
            | Op::ListPush { key, .. }
            | Op::ListPop { key, .. }
            | Op::ListRange { key, .. }
            | Op::ListLen { key }
            | Op::ListIndex { key, .. }
            | Op::ListSet { key, .. }
            | Op::ListRemove { key, .. }
            | Op::ListTrim { key, .. }
            | Op::SetAdd { key, .. }
            | Op::SetRemove { key, .. }
            | Op::SetMembers { key }
            | Op::SetIsMember { key, .. }
            | Op::SetCard { key }
            | Op::SetPop { key, .. }
            | Op::SetRandMember { key, .. }
            | Op::HashIncrBy { key, .. }
            | Op::HashIncrByFloat { key, .. }
            | Op::HashSetNx { key, .. }
            | Op::HashStrlen { key, .. }
            | Op::ZAdd { key, .. }
            | Op::ZRem { key, .. }
            | Op::ZScore { key, .. }
            | Op::ZMScore { key, .. }
            | Op::ZCard { key }
            | Op::ZRank { key, .. }
            | Op::ZCount { key, .. }
            | Op::ZLexCount { key, .. }
            | Op::ZRange { key, .. }
            | Op::ZPop { key, .. }
            | Op::HashRandField { key, .. }
            | Op::ObjectEncoding { key }
            | Op::ScanResume { target: ScanTarget::Members { key, .. }, .. } => Footprint::Keys(vec![key]),
            Op::SetCombine { keys, .. } => Footprint::Keys(keys.iter().map(|k| &k[..]).collect()),
            Op::Rename { from, to, .. } | Op::Copy { from, to, .. } | Op::ListMove { from, to, .. } => {
                Footprint::Keys(vec![from, to])
            }
            Op::MultiGet { keys } | Op::MultiDelete { keys } | Op::Exists { keys } | Op::Versions { keys } => {
                Footprint::Keys(keys.iter().map(|k| &k[..]).collect())
            }
            Op::MultiPut { pairs } => Footprint::Keys(pairs.iter().map(|(k, _)| &k[..]).collect()),
            Op::Scan { start, end, .. } => Footprint::Range { start, end },
            Op::KeyScan { .. } | Op::ScanResume { target: ScanTarget::Keys { .. }, .. } | Op::DbSize | Op::FlushAll => {
                Footprint::All
            }
            Op::Noop => Footprint::None,
            Op::Multi { ops, watch } => {
                // The union of the parts and the watched keys; a range or the whole key
                // space in any part makes the whole transaction a whole-keyspace operation
                // (conservative: it then interferes with everything, which is safe).
                let mut keys: Vec<&[u8]> = watch.iter().map(|(k, _)| &k[..]).collect();
                for op in ops {
                    match op.footprint() {
                        Footprint::None => {}
                        Footprint::Keys(ks) => keys.extend(ks),
                        Footprint::Range { .. } | Footprint::All => return Footprint::All,
                    }
                }
                if keys.is_empty() {
                    Footprint::None
                } else {
                    Footprint::Keys(keys)
                }
            }
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
            (Footprint::All, _) | (_, Footprint::All) => true,
            (Footprint::Keys(a), Footprint::Keys(b)) => a.iter().any(|k| b.contains(k)),
            (Footprint::Keys(ks), Footprint::Range { start, end })
            | (Footprint::Range { start, end }, Footprint::Keys(ks)) => ks.iter().any(|k| in_range(k, start, end)),
            (Footprint::Range { start: s1, end: e1 }, Footprint::Range { start: s2, end: e2 }) => {
                (e2.is_empty() || s1 < e2) && (e1.is_empty() || s2 < e1)
            }
        }
    }

    /// Approximate size in bytes (for batching limits and bandwidth accounting).
    pub fn size(&self) -> usize {
        let mut n = 0;
        self.for_each_name(&mut |k| n += k.len());
        self.for_each_value(&mut |v| n += v.len());
        n
    }

    /// Every key and every name inside a key (hash field, set or sorted-set member, scan bound
    /// or pattern) the operation carries: what counts against `max_key_bytes` and towards
    /// [`Op::size`]. The keys come from [`Op::footprint`], the one list of what each operation
    /// touches; only the names inside a key are listed here.
    fn for_each_name(&self, f: &mut dyn FnMut(&[u8])) {
        if let Op::Multi { ops, watch } = self {
            // Not the footprint: a range in one part widens that to the whole key space.
            watch.iter().for_each(|(k, _)| f(k));
            ops.iter().for_each(|op| op.for_each_name(f));
            return;
        }
        match self.footprint() {
            Footprint::Keys(keys) => keys.into_iter().for_each(&mut *f),
            Footprint::Range { start, end } => {
                f(start);
                f(end);
            }
            Footprint::None | Footprint::All => {}
        }
        match self {
            Op::HashSet { pairs, .. } => pairs.iter().for_each(|(field, _)| f(field)),
            Op::ZAdd { pairs, .. } => pairs.iter().for_each(|(_, member)| f(member)),
            Op::HashGet { fields: names, .. }
            | Op::HashDelete { fields: names, .. }
            | Op::SetAdd { members: names, .. }
            | Op::SetRemove { members: names, .. }
            | Op::ZRem { members: names, .. }
            | Op::ZMScore { members: names, .. } => names.iter().for_each(|n| f(n)),
            Op::SetIsMember { member: name, .. }
            | Op::ZScore { member: name, .. }
            | Op::ZRank { member: name, .. }
            | Op::HashIncrBy { field: name, .. }
            | Op::HashIncrByFloat { field: name, .. }
            | Op::HashSetNx { field: name, .. }
            | Op::HashStrlen { field: name, .. } => f(name),
            Op::KeyScan { after, pattern, of_type, .. } => {
                f(after);
                pattern.iter().chain(of_type).for_each(|p| f(p));
            }
            Op::MemberScan { after, pattern, .. } => {
                f(after);
                if let Some(p) = pattern {
                    f(p);
                }
            }
            Op::ScanResume { target: ScanTarget::Keys { of_type }, pattern, .. } => {
                pattern.iter().chain(of_type).for_each(|p| f(p))
            }
            Op::ScanResume { pattern: Some(p), .. } => f(p),
            Op::ZLexCount { min, max, .. } | Op::ZRange { by: ZRangeBy::Lex { min, max }, .. } => {
                f(min.name());
                f(max.name());
            }
            // Operations whose only names are their keys.
            _ => {}
        }
    }

    fn for_each_value(&self, f: &mut dyn FnMut(&Bytes)) {
        match self {
            Op::Put { value, .. }
            | Op::Set { value, .. }
            | Op::SetWithTtl { value, .. }
            | Op::Append { value, .. }
            | Op::SetRange { value, .. }
            | Op::IncrByFloat { by: value, .. }
            | Op::ListSet { value, .. }
            | Op::ListRemove { value, .. }
            | Op::HashIncrByFloat { by: value, .. }
            | Op::HashSetNx { value, .. } => f(value),
            Op::ListPush { values, .. } => values.iter().for_each(f),
            Op::Cas { expect, new, .. } => {
                expect.iter().for_each(&mut *f);
                new.iter().for_each(f);
            }
            Op::MultiPut { pairs } | Op::HashSet { pairs, .. } => pairs.iter().for_each(|(_, v)| f(v)),
            Op::Multi { ops, .. } => ops.iter().for_each(|op| op.for_each_value(f)),
            _ => {}
        }
    }

    /// Check the operation against the limits; the error is what the client is told.
    pub fn validate(&self, limits: &Limits) -> Result<(), CommandError> {
        let mut err = None;
        self.for_each_name(&mut |k| {
            if k.len() > limits.max_key_bytes && err.is_none() {
                err = Some(CommandError::KeyTooLarge { size: k.len(), limit: limits.max_key_bytes });
            }
        });
        self.for_each_value(&mut |v| {
            if v.len() > limits.max_value_bytes && err.is_none() {
                err = Some(CommandError::ValueTooLarge { size: v.len(), limit: limits.max_value_bytes });
            }
        });
        // SETRANGE pads with zeros up to its offset: the string it makes is what counts.
        self.for_each_setrange(&mut |offset, len| {
            let size = offset.saturating_add(len as u64);
            if len > 0 && size > limits.max_value_bytes as u64 && err.is_none() {
                err = Some(CommandError::ValueTooLarge {
                    size: size.min(usize::MAX as u64) as usize,
                    limit: limits.max_value_bytes,
                });
            }
        });
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Op {
    fn for_each_setrange(&self, f: &mut dyn FnMut(u64, usize)) {
        match self {
            Op::SetRange { offset, value, .. } => f(*offset, value.len()),
            Op::Multi { ops, .. } => ops.iter().for_each(|op| op.for_each_setrange(f)),
            _ => {}
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
    /// Wall-clock time (ms since the Unix epoch) stamped by the replica that received the
    /// request from the client, overwriting whatever the client sent (client clocks are not
    /// trusted). It becomes part of the logged command, so every replica advances its state
    /// machine clock identically when it applies the command; expiry (EX/PX) is decided
    /// against that clock. 0 = unstamped (internal commands): the clock does not move.
    pub now_ms: u64,
    pub op: Op,
}

impl Command {
    /// A no-op command outside any session (client 0).
    pub fn noop() -> Command {
        Command { client: 0, seq: 0, acked_below: 0, now_ms: 0, op: Op::Noop }
    }
}

/// The result of an operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpResult {
    /// Get / GetDel / Set with `get`: the value, or None if absent.
    Value(Option<Bytes>),
    /// Put / Noop / MultiPut.
    Done,
    /// Delete: whether the key existed.
    Deleted(bool),
    /// Cas: whether the swap happened, and the value found.
    Cas { ok: bool, current: Option<Bytes> },
    /// Scan / HashGetAll: pairs in key order.
    Scan(Vec<(Bytes, Bytes)>),
    /// Set without `get`: whether the condition held and the value was written.
    Applied(bool),
    /// Counts, lengths, integers (DEL, EXISTS, INCR, APPEND, STRLEN, HSET, HDEL, HLEN, DBSIZE).
    Int(i64),
    /// MultiGet / HashGet: one entry per key or field.
    Values(Vec<Option<Bytes>>),
    /// Type: "string", "hash" or "none".
    Text(String),
    /// KeyScan: matching keys, and the cursor to continue after (None = done).
    Keys { keys: Vec<Bytes>, next: Option<Bytes> },
    /// The state machine refused the command (deterministically, on every replica).
    Error(String),
    /// Versions: one per key (0 = absent).
    Versions(Vec<u64>),
    /// Multi: the result of each operation, or None when a watched key had changed.
    Multi(Option<Vec<OpResult>>),
    /// Elements (LRANGE, LPOP with a count; None = the key did not exist).
    Items(Option<Vec<Bytes>>),
}

/// Redis's error for an operation on a key holding the wrong kind of value.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A stored value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Value {
    Str(Bytes),
    Hash(BTreeMap<Bytes, Bytes>),
    List(VecDeque<Bytes>),
    Set(BTreeSet<Bytes>),
    ZSet(ZSet),
}

/// Redis 7.0's built-in defaults (what `CONFIG GET` shows when redis-server runs without a
/// config file; the sample redis.conf lowers the hash one to 128) under which a small hash
/// or sorted set is kept as a listpack and an all-integer set as an intset.
const HASH_LISTPACK_MAX_ENTRIES: usize = 512;
const ZSET_LISTPACK_MAX_ENTRIES: usize = 128;
const LISTPACK_MAX_VALUE: usize = 64;
const INTSET_MAX_ENTRIES: usize = 512;
/// Strings up to this length are "embstr" (one allocation with the object header).
const EMBSTR_MAX: usize = 44;

/// Whether Redis would store `v` as an integer: it reads as an i64 and prints back the same
/// (string2ll: no sign `+`, no leading zeros or spaces, not `-0`).
fn is_canonical_int(v: &[u8]) -> bool {
    v.len() <= 20
        && std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .is_some_and(|n| n.to_string().as_bytes() == v)
}

impl Value {
    /// Its TYPE name, as Redis says it (also what `SCAN … TYPE` filters on).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
        }
    }

    /// What redis-server 7.0 reports as OBJECT ENCODING for this value when it was built by
    /// plain writes: computed from the value itself, so it differs from Redis where Redis's
    /// answer depends on history (an APPENDed or SETRANGEd string is "raw" there; a hash, set
    /// or sorted set that once grew past a threshold stays converted after shrinking).
    pub fn encoding(&self) -> &'static str {
        match self {
            Value::Str(v) if is_canonical_int(v) => "int",
            Value::Str(v) if v.len() <= EMBSTR_MAX => "embstr",
            Value::Str(_) => "raw",
            Value::Hash(h) => {
                let small = h.len() <= HASH_LISTPACK_MAX_ENTRIES
                    && h.iter().all(|(f, v)| f.len() <= LISTPACK_MAX_VALUE && v.len() <= LISTPACK_MAX_VALUE);
                if small {
                    "listpack"
                } else {
                    "hashtable"
                }
            }
            // Redis 7.0 keeps every list as a quicklist (listpack lists came in 7.2).
            Value::List(_) => "quicklist",
            // Redis 7.0: an intset while every member is an integer, else a hashtable
            // (listpack sets came in 7.2).
            Value::Set(m) => {
                if m.len() <= INTSET_MAX_ENTRIES && m.iter().all(|x| is_canonical_int(x)) {
                    "intset"
                } else {
                    "hashtable"
                }
            }
            Value::ZSet(z) => {
                let small =
                    z.len() <= ZSET_LISTPACK_MAX_ENTRIES && z.scores.keys().all(|m| m.len() <= LISTPACK_MAX_VALUE);
                if small {
                    "listpack"
                } else {
                    "skiplist"
                }
            }
        }
    }

    fn size(&self) -> usize {
        match self {
            Value::Str(b) => b.len(),
            Value::Hash(h) => h.iter().map(|(f, v)| f.len() + v.len()).sum(),
            Value::List(l) => l.iter().map(|v| v.len()).sum(),
            Value::Set(m) => m.iter().map(|v| v.len()).sum(),
            Value::ZSet(z) => z.size,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Item {
    value: Value,
    expire_at_ms: Option<u64>,
    /// Stamp of the command that last wrote the key (WATCH compares it).
    version: u64,
}

/// The ordered key-value store with typed values and expiry.
///
/// The maps are persistent B-trees (`imbl`): cloning the store is O(1) and later writes copy
/// only the paths they touch. That is what lets a replica take a snapshot without stopping:
/// the node loop clones the state at the requested log position (microseconds, whatever the
/// size) and serializes the clone on another thread while it keeps applying commands. With
/// `std` B-trees the clone alone costs as much as the serialization (see
/// `benches/snapshot.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvStore {
    #[serde(deserialize_with = "crate::bounded_serde::ord_map")]
    map: OrdMap<Bytes, Item>,
    /// Expiry index: (expire_at_ms, key), so expired keys are purged deterministically.
    #[serde(deserialize_with = "crate::bounded_serde::ord_set")]
    expiries: OrdSet<(u64, Bytes)>,
    bytes: usize,
    /// The stamp of the command being applied (set by [`KvStore::apply_stamped`] for the
    /// duration of one command, 0 between commands): every key it writes gets it as version.
    stamp: u64,
}

impl KvStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of keys (expired keys are purged on the next operation).
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

    /// The string value stored under `key`, ignoring expiry (inspection and tests).
    pub fn get(&self, key: &[u8]) -> Option<&Bytes> {
        match self.map.get(key) {
            Some(Item { value: Value::Str(v), .. }) => Some(v),
            _ => None,
        }
    }

    fn insert(&mut self, key: Bytes, value: Value, expire_at_ms: Option<u64>) {
        // An existing key is updated in place: one path through the persistent tree (which
        // copies the nodes it touches) instead of a remove and an insert (they were 7% of a
        // follower's CPU under YCSB-A, docs/performance.md).
        let stamp = self.stamp;
        if let Some(item) = self.map.get_mut(&key[..]) {
            self.bytes = self.bytes - item.value.size() + value.size();
            let old_expiry = std::mem::replace(&mut item.expire_at_ms, expire_at_ms);
            item.version = if stamp != 0 { stamp } else { item.version + 1 };
            item.value = value;
            if old_expiry != expire_at_ms {
                if let Some(t) = old_expiry {
                    self.expiries.remove(&(t, key.clone()));
                }
                if let Some(t) = expire_at_ms {
                    self.expiries.insert((t, key));
                }
            }
            return;
        }
        self.bytes += key.len() + value.size();
        if let Some(t) = expire_at_ms {
            self.expiries.insert((t, key.clone()));
        }
        // Without a stamp (plain `apply`), a per-key counter: enough to see changes, but a
        // deleted and recreated key may repeat a version; replicas always stamp.
        let version = if stamp != 0 { stamp } else { 1 };
        self.map.insert(key, Item { value, expire_at_ms, version });
    }

    fn version(&self, key: &[u8]) -> u64 {
        self.map.get(key).map_or(0, |i| i.version)
    }

    fn remove(&mut self, key: &[u8]) -> Option<(Value, u64)> {
        let (k, item) = self.map.remove_with_key(key)?;
        self.bytes -= k.len() + item.value.size();
        if let Some(t) = item.expire_at_ms {
            self.expiries.remove(&(t, k));
        }
        Some((item.value, item.version))
    }

    /// Change a key's expiry (the key exists), keeping its value; a version bump like any write.
    fn set_expiry(&mut self, key: &Bytes, expire_at_ms: Option<u64>) {
        if let Some((value, _)) = self.remove(key) {
            self.insert(key.clone(), value, expire_at_ms);
        }
    }

    /// Drop every key whose expiry is at or before `now_ms`.
    fn purge_expired(&mut self, now_ms: u64) {
        while let Some((t, key)) = self.expiries.get_min().cloned() {
            if t > now_ms {
                break;
            }
            self.remove(&key);
        }
    }

    fn string(&self, key: &[u8]) -> Result<Option<&Bytes>, OpResult> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Item { value: Value::Str(v), .. }) => Ok(Some(v)),
            Some(_) => Err(OpResult::Error(WRONGTYPE.into())),
        }
    }

    fn hash(&self, key: &[u8]) -> Result<Option<&BTreeMap<Bytes, Bytes>>, OpResult> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Item { value: Value::Hash(h), .. }) => Ok(Some(h)),
            Some(_) => Err(OpResult::Error(WRONGTYPE.into())),
        }
    }

    fn list(&self, key: &[u8]) -> Result<Option<&VecDeque<Bytes>>, OpResult> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Item { value: Value::List(l), .. }) => Ok(Some(l)),
            Some(_) => Err(OpResult::Error(WRONGTYPE.into())),
        }
    }

    fn set(&self, key: &[u8]) -> Result<Option<&BTreeSet<Bytes>>, OpResult> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Item { value: Value::Set(m), .. }) => Ok(Some(m)),
            Some(_) => Err(OpResult::Error(WRONGTYPE.into())),
        }
    }

    fn zset(&self, key: &[u8]) -> Result<Option<&ZSet>, OpResult> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Item { value: Value::ZSet(z), .. }) => Ok(Some(z)),
            Some(_) => Err(OpResult::Error(WRONGTYPE.into())),
        }
    }

    /// SCAN: keys after `after` (exclusive; empty = from the start) in key order, examining at
    /// most `count`, those matching `pattern`; and the key to continue after when more follow.
    fn key_scan(&self, after: &Bytes, pattern: &Option<Bytes>, count: u32, of_type: &Option<Bytes>) -> OpResult {
        let lower = if after.is_empty() { Bound::Unbounded } else { Bound::Excluded(after.clone()) };
        let mut keys = Vec::new();
        let mut last = None;
        for (k, item) in self.map.range((lower, Bound::Unbounded)).take(count.max(1) as usize) {
            last = Some(k.clone());
            if pattern.as_ref().is_none_or(|p| glob_match(p, k))
                && of_type.as_ref().is_none_or(|t| t[..] == *item.value.type_name().as_bytes())
            {
                keys.push(k.clone());
            }
        }
        let more = last
            .as_ref()
            .is_some_and(|l| self.map.range((Bound::Excluded(l.clone()), Bound::Unbounded)).next().is_some());
        OpResult::Keys { keys, next: if more { last } else { None } }
    }

    /// HSCAN / SSCAN / ZSCAN: like [`KvStore::key_scan`] over the members of one collection.
    fn member_scan(
        &self,
        key: &[u8],
        of: ScanOf,
        after: &Bytes,
        pattern: &Option<Bytes>,
        count: u32,
    ) -> Result<OpResult, OpResult> {
        let lower = if after.is_empty() { Bound::Unbounded } else { Bound::Excluded(after.clone()) };
        let range = (lower, Bound::Unbounded);
        let take = count.max(1) as usize;
        let keep = |m: &Bytes| pattern.as_ref().is_none_or(|p| glob_match(p, m));
        // (member, what follows it in the reply), in member order; and whether more follow.
        let (found, more): (Vec<(Bytes, Option<Bytes>)>, bool) = match of {
            ScanOf::Hash => match self.hash(key)? {
                None => (Vec::new(), false),
                Some(h) => {
                    let mut it = h.range(range).map(|(f, v)| (f.clone(), Some(v.clone())));
                    (it.by_ref().take(take).collect(), it.next().is_some())
                }
            },
            ScanOf::Set => match self.set(key)? {
                None => (Vec::new(), false),
                Some(m) => {
                    let mut it = m.range(range).map(|x| (x.clone(), None));
                    (it.by_ref().take(take).collect(), it.next().is_some())
                }
            },
            ScanOf::ZSet => match self.zset(key)? {
                None => (Vec::new(), false),
                Some(z) => {
                    let mut it =
                        z.scores.range(range).map(|(m, sc)| (m.clone(), Some(Bytes::from(format_score(sc.0)))));
                    (it.by_ref().take(take).collect(), it.next().is_some())
                }
            },
        };
        let next = if more { found.last().map(|(m, _)| m.clone()) } else { None };
        let keys = found.into_iter().filter(|(m, _)| keep(m)).flat_map(|(m, v)| std::iter::once(m).chain(v)).collect();
        Ok(OpResult::Keys { keys, next })
    }

    /// Change the sorted set under `key` in place (O(log n) per member, where copying it would
    /// be O(n)): `change` gets the set, or a new empty one when the key does not exist, and
    /// returns its result and whether it changed the set. It must fail before changing
    /// anything. A change bumps the key's version (as every write does; its expiry stays); a set
    /// left empty removes the key, a new empty one is not stored.
    fn change_zset<R>(
        &mut self,
        key: &Bytes,
        change: impl FnOnce(&mut ZSet) -> Result<(R, bool), OpResult>,
    ) -> Result<R, OpResult> {
        if self.zset(key)?.is_none() {
            let mut z = ZSet::default();
            let (r, _) = change(&mut z)?;
            if z.len() > 0 {
                self.insert(key.clone(), Value::ZSet(z), None);
            }
            return Ok(r);
        }
        let stamp = self.stamp;
        let Some(Item { value: Value::ZSet(z), version, .. }) = self.map.get_mut(key) else {
            return Err(OpResult::Error(WRONGTYPE.into()));
        };
        let before = z.size;
        let (r, changed) = change(z)?;
        let (after, empty) = (z.size, z.len() == 0);
        if changed {
            *version = if stamp != 0 { stamp } else { *version + 1 };
        }
        self.bytes = self.bytes - before + after;
        if empty {
            self.remove(key);
        }
        Ok(r)
    }

    /// Store a set under `key`, keeping the key's expiry; an empty set removes the key.
    fn put_set(&mut self, key: &Bytes, m: BTreeSet<Bytes>) {
        if m.is_empty() {
            self.remove(key);
        } else {
            let ttl = self.map.get(key).and_then(|i| i.expire_at_ms);
            self.insert(key.clone(), Value::Set(m), ttl);
        }
    }

    /// Deterministic "random" indexes below `len` for SPOP/SRANDMEMBER: a mix of the
    /// command's stamp (the same on every replica) and the draw number.
    fn pick(&self, draw: u64, len: usize) -> usize {
        let mut h = self.stamp ^ draw.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        (h % len.max(1) as u64) as usize
    }

    /// `n` distinct members of `pool` chosen by [`KvStore::pick`].
    fn pick_distinct<T>(&self, mut pool: Vec<T>, n: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(n.min(pool.len()));
        for draw in 0..n.min(pool.len()) {
            let i = self.pick(draw as u64, pool.len());
            out.push(pool.swap_remove(i));
        }
        out
    }

    /// Store a list under `key`, keeping the key's expiry; an empty list removes the key.
    fn put_list(&mut self, key: &Bytes, l: VecDeque<Bytes>) {
        if l.is_empty() {
            self.remove(key);
        } else {
            let ttl = self.map.get(key).and_then(|i| i.expire_at_ms);
            self.insert(key.clone(), Value::List(l), ttl);
        }
    }

    /// Replace a string value, keeping the key's expiry.
    fn set_string_keep_ttl(&mut self, key: &Bytes, value: Bytes) {
        let ttl = self.map.get(key).and_then(|i| i.expire_at_ms);
        self.insert(key.clone(), Value::Str(value), ttl);
    }

    /// Like [`KvStore::apply`], but expiry is decided only for what the operation touches
    /// (its footprint): its own keys, the keys in its range, or everything for a
    /// whole-keyspace operation. Under a partial order (EPaxos) the result and state depend
    /// only on the sequence of operations on each key, not on how operations on other keys
    /// were interleaved.
    pub fn apply_lazy(&mut self, op: &Op, now_ms: u64) -> OpResult {
        match op.footprint() {
            Footprint::None => {}
            Footprint::Keys(keys) => {
                let expired: Vec<Bytes> = keys
                    .into_iter()
                    .filter(|k| self.map.get(*k).and_then(|i| i.expire_at_ms).is_some_and(|t| t <= now_ms))
                    .map(Bytes::copy_from_slice)
                    .collect();
                for k in expired {
                    self.remove(&k);
                }
            }
            Footprint::Range { start, end } => {
                let expired: Vec<Bytes> = self
                    .expiries
                    .iter()
                    .take_while(|(t, _)| *t <= now_ms)
                    .filter(|(_, k)| &k[..] >= start && (end.is_empty() || &k[..] < end))
                    .map(|(_, k)| k.clone())
                    .collect();
                for k in expired {
                    self.remove(&k);
                }
            }
            Footprint::All => self.purge_expired(now_ms),
        }
        self.run_at(op, now_ms)
    }

    /// Run one operation at state-machine time `now_ms`. Deterministic: the same sequence of
    /// (operation, time) gives the same results and state on every replica.
    pub fn apply(&mut self, op: &Op, now_ms: u64) -> OpResult {
        self.purge_expired(now_ms);
        self.run_at(op, now_ms)
    }

    /// [`KvStore::apply`] (or [`KvStore::apply_lazy`] when `lazy`) with a stamp: every key
    /// the operation writes gets `stamp` as its version (what WATCH compares). The replicated
    /// state machine stamps each command with a value unique to it (derived from its client
    /// id and sequence number), the same on every replica, and never 0.
    pub fn apply_stamped(&mut self, op: &Op, now_ms: u64, lazy: bool, stamp: u64) -> OpResult {
        self.stamp = stamp;
        let r = if lazy { self.apply_lazy(op, now_ms) } else { self.apply(op, now_ms) };
        self.stamp = 0;
        r
    }

    fn run_at(&mut self, op: &Op, now_ms: u64) -> OpResult {
        match op {
            Op::SetWithTtl { key, value, cond, ttl_ms, get } => {
                let absolute = Op::Set {
                    key: key.clone(),
                    value: value.clone(),
                    cond: *cond,
                    expire_at_ms: Some(now_ms.saturating_add(*ttl_ms)),
                    keep_ttl: false,
                    get: *get,
                };
                self.run_at(&absolute, now_ms)
            }
            Op::Multi { ops, watch } => {
                if watch.iter().any(|(k, v)| self.version(k) != *v) {
                    return OpResult::Multi(None);
                }
                OpResult::Multi(Some(ops.iter().map(|op| self.run_at(op, now_ms)).collect()))
            }
            op => match self.apply_inner(op, now_ms) {
                Ok(r) | Err(r) => r,
            },
        }
    }

    /// An expiry time from (ms, relative) at `now_ms`; None when it overflows.
    fn expiry_time(ms: i64, relative: bool, now_ms: u64) -> Option<i64> {
        if relative {
            (now_ms.min(i64::MAX as u64) as i64).checked_add(ms)
        } else {
            Some(ms)
        }
    }

    fn apply_inner(&mut self, op: &Op, now_ms: u64) -> Result<OpResult, OpResult> {
        Ok(match op {
            Op::Put { key, value } => {
                self.insert(key.clone(), Value::Str(value.clone()), None);
                OpResult::Done
            }
            Op::Delete { key } => OpResult::Deleted(self.remove(key).is_some()),
            Op::Cas { key, expect, new } => {
                let current = self.string(key)?.cloned();
                if current != *expect {
                    return Ok(OpResult::Cas { ok: false, current });
                }
                match new {
                    Some(v) => self.insert(key.clone(), Value::Str(v.clone()), None),
                    None => {
                        self.remove(key);
                    }
                }
                OpResult::Cas { ok: true, current }
            }
            Op::Set { key, value, cond, expire_at_ms, keep_ttl, get } => {
                let old = if *get { self.string(key)?.cloned() } else { None };
                let exists = self.map.contains_key(key);
                let ok = match cond {
                    SetCond::Always => true,
                    SetCond::IfAbsent => !exists,
                    SetCond::IfPresent => exists,
                };
                if ok {
                    let ttl = if *keep_ttl { self.map.get(key).and_then(|i| i.expire_at_ms) } else { *expire_at_ms };
                    self.insert(key.clone(), Value::Str(value.clone()), ttl);
                }
                if *get {
                    OpResult::Value(old)
                } else {
                    OpResult::Applied(ok)
                }
            }
            Op::MultiPut { pairs } => {
                for (k, v) in pairs {
                    self.insert(k.clone(), Value::Str(v.clone()), None);
                }
                OpResult::Done
            }
            Op::MultiDelete { keys } => OpResult::Int(keys.iter().filter(|k| self.remove(k).is_some()).count() as i64),
            Op::IncrBy { key, by } => {
                let current = match self.string(key)? {
                    None => 0,
                    Some(v) => parse_i64(v).ok_or_else(|| err("ERR value is not an integer or out of range"))?,
                };
                let next = current.checked_add(*by).ok_or_else(|| err("ERR increment or decrement would overflow"))?;
                self.set_string_keep_ttl(key, Bytes::from(next.to_string()));
                OpResult::Int(next)
            }
            Op::Append { key, value } => {
                let mut v = self.string(key)?.map(|b| b.to_vec()).unwrap_or_default();
                v.extend_from_slice(value);
                let len = v.len() as i64;
                self.set_string_keep_ttl(key, Bytes::from(v));
                OpResult::Int(len)
            }
            Op::GetDel { key } => {
                let v = self.string(key)?.cloned();
                if v.is_some() {
                    self.remove(key);
                }
                OpResult::Value(v)
            }
            Op::HashSet { key, pairs } => {
                let mut h = self.hash(key)?.cloned().unwrap_or_default();
                let ttl = self.map.get(key).and_then(|i| i.expire_at_ms);
                let mut added = 0;
                for (f, v) in pairs {
                    if h.insert(f.clone(), v.clone()).is_none() {
                        added += 1;
                    }
                }
                self.insert(key.clone(), Value::Hash(h), ttl);
                OpResult::Int(added)
            }
            Op::HashDelete { key, fields } => {
                let Some(h) = self.hash(key)? else { return Ok(OpResult::Int(0)) };
                let mut h = h.clone();
                let ttl = self.map.get(key).and_then(|i| i.expire_at_ms);
                let removed = fields.iter().filter(|f| h.remove(*f).is_some()).count() as i64;
                if h.is_empty() {
                    self.remove(key);
                } else {
                    self.insert(key.clone(), Value::Hash(h), ttl);
                }
                OpResult::Int(removed)
            }
            Op::Expire { key, ms, relative, cond } => {
                let Some(item) = self.map.get(key) else { return Ok(OpResult::Int(0)) };
                let Some(at) = Self::expiry_time(*ms, *relative, now_ms) else {
                    return Err(err("ERR invalid expire time in 'expire' command"));
                };
                // No expiry is an infinitely late one.
                let current = item.expire_at_ms.map(|t| t as i128);
                let ok = match cond {
                    ExpireCond::Always => true,
                    ExpireCond::IfNone => current.is_none(),
                    ExpireCond::IfSome => current.is_some(),
                    ExpireCond::Greater => current.is_some_and(|c| at as i128 > c),
                    ExpireCond::Less => current.is_none_or(|c| (at as i128) < c),
                };
                if !ok {
                    return Ok(OpResult::Int(0));
                }
                if at <= now_ms as i64 {
                    self.remove(key);
                } else {
                    self.set_expiry(key, Some(at as u64));
                }
                OpResult::Int(1)
            }
            Op::Persist { key } => match self.map.get(key) {
                Some(Item { expire_at_ms: Some(_), .. }) => {
                    self.set_expiry(key, None);
                    OpResult::Int(1)
                }
                _ => OpResult::Int(0),
            },
            Op::SetRange { key, offset, value } => {
                let current = self.string(key)?;
                let offset = *offset as usize;
                if value.is_empty() {
                    return Ok(OpResult::Int(current.map_or(0, |v| v.len() as i64)));
                }
                let mut v = current.map(|b| b.to_vec()).unwrap_or_default();
                if v.len() < offset + value.len() {
                    v.resize(offset + value.len(), 0);
                }
                v[offset..offset + value.len()].copy_from_slice(value);
                let len = v.len() as i64;
                self.set_string_keep_ttl(key, Bytes::from(v));
                OpResult::Int(len)
            }
            Op::GetEx { key, expire, persist } => {
                let Some(v) = self.string(key)?.cloned() else { return Ok(OpResult::Value(None)) };
                if let Some((ms, relative)) = expire {
                    let Some(at) = Self::expiry_time(*ms, *relative, now_ms) else {
                        return Err(err("ERR invalid expire time in 'getex' command"));
                    };
                    if at <= now_ms as i64 {
                        self.remove(key);
                    } else {
                        self.set_expiry(key, Some(at as u64));
                    }
                } else if *persist && self.map.get(key).is_some_and(|i| i.expire_at_ms.is_some()) {
                    self.set_expiry(key, None);
                }
                OpResult::Value(Some(v))
            }
            Op::IncrByFloat { key, by } => {
                let current = self.string(key)?.cloned().unwrap_or_else(|| Bytes::from_static(b"0"));
                let text = add_floats(&current, by, "ERR value is not a valid float")?;
                self.set_string_keep_ttl(key, text.clone());
                OpResult::Value(Some(text))
            }
            Op::Rename { from, to, nx } => {
                let Some(item) = self.map.get(from) else { return Err(err("ERR no such key")) };
                if from == to {
                    return Ok(if *nx { OpResult::Int(0) } else { OpResult::Done });
                }
                if *nx && self.map.contains_key(to) {
                    return Ok(OpResult::Int(0));
                }
                let ttl = item.expire_at_ms;
                let (value, _) = self.remove(from).expect("present");
                self.insert(to.clone(), value, ttl);
                if *nx {
                    OpResult::Int(1)
                } else {
                    OpResult::Done
                }
            }
            Op::Copy { from, to, replace } => {
                if from == to {
                    return Err(err("ERR source and destination objects are the same"));
                }
                let Some(item) = self.map.get(from) else { return Ok(OpResult::Int(0)) };
                if !*replace && self.map.contains_key(to) {
                    return Ok(OpResult::Int(0));
                }
                let (value, ttl) = (item.value.clone(), item.expire_at_ms);
                self.insert(to.clone(), value, ttl);
                OpResult::Int(1)
            }
            Op::FlushAll => {
                self.map = OrdMap::new();
                self.expiries = OrdSet::new();
                self.bytes = 0;
                OpResult::Done
            }
            Op::ListPush { key, values, left, only_existing } => {
                let Some(mut l) = self.list(key)?.cloned().or((!*only_existing).then(VecDeque::new)) else {
                    return Ok(OpResult::Int(0));
                };
                for v in values {
                    if *left {
                        l.push_front(v.clone());
                    } else {
                        l.push_back(v.clone());
                    }
                }
                let len = l.len() as i64;
                self.put_list(key, l);
                OpResult::Int(len)
            }
            Op::ListPop { key, left, count } => {
                let Some(mut l) = self.list(key)?.cloned() else {
                    return Ok(if count.is_some() { OpResult::Items(None) } else { OpResult::Value(None) });
                };
                let n = count.unwrap_or(1).min(l.len() as u64) as usize;
                let popped: Vec<Bytes> =
                    (0..n).filter_map(|_| if *left { l.pop_front() } else { l.pop_back() }).collect();
                if n > 0 {
                    self.put_list(key, l);
                }
                match count {
                    None => OpResult::Value(popped.into_iter().next()),
                    Some(_) => OpResult::Items(Some(popped)),
                }
            }
            Op::ListSet { key, index, value } => {
                let Some(mut l) = self.list(key)?.cloned() else { return Err(err("ERR no such key")) };
                let i = if *index < 0 { l.len() as i64 + index } else { *index };
                if i < 0 || i >= l.len() as i64 {
                    return Err(err("ERR index out of range"));
                }
                l[i as usize] = value.clone();
                self.put_list(key, l);
                OpResult::Done
            }
            Op::ListRemove { key, count, value } => {
                let Some(l) = self.list(key)?.cloned() else { return Ok(OpResult::Int(0)) };
                let limit = if *count == 0 { usize::MAX } else { count.unsigned_abs().min(usize::MAX as u64) as usize };
                let mut removed = 0;
                let mut keep = |v: &Bytes| {
                    if removed < limit && v == value {
                        removed += 1;
                        false
                    } else {
                        true
                    }
                };
                let l: VecDeque<Bytes> = if *count >= 0 {
                    l.into_iter().filter(|v| keep(v)).collect()
                } else {
                    let mut rev: VecDeque<Bytes> = l.into_iter().rev().filter(|v| keep(v)).collect();
                    rev.make_contiguous().reverse();
                    rev
                };
                if removed > 0 {
                    self.put_list(key, l);
                }
                OpResult::Int(removed as i64)
            }
            Op::ListTrim { key, start, stop } => {
                let Some(l) = self.list(key)?.cloned() else { return Ok(OpResult::Done) };
                let kept: VecDeque<Bytes> = match list_range(*start, *stop, l.len()) {
                    Some((s, e)) => l.into_iter().skip(s).take(e - s + 1).collect(),
                    None => VecDeque::new(),
                };
                self.put_list(key, kept);
                OpResult::Done
            }
            Op::ListMove { from, to, from_left, to_left } => {
                let Some(mut src) = self.list(from)?.cloned() else { return Ok(OpResult::Value(None)) };
                // The destination's type is checked before anything moves, as in Redis.
                let dst = self.list(to)?.cloned();
                let v = if *from_left { src.pop_front() } else { src.pop_back() };
                let Some(v) = v else { return Ok(OpResult::Value(None)) };
                if from == to {
                    if *to_left {
                        src.push_front(v.clone());
                    } else {
                        src.push_back(v.clone());
                    }
                    self.put_list(from, src);
                    return Ok(OpResult::Value(Some(v)));
                }
                let mut dst = dst.unwrap_or_default();
                if *to_left {
                    dst.push_front(v.clone());
                } else {
                    dst.push_back(v.clone());
                }
                self.put_list(from, src);
                self.put_list(to, dst);
                OpResult::Value(Some(v))
            }
            Op::HashIncrBy { key, field, by } => {
                let mut h = self.hash(key)?.cloned().unwrap_or_default();
                let current = match h.get(field) {
                    None => 0,
                    Some(v) => parse_i64(v).ok_or_else(|| err("ERR hash value is not an integer"))?,
                };
                let next = current.checked_add(*by).ok_or_else(|| err("ERR increment or decrement would overflow"))?;
                h.insert(field.clone(), Bytes::from(next.to_string()));
                let ttl = self.map.get(key).and_then(|i| i.expire_at_ms);
                self.insert(key.clone(), Value::Hash(h), ttl);
                OpResult::Int(next)
            }
            Op::HashIncrByFloat { key, field, by } => {
                let mut h = self.hash(key)?.cloned().unwrap_or_default();
                let current = h.get(field).cloned().unwrap_or_else(|| Bytes::from_static(b"0"));
                let text = add_floats(&current, by, "ERR hash value is not a float")?;
                h.insert(field.clone(), text.clone());
                let ttl = self.map.get(key).and_then(|i| i.expire_at_ms);
                self.insert(key.clone(), Value::Hash(h), ttl);
                OpResult::Value(Some(text))
            }
            Op::HashSetNx { key, field, value } => {
                let mut h = self.hash(key)?.cloned().unwrap_or_default();
                if h.contains_key(field) {
                    return Ok(OpResult::Int(0));
                }
                h.insert(field.clone(), value.clone());
                let ttl = self.map.get(key).and_then(|i| i.expire_at_ms);
                self.insert(key.clone(), Value::Hash(h), ttl);
                OpResult::Int(1)
            }
            Op::ZAdd { key, pairs, flags } => {
                let f = *flags;
                // Every check before the first change (change_zset's contract).
                let parsed = pairs
                    .iter()
                    .map(|(score, member)| Ok((parse_score(score).ok_or(())?, member)))
                    .collect::<Result<Vec<_>, ()>>()
                    .map_err(|_| err("ERR value is not a valid float"))?;
                if f.incr && parsed.len() != 1 {
                    return Err(err("ERR INCR option supports a single increment-element pair"));
                }
                if f.incr && !f.nx {
                    // Only an increment that is applied can make NaN (inf + -inf).
                    let (by, member) = parsed[0];
                    if let Some(cur) = self.zset(key)?.and_then(|z| z.scores.get(member)) {
                        if (by + cur.0).is_nan() {
                            return Err(err("ERR resulting score is not a number (NaN)"));
                        }
                    }
                }
                let (added, changed, incr_result) = self.change_zset(key, |z| {
                    let (mut added, mut changed) = (0, 0);
                    let mut incr_result = None;
                    for (mut score, member) in parsed {
                        match z.scores.get(member).map(|s| s.0) {
                            Some(cur) => {
                                if f.nx {
                                    continue;
                                }
                                if f.incr {
                                    score += cur;
                                }
                                if (f.gt && score <= cur) || (f.lt && score >= cur) {
                                    continue;
                                }
                                if score != cur {
                                    z.insert(member.clone(), score);
                                    changed += 1;
                                }
                                incr_result = Some(score);
                            }
                            None => {
                                if f.xx {
                                    continue;
                                }
                                z.insert(member.clone(), score);
                                added += 1;
                                incr_result = Some(score);
                            }
                        }
                    }
                    Ok(((added, changed, incr_result), added + changed > 0))
                })?;
                if f.incr {
                    OpResult::Value(incr_result.map(|x| Bytes::from(format_score(x))))
                } else {
                    OpResult::Int(if f.ch { added + changed } else { added })
                }
            }
            Op::ZRem { key, members } => OpResult::Int(self.change_zset(key, |z| {
                let removed = members.iter().filter(|m| z.remove(m)).count() as i64;
                Ok((removed, removed > 0))
            })?),
            Op::ZPop { key, max, count } => OpResult::Items(Some(self.change_zset(key, |z| {
                let mut out = Vec::new();
                for _ in 0..(*count).min(z.len() as u64) {
                    let first = if *max { z.order.last().cloned() } else { z.order.first().cloned() };
                    let Some((score, member)) = first else { break };
                    z.remove(&member);
                    out.push(member);
                    out.push(Bytes::from(format_score(score.0)));
                }
                let changed = !out.is_empty();
                Ok((out, changed))
            })?)),
            Op::SetAdd { key, members } => {
                let mut m = self.set(key)?.cloned().unwrap_or_default();
                let added = members.iter().filter(|v| m.insert((*v).clone())).count() as i64;
                if added > 0 {
                    self.put_set(key, m);
                }
                OpResult::Int(added)
            }
            Op::SetRemove { key, members } => {
                let Some(m) = self.set(key)? else { return Ok(OpResult::Int(0)) };
                let mut m = m.clone();
                let removed = members.iter().filter(|v| m.remove(*v)).count() as i64;
                if removed > 0 {
                    self.put_set(key, m);
                }
                OpResult::Int(removed)
            }
            Op::SetPop { key, count } => {
                let Some(m) = self.set(key)? else {
                    return Ok(if count.is_some() { OpResult::Items(Some(Vec::new())) } else { OpResult::Value(None) });
                };
                let n = count.unwrap_or(1).min(m.len() as u64) as usize;
                let popped = self.pick_distinct(m.iter().cloned().collect(), n);
                let mut m = m.clone();
                for v in &popped {
                    m.remove(v);
                }
                if n > 0 {
                    self.put_set(key, m);
                }
                match count {
                    None => OpResult::Value(popped.into_iter().next()),
                    Some(_) => OpResult::Items(Some(popped)),
                }
            }
            read => return self.read_inner(read, now_ms),
        })
    }

    /// Run a read-only operation without mutating (for local/lease reads) at time `now_ms`:
    /// keys expired at that time are treated as absent. Writes are refused.
    pub fn read(&self, op: &Op, now_ms: u64) -> OpResult {
        if self.expiries.get_min().is_some_and(|(t, _)| *t <= now_ms) {
            let mut purged = self.clone();
            purged.purge_expired(now_ms);
            return purged.read(op, now_ms);
        }
        match op {
            Op::Multi { ops, watch } if !op.is_write() => {
                if watch.iter().any(|(k, v)| self.version(k) != *v) {
                    return OpResult::Multi(None);
                }
                OpResult::Multi(Some(ops.iter().map(|op| self.read(op, now_ms)).collect()))
            }
            _ => match self.read_inner(op, now_ms) {
                Ok(r) | Err(r) => r,
            },
        }
    }

    fn read_inner(&self, op: &Op, now_ms: u64) -> Result<OpResult, OpResult> {
        Ok(match op {
            Op::Get { key } => OpResult::Value(self.string(key)?.cloned()),
            Op::Scan { start, end, limit } => {
                if !end.is_empty() && end <= start {
                    return Ok(OpResult::Scan(Vec::new()));
                }
                let upper = if end.is_empty() { Bound::Unbounded } else { Bound::Excluded(end.clone()) };
                let it = self.map.range((Bound::Included(start.clone()), upper)).filter_map(|(k, i)| match &i.value {
                    Value::Str(v) => Some((k.clone(), v.clone())),
                    Value::Hash(_) | Value::List(_) | Value::Set(_) | Value::ZSet(_) => None,
                });
                OpResult::Scan(if *limit == 0 { it.collect() } else { it.take(*limit as usize).collect() })
            }
            Op::Noop => OpResult::Done,
            Op::MultiGet { keys } => OpResult::Values(
                keys.iter()
                    .map(|k| match self.map.get(k) {
                        Some(Item { value: Value::Str(v), .. }) => Some(v.clone()),
                        _ => None,
                    })
                    .collect(),
            ),
            Op::Exists { keys } => OpResult::Int(keys.iter().filter(|k| self.map.contains_key(*k)).count() as i64),
            Op::Strlen { key } => OpResult::Int(self.string(key)?.map_or(0, |v| v.len() as i64)),
            Op::HashGet { key, fields } => {
                let h = self.hash(key)?;
                OpResult::Values(fields.iter().map(|f| h.and_then(|h| h.get(f).cloned())).collect())
            }
            Op::HashGetAll { key } => OpResult::Scan(
                self.hash(key)?.map(|h| h.iter().map(|(f, v)| (f.clone(), v.clone())).collect()).unwrap_or_default(),
            ),
            Op::HashLen { key } => OpResult::Int(self.hash(key)?.map_or(0, |h| h.len() as i64)),
            Op::Type { key } => OpResult::Text(self.map.get(key).map_or("none", |i| i.value.type_name()).into()),
            Op::KeyScan { after, pattern, count, of_type } => self.key_scan(after, pattern, *count, of_type),
            Op::MemberScan { key, of, after, pattern, count } => self.member_scan(key, *of, after, pattern, *count)?,
            Op::ScanResume { target, fingerprint, pattern, count } => {
                // The smallest name with the fingerprint (so a collision can only repeat
                // elements, never skip one); empty (start over) when none has it.
                fn resolve<'a>(mut names: impl Iterator<Item = &'a Bytes>, fingerprint: u64) -> Bytes {
                    names.find(|n| scan_fingerprint(n) == fingerprint).cloned().unwrap_or_default()
                }
                match target {
                    ScanTarget::Keys { of_type } => {
                        let after = resolve(self.map.keys(), *fingerprint);
                        self.key_scan(&after, pattern, *count, of_type)
                    }
                    ScanTarget::Members { key, of } => {
                        let after = match of {
                            ScanOf::Hash => self.hash(key)?.map(|h| resolve(h.keys(), *fingerprint)),
                            ScanOf::Set => self.set(key)?.map(|m| resolve(m.iter(), *fingerprint)),
                            ScanOf::ZSet => self.zset(key)?.map(|z| resolve(z.scores.keys(), *fingerprint)),
                        };
                        self.member_scan(key, *of, &after.unwrap_or_default(), pattern, *count)?
                    }
                }
            }
            Op::DbSize => OpResult::Int(self.map.len() as i64),
            Op::ListRange { key, start, stop } => {
                let l = self.list(key)?;
                let items = match (l, l.and_then(|l| list_range(*start, *stop, l.len()))) {
                    (Some(l), Some((s, e))) => l.iter().skip(s).take(e - s + 1).cloned().collect(),
                    _ => Vec::new(),
                };
                OpResult::Items(Some(items))
            }
            Op::ListLen { key } => OpResult::Int(self.list(key)?.map_or(0, |l| l.len() as i64)),
            Op::ListIndex { key, index } => {
                let l = self.list(key)?;
                let v = l.and_then(|l| {
                    let i = if *index < 0 { l.len() as i64 + index } else { *index };
                    (i >= 0).then(|| l.get(i as usize).cloned()).flatten()
                });
                OpResult::Value(v)
            }
            Op::SetMembers { key } => {
                OpResult::Items(Some(self.set(key)?.map(|m| m.iter().cloned().collect()).unwrap_or_default()))
            }
            Op::SetIsMember { key, member } => OpResult::Int(self.set(key)?.is_some_and(|m| m.contains(member)) as i64),
            Op::HashStrlen { key, field } => {
                OpResult::Int(self.hash(key)?.and_then(|h| h.get(field)).map_or(0, |v| v.len() as i64))
            }
            Op::ZScore { key, member } => OpResult::Value(
                self.zset(key)?.and_then(|z| z.scores.get(member)).map(|s| Bytes::from(format_score(s.0))),
            ),
            Op::ZMScore { key, members } => {
                let z = self.zset(key)?;
                OpResult::Values(
                    members
                        .iter()
                        .map(|m| z.and_then(|z| z.scores.get(m)).map(|s| Bytes::from(format_score(s.0))))
                        .collect(),
                )
            }
            Op::ZCard { key } => OpResult::Int(self.zset(key)?.map_or(0, |z| z.len() as i64)),
            Op::ZRank { key, member, rev } => {
                let z = self.zset(key)?;
                match z.and_then(|z| z.scores.get(member).map(|s| (z, *s))) {
                    None => OpResult::Value(None),
                    Some((z, s)) => {
                        let below = z.order.range(..(s, member.clone())).count();
                        OpResult::Int(if *rev { z.len() - 1 - below } else { below } as i64)
                    }
                }
            }
            Op::ZCount { key, min, max } => OpResult::Int(self.zset(key)?.map_or(0, |z| {
                z.order.iter().filter(|(s, _)| min.below_or_at(s.0) && max.above_or_at(s.0)).count() as i64
            })),
            Op::ZLexCount { key, min, max } => OpResult::Int(self.zset(key)?.map_or(0, |z| {
                z.scores.keys().filter(|m| min.admits_from_below(m) && max.admits_from_above(m)).count() as i64
            })),
            Op::ZRange { key, by, rev, limit, with_scores } => {
                let Some(z) = self.zset(key)? else { return Ok(OpResult::Items(Some(Vec::new()))) };
                let ordered: Vec<&(Score, Bytes)> =
                    if *rev { z.order.iter().rev().collect() } else { z.order.iter().collect() };
                let selected: Vec<&(Score, Bytes)> = match by {
                    ZRangeBy::Index { start, stop } => match list_range(*start, *stop, ordered.len()) {
                        Some((s, e)) => ordered[s..=e].to_vec(),
                        None => Vec::new(),
                    },
                    ZRangeBy::Score { min, max } => {
                        ordered.into_iter().filter(|(s, _)| min.below_or_at(s.0) && max.above_or_at(s.0)).collect()
                    }
                    ZRangeBy::Lex { min, max } => ordered
                        .into_iter()
                        .filter(|(_, m)| min.admits_from_below(m) && max.admits_from_above(m))
                        .collect(),
                };
                let selected: Vec<&(Score, Bytes)> = match limit {
                    Some((offset, _)) if *offset < 0 => Vec::new(),
                    Some((offset, count)) => {
                        let it = selected.into_iter().skip(*offset as usize);
                        if *count < 0 {
                            it.collect()
                        } else {
                            it.take(*count as usize).collect()
                        }
                    }
                    None => selected,
                };
                let mut out = Vec::new();
                for (s, m) in selected {
                    out.push(m.clone());
                    if *with_scores {
                        out.push(Bytes::from(format_score(s.0)));
                    }
                }
                OpResult::Items(Some(out))
            }
            Op::SetCard { key } => OpResult::Int(self.set(key)?.map_or(0, |m| m.len() as i64)),
            Op::SetCombine { keys, kind } => {
                let mut sets = Vec::with_capacity(keys.len());
                for k in keys {
                    sets.push(self.set(k)?);
                }
                let empty = BTreeSet::new();
                let mut sets = sets.into_iter().map(|s| s.unwrap_or(&empty));
                let first = sets.next().cloned().unwrap_or_default();
                let result: BTreeSet<Bytes> = match kind {
                    SetCombine::Inter => sets.fold(first, |acc, s| acc.intersection(s).cloned().collect()),
                    SetCombine::Union => sets.fold(first, |mut acc, s| {
                        acc.extend(s.iter().cloned());
                        acc
                    }),
                    SetCombine::Diff => sets.fold(first, |acc, s| acc.difference(s).cloned().collect()),
                };
                OpResult::Items(Some(result.into_iter().collect()))
            }
            Op::SetRandMember { key, count } => {
                let m = self.set(key)?;
                match (m, count) {
                    (None, None) => OpResult::Value(None),
                    (None, Some(_)) => OpResult::Items(Some(Vec::new())),
                    (Some(m), None) => {
                        OpResult::Value(self.pick_distinct(m.iter().cloned().collect(), 1).into_iter().next())
                    }
                    (Some(m), Some(n)) if *n >= 0 => {
                        OpResult::Items(Some(self.pick_distinct(m.iter().cloned().collect(), *n as usize)))
                    }
                    (Some(m), Some(n)) => {
                        let pool: Vec<&Bytes> = m.iter().collect();
                        OpResult::Items(Some(
                            (0..n.unsigned_abs()).map(|d| pool[self.pick(d, pool.len())].clone()).collect(),
                        ))
                    }
                }
            }
            Op::HashRandField { key, count, with_values } => {
                let h = self.hash(key)?;
                let fields = |chosen: Vec<(&Bytes, &Bytes)>| -> Vec<Bytes> {
                    chosen
                        .into_iter()
                        .flat_map(|(f, v)| std::iter::once(f.clone()).chain(with_values.then(|| v.clone())))
                        .collect()
                };
                match (h, count) {
                    (None, None) => OpResult::Value(None),
                    (None, Some(_)) => OpResult::Items(Some(Vec::new())),
                    (Some(h), None) => {
                        OpResult::Value(self.pick_distinct(h.keys().collect(), 1).into_iter().next().cloned())
                    }
                    (Some(h), Some(n)) if *n >= 0 => {
                        OpResult::Items(Some(fields(self.pick_distinct(h.iter().collect(), *n as usize))))
                    }
                    (Some(h), Some(n)) => {
                        let pool: Vec<(&Bytes, &Bytes)> = h.iter().collect();
                        OpResult::Items(Some(fields(
                            (0..n.unsigned_abs()).map(|d| pool[self.pick(d, pool.len())]).collect(),
                        )))
                    }
                }
            }
            Op::ObjectEncoding { key } => {
                OpResult::Value(self.map.get(key).map(|item| Bytes::from_static(item.value.encoding().as_bytes())))
            }
            Op::Versions { keys } => OpResult::Versions(keys.iter().map(|k| self.version(k)).collect()),
            Op::Ttl { key } => OpResult::Int(match self.map.get(key) {
                None => -2,
                Some(Item { expire_at_ms: None, .. }) => -1,
                Some(Item { expire_at_ms: Some(t), .. }) => t.saturating_sub(now_ms).min(i64::MAX as u64) as i64,
            }),
            Op::GetRange { key, start, end } => {
                let v = self.string(key)?.cloned().unwrap_or_default();
                OpResult::Value(Some(match redis_range(*start, *end, v.len()) {
                    Some((s, e)) => v.slice(s..=e),
                    None => Bytes::new(),
                }))
            }
            _ => OpResult::Error("write operation on the read-only path".into()),
        })
    }

    /// A digest of the whole state (keys, typed values, expiries), FNV-1a, for comparing
    /// replicas.
    pub fn digest(&self) -> u64 {
        let mut h: u64 = 0xcbf29ce484222325;
        let mut feed = |bytes: &[u8]| {
            for b in bytes.iter().chain([0xffu8].iter()) {
                h ^= *b as u64;
                h = h.wrapping_mul(0x100000001b3);
            }
        };
        for (k, item) in &self.map {
            feed(k);
            match &item.value {
                Value::Str(v) => feed(v),
                Value::Hash(m) => {
                    for (f, v) in m {
                        feed(f);
                        feed(v);
                    }
                }
                Value::List(l) => {
                    feed(b"list");
                    for v in l {
                        feed(v);
                    }
                }
                Value::Set(m) => {
                    feed(b"set");
                    for v in m {
                        feed(v);
                    }
                }
                Value::ZSet(z) => {
                    feed(b"zset");
                    for (score, m) in &z.order {
                        feed(m);
                        feed(&score.0.to_bits().to_le_bytes());
                    }
                }
            }
            feed(&item.expire_at_ms.unwrap_or(0).to_le_bytes());
            feed(&item.version.to_le_bytes());
        }
        h
    }
}

fn err(msg: &str) -> OpResult {
    OpResult::Error(msg.into())
}

/// Redis's index rules for GETRANGE/LRANGE: negative indexes count from the end, both ends
/// inclusive, clamped to the value; None when the range is empty.
pub fn redis_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let norm = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (s, e) = (norm(start), norm(end).min(len - 1));
    if len == 0 || s > e || s >= len {
        return None;
    }
    Some((s as usize, e as usize))
}

/// Redis's index rules for LRANGE/LTRIM: negative indexes count from the end; empty when the
/// start is past the end or after the stop (an end before the start of the list included).
pub fn list_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let stop = if stop < 0 { len + stop } else { stop.min(len - 1) };
    if start > stop || start >= len {
        return None;
    }
    Some((start as usize, stop as usize))
}

/// A float as Redis parses one (INCRBYFLOAT): no spaces, not NaN (infinities parse; adding
/// them is refused later, as in Redis).
pub fn parse_f64(v: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(v).ok()?;
    if s.is_empty() || s.trim() != s {
        return None;
    }
    let x: f64 = s.parse().ok()?;
    (!x.is_nan()).then_some(x)
}

/// Scale of [`exact_decimal`]: 17 decimals, the precision Redis prints INCRBYFLOAT with.
const DEC_SCALE: u32 = 17;

/// A decimal text as an exact integer count of 10^-17 units, when it is one (plain or
/// exponent notation, at most 17 decimals, within i128).
fn exact_decimal(v: &[u8]) -> Option<i128> {
    let s = std::str::from_utf8(v).ok()?;
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i32>().ok()?),
        None => (s, 0),
    };
    let (neg, digits) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa.strip_prefix('+').unwrap_or(mantissa)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty() || !(int.bytes().chain(frac.bytes())).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut n: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        n = n.checked_mul(10)?.checked_add((b - b'0') as i128)?;
    }
    // n * 10^(exp - frac.len()) in units of 10^-17.
    let shift = exp as i64 - frac.len() as i64 + DEC_SCALE as i64;
    if shift >= 0 {
        n = n.checked_mul(10i128.checked_pow(u32::try_from(shift).ok()?)?)?;
    } else {
        let d = 10i128.checked_pow(u32::try_from(-shift).ok()?)?;
        if n % d != 0 {
            return None;
        }
        n /= d;
    }
    Some(if neg { -n } else { n })
}

fn format_decimal(n: i128) -> String {
    let unit = 10i128.pow(DEC_SCALE);
    let (int, frac) = (n.unsigned_abs() / unit as u128, n.unsigned_abs() % unit as u128);
    let sign = if n < 0 { "-" } else { "" };
    if frac == 0 {
        return format!("{sign}{int}");
    }
    let frac = format!("{frac:017}");
    format!("{sign}{int}.{}", frac.trim_end_matches('0'))
}

/// INCRBYFLOAT's sum as Redis prints it: plain decimal, no exponent, no trailing zeros.
/// Redis adds in `long double` and prints 17 decimals; synod adds exactly in decimal when
/// both numbers are decimals of at most 17 places (so `10.5 + 0.1` is `10.6` and `1.1 + 2.2`
/// is `3.3`, as in Redis), else in f64, printed as the shortest text that reads back as the
/// same number (where Redis's 80-bit arithmetic may print other trailing digits).
fn add_floats(current: &[u8], by: &[u8], not_a_float: &str) -> Result<Bytes, OpResult> {
    let cur = parse_f64(current).ok_or_else(|| err(not_a_float))?;
    let inc = parse_f64(by).ok_or_else(|| err("ERR value is not a valid float"))?;
    let sum = cur + inc;
    if !sum.is_finite() {
        return Err(err("ERR increment would produce NaN or Infinity"));
    }
    if let (Some(a), Some(b)) = (exact_decimal(current), exact_decimal(by)) {
        if let Some(n) = a.checked_add(b) {
            return Ok(Bytes::from(format_decimal(n)));
        }
    }
    Ok(Bytes::from(if sum == 0.0 { "0".to_string() } else { format!("{sum}") }))
}

/// Redis integers: an optional minus sign and decimal digits, no spaces or leading '+'.
fn parse_i64(v: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(v).ok()?;
    if s.is_empty() || s.starts_with('+') || (s.len() > 1 && s.starts_with('0')) || s.starts_with("-0") {
        return None;
    }
    s.parse().ok()
}

/// Glob matching with Redis's rules: `*`, `?`, `[abc]`, `[^a]`, `[a-z]`, `\x` escapes.
pub fn glob_match(pattern: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    // Position to resume from after the last '*': (pattern index after '*', string index).
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        let step = if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p + 1, i));
                    p += 1;
                    continue;
                }
                b'?' => Some(p + 1),
                b'[' => class_match(pattern, p, s[i]),
                b'\\' if p + 1 < pattern.len() => (pattern[p + 1] == s[i]).then_some(p + 2),
                c => (c == s[i]).then_some(p + 1),
            }
        } else {
            None
        };
        match (step, star) {
            (Some(np), _) => {
                p = np;
                i += 1;
            }
            (None, Some((sp, si))) => {
                p = sp;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            (None, None) => return false,
        }
    }
    pattern[p..].iter().all(|c| *c == b'*')
}

/// Match one byte against the class starting at `pattern[p] == '['`; returns the index after
/// the class on a match.
fn class_match(pattern: &[u8], p: usize, c: u8) -> Option<usize> {
    let mut j = p + 1;
    let negate = pattern.get(j) == Some(&b'^');
    if negate {
        j += 1;
    }
    let mut matched = false;
    while j < pattern.len() && pattern[j] != b']' {
        if pattern[j] == b'\\' && j + 1 < pattern.len() {
            matched |= pattern[j + 1] == c;
            j += 2;
        } else if j + 2 < pattern.len() && pattern[j + 1] == b'-' && pattern[j + 2] != b']' {
            let (lo, hi) = (pattern[j].min(pattern[j + 2]), pattern[j].max(pattern[j + 2]));
            matched |= (lo..=hi).contains(&c);
            j += 3;
        } else {
            matched |= pattern[j] == c;
            j += 1;
        }
    }
    // An unterminated class matches like Redis: up to the end of the pattern.
    let end = if j < pattern.len() { j + 1 } else { j };
    (matched != negate).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl KvStore {
        fn apply0(&mut self, op: &Op) -> OpResult {
            self.apply(op, 0)
        }
    }

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn put_get_delete_cas_scan() {
        let mut kv = KvStore::new();
        assert_eq!(kv.apply0(&Op::Get { key: b("a") }), OpResult::Value(None));
        assert_eq!(kv.apply0(&Op::Put { key: b("a"), value: b("1") }), OpResult::Done);
        assert_eq!(kv.apply0(&Op::Get { key: b("a") }), OpResult::Value(Some(b("1"))));
        assert_eq!(
            kv.apply0(&Op::Cas { key: b("a"), expect: Some(b("2")), new: Some(b("3")) }),
            OpResult::Cas { ok: false, current: Some(b("1")) }
        );
        assert_eq!(
            kv.apply0(&Op::Cas { key: b("a"), expect: Some(b("1")), new: Some(b("3")) }),
            OpResult::Cas { ok: true, current: Some(b("1")) }
        );
        assert_eq!(
            kv.apply0(&Op::Cas { key: b("n"), expect: None, new: Some(b("x")) }),
            OpResult::Cas { ok: true, current: None }
        );
        kv.apply0(&Op::Put { key: b("c"), value: b("cc") });
        assert_eq!(
            kv.apply0(&Op::Scan { start: b("a"), end: b("d"), limit: 0 }),
            OpResult::Scan(vec![(b("a"), b("3")), (b("c"), b("cc"))])
        );
        assert_eq!(
            kv.apply0(&Op::Scan { start: b("b"), end: b(""), limit: 1 }),
            OpResult::Scan(vec![(b("c"), b("cc"))])
        );
        assert_eq!(kv.apply0(&Op::Scan { start: b("z"), end: b("a"), limit: 0 }), OpResult::Scan(vec![]));
        assert_eq!(kv.apply0(&Op::Delete { key: b("a") }), OpResult::Deleted(true));
        assert_eq!(kv.apply0(&Op::Delete { key: b("a") }), OpResult::Deleted(false));
        assert_eq!(kv.size_bytes(), 1 + 1 + 1 + 2);
        assert_eq!(kv.apply0(&Op::Noop), OpResult::Done);
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

    fn set(k: &str, v: &str, cond: SetCond, expire_at_ms: Option<u64>, get: bool) -> Op {
        Op::Set { key: b(k), value: b(v), cond, expire_at_ms, keep_ttl: false, get }
    }

    #[test]
    fn set_conditions_get_and_expiry() {
        let mut kv = KvStore::new();
        assert_eq!(kv.apply(&set("a", "1", SetCond::IfPresent, None, false), 0), OpResult::Applied(false));
        assert_eq!(kv.apply(&set("a", "1", SetCond::IfAbsent, None, false), 0), OpResult::Applied(true));
        assert_eq!(kv.apply(&set("a", "2", SetCond::IfAbsent, None, true), 0), OpResult::Value(Some(b("1"))));
        assert_eq!(kv.get(b"a"), Some(&b("1")));
        assert_eq!(kv.apply(&set("a", "3", SetCond::IfPresent, Some(100), true), 0), OpResult::Value(Some(b("1"))));
        // Live before its expiry, gone at it (on every replica: time comes with the command).
        assert_eq!(kv.apply(&Op::Get { key: b("a") }, 99), OpResult::Value(Some(b("3"))));
        assert_eq!(kv.read(&Op::Get { key: b("a") }, 100), OpResult::Value(None));
        assert_eq!(kv.apply(&Op::Get { key: b("a") }, 100), OpResult::Value(None));
        assert_eq!(kv.len(), 0, "expired key purged");
        assert_eq!(kv.size_bytes(), 0);
        // KEEPTTL keeps, a plain SET clears the expiry.
        kv.apply(&set("t", "x", SetCond::Always, Some(500), false), 200);
        let keep = Op::Set {
            key: b("t"),
            value: b("y"),
            cond: SetCond::Always,
            expire_at_ms: None,
            keep_ttl: true,
            get: false,
        };
        kv.apply(&keep, 300);
        assert_eq!(kv.apply(&Op::Get { key: b("t") }, 500), OpResult::Value(None));
        kv.apply(&set("t", "x", SetCond::Always, Some(700), false), 600);
        kv.apply(&Op::Put { key: b("t"), value: b("z") }, 600);
        assert_eq!(kv.apply(&Op::Get { key: b("t") }, 10_000), OpResult::Value(Some(b("z"))));
    }

    #[test]
    fn relative_ttl_counts_from_the_apply_clock() {
        let mut kv = KvStore::new();
        let op = Op::SetWithTtl { key: b("k"), value: b("v"), cond: SetCond::Always, ttl_ms: 100, get: false };
        assert_eq!(kv.apply(&op, 1_000), OpResult::Applied(true));
        assert_eq!(kv.apply(&Op::Get { key: b("k") }, 1_099), OpResult::Value(Some(b("v"))));
        assert_eq!(kv.apply(&Op::Get { key: b("k") }, 1_100), OpResult::Value(None));
        // NX with GET on an absent key: nothing old, written, then gone after the TTL.
        let nx = Op::SetWithTtl { key: b("k"), value: b("w"), cond: SetCond::IfAbsent, ttl_ms: 5, get: true };
        assert_eq!(kv.apply(&nx, 2_000), OpResult::Value(None));
        assert_eq!(kv.apply(&Op::Get { key: b("k") }, 2_004), OpResult::Value(Some(b("w"))));
        assert_eq!(kv.apply(&Op::Get { key: b("k") }, 2_005), OpResult::Value(None));
        assert!(op.is_write());
        assert_eq!(op.footprint(), Footprint::Keys(vec![&b"k"[..]]));
        assert_eq!(op.size(), 2);
    }

    #[test]
    fn strings_counters_and_multi_key() {
        let mut kv = KvStore::new();
        assert_eq!(kv.apply0(&Op::IncrBy { key: b("n"), by: 5 }), OpResult::Int(5));
        assert_eq!(kv.apply0(&Op::IncrBy { key: b("n"), by: -7 }), OpResult::Int(-2));
        kv.apply0(&Op::Put { key: b("s"), value: b("abc") });
        assert!(
            matches!(kv.apply0(&Op::IncrBy { key: b("s"), by: 1 }), OpResult::Error(e) if e.contains("not an integer"))
        );
        kv.apply0(&Op::Put { key: b("m"), value: b(&i64::MAX.to_string()) });
        assert!(matches!(kv.apply0(&Op::IncrBy { key: b("m"), by: 1 }), OpResult::Error(e) if e.contains("overflow")));
        for bad in ["", "+1", "01", " 1", "-0", "1.5"] {
            assert_eq!(parse_i64(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(kv.apply0(&Op::Append { key: b("s"), value: b("de") }), OpResult::Int(5));
        assert_eq!(kv.apply0(&Op::Strlen { key: b("s") }), OpResult::Int(5));
        assert_eq!(kv.apply0(&Op::Strlen { key: b("zz") }), OpResult::Int(0));
        kv.apply0(&Op::MultiPut { pairs: vec![(b("x"), b("1")), (b("y"), b("2"))] });
        assert_eq!(
            kv.apply0(&Op::MultiGet { keys: vec![b("x"), b("nope"), b("y")] }),
            OpResult::Values(vec![Some(b("1")), None, Some(b("2"))])
        );
        assert_eq!(kv.apply0(&Op::Exists { keys: vec![b("x"), b("x"), b("nope")] }), OpResult::Int(2));
        assert_eq!(kv.apply0(&Op::MultiDelete { keys: vec![b("x"), b("nope")] }), OpResult::Int(1));
        assert_eq!(kv.apply0(&Op::GetDel { key: b("y") }), OpResult::Value(Some(b("2"))));
        assert_eq!(kv.apply0(&Op::GetDel { key: b("y") }), OpResult::Value(None));
        assert_eq!(kv.apply0(&Op::DbSize), OpResult::Int(3));
    }

    #[test]
    fn hashes_and_wrong_types() {
        let mut kv = KvStore::new();
        let hset = Op::HashSet { key: b("h"), pairs: vec![(b("f1"), b("a")), (b("f2"), b("b"))] };
        assert_eq!(kv.apply0(&hset), OpResult::Int(2));
        assert_eq!(kv.apply0(&Op::HashSet { key: b("h"), pairs: vec![(b("f1"), b("c"))] }), OpResult::Int(0));
        assert_eq!(
            kv.apply0(&Op::HashGet { key: b("h"), fields: vec![b("f1"), b("zz")] }),
            OpResult::Values(vec![Some(b("c")), None])
        );
        assert_eq!(
            kv.apply0(&Op::HashGetAll { key: b("h") }),
            OpResult::Scan(vec![(b("f1"), b("c")), (b("f2"), b("b"))])
        );
        assert_eq!(kv.apply0(&Op::HashLen { key: b("h") }), OpResult::Int(2));
        assert_eq!(kv.apply0(&Op::Type { key: b("h") }), OpResult::Text("hash".into()));
        assert_eq!(kv.apply0(&Op::Type { key: b("none") }), OpResult::Text("none".into()));
        assert_eq!(kv.apply0(&Op::Get { key: b("h") }), OpResult::Error(WRONGTYPE.into()));
        assert_eq!(kv.apply0(&Op::Append { key: b("h"), value: b("x") }), OpResult::Error(WRONGTYPE.into()));
        kv.apply0(&Op::Put { key: b("s"), value: b("v") });
        assert_eq!(kv.apply0(&Op::HashLen { key: b("s") }), OpResult::Error(WRONGTYPE.into()));
        assert_eq!(
            kv.apply0(&Op::HashDelete { key: b("h"), fields: vec![b("f1"), b("f2"), b("x")] }),
            OpResult::Int(2)
        );
        assert_eq!(kv.apply0(&Op::Type { key: b("h") }), OpResult::Text("none".into()), "empty hash removed");
        // A failed command changes nothing.
        let before = kv.clone();
        kv.apply0(&Op::HashSet { key: b("s"), pairs: vec![(b("f"), b("v"))] });
        assert_eq!(kv, before);
        // Scan returns string values only.
        kv.apply0(&hset);
        assert_eq!(kv.apply0(&Op::Scan { start: b(""), end: b(""), limit: 0 }), OpResult::Scan(vec![(b("s"), b("v"))]));
    }

    #[test]
    fn key_scan_with_cursor_and_pattern() {
        let mut kv = KvStore::new();
        for k in ["user:1", "user:2", "item:1", "user:3", "zeta"] {
            kv.apply0(&Op::Put { key: b(k), value: b("v") });
        }
        let mut after = Bytes::new();
        let mut found = Vec::new();
        loop {
            let OpResult::Keys { keys, next } =
                kv.apply0(&Op::KeyScan { after: after.clone(), pattern: Some(b("user:*")), count: 2, of_type: None })
            else {
                panic!()
            };
            found.extend(keys);
            match next {
                Some(n) => after = n,
                None => break,
            }
        }
        assert_eq!(found, vec![b("user:1"), b("user:2"), b("user:3")]);
    }

    #[test]
    fn key_scan_by_type_filters_after_counting() {
        let mut kv = KvStore::new();
        kv.apply0(&Op::Put { key: b("a"), value: b("1") });
        kv.apply0(&Op::HashSet { key: b("b"), pairs: vec![(b("f"), b("1"))] });
        kv.apply0(&Op::Put { key: b("c"), value: b("1") });
        let scan = |after: Bytes, count, of_type: &str| {
            kv.clone().apply0(&Op::KeyScan { after, pattern: None, count, of_type: Some(b(of_type)) })
        };
        assert_eq!(scan(Bytes::new(), 10, "string"), OpResult::Keys { keys: vec![b("a"), b("c")], next: None });
        assert_eq!(scan(Bytes::new(), 10, "hash"), OpResult::Keys { keys: vec![b("b")], next: None });
        assert_eq!(scan(Bytes::new(), 10, "nosuchtype"), OpResult::Keys { keys: vec![], next: None });
        // Like Redis, COUNT bounds the keys examined, not the keys returned: an empty batch
        // with a cursor to continue from.
        assert_eq!(scan(b("a"), 1, "string"), OpResult::Keys { keys: vec![], next: Some(b("b")) });
    }

    #[test]
    fn glob_patterns() {
        let m = |p: &str, s: &str| glob_match(p.as_bytes(), s.as_bytes());
        assert!(m("*", ""));
        assert!(m("h?llo", "hello"));
        assert!(!m("h?llo", "hllo"));
        assert!(m("h*llo", "heeeello"));
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-c]llo", "hbllo"));
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(m("*:*:x", "a:b:c:x"));
        assert!(!m("abc", "abcd"));
    }

    #[test]
    fn multi_key_footprints() {
        let mset = Op::MultiPut { pairs: vec![(b("a"), b("1")), (b("b"), b("2"))] };
        assert!(mset.interferes(&Op::Get { key: b("b") }));
        assert!(!mset.interferes(&Op::Get { key: b("c") }));
        assert!(Op::DbSize.interferes(&Op::Put { key: b("z"), value: b("") }));
        assert!(!Op::DbSize.interferes(&Op::Get { key: b("z") }));
        let l = Limits { max_key_bytes: 4, max_value_bytes: 8, max_frame_bytes: 100 };
        let big = Op::HashSet { key: b("h"), pairs: vec![(b("f"), b("123456789"))] };
        assert_eq!(big.validate(&l), Err(CommandError::ValueTooLarge { size: 9, limit: 8 }));
        assert_eq!(mset.size(), 4);
    }

    fn st(kv: &mut KvStore, op: &Op, now: u64, stamp: u64) -> OpResult {
        kv.apply_stamped(op, now, false, stamp)
    }

    #[test]
    fn transactions_with_watch_versions() {
        let mut kv = KvStore::new();
        let versions = |kv: &mut KvStore, keys: &[&str]| match kv
            .apply0(&Op::Versions { keys: keys.iter().map(|k| b(k)).collect() })
        {
            OpResult::Versions(v) => v,
            other => panic!("{other:?}"),
        };
        assert_eq!(versions(&mut kv, &["a"]), vec![0]);
        st(&mut kv, &Op::Put { key: b("a"), value: b("1") }, 0, 11);
        assert_eq!(versions(&mut kv, &["a", "b"]), vec![11, 0]);
        let multi = |watch: Vec<(Bytes, u64)>| Op::Multi {
            ops: vec![
                Op::IncrBy { key: b("a"), by: 1 },
                Op::HashLen { key: b("a") },
                Op::Put { key: b("b"), value: b("x") },
            ],
            watch,
        };
        // Watched version still current: every part runs, errors in place.
        let r = st(&mut kv, &multi(vec![(b("a"), 11), (b("b"), 0)]), 0, 12);
        assert_eq!(r, OpResult::Multi(Some(vec![OpResult::Int(2), OpResult::Error(WRONGTYPE.into()), OpResult::Done])));
        assert_eq!(versions(&mut kv, &["a", "b"]), vec![12, 12]);
        // A stale version: nothing runs.
        let before = kv.clone();
        assert_eq!(st(&mut kv, &multi(vec![(b("a"), 11)]), 0, 13), OpResult::Multi(None));
        assert_eq!(kv, before);
        // Delete and recreate with the same value is a change (new stamp), as in Redis.
        st(&mut kv, &Op::Delete { key: b("b") }, 0, 14);
        st(&mut kv, &Op::Put { key: b("b"), value: b("x") }, 0, 15);
        assert_eq!(st(&mut kv, &multi(vec![(b("b"), 12)]), 0, 16), OpResult::Multi(None));
        // Expiry of a watched key is a change too.
        st(&mut kv, &Op::Expire { key: b("b"), ms: 10, relative: true, cond: ExpireCond::Always }, 100, 17);
        let v = versions(&mut kv, &["b"]);
        assert_eq!(v, vec![17]);
        assert_eq!(st(&mut kv, &multi(vec![(b("b"), 17)]), 110, 18), OpResult::Multi(None));
        // Footprint: the parts and the watched keys; a write if any part writes.
        let m = multi(vec![(b("w"), 1)]);
        assert!(m.is_write());
        assert!(m.interferes(&Op::Put { key: b("w"), value: b("") }));
        assert!(m.interferes(&Op::Get { key: b("b") }));
        assert!(!m.interferes(&Op::Get { key: b("zz") }));
        let ro = Op::Multi { ops: vec![Op::Get { key: b("a") }], watch: vec![] };
        assert!(!ro.is_write());
        assert!(!ro.interferes(&Op::Get { key: b("a") }));
        assert!(ro.interferes(&Op::Put { key: b("a"), value: b("") }));
        let scan = Op::Multi { ops: vec![Op::DbSize], watch: vec![] };
        assert_eq!(scan.footprint(), Footprint::All);
        assert_eq!(m.size(), 5);
        assert_eq!(Op::Versions { keys: vec![b("k")] }.footprint(), Footprint::Keys(vec![&b"k"[..]]));
        assert!(!Op::Versions { keys: vec![b("k")] }.is_write());
    }

    #[test]
    fn expire_ttl_persist() {
        let mut kv = KvStore::new();
        let exp = |k: &str, ms: i64, relative: bool, cond: ExpireCond| Op::Expire { key: b(k), ms, relative, cond };
        let ttl = |k: &str| Op::Ttl { key: b(k) };
        assert_eq!(kv.apply(&exp("k", 100, true, ExpireCond::Always), 1_000), OpResult::Int(0), "absent");
        kv.apply(&Op::Put { key: b("k"), value: b("v") }, 1_000);
        assert_eq!(kv.apply(&ttl("k"), 1_000), OpResult::Int(-1));
        assert_eq!(kv.apply(&ttl("nope"), 1_000), OpResult::Int(-2));
        assert_eq!(kv.apply(&exp("k", 100, true, ExpireCond::IfSome), 1_000), OpResult::Int(0));
        assert_eq!(kv.apply(&exp("k", 100, true, ExpireCond::Greater), 1_000), OpResult::Int(0));
        assert_eq!(kv.apply(&exp("k", 100, true, ExpireCond::IfNone), 1_000), OpResult::Int(1));
        assert_eq!(kv.apply(&ttl("k"), 1_040), OpResult::Int(60));
        assert_eq!(kv.apply(&exp("k", 2_000, false, ExpireCond::Less), 1_040), OpResult::Int(0));
        assert_eq!(kv.apply(&exp("k", 1_050, false, ExpireCond::Less), 1_040), OpResult::Int(1));
        assert_eq!(kv.apply(&exp("k", 5_000, false, ExpireCond::Greater), 1_040), OpResult::Int(1));
        assert_eq!(kv.apply(&Op::Persist { key: b("k") }, 1_040), OpResult::Int(1));
        assert_eq!(kv.apply(&Op::Persist { key: b("k") }, 1_040), OpResult::Int(0));
        assert_eq!(kv.apply(&ttl("k"), 9_000), OpResult::Int(-1));
        // A time in the past deletes, and the value stays under its expiry with SETRANGE/INCR.
        assert_eq!(kv.apply(&exp("k", -1, true, ExpireCond::Always), 9_000), OpResult::Int(1));
        assert_eq!(kv.apply(&Op::Exists { keys: vec![b("k")] }, 9_000), OpResult::Int(0));
        kv.apply(&Op::Put { key: b("n"), value: b("1") }, 9_000);
        kv.apply(&exp("n", 100, true, ExpireCond::Always), 9_000);
        kv.apply(&Op::IncrBy { key: b("n"), by: 1 }, 9_010);
        assert_eq!(kv.apply(&ttl("n"), 9_010), OpResult::Int(90));
        assert_eq!(kv.apply(&Op::Get { key: b("n") }, 9_100), OpResult::Value(None));
        // Lazy (partial-order) mode decides expiry from the command's own time, per key.
        let mut lazy = KvStore::new();
        lazy.apply_lazy(&Op::Put { key: b("a"), value: b("v") }, 0);
        lazy.apply_lazy(&exp("a", 50, true, ExpireCond::Always), 100);
        assert_eq!(lazy.apply_lazy(&ttl("a"), 120), OpResult::Int(30));
        assert_eq!(lazy.apply_lazy(&ttl("a"), 150), OpResult::Int(-2));
        assert!(exp("a", 1, true, ExpireCond::Always).is_write());
        assert!(!ttl("a").is_write());
    }

    #[test]
    fn string_ranges_getex_float_rename_copy_flush() {
        let mut kv = KvStore::new();
        kv.apply0(&Op::Put { key: b("s"), value: b("This is a string") });
        let gr = |kv: &mut KvStore, s: i64, e: i64| kv.apply0(&Op::GetRange { key: b("s"), start: s, end: e });
        assert_eq!(gr(&mut kv, 0, 3), OpResult::Value(Some(b("This"))));
        assert_eq!(gr(&mut kv, -3, -1), OpResult::Value(Some(b("ing"))));
        assert_eq!(gr(&mut kv, 0, -1), OpResult::Value(Some(b("This is a string"))));
        assert_eq!(gr(&mut kv, 10, 100), OpResult::Value(Some(b("string"))));
        assert_eq!(gr(&mut kv, 5, 3), OpResult::Value(Some(b(""))));
        assert_eq!(gr(&mut kv, -1, -5), OpResult::Value(Some(b(""))));
        assert_eq!(kv.apply0(&Op::GetRange { key: b("none"), start: 0, end: -1 }), OpResult::Value(Some(b(""))));
        let sr = |k: &str, offset: u64, v: &str| Op::SetRange { key: b(k), offset, value: b(v) };
        assert_eq!(kv.apply0(&sr("s", 10, "STRING")), OpResult::Int(16));
        assert_eq!(kv.get(b"s"), Some(&b("This is a STRING")));
        assert_eq!(kv.apply0(&sr("z", 3, "ab")), OpResult::Int(5));
        assert_eq!(kv.get(b"z"), Some(&Bytes::from_static(b"\0\0\0ab")));
        assert_eq!(kv.apply0(&sr("empty", 3, "")), OpResult::Int(0));
        assert_eq!(kv.apply0(&Op::Exists { keys: vec![b("empty")] }), OpResult::Int(0));
        let l = Limits { max_key_bytes: 10, max_value_bytes: 8, max_frame_bytes: 100 };
        assert_eq!(sr("z", 7, "ab").validate(&l), Err(CommandError::ValueTooLarge { size: 9, limit: 8 }));
        // GETEX
        let getex = |expire, persist| Op::GetEx { key: b("s"), expire, persist };
        assert_eq!(kv.apply(&getex(Some((100, true)), false), 1_000), OpResult::Value(Some(b("This is a STRING"))));
        assert_eq!(kv.apply(&Op::Ttl { key: b("s") }, 1_000), OpResult::Int(100));
        kv.apply(&getex(None, true), 1_000);
        assert_eq!(kv.apply(&Op::Ttl { key: b("s") }, 1_000), OpResult::Int(-1));
        assert_eq!(kv.apply(&getex(Some((500, false)), false), 1_000), OpResult::Value(Some(b("This is a STRING"))));
        assert_eq!(kv.apply(&Op::Exists { keys: vec![b("s")] }, 1_000), OpResult::Int(0), "past time deletes");
        // INCRBYFLOAT
        let f = |k: &str, by: &str| Op::IncrByFloat { key: b(k), by: b(by) };
        kv.apply0(&Op::Put { key: b("f"), value: b("10.50") });
        assert_eq!(kv.apply0(&f("f", "0.1")), OpResult::Value(Some(b("10.6"))));
        assert_eq!(kv.apply0(&f("f", "-5")), OpResult::Value(Some(b("5.6"))));
        kv.apply0(&Op::Put { key: b("g"), value: b("5.0e3") });
        assert_eq!(kv.apply0(&f("g", "2.0e2")), OpResult::Value(Some(b("5200"))));
        assert_eq!(kv.apply0(&f("h", "1.1")), OpResult::Value(Some(b("1.1"))));
        assert_eq!(kv.apply0(&f("h", "2.2")), OpResult::Value(Some(b("3.3"))));
        assert_eq!(kv.apply0(&f("h", "-3.3")), OpResult::Value(Some(b("0"))));
        assert_eq!(kv.apply0(&f("h", "inf")), OpResult::Error("ERR increment would produce NaN or Infinity".into()));
        kv.apply0(&Op::Put { key: b("t"), value: b("abc") });
        assert_eq!(kv.apply0(&f("t", "1")), OpResult::Error("ERR value is not a valid float".into()));
        // RENAME / RENAMENX / COPY keep the value and the expiry.
        kv.apply(&Op::SetWithTtl { key: b("r"), value: b("v"), cond: SetCond::Always, ttl_ms: 1_000, get: false }, 0);
        let rn = |from: &str, to: &str, nx| Op::Rename { from: b(from), to: b(to), nx };
        assert_eq!(kv.apply0(&rn("nope", "x", false)), OpResult::Error("ERR no such key".into()));
        assert_eq!(kv.apply0(&rn("r", "r2", false)), OpResult::Done);
        assert_eq!(kv.apply0(&Op::Ttl { key: b("r2") }), OpResult::Int(1_000));
        assert_eq!(kv.apply0(&rn("r2", "t", true)), OpResult::Int(0));
        assert_eq!(kv.apply0(&rn("r2", "r2", false)), OpResult::Done);
        let cp = |from: &str, to: &str, replace| Op::Copy { from: b(from), to: b(to), replace };
        assert_eq!(kv.apply0(&cp("r2", "t", false)), OpResult::Int(0));
        assert_eq!(kv.apply0(&cp("r2", "t", true)), OpResult::Int(1));
        assert_eq!(kv.get(b"t"), Some(&b("v")));
        assert_eq!(kv.apply0(&Op::Ttl { key: b("t") }), OpResult::Int(1_000));
        assert_eq!(
            kv.apply0(&cp("t", "t", true)),
            OpResult::Error("ERR source and destination objects are the same".into())
        );
        assert_eq!(rn("a", "b", false).footprint(), Footprint::Keys(vec![&b"a"[..], &b"b"[..]]));
        // FLUSHALL empties everything, expiries included, and interferes with everything.
        assert_eq!(kv.apply0(&Op::FlushAll), OpResult::Done);
        assert_eq!(kv.apply0(&Op::DbSize), OpResult::Int(0));
        assert_eq!(kv.size_bytes(), 0);
        assert_eq!(kv, KvStore::new());
        assert!(Op::FlushAll.interferes(&Op::Get { key: b("x") }));
    }

    #[test]
    fn lists() {
        let mut kv = KvStore::new();
        let push = |k: &str, vs: &[&str], left, only_existing| Op::ListPush {
            key: b(k),
            values: vs.iter().map(|v| b(v)).collect(),
            left,
            only_existing,
        };
        let range = |kv: &mut KvStore, k: &str, start, stop| kv.apply0(&Op::ListRange { key: b(k), start, stop });
        let items = |vs: &[&str]| OpResult::Items(Some(vs.iter().map(|v| b(v)).collect()));
        assert_eq!(kv.apply0(&push("l", &["a"], true, true)), OpResult::Int(0), "LPUSHX on nothing");
        assert_eq!(kv.apply0(&push("l", &["a", "b", "c"], false, false)), OpResult::Int(3));
        assert_eq!(kv.apply0(&push("l", &["x", "y"], true, false)), OpResult::Int(5));
        assert_eq!(range(&mut kv, "l", 0, -1), items(&["y", "x", "a", "b", "c"]));
        assert_eq!(range(&mut kv, "l", -2, 100), items(&["b", "c"]));
        assert_eq!(range(&mut kv, "l", 3, 1), items(&[]));
        assert_eq!(range(&mut kv, "l", 0, -100), items(&[]));
        assert_eq!(range(&mut kv, "none", 0, -1), items(&[]));
        assert_eq!(kv.apply0(&Op::ListLen { key: b("l") }), OpResult::Int(5));
        assert_eq!(kv.apply0(&Op::ListIndex { key: b("l"), index: -1 }), OpResult::Value(Some(b("c"))));
        assert_eq!(kv.apply0(&Op::ListIndex { key: b("l"), index: 5 }), OpResult::Value(None));
        assert_eq!(kv.apply0(&Op::ListSet { key: b("l"), index: 1, value: b("X") }), OpResult::Done);
        assert_eq!(
            kv.apply0(&Op::ListSet { key: b("l"), index: 9, value: b("X") }),
            OpResult::Error("ERR index out of range".into())
        );
        assert_eq!(
            kv.apply0(&Op::ListSet { key: b("none"), index: 0, value: b("X") }),
            OpResult::Error("ERR no such key".into())
        );
        assert_eq!(kv.apply0(&Op::ListPop { key: b("l"), left: true, count: None }), OpResult::Value(Some(b("y"))));
        assert_eq!(kv.apply0(&Op::ListPop { key: b("l"), left: false, count: Some(2) }), items(&["c", "b"]));
        assert_eq!(kv.apply0(&Op::ListPop { key: b("none"), left: false, count: Some(2) }), OpResult::Items(None));
        assert_eq!(kv.apply0(&Op::ListPop { key: b("none"), left: false, count: None }), OpResult::Value(None));
        // LREM from the head, from the tail, all.
        kv.apply0(&push("r", &["a", "b", "a", "c", "a"], false, false));
        assert_eq!(kv.apply0(&Op::ListRemove { key: b("r"), count: -1, value: b("a") }), OpResult::Int(1));
        assert_eq!(range(&mut kv, "r", 0, -1), items(&["a", "b", "a", "c"]));
        assert_eq!(kv.apply0(&Op::ListRemove { key: b("r"), count: 1, value: b("a") }), OpResult::Int(1));
        assert_eq!(range(&mut kv, "r", 0, -1), items(&["b", "a", "c"]));
        assert_eq!(kv.apply0(&Op::ListRemove { key: b("r"), count: 0, value: b("a") }), OpResult::Int(1));
        assert_eq!(kv.apply0(&Op::ListTrim { key: b("r"), start: 1, stop: -1 }), OpResult::Done);
        assert_eq!(range(&mut kv, "r", 0, -1), items(&["c"]));
        // LMOVE, including onto itself (rotation); an emptied list disappears.
        kv.apply0(&push("m", &["1", "2", "3"], false, false));
        let mv =
            |from: &str, to: &str, from_left, to_left| Op::ListMove { from: b(from), to: b(to), from_left, to_left };
        assert_eq!(kv.apply0(&mv("m", "m", true, false)), OpResult::Value(Some(b("1"))));
        assert_eq!(range(&mut kv, "m", 0, -1), items(&["2", "3", "1"]));
        assert_eq!(kv.apply0(&mv("r", "m", true, true)), OpResult::Value(Some(b("c"))));
        assert_eq!(range(&mut kv, "m", 0, -1), items(&["c", "2", "3", "1"]));
        assert_eq!(kv.apply0(&Op::Type { key: b("r") }), OpResult::Text("none".into()));
        assert_eq!(kv.apply0(&Op::Type { key: b("m") }), OpResult::Text("list".into()));
        // WRONGTYPE both ways, and LMOVE to a non-list moves nothing.
        kv.apply0(&Op::Put { key: b("s"), value: b("v") });
        assert_eq!(kv.apply0(&push("s", &["a"], true, false)), OpResult::Error(WRONGTYPE.into()));
        assert_eq!(kv.apply0(&Op::Get { key: b("m") }), OpResult::Error(WRONGTYPE.into()));
        assert_eq!(kv.apply0(&mv("m", "s", true, true)), OpResult::Error(WRONGTYPE.into()));
        assert_eq!(kv.apply0(&Op::ListLen { key: b("m") }), OpResult::Int(4));
        assert_eq!(kv.size_bytes(), 3 + 5 + 2, "l = [X, a], m = [c, 2, 3, 1], s = v");
        // Footprints.
        assert_eq!(mv("a", "b", true, true).footprint(), Footprint::Keys(vec![&b"a"[..], &b"b"[..]]));
        assert!(mv("a", "b", true, true).is_write());
        assert!(!Op::ListRange { key: b("a"), start: 0, stop: -1 }.is_write());
        assert_eq!(push("k", &["vv", "w"], true, false).size(), 4);
        // Snapshots carry lists.
        let bytes = postcard::to_allocvec(&kv).unwrap();
        let back: KvStore = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, kv);
        assert_eq!(back.digest(), kv.digest());
    }

    #[test]
    fn sets_with_deterministic_random_choices() {
        let mut kv = KvStore::new();
        let sadd = |k: &str, vs: &[&str]| Op::SetAdd { key: b(k), members: vs.iter().map(|v| b(v)).collect() };
        let items = |vs: &[&str]| OpResult::Items(Some(vs.iter().map(|v| b(v)).collect()));
        assert_eq!(kv.apply0(&sadd("s", &["c", "a", "b", "a"])), OpResult::Int(3));
        assert_eq!(kv.apply0(&sadd("s", &["a", "d"])), OpResult::Int(1));
        assert_eq!(kv.apply0(&Op::SetMembers { key: b("s") }), items(&["a", "b", "c", "d"]));
        assert_eq!(kv.apply0(&Op::SetIsMember { key: b("s"), member: b("a") }), OpResult::Int(1));
        assert_eq!(kv.apply0(&Op::SetIsMember { key: b("s"), member: b("z") }), OpResult::Int(0));
        assert_eq!(kv.apply0(&Op::SetCard { key: b("s") }), OpResult::Int(4));
        assert_eq!(kv.apply0(&Op::SetRemove { key: b("s"), members: vec![b("d"), b("z")] }), OpResult::Int(1));
        kv.apply0(&sadd("t", &["b", "c", "x"]));
        let comb = |keys: &[&str], kind| Op::SetCombine { keys: keys.iter().map(|k| b(k)).collect(), kind };
        assert_eq!(kv.apply0(&comb(&["s", "t"], SetCombine::Inter)), items(&["b", "c"]));
        assert_eq!(kv.apply0(&comb(&["s", "t", "none"], SetCombine::Union)), items(&["a", "b", "c", "x"]));
        assert_eq!(kv.apply0(&comb(&["s", "t"], SetCombine::Diff)), items(&["a"]));
        assert_eq!(kv.apply0(&comb(&["s", "none"], SetCombine::Inter)), items(&[]));
        kv.apply0(&Op::Put { key: b("str"), value: b("v") });
        assert_eq!(kv.apply0(&comb(&["none", "str"], SetCombine::Inter)), OpResult::Error(WRONGTYPE.into()));
        assert_eq!(kv.apply0(&sadd("str", &["a"])), OpResult::Error(WRONGTYPE.into()));
        assert_eq!(kv.apply0(&Op::Type { key: b("s") }), OpResult::Text("set".into()));
        // SPOP / SRANDMEMBER: the choice is a function of the state and the command's stamp,
        // so two replicas applying the same command choose alike; different stamps spread.
        let pop = Op::SetPop { key: b("t"), count: Some(2) };
        let (mut r1, mut r2) = (kv.clone(), kv.clone());
        let a = r1.apply_stamped(&pop, 0, false, 77);
        assert_eq!(a, r2.apply_stamped(&pop, 0, false, 77));
        assert_eq!(r1, r2);
        let OpResult::Items(Some(popped)) = a else { panic!("{a:?}") };
        assert_eq!(popped.len(), 2);
        assert_eq!(r1.apply0(&Op::SetCard { key: b("t") }), OpResult::Int(1));
        let mut seen = BTreeSet::new();
        for stamp in 1..50 {
            if let OpResult::Value(Some(v)) =
                kv.clone().apply_stamped(&Op::SetPop { key: b("t"), count: None }, 0, false, stamp)
            {
                seen.insert(v);
            }
        }
        assert_eq!(seen.len(), 3, "every member gets picked by some stamp");
        let rand = |count| Op::SetRandMember { key: b("s"), count };
        let OpResult::Items(Some(distinct)) = kv.apply_stamped(&rand(Some(10)), 0, false, 5) else { panic!() };
        assert_eq!(distinct.len(), 3);
        assert_eq!(distinct.iter().collect::<BTreeSet<_>>().len(), 3);
        let OpResult::Items(Some(repeated)) = kv.apply_stamped(&rand(Some(-7)), 0, false, 5) else { panic!() };
        assert_eq!(repeated.len(), 7);
        assert_eq!(kv.apply0(&Op::SetRandMember { key: b("none"), count: Some(3) }), items(&[]));
        assert_eq!(kv.apply0(&Op::SetPop { key: b("none"), count: None }), OpResult::Value(None));
        assert!(!rand(None).is_write());
        assert!(pop.is_write());
        // Popping everything removes the key.
        let OpResult::Items(Some(all)) = kv.apply0(&Op::SetPop { key: b("t"), count: Some(10) }) else { panic!() };
        assert_eq!(all.into_iter().collect::<BTreeSet<_>>(), [b("b"), b("c"), b("x")].into_iter().collect());
        assert_eq!(kv.apply0(&Op::Exists { keys: vec![b("t")] }), OpResult::Int(0));
        assert_eq!(comb(&["a", "b"], SetCombine::Union).footprint(), Footprint::Keys(vec![&b"a"[..], &b"b"[..]]));
        assert_eq!(sadd("k", &["ab", "c"]).size(), 4);
        let bytes = postcard::to_allocvec(&kv).unwrap();
        assert_eq!(postcard::from_bytes::<KvStore>(&bytes).unwrap(), kv);
    }

    #[test]
    fn hash_rand_field_and_object_encoding() {
        let items = |vs: &[&str]| OpResult::Items(Some(vs.iter().map(|v| b(v)).collect()));
        let mut kv = KvStore::new();
        kv.apply0(&Op::HashSet { key: b("h"), pairs: vec![(b("a"), b("1")), (b("b"), b("2")), (b("c"), b("3"))] });
        let rand = |count, with_values| Op::HashRandField { key: b("h"), count, with_values };
        let OpResult::Value(Some(one)) = kv.apply_stamped(&rand(None, false), 0, false, 9) else { panic!() };
        assert!([b("a"), b("b"), b("c")].contains(&one));
        let OpResult::Items(Some(all)) = kv.apply_stamped(&rand(Some(10), true), 0, false, 9) else { panic!() };
        let pairs: BTreeSet<(Bytes, Bytes)> = all.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect();
        assert_eq!(pairs, [(b("a"), b("1")), (b("b"), b("2")), (b("c"), b("3"))].into_iter().collect());
        let OpResult::Items(Some(two)) = kv.apply_stamped(&rand(Some(2), false), 0, false, 9) else { panic!() };
        assert_eq!(two.iter().collect::<BTreeSet<_>>().len(), 2);
        let OpResult::Items(Some(rep)) = kv.apply_stamped(&rand(Some(-7), true), 0, false, 9) else { panic!() };
        assert_eq!(rep.len(), 14);
        assert!(rep.chunks(2).all(|c| pairs.contains(&(c[0].clone(), c[1].clone()))));
        assert_eq!(kv.apply0(&rand(Some(0), false)), items(&[]));
        let missing = |count| Op::HashRandField { key: b("none"), count, with_values: false };
        assert_eq!(kv.apply0(&missing(None)), OpResult::Value(None));
        assert_eq!(kv.apply0(&missing(Some(-3))), items(&[]));
        kv.apply0(&Op::Put { key: b("s"), value: b("x") });
        assert_eq!(
            kv.apply0(&Op::HashRandField { key: b("s"), count: None, with_values: false }),
            OpResult::Error(WRONGTYPE.into())
        );
        assert!(!rand(None, false).is_write());

        // OBJECT ENCODING as redis-server 7.0 answers under its default thresholds.
        let enc = |kv: &mut KvStore, key: &str| match kv.apply0(&Op::ObjectEncoding { key: b(key) }) {
            OpResult::Value(v) => v.map(|v| String::from_utf8(v.to_vec()).unwrap()),
            other => panic!("{other:?}"),
        };
        for (value, want) in [
            ("123", "int"),
            ("-9223372036854775808", "int"),
            ("9223372036854775808", "embstr"),
            ("+5", "embstr"),
            ("05", "embstr"),
            ("-0", "embstr"),
            ("", "embstr"),
            (&"x".repeat(44), "embstr"),
            (&"x".repeat(45), "raw"),
        ] {
            kv.apply0(&Op::Put { key: b("s"), value: Bytes::from(value.to_string()) });
            assert_eq!(enc(&mut kv, "s").as_deref(), Some(want), "{value:?}");
        }
        assert_eq!(enc(&mut kv, "h").as_deref(), Some("listpack"));
        let fields = |n: usize| (0..n).map(|i| (Bytes::from(format!("f{i}")), b("v"))).collect::<Vec<_>>();
        kv.apply0(&Op::HashSet { key: b("g"), pairs: fields(512) });
        assert_eq!(enc(&mut kv, "g").as_deref(), Some("listpack"));
        kv.apply0(&Op::HashSet { key: b("g"), pairs: fields(513) });
        assert_eq!(enc(&mut kv, "g").as_deref(), Some("hashtable"));
        kv.apply0(&Op::HashSet { key: b("h"), pairs: vec![(b("big"), Bytes::from("v".repeat(65)))] });
        assert_eq!(enc(&mut kv, "h").as_deref(), Some("hashtable"));
        let many: Vec<Bytes> = (0..513).map(|i| Bytes::from(i.to_string())).collect();
        kv.apply0(&Op::SetAdd { key: b("i"), members: many[..512].to_vec() });
        assert_eq!(enc(&mut kv, "i").as_deref(), Some("intset"));
        kv.apply0(&Op::SetAdd { key: b("i"), members: many[512..].to_vec() });
        assert_eq!(enc(&mut kv, "i").as_deref(), Some("hashtable"));
        kv.apply0(&Op::SetAdd { key: b("t"), members: vec![b("a")] });
        assert_eq!(enc(&mut kv, "t").as_deref(), Some("hashtable"));
        kv.apply0(&Op::ListPush { key: b("l"), values: vec![b("a")], left: true, only_existing: false });
        assert_eq!(enc(&mut kv, "l").as_deref(), Some("quicklist"));
        let zadd = |pairs: Vec<(Bytes, Bytes)>| Op::ZAdd { key: b("z"), pairs, flags: ZAddFlags::default() };
        kv.apply0(&zadd(vec![(b("1"), b("a"))]));
        assert_eq!(enc(&mut kv, "z").as_deref(), Some("listpack"));
        kv.apply0(&zadd((0..128).map(|i| (b("1"), Bytes::from(format!("m{i}")))).collect()));
        assert_eq!(enc(&mut kv, "z").as_deref(), Some("skiplist"));
        assert_eq!(enc(&mut kv, "none"), None);
    }

    #[test]
    fn hash_counters() {
        let mut kv = KvStore::new();
        let hincr = |f: &str, by| Op::HashIncrBy { key: b("h"), field: b(f), by };
        let hfloat = |f: &str, by: &str| Op::HashIncrByFloat { key: b("h"), field: b(f), by: b(by) };
        assert_eq!(kv.apply0(&hincr("n", 5)), OpResult::Int(5));
        assert_eq!(kv.apply0(&hincr("n", -7)), OpResult::Int(-2));
        assert_eq!(kv.apply0(&hfloat("f", "10.5")), OpResult::Value(Some(b("10.5"))));
        assert_eq!(kv.apply0(&hfloat("f", "0.1")), OpResult::Value(Some(b("10.6"))));
        assert_eq!(kv.apply0(&hincr("f", 1)), OpResult::Error("ERR hash value is not an integer".into()));
        kv.apply0(&Op::HashSet { key: b("h"), pairs: vec![(b("s"), b("abc"))] });
        assert_eq!(kv.apply0(&hfloat("s", "1")), OpResult::Error("ERR hash value is not a float".into()));
        kv.apply0(&Op::HashSet { key: b("h"), pairs: vec![(b("m"), b(&i64::MAX.to_string()))] });
        assert_eq!(kv.apply0(&hincr("m", 1)), OpResult::Error("ERR increment or decrement would overflow".into()));
        let nx = |f: &str, v: &str| Op::HashSetNx { key: b("h"), field: b(f), value: b(v) };
        assert_eq!(kv.apply0(&nx("s", "x")), OpResult::Int(0));
        assert_eq!(kv.apply0(&nx("new", "x")), OpResult::Int(1));
        assert_eq!(kv.apply0(&Op::HashStrlen { key: b("h"), field: b("s") }), OpResult::Int(3));
        assert_eq!(kv.apply0(&Op::HashStrlen { key: b("h"), field: b("zz") }), OpResult::Int(0));
        assert_eq!(kv.apply0(&Op::HashStrlen { key: b("none"), field: b("zz") }), OpResult::Int(0));
        kv.apply0(&Op::Put { key: b("str"), value: b("v") });
        let wrong = Op::HashIncrBy { key: b("str"), field: b("f"), by: 1 };
        assert_eq!(kv.apply0(&wrong), OpResult::Error(WRONGTYPE.into()));
        assert!(hincr("n", 1).is_write() && nx("a", "b").is_write());
        assert!(!Op::HashStrlen { key: b("h"), field: b("s") }.is_write());
        assert_eq!(nx("ab", "cde").size(), 1 + 2 + 3);
    }

    #[test]
    fn sorted_sets() {
        let mut kv = KvStore::new();
        let zadd = |pairs: &[(&str, &str)], flags: ZAddFlags| Op::ZAdd {
            key: b("z"),
            pairs: pairs.iter().map(|(s, m)| (b(s), b(m))).collect(),
            flags,
        };
        let items = |vs: &[&str]| OpResult::Items(Some(vs.iter().map(|v| b(v)).collect()));
        let all = |rev, with_scores| Op::ZRange {
            key: b("z"),
            by: ZRangeBy::Index { start: 0, stop: -1 },
            rev,
            limit: None,
            with_scores,
        };
        let none = ZAddFlags::default();
        assert_eq!(kv.apply0(&zadd(&[("2", "b"), ("1", "a"), ("1", "c"), ("0.1", "d")], none)), OpResult::Int(4));
        // By score, ties by member.
        assert_eq!(kv.apply0(&all(false, true)), items(&["d", "0.10000000000000001", "a", "1", "c", "1", "b", "2"]));
        assert_eq!(kv.apply0(&all(true, false)), items(&["b", "c", "a", "d"]));
        let by_score = |min: f64, min_ex, max: f64, rev, limit| Op::ZRange {
            key: b("z"),
            by: ZRangeBy::Score { min: ScoreBound::new(min, min_ex), max: ScoreBound::new(max, false) },
            rev,
            limit,
            with_scores: false,
        };
        assert_eq!(kv.apply0(&by_score(0.1, true, 2.0, false, None)), items(&["a", "c", "b"]));
        assert_eq!(kv.apply0(&by_score(f64::NEG_INFINITY, false, 1.0, true, Some((1, 1)))), items(&["a"]));
        assert_eq!(kv.apply0(&by_score(0.0, false, 9.0, false, Some((-1, 1)))), items(&[]));
        // NX / XX / GT / LT / CH / INCR.
        let f = |nx, xx, gt, lt, ch, incr| ZAddFlags { nx, xx, gt, lt, ch, incr };
        assert_eq!(
            kv.apply0(&zadd(&[("5", "a"), ("5", "e")], f(true, false, false, false, false, false))),
            OpResult::Int(1)
        );
        assert_eq!(
            kv.apply0(&zadd(&[("5", "a"), ("5", "x")], f(false, true, false, false, true, false))),
            OpResult::Int(1)
        );
        assert_eq!(
            kv.apply0(&zadd(&[("3", "a"), ("9", "b")], f(false, false, true, false, true, false))),
            OpResult::Int(1)
        );
        // LT with a positive increment can never hold: nil, as in Redis; GT does.
        assert_eq!(kv.apply0(&zadd(&[("3", "a")], f(false, false, false, true, false, true))), OpResult::Value(None));
        assert_eq!(
            kv.apply0(&zadd(&[("3", "a")], f(false, false, true, false, false, true))),
            OpResult::Value(Some(b("8")))
        );
        assert_eq!(
            kv.apply0(&zadd(&[("1", "none")], f(false, true, false, false, false, true))),
            OpResult::Value(None)
        );
        assert_eq!(kv.apply0(&Op::ZScore { key: b("z"), member: b("a") }), OpResult::Value(Some(b("8"))));
        assert_eq!(kv.apply0(&Op::ZScore { key: b("z"), member: b("x") }), OpResult::Value(None));
        kv.apply0(&zadd(&[("inf", "i")], none));
        assert_eq!(
            kv.apply0(&zadd(&[("-inf", "i")], f(false, false, false, false, false, true))),
            OpResult::Error("ERR resulting score is not a number (NaN)".into())
        );
        // Ranks, counts, pops.
        assert_eq!(kv.apply0(&Op::ZRank { key: b("z"), member: b("d"), rev: false }), OpResult::Int(0));
        assert_eq!(kv.apply0(&Op::ZRank { key: b("z"), member: b("d"), rev: true }), OpResult::Int(5));
        assert_eq!(kv.apply0(&Op::ZRank { key: b("z"), member: b("q"), rev: false }), OpResult::Value(None));
        let count = |min: f64, max: f64| Op::ZCount {
            key: b("z"),
            min: ScoreBound::new(min, false),
            max: ScoreBound::new(max, true),
        };
        assert_eq!(kv.apply0(&count(1.0, 8.0)), OpResult::Int(2), "c = 1, e = 5; a = 8 excluded");
        assert_eq!(kv.apply0(&Op::ZCard { key: b("z") }), OpResult::Int(6));
        assert_eq!(kv.apply0(&Op::ZPop { key: b("z"), max: true, count: 2 }), items(&["i", "inf", "b", "9"]));
        assert_eq!(kv.apply0(&Op::ZPop { key: b("z"), max: false, count: 1 }), items(&["d", "0.10000000000000001"]));
        assert_eq!(kv.apply0(&Op::ZRem { key: b("z"), members: vec![b("a"), b("q")] }), OpResult::Int(1));
        assert_eq!(kv.apply0(&Op::Type { key: b("z") }), OpResult::Text("zset".into()));
        let bytes = postcard::to_allocvec(&kv).unwrap();
        assert_eq!(postcard::from_bytes::<KvStore>(&bytes).unwrap(), kv);
        assert_eq!(kv.apply0(&Op::ZPop { key: b("z"), max: false, count: 10 }), items(&["c", "1", "e", "5"]));
        assert_eq!(kv.apply0(&Op::Exists { keys: vec![b("z")] }), OpResult::Int(0));
        assert_eq!(kv.size_bytes(), 0);
        kv.apply0(&Op::Put { key: b("s"), value: b("v") });
        assert_eq!(kv.apply0(&Op::ZCard { key: b("s") }), OpResult::Error(WRONGTYPE.into()));
        assert_eq!(kv.apply0(&zadd(&[("1", "a")], none)), OpResult::Int(1));
        assert_eq!(kv.apply0(&Op::Get { key: b("z") }), OpResult::Error(WRONGTYPE.into()));
        assert_eq!(kv.apply0(&Op::ZRem { key: b("s"), members: vec![b("a")] }), OpResult::Error(WRONGTYPE.into()));
        // Writes in place: the byte count and the key's version (WATCH) follow every change.
        let version = |kv: &mut KvStore| kv.apply_stamped(&Op::Versions { keys: vec![b("z")] }, 0, false, 0);
        let mut kv = KvStore::new();
        kv.apply_stamped(&zadd(&[("1", "a"), ("2", "bb")], none), 0, false, 5);
        assert_eq!(kv.size_bytes(), 1 + (1 + 8) + (2 + 8));
        let v5 = version(&mut kv);
        kv.apply_stamped(&zadd(&[("9", "a")], f(true, false, false, false, false, false)), 0, false, 6);
        assert_eq!(version(&mut kv), v5, "NX on an existing member changes nothing");
        kv.apply_stamped(&zadd(&[("3", "a"), ("1", "ccc")], none), 0, false, 7);
        assert_ne!(version(&mut kv), v5);
        assert_eq!(kv.size_bytes(), 1 + (1 + 8) + (2 + 8) + (3 + 8));
        kv.apply_stamped(&Op::ZRem { key: b("z"), members: vec![b("bb")] }, 0, false, 8);
        assert_eq!(kv.size_bytes(), 1 + (1 + 8) + (3 + 8));
        let restored: KvStore = postcard::from_bytes(&postcard::to_allocvec(&kv).unwrap()).unwrap();
        assert_eq!(restored, kv);
        // INCR that would make NaN is refused before anything changes; with NX it is a no-op.
        kv.apply0(&zadd(&[("inf", "a")], none));
        assert_eq!(
            kv.apply0(&zadd(&[("-inf", "a")], f(false, false, false, false, false, true))),
            OpResult::Error("ERR resulting score is not a number (NaN)".into())
        );
        assert_eq!(
            kv.apply0(&zadd(&[("-inf", "a")], f(true, false, false, false, false, true))),
            OpResult::Value(None)
        );
        assert_eq!(kv.apply0(&Op::ZScore { key: b("z"), member: b("a") }), OpResult::Value(Some(b("inf"))));
        assert_eq!(kv.apply0(&Op::ZPop { key: b("z"), max: true, count: 5 }), items(&["a", "inf", "ccc", "1"]));
        assert_eq!((kv.size_bytes(), kv.len()), (0, 0));
        // Redis's %.17g.
        for (x, text) in [
            (0.1, "0.10000000000000001"),
            (1e20, "1e+20"),
            (1.5, "1.5"),
            (3.0, "3"),
            (-0.0, "0"),
            (123456789.123, "123456789.123"),
            (1e-5, "1.0000000000000001e-05"),
            (0.0001, "0.0001"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(format_score(x), text, "{x}");
        }
        assert!(zadd(&[("1", "a")], none).is_write());
        assert!(!count(0.0, 1.0).is_write());
        assert_eq!(zadd(&[("1", "ab")], none).size(), 3);
    }

    /// Which kind an operation is. An exhaustive match: a new variant does not compile until it
    /// is numbered here, and then fails `footprints_cover_what_operations_touch` until
    /// `one_of_each` has an example of it.
    fn kind(op: &Op) -> usize {
        match op {
            Op::Get { .. } => 0,
            Op::Put { .. } => 1,
            Op::Delete { .. } => 2,
            Op::Cas { .. } => 3,
            Op::Scan { .. } => 4,
            Op::Noop => 5,
            Op::Set { .. } => 6,
            Op::MultiGet { .. } => 7,
            Op::MultiPut { .. } => 8,
            Op::MultiDelete { .. } => 9,
            Op::Exists { .. } => 10,
            Op::IncrBy { .. } => 11,
            Op::Append { .. } => 12,
            Op::Strlen { .. } => 13,
            Op::GetDel { .. } => 14,
            Op::HashSet { .. } => 15,
            Op::HashGet { .. } => 16,
            Op::HashGetAll { .. } => 17,
            Op::HashDelete { .. } => 18,
            Op::HashLen { .. } => 19,
            Op::Type { .. } => 20,
            Op::KeyScan { .. } => 21,
            Op::DbSize => 22,
            Op::SetWithTtl { .. } => 23,
            Op::Versions { .. } => 24,
            Op::Multi { .. } => 25,
            Op::Expire { .. } => 26,
            Op::Ttl { .. } => 27,
            Op::Persist { .. } => 28,
            Op::GetRange { .. } => 29,
            Op::SetRange { .. } => 30,
            Op::GetEx { .. } => 31,
            Op::IncrByFloat { .. } => 32,
            Op::Rename { .. } => 33,
            Op::Copy { .. } => 34,
            Op::FlushAll => 35,
            Op::ListPush { .. } => 36,
            Op::ListPop { .. } => 37,
            Op::ListRange { .. } => 38,
            Op::ListLen { .. } => 39,
            Op::ListIndex { .. } => 40,
            Op::ListSet { .. } => 41,
            Op::ListRemove { .. } => 42,
            Op::ListTrim { .. } => 43,
            Op::HashIncrBy { .. } => 44,
            Op::HashIncrByFloat { .. } => 45,
            Op::HashSetNx { .. } => 46,
            Op::HashStrlen { .. } => 47,
            Op::ZAdd { .. } => 48,
            Op::ZRem { .. } => 49,
            Op::ZScore { .. } => 50,
            Op::ZMScore { .. } => 51,
            Op::ZCard { .. } => 52,
            Op::ZRank { .. } => 53,
            Op::ZCount { .. } => 54,
            Op::ZLexCount { .. } => 66,
            Op::ZRange { .. } => 55,
            Op::ZPop { .. } => 56,
            Op::SetAdd { .. } => 57,
            Op::SetRemove { .. } => 58,
            Op::SetMembers { .. } => 59,
            Op::SetIsMember { .. } => 60,
            Op::SetCard { .. } => 61,
            Op::SetCombine { .. } => 62,
            Op::SetPop { .. } => 63,
            Op::SetRandMember { .. } => 64,
            Op::ListMove { .. } => 65,
            Op::MemberScan { .. } => 67,
            Op::HashRandField { .. } => 68,
            Op::ObjectEncoding { .. } => 69,
            Op::ScanResume { .. } => 70,
        }
    }
    const KINDS: usize = 71;

    /// A store with a key of every type: strings `str` and `n` (a number), hash `h`, lists
    /// `l` and `m`, sets `s` and `t`, sorted sets `y` and `z`.
    fn typed_store() -> KvStore {
        let mut kv = KvStore::new();
        let none = ZAddFlags::default();
        for op in [
            Op::Put { key: b("str"), value: b("abc") },
            Op::Put { key: b("n"), value: b("5") },
            Op::HashSet { key: b("h"), pairs: vec![(b("f"), b("1")), (b("g"), b("x"))] },
            Op::ListPush { key: b("l"), values: vec![b("a"), b("b"), b("a")], left: false, only_existing: false },
            Op::ListPush { key: b("m"), values: vec![b("c")], left: false, only_existing: false },
            Op::SetAdd { key: b("s"), members: vec![b("a"), b("b"), b("c")] },
            Op::SetAdd { key: b("t"), members: vec![b("b"), b("d")] },
            Op::ZAdd { key: b("z"), pairs: vec![(b("1"), b("a")), (b("2"), b("b"))], flags: none },
            Op::ZAdd { key: b("y"), pairs: vec![(b("3"), b("c"))], flags: none },
        ] {
            assert!(!matches!(kv.apply_stamped(&op, 0, false, 1), OpResult::Error(_)), "{op:?}");
        }
        kv
    }

    /// One operation of every kind, on the keys of [`typed_store`].
    fn one_of_each() -> Vec<Op> {
        let k = b;
        let ks = |v: &[&str]| v.iter().map(|s| b(s)).collect::<Vec<_>>();
        let bound = |x: f64| ScoreBound::new(x, false);
        vec![
            Op::Get { key: k("str") },
            Op::Put { key: k("str"), value: k("v") },
            Op::Delete { key: k("h") },
            Op::Cas { key: k("str"), expect: Some(k("abc")), new: Some(k("x")) },
            Op::Scan { start: k("m"), end: k("t"), limit: 0 },
            Op::Noop,
            Op::Set {
                key: k("n"),
                value: k("v"),
                cond: SetCond::IfPresent,
                expire_at_ms: Some(1_000),
                keep_ttl: false,
                get: true,
            },
            Op::MultiGet { keys: ks(&["str", "n", "h"]) },
            Op::MultiPut { pairs: vec![(k("str"), k("1")), (k("new"), k("2"))] },
            Op::MultiDelete { keys: ks(&["l", "z"]) },
            Op::Exists { keys: ks(&["l", "s", "nope"]) },
            Op::IncrBy { key: k("n"), by: 2 },
            Op::Append { key: k("str"), value: k("d") },
            Op::Strlen { key: k("str") },
            Op::GetDel { key: k("n") },
            Op::HashSet { key: k("h"), pairs: vec![(k("f"), k("2"))] },
            Op::HashGet { key: k("h"), fields: ks(&["f", "q"]) },
            Op::HashGetAll { key: k("h") },
            Op::HashDelete { key: k("h"), fields: ks(&["g"]) },
            Op::HashLen { key: k("h") },
            Op::Type { key: k("z") },
            Op::KeyScan { after: Bytes::new(), pattern: None, count: 10, of_type: None },
            Op::MemberScan { key: k("h"), of: ScanOf::Hash, after: Bytes::new(), pattern: None, count: 10 },
            Op::HashRandField { key: k("h"), count: Some(-3), with_values: true },
            Op::ObjectEncoding { key: k("z") },
            Op::ScanResume {
                target: ScanTarget::Members { key: k("z"), of: ScanOf::ZSet },
                fingerprint: scan_fingerprint(b"a"),
                pattern: Some(k("*")),
                count: 10,
            },
            Op::DbSize,
            Op::SetWithTtl { key: k("str"), value: k("v"), cond: SetCond::Always, ttl_ms: 10, get: true },
            Op::Versions { keys: ks(&["str", "z"]) },
            Op::Multi {
                ops: vec![
                    Op::Get { key: k("n") },
                    Op::ListPush { key: k("m"), values: ks(&["d"]), left: true, only_existing: true },
                ],
                watch: vec![(k("s"), 1)],
            },
            Op::Expire { key: k("l"), ms: 5_000, relative: true, cond: ExpireCond::Always },
            Op::Ttl { key: k("str") },
            Op::Persist { key: k("str") },
            Op::GetRange { key: k("str"), start: 1, end: -1 },
            Op::SetRange { key: k("str"), offset: 1, value: k("zz") },
            Op::GetEx { key: k("str"), expire: Some((500, true)), persist: false },
            Op::IncrByFloat { key: k("n"), by: k("0.5") },
            Op::Rename { from: k("l"), to: k("s"), nx: false },
            Op::Copy { from: k("h"), to: k("hh"), replace: false },
            Op::FlushAll,
            Op::ListPush { key: k("l"), values: ks(&["x"]), left: true, only_existing: true },
            Op::ListPop { key: k("l"), left: false, count: Some(2) },
            Op::ListRange { key: k("l"), start: 0, stop: -1 },
            Op::ListLen { key: k("m") },
            Op::ListIndex { key: k("l"), index: -1 },
            Op::ListSet { key: k("l"), index: 0, value: k("q") },
            Op::ListRemove { key: k("l"), count: 0, value: k("a") },
            Op::ListTrim { key: k("l"), start: 1, stop: 1 },
            Op::HashIncrBy { key: k("h"), field: k("f"), by: 3 },
            Op::HashIncrByFloat { key: k("h"), field: k("f"), by: k("1.5") },
            Op::HashSetNx { key: k("h"), field: k("new"), value: k("v") },
            Op::HashStrlen { key: k("h"), field: k("g") },
            Op::ZAdd {
                key: k("z"),
                pairs: vec![(k("5"), k("a")), (k("1"), k("c"))],
                flags: ZAddFlags { ch: true, ..ZAddFlags::default() },
            },
            Op::ZRem { key: k("z"), members: ks(&["a", "q"]) },
            Op::ZScore { key: k("z"), member: k("b") },
            Op::ZMScore { key: k("y"), members: ks(&["c", "a"]) },
            Op::ZCard { key: k("y") },
            Op::ZRank { key: k("z"), member: k("b"), rev: true },
            Op::ZCount { key: k("z"), min: bound(0.0), max: bound(1.5) },
            Op::ZRange {
                key: k("z"),
                by: ZRangeBy::Score { min: bound(f64::NEG_INFINITY), max: bound(9.0) },
                rev: true,
                limit: Some((0, 1)),
                with_scores: true,
            },
            Op::ZPop { key: k("z"), max: false, count: 1 },
            Op::ZLexCount { key: k("y"), min: LexBound::Included(k("a")), max: LexBound::Max },
            Op::SetAdd { key: k("s"), members: ks(&["z"]) },
            Op::SetRemove { key: k("t"), members: ks(&["b"]) },
            Op::SetMembers { key: k("t") },
            Op::SetIsMember { key: k("s"), member: k("a") },
            Op::SetCard { key: k("s") },
            Op::SetCombine { keys: ks(&["s", "t"]), kind: SetCombine::Diff },
            Op::SetPop { key: k("s"), count: Some(2) },
            Op::SetRandMember { key: k("t"), count: Some(-3) },
            Op::ListMove { from: k("l"), to: k("m"), from_left: true, to_left: false },
        ]
    }

    /// A scan resumed from a cursor's fingerprint (on a replica that did not hand the cursor
    /// out) continues exactly where the remembered key would; when that key is gone it starts
    /// over, so an element present throughout is never missed.
    #[test]
    fn a_scan_resumed_from_a_fingerprint_continues_after_its_key() {
        let mut kv = KvStore::new();
        let names: Vec<String> = (0..40).map(|i| format!("k{i:02}")).collect();
        for n in &names {
            kv.apply0(&Op::Put { key: b(n), value: b("v") });
        }
        kv.apply0(&Op::HashSet { key: b("h"), pairs: names.iter().map(|n| (b(n), b("1"))).collect() });
        let keys_of = |r: OpResult| match r {
            OpResult::Keys { keys, next } => (keys, next),
            other => panic!("{other:?}"),
        };
        // Key space: alternate the remembered and the resumed way; every key exactly once.
        let (mut seen, mut next) =
            keys_of(kv.apply0(&Op::KeyScan { after: Bytes::new(), pattern: None, count: 7, of_type: None }));
        let mut resumed = false;
        while let Some(after) = next {
            let op = if resumed {
                Op::KeyScan { after, pattern: None, count: 7, of_type: None }
            } else {
                let fingerprint = scan_fingerprint(&after);
                Op::ScanResume { target: ScanTarget::Keys { of_type: None }, fingerprint, pattern: None, count: 7 }
            };
            resumed = !resumed;
            let (keys, n) = keys_of(kv.apply0(&op));
            seen.extend(keys);
            next = n;
        }
        let mut expected: Vec<Bytes> = names.iter().map(|n| b(n)).collect();
        expected.insert(0, b("h"));
        assert_eq!(seen, expected);
        // Members: resumed after k09 gives k10.. like HSCAN after k09.
        let member = |after: &str| Op::MemberScan {
            key: b("h"),
            of: ScanOf::Hash,
            after: b(after),
            pattern: Some(b("k1*")),
            count: 3,
        };
        let target = ScanTarget::Members { key: b("h"), of: ScanOf::Hash };
        let resume =
            |fingerprint| Op::ScanResume { target: target.clone(), fingerprint, pattern: Some(b("k1*")), count: 3 };
        assert_eq!(kv.apply0(&resume(scan_fingerprint(b"k09"))), kv.apply0(&member("k09")));
        // The key the cursor stood for was deleted: start over (repeats, no misses).
        kv.apply0(&Op::MultiDelete { keys: vec![b("k09")] });
        let (keys, _) = keys_of(kv.apply0(&Op::ScanResume {
            target: ScanTarget::Keys { of_type: None },
            fingerprint: scan_fingerprint(b"k09"),
            pattern: None,
            count: 2,
        }));
        assert_eq!(keys, vec![b("h"), b("k00")]);
        // Resuming on the wrong type is WRONGTYPE, as HSCAN is; cursor 0 never stands for a key.
        assert!(matches!(
            kv.apply0(&Op::ScanResume { target: ScanTarget::Members { key: b("k00"), of: ScanOf::Set }, fingerprint: 5, pattern: None, count: 1 }),
            OpResult::Error(e) if e.starts_with("WRONGTYPE")
        ));
        assert_ne!(scan_fingerprint(b""), 0);
    }

    /// Every operation's footprint covers what it touches (EPaxos orders interfering commands
    /// by it, and lazy expiry purges only it): it writes no key outside, and its result and
    /// its writes do not depend on any key outside (checked by expiring each key outside and
    /// comparing the lazy path, which leaves it in place, with the eager one, which purges it).
    #[test]
    fn footprints_cover_what_operations_touch() {
        let ops = one_of_each();
        let kinds: BTreeSet<usize> = ops.iter().map(kind).collect();
        assert_eq!(kinds, (0..KINDS).collect(), "one_of_each must hold every kind of operation once");
        assert_eq!(ops.len(), KINDS);
        let base = typed_store();
        let keys: Vec<Bytes> = base.map.keys().cloned().collect();
        for op in &ops {
            let fp = op.footprint();
            let inside = |k: &[u8]| match &fp {
                Footprint::None => false,
                Footprint::Keys(ks) => ks.contains(&k),
                Footprint::Range { start, end } => k >= *start && (end.is_empty() || k < *end),
                Footprint::All => true,
            };
            let mut after = base.clone();
            let result = after.apply_stamped(op, 100, false, 7);
            assert!(!matches!(result, OpResult::Error(_)), "{op:?} should run on the typed store: {result:?}");
            for k in base.map.keys().chain(after.map.keys()) {
                if !inside(k) {
                    assert_eq!(base.map.get(k), after.map.get(k), "{op:?} wrote {k:?} outside its footprint");
                }
            }
            if !op.is_write() {
                assert_eq!(base.map, after.map, "{op:?} is not a write but changed the store");
            }
            for k in &keys {
                let mut expiring = base.clone();
                let expire = Op::Expire { key: k.clone(), ms: 50, relative: false, cond: ExpireCond::Always };
                assert_eq!(expiring.apply(&expire, 0), OpResult::Int(1));
                let (mut lazy, mut eager) = (expiring.clone(), expiring);
                let r_lazy = lazy.apply_stamped(op, 100, true, 7);
                let r_eager = eager.apply_stamped(op, 100, false, 7);
                assert_eq!(r_lazy, r_eager, "{op:?} read {k:?}, which is outside its footprint");
                for key in lazy.map.keys().chain(eager.map.keys()) {
                    if key != k {
                        assert_eq!(lazy.map.get(key), eager.map.get(key), "{op:?}: {key:?} depends on {k:?}");
                    }
                }
            }
        }
    }
}
