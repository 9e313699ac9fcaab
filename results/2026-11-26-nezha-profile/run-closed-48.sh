#!/bin/bash
# Fig. 7 closed loop: new binary's five targets side by side with the pre-change Nezha-Proxy.
R=/tmp/nezha-h/f7b/closed; mkdir -p $R
uptime > $R/uptime.txt
/usr/bin/time -o $R/bench-cpu.txt /tmp/nezha-h/synod-new bench --compare \
  --target nezha-proxy:synod=127.0.0.1:23451,127.0.0.1:23452 \
  --target nezha:synod=127.0.0.1:23151,127.0.0.1:23152,127.0.0.1:23153 \
  --target multipaxos:synod=127.0.0.1:23161,127.0.0.1:23162,127.0.0.1:23163 \
  --target fast-paxos:synod=127.0.0.1:23171,127.0.0.1:23172,127.0.0.1:23173 \
  --target raft:synod=127.0.0.1:23181,127.0.0.1:23182,127.0.0.1:23183 \
  --target nezha-proxy-before:synod=127.0.0.1:23401,127.0.0.1:23402 \
  --workload a --records 1000 --sweep clients=48 --rounds 3 --duration 5s --warmup 1s \
  --no-plots -o $R/out > $R/bench-stdout.txt 2>&1
uptime >> $R/uptime.txt
for p in 23201 23202 23203 23251 23252 23253; do curl -s -m 3 127.0.0.1:$p/status; echo; done > $R/nezha-status-after.txt
