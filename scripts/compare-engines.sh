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
#        ROUNDS (6), D (3)
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
L1=xe1q$$ L2=xe2q$$
ROUNDS=${ROUNDS:-6} D=${D:-3} MTU=${MTU:-9000}
if [ -z "${XDPROCE:-}" ]; then
  CGO_ENABLED=0 go build -o "$tmp/xdproce" ./cmd/xdproce || exit 1
  XDPROCE=$tmp/xdproce
fi
down() {
  for L in $L1 $L2; do ip netns del $L-a 2>/dev/null; ip netns del $L-b 2>/dev/null; done
  rm -rf "$tmp"
}
trap down EXIT
up() { # up NAME QUEUES
  local L=$1 q=$2
  ip netns add $L-a && ip netns add $L-b || exit 1
  ip link add name ${L}a netns $L-a mtu $MTU numtxqueues $q numrxqueues $q type veth \
    peer name ${L}b netns $L-b mtu $MTU numtxqueues $q numrxqueues $q || exit 1
  ip -n $L-a addr add 198.51.100.1/24 dev ${L}a && ip -n $L-b addr add 198.51.100.2/24 dev ${L}b
  ip -n $L-a link set lo up && ip -n $L-b link set lo up
  ip -n $L-a link set ${L}a up && ip -n $L-b link set ${L}b up
  sleep 1
}
run() { # run NAME LAB ENGINES QPS
  local name=$1 L=$2 e=$3 q=$4 i
  ip netns exec $L-b timeout 60 env XDPROCE_NOPROFILE=1 "$XDPROCE" bench write --dev ${L}b --link xsk \
    --engines $e --port 18517 >"$tmp/bws.out" 2>&1 9>&- &
  local spid=$!
  for i in $(seq 100); do ip netns exec $L-b ss -Htln "sport = :18517" | grep -q . && break; sleep 0.1; done
  ip netns exec $L-a timeout 60 env XDPROCE_NOPROFILE=1 "$XDPROCE" bench write --dev ${L}a --link xsk \
    --engines $e --port 18517 --size 64KiB --qps $q -D $D --json 198.51.100.2 >"$tmp/bwc.out" 2>"$tmp/bwc.err" ||
    cat "$tmp/bwc.err" "$tmp/bws.out" >&2
  wait $spid
  echo "$name $(grep -o '"bw_avg_gbps":[0-9.]*' "$tmp/bwc.out" | head -1 | cut -d: -f2)" | tee -a "$tmp/out"
}
exec 9>>/tmp/xdproce-bench.lock
flock 9
up $L1 1
up $L2 2
echo "# MTU $MTU, $ROUNDS rounds of $D s; $(uptime)"
for r in $(seq "$ROUNDS"); do
  case $((r % 3)) in
  1) order="A B C" ;; 2) order="B C A" ;; 0) order="C A B" ;;
  esac
  for o in $order; do
    case $o in
    A) run 1q1e1qp $L1 1 1 ;;
    B) run 2q1e2qp $L2 1 2 ;;
    C) run 2q2e2qp $L2 2 2 ;;
    esac
  done
done
echo "# $(uptime)"
for n in 1q1e1qp 2q1e2qp 2q2e2qp; do
  echo "$n median $(grep "^$n " "$tmp/out" | awk '{print $2}' | sort -g |
    awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}') Gb/s"
done
