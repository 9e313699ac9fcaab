#!/usr/bin/env bash
# YCSB through Jedis against synod's Redis port, and the same run against a real redis-server
# (issue 21, item 3). Builds the binding in tools/ycsb-synod (YCSB core 0.17.0 and Jedis from
# Maven Central, see its pom.xml), starts a 3-replica `synod local` cluster and a
# redis-server, then for each target: YCSB load (insert recordcount records: a hash each plus
# the "_indices" sorted set, the official redis binding's layout), a check that the data is
# there (DBSIZE, ZCARD _indices, a record read back with redis-cli through another replica),
# and YCSB workload A (50% reads, 50% updates, zipfian). Fails if any YCSB operation failed
# or a check does not hold; prints one line per phase and target.
#
# Usage: scripts/ycsb.sh [--ci]
#   --ci   the CI size: 500 records, 2,000 operations, 4 threads, synod only through the
#          leader (default: 1,000 records, 5,000 operations, 8 threads)
# Env: SYNOD_BIN (a built binary: skip the build), BASE_PORT (the `synod local` port layout,
#      default: a free one), RECORDS, OPS, THREADS (override the sizes), PROTOCOL (default
#      multipaxos), OUT (a directory: keep the YCSB outputs and a summary.csv there), KEEP=1.
# Needs java (>= 11), mvn, redis-server, redis-cli.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/common.sh
script_init ycsb

ci=0
[[ ${1:-} == --ci ]] && ci=1
if ((ci)); then
  records=${RECORDS:-500} ops=${OPS:-2000} threads=${THREADS:-4}
else
  records=${RECORDS:-1000} ops=${OPS:-5000} threads=${THREADS:-8}
fi
protocol=${PROTOCOL:-multipaxos}

for tool in java mvn redis-server redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "ycsb: $tool is missing"; exit 1; }
done

stamp "build the YCSB binding (mvn package; the first run fetches YCSB core and Jedis)"
jar=tools/ycsb-synod/target/ycsb-synod-1.0-jar-with-dependencies.jar
if [[ ! -f $jar ]] || [[ -n $(find tools/ycsb-synod/src tools/ycsb-synod/pom.xml -newer "$jar" -print -quit) ]]; then
  (cd tools/ycsb-synod && mvn -q -B package -DskipTests)
fi
[[ -f $jar ]] || { echo "ycsb: $jar was not built"; exit 1; }

bin=$(synod_binary)

