#!/usr/bin/env bash
# Beside `synod scenario run ... --base-port B`: every 5 s print, per replica, its egress rate
# to its peers (Mbit/s, from /metrics synod_peer_bytes_sent_total on admin port B+200+i),
# whether it leads, its NIC wait counters (synod_egress_*: frames, µs waited beyond their own
# serialization, frames that waited >= 100 ms; small = up to 512 B), and the CPU share (percent of one core) of every synod process
# (replicas and the scenario runner, from /proc/PID/stat). Usage: sample.sh B NODES; stop with kill.
B=${1:?base port}; N=${2:-5}
sent() { curl -s -m 1 "http://127.0.0.1:$((B + 200 + $1))/metrics" 2>/dev/null |
  awk '/^synod_peer_bytes_sent_total/ {s += $NF} /^synod_role\{role="leader"\}/ {l = $NF} END {printf "%d %d\n", s, l}'; }
while true; do
  declare -A b0=() t0=()
  for i in $(seq 1 "$N"); do read -r s _ < <(sent "$i"); b0[$i]=$s; done
  pids=$(pgrep -f "synod[^ ]* (scenario run|server --config)")
  for p in $pids; do t0[$p]=$(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null); done
  sleep 5
  now=$(date -u +%H:%M:%S)
  for i in $(seq 1 "$N"); do
    read -r s l < <(sent "$i")
    [ -n "$s" ] && [ -n "${b0[$i]}" ] && [ "$s" -ge "${b0[$i]}" ] || continue
    echo "$now net node$i leader=$l egress_mbit=$(awk -v d=$((s - b0[$i])) 'BEGIN {printf "%.2f", d * 8 / 5 / 1e6}')"
    curl -s -m 1 "http://127.0.0.1:$((B + 200 + i))/metrics" 2>/dev/null | awk -v now="$now" -v n="$i" '
      /^synod_egress_/ { c = ($0 ~ /class="small"/) ? "small" : "large"; split($1, k, "{"); v[c "_" k[1]] = $NF }
      END { printf "%s wait node%s", now, n
            for (c in v) printf " %s=%s", c, v[c]; printf "\n" }'
  done
  for p in $pids; do
    t1=$(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null) || continue
    [ -n "$t1" ] && [ -n "${t0[$p]}" ] || continue
    cmd=$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -o 'scenario run [^ ]*\|node[0-9]*/\|config [^ ]*' | head -1)
    echo "$now cpu $p $(( (t1 - t0[$p]) * 100 / 500 ))% $cmd"
  done
  unset b0 t0
done
