//! The command table and the translation of Redis commands into replicated operations.
//!
//! Data commands become one [`Op`] each (multi-key commands included, so MSET/DEL/MGET are
//! atomic: one log entry) plus a [`Shape`] that says how the [`OpResult`] is rendered, since
//! the same operation answers differently depending on the command (HSET counts new fields,
//! HMSET says OK; HGET and HEXISTS both read fields). Connection and server commands (PING,
//! HELLO, INFO, …) are answered by the connection itself (see `super::conn`). Error texts are
//! Redis's own, because clients and their test suites match on them.

use super::reply::RespValue;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use synod_core::kv::{scan_fingerprint, ScanOf, ScanTarget, SetCond};
use synod_core::{Op, OpResult};

/// Which part of the server answers a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    String,
    Hash,
    List,
    Set,
    SortedSet,
    Keyspace,
    Connection,
    Server,
    /// MULTI/EXEC/DISCARD/WATCH/UNWATCH: handled by the connection (`super::conn`), which
    /// queues commands and sends a transaction through the log as one `Op::Multi`.
    Transaction,
}

impl Group {
    fn name(self) -> &'static str {
        match self {
            Group::String => "string",
            Group::Hash => "hash",
            Group::List => "list",
            Group::Set => "set",
            Group::SortedSet => "sorted-set",
            Group::Keyspace => "generic",
            Group::Connection => "connection",
            Group::Server => "server",
            Group::Transaction => "transactions",
        }
    }

    /// Answered by the connection, not through the log.
    pub fn is_local(self) -> bool {
        matches!(self, Group::Connection | Group::Server | Group::Transaction)
    }
}

/// One row of the command table (what `COMMAND` reports, and the arity check).
#[derive(Debug)]
pub struct Spec {
    pub name: &'static str,
    /// Redis arity: N = exactly N arguments including the name; -N = at least N.
    pub arity: i64,
    pub flags: &'static [&'static str],
    pub first_key: i64,
    pub last_key: i64,
    pub step: i64,
    pub group: Group,
    pub summary: &'static str,
}

const W: &[&str] = &["write", "denyoom"];
const WF: &[&str] = &["write", "denyoom", "fast"];
const WR: &[&str] = &["write"];
const R: &[&str] = &["readonly"];
const RF: &[&str] = &["readonly", "fast"];
const CONN: &[&str] = &["fast", "noscript", "loading", "stale"];
const NOAUTH: &[&str] = &["fast", "noscript", "loading", "stale", "no_auth"];
const ADMIN: &[&str] = &["loading", "stale"];

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, $f:expr, $l:expr, $s:expr, $group:ident, $summary:literal) => {
        Spec {
            name: $name,
            arity: $arity,
            flags: $flags,
            first_key: $f,
            last_key: $l,
            step: $s,
            group: Group::$group,
            summary: $summary,
        }
    };
}

