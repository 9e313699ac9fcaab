# Shared helpers of the test scripts (redis-tests.sh, multihost-test.sh, image-test.sh,
# ycsb.sh). Source it after `cd` to the repository root:
#   . scripts/lib/common.sh; script_init NAME
# NAME prefixes the `stamp` lines.

# script_init NAME: start the clock for `stamp` and zero the check counters.
script_init() {
  script_name=$1
  start=$(date +%s)
  passed=0
  failed=0
}

# stamp MESSAGE...: a progress line with the seconds since script_init.
stamp() { echo "== $script_name [$(($(date +%s) - start))s] $*"; }

# check NAME EXPECTED ACTUAL: count a pass or a failure; print "ok NAME" unless CHECK_QUIET=1,
# and on a failure both values, quoted so whitespace differences show.
check() {
  if [[ $2 == "$3" ]]; then
    passed=$((passed + 1))
    [[ ${CHECK_QUIET:-0} == 1 ]] || echo "ok   $1"
  else
    failed=$((failed + 1))
    printf 'FAIL %s\n  expected: %q\n  actual:   %q\n' "$1" "$2" "$3"
  fi
}

# synod_binary [COMMAND...]: the synod binary to test, as an absolute path: $SYNOD_BIN when
# set, else COMMAND is run to build it (default `cargo build --release -p synod`) and
# ${CARGO_TARGET_DIR:-target}/release/synod is used. Progress goes to stderr.
synod_binary() {
  if [[ -n ${SYNOD_BIN:-} ]]; then
    realpath "$SYNOD_BIN"
    return
  fi
  local cmd=("$@")
  ((${#cmd[@]})) || cmd=(cargo build --release -p synod)
  stamp "build: ${cmd[*]}" >&2
  "${cmd[@]}" >&2
  realpath "${CARGO_TARGET_DIR:-target}/release/synod"
}

# wait_roles ROLE_FN [SECONDS]: until replicas 0, 1 and 2 (as `ROLE_FN i` reports them) are
# one leader and two followers; prints their roles and returns 0, or prints them and returns
# 1 after SECONDS (default 60).
wait_roles() {
  local role_fn=$1 deadline=$(($(date +%s) + ${2:-60})) roles
  while (($(date +%s) < deadline)); do
    roles="$($role_fn 0) $($role_fn 1) $($role_fn 2)"
    if [[ $(grep -o leader <<<"$roles" | wc -l) == 1 && $(grep -o follower <<<"$roles" | wc -l) == 2 ]]; then
      echo "$roles"
      return 0
    fi
    sleep 0.3
  done
  echo "$roles"
  return 1
}

# leader_follower_counts ROLES: "L F", how many leaders and followers a wait_roles answer names.
leader_follower_counts() { echo "$(grep -o leader <<<"$1" | wc -l) $(grep -o follower <<<"$1" | wc -l)"; }
