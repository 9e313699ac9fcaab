#!/bin/bash
# Fig. 14 again after the RESP front end reuses finished policies (new binary)
cd /tmp/nezha-eval
cp /work/wt/nezha/target/release/synod /tmp/synod-nezha-eval2
rm -rf /tmp/nezha-eval/nezha2
nohup /tmp/synod-nezha-eval2 local --protocol nezha --base-port 23000 --in-memory --proxies 2 --data-dir /tmp/nezha-eval/nezha2 > /tmp/nezha-eval/nezha2.out 2>&1 &
echo $! > /tmp/nezha-eval/nezha2.pid
for i in $(seq 1 60); do grep -q "^proxies:" /tmp/nezha-eval/nezha2.out && break; sleep 1; done
/tmp/synod-nezha-eval2 fault --cluster /tmp/nezha-eval/nezha2/cluster.toml link --delay-ms 0.1 --jitter-ms 0.05
R=/tmp/nezha-eval/fig14b; mkdir -p $R
redis-server --port 23600 --save '' --appendonly no --daemonize yes --pidfile /tmp/nezha-eval/redis.pid > /dev/null
sleep 1
uptime > $R/uptime.txt
/tmp/synod-nezha-eval2 bench --compare \
  --target redis:redis=127.0.0.1:23600 \
  --target nezha-proxy:redis=127.0.0.1:23501,127.0.0.1:23502 \
  --target nezha:redis=127.0.0.1:23301,127.0.0.1:23302,127.0.0.1:23303 \
  --target multipaxos:redis=127.0.0.1:23311,127.0.0.1:23312,127.0.0.1:23313 \
  --workload a --records 1000 --clients 20 --rounds 3 --duration 5s --warmup 1s \
  --no-plots -o $R/out > $R/bench-stdout.txt 2>&1
uptime >> $R/uptime.txt
kill $(cat /tmp/nezha-eval/redis.pid)
