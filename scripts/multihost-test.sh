#!/usr/bin/env bash
# Three replicas as three separate hosts, as far as one machine allows (issue 21, item 4;
# docs/deploy.md): each replica runs in its own network namespace with its own IP address on
# a veth link to a bridge (10.251.77.1-3/24), so nothing it does can rely on 127.0.0.1. The
# replicas share one config file (deploy/cluster.toml's layout: one file, `--id N` on the
# command line), with a cluster secret and an admin token from files. Then, with redis-cli
# run inside the namespaces:
#   - a write through replica 1 is read back through replica 3 (and the other way round),
#   - INFO replication shows one leader and two followers,
#   - a replica killed and restarted from its WAL serves the data again,
#   - a peer without the cluster secret is refused (its log says so).
#
# Needs root (ip netns, veth) and redis-cli. Where network namespaces cannot be created
# (a container without CAP_NET_ADMIN), it falls back to distinct loopback addresses
# (127.0.77.1-3) and says so. Ports: 25100-25399 inside each namespace.
# Env: SYNOD_BIN (a built binary; default: build it), KEEP=1 keeps the temp dir,
# MULTIHOST_LOOPBACK=1 uses the loopback addresses even where namespaces work.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/common.sh
script_init multihost

command -v redis-cli >/dev/null || { echo "multihost: redis-cli is missing (apt-get install redis-tools)"; exit 1; }
bin=$(synod_binary)

tmp=$(mktemp -d -t synod-multihost-XXXXXX)
chmod 755 "$tmp"
tag="s$$" # namespace and link names unique to this run
ns=("${tag}n1" "${tag}n2" "${tag}n3")
br="${tag}br"
mode=netns
pids=(0 0 0)

cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do [[ $pid != 0 ]] && kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do [[ $pid != 0 ]] && wait "$pid" 2>/dev/null || true; done
  if [[ $mode == netns ]]; then
    for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
    ip link del "$br" 2>/dev/null || true
  fi
  if [[ $rc -ne 0 ]]; then
    echo "multihost: FAILED (exit $rc)"
    for f in "$tmp"/*.log; do [[ -f $f ]] && { echo "--- $f (last 20 lines)"; tail -n 20 "$f"; }; done
  fi
  [[ ${KEEP:-0} == 1 ]] && echo "kept $tmp" || rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT

# The network: a bridge in the root namespace, one veth pair per replica, the replica's end
# moved into its namespace with its address. No address on the bridge itself: the replicas
# reach each other, and the root namespace reaches none of them.
ips=()
if [[ ${MULTIHOST_LOOPBACK:-0} != 1 ]] && ip netns add "${ns[0]}" 2>/dev/null; then
  ip link add "$br" type bridge
  ip link set "$br" up
  for i in 0 1 2; do
    n=${ns[$i]}
    [[ $i == 0 ]] || ip netns add "$n"
    ip link add "${tag}v$i" type veth peer name "${tag}p$i"
    ip link set "${tag}v$i" master "$br" up
    ip link set "${tag}p$i" netns "$n"
    ip -n "$n" link set lo up
    ip -n "$n" addr add "10.251.77.$((i + 1))/24" dev "${tag}p$i"
    ip -n "$n" link set "${tag}p$i" up
    ips+=("10.251.77.$((i + 1))")
  done
  in_ns() { echo ip netns exec "${ns[$1]}"; } # the prefix that runs a command in namespace i
  stamp "network namespaces ${ns[*]} on bridge $br: ${ips[*]}"
else
  mode=loopback
  ips=(127.0.77.1 127.0.77.2 127.0.77.3)
  in_ns() { :; }
  stamp "cannot create network namespaces here (not root, or no CAP_NET_ADMIN): distinct loopback addresses ${ips[*]} instead"
fi

# One config for all three, as in deploy/cluster.toml.
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/cluster.secret"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/admin.token"
chmod 600 "$tmp/cluster.secret" "$tmp/admin.token"
{
  echo 'cluster = "multihost"'
  echo 'protocol = "multipaxos"'
  echo 'id = 1'
  echo "cluster_secret_file = \"$tmp/cluster.secret\""
  echo '[admin]'
  echo "token_file = \"$tmp/admin.token\""
  echo 'faults = false'
  for i in 0 1 2; do
    ip=${ips[$i]}
    echo '[[members]]'
    echo "id = $((i + 1))"
    echo "peer_addr = \"$ip:25100\""
    echo "client_addr = \"$ip:25200\""
    echo "admin_addr = \"$ip:25300\""
    echo "resp_addr = \"$ip:25379\""
  done
} >"$tmp/cluster.toml"

start_replica() { # index
  local i=$1
  # Not through a shell function: $! must be the replica itself, for kill.
  $(in_ns "$i") "$bin" server --config "$tmp/cluster.toml" --id $((i + 1)) --data-dir "$tmp/data$((i + 1))" \
    >>"$tmp/node$((i + 1)).log" 2>&1 &
  pids[$i]=$!
}
for i in 0 1 2; do start_replica "$i"; done

cli() { # index args...: redis-cli from replica i's namespace to replica i's address
  local i=$1
  shift
  $(in_ns "$i") redis-cli -h "${ips[$i]}" -p 25379 "$@" 2>&1
}
status() { # index field: a field of replica i's GET /status
  $(in_ns "$1") python3 -c '
import json, sys, urllib.request
print(json.load(urllib.request.urlopen(sys.argv[1], timeout=2))[sys.argv[2]])' "http://${ips[$1]}:25300/status" "$2" 2>/dev/null
}
role() { cli "$1" info replication | tr -d '\r' | sed -n 's/^synod_role://p'; }

roles=$(wait_roles role) || echo "no leader with two followers within 60s: $roles"
stamp "cluster up: roles $roles"
check "one leader, two followers" "1 2" "$(leader_follower_counts "$roles")"
check "SET through replica 1" "OK" "$(cli 0 set greeting "hello from 1")"
check "GET through replica 3" "hello from 1" "$(cli 2 get greeting)"
check "SET through replica 3" "OK" "$(cli 2 set answer 42)"
check "INCR through replica 2" "43" "$(cli 1 incr answer)"
check "GET through replica 1" "43" "$(cli 0 get answer)"
check "RPUSH through replica 2" "3" "$(cli 1 rpush l a b c)"
check "LRANGE through replica 3" $'a\nb\nc' "$(cli 2 lrange l 0 -1)"
if [[ $mode == netns ]]; then
  # Replica 1's namespace reaches replica 3's address over the bridge, not over loopback.
  check "cross-namespace client (ns 1 -> replica 3)" "43" \
    "$($(in_ns 0) redis-cli -h "${ips[2]}" -p 25379 get answer 2>&1)"
  check "root namespace cannot reach a replica" "unreachable" \
    "$(timeout 3 redis-cli -h "${ips[0]}" -p 25379 ping >/dev/null 2>&1 && echo reachable || echo unreachable)"
fi

# Restart from the WAL: kill replica 2 (whatever its role), write, bring it back.
stamp "kill replica 2, write, restart it"
kill -KILL "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
pids[1]=0
check "replica 2 is gone" "down" "$(cli 1 ping | grep -q PONG && echo up || echo down)"
deadline=$(($(date +%s) + 30))
out=""
while (($(date +%s) < deadline)); do
  out=$(cli 0 set after-kill yes)
  [[ $out == OK ]] && break
  sleep 0.3
done
check "SET while replica 2 is down" "OK" "$out"
start_replica 1
roles=$(wait_roles role) || true
check "replica 2 back (roles $roles)" "1 2" "$(leader_follower_counts "$roles")"
# Reads on a follower are forwarded to the leader: whether replica 2 itself has the writes
# shows in its execution point, which must reach the leader's.
leader_i=0
for i in 0 1 2; do [[ $(role "$i") == leader ]] && leader_i=$i; done
target=$(status "$leader_i" execute_index)
caught=""
deadline=$(($(date +%s) + 20))
while (($(date +%s) < deadline)); do
  at=$(status 1 execute_index)
  [[ -n $at ]] && ((at >= target)) && { caught=yes; break; }
  sleep 0.3
done
check "replica 2 executed everything the leader had ($target) after its restart (at ${at:-?})" "yes" "$caught"
check "replica 2 serves data from before its crash" "43" "$(cli 1 get answer)"
check "replica 2 serves the write made while it was down" "yes" "$(cli 1 get after-kill)"

# A fourth process with a wrong secret, claiming to be replica 2 from replica 2's namespace,
# must be refused by the others: use a copy of the config with another secret and other ports.
stamp "an impostor without the cluster secret"
sed -e "s|$tmp/cluster.secret|$tmp/wrong.secret|" -e 's/:25\([0-9]\)00"/:25\170"/' \
  -e 's/:25379"/:25479"/' "$tmp/cluster.toml" >"$tmp/impostor.toml"
# Its peers are the real replicas: point the other members back at the real peer ports.
python3 - "$tmp/impostor.toml" <<'EOF'
import re, sys
path = sys.argv[1]
text = open(path).read()
blocks = text.split("[[members]]")
out = [blocks[0]]
for b in blocks[1:]:
    if re.search(r"^id = 2$", b, re.M):
        out.append(b)
    else:
        out.append(re.sub(r':25170"', ':25100"', b))
open(path, "w").write("[[members]]".join(out))
EOF
echo "not-the-cluster-secret-at-all-0000" >"$tmp/wrong.secret"
$(in_ns 1) "$bin" server --config "$tmp/impostor.toml" --id 2 --data-dir "$tmp/impostor" >"$tmp/impostor.log" 2>&1 &
imp=$!
refused=""
deadline=$(($(date +%s) + 15))
while (($(date +%s) < deadline)); do
  if grep -q "failed authentication" "$tmp"/node1.log "$tmp"/node3.log 2>/dev/null; then
    refused=yes
    break
  fi
  sleep 0.3
done
kill -TERM "$imp" 2>/dev/null || true
wait "$imp" 2>/dev/null || true
check "the real replicas refuse a peer with the wrong secret" "yes" "$refused"
check "the cluster still answers" "43" "$(cli 2 get answer)"

echo "multihost ($mode): $passed passed, $failed failed ($(($(date +%s) - start))s)"
((failed == 0))
