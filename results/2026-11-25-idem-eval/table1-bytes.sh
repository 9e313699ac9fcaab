#!/usr/bin/env bash
# IDEM Table 1: replica-to-replica network bytes per successful request, idem (RT 8) vs
# idem-nopr, at 0.5x / 1x / 4x the saturation point S = 8 clients (4 / 8 / 32 clients).
# Bytes: the sum over replicas of synod_peer_bytes_sent_total (/metrics) across one
# measured run of N operations (records loaded before, outside the count).
# Usage: bash table1-bytes.sh BIN OUTDIR [BASE_PORT] [ROUNDS] [OPS]
set -euo pipefail
BIN=${1:?synod binary}; OUT=${2:?out dir}; BASE=${3:-24000}; ROUNDS=${4:-2}; OPS=${5:-20000}
mkdir -p "$OUT"
CSV="$OUT/bytes.csv"
echo "round,protocol,clients,ops_measured,ok,rejected,ambivalent,peer_bytes,bytes_per_ok,elapsed_s,throughput_ops_s,p50_ms" > "$CSV"
bytes() {
  local total=0
  for i in 1 2 3; do
    v=$(curl -s "http://127.0.0.1:$((BASE + 200 + i))/metrics" | awk '/^synod_peer_bytes_sent_total/ {s += $NF} END {printf "%d", s}')
    total=$((total + v))
  done
  echo "$total"
}
targets="synod=127.0.0.1:$((BASE + 101)),127.0.0.1:$((BASE + 102)),127.0.0.1:$((BASE + 103))"
uptime > "$OUT/uptime-before.txt"
for round in $(seq 1 "$ROUNDS"); do
  for clients in 4 8 32; do
    for proto in idem idem-nopr; do
      dir=$(mktemp -d /tmp/idem-t1-XXXX)
      "$BIN" local --protocol "$proto" --base-port "$BASE" --data-dir "$dir" --param reject_threshold=8 --log-level warn > "$dir/local.out" 2>&1 &
      lp=$!
      for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$((BASE + 201))/health" >/dev/null && curl -sf "http://127.0.0.1:$((BASE + 203))/health" >/dev/null && break; sleep 0.2; done
      sleep 2
      "$BIN" bench --target "$targets" --records 10000 --value-size 100 --clients 4 --ops 500 --warmup 0s --no-plots -o "$dir/load" > /dev/null 2>&1
      b0=$(bytes)
      "$BIN" bench --target "$targets" --skip-load --records 10000 --value-size 100 --clients "$clients" --reject-backoff 50ms-100ms \
        --ops "$OPS" --warmup 0s --op-timeout 5s --no-plots -o "$dir/run" > "$dir/bench.out" 2>&1
      b1=$(bytes)
      runs=$(find "$dir/run" -name runs.csv | head -1)
      # The "all" row: ok, rejected, ambivalent, elapsed, p50.
      line=$(awk -F, 'NR==1 {for (i=1;i<=NF;i++) h[$i]=i; next} $h["class"]=="all" {printf "%d,%d,%d,%s,%s", $h["ok"], $h["rejected"], $h["ambivalent"], $h["elapsed_s"], $h["p50_ms"]}' "$runs")
      IFS=, read -r ok rj am el p50 <<< "$line"
      pb=$((b1 - b0))
      echo "$round,$proto,$clients,$OPS,$ok,$rj,$am,$pb,$(echo "scale=1; $pb / $ok" | bc),$el,$(echo "scale=1; $ok / $el" | bc),$p50" | tee -a "$CSV"
      kill "$lp"; wait "$lp" 2>/dev/null || true
      rm -rf "$dir"
      sleep 1
    done
  done
done
uptime > "$OUT/uptime-after.txt"