/// Every command synod answers.
pub static COMMANDS: &[Spec] = &[
    spec!("get", 2, RF, 1, 1, 1, String, "Returns the string value of a key."),
    spec!(
        "set",
        -3,
        W,
        1,
        1,
        1,
        String,
        "Sets the string value of a key, ignoring its type. NX/XX/GET/EX/PX/EXAT/PXAT/KEEPTTL."
    ),
    spec!("setnx", 3, WF, 1, 1, 1, String, "Set the string value of a key only when the key doesn't exist."),
    spec!("setex", 4, W, 1, 1, 1, String, "Sets the string value and expiration time (seconds) of a key."),
    spec!("psetex", 4, W, 1, 1, 1, String, "Sets the string value and expiration time (milliseconds) of a key."),
    spec!(
        "getset",
        3,
        WF,
        1,
        1,
        1,
        String,
        "Returns the previous string value of a key after setting it to a new value."
    ),
    spec!("getdel", 2, WF, 1, 1, 1, String, "Returns the string value of a key after deleting the key."),
    spec!("mget", -2, RF, 1, -1, 1, String, "Atomically returns the string values of one or more keys."),
    spec!("mset", -3, W, 1, -1, 2, String, "Atomically creates or modifies the string values of one or more keys."),
    spec!("incr", 2, WF, 1, 1, 1, String, "Increments the integer value of a key by one."),
    spec!("decr", 2, WF, 1, 1, 1, String, "Decrements the integer value of a key by one."),
    spec!("incrby", 3, WF, 1, 1, 1, String, "Increments the integer value of a key by a number."),
    spec!("decrby", 3, WF, 1, 1, 1, String, "Decrements a number from the integer value of a key."),
    spec!(
        "append",
        3,
        WF,
        1,
        1,
        1,
        String,
        "Appends a string to the value of a key. Creates the key if it doesn't exist."
    ),
    spec!("strlen", 2, RF, 1, 1, 1, String, "Returns the length of a string value."),
    spec!("del", -2, WR, 1, -1, 1, Keyspace, "Atomically deletes one or more keys."),
    spec!("unlink", -2, WR, 1, -1, 1, Keyspace, "Atomically deletes one or more keys (same as DEL)."),
    spec!("exists", -2, RF, 1, -1, 1, Keyspace, "Determines whether one or more keys exist."),
    spec!("type", 2, RF, 1, 1, 1, Keyspace, "Determines the type of value stored at a key."),
    spec!("object", -2, &[], 0, 0, 0, Keyspace, "A container for object introspection commands (ENCODING, HELP)."),
    spec!("scan", -2, R, 0, 0, 0, Keyspace, "Iterates over the key names in the database (MATCH, COUNT)."),
    spec!("keys", 2, R, 0, 0, 0, Keyspace, "Returns all key names that match a pattern."),
    spec!("dbsize", 1, RF, 0, 0, 0, Server, "Returns the number of keys in the database."),
    spec!("hset", -4, WF, 1, 1, 1, Hash, "Creates or modifies the value of a field in a hash."),
    spec!("hmset", -4, WF, 1, 1, 1, Hash, "Sets the values of multiple fields."),
    spec!("hget", 3, RF, 1, 1, 1, Hash, "Returns the value of a field in a hash."),
    spec!("hmget", -3, RF, 1, 1, 1, Hash, "Returns the values of all fields in a hash."),
    spec!("hgetall", 2, R, 1, 1, 1, Hash, "Returns all fields and values in a hash."),
    spec!("hscan", -3, R, 1, 1, 1, Hash, "Iterates over fields and values of a hash (MATCH, COUNT)."),
    spec!("hdel", -3, WF, 1, 1, 1, Hash, "Deletes one or more fields and their values from a hash."),
    spec!("hexists", 3, RF, 1, 1, 1, Hash, "Determines whether a field exists in a hash."),
    spec!("hlen", 2, RF, 1, 1, 1, Hash, "Returns the number of fields in a hash."),
    spec!("hkeys", 2, R, 1, 1, 1, Hash, "Returns all fields in a hash."),
    spec!("hvals", 2, R, 1, 1, 1, Hash, "Returns all values in a hash."),
    spec!("getrange", 4, R, 1, 1, 1, String, "Returns a substring of the string stored at a key."),
    spec!("setrange", 4, W, 1, 1, 1, String, "Overwrites a part of a string value with another by an offset."),
    spec!("getex", -2, WF, 1, 1, 1, String, "Returns the string value of a key after setting its expiration time."),
    spec!("incrbyfloat", 3, WF, 1, 1, 1, String, "Increment the floating point value of a key by a number."),
    spec!("expire", -3, WF, 1, 1, 1, Keyspace, "Sets the expiration time of a key in seconds."),
    spec!("pexpire", -3, WF, 1, 1, 1, Keyspace, "Sets the expiration time of a key in milliseconds."),
    spec!("expireat", -3, WF, 1, 1, 1, Keyspace, "Sets the expiration time of a key to a Unix timestamp."),
    spec!("pexpireat", -3, WF, 1, 1, 1, Keyspace, "Sets the expiration time of a key to a Unix ms timestamp."),
    spec!("ttl", 2, RF, 1, 1, 1, Keyspace, "Returns the expiration time in seconds of a key."),
    spec!("pttl", 2, RF, 1, 1, 1, Keyspace, "Returns the expiration time in milliseconds of a key."),
    spec!("persist", 2, WF, 1, 1, 1, Keyspace, "Removes the expiration time of a key."),
    spec!("rename", 3, WR, 1, 2, 1, Keyspace, "Renames a key and overwrites the destination."),
    spec!("renamenx", 3, WF, 1, 2, 1, Keyspace, "Renames a key only when the target key name doesn't exist."),
    spec!("copy", -3, W, 1, 2, 1, Keyspace, "Copies the value of a key to a new key (REPLACE)."),
    spec!("flushdb", -1, WR, 0, 0, 0, Server, "Removes all keys from the current database."),
    spec!("flushall", -1, WR, 0, 0, 0, Server, "Removes all keys from all databases."),
    spec!("multi", 1, CONN, 0, 0, 0, Transaction, "Starts a transaction."),
    spec!("exec", 1, CONN, 0, 0, 0, Transaction, "Executes all commands in a transaction."),
    spec!("discard", 1, CONN, 0, 0, 0, Transaction, "Discards a transaction."),
    spec!(
        "watch",
        -2,
        CONN,
        1,
        -1,
        1,
        Transaction,
        "Monitors changes to keys to determine the execution of a transaction."
    ),
    spec!("unwatch", 1, CONN, 0, 0, 0, Transaction, "Forgets about watched keys of a transaction."),
    spec!(
        "lpush",
        -3,
        WF,
        1,
        1,
        1,
        List,
        "Prepends one or more elements to a list. Creates the key if it doesn't exist."
    ),
    spec!(
        "rpush",
        -3,
        WF,
        1,
        1,
        1,
        List,
        "Appends one or more elements to a list. Creates the key if it doesn't exist."
    ),
    spec!("lpushx", -3, WF, 1, 1, 1, List, "Prepends one or more elements to a list only when the list exists."),
    spec!("rpushx", -3, WF, 1, 1, 1, List, "Appends an element to a list only when the list exists."),
    spec!("lpop", -2, WF, 1, 1, 1, List, "Returns the first elements in a list after removing it."),
    spec!("rpop", -2, WF, 1, 1, 1, List, "Returns and removes the last elements of a list."),
    spec!("lrange", 4, R, 1, 1, 1, List, "Returns a range of elements from a list."),
    spec!("llen", 2, RF, 1, 1, 1, List, "Returns the length of a list."),
    spec!("lindex", 3, R, 1, 1, 1, List, "Returns an element from a list by its index."),
    spec!("lset", 4, W, 1, 1, 1, List, "Sets the value of an element in a list by its index."),
    spec!("lrem", 4, WR, 1, 1, 1, List, "Removes elements from a list."),
    spec!("ltrim", 4, WR, 1, 1, 1, List, "Removes elements from both ends a list."),
    spec!("lmove", 5, W, 1, 2, 1, List, "Returns an element after popping it from one list and pushing it to another."),
    spec!("hincrby", 4, WF, 1, 1, 1, Hash, "Increments the integer value of a field in a hash by a number."),
    spec!("hincrbyfloat", 4, WF, 1, 1, 1, Hash, "Increments the floating point value of a field by a number."),
    spec!("hsetnx", 4, WF, 1, 1, 1, Hash, "Sets the value of a field in a hash only when the field doesn't exist."),
    spec!("hstrlen", 3, RF, 1, 1, 1, Hash, "Returns the length of the value of a field."),
    spec!(
        "zadd",
        -4,
        WF,
        1,
        1,
        1,
        SortedSet,
        "Adds members to a sorted set, or updates their scores (NX/XX/GT/LT/CH/INCR)."
    ),
    spec!("zincrby", 4, WF, 1, 1, 1, SortedSet, "Increments the score of a member in a sorted set."),
    spec!("zrem", -3, WF, 1, 1, 1, SortedSet, "Removes one or more members from a sorted set."),
    spec!("zscore", 3, RF, 1, 1, 1, SortedSet, "Returns the score of a member in a sorted set."),
    spec!("zmscore", -3, RF, 1, 1, 1, SortedSet, "Returns the score of one or more members in a sorted set."),
    spec!("zcard", 2, RF, 1, 1, 1, SortedSet, "Returns the number of members in a sorted set."),
    spec!("zscan", -3, R, 1, 1, 1, SortedSet, "Iterates over members and scores of a sorted set (MATCH, COUNT)."),
    spec!(
        "zrank",
        3,
        RF,
        1,
        1,
        1,
        SortedSet,
        "Returns the index of a member in a sorted set ordered by ascending scores."
    ),
    spec!(
        "zrevrank",
        3,
        RF,
        1,
        1,
        1,
        SortedSet,
        "Returns the index of a member in a sorted set ordered by descending scores."
    ),
    spec!(
        "zcount",
        4,
        RF,
        1,
        1,
        1,
        SortedSet,
        "Returns the count of members in a sorted set that have scores within a range."
    ),
    spec!(
        "zrange",
        -4,
        R,
        1,
        1,
        1,
        SortedSet,
        "Returns members in a sorted set within a range of indexes or scores (BYSCORE, REV, LIMIT, WITHSCORES)."
    ),
    spec!("zrangebyscore", -4, R, 1, 1, 1, SortedSet, "Returns members in a sorted set within a range of scores."),
    spec!(
        "zrevrangebyscore",
        -4,
        R,
        1,
        1,
        1,
        SortedSet,
        "Returns members in a sorted set within a range of scores in reverse order."
    ),
    spec!(
        "zrevrange",
        -4,
        R,
        1,
        1,
        1,
        SortedSet,
        "Returns members in a sorted set within a range of indexes in reverse order."
    ),
    spec!("zrangebylex", -4, R, 1, 1, 1, SortedSet, "Returns members in a sorted set within a lexicographical range."),
    spec!(
        "zrevrangebylex",
        -4,
        R,
        1,
        1,
        1,
        SortedSet,
        "Returns members in a sorted set within a lexicographical range in reverse order."
    ),
    spec!(
        "zlexcount",
        4,
        RF,
        1,
        1,
        1,
        SortedSet,
        "Returns the number of members in a sorted set within a lexicographical range."
    ),
    spec!(
        "zpopmin",
        -2,
        WF,
        1,
        1,
        1,
        SortedSet,
        "Returns the lowest-scoring members from a sorted set after removing them."
    ),
    spec!(
        "zpopmax",
        -2,
        WF,
        1,
        1,
        1,
        SortedSet,
        "Returns the highest-scoring members from a sorted set after removing them."
    ),
    spec!("sadd", -3, WF, 1, 1, 1, Set, "Adds one or more members to a set. Creates the key if it doesn't exist."),
    spec!("srem", -3, WF, 1, 1, 1, Set, "Removes one or more members from a set."),
    spec!("smembers", 2, R, 1, 1, 1, Set, "Returns all members of a set."),
    spec!("sscan", -3, R, 1, 1, 1, Set, "Iterates over members of a set (MATCH, COUNT)."),
    spec!("sismember", 3, RF, 1, 1, 1, Set, "Determines whether a member belongs to a set."),
    spec!("scard", 2, RF, 1, 1, 1, Set, "Returns the number of members in a set."),
    spec!("sinter", -2, R, 1, -1, 1, Set, "Returns the intersect of multiple sets."),
    spec!("sunion", -2, R, 1, -1, 1, Set, "Returns the union of multiple sets."),
    spec!("sdiff", -2, R, 1, -1, 1, Set, "Returns the difference of multiple sets."),
    spec!("spop", -2, WF, 1, 1, 1, Set, "Returns one or more random members from a set after removing them."),
    spec!("hrandfield", -2, R, 1, 1, 1, Hash, "Returns one or more random fields from a hash (count, WITHVALUES)."),
    spec!("srandmember", -2, R, 1, 1, 1, Set, "Get one or multiple random members from a set."),
    spec!("ping", -1, CONN, 0, 0, 0, Connection, "Returns the server's liveliness response."),
    spec!("echo", 2, CONN, 0, 0, 0, Connection, "Returns the given string."),
    spec!("hello", -1, NOAUTH, 0, 0, 0, Connection, "Handshakes with the server (protocol version, AUTH, SETNAME)."),
    spec!("auth", -2, NOAUTH, 0, 0, 0, Connection, "Authenticates the connection."),
    spec!("select", 2, CONN, 0, 0, 0, Connection, "Changes the selected database (only 0 exists)."),
    spec!("quit", -1, NOAUTH, 0, 0, 0, Connection, "Closes the connection."),
    spec!("client", -2, CONN, 0, 0, 0, Connection, "CLIENT ID / SETNAME / GETNAME / SETINFO / INFO."),
    spec!(
        "command",
        -1,
        ADMIN,
        0,
        0,
        0,
        Server,
        "Returns detailed information about all commands (COUNT, DOCS, INFO, LIST)."
    ),
    spec!("info", -1, ADMIN, 0, 0, 0, Server, "Returns information about the server and its replication state."),
    spec!("config", -2, ADMIN, 0, 0, 0, Server, "CONFIG GET of the few settings tools ask for."),
    spec!("time", 1, CONN, 0, 0, 0, Server, "Returns the server time."),
];

/// The table row of a command name (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    COMMANDS.iter().find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
}

impl Spec {
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        if self.arity >= 0 {
            argc == self.arity
        } else {
            argc >= -self.arity
        }
    }

    /// The `COMMAND` / `COMMAND INFO` entry (Redis 7 layout).
    pub fn info(&self) -> RespValue {
        let s = |v: &str| RespValue::Simple(v.to_string());
        RespValue::Array(vec![
            RespValue::text(self.name),
            RespValue::Int(self.arity),
            RespValue::Array(self.flags.iter().map(|f| s(f)).collect()),
            RespValue::Int(self.first_key),
            RespValue::Int(self.last_key),
            RespValue::Int(self.step),
            RespValue::Array(vec![s(&format!("@{}", self.group.name()))]),
            RespValue::Array(vec![]),
            RespValue::Array(vec![]),
            RespValue::Array(vec![]),
        ])
    }

    /// The `COMMAND DOCS` entry.
    pub fn docs(&self) -> RespValue {
        RespValue::Map(vec![
            (RespValue::text("summary"), RespValue::text(self.summary)),
            (RespValue::text("since"), RespValue::text("1.0.0")),
            (RespValue::text("group"), RespValue::text(self.group.name())),
        ])
    }
}

