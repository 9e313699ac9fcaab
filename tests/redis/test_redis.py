"""redis-py against synod's Redis front end.

Run by scripts/redis-tests.sh, which starts the clusters and passes their ports:
  SYNOD_RESP_PORTS  comma-separated RESP ports of a 3-replica cluster (no password)
  SYNOD_AUTH_PORT   RESP port of a replica configured with a password
  SYNOD_PASSWORD    that password
Every test uses keys under its own random prefix, so the suite can run against a cluster
that already holds data.
"""

import os
import time
import uuid

import pytest
import redis

PORTS = [int(p) for p in os.environ.get("SYNOD_RESP_PORTS", "7401,7402,7403").split(",")]
AUTH_PORT = int(os.environ.get("SYNOD_AUTH_PORT", "0"))
PASSWORD = os.environ.get("SYNOD_PASSWORD", "")


def client(port=None, **kw):
    return redis.Redis(host="127.0.0.1", port=port or PORTS[0], socket_timeout=30, **kw)


@pytest.fixture
def r():
    c = client(decode_responses=True)
    yield c
    c.close()


@pytest.fixture
def p():
    """A unique key prefix per test."""
    return f"t:{uuid.uuid4().hex[:10]}:"


def test_strings(r, p):
    assert r.set(p + "a", "1") is True
    assert r.get(p + "a") == "1"
    assert r.get(p + "missing") is None
    assert r.incr(p + "a") == 2
    assert r.incrby(p + "a", 10) == 12
    assert r.decr(p + "a") == 11
    assert r.decrby(p + "a", 5) == 6
    assert r.append(p + "s", "ab") == 2
    assert r.append(p + "s", "cd") == 4
    assert r.strlen(p + "s") == 4
    assert r.getset(p + "s", "new") == "abcd"
    assert r.getdel(p + "s") == "new"
    assert r.get(p + "s") is None
    assert r.setnx(p + "n", "x") is True
    assert r.setnx(p + "n", "y") is False
    assert r.mset({p + "m1": "v1", p + "m2": "v2"}) is True
    assert r.mget([p + "m1", p + "nope", p + "m2"]) == ["v1", None, "v2"]
    assert r.exists(p + "m1", p + "m2", p + "nope") == 2
    assert r.delete(p + "m1", p + "m2", p + "nope") == 2
    assert r.type(p + "a") == "string"
    assert r.type(p + "nope") == "none"


def test_set_options(r, p):
    k = p + "k"
    assert r.set(k, "v1", xx=True) is None
    assert r.set(k, "v1", nx=True) is True
    assert r.set(k, "v2", nx=True) is None
    assert r.get(k) == "v1"
    assert r.set(k, "v3", xx=True, get=True) == "v1"
    assert r.set(p + "fresh", "x", get=True) is None
    assert r.get(k) == "v3"


def test_expiry_with_px_and_ex(r, p):
    assert r.set(p + "px", "short", px=300) is True
    assert r.set(p + "ex", "long", ex=100) is True
    assert r.psetex(p + "ps", 300, "short") is True
    assert r.get(p + "px") == "short"
    time.sleep(0.8)
    assert r.get(p + "px") is None
    assert r.get(p + "ps") is None
    assert r.get(p + "ex") == "long"
    # KEEPTTL keeps the expiry, a plain SET clears it.
    r.set(p + "kt", "a", px=300)
    r.set(p + "kt", "b", keepttl=True)
    r.set(p + "plain", "a", px=300)
    r.set(p + "plain", "b")
    time.sleep(0.8)
    assert r.get(p + "kt") is None
    assert r.get(p + "plain") == "b"


