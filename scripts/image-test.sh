#!/usr/bin/env bash
# The container image and the compose cluster, played without a Docker engine (issue 21,
# item 4; docs/deploy.md). This machine has the Docker client but no daemon, so instead of
# `docker build` / `docker compose up` this script reads `Dockerfile` and
# `deploy/docker-compose.yml` and carries out what they say by hand:
#
#   Dockerfile, build stage   its `cargo build` command (checked to be the Dockerfile's own),
#                             run on this Debian 12 host (the stage's rust:1-bookworm is Debian
#                             12 too, same glibc), then the stage's `strip`;
#   FROM debian:bookworm-slim `debootstrap --variant=minbase bookworm` (cached as a tarball);
#   each RUN of that stage    run as written in a chroot of that root (apt-get, useradd ...);
#   COPY --from=build         the stripped binary to the same path in the root;
#   USER/WORKDIR/ENV/ENTRYPOINT  how each replica is started: as that user, in that directory,
#                             with that environment, `ENTRYPOINT + command`;
#   compose services          one replica per service, each in its own network namespace with
#                             the address the compose network gives it (172.28.5.11-13, the
#                             ones deploy/cluster.toml lists) on a bridge, in a private mount
#                             namespace where the compose `configs` (deploy/cluster.toml at
#                             /etc/synod/node.toml), `secrets` (at /run/secrets/<name>, bind-
#                             mounted as they are, 0644) and the service's volume (on
#                             /var/lib/synod, owned by the image's user) are mounted;
#   compose healthcheck       run inside each container (the image's curl) until it passes.
#
# Then, with redis-cli from a namespace on the same bridge (the published ports of the compose
# file are not emulated): a write through one replica is read through the others, one leader
# and two followers, and a replica killed with SIGKILL and started again from its volume serves
# what was written meanwhile. What it cannot show: that `docker build` itself succeeds (the
# base images, Docker's layer cache and .dockerignore are not exercised), and Docker's own
# networking/publishing.
#
# Needs root (debootstrap, chroot, ip netns, mount), network access to deb.debian.org (once:
# the base root is cached in $IMAGE_TEST_CACHE), redis-cli, python3 with PyYAML.
# Env: SYNOD_BIN (a release binary built by the Dockerfile's command; default: build it),
#      IMAGE_TEST_CACHE (default /var/tmp/synod-image-test), KEEP=1 keeps the temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
. scripts/lib/common.sh
script_init image

[[ $(id -u) == 0 ]] || { echo "image-test: needs root (debootstrap, chroot, network namespaces)"; exit 1; }
for c in debootstrap redis-cli python3 ip unshare; do
  command -v "$c" >/dev/null || { echo "image-test: $c is missing (apt-get install debootstrap redis-tools iproute2)"; exit 1; }
done
python3 -c 'import yaml' 2>/dev/null || { echo "image-test: python3 PyYAML is missing (pip install pyyaml)"; exit 1; }