/// Redis's reply to an unknown command, byte for byte (the name and up to 128 characters of
/// arguments, each quoted and followed by a space).
pub fn unknown_command(args: &[Bytes]) -> RespValue {
    let name = String::from_utf8_lossy(&args[0][..args[0].len().min(128)]).into_owned();
    let mut rest = String::new();
    for a in &args[1..] {
        if rest.len() >= 128 {
            break;
        }
        let room = 128 - rest.len();
        let a = String::from_utf8_lossy(a);
        let a: String = a.chars().take(room).collect();
        rest.push_str(&format!("'{a}' "));
    }
    RespValue::err(format!("ERR unknown command '{name}', with args beginning with: {rest}"))
}

pub fn wrong_arity(name: &str) -> RespValue {
    RespValue::err(format!("ERR wrong number of arguments for '{name}' command"))
}

pub fn syntax_error() -> RespValue {
    RespValue::err("ERR syntax error")
}

pub fn not_integer() -> RespValue {
    RespValue::err("ERR value is not an integer or out of range")
}

/// How the result of a data command is rendered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Any success: +OK (MSET, HMSET).
    Done,
    /// SET: OK when written, null when NX/XX prevented it; with GET, the old value.
    Set,
    /// SETNX: 1 when written, 0 otherwise.
    SetNx,
    /// Counts and integers.
    Int,
    /// One value or null.
    Bulk,
    /// Several values or nulls (MGET, HMGET).
    Bulks,
    /// The first of several values (HGET).
    FirstBulk,
    /// Whether the first of several values exists (HEXISTS).
    FirstExists,
    /// Field/value pairs (HGETALL): a map in RESP3.
    Pairs,
    PairKeys,
    PairValues,
    /// A status word (TYPE).
    Status,
    /// SCAN: [cursor, [keys]].
    Scan,
    /// KEYS: [keys].
    Keys,
    /// Members and scores, one array per pair in RESP3 (WITHSCORES, ZPOPMIN with a count).
    ScorePairs,
    /// Fields and values, one array per pair in RESP3 (HRANDFIELD … WITHVALUES).
    FieldValuePairs,
    /// Members and scores in one array (ZPOPMIN without a count).
    ScorePairsFlat,
    /// An integer, or null (ZRANK of a missing member).
    IntOrNull,
    /// A score (a double in RESP3) or null (ZSCORE).
    Score,
    /// An integer, or a score or null (ZADD: the count, or the new score with INCR).
    IntOrScore,
    /// Scores or nulls (ZMSCORE).
    Scores,
    /// Elements: an array, or a null array when the key did not exist (LPOP with a count).
    Items,
    /// TTL: milliseconds (or -1/-2) rounded to seconds.
    TtlSecs,
    /// WATCH: the versions are kept by the connection; the client gets OK.
    Watch,
}

