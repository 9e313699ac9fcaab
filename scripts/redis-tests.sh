#!/usr/bin/env bash
# The Redis front end against real Redis tools (docs/redis.md): redis-cli round trips,
# redis-benchmark on the leader and on a follower, the redis-py suite (tests/redis), AUTH
# with a password replica, and a leader SIGKILL under load that must lose no acknowledged
# write. Builds the release binary, starts a 3-node `synod local` cluster on free ports in a
# temp dir, stops everything on exit (also on failure), exits non-zero on any failure.
#
# Also compares synod's replies with a real redis-server's, command by command
# (tests/redis/compat.py), through the leader and through a follower.
#
# Needs redis-cli/redis-benchmark (Debian: redis-tools), redis-server (Debian: redis-server)
# and python3 with redis + pytest.
# Env: CARGO_TARGET_DIR (default target), SYNOD_BIN (a built binary: skip the build), KEEP=1
# keeps the temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/common.sh
script_init redis-tests
CHECK_QUIET=1

for tool in redis-cli redis-benchmark redis-server python3; do
  command -v "$tool" >/dev/null || { echo "redis-tests: $tool is missing (apt-get install redis-tools redis-server)"; exit 1; }
done
python3 -c 'import redis, pytest' || { echo "redis-tests: python3 needs the redis and pytest modules"; exit 1; }

bin=$(synod_binary)

