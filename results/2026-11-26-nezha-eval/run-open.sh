#!/bin/bash
cd /tmp/nezha-eval
R=/tmp/nezha-eval/open; mkdir -p $R
uptime > $R/uptime.txt
/tmp/synod-nezha-eval bench --compare \
  --target nezha-proxy:synod=127.0.0.1:23401,127.0.0.1:23402 \
  --target nezha:synod=127.0.0.1:23101,127.0.0.1:23102,127.0.0.1:23103 \
  --target multipaxos:synod=127.0.0.1:23111,127.0.0.1:23112,127.0.0.1:23113 \
  --target fast-paxos:synod=127.0.0.1:23121,127.0.0.1:23122,127.0.0.1:23123 \
  --target raft:synod=127.0.0.1:23131,127.0.0.1:23132,127.0.0.1:23133 \
  --workload a --records 1000 --skip-load --sweep rate=1000,3000,6000 --rounds 1 --duration 5s --warmup 1s \
  --no-plots -o $R/out > $R/bench-stdout.txt 2>&1
uptime >> $R/uptime.txt
R=/tmp/nezha-eval/fig14; mkdir -p $R
redis-server --port 23600 --save '' --appendonly no --daemonize yes --pidfile /tmp/nezha-eval/redis.pid > /dev/null
sleep 1
uptime > $R/uptime.txt
/tmp/synod-nezha-eval bench --compare \
  --target redis:redis=127.0.0.1:23600 \
  --target nezha-proxy:redis=127.0.0.1:23501,127.0.0.1:23502 \
  --target multipaxos:redis=127.0.0.1:23311,127.0.0.1:23312,127.0.0.1:23313 \
  --workload a --records 1000 --clients 20 --rounds 3 --duration 5s --warmup 1s \
  --no-plots -o $R/out > $R/bench-stdout.txt 2>&1
uptime >> $R/uptime.txt
kill $(cat /tmp/nezha-eval/redis.pid)