tmp=$(mktemp -d -t synod-image-XXXXXX)
chmod 755 "$tmp"
tag="i$$"
br="${tag}br"
pids=()
mounted=()
cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do [[ $pid != 0 ]] && kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do [[ $pid != 0 ]] && wait "$pid" 2>/dev/null || true; done
  for ((k = ${#mounted[@]} - 1; k >= 0; k--)); do umount -l "${mounted[$k]}" 2>/dev/null || true; done
  for n in "${tag}n0" "${tag}n1" "${tag}n2" "${tag}cl"; do ip netns del "$n" 2>/dev/null || true; done
  ip link del "$br" 2>/dev/null || true
  if [[ $rc -ne 0 ]]; then
    echo "image-test: FAILED (exit $rc)"
    for f in "$tmp"/*.log; do [[ -f $f ]] && { echo "--- $f (last 20 lines)"; tail -n 20 "$f"; }; done
  fi
  [[ ${KEEP:-0} == 1 ]] && echo "kept $tmp" || rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT

# --- read the two files -------------------------------------------------------------------
# The Dockerfile's stages and the compose services, as shell assignments.
python3 - Dockerfile deploy/docker-compose.yml >"$tmp/spec.sh" <<'EOF'
import json, re, shlex, sys, yaml
text = open(sys.argv[1]).read().replace("\\\n", " ")
stages, cur = [], None
for raw in text.splitlines():
    line = raw.strip()
    if not line or line.startswith("#"):
        continue
    word, _, rest = line.partition(" ")
    word, rest = word.upper(), rest.strip()
    if word == "FROM":
        cur = {"from": rest.split()[0], "run": [], "copy": [], "env": {}, "user": "root", "workdir": "/"}
        stages.append(cur)
    elif word == "RUN":
        cur["run"].append(re.sub(r"\s+", " ", rest))
    elif word == "COPY":
        cur["copy"].append(rest.split())
    elif word == "ENV":
        k, _, v = rest.partition("=")
        cur["env"][k.strip()] = v.strip()
    elif word == "USER":
        cur["user"] = rest
    elif word == "WORKDIR":
        cur["workdir"] = rest
    elif word == "ENTRYPOINT":
        cur["entrypoint"] = json.loads(rest)
    elif word == "VOLUME":
        cur["volumes"] = json.loads(rest)
if len(stages) != 2:
    sys.exit(f"image-test: expected a build stage and a runtime stage, found {len(stages)}")
build, run = stages
out = []
def sh(name, value):
    out.append(f"{name}={shlex.quote(value)}")
def arr(name, values):
    out.append(f"{name}=(" + " ".join(shlex.quote(v) for v in values) + ")")
sh("build_from", build["from"]); arr("build_run", build["run"])
sh("run_from", run["from"]); arr("run_run", run["run"])
copies = [c for c in run["copy"] if c[0].startswith("--from=")]
if len(copies) != 1:
    sys.exit("image-test: expected one COPY --from=build in the runtime stage")
sh("copy_src", copies[0][1]); sh("copy_dst", copies[0][2])
sh("user", run["user"]); sh("workdir", run["workdir"])
arr("env", [f"{k}={v}" for k, v in run["env"].items()])
arr("entrypoint", run["entrypoint"]); arr("volumes", run.get("volumes", []))

compose = yaml.safe_load(open(sys.argv[2]))
names = sorted(compose["services"])
arr("services", names)
configs = {k: v["file"] for k, v in compose.get("configs", {}).items()}
secrets = {k: v["file"] for k, v in compose.get("secrets", {}).items()}
for i, name in enumerate(names):
    s = compose["services"][name]
    net = next(iter(s["networks"].values()))
    sh(f"svc{i}_ip", net["ipv4_address"])
    arr(f"svc{i}_command", s["command"])
    arr(f"svc{i}_health", s["healthcheck"]["test"][1:])
    vols = [v.split(":") for v in s["volumes"]]
    sh(f"svc{i}_volume", vols[0][0]); sh(f"svc{i}_volume_at", vols[0][1])
    arr(f"svc{i}_configs", [f"{configs[c['source']]}:{c['target']}" for c in s["configs"]])
    arr(f"svc{i}_secrets", [f"{secrets[x]}:/run/secrets/{x}" for x in s["secrets"]])
subnet = compose["networks"]["synod"]["ipam"]["config"][0]["subnet"]
sh("subnet_bits", subnet.split("/")[1])
print("\n".join(out))
EOF
# shellcheck disable=SC1091
source "$tmp/spec.sh"
stamp "Dockerfile: build FROM $build_from, runtime FROM $run_from; compose services: ${services[*]}"
[[ $run_from == debian:bookworm-slim && $build_from == rust:1-bookworm ]] ||
  { echo "image-test: it emulates rust:1-bookworm and debian:bookworm-slim; the Dockerfile now says $build_from / $run_from"; exit 1; }

# --- build stage --------------------------------------------------------------------------
build_cmd="cargo build --release --locked -p synod"
[[ ${build_run[0]} == "$build_cmd "* ]] ||
  { echo "image-test: the build stage no longer runs '$build_cmd': ${build_run[0]}"; exit 1; }
[[ -n ${SYNOD_BIN:-} ]] && stamp "build stage: using $SYNOD_BIN (built by: $build_cmd)"
read -r -a build_argv <<<"$build_cmd"
bin=$(synod_binary "${build_argv[@]}")
mkdir -p "$tmp/stage"
cp "$bin" "$tmp/stage/synod"
strip "$tmp/stage/synod"
stamp "binary stripped: $(du -h "$tmp/stage/synod" | cut -f1)"

# --- runtime stage ------------------------------------------------------------------------
cache=${IMAGE_TEST_CACHE:-/var/tmp/synod-image-test}
base="$cache/bookworm-minbase.tar"
if [[ ! -s $base ]]; then
  stamp "FROM $run_from: debootstrap --variant=minbase bookworm (once; cached in $base)"
  mkdir -p "$cache"
  rm -rf "$cache/root"
  ok=""
  for attempt in 1 2 3; do
    if debootstrap --variant=minbase bookworm "$cache/root" http://deb.debian.org/debian >"$tmp/debootstrap.log" 2>&1; then
      ok=yes
      break
    fi
    echo "debootstrap attempt $attempt failed: $(tail -n 1 "$tmp/debootstrap.log")"
    rm -rf "$cache/root"
    sleep 5
  done
  [[ -n $ok ]] || { echo "image-test: debootstrap failed (no network to deb.debian.org?)"; exit 1; }
  tar -C "$cache/root" -cf "$base.part" . && mv "$base.part" "$base"
  rm -rf "$cache/root"
fi
root="$tmp/root"
mkdir -p "$root"
tar -C "$root" -xf "$base"
cp /etc/resolv.conf "$root/etc/resolv.conf"
for m in proc dev; do
  mount --bind "/$m" "$root/$m"
  mounted+=("$root/$m")
done
for cmd in "${run_run[@]}"; do
  stamp "RUN $cmd"
  ok=""
  for attempt in 1 2 3; do
    if chroot "$root" /bin/sh -ec "$cmd" >>"$tmp/run.log" 2>&1; then ok=yes; break; fi
    echo "RUN attempt $attempt failed: $(tail -n 1 "$tmp/run.log")"
    sleep 5
  done
  [[ -n $ok ]] || { echo "image-test: a RUN of the runtime stage failed"; exit 1; }
done
for ((k = ${#mounted[@]} - 1; k >= 0; k--)); do umount "${mounted[$k]}"; done
mounted=()
install -D -m 0755 "$tmp/stage/synod" "$root$copy_dst"
uid=$(chroot "$root" id -u "$user")
gid=$(chroot "$root" id -g "$user")
stamp "image root ready: $(du -sh "$root" | cut -f1), user $user ($uid:$gid), workdir $workdir, env ${env[*]}"
check_ldd=$(chroot "$root" "$copy_dst" --version 2>&1) ||
  { echo "image-test: the binary does not run in the image: $check_ldd"; exit 1; }
stamp "in the image: $check_ldd"

# --- compose: network and containers ------------------------------------------------------
ip link add "$br" type bridge
ip link set "$br" up
netns_on_bridge() { # name index address
  ip netns add "$1"
  ip link add "${tag}v$2" type veth peer name "${tag}p$2"
  ip link set "${tag}v$2" master "$br" up
  ip link set "${tag}p$2" netns "$1"
  ip -n "$1" link set lo up
  ip -n "$1" addr add "$3/$subnet_bits" dev "${tag}p$2"
  ip -n "$1" link set "${tag}p$2" up
}
# The published ports are not emulated: clients run in a namespace of their own on the bridge.
client_ip="${svc0_ip%.*}.200"
netns_on_bridge "${tag}cl" 9 "$client_ip"

# Compose's secret and config files, generated as docs/deploy.md says (mode 0644).
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/cluster.secret"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/admin.token"
chmod 0644 "$tmp/cluster.secret" "$tmp/admin.token"
host_file() { # a path of the compose file (relative to deploy/) -> the file used here
  case $1 in
    ./cluster.secret) echo "$tmp/cluster.secret" ;;
    ./admin.token) echo "$tmp/admin.token" ;;
    *) echo "$repo/deploy/${1#./}" ;;
  esac
}

start_container() { # index
  local i=$1 ip cmd health vol volat mounts="" pair src dst
  local -n cmdref="svc${i}_command" cfgref="svc${i}_configs" secref="svc${i}_secrets"
  ip="svc${i}_ip"
  ip=${!ip}
  vol="svc${i}_volume"
  vol="$tmp/volumes/${!vol}"
  volat="svc${i}_volume_at"
  volat=${!volat}
  if [[ ! -d $vol ]]; then
    mkdir -p "$vol"
    chown "$uid:$gid" "$vol" # a new named volume takes the image directory's owner
  fi
  for pair in "${cfgref[@]}" "${secref[@]}"; do
    src=$(host_file "${pair%%:*}")
    dst=${pair#*:}
    mounts+="mkdir -p \"$root$(dirname "$dst")\"; touch \"$root$dst\"; mount --bind \"$src\" \"$root$dst\"; "
  done
  mounts+="mount --bind \"$vol\" \"$root$volat\"; mount -t proc proc \"$root/proc\"; mount --bind /dev \"$root/dev\"; "
  # In its own mount namespace (mounts private to it) and network namespace: chroot into the
  # image root as the image's user, in its WORKDIR, with only its ENV, run ENTRYPOINT + command.
  local run
  run="cd $workdir && exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=$workdir"
  for e in "${env[@]}"; do run+=" $(printf '%q' "$e")"; done
  for a in "${entrypoint[@]}" "${cmdref[@]}"; do run+=" $(printf '%q' "$a")"; done
  ip netns exec "${tag}n$i" unshare --mount --propagation private /bin/sh -c \
    "$mounts exec chroot --userspec=$uid:$gid \"$root\" /bin/sh -c '$run'" >>"$tmp/node$((i + 1)).log" 2>&1 &
  pids[$i]=$!
}
mkdir -p "$tmp/volumes"
for i in 0 1 2; do
  ipvar="svc${i}_ip"
  netns_on_bridge "${tag}n$i" "$i" "${!ipvar}"
  start_container "$i"
done
stamp "containers ${services[*]} started at $svc0_ip $svc1_ip $svc2_ip"

healthy() { # index: the service's compose healthcheck, run inside its container
  local -n h="svc${1}_health"
  ip netns exec "${tag}n$1" chroot --userspec="$uid:$gid" "$root" "${h[@]}" >/dev/null 2>&1
}
wait_healthy() {
  local deadline=$(($(date +%s) + 60))
  while (($(date +%s) < deadline)); do
    healthy 0 && healthy 1 && healthy 2 && return 0
    sleep 0.3
  done
  return 1
}
cli() { # index args...: redis-cli from the client namespace to service i's Redis port (6379)
  local ipvar="svc${1}_ip"
  shift
  ip netns exec "${tag}cl" redis-cli -h "${!ipvar}" -p 6379 "$@" 2>&1
}
role() { cli "$1" info replication | tr -d '\r' | sed -n 's/^synod_role://p'; }
roles_ok() { local r; r=$(wait_roles role) && leader_follower_counts "$r" || echo "$r"; }

check "every container passes its compose healthcheck" "yes" "$(wait_healthy && echo yes || echo no)"
check "one leader, two followers" "1 2" "$(roles_ok)"
# `ip netns exec`, `unshare`, `sh -c 'exec ...'`, `chroot` and `env` all exec: each $! is the replica.
check "each replica runs as the image's user ($user, uid $uid)" "$uid $uid $uid" \
  "$(for p in "${pids[@]}"; do ps -o uid= -p "$p"; done | xargs)"
check "each replica is the image's binary ($copy_dst)" "synod synod synod" \
  "$(for p in "${pids[@]}"; do ps -o comm= -p "$p"; done | xargs)"
check "SET through ${services[0]}" "OK" "$(cli 0 set greeting "hello from the image")"
check "GET through ${services[2]}" "hello from the image" "$(cli 2 get greeting)"
check "INCR through ${services[1]}" "1" "$(cli 1 incr counter)"
check "the WAL is on the volume" "yes" "$(find "$tmp/volumes/${svc1_volume}" -type f | grep -q . && echo yes || echo no)"

stamp "kill -9 ${services[1]}, write, start it again from its volume"
kill -KILL "${pids[1]}" 2>/dev/null || true
wait "${pids[1]}" 2>/dev/null || true
pids[1]=0
out=""
deadline=$(($(date +%s) + 30))
while (($(date +%s) < deadline)); do
  out=$(cli 0 set while-down yes)
  [[ $out == OK ]] && break
  sleep 0.3
done
check "SET while ${services[1]} is down" "OK" "$out"
start_container 1
check "${services[1]} healthy again" "yes" "$(wait_healthy && echo yes || echo no)"
check "one leader, two followers again" "1 2" "$(roles_ok)"
check "${services[1]} serves the write made while it was down" "yes" "$(cli 1 get while-down)"
check "${services[1]} serves data from before its crash" "1" "$(cli 1 get counter)"

echo "image ($run_from emulated): $passed passed, $failed failed ($(($(date +%s) - start))s)"
((failed == 0))