/// What a request becomes.
#[derive(Debug)]
pub enum Translated {
    /// Through the replicated log.
    Data { op: Op, shape: Shape },
    /// Answered by the connection (connection and server commands).
    Local(&'static Spec),
    /// Refused before anything happened (unknown command, arity, syntax).
    Reply(RespValue),
}

/// Translate one request. `args[0]` is the command name; `args` is never empty.
pub fn translate(args: &[Bytes], cursors: &Cursors) -> Translated {
    let Some(spec) = lookup(&args[0]) else { return Translated::Reply(unknown_command(args)) };
    if !spec.arity_ok(args.len()) {
        return Translated::Reply(wrong_arity(spec.name));
    }
    if spec.group.is_local() && !matches!(spec.name, "dbsize" | "flushdb" | "flushall" | "watch") {
        return Translated::Local(spec);
    }
    match data_op(spec.name, &args[1..], cursors) {
        Ok((op, shape)) => Translated::Data { op, shape },
        Err(reply) => Translated::Reply(reply),
    }
}

fn int_arg(b: &Bytes) -> Result<i64, RespValue> {
    std::str::from_utf8(b).ok().and_then(|s| s.parse::<i64>().ok()).ok_or_else(not_integer)
}

fn pairs(args: &[Bytes], name: &str) -> Result<Vec<(Bytes, Bytes)>, RespValue> {
    if args.is_empty() || args.len() & 1 == 1 {
        return Err(wrong_arity(name));
    }
    Ok(args.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect())
}

/// A relative TTL in milliseconds from an EX (seconds) or PX (milliseconds) argument.
fn ttl_ms(arg: &Bytes, unit_ms: i64, cmd: &str) -> Result<u64, RespValue> {
    let n = int_arg(arg)?;
    let invalid = || RespValue::err(format!("ERR invalid expire time in '{cmd}' command"));
    if n <= 0 {
        return Err(invalid());
    }
    n.checked_mul(unit_ms).map(|ms| ms as u64).ok_or_else(invalid)
}

fn data_op(name: &str, a: &[Bytes], cursors: &Cursors) -> Result<(Op, Shape), RespValue> {
    use Shape::*;
    let key = || a[0].clone();
    Ok(match name {
        "get" => (Op::Get { key: key() }, Bulk),
        "set" => (set_op(a)?, Set),
        "setnx" => (
            Op::Set {
                key: key(),
                value: a[1].clone(),
                cond: SetCond::IfAbsent,
                expire_at_ms: None,
                keep_ttl: false,
                get: false,
            },
            SetNx,
        ),
        "setex" | "psetex" => {
            let ttl = ttl_ms(&a[1], if name == "setex" { 1000 } else { 1 }, name)?;
            (Op::SetWithTtl { key: key(), value: a[2].clone(), cond: SetCond::Always, ttl_ms: ttl, get: false }, Set)
        }
        "getset" => (
            Op::Set {
                key: key(),
                value: a[1].clone(),
                cond: SetCond::Always,
                expire_at_ms: None,
                keep_ttl: false,
                get: true,
            },
            Bulk,
        ),
        "getdel" => (Op::GetDel { key: key() }, Bulk),
        "mget" => (Op::MultiGet { keys: a.to_vec() }, Bulks),
        "mset" => (Op::MultiPut { pairs: pairs(a, name)? }, Done),
        "incr" => (Op::IncrBy { key: key(), by: 1 }, Int),
        "decr" => (Op::IncrBy { key: key(), by: -1 }, Int),
        "incrby" => (Op::IncrBy { key: key(), by: int_arg(&a[1])? }, Int),
        "decrby" => {
            let by = int_arg(&a[1])?.checked_neg().ok_or_else(|| RespValue::err("ERR decrement would overflow"))?;
            (Op::IncrBy { key: key(), by }, Int)
        }
        "append" => (Op::Append { key: key(), value: a[1].clone() }, Int),
        "strlen" => (Op::Strlen { key: key() }, Int),
        "del" | "unlink" => (Op::MultiDelete { keys: a.to_vec() }, Int),
        "exists" => (Op::Exists { keys: a.to_vec() }, Int),
        "type" => (Op::Type { key: key() }, Status),
        "dbsize" => (Op::DbSize, Int),
        "keys" => (Op::KeyScan { after: Bytes::new(), pattern: Some(key()), count: u32::MAX, of_type: None }, Keys),
        "scan" => {
            let (from, pattern, count, of_type) = scan_args(a, cursors, true)?;
            match from {
                Ok(after) => (Op::KeyScan { after, pattern, count, of_type }, Scan),
                Err(fingerprint) => {
                    (Op::ScanResume { target: ScanTarget::Keys { of_type }, fingerprint, pattern, count }, Scan)
                }
            }
        }
        "hscan" | "sscan" | "zscan" => {
            let of = match name {
                "hscan" => ScanOf::Hash,
                "sscan" => ScanOf::Set,
                _ => ScanOf::ZSet,
            };
            let (from, pattern, count, _) = scan_args(&a[1..], cursors, false)?;
            match from {
                Ok(after) => (Op::MemberScan { key: key(), of, after, pattern, count }, Scan),
                Err(fingerprint) => {
                    let target = ScanTarget::Members { key: key(), of };
                    (Op::ScanResume { target, fingerprint, pattern, count }, Scan)
                }
            }
        }
        "hset" => (Op::HashSet { key: key(), pairs: pairs(&a[1..], name)? }, Int),
        "hmset" => (Op::HashSet { key: key(), pairs: pairs(&a[1..], name)? }, Done),
        "hget" => (Op::HashGet { key: key(), fields: vec![a[1].clone()] }, FirstBulk),
        "hmget" => (Op::HashGet { key: key(), fields: a[1..].to_vec() }, Bulks),
        "hexists" => (Op::HashGet { key: key(), fields: vec![a[1].clone()] }, FirstExists),
        "hgetall" => (Op::HashGetAll { key: key() }, Pairs),
        "hkeys" => (Op::HashGetAll { key: key() }, PairKeys),
        "hvals" => (Op::HashGetAll { key: key() }, PairValues),
        "hdel" => (Op::HashDelete { key: key(), fields: a[1..].to_vec() }, Int),
        "hlen" => (Op::HashLen { key: key() }, Int),
        "expire" | "pexpire" | "expireat" | "pexpireat" => (expire_op(name, a)?, Int),
        "ttl" => (Op::Ttl { key: key() }, TtlSecs),
        "pttl" => (Op::Ttl { key: key() }, Int),
        "persist" => (Op::Persist { key: key() }, Int),
        "getrange" => (Op::GetRange { key: key(), start: int_arg(&a[1])?, end: int_arg(&a[2])? }, Bulk),
        "setrange" => {
            let offset = int_arg(&a[1])?;
            if offset < 0 {
                return Err(RespValue::err("ERR offset is out of range"));
            }
            if offset as u128 + a[2].len() as u128 > 512 * 1024 * 1024 {
                return Err(RespValue::err("ERR string exceeds maximum allowed size (proto-max-bulk-len)"));
            }
            (Op::SetRange { key: key(), offset: offset as u64, value: a[2].clone() }, Int)
        }
        "getex" => (getex_op(a)?, Bulk),
        "incrbyfloat" => {
            if synod_core::kv::parse_f64(&a[1]).is_none() {
                return Err(RespValue::err("ERR value is not a valid float"));
            }
            (Op::IncrByFloat { key: key(), by: a[1].clone() }, Bulk)
        }
        "rename" => (Op::Rename { from: key(), to: a[1].clone(), nx: false }, Done),
        "renamenx" => (Op::Rename { from: key(), to: a[1].clone(), nx: true }, Int),
        "copy" => {
            let mut replace = false;
            let mut i = 2;
            while i < a.len() {
                match &a[i].to_ascii_uppercase()[..] {
                    b"REPLACE" => replace = true,
                    b"DB" if i + 1 < a.len() => {
                        if int_arg(&a[i + 1])? != 0 {
                            return Err(RespValue::err("ERR DB index is out of range"));
                        }
                        i += 1;
                    }
                    _ => return Err(syntax_error()),
                }
                i += 1;
            }
            (Op::Copy { from: key(), to: a[1].clone(), replace }, Int)
        }
        "flushdb" | "flushall" => {
            match a {
                [] => {}
                [mode] if mode.eq_ignore_ascii_case(b"sync") || mode.eq_ignore_ascii_case(b"async") => {}
                _ => return Err(syntax_error()),
            }
            (Op::FlushAll, Done)
        }
        "watch" => (Op::Versions { keys: a.to_vec() }, Watch),
        "lpush" | "rpush" | "lpushx" | "rpushx" => (
            Op::ListPush {
                key: key(),
                values: a[1..].to_vec(),
                left: name.starts_with('l'),
                only_existing: name.ends_with('x'),
            },
            Int,
        ),
        "lpop" | "rpop" => {
            if a.len() > 2 {
                return Err(wrong_arity(name));
            }
            let left = name == "lpop";
            match a.get(1) {
                None => (Op::ListPop { key: key(), left, count: None }, Bulk),
                Some(n) => {
                    let positive = || RespValue::err("ERR value is out of range, must be positive");
                    let n = int_arg(n).map_err(|_| positive())?;
                    if n < 0 {
                        return Err(positive());
                    }
                    (Op::ListPop { key: key(), left, count: Some(n as u64) }, Items)
                }
            }
        }
        "hincrby" => (Op::HashIncrBy { key: key(), field: a[1].clone(), by: int_arg(&a[2])? }, Int),
        "hincrbyfloat" => {
            if synod_core::kv::parse_f64(&a[2]).is_none() {
                return Err(RespValue::err("ERR value is not a valid float"));
            }
            (Op::HashIncrByFloat { key: key(), field: a[1].clone(), by: a[2].clone() }, Bulk)
        }
        "hsetnx" => (Op::HashSetNx { key: key(), field: a[1].clone(), value: a[2].clone() }, Int),
        "hstrlen" => (Op::HashStrlen { key: key(), field: a[1].clone() }, Int),
        "zadd" => (zadd_op(a)?, IntOrScore),
        "zincrby" => {
            if synod_core::kv::parse_score(&a[1]).is_none() {
                return Err(RespValue::err("ERR value is not a valid float"));
            }
            let flags = synod_core::kv::ZAddFlags { incr: true, ..Default::default() };
            (Op::ZAdd { key: key(), pairs: vec![(a[1].clone(), a[2].clone())], flags }, IntOrScore)
        }
        "zrem" => (Op::ZRem { key: key(), members: a[1..].to_vec() }, Int),
        "zscore" => (Op::ZScore { key: key(), member: a[1].clone() }, Score),
        "zmscore" => (Op::ZMScore { key: key(), members: a[1..].to_vec() }, Scores),
        "zcard" => (Op::ZCard { key: key() }, Int),
        "zrank" | "zrevrank" => (Op::ZRank { key: key(), member: a[1].clone(), rev: name == "zrevrank" }, IntOrNull),
        "zcount" => (Op::ZCount { key: key(), min: score_bound(&a[1])?, max: score_bound(&a[2])? }, Int),
        "zlexcount" => (Op::ZLexCount { key: key(), min: lex_bound(&a[1])?, max: lex_bound(&a[2])? }, Int),
        "zrange" | "zrangebyscore" | "zrevrangebyscore" | "zrevrange" | "zrangebylex" | "zrevrangebylex" => {
            let op = zrange_op(name, a)?;
            let shape = if matches!(op, Op::ZRange { with_scores: true, .. }) { ScorePairs } else { Items };
            (op, shape)
        }
        "zpopmin" | "zpopmax" => {
            let (count, shape) = match a {
                [_] => (1, ScorePairsFlat),
                [_, n] => {
                    let positive = || RespValue::err("ERR value is out of range, must be positive");
                    let n = int_arg(n).map_err(|_| positive())?;
                    if n < 0 {
                        return Err(positive());
                    }
                    (n as u64, ScorePairs)
                }
                _ => return Err(syntax_error()),
            };
            (Op::ZPop { key: key(), max: name == "zpopmax", count }, shape)
        }
        "sadd" => (Op::SetAdd { key: key(), members: a[1..].to_vec() }, Int),
        "srem" => (Op::SetRemove { key: key(), members: a[1..].to_vec() }, Int),
        "smembers" => (Op::SetMembers { key: key() }, Items),
        "sismember" => (Op::SetIsMember { key: key(), member: a[1].clone() }, Int),
        "scard" => (Op::SetCard { key: key() }, Int),
        "sinter" | "sunion" | "sdiff" => {
            let kind = match name {
                "sinter" => synod_core::kv::SetCombine::Inter,
                "sunion" => synod_core::kv::SetCombine::Union,
                _ => synod_core::kv::SetCombine::Diff,
            };
            (Op::SetCombine { keys: a.to_vec(), kind }, Items)
        }
        "spop" => match a {
            [_] => (Op::SetPop { key: key(), count: None }, Bulk),
            [_, n] => {
                let positive = || RespValue::err("ERR value is out of range, must be positive");
                let n = int_arg(n).map_err(|_| positive())?;
                if n < 0 {
                    return Err(positive());
                }
                (Op::SetPop { key: key(), count: Some(n as u64) }, Items)
            }
            _ => return Err(syntax_error()),
        },
        "srandmember" => match a {
            [_] => (Op::SetRandMember { key: key(), count: None }, Bulk),
            [_, n] => {
                let n = int_arg(n)?;
                // A negative count repeats members: |count| replies whatever the set's size,
                // so it is bounded (Redis streams any number).
                if n < -MAX_RANDMEMBER_REPEATS {
                    return Err(RespValue::err("ERR value is out of range"));
                }
                (Op::SetRandMember { key: key(), count: Some(n) }, Items)
            }
            _ => return Err(syntax_error()),
        },
        "hrandfield" => {
            // Redis's order of checks: the count, then the rest.
            if a.len() == 1 {
                return Ok((Op::HashRandField { key: key(), count: None, with_values: false }, Bulk));
            }
            let n = int_arg(&a[1])?;
            if n == i64::MIN {
                return Err(RespValue::err(
                    "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
                ));
            }
            let with_values = match a {
                [_, _] => false,
                [_, _, w] if w.eq_ignore_ascii_case(b"withvalues") => true,
                _ => return Err(syntax_error()),
            };
            // Bounded like SRANDMEMBER's negative count.
            if n < -MAX_RANDMEMBER_REPEATS {
                return Err(RespValue::err("ERR value is out of range"));
            }
            let op = Op::HashRandField { key: key(), count: Some(n), with_values };
            (op, if with_values { FieldValuePairs } else { Items })
        }
        "object" => object_op(a)?,
        "lrange" => (Op::ListRange { key: key(), start: int_arg(&a[1])?, stop: int_arg(&a[2])? }, Items),
        "llen" => (Op::ListLen { key: key() }, Int),
        "lindex" => (Op::ListIndex { key: key(), index: int_arg(&a[1])? }, Bulk),
        "lset" => (Op::ListSet { key: key(), index: int_arg(&a[1])?, value: a[2].clone() }, Done),
        "lrem" => (Op::ListRemove { key: key(), count: int_arg(&a[1])?, value: a[2].clone() }, Int),
        "ltrim" => (Op::ListTrim { key: key(), start: int_arg(&a[1])?, stop: int_arg(&a[2])? }, Done),
        "lmove" => {
            let side = |w: &Bytes| match &w.to_ascii_uppercase()[..] {
                b"LEFT" => Ok(true),
                b"RIGHT" => Ok(false),
                _ => Err(syntax_error()),
            };
            let (from_left, to_left) = (side(&a[2])?, side(&a[3])?);
            (Op::ListMove { from: key(), to: a[1].clone(), from_left, to_left }, Bulk)
        }
        other => return Err(RespValue::err(format!("ERR command '{other}' has no data translation"))),
    })
}

/// OBJECT ENCODING key | OBJECT HELP. Redis's other subcommands (FREQ, IDLETIME, REFCOUNT)
/// describe its memory management, which synod does not have: they get Redis's reply to an
/// unknown subcommand.
fn object_op(a: &[Bytes]) -> Result<(Op, Shape), RespValue> {
    let sub = a[0].to_ascii_lowercase();
    match (&sub[..], a.len()) {
        (b"encoding", 2) => Ok((Op::ObjectEncoding { key: a[1].clone() }, Shape::Bulk)),
        (b"help", 1) => Err(RespValue::Array(OBJECT_HELP.iter().map(|l| RespValue::Simple(l.to_string())).collect())),
        (b"encoding" | b"help", _) => Err(wrong_arity(&format!("object|{}", String::from_utf8_lossy(&sub)))),
        _ => {
            let name: String = String::from_utf8_lossy(&a[0]).chars().take(128).collect();
            Err(RespValue::err(format!("ERR unknown subcommand '{name}'. Try OBJECT HELP.")))
        }
    }
}

/// OBJECT HELP, as redis-server 7.0 sends it (with the subcommands synod answers).
const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "HELP",
    "    Prints this help.",
];