def test_hashes(r, p):
    h = p + "h"
    assert r.hset(h, mapping={"f1": "a", "f2": "b"}) == 2
    assert r.hset(h, "f1", "c") == 0
    assert r.hget(h, "f1") == "c"
    assert r.hget(h, "nope") is None
    assert r.hmget(h, ["f1", "nope", "f2"]) == ["c", None, "b"]
    assert r.hgetall(h) == {"f1": "c", "f2": "b"}
    assert r.hgetall(p + "nohash") == {}
    assert r.hexists(h, "f2") is True
    assert r.hexists(h, "zz") is False
    assert r.hlen(h) == 2
    assert sorted(r.hkeys(h)) == ["f1", "f2"]
    assert sorted(r.hvals(h)) == ["b", "c"]
    assert r.execute_command("HMSET", h, "f3", "x", "f4", "y") in (True, "OK")
    assert r.hlen(h) == 4
    assert r.hdel(h, "f1", "f2", "zz") == 2
    assert r.type(h) == "hash"
    assert r.hdel(h, "f3", "f4") == 2
    assert r.exists(h) == 0


def test_errors_keep_the_connection_usable(r, p):
    r.set(p + "s", "text")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        r.hset(p + "s", "f", "v")
    r.hset(p + "h", "f", "v")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        r.get(p + "h")
    with pytest.raises(redis.ResponseError, match="value is not an integer or out of range"):
        r.incr(p + "s")
    with pytest.raises(redis.ResponseError) as e:
        r.execute_command("FOOBAR", "a", "b")
    assert str(e.value) == "unknown command 'FOOBAR', with args beginning with: 'a' 'b' "
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'get' command"):
        r.execute_command("GET")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("SET", p + "x", "v", "NX", "XX")
    with pytest.raises(redis.ResponseError, match="invalid expire time"):
        r.execute_command("SET", p + "x", "v", "EX", "0")
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        r.execute_command("SELECT", "1")
    assert r.execute_command("SELECT", "0") in (True, "OK")
    assert r.ping() is True
    assert r.get(p + "s") == "text"


def test_oversized_value_is_refused_and_nothing_applied(r, p):
    big = "x" * (16 * 1024 * 1024 + 1)  # limits.max_value_bytes defaults to 16 MiB
    with pytest.raises(redis.ResponseError, match="exceeds the limit"):
        r.set(p + "big", big)
    assert r.exists(p + "big") == 0
    assert r.ping() is True


def test_pipeline_without_transaction_keeps_order(r, p):
    pipe = r.pipeline(transaction=False)
    for i in range(500):
        pipe.set(f"{p}{i}", str(i))
    for i in range(500):
        pipe.get(f"{p}{i}")
    pipe.incr(p + "ctr")
    pipe.incr(p + "ctr")
    out = pipe.execute()
    assert out[:500] == [True] * 500
    assert out[500:1000] == [str(i) for i in range(500)]
    assert out[1000:] == [1, 2]


def test_pipeline_errors_in_place(r, p):
    r.set(p + "s", "text")
    pipe = r.pipeline(transaction=False)
    pipe.set(p + "a", "1")
    pipe.hget(p + "s", "f")
    pipe.get(p + "a")
    out = pipe.execute(raise_on_error=False)
    assert out[0] is True
    assert isinstance(out[1], redis.ResponseError) and str(out[1]).startswith("WRONGTYPE")
    assert out[2] == "1"


def test_default_pipeline_is_an_atomic_transaction(r, p):
    # redis-py's default pipeline() is transactional: MULTI, the commands, EXEC in one write.
    pipe = r.pipeline()
    pipe.set(p + "a", "1")
    pipe.incr(p + "a")
    pipe.hset(p + "h", "f", "v")
    pipe.get(p + "a")
    pipe.hget(p + "a", "f")  # WRONGTYPE inside EXEC's array, the rest still applied
    out = pipe.execute(raise_on_error=False)
    assert out[:4] == [True, 2, 1, "2"]
    assert isinstance(out[4], redis.ResponseError) and str(out[4]).startswith("WRONGTYPE")
    # An unknown command at queue time aborts the whole transaction (EXECABORT).
    pipe = r.pipeline()
    pipe.set(p + "b", "x")
    pipe.execute_command("NOSUCHCOMMAND")
    with pytest.raises(redis.ResponseError):
        pipe.execute()
    assert r.exists(p + "b") == 0


