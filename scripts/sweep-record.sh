#!/usr/bin/env bash
# The recorded sweep every protocol owes (DEVELOPERS.md: ≥ 10,000 seeds × 3 replicas and
# ≥ 2,000 × 5 with all faults), for every registered protocol or the ones named, written to
# a results folder as a table plus each run's raw output. Not for CI (an hour or more on two
# cores); CI runs scripts/check-all.sh, a scaled-down version of the same.
#
#   bash scripts/sweep-record.sh                       # every registered protocol
#   bash scripts/sweep-record.sh chain craft           # just these
#   SEEDS=10000 SEEDS5=2000 OUT=results/2026-11-26-sweep bash scripts/sweep-record.sh
#   PARAMS="reject_threshold=2" TABLE=rt2-full-sweep.md OUT=results/... bash scripts/sweep-record.sh idem
#
# PARAMS: space-separated protocol parameters, each passed as `--param K=V` (raw files get
# the parameters in their names). READERS=N: `--readers N` (the first N clients only read,
# what exposes a stale lease read; raw files get `-readersN` in their names). TABLE: the
# table's file name in OUT (default README.md, for a folder another sweep already writes a
# README in).
#
# Exit status 1 if any run reports a violation (or fails to run); the table says which.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-10000}
SEEDS5=${SEEDS5:-2000}
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-sweep-all}
bin="${CARGO_TARGET_DIR:-target}/release/synod"
[ -x "$bin" ] || cargo build --release -p synod
PARAMS=${PARAMS:-}
param_args=()
suffix=""
for kv in $PARAMS; do
  param_args+=(--param "$kv")
  suffix="$suffix-${kv//=/-}"
done
if [ -n "${READERS:-}" ]; then
  param_args+=(--readers "$READERS")
  suffix="$suffix-readers$READERS"
fi
mkdir -p "$OUT/raw"
if [ $# -gt 0 ]; then protocols=("$@"); else mapfile -t protocols < <("$bin" protocols | awk '{print $1}'); fi
table="$OUT/${TABLE:-README.md}"
{
  echo "# Recorded simulation sweep ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "\`${PARAMS:+PARAMS=\"$PARAMS\" }${READERS:+READERS=$READERS }bash scripts/sweep-record.sh ${*:-}\` at commit \`$(git rev-parse --short HEAD)\`, binary \`$bin\`,"
  echo "$(nproc) cores, load average before: $(cut -d' ' -f1-3 /proc/loadavg). All faults"
  echo "(\`--faults all\`${param_args[*]:+, \`${param_args[*]}\`}); 3 replicas from seed 0, 5 replicas from seed 1,000,000. Raw output in raw/."
  echo
  echo "| protocol | replicas | seeds | ops checked | violations | wall time | schedules/s |"
  echo "|---|---|---|---|---|---|---|"
} >"$table"
status=0
run() { # protocol replicas seeds start
  local p=$1 r=$2 s=$3 start=$4 f="$OUT/raw/$1$suffix-$2x$3.txt" t0 t1 line ops viol rate
  t0=$(date +%s)
  if "$bin" check --protocol "$p" --seeds "$s" --replicas "$r" --start-seed "$start" --faults all "${param_args[@]}" >"$f" 2>&1; then :; else status=1; fi
  t1=$(date +%s)
  line=$(grep -m1 '^schedules run:' "$f" || true)
  ops=$(sed -n 's/.*operations checked: \([0-9]*\).*/\1/p' <<<"$line")
  viol=$(sed -n 's/.*violations: \([0-9]*\).*/\1/p' <<<"$line")
  rate=$(sed -n 's/.* \([0-9.]*\) schedules\/s.*/\1/p' <<<"$line")
  [ -n "$viol" ] || { viol="did not finish"; status=1; }
  [ "$viol" = "0" ] || status=1
  echo "| $p${PARAMS:+ ($PARAMS)} | $r | $s | ${ops:-?} | $viol | $((t1 - t0)) s | ${rate:-?} |" >>"$table"
  echo "$p ${r}x$s: violations $viol ($((t1 - t0)) s)"
}
for p in "${protocols[@]}"; do
  run "$p" 3 "$SEEDS" 0
  run "$p" 5 "$SEEDS5" 1000000
done
echo >>"$table"
echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg). Exit status: $status." >>"$table"
echo "table: $table"
exit $status