/// SET key value [NX | XX] [GET] [EX s | PX ms | EXAT ts | PXAT ts-ms | KEEPTTL]
fn set_op(a: &[Bytes]) -> Result<Op, RespValue> {
    let (key, value) = (a[0].clone(), a[1].clone());
    let mut cond = SetCond::Always;
    let mut get = false;
    let mut ttl: Option<u64> = None;
    let mut at: Option<u64> = None;
    let mut keep_ttl = false;
    let mut i = 2;
    while i < a.len() {
        let opt = a[i].to_ascii_uppercase();
        let next = a.get(i + 1);
        let expiry_set = ttl.is_some() || at.is_some() || keep_ttl;
        match (&opt[..], next) {
            (b"NX", _) if cond != SetCond::IfPresent => cond = SetCond::IfAbsent,
            (b"XX", _) if cond != SetCond::IfAbsent => cond = SetCond::IfPresent,
            (b"GET", _) => get = true,
            (b"KEEPTTL", _) if !expiry_set => keep_ttl = true,
            (b"EX", Some(n)) if !expiry_set => {
                ttl = Some(ttl_ms(n, 1000, "set")?);
                i += 1;
            }
            (b"PX", Some(n)) if !expiry_set => {
                ttl = Some(ttl_ms(n, 1, "set")?);
                i += 1;
            }
            (b"EXAT", Some(n)) if !expiry_set => {
                at = Some(ttl_ms(n, 1000, "set")?);
                i += 1;
            }
            (b"PXAT", Some(n)) if !expiry_set => {
                at = Some(ttl_ms(n, 1, "set")?);
                i += 1;
            }
            _ => return Err(syntax_error()),
        }
        i += 1;
    }
    Ok(match ttl {
        Some(ttl_ms) => Op::SetWithTtl { key, value, cond, ttl_ms, get },
        None => Op::Set { key, value, cond, expire_at_ms: at, keep_ttl, get },
    })
}

/// ZADD key [NX | XX] [GT | LT] [CH] [INCR] score member [score member ...]
fn zadd_op(a: &[Bytes]) -> Result<Op, RespValue> {
    let mut flags = synod_core::kv::ZAddFlags::default();
    let mut i = 1;
    while i < a.len() {
        match &a[i].to_ascii_uppercase()[..] {
            b"NX" => flags.nx = true,
            b"XX" => flags.xx = true,
            b"GT" => flags.gt = true,
            b"LT" => flags.lt = true,
            b"CH" => flags.ch = true,
            b"INCR" => flags.incr = true,
            _ => break,
        }
        i += 1;
    }
    let rest = &a[i..];
    if rest.is_empty() || rest.len() % 2 == 1 {
        return Err(syntax_error());
    }
    if flags.nx && flags.xx {
        return Err(RespValue::err("ERR XX and NX options at the same time are not compatible"));
    }
    if [flags.gt, flags.lt, flags.nx].iter().filter(|&&f| f).count() > 1 {
        return Err(RespValue::err("ERR GT, LT, and/or NX options at the same time are not compatible"));
    }
    if flags.incr && rest.len() > 2 {
        return Err(RespValue::err("ERR INCR option supports a single increment-element pair"));
    }
    let pairs: Vec<(Bytes, Bytes)> = rest.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect();
    if pairs.iter().any(|(score, _)| synod_core::kv::parse_score(score).is_none()) {
        return Err(RespValue::err("ERR value is not a valid float"));
    }
    Ok(Op::ZAdd { key: a[0].clone(), pairs, flags })
}

/// A score range end: `1.5`, `(1.5` (exclusive), `-inf`, `+inf`.
fn score_bound(b: &Bytes) -> Result<synod_core::kv::ScoreBound, RespValue> {
    let (exclusive, text) = match b.strip_prefix(b"(") {
        Some(rest) => (true, rest),
        None => (false, &b[..]),
    };
    let x = synod_core::kv::parse_score(text).ok_or_else(|| RespValue::err("ERR min or max is not a float"))?;
    Ok(synod_core::kv::ScoreBound::new(x, exclusive))
}