tmp=$(mktemp -d -t synod-redis-XXXXXX)
pids=()
cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ $rc -ne 0 ]]; then
    echo "redis-tests: FAILED (exit $rc); replica logs:"
    for f in "$tmp"/*/node*.log "$tmp"/*.log; do
      [[ -f $f ]] && { echo "--- $f (last 30 lines)"; tail -n 30 "$f"; }
    done
  fi
  [[ ${KEEP:-0} == 1 ]] && echo "kept $tmp" || rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT

# A base port B whose layout (B+i, B+100+i, B+200+i, B+300+i for i = 1..3) is all free.
base=$(python3 - <<'EOF'
import random, socket
for _ in range(200):
    b = random.randrange(20000, 40000, 10)
    socks = []
    try:
        for off in (0, 100, 200, 300):
            for i in (1, 2, 3):
                s = socket.socket(); s.bind(("127.0.0.1", b + off + i)); socks.append(s)
        print(b)
        break
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
EOF
)
[[ -n $base ]] || { echo "redis-tests: no free port range found"; exit 1; }
ports="$((base + 301)),$((base + 302)),$((base + 303))"
p1=$((base + 301))

stamp "start a 3-node multipaxos cluster (RESP ports $ports)"
"$bin" local --nodes 3 --base-port "$base" --data-dir "$tmp/c3" >"$tmp/local.log" 2>&1 &
pids+=($!)

# The single password-protected replica: its own config, run with `synod server`.
read -r ap1 ap2 ap3 ap4 < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])
for s in ss: s.close()')
password="s3cret-$RANDOM"
cat >"$tmp/auth.toml" <<EOF
id = 1
cluster = "redis-auth"
data_dir = "$tmp/auth"
password = "$password"
[[members]]
id = 1
peer_addr = "127.0.0.1:$ap1"
client_addr = "127.0.0.1:$ap2"
admin_addr = "127.0.0.1:$ap3"
resp_addr = "127.0.0.1:$ap4"
EOF
"$bin" server --config "$tmp/auth.toml" >"$tmp/auth.log" 2>&1 &
pids+=($!)

wait_leader() { # password port...: until every port answers and one of them reports a leader
  local pw=$1
  shift
  local deadline=$(($(date +%s) + 60))
  while (($(date +%s) < deadline)); do
    local up=0 leader=0
    for port in "$@"; do
      local auth=()
      [[ -n $pw ]] && auth=(--no-auth-warning -a "$pw")
      if out=$(redis-cli -p "$port" "${auth[@]}" info replication 2>/dev/null); then
        [[ $out == *synod_role* ]] && up=$((up + 1))
        [[ $out == *"synod_role:leader"* ]] && leader=1
      fi
    done
    ((up == $# && leader == 1)) && return 0
    sleep 0.2
  done
  echo "redis-tests: no leader on ports $* within 60s"
  return 1
}
wait_leader "" "$((base + 301))" "$((base + 302))" "$((base + 303))"
wait_leader "$password" "$ap4"
role_of() { redis-cli -p "$1" info replication | tr -d '\r' | sed -n 's/^synod_role://p'; }
follower=""
for port in ${ports//,/ }; do [[ $(role_of "$port") == follower ]] && follower=$port && break; done
[[ -n $follower ]] || { echo "redis-tests: no follower found"; exit 1; }
stamp "cluster up; follower on $follower"

cli() { redis-cli -p "$p1" "$@" 2>&1; }

stamp "replies compared with a real redis-server (tests/redis/compat.py)"
# The oracle: a throwaway redis-server on a free port, no persistence. compat.py starts with
# FLUSHALL on both sides, so it runs before the tests that leave data behind.
rport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis-server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
for target in "leader:$(for port in ${ports//,/ }; do [[ $(role_of "$port") == leader ]] && echo "$port"; done | head -n 1)" \
  "follower:$follower"; do
  if python3 tests/redis/compat.py --redis "$rport" --synod "${target#*:}"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL synod's replies differ from redis-server's (through the ${target%%:*})"
  fi
done

stamp "redis-cli round trips"
k="cli:$RANDOM"
check "SET" "OK" "$(cli set "$k:s" hello)"
check "GET" "hello" "$(cli get "$k:s")"
check "GET via follower" "hello" "$(redis-cli -p "$follower" get "$k:s")"
check "SET via follower" "OK" "$(redis-cli -p "$follower" set "$k:f" v)"
check "INCR" "1" "$(cli incr "$k:n")"
check "INCR again" "2" "$(cli incr "$k:n")"
check "MSET" "OK" "$(cli mset "$k:a" 1 "$k:b" 2)"
check "MGET" $'1\n\n2' "$(cli mget "$k:a" "$k:missing" "$k:b")"
check "HSET" "2" "$(cli hset "$k:h" f1 v1 f2 v2)"
check "HGETALL" $'f1\nv1\nf2\nv2' "$(cli hgetall "$k:h")"
check "HGET" "v2" "$(cli hget "$k:h" f2)"
check "DEL" "3" "$(cli del "$k:a" "$k:b" "$k:h" "$k:missing")"
check "EXISTS" "0" "$(cli exists "$k:a")"
check "WRONGTYPE" "WRONGTYPE Operation against a key holding the wrong kind of value" \
  "$(cli hset "$k:s" f v)"
check "unknown command" "ERR unknown command 'flubber', with args beginning with: 'x' 'y' " \
  "$(cli flubber x y)"
check "arity" "ERR wrong number of arguments for 'get' command" "$(cli get)"
check "PING" "PONG" "$(cli ping)"
check "TYPE" "string" "$(cli type "$k:s")"
check "SELECT 1" "ERR DB index is out of range" "$(cli select 1)"
check "inline PING" "+PONG" "$(printf 'PING\r\n' | python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(sys.stdin.buffer.read()); print(s.recv(100).decode().strip())' "$p1")"
check "protocol error closes after a reply" "-ERR Protocol error: expected '\$', got '*'" "$(python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"*1\r\n*1\r\n"); print(s.recv(200).decode().strip()); assert s.recv(10) == b""' "$p1")"
check "INFO role" "multipaxos" \
  "$(cli info replication | tr -d '\r' | sed -n 's/^synod_protocol://p')"
check "NOAUTH" "NOAUTH Authentication required." "$(redis-cli -p "$ap4" get x)"
check "AUTH -a" "OK" "$(redis-cli -p "$ap4" --no-auth-warning -a "$password" set authkey v)"
check "AUTH -a GET" "v" "$(redis-cli -p "$ap4" --no-auth-warning -a "$password" get authkey)"
check "wrong password" "AUTH failed: WRONGPASS invalid username-password pair or user is disabled." \
  "$(redis-cli -p "$ap4" --no-auth-warning -a wrong get authkey 2>&1 | head -n 1)"

stamp "redis-benchmark"
bench() { # port label
  local out err
  out="$tmp/bench-$2.csv"
  err="$tmp/bench-$2.err"
  if ! redis-benchmark -p "$1" -t set,get,mset,hset -n 20000 -P 16 -q --csv >"$out" 2>"$err"; then
    failed=$((failed + 1))
    echo "FAIL redis-benchmark on $2 exited non-zero: $(head -c 500 "$err")"
    return
  fi
  if grep -qi "error" "$out" "$err"; then
    failed=$((failed + 1))
    echo "FAIL redis-benchmark on $2 reported errors: $(grep -i error "$out" "$err" | head -n 3)"
    return
  fi
  local tests
  tests=$(grep -c '^"[A-Z]' "$out" || true)
  check "redis-benchmark $2: 4 tests" 4 "$tests"
  echo "redis-benchmark $2 (-n 20000 -P 16):"
  sed 's/^/  /' "$out"
}
leader_port=""
for port in ${ports//,/ }; do [[ $(role_of "$port") == leader ]] && leader_port=$port; done
bench "${leader_port:-$p1}" leader
bench "$follower" follower

stamp "redis-py suite (tests/redis)"
if SYNOD_RESP_PORTS=$ports SYNOD_AUTH_PORT=$ap4 SYNOD_PASSWORD=$password \
  python3 -m pytest -q -p no:cacheprovider tests/redis/test_redis.py; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL redis-py suite"
fi

stamp "leader SIGKILL under load (redis-benchmark + checked writers)"
redis-benchmark -p "$follower" -t set -n 2000000 -P 16 -q >"$tmp/bench-kill.txt" 2>&1 &
bench_pid=$!
if python3 tests/redis/kill_leader.py "$ports" --seconds-before 2 --seconds-after 4; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL leader kill lost acknowledged writes (or never recovered)"
fi
kill "$bench_pid" 2>/dev/null || true
wait "$bench_pid" 2>/dev/null || true

stamp "done"
echo "redis-tests: $passed passed, $failed failed"
((failed == 0))