def test_watch_optimistic_locking(r, p):
    k = p + "counter"
    r.set(k, "10")
    other = client(PORTS[1], decode_responses=True)  # another replica, another client
    # Untouched since WATCH: the transaction applies.
    with r.pipeline() as pipe:
        pipe.watch(k)
        current = int(pipe.get(k))
        pipe.multi()
        pipe.set(k, str(current + 1))
        assert pipe.execute() == [True]
    assert r.get(k) == "11"
    # Changed by another client (through another replica) between WATCH and EXEC: aborted.
    with r.pipeline() as pipe:
        pipe.watch(k)
        current = int(pipe.get(k))
        other.set(k, "100")
        pipe.multi()
        pipe.set(k, str(current + 1))
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert r.get(k) == "100"

    # The usual retry loop: concurrent increments through two replicas lose no update.
    def incr(c):
        def step(pipe):
            v = int(pipe.get(k))
            pipe.multi()
            pipe.set(k, str(v + 1))

        c.transaction(step, k)

    for _ in range(20):
        incr(r)
        incr(other)
    assert r.get(k) == "140"
    other.close()


def test_watch_pipelined_with_exec(r, p):
    # WATCH, MULTI, the commands and EXEC in one write (raw socket: redis-py runs WATCH
    # alone). EXEC needs the versions WATCH reads through the log, so the connection waits
    # for them before EXEC; the replies stay in request order.
    import socket

    k = (p + "w").encode()
    r.set(k, "1")
    words = [[b"WATCH", k], [b"MULTI"], [b"INCR", k], [b"EXEC"], [b"GET", k]]
    req = b"".join(b"*%d\r\n" % len(w) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in w) for w in words)
    want = b"+OK\r\n+OK\r\n+QUEUED\r\n*1\r\n:2\r\n$1\r\n2\r\n"
    with socket.create_connection(("127.0.0.1", PORTS[0]), timeout=30) as s:
        s.sendall(req)
        got = b""
        while len(got) < len(want):
            chunk = s.recv(4096)
            assert chunk, got
            got += chunk
    assert got == want


def test_expire_ttl_persist_and_key_commands(r, p):
    k = p + "k"
    r.set(k, "v")
    assert r.ttl(k) == -1
    assert r.expire(k, 100) is True
    assert 99 <= r.ttl(k) <= 100
    assert 90_000 < r.pttl(k) <= 100_000
    assert r.persist(k) is True
    assert r.ttl(k) == -1
    assert r.pexpire(k, 300) is True
    time.sleep(0.8)
    assert r.get(k) is None
    assert r.ttl(k) == -2
    r.set(k, "hello world")
    assert r.getrange(k, 0, 4) == "hello"
    assert r.setrange(k, 6, "redis") == 11
    assert r.getex(k, ex=50) == "hello redis"
    assert 49 <= r.ttl(k) <= 50
    assert r.rename(k, p + "k2") is True
    assert 49 <= r.ttl(p + "k2") <= 50
    assert r.copy(p + "k2", p + "k3") is True
    assert r.get(p + "k3") == "hello redis"
    assert r.incrbyfloat(p + "f", 10.5) == 10.5
    assert r.incrbyfloat(p + "f", 0.1) == 10.6


def test_lists_and_sets(r, p):
    q = p + "queue"
    assert r.rpush(q, "a", "b", "c") == 3
    assert r.lpush(q, "z") == 4
    assert r.lrange(q, 0, -1) == ["z", "a", "b", "c"]
    assert r.lmove(q, p + "work", "LEFT", "RIGHT") == "z"
    assert r.lpop(q, 2) == ["a", "b"]
    assert r.llen(q) == 1
    assert r.rpop(q) == "c"
    assert r.exists(q) == 0
    s = p + "set"
    assert r.sadd(s, "x", "y", "z") == 3
    assert r.smembers(s) == {"x", "y", "z"}
    assert r.sismember(s, "y")
    # SPOP's choice is made by the state machine, so every replica removed the same member.
    popped = r.spop(s)
    assert popped in {"x", "y", "z"}
    for port in PORTS:
        c = client(port, decode_responses=True)
        assert c.smembers(s) == {"x", "y", "z"} - {popped}
        c.close()
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
        r.lpush(s, "a")


