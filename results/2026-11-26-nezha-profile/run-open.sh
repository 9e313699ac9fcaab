#!/bin/bash
R=/tmp/nezha-h/ol/open; mkdir -p $R
uptime > $R/uptime.txt
/tmp/nezha-h/synod-new bench --compare \
  --target nezha-proxy:synod=127.0.0.1:23451,127.0.0.1:23452 \
  --target multipaxos:synod=127.0.0.1:23161,127.0.0.1:23162,127.0.0.1:23163 \
  --target nezha-proxy-before:synod=127.0.0.1:23401,127.0.0.1:23402 \
  --workload a --records 1000 --sweep rate=1000,3000,6000 --rounds 2 --duration 5s --warmup 1s \
  --no-plots -o $R/out > $R/bench-stdout.txt 2>&1
uptime >> $R/uptime.txt
for p in 23201 23202 23203 23251 23252 23253; do curl -s -m 3 127.0.0.1:$p/status; echo; done > $R/nezha-status-after.txt
