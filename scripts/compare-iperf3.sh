#!/usr/bin/env bash
# `xdproce bench write --size 64KiB` on the default link (--link auto) against
# iperf3's single TCP stream on the same veth between two namespaces (issue 21
# must-show 1), alternated ROUNDS times per MTU with the order swapping each
# round, each run DURATION seconds. Prints one line per run, then per MTU
# the medians and bench/iperf3. Takes /tmp/xdproce-bench.lock itself.
#
#   sudo scripts/compare-iperf3.sh          MTU 9000 and 1500, 3 rounds of 5 s
#   env: XDPROCE (binary; default: built into the temp dir), MTUS ("9000
#        1500"), ROUNDS (3), DURATION (5), LAB (namespace prefix, default
#        xdi<pid>), LINK (auto), PROFILE=DIR (CPU profiles of both bench ends:
#        DIR/{bwc,bws}-MTU-N.pprof)
set -euo pipefail
cd "$(dirname "$0")/.."
MTUS=${MTUS:-9000 1500} ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-5} LINK=${LINK:-auto}
LAB=${LAB:-xdi$$}
. scripts/lab-veth.sh
command -v iperf3 >/dev/null || { echo "iperf3 missing (apt-get install iperf3)" >&2; exit 1; }
lab_start
[ -n "${PROFILE:-}" ] && mkdir -p "$PROFILE"
prof() { # prof NAME: the environment that profiles into $PROFILE
  if [ -n "${PROFILE:-}" ]; then echo "XDPROCE_CPUPROFILE=$PROFILE/$1.pprof"; else echo "XDPROCE_NOPROFILE=1"; fi
}

run_iperf3() {
  ip netns exec "${LAB}-b" timeout 60 iperf3 -s -1 -B 198.51.100.2 -p 5201 >"$tmp/iperf3s.out" 2>&1 9>&- &
  local spid=$!
  until_listening "${LAB}-b" 5201 || { cat "$tmp/iperf3s.out" >&2; return 1; }
  ina timeout 60 iperf3 -c 198.51.100.2 -p 5201 -t "$DURATION" -f g >"$tmp/iperf3.out" 2>&1 ||
    { cat "$tmp/iperf3.out" "$tmp/iperf3s.out" >&2; return 1; }
  wait "$spid" 2>/dev/null || true
  awk '/receiver/ {printf "iperf3 %.2f\n", $(NF-2)}' "$tmp/iperf3.out"
}

run_bench() {
  local n=$1
  ip netns exec "${LAB}-b" timeout 60 env "$(prof "bws-$MTU-$n")" "$XDPROCE" bench write --dev "${LAB}b" --link "$LINK" --port 18516 >"$tmp/bws.out" 2>&1 9>&- &
  local spid=$!
  until_listening "${LAB}-b" 18516 || { cat "$tmp/bws.out" >&2; return 1; }
  ina timeout 60 env "$(prof "bwc-$MTU-$n")" "$XDPROCE" bench write --dev "${LAB}a" --link "$LINK" --port 18516 --size 64KiB -D "$DURATION" \
    --json 198.51.100.2 >"$tmp/bwc.out" 2>"$tmp/bwc.err" || { cat "$tmp/bwc.out" "$tmp/bwc.err" "$tmp/bws.out" >&2; return 1; }
  wait "$spid" 2>/dev/null || true
  grep -o '"bw_avg_gbps":[0-9.]*' "$tmp/bwc.out" | head -1 | awk -F: '{printf "bench %.2f\n", $2}'
  grep -o '"link":"[^"]*","path_mtu":[0-9]*' "$tmp/bwc.out" | head -1 >"$tmp/link" || true
}

for MTU in $MTUS; do
  lab_up "$MTU"
  bench_lock
  out=$tmp/results-$MTU
  echo "# MTU $MTU, --link $LINK, $ROUNDS rounds of $DURATION s; $(uptime)"
  for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then order="run_iperf3 run_bench"; else order="run_bench run_iperf3"; fi
    for f in $order; do
      $f "$r" >>"$out"
      tail -1 "$out"
    done
  done
  [ "${XDPROCE_BENCH_LOCKED:-}" = 1 ] || flock -u 9
  [ -s "$tmp/link" ] && echo "# bench: $(cat "$tmp/link")"
  i=$(median "$out" iperf3 2) b=$(median "$out" bench 2)
  echo "MTU $MTU median: bench write $b Gb/s, iperf3 $i Gb/s, bench/iperf3 $(awk -v b="$b" -v i="$i" 'BEGIN{printf "%.2f", b/i}'); $(uptime)"
done
