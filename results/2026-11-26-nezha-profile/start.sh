#!/bin/bash
# usage: start.sh BIN DIR  -- nezha (2 proxies) at 23000, multipaxos 23010, fast-paxos 23020, raft 23030
BIN=$1; D=$2; mkdir -p $D
$BIN local --protocol nezha --base-port 23000 --in-memory --proxies 2 --data-dir $D/nezha --log-level warn > $D/nezha.log 2>&1 &
echo $! > $D/pids
$BIN local --protocol multipaxos --base-port 23010 --in-memory --data-dir $D/mp --log-level warn > $D/mp.log 2>&1 &
echo $! >> $D/pids
$BIN local --protocol fast-paxos --base-port 23020 --in-memory --data-dir $D/fp --log-level warn > $D/fp.log 2>&1 &
echo $! >> $D/pids
$BIN local --protocol raft --base-port 23030 --in-memory --data-dir $D/raft --log-level warn > $D/raft.log 2>&1 &
echo $! >> $D/pids
sleep 4
for c in nezha mp fp raft; do $BIN fault --cluster $D/$c/cluster.toml link --delay-ms 0.1 --jitter-ms 0.05 >> $D/fault.log 2>&1; done
cat $D/fault.log | tail -4