tmp=$(mktemp -d -t synod-ycsb-XXXXXX)
out=${OUT:-$tmp/out}
mkdir -p "$out"
pids=()
cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ $rc -ne 0 ]]; then
    echo "ycsb: FAILED (exit $rc)"
    for f in "$tmp"/*.log "$tmp"/c3/*.log; do [[ -f $f ]] && { echo "--- $f (last 20 lines)"; tail -n 20 "$f"; }; done
  fi
  [[ ${KEEP:-0} == 1 ]] && echo "kept $tmp" || rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT

free_base() { # a base port B whose `synod local` layout (B+i, B+100+i, ..., B+300+i) and B+399 are free
  python3 - <<'EOF'
import random, socket
for _ in range(200):
    b = random.randrange(20000, 40000, 10)
    socks = []
    try:
        for port in [b + off + i for off in (0, 100, 200, 300) for i in (1, 2, 3)] + [b + 399]:
            s = socket.socket(); s.bind(("127.0.0.1", port)); socks.append(s)
        print(b)
        break
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
EOF
}
base=${BASE_PORT:-$(free_base)}
resp=($((base + 301)) $((base + 302)) $((base + 303)))
rport=$((base + 399))

stamp "start a 3-replica $protocol cluster (Redis ports ${resp[*]}) and redis-server on $rport"
"$bin" local --nodes 3 --protocol "$protocol" --base-port "$base" --data-dir "$tmp/c3" >"$tmp/local.log" 2>&1 &
pids+=($!)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis-server.log" 2>&1 &
pids+=($!)
deadline=$(($(date +%s) + 60))
until redis-cli -p "$rport" ping >/dev/null 2>&1 && [[ $(redis-cli -p "${resp[0]}" set ycsb:ready 1 2>/dev/null) == OK ]]; do
  (($(date +%s) < deadline)) || { echo "ycsb: the cluster or redis-server did not come up in 60s"; exit 1; }
  sleep 0.3
done
redis-cli -p "${resp[0]}" del ycsb:ready >/dev/null

leader=${resp[0]}
for p in "${resp[@]}"; do
  [[ $(redis-cli -p "$p" info replication | tr -d '\r' | sed -n 's/^synod_role://p') == leader ]] && leader=$p
done
other=${resp[0]}
[[ $other == "$leader" ]] && other=${resp[1]}

ycsb() { # phase(load|run) port label
  local phase=$1 port=$2 label=$3 flag=-load
  [[ $phase == run ]] && flag=-t
  java -cp "$jar" site.ycsb.Client "$flag" -db site.ycsb.db.synod.SynodRedisClient \
    -P tools/ycsb-synod/workloads/workloada -threads "$threads" \
    -p recordcount="$records" -p operationcount="$ops" -p redis.port="$port" \
    >"$out/$label-$phase.txt" 2>"$tmp/$label-$phase.err" || {
    echo "ycsb: YCSB $phase against $label failed:"
    tail -n 20 "$tmp/$label-$phase.err"
    exit 1
  }
}

summary="$out/summary.csv"
echo "target,phase,operations,runtime_ms,throughput_ops_s,ok,errors,read_p99_us,update_p99_us,insert_p99_us" >"$summary"
failed=0
record() { # phase label: one summary line from the YCSB output, and the failure count
  python3 - "$out/$2-$1.txt" "$2" "$1" "$summary" <<'EOF' || failed=$((failed + 1))
import re, sys
path, label, phase, summary = sys.argv[1:]
text = open(path).read()
def get(section, name):
    m = re.search(r"^\[%s\], %s, ([0-9.]+)$" % (re.escape(section), re.escape(name)), text, re.M)
    return float(m.group(1)) if m else None
runtime = get("OVERALL", "RunTime(ms)")
tput = get("OVERALL", "Throughput(ops/sec)")
ok = sum(int(n) for n in re.findall(r"^\[(?:READ|UPDATE|INSERT)\], Return=OK, (\d+)$", text, re.M))
bad = sum(int(n) for op, kind, n in re.findall(r"^\[(READ|UPDATE|INSERT)\], Return=(\w+), (\d+)$", text, re.M) if kind != "OK")
bad += sum(int(n) for n in re.findall(r"^\[(?:READ|UPDATE|INSERT)-FAILED\], Operations, (\d+)$", text, re.M))
p99 = lambda op: get(op, "99thPercentileLatency(us)")
fmt = lambda x: "" if x is None else "%g" % x
with open(summary, "a") as f:
    f.write(",".join([label, phase, str(ok + bad), fmt(runtime), fmt(tput), str(ok), str(bad),
                      fmt(p99("READ")), fmt(p99("UPDATE")), fmt(p99("INSERT"))]) + "\n")
print(f"{label:>14} {phase:4}: {ok + bad} ops, {bad} failed, {tput or 0:,.0f} ops/s, "
      f"p99 read {fmt(p99('READ')) or '-'} us, update {fmt(p99('UPDATE')) or '-'} us, insert {fmt(p99('INSERT')) or '-'} us")
sys.exit(1 if bad or runtime is None else 0)
EOF
}


targets=("synod:$leader" "redis-server:$rport")
((ci)) || targets=("synod:$leader" "synod-follower:$other" "redis-server:$rport")
for t in "${targets[@]}"; do
  label=${t%%:*} port=${t#*:}
  # Each target starts empty (the follower run reuses the cluster: wipe it first).
  redis-cli -p "$port" flushall >/dev/null
  stamp "load $records records through $label (port $port)"
  ycsb load "$port" "$label"
  record load "$label"
  read_port=$port
  [[ $label == synod* ]] && read_port=$([[ $port == "$other" ]] && echo "$leader" || echo "$other")
  check "$label: DBSIZE = records + the index" "$((records + 1))" "$(redis-cli -p "$read_port" dbsize)"
  check "$label: ZCARD _indices = records" "$records" "$(redis-cli -p "$read_port" zcard _indices)"
  key=$(redis-cli -p "$read_port" zrange _indices 0 0)
  check "$label: a record read back has 10 fields" "20" "$(redis-cli -p "$read_port" hgetall "$key" | wc -l)"
  stamp "workload A: $ops operations through $label"
  ycsb run "$port" "$label"
  record run "$label"
done

stamp "summary ($summary)"
column -s, -t <"$summary" 2>/dev/null || cat "$summary"
echo "ycsb: $((${#targets[@]} * 5 - failed)) passed, $failed failed ($(($(date +%s) - start))s)"
((failed == 0))
