#!/usr/bin/env bash
# Issue 21 must-show 7: `xdproce bench lat --size 8` (half round trip p50,
# so round trip = 2 × p50) with --busy-poll auto and with 0 against the
# kernel's ICMP ping round trip on the same veth between two namespaces, and
# `bench write --size 64KiB` with auto and 0 (the spin must not cost
# throughput), ROUNDS rounds alternated (the order of auto and 0 swapping
# each round). Prints one line per run, then the medians and the ratios.
# Takes /tmp/xdproce-bench.lock itself.
#
#   sudo scripts/compare-latency.sh        MTU 9000, 3 rounds
#   env: XDPROCE (binary; default: built into the temp dir), MTU (9000),
#        ROUNDS (3), ITERS (5000, lat iterations), DURATION (3, write seconds),
#        LAB (namespace prefix, default xdl<pid>), LINK (xsk)
set -euo pipefail
cd "$(dirname "$0")/.."
MTU=${MTU:-9000} ROUNDS=${ROUNDS:-3} ITERS=${ITERS:-5000} DURATION=${DURATION:-3} LINK=${LINK:-xsk}
LAB=${LAB:-xdl$$}
. scripts/lab-veth.sh
command -v ping >/dev/null || { echo "ping missing (apt-get install iputils-ping)" >&2; exit 1; }
lab_start

run_ping() {
  # 200 echoes 2 ms apart; the median of the per-echo round trips.
  ina ping -c 200 -i 0.002 -q -n 198.51.100.2 >/dev/null 2>&1 || true # ARP, warm-up
  ina ping -c 200 -i 0.002 -n 198.51.100.2 2>&1 |
    awk -F'time=' '/time=/ {split($2, a, " "); print a[1]}' | sort -g |
    awk '{v[NR]=$1} END {printf "ping %.1f\n", (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2) * 1000}'
}

# run_bench TEST SPIN EXTRA...: one bench between the namespaces, both ends
# with --busy-poll SPIN; prints "lat-SPIN RT_us" or "write-SPIN Gb/s".
run_bench() {
  local test=$1 spin=$2
  shift 2
  ip netns exec "${LAB}-b" timeout 120 "$XDPROCE" bench "$test" --dev "${LAB}b" --link "$LINK" --busy-poll "$spin" \
    --port 18517 >"$tmp/srv.out" 2>&1 9>&- &
  local spid=$!
  until_listening "${LAB}-b" 18517 || { cat "$tmp/srv.out" >&2; return 1; }
  ina timeout 120 "$XDPROCE" bench "$test" --dev "${LAB}a" --link "$LINK" --busy-poll "$spin" --port 18517 "$@" \
    --json 198.51.100.2 >"$tmp/cli.out" 2>"$tmp/cli.err" || { cat "$tmp/cli.out" "$tmp/cli.err" "$tmp/srv.out" >&2; return 1; }
  wait "$spid" 2>/dev/null || true
  if [ "$test" = lat ]; then
    grep -o '"lat_p50_us":[0-9.]*' "$tmp/cli.out" | head -1 | awk -F: -v s="$spin" '{printf "lat-%s %.1f\n", s, 2 * $2}'
  else
    grep -o '"bw_avg_gbps":[0-9.]*' "$tmp/cli.out" | head -1 | awk -F: -v s="$spin" '{printf "write-%s %.2f\n", s, $2}'
  fi
}

lab_up "$MTU"
bench_lock
out=$tmp/results
echo "# MTU $MTU, --link $LINK, $ROUNDS rounds; $(uptime)"
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then spins="auto 0"; else spins="0 auto"; fi
  run_ping >>"$out" && tail -1 "$out"
  for s in $spins; do run_bench lat "$s" --size 8 --iters "$ITERS" >>"$out" && tail -1 "$out"; done
  for s in $spins; do run_bench write "$s" --size 64KiB -D "$DURATION" >>"$out" && tail -1 "$out"; done
done
p=$(median "$out" ping 2) la=$(median "$out" lat-auto 2) l0=$(median "$out" lat-0 2)
wa=$(median "$out" write-auto 2) w0=$(median "$out" write-0 2)
echo "medians: ping RT $p us; bench lat RT (2 x p50) auto $la us, off $l0 us; write auto $wa Gb/s, off $w0 Gb/s"
awk -v p="$p" -v la="$la" -v l0="$l0" -v wa="$wa" -v w0="$w0" \
  'BEGIN {printf "lat RT / ping RT: auto %.2f, off %.2f (target <= 2); write auto / off %.2f; %s\n", la/p, l0/p, wa/w0, ""}'
echo "# $(uptime)"
