#!/usr/bin/env bash
# Find the seeds in [lo, hi] on which `synod check` (idem, reject_threshold=2, all faults)
# does not finish within a time and memory limit, by halving the range.
#   bash bisect.sh BIN REPLICAS LO HI
set -uo pipefail
bin=$1 replicas=$2
ok() { ( ulimit -v 2000000; timeout 300 "$bin" check --protocol idem --param reject_threshold=2 --faults all \
  --replicas "$replicas" --start-seed "$1" --seeds "$2" >/tmp/idem-bisect.txt 2>&1 ) && grep -q '^schedules run' /tmp/idem-bisect.txt; }
search() { # lo hi
  local lo=$1 hi=$2 n=$(($2 - $1 + 1)) mid
  if ok "$lo" "$n"; then echo "seeds $lo..$hi: $(grep -m1 '^schedules run' /tmp/idem-bisect.txt)"; return; fi
  if [ "$n" -eq 1 ]; then echo "seed $lo: does not finish (time or memory limit)"; return; fi
  mid=$((lo + n / 2 - 1))
  search "$lo" "$mid"; search $((mid + 1)) "$hi"
}
search "$3" "$4"