/// ZRANGE key start stop [BYSCORE | BYLEX] [REV] [LIMIT offset count] [WITHSCORES], and the
/// older ZRANGEBYSCORE / ZREVRANGEBYSCORE / ZREVRANGE forms.
fn zrange_op(name: &str, a: &[Bytes]) -> Result<Op, RespValue> {
    #[derive(PartialEq)]
    enum By {
        Rank,
        Score,
        Lex,
    }
    // What the command name fixes; ZRANGE leaves both open for its options (as Redis's
    // zrangeGenericCommand does: a second BYSCORE/BYLEX or a REV elsewhere is a syntax error).
    let (mut by, mut rev) = match name {
        "zrangebyscore" => (Some(By::Score), Some(false)),
        "zrevrangebyscore" => (Some(By::Score), Some(true)),
        "zrangebylex" => (Some(By::Lex), Some(false)),
        "zrevrangebylex" => (Some(By::Lex), Some(true)),
        "zrevrange" => (Some(By::Rank), Some(true)),
        _ => (None, None),
    };
    let (mut limit, mut with_scores) = (None, false);
    let mut i = 3;
    while i < a.len() {
        let opt = a[i].to_ascii_uppercase();
        match &opt[..] {
            b"WITHSCORES" => with_scores = true,
            b"LIMIT" if i + 2 < a.len() => {
                limit = Some((int_arg(&a[i + 1])?, int_arg(&a[i + 2])?));
                i += 2;
            }
            b"REV" if rev.is_none() => rev = Some(true),
            b"BYSCORE" if by.is_none() => by = Some(By::Score),
            b"BYLEX" if by.is_none() => by = Some(By::Lex),
            _ => return Err(syntax_error()),
        }
        i += 1;
    }
    let (by, rev) = (by.unwrap_or(By::Rank), rev.unwrap_or(false));
    if by == By::Rank && limit.is_some_and(|l| l != (0, -1)) {
        return Err(RespValue::err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if by == By::Lex && with_scores {
        return Err(RespValue::err("ERR syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    // Reversed score and lex ranges name the maximum first.
    let (lo, hi) = if rev && by != By::Rank { (&a[2], &a[1]) } else { (&a[1], &a[2]) };
    let by = match by {
        By::Rank => {
            limit = None;
            synod_core::kv::ZRangeBy::Index { start: int_arg(lo)?, stop: int_arg(hi)? }
        }
        By::Score => synod_core::kv::ZRangeBy::Score { min: score_bound(lo)?, max: score_bound(hi)? },
        By::Lex => synod_core::kv::ZRangeBy::Lex { min: lex_bound(lo)?, max: lex_bound(hi)? },
    };
    Ok(Op::ZRange { key: a[0].clone(), by, rev, limit, with_scores })
}

/// A lexicographic range end: `-`, `+`, `[member`, `(member`.
fn lex_bound(b: &Bytes) -> Result<synod_core::kv::LexBound, RespValue> {
    synod_core::kv::LexBound::parse(b).ok_or_else(|| RespValue::err("ERR min or max not valid string range item"))
}

/// Largest |count| of SRANDMEMBER with a negative count.
pub const MAX_RANDMEMBER_REPEATS: i64 = 1_000_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// EXPIRE key seconds [NX | XX | GT | LT] (and PEXPIRE, EXPIREAT, PEXPIREAT), with Redis's
/// order of checks: options, the number, overflow.
fn expire_op(name: &str, a: &[Bytes]) -> Result<Op, RespValue> {
    use synod_core::kv::ExpireCond as C;
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &a[2..] {
        match &opt.to_ascii_uppercase()[..] {
            b"NX" => nx = true,
            b"XX" => xx = true,
            b"GT" => gt = true,
            b"LT" => lt = true,
            _ => return Err(RespValue::err(format!("ERR Unsupported option {}", String::from_utf8_lossy(opt)))),
        }
    }
    if nx && (xx || gt || lt) {
        return Err(RespValue::err("ERR NX and XX, GT or LT options at the same time are not compatible"));
    }
    if gt && lt {
        return Err(RespValue::err("ERR GT and LT options at the same time are not compatible"));
    }
    let cond = if nx {
        C::IfNone
    } else if gt {
        C::Greater
    } else if lt {
        C::Less
    } else if xx {
        C::IfSome
    } else {
        C::Always
    };
    let mut ms = int_arg(&a[1])?;
    let invalid = || RespValue::err(format!("ERR invalid expire time in '{name}' command"));
    if matches!(name, "expire" | "expireat") {
        ms = ms.checked_mul(1000).ok_or_else(invalid)?;
    }
    let relative = matches!(name, "expire" | "pexpire");
    if relative && ms > i64::MAX - now_ms() {
        return Err(invalid());
    }
    Ok(Op::Expire { key: a[0].clone(), ms, relative, cond })
}

/// GETEX key [EX seconds | PX ms | EXAT ts | PXAT ts-ms | PERSIST]
fn getex_op(a: &[Bytes]) -> Result<Op, RespValue> {
    let mut expire = None;
    let mut persist = false;
    let mut i = 1;
    while i < a.len() {
        let opt = a[i].to_ascii_uppercase();
        let unit = match &opt[..] {
            b"EX" | b"EXAT" => 1000,
            b"PX" | b"PXAT" => 1,
            b"PERSIST" if expire.is_none() && !persist => {
                persist = true;
                i += 1;
                continue;
            }
            _ => return Err(syntax_error()),
        };
        let (Some(n), None, false) = (a.get(i + 1), expire, persist) else { return Err(syntax_error()) };
        let invalid = || RespValue::err("ERR invalid expire time in 'getex' command");
        let n = int_arg(n)?;
        if n <= 0 || (unit == 1000 && n > i64::MAX / 1000) {
            return Err(invalid());
        }
        let relative = matches!(&opt[..], b"EX" | b"PX");
        if relative && n * unit > i64::MAX - now_ms() {
            return Err(invalid());
        }
        expire = Some((n * unit, relative));
        i += 2;
    }
    Ok(Op::GetEx { key: a[0].clone(), expire, persist })
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
/// A cursor and the MATCH / COUNT (/ TYPE) options of SCAN, HSCAN, SSCAN and ZSCAN: where to continue
/// — `Ok(key)`: after the key or member this replica knows the cursor stands for (empty: from
/// the start); `Err(fingerprint)`: a cursor this replica did not hand out (another replica's,
/// before a failover or a restart), resumed by the state machine ([`Op::ScanResume`]) — the
/// pattern, the count and, for SCAN (`key_scan`), the TYPE in lower case (Redis compares it
/// ignoring case; the last one given counts; an unknown type matches nothing). The member
/// scans have no TYPE.
type ScanFrom = Result<Bytes, u64>;
type ScanArgs = (ScanFrom, Option<Bytes>, u32, Option<Bytes>);
fn scan_args(a: &[Bytes], cursors: &Cursors, key_scan: bool) -> Result<ScanArgs, RespValue> {
    let invalid = || RespValue::err("ERR invalid cursor");
    let cursor: u64 = std::str::from_utf8(&a[0]).ok().and_then(|s| s.parse().ok()).ok_or_else(invalid)?;
    let after = if cursor == 0 { Ok(Bytes::new()) } else { cursors.lookup(cursor).ok_or(cursor) };
    let mut pattern = None;
    let mut count = 10u32;
    let mut of_type = None;
    let mut i = 1;
    while i < a.len() {
        let opt = a[i].to_ascii_uppercase();
        let Some(v) = a.get(i + 1) else { return Err(syntax_error()) };
        match &opt[..] {
            b"MATCH" => pattern = Some(v.clone()),
            b"COUNT" => {
                let n = int_arg(v)?;
                if n < 1 {
                    return Err(syntax_error());
                }
                count = n.min(u32::MAX as i64) as u32;
            }
            b"TYPE" if key_scan => of_type = Some(Bytes::from(v.to_ascii_lowercase())),
            _ => return Err(syntax_error()),
        }
        i += 2;
    }
    Ok((after, pattern, count, of_type))
}

/// Render a data command's result. `OpResult::Error` (WRONGTYPE, not an integer, …) becomes
/// an error reply whatever the shape.
pub fn render(shape: Shape, result: OpResult, cursors: &Cursors) -> RespValue {
    use RespValue as V;
    let pairs_to = |pairs: Vec<(Bytes, Bytes)>, pick: fn((Bytes, Bytes)) -> Bytes| {
        V::Array(pairs.into_iter().map(|p| V::Bulk(pick(p))).collect())
    };
    match (shape, result) {
        (_, OpResult::Error(e)) => V::err(e),
        (Shape::Done, _) => V::ok(),
        (Shape::Set, OpResult::Applied(true)) => V::ok(),
        (Shape::Set, OpResult::Applied(false)) => V::Null,
        (Shape::Set | Shape::Bulk, OpResult::Value(v)) => V::opt(v),
        (Shape::SetNx, OpResult::Applied(b)) => V::Int(b as i64),
        (Shape::Int, OpResult::Int(n)) => V::Int(n),
        (Shape::Int, OpResult::Deleted(b)) => V::Int(b as i64),
        (Shape::Bulks, OpResult::Values(vs)) => V::Array(vs.into_iter().map(V::opt).collect()),
        (Shape::FirstBulk, OpResult::Values(vs)) => V::opt(vs.into_iter().next().flatten()),
        (Shape::FirstExists, OpResult::Values(vs)) => V::Int(vs.first().is_some_and(|v| v.is_some()) as i64),
        (Shape::Pairs, OpResult::Scan(pairs)) => {
            V::Map(pairs.into_iter().map(|(f, v)| (V::Bulk(f), V::Bulk(v))).collect())
        }
        (Shape::PairKeys, OpResult::Scan(pairs)) => pairs_to(pairs, |p| p.0),
        (Shape::PairValues, OpResult::Scan(pairs)) => pairs_to(pairs, |p| p.1),
        (Shape::Status, OpResult::Text(t)) => V::Simple(t),
        (Shape::Scan, OpResult::Keys { keys, next }) => {
            let cursor = next.map_or(0, |k| cursors.register(k));
            V::Array(vec![V::text(cursor.to_string()), V::Array(keys.into_iter().map(V::Bulk).collect())])
        }
        (Shape::Keys, OpResult::Keys { keys, .. }) => V::Array(keys.into_iter().map(V::Bulk).collect()),
        (Shape::Items, OpResult::Items(Some(items))) => V::Array(items.into_iter().map(V::Bulk).collect()),
        (Shape::Items, OpResult::Items(None)) => V::NullArray,
        (Shape::ScorePairs | Shape::ScorePairsFlat, OpResult::Items(Some(items))) => V::ScorePairs {
            pairs: items.chunks(2).filter(|c| c.len() == 2).map(|c| (c[0].clone(), c[1].clone())).collect(),
            nested: shape == Shape::ScorePairs,
        },
        (Shape::FieldValuePairs, OpResult::Items(Some(items))) => {
            V::Pairs(items.chunks(2).filter(|c| c.len() == 2).map(|c| (c[0].clone(), c[1].clone())).collect())
        }
        (Shape::IntOrNull | Shape::IntOrScore, OpResult::Int(n)) => V::Int(n),
        (Shape::IntOrNull, OpResult::Value(None)) => V::Null,
        (Shape::Score | Shape::IntOrScore, OpResult::Value(v)) => V::opt_double(v),
        (Shape::Scores, OpResult::Values(vs)) => V::Array(vs.into_iter().map(V::opt_double).collect()),
        (Shape::TtlSecs, OpResult::Int(ms)) => V::Int(if ms < 0 { ms } else { (ms + 500) / 1000 }),
        (Shape::Watch, OpResult::Versions(_)) => V::ok(),
        (shape, other) => V::err(format!("ERR internal error: result {other:?} does not fit {shape:?}")),
    }
}

/// SCAN cursors. Redis cursors are integers that clients parse (redis-py, redis-cli), while
/// synod's scan continues after a key. The cursor handed out for a key is its
/// [`scan_fingerprint`] — the same on every replica and in every version — and this table
/// remembers, per replica and bounded (oldest forgotten), which key each cursor it handed out
/// stands for, so that continuing is a range read. A cursor the table does not know (handed
/// out by a replica that has since failed, or before a restart, or forgotten) is resumed by
/// the state machine from the fingerprint ([`Op::ScanResume`]): cursors survive a leader
/// change, a reconnect to another replica and a restart.
pub struct Cursors {
    inner: Mutex<CursorTable>,
}

struct CursorTable {
    map: HashMap<u64, Bytes>,
    order: VecDeque<u64>,
    cap: usize,
}

/// Cursors remembered per replica.
pub const MAX_CURSORS: usize = 100_000;

impl Cursors {
    pub fn new(cap: usize) -> Cursors {
        Cursors { inner: Mutex::new(CursorTable { map: HashMap::new(), order: VecDeque::new(), cap: cap.max(1) }) }
    }

    pub fn register(&self, key: Bytes) -> u64 {
        let id = scan_fingerprint(&key);
        let mut t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match t.map.get_mut(&id) {
            // Two keys with one fingerprint: remember the smaller, so that a scan meant to
            // continue after the larger one repeats keys rather than skipping any.
            Some(known) => {
                if key < *known {
                    *known = key;
                }
            }
            None => {
                t.map.insert(id, key);
                t.order.push_back(id);
                while t.order.len() > t.cap {
                    if let Some(old) = t.order.pop_front() {
                        t.map.remove(&old);
                    }
                }
            }
        }
        id
    }

    pub fn lookup(&self, id: u64) -> Option<Bytes> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).map.get(&id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<Bytes> {
        s.split(' ').map(|a| Bytes::copy_from_slice(a.as_bytes())).collect()
    }

    fn tr(s: &str) -> Translated {
        translate(&args(s), &Cursors::new(10))
    }

    fn op(s: &str) -> Op {
        match tr(s) {
            Translated::Data { op, .. } => op,
            other => panic!("{s}: {other:?}"),
        }
    }

    fn error(s: &str) -> String {
        match tr(s) {
            Translated::Reply(RespValue::Error(e)) => e,
            other => panic!("{s}: expected an error, got {other:?}"),
        }
    }

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn unknown_commands_and_arity_like_redis() {
        assert_eq!(error("FOO a b"), "ERR unknown command 'FOO', with args beginning with: 'a' 'b' ");
        assert_eq!(error("foo"), "ERR unknown command 'foo', with args beginning with: ");
        let long = format!("x {}", "a".repeat(300));
        assert_eq!(error(&long), format!("ERR unknown command 'x', with args beginning with: '{}' ", "a".repeat(128)));
        assert_eq!(error("GET"), "ERR wrong number of arguments for 'get' command");
        assert_eq!(error("get a b"), "ERR wrong number of arguments for 'get' command");
        assert_eq!(error("MSET a"), "ERR wrong number of arguments for 'mset' command");
        assert_eq!(error("MSET a 1 b"), "ERR wrong number of arguments for 'mset' command");
        assert_eq!(error("HSET h f"), "ERR wrong number of arguments for 'hset' command");
        assert_eq!(error("HSET h f v g"), "ERR wrong number of arguments for 'hset' command");
        assert!(matches!(tr("ping"), Translated::Local(s) if s.name == "ping"));
        assert!(matches!(tr("CoNfIg GET save"), Translated::Local(s) if s.name == "config"));
    }

    #[test]
    fn set_options() {
        assert_eq!(
            op("SET k v"),
            Op::Set {
                key: b("k"),
                value: b("v"),
                cond: SetCond::Always,
                expire_at_ms: None,
                keep_ttl: false,
                get: false
            }
        );
        assert_eq!(
            op("set k v nx px 1500 get"),
            Op::SetWithTtl { key: b("k"), value: b("v"), cond: SetCond::IfAbsent, ttl_ms: 1500, get: true }
        );
        assert_eq!(
            op("SET k v XX EX 2"),
            Op::SetWithTtl { key: b("k"), value: b("v"), cond: SetCond::IfPresent, ttl_ms: 2000, get: false }
        );
        assert_eq!(
            op("SET k v PXAT 123456"),
            Op::Set {
                key: b("k"),
                value: b("v"),
                cond: SetCond::Always,
                expire_at_ms: Some(123456),
                keep_ttl: false,
                get: false
            }
        );
        assert!(matches!(op("SET k v KEEPTTL"), Op::Set { keep_ttl: true, .. }));
        assert_eq!(error("SET k v NX XX"), "ERR syntax error");
        assert_eq!(error("SET k v EX 1 PX 1"), "ERR syntax error");
        assert_eq!(error("SET k v EX 1 KEEPTTL"), "ERR syntax error");
        assert_eq!(error("SET k v EX"), "ERR syntax error");
        assert_eq!(error("SET k v BOGUS"), "ERR syntax error");
        assert_eq!(error("SET k v EX 0"), "ERR invalid expire time in 'set' command");
        assert_eq!(error("SET k v PX -5"), "ERR invalid expire time in 'set' command");
        assert_eq!(error("SET k v EX 9223372036854775807"), "ERR invalid expire time in 'set' command");
        assert_eq!(error("SET k v EX ten"), "ERR value is not an integer or out of range");
        assert_eq!(error("SETEX k 0 v"), "ERR invalid expire time in 'setex' command");
        assert!(matches!(op("PSETEX k 250 v"), Op::SetWithTtl { ttl_ms: 250, .. }));
    }

    #[test]
    fn counters_hashes_multi_key_and_scan() {
        assert_eq!(op("INCRBY n -3"), Op::IncrBy { key: b("n"), by: -3 });
        assert_eq!(op("DECRBY n 3"), Op::IncrBy { key: b("n"), by: -3 });
        assert_eq!(error("DECRBY n -9223372036854775808"), "ERR decrement would overflow");
        assert_eq!(error("INCRBY n 1.5"), "ERR value is not an integer or out of range");
        assert_eq!(op("MSET a 1 b 2"), Op::MultiPut { pairs: vec![(b("a"), b("1")), (b("b"), b("2"))] });
        assert_eq!(op("DEL a b"), Op::MultiDelete { keys: vec![b("a"), b("b")] });
        assert_eq!(op("HMSET h f 1 g 2"), Op::HashSet { key: b("h"), pairs: vec![(b("f"), b("1")), (b("g"), b("2"))] });
        assert_eq!(op("HEXISTS h f"), Op::HashGet { key: b("h"), fields: vec![b("f")] });
        assert_eq!(op("SCAN 0"), Op::KeyScan { after: Bytes::new(), pattern: None, count: 10, of_type: None });
        assert_eq!(
            op("scan 0 match u:* count 100"),
            Op::KeyScan { after: Bytes::new(), pattern: Some(b("u:*")), count: 100, of_type: None }
        );
        // TYPE: lower case, the last one counts; it rides along a resumed cursor too.
        assert_eq!(
            op("SCAN 0 TYPE Hash COUNT 5 TYPE ZSET"),
            Op::KeyScan { after: Bytes::new(), pattern: None, count: 5, of_type: Some(b("zset")) }
        );
        assert_eq!(
            op("SCAN 99 TYPE string"),
            Op::ScanResume {
                target: ScanTarget::Keys { of_type: Some(b("string")) },
                fingerprint: 99,
                pattern: None,
                count: 10
            }
        );
        assert_eq!(error("HSCAN h 0 TYPE hash"), "ERR syntax error");
        assert_eq!(error("SCAN x"), "ERR invalid cursor");
        assert_eq!(error("SCAN -1"), "ERR invalid cursor");
        // A cursor this replica did not hand out is resumed by the state machine.
        assert_eq!(
            op("SCAN 12345 COUNT 5"),
            Op::ScanResume { target: ScanTarget::Keys { of_type: None }, fingerprint: 12345, pattern: None, count: 5 }
        );
        assert_eq!(
            op("ZSCAN z 77"),
            Op::ScanResume {
                target: ScanTarget::Members { key: b("z"), of: ScanOf::ZSet },
                fingerprint: 77,
                pattern: None,
                count: 10
            }
        );
        assert_eq!(error("SCAN 0 COUNT 0"), "ERR syntax error");
        assert_eq!(error("SCAN 0 MATCH"), "ERR syntax error");
        // A cursor handed out by a reply continues after its key.
        let cursors = Cursors::new(10);
        let reply = render(Shape::Scan, OpResult::Keys { keys: vec![b("a")], next: Some(b("a")) }, &cursors);
        let RespValue::Array(parts) = reply else { panic!() };
        let RespValue::Bulk(cursor) = &parts[0] else { panic!() };
        let next = translate(&[b("SCAN"), cursor.clone()], &cursors);
        assert!(matches!(next, Translated::Data { op: Op::KeyScan { after, .. }, .. } if after == b("a")));
        assert_eq!(
            render(Shape::Scan, OpResult::Keys { keys: vec![], next: None }, &cursors),
            RespValue::Array(vec![RespValue::text("0"), RespValue::Array(vec![])])
        );
    }

    #[test]
    fn expiry_lists_and_sets_translate_like_redis() {
        use synod_core::kv::ExpireCond;
        assert_eq!(
            op("EXPIRE k 10 GT"),
            Op::Expire { key: b("k"), ms: 10_000, relative: true, cond: ExpireCond::Greater }
        );
        assert_eq!(op("pexpireat k 5"), Op::Expire { key: b("k"), ms: 5, relative: false, cond: ExpireCond::Always });
        assert_eq!(error("EXPIRE k 10 NX XX"), "ERR NX and XX, GT or LT options at the same time are not compatible");
        assert_eq!(error("EXPIRE k 10 GT LT"), "ERR GT and LT options at the same time are not compatible");
        assert_eq!(error("EXPIRE k 10 FOO"), "ERR Unsupported option FOO");
        assert_eq!(error("EXPIRE k 9223372036854775807"), "ERR invalid expire time in 'expire' command");
        assert_eq!(op("GETEX k PERSIST"), Op::GetEx { key: b("k"), expire: None, persist: true });
        assert_eq!(op("GETEX k PX 5"), Op::GetEx { key: b("k"), expire: Some((5, true)), persist: false });
        assert_eq!(error("GETEX k EX 0"), "ERR invalid expire time in 'getex' command");
        assert_eq!(error("GETEX k EX 1 PERSIST"), "ERR syntax error");
        assert_eq!(error("SETRANGE k -1 v"), "ERR offset is out of range");
        assert_eq!(error("INCRBYFLOAT k abc"), "ERR value is not a valid float");
        assert_eq!(error("COPY a b DB 1"), "ERR DB index is out of range");
        assert_eq!(error("FLUSHALL LAZY"), "ERR syntax error");
        assert_eq!(op("LPOP l"), Op::ListPop { key: b("l"), left: true, count: None });
        assert_eq!(op("RPOP l 3"), Op::ListPop { key: b("l"), left: false, count: Some(3) });
        assert_eq!(error("LPOP l -1"), "ERR value is out of range, must be positive");
        assert_eq!(error("LPOP l 1 2"), "ERR wrong number of arguments for 'lpop' command");
        assert_eq!(error("LMOVE a b UP LEFT"), "ERR syntax error");
        assert_eq!(
            op("RPUSHX l a b"),
            Op::ListPush { key: b("l"), values: vec![b("a"), b("b")], left: false, only_existing: true }
        );
        assert_eq!(error("SPOP s 1 2"), "ERR syntax error");
        assert_eq!(error("SPOP s x"), "ERR value is out of range, must be positive");
        assert_eq!(error("SRANDMEMBER s -1000001"), "ERR value is out of range");
        assert_eq!(op("SRANDMEMBER s -3"), Op::SetRandMember { key: b("s"), count: Some(-3) });
        // HRANDFIELD: Redis's order of checks (the count, then the syntax) and its texts.
        assert_eq!(op("HRANDFIELD h"), Op::HashRandField { key: b("h"), count: None, with_values: false });
        assert_eq!(
            op("hrandfield h -2 WithValues"),
            Op::HashRandField { key: b("h"), count: Some(-2), with_values: true }
        );
        assert_eq!(error("HRANDFIELD h x"), "ERR value is not an integer or out of range");
        assert_eq!(error("HRANDFIELD h x foo"), "ERR value is not an integer or out of range");
        assert_eq!(error("HRANDFIELD h 1 foo"), "ERR syntax error");
        assert_eq!(error("HRANDFIELD h 1 withvalues x"), "ERR syntax error");
        assert_eq!(
            error("HRANDFIELD h -9223372036854775808"),
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"
        );
        assert_eq!(error("HRANDFIELD h -1000001"), "ERR value is out of range");
        let fv = OpResult::Items(Some(vec![b("f"), b("v")]));
        assert_eq!(render(Shape::FieldValuePairs, fv, &Cursors::new(1)), RespValue::Pairs(vec![(b("f"), b("v"))]));
        // OBJECT
        assert_eq!(op("OBJECT encoding k"), Op::ObjectEncoding { key: b("k") });
        assert_eq!(error("OBJECT ENCODING"), "ERR wrong number of arguments for 'object|encoding' command");
        assert_eq!(error("OBJECT encoding a b"), "ERR wrong number of arguments for 'object|encoding' command");
        assert_eq!(error("OBJECT help x"), "ERR wrong number of arguments for 'object|help' command");
        assert_eq!(error("OBJECT FOO k"), "ERR unknown subcommand 'FOO'. Try OBJECT HELP.");
        assert_eq!(error("OBJECT"), "ERR wrong number of arguments for 'object' command");
        let Translated::Reply(RespValue::Array(help)) = tr("OBJECT HELP") else { panic!() };
        assert_eq!(help[1], RespValue::Simple("ENCODING <key>".into()));
        let c = Cursors::new(1);
        assert_eq!(render(Shape::Items, OpResult::Items(None), &c), RespValue::NullArray);
        assert_eq!(render(Shape::TtlSecs, OpResult::Int(1_499), &c), RespValue::Int(1));
        assert_eq!(render(Shape::TtlSecs, OpResult::Int(1_500), &c), RespValue::Int(2));
        assert_eq!(render(Shape::TtlSecs, OpResult::Int(-2), &c), RespValue::Int(-2));
    }

    #[test]
    fn rendering() {
        let c = Cursors::new(10);
        assert_eq!(render(Shape::Set, OpResult::Applied(false), &c), RespValue::Null);
        assert_eq!(render(Shape::Set, OpResult::Value(Some(b("old"))), &c), RespValue::bulk("old"));
        assert_eq!(render(Shape::SetNx, OpResult::Applied(true), &c), RespValue::Int(1));
        assert_eq!(render(Shape::FirstExists, OpResult::Values(vec![None]), &c), RespValue::Int(0));
        assert_eq!(
            render(Shape::Int, OpResult::Error(synod_core::kv::WRONGTYPE.into()), &c),
            RespValue::Error(synod_core::kv::WRONGTYPE.into())
        );
        assert_eq!(render(Shape::Status, OpResult::Text("hash".into()), &c), RespValue::Simple("hash".into()));
        assert!(render(Shape::Bulk, OpResult::Int(1), &c).is_error());
    }

    #[test]
    fn scores_render_as_doubles() {
        let c = Cursors::new(1);
        let score = |v: Option<&str>| OpResult::Value(v.map(b));
        assert_eq!(render(Shape::Score, score(Some("1.5")), &c), RespValue::Double(b("1.5")));
        assert_eq!(render(Shape::Score, score(None), &c), RespValue::Null);
        assert_eq!(render(Shape::IntOrScore, OpResult::Int(2), &c), RespValue::Int(2));
        assert_eq!(render(Shape::IntOrScore, score(Some("3")), &c), RespValue::Double(b("3")));
        assert_eq!(
            render(Shape::Scores, OpResult::Values(vec![Some(b("1")), None]), &c),
            RespValue::Array(vec![RespValue::Double(b("1")), RespValue::Null])
        );
        assert_eq!(render(Shape::IntOrNull, score(None), &c), RespValue::Null);
        assert!(render(Shape::IntOrNull, score(Some("1")), &c).is_error());
        // ZRANGE's options: BYLEX with REV names the maximum first; a second BY is refused.
        let words = |w: &[&str]| w.iter().map(|s| b(s)).collect::<Vec<_>>();
        let Ok(Op::ZRange { by, rev: true, limit: Some((1, 2)), .. }) =
            zrange_op("zrange", &words(&["k", "[z", "(a", "BYLEX", "REV", "LIMIT", "1", "2"]))
        else {
            panic!("BYLEX REV LIMIT")
        };
        let lex = |s: &str| synod_core::kv::LexBound::parse(s.as_bytes()).unwrap();
        assert_eq!(by, synod_core::kv::ZRangeBy::Lex { min: lex("(a"), max: lex("[z") });
        assert_eq!(zrange_op("zrange", &words(&["k", "-", "+", "BYLEX", "BYSCORE"])), Err(syntax_error()));
        assert_eq!(zrange_op("zrangebyscore", &words(&["k", "0", "1", "REV"])), Err(syntax_error()));
    }

    #[test]
    fn cursor_table_is_bounded() {
        let c = Cursors::new(2);
        let first = c.register(b("a"));
        let second = c.register(b("b"));
        let third = c.register(b("c"));
        assert_eq!(c.lookup(first), None);
        assert_eq!(c.lookup(second), Some(b("b")));
        assert_eq!(c.lookup(third), Some(b("c")));
        assert_ne!(first, 0);
    }

    #[test]
    fn every_command_has_a_consistent_table_row() {
        for s in COMMANDS {
            assert_eq!(lookup(s.name.to_uppercase().as_bytes()).map(|x| x.name), Some(s.name));
            if !s.group.is_local() || matches!(s.name, "dbsize" | "flushdb" | "flushall" | "watch") {
                // Every data command translates with its minimal arguments.
                let n = s.arity.unsigned_abs() as usize;
                let mut a: Vec<Bytes> = vec![b(s.name)];
                // "0" is a valid (H/S/Z)SCAN cursor, "1" a valid TTL, count, key or value; LMOVE
                // needs its two sides, lexicographic ranges their own bounds.
                let arg = if s.name == "scan" { "0" } else { "1" };
                a.extend((1..n).map(|_| b(arg)));
                if matches!(s.name, "hscan" | "sscan" | "zscan") {
                    a[2] = b("0");
                }
                if s.name == "lmove" {
                    a[3] = b("LEFT");
                    a[4] = b("RIGHT");
                }
                if s.name.contains("lex") {
                    a[2] = b("-");
                    a[3] = b("+");
                }
                if s.name == "object" {
                    a = vec![b("object"), b("ENCODING"), b("1")];
                }
                let t = translate(&a, &Cursors::new(1));
                assert!(matches!(t, Translated::Data { .. }), "{}: {t:?}", s.name);
            }
        }
    }
}
