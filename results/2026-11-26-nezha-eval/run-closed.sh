#!/bin/bash
# Fig. 7 closed loop + Fig. 10 proxy CPU (proxies 14767 14768)
cd /tmp/nezha-eval
R=/tmp/nezha-eval/closed; mkdir -p $R
cpu() { for p in 14767 14768; do awk -v p=$p '{print p, $14+$15}' /proc/$p/stat; done; }
uptime > $R/uptime.txt; cpu > $R/proxy-cpu-before.txt; getconf CLK_TCK >> $R/proxy-cpu-before.txt
/usr/bin/time -o $R/bench-cpu.txt /tmp/synod-nezha-eval bench --compare \
  --target nezha-proxy:synod=127.0.0.1:23401,127.0.0.1:23402 \
  --target nezha:synod=127.0.0.1:23101,127.0.0.1:23102,127.0.0.1:23103 \
  --target multipaxos:synod=127.0.0.1:23111,127.0.0.1:23112,127.0.0.1:23113 \
  --target fast-paxos:synod=127.0.0.1:23121,127.0.0.1:23122,127.0.0.1:23123 \
  --target raft:synod=127.0.0.1:23131,127.0.0.1:23132,127.0.0.1:23133 \
  --workload a --records 1000 --sweep clients=4,16,48 --rounds 2 --duration 5s --warmup 1s \
  --no-plots -o $R/out > $R/bench-stdout.txt 2>&1
cpu > $R/proxy-cpu-after.txt; uptime >> $R/uptime.txt