@pytest.mark.parametrize("proto", [2, 3])
def test_sorted_sets(p, proto):
    # redis-py 8 speaks RESP3 by default, where scores must arrive as doubles; RESP2 clients
    # convert the bulk strings themselves.
    r = client(decode_responses=True, protocol=proto)
    z = p + "z"
    assert r.zadd(z, {"a": 1, "b": 2, "c": 3}) == 3
    pairs = lambda v: [tuple(x) for x in v]  # tuples in RESP2, lists in RESP3 (redis-py 8)
    assert pairs(r.zrange(z, 0, -1, withscores=True)) == [("a", 1.0), ("b", 2.0), ("c", 3.0)]
    assert r.zincrby(z, 2.5, "a") == 3.5
    assert r.zscore(z, "a") == 3.5
    assert r.zscore(z, "nosuch") is None
    assert r.zmscore(z, ["b", "nosuch"]) == [2.0, None]
    assert r.zadd(z, {"b": 1}, incr=True) == 3.0
    assert r.zrangebyscore(z, 2, "+inf") == ["b", "c", "a"]  # ties by member
    assert pairs(r.zrangebyscore(z, "(3", "+inf", withscores=True)) == [("a", 3.5)]
    assert r.zrevrank(z, "a") == 0
    assert r.zrank(z, "nosuch") is None
    assert r.zcount(z, "-inf", "(3.5") == 2
    # Without a count, Redis 7 answers one flat [member, score] under RESP3.
    assert r.zpopmin(z) == ([("b", 3.0)] if proto == 2 else ["b", 3.0])
    assert r.zcard(z) == 2
    assert pairs(r.zpopmax(z, 5)) == [("c", 3.0), ("a", 3.5)][::-1]
    assert r.exists(z) == 0
    lex = p + "lex"
    r.zadd(lex, {m: 0 for m in "abcde"})
    assert r.zrangebylex(lex, "[b", "(d") == ["b", "c"]
    assert r.zrevrangebylex(lex, "+", "-", start=0, num=2) == ["e", "d"]
    assert r.zlexcount(lex, "-", "+") == 5
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        r.set(p + "s", "v")
        r.zadd(p + "s", {"a": 1})
    r.close()


def test_scan_match_count_and_keys(r, p):
    want = {f"{p}user:{i}" for i in range(40)}
    r.mset({k: "v" for k in want})
    r.mset({f"{p}item:{i}": "v" for i in range(10)})
    got = set(r.scan_iter(match=p + "user:*", count=7))
    assert got == want
    cursor, first = r.scan(0, match=p + "*", count=5)
    assert cursor != 0 and len(first) <= 5
    assert set(r.keys(p + "item:*")) == {f"{p}item:{i}" for i in range(10)}
    assert r.dbsize() >= 50
    with pytest.raises(redis.ResponseError, match="invalid cursor"):
        r.execute_command("SCAN", "notanumber")


def test_member_scans_visit_every_member_once(r, p):
    # Large enough that the scan takes many calls (COUNT is a hint in Redis; synod examines
    # COUNT members per call in member order).
    r.hset(p + "h", mapping={f"f{i}": str(i) for i in range(500)})
    r.sadd(p + "s", *[f"m{i}" for i in range(500)])
    r.zadd(p + "z", {f"m{i}": i for i in range(500)})
    assert dict(r.hscan_iter(p + "h", count=7)) == {f"f{i}": str(i) for i in range(500)}
    members = list(r.sscan_iter(p + "s", count=7))
    assert sorted(members) == sorted(f"m{i}" for i in range(500))
    assert dict(r.zscan_iter(p + "z", count=7)) == {f"m{i}": float(i) for i in range(500)}
    assert sorted(r.sscan_iter(p + "s", match="m4?")) == sorted(f"m4{i}" for i in range(10))
    cursor, page = r.hscan(p + "h", 0, count=10)
    assert cursor != 0 and len(page) == 10


