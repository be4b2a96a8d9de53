#!/usr/bin/env bash
# Engines per queue (issue 21 must-show 6): `xdproce bench write --link xsk
# --size 64KiB` between two namespaces on a 1-queue veth with one engine and
# one queue pair (1q1e1qp), and on a 2-queue veth with one engine and two
# queue pairs (2q1e2qp) and with two engines and two queue pairs (2q2e2qp),
# in rotating order, ROUNDS times, each run D seconds. Prints one line per
# run, then the medians. Takes /tmp/xdproce-bench.lock itself.
#
#   sudo scripts/compare-engines.sh
#   env: XDPROCE (binary; default: built into the temp dir), MTU (9000),
#        ROUNDS (6), D (3); the lab is scripts/lab-veth.sh's, twice
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-6} D=${D:-3} MTU=${MTU:-9000}
L1=xe1q$$ L2=xe2q$$ LAB=xe1q$$
. scripts/lab-veth.sh
lab_start
trap 'LAB=$L1 lab_cleanup; LAB=$L2 lab_down' EXIT

run() { # run NAME LAB ENGINES QPS
  local name=$1 e=$3 q=$4
  LAB=$2
  ip netns exec "${LAB}-b" timeout 60 env XDPROCE_NOPROFILE=1 "$XDPROCE" bench write --dev "${LAB}b" --link xsk \
    --engines "$e" --port 18517 >"$tmp/bws.out" 2>&1 9>&- &
  local spid=$!
  until_listening "${LAB}-b" 18517 || { cat "$tmp/bws.out" >&2; return 1; }
  ina timeout 60 env XDPROCE_NOPROFILE=1 "$XDPROCE" bench write --dev "${LAB}a" --link xsk \
    --engines "$e" --port 18517 --size 64KiB --qps "$q" -D "$D" --json 198.51.100.2 >"$tmp/bwc.out" 2>"$tmp/bwc.err" ||
    cat "$tmp/bwc.err" "$tmp/bws.out" >&2
  wait "$spid" || true
  echo "$name $(grep -o '"bw_avg_gbps":[0-9.]*' "$tmp/bwc.out" | head -1 | cut -d: -f2)" | tee -a "$tmp/out"
}
bench_lock
LAB=$L1 lab_up "$MTU" 1
LAB=$L2 lab_up "$MTU" 2
echo "# MTU $MTU, $ROUNDS rounds of $D s; $(uptime)"
for r in $(seq "$ROUNDS"); do
  case $((r % 3)) in
  1) order="A B C" ;; 2) order="B C A" ;; 0) order="C A B" ;;
  esac
  for o in $order; do
    case $o in
    A) run 1q1e1qp "$L1" 1 1 ;;
    B) run 2q1e2qp "$L2" 1 2 ;;
    C) run 2q2e2qp "$L2" 2 2 ;;
    esac
  done
done
echo "# $(uptime)"
for n in 1q1e1qp 2q1e2qp 2q2e2qp; do
  echo "$n median $(median "$tmp/out" "$n" 2) Gb/s"
done
