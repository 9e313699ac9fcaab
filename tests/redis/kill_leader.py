#!/usr/bin/env python3
"""Kill the leader with SIGKILL while writers (and usually a redis-benchmark run) load the
cluster through the Redis front end; afterwards every acknowledged write must be readable.

Each writer thread sends SET with a unique key and value and records the keys whose SET
answered OK. A SET that failed (connection reset by the killed replica, TRYAGAIN, timeout)
has an unknown outcome and is not checked. The leader is found through INFO replication
(synod_role) and its process id through INFO server (process_id).

usage: kill_leader.py PORT[,PORT...] [--seconds-before 2] [--seconds-after 4] [--writers 4]
Exits 0 when no acknowledged write is missing (and writes were acknowledged before and after the kill).
"""

import argparse
import os
import signal
import sys
import threading
import time
import uuid

import redis


def role_and_pid(port):
    c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, decode_responses=True)
    try:
        return c.info("replication")["synod_role"], c.info("server")["process_id"]
    finally:
        c.close()


def find_leader(ports, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for port in ports:
            try:
                role, pid = role_and_pid(port)
            except (redis.RedisError, OSError):
                continue
            if role == "leader":
                return port, pid
        time.sleep(0.1)
    raise SystemExit("no leader found")


def writer(ports, start_index, prefix, stop, acked, failed):
    """SET unique keys until `stop`, moving to the next replica after any error."""
    i = 0
    idx = start_index
    conn = None
    while not stop.is_set():
        if conn is None:
            conn = redis.Redis(host="127.0.0.1", port=ports[idx % len(ports)], socket_timeout=30,
                               socket_connect_timeout=2)
        key = f"{prefix}{i}"
        value = f"v-{prefix}{i}"
        i += 1
        try:
            if conn.set(key, value) is True:
                acked.append((key, value))
            else:
                failed.append(key)
        except (redis.RedisError, OSError):
            failed.append(key)
            conn.close()
            conn = None
            idx += 1
            time.sleep(0.05)
    if conn is not None:
        conn.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ports")
    ap.add_argument("--seconds-before", type=float, default=2.0)
    ap.add_argument("--seconds-after", type=float, default=4.0)
    ap.add_argument("--writers", type=int, default=4)
    args = ap.parse_args()
    ports = [int(p) for p in args.ports.split(",")]

    leader_port, leader_pid = find_leader(ports)
    print(f"leader: RESP port {leader_port}, pid {leader_pid}")
    run = uuid.uuid4().hex[:8]
    stop = threading.Event()
    acked, failed = [], []
    threads = [
        threading.Thread(target=writer, args=(ports, w, f"kill:{run}:{w}:", stop, acked, failed))
        for w in range(args.writers)
    ]
    for t in threads:
        t.start()
    time.sleep(args.seconds_before)
    before = len(acked)
    os.kill(leader_pid, signal.SIGKILL)
    killed_at = time.time()
    print(f"SIGKILL to pid {leader_pid} after {before} acknowledged writes")
    survivors = [p for p in ports if p != leader_port]
    new_port, _ = find_leader(survivors)
    print(f"new leader on RESP port {new_port} after {time.time() - killed_at:.2f}s")
    time.sleep(args.seconds_after)
    stop.set()
    for t in threads:
        t.join()
    after = len(acked) - before
    print(f"acknowledged writes: {len(acked)} ({before} before the kill, {after} after); "
          f"unknown outcome: {len(failed)}")

    reader = redis.Redis(host="127.0.0.1", port=survivors[0], socket_timeout=30, decode_responses=True)
    missing = []
    for chunk in range(0, len(acked), 500):
        part = acked[chunk:chunk + 500]
        values = reader.mget([k for k, _ in part])
        missing += [k for (k, v), got in zip(part, values) if got != v]
    reader.close()
    ok = not missing and after > 0 and before > 0
    if missing:
        print(f"LOST {len(missing)} acknowledged writes, e.g. {missing[:5]}")
    if after == 0:
        print("no write was acknowledged after the kill: the cluster did not recover")
    print(f"verified {len(acked) - len(missing)} of {len(acked)} acknowledged writes after the leader kill")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