def test_scan_cursors_continue_on_another_replica(p):
    """A cursor is the key's fingerprint, not a replica's private handle: a scan started on one
    replica continues on the next one (as after a failover or a reconnect) and still visits
    every key and member exactly once when nothing changes meanwhile."""
    clients = [client(port, decode_responses=True) for port in PORTS]
    try:
        keys = {f"{p}k{i}" for i in range(60)}
        clients[0].mset({k: "v" for k in keys})
        clients[0].sadd(p + "s", *[f"m{i}" for i in range(80)])
        got, cursor, turn = [], 0, 0
        while True:
            cursor, page = clients[turn % len(clients)].scan(cursor, match=p + "k*", count=9)
            got.extend(page)
            turn += 1
            if cursor == 0:
                break
        assert turn > len(clients) and sorted(got) == sorted(keys)
        members, cursor, turn = [], 0, 0
        while True:
            cursor, page = clients[turn % len(clients)].sscan(p + "s", cursor, count=7)
            members.extend(page)
            turn += 1
            if cursor == 0:
                break
        assert sorted(members) == sorted(f"m{i}" for i in range(80))
        # A cursor that stands for a member deleted meanwhile starts over on another replica:
        # repeats, but nothing present throughout is missed.
        cursor, page = clients[0].sscan(p + "s", 0, count=5)
        assert cursor != 0 and len(page) == 5
        deleted = max(page)  # members come in member order: the cursor stands for the last
        clients[0].srem(p + "s", deleted)
        seen, turn = set(page), 1
        while cursor != 0:
            cursor, page = clients[turn % len(clients)].sscan(p + "s", cursor, count=7)
            seen.update(page)
            turn += 1
        assert seen >= {f"m{i}" for i in range(80)} - {deleted}
    finally:
        for c in clients:
            c.close()


def test_resp3_via_hello(p):
    c = client(protocol=3, decode_responses=True)
    try:
        c.hset(p + "h", mapping={"a": "1", "b": "2"})
        assert c.hgetall(p + "h") == {"a": "1", "b": "2"}
        assert c.get(p + "missing") is None
        assert c.set(p + "k", "v") is True
        assert c.get(p + "k") == "v"
        hello = c.execute_command("HELLO", "3")
        assert hello["proto"] == 3 and hello["server"] == "redis"
        assert c.config_get("save") == {"save": ""}
    finally:
        c.close()


def test_introspection(r):
    info = r.info("replication")
    assert info["synod_protocol"] == "multipaxos"
    assert info["role"] in ("master", "slave")
    assert "synod_leader_id" in info and "synod_commit_index" in info
    server = r.info("server")
    assert server["redis_mode"] == "standalone"
    assert r.config_get("appendonly")["appendonly"] in ("yes", "no")
    assert r.command_count() > 30
    assert r.client_setname("tester") is True
    assert r.client_getname() == "tester"
    assert isinstance(r.client_id(), int)
    assert r.echo("hi") == "hi"
    # "COMMAND DOCS" as one name: redis-py splits it and parses the reply into a dict.
    docs = r.execute_command("COMMAND DOCS", "get")
    assert "get" in docs and "summary" in str(docs)


def test_every_replica_serves_linearizable_reads_and_writes(p):
    clients = [client(port, decode_responses=True) for port in PORTS]
    try:
        for i, c in enumerate(clients):
            c.set(p + str(i), f"from-{i}")
            for other in clients:
                assert other.get(p + str(i)) == f"from-{i}"
        assert clients[-1].incr(p + "ctr") == 1
        assert clients[0].incr(p + "ctr") == 2
    finally:
        for c in clients:
            c.close()


@pytest.mark.skipif(not AUTH_PORT, reason="no password replica given (SYNOD_AUTH_PORT)")
def test_auth_required():
    anon = client(AUTH_PORT)
    with pytest.raises(redis.AuthenticationError):
        anon.ping()
    anon.close()
    wrong = client(AUTH_PORT, password="wrong")
    with pytest.raises(redis.AuthenticationError):
        wrong.ping()
    wrong.close()
    ok = client(AUTH_PORT, password=PASSWORD, decode_responses=True)
    assert ok.set("auth:k", "v") is True
    assert ok.get("auth:k") == "v"
    ok.close()
    # HELLO 3 AUTH default <password> (redis-py does this with protocol=3).
    ok3 = client(AUTH_PORT, password=PASSWORD, protocol=3, decode_responses=True)
    assert ok3.get("auth:k") == "v"
    ok3.close()
