#!/usr/bin/env bash
# Per-process CPU share (percent of one core) of the scenario runner and its replicas,
# every 5 s: prints "time pid pct% command". Run beside `synod scenario run`; stop with kill.
while true; do
  declare -A t0=()
  pids=$(pgrep -f "synod (scenario run|server --config /tmp/synod-scenario)")
  for p in $pids; do t0[$p]=$(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null); done
  sleep 5
  now=$(date -u +%H:%M:%S)
  for p in $pids; do
    t1=$(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null) || continue
    [ -n "$t1" ] && [ -n "${t0[$p]}" ] || continue
    cmd=$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -o 'scenario run [^ ]*\|synod-scenario-[a-z0-9-]*/node[0-9]*\|config [^ ]*' | head -1)
    echo "$now $p $(( (t1 - t0[$p]) * 100 / 500 ))% $cmd"
  done
  unset t0
done
