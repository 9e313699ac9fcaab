#!/bin/bash
# Plain vs TLS, interleaved: two local clusters (in memory), synod bench alternating.
S=/work/wt/tls/target/release/synod
OUT=/tmp/tlsbench
rm -rf $OUT/plain $OUT/tls
uptime > $OUT/uptime-before2.txt
$S local --in-memory --base-port 27000 --data-dir $OUT/plain > $OUT/plain.out 2>&1 & P1=$!
$S local --in-memory --tls --base-port 27400 --data-dir $OUT/tls > $OUT/tls.out 2>&1 & P2=$!
echo "$P1 $P2" > $OUT/pids
sleep 10
for r in 1 2 3   # run twice: rounds 1-3, then 4-6 (same script with 4 5 6); do
  $S bench --target plain:synod=127.0.0.1:27101,127.0.0.1:27102,127.0.0.1:27103 -d 10s --warmup 2s -c 16 -o $OUT/b-plain-$r > $OUT/b-plain-$r.txt 2>&1
  $S bench --target tls:synod=127.0.0.1:27501,127.0.0.1:27502,127.0.0.1:27503 --tls-ca $OUT/tls/tls/ca.pem -d 10s --warmup 2s -c 16 -o $OUT/b-tls-$r > $OUT/b-tls-$r.txt 2>&1
done
uptime > $OUT/uptime-after2.txt
kill $P1 $P2
wait
