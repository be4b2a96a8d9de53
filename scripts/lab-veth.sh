# Sourced by the comparison scripts (compare-iperf3.sh, compare-send.sh): two
# network namespaces, ${LAB}-a and ${LAB}-b, joined by one veth pair with
# 198.51.100.1/24 and .2/24, offloads as veth sets them (what the tests'
# netlab.Connect does). Needs root and iproute2. LAB must be set; lab_down
# runs on exit, even when the script fails.
#
#   lab_start         a temporary directory in $tmp, removed on exit with the
#                     lab and the script's background jobs; the binary
#                     (lab_binary "$tmp")
#   lab_up MTU [QUEUES] create (or re-create) the lab with that MTU (and that
#                     many tx and rx queues on each veth end)
#   lab_down          delete both namespaces (the veth goes with them)
#   ina CMD... / inb  run CMD inside ${LAB}-a / ${LAB}-b
#   lab_binary DIR    $XDPROCE, or ./cmd/xdproce built cgo-free into DIR
#                     (XDPROCE set to it)
#   bench_lock        take /tmp/xdproce-bench.lock on fd 9 for the rest of
#                     the script (start background processes with 9>&-, or
#                     they hold it after the script ends); with
#                     XDPROCE_BENCH_LOCKED=1 the caller holds it (run the
#                     scripts under `flock -o /tmp/xdproce-bench.lock`)

bench_lock() {
  [ "${XDPROCE_BENCH_LOCKED:-}" = 1 ] && return 0 # the caller holds it (flock -o)
  exec 9>>/tmp/xdproce-bench.lock
  flock 9
}

lab_binary() {
  [ -n "${XDPROCE:-}" ] && return 0
  CGO_ENABLED=0 go build -o "$1/xdproce" ./cmd/xdproce
  XDPROCE=$1/xdproce
}

ina() { ip netns exec "${LAB}-a" "$@"; }
inb() { ip netns exec "${LAB}-b" "$@"; }

lab_down() {
  ip netns del "${LAB}-a" 2>/dev/null || true
  ip netns del "${LAB}-b" 2>/dev/null || true
  return 0
}

lab_start() {
  tmp=$(mktemp -d /tmp/"$LAB".XXXX)
  trap lab_cleanup EXIT
  lab_binary "$tmp"
}

lab_cleanup() {
  jobs -p | xargs -r kill 2>/dev/null || true
  wait 2>/dev/null || true
  lab_down
  rm -rf "$tmp"
}

lab_up() {
  local mtu=$1 q=()
  [ -n "${2:-}" ] && q=(numtxqueues "$2" numrxqueues "$2")
  lab_down
  ip netns add "${LAB}-a" && ip netns add "${LAB}-b" || return 1
  ip link add name "${LAB}a" netns "${LAB}-a" mtu "$mtu" "${q[@]}" type veth \
    peer name "${LAB}b" netns "${LAB}-b" mtu "$mtu" "${q[@]}" || return 1
  ina ip addr add 198.51.100.1/24 dev "${LAB}a" && inb ip addr add 198.51.100.2/24 dev "${LAB}b" || return 1
  ina ip link set lo up && inb ip link set lo up || return 1
  ina ip link set "${LAB}a" up && inb ip link set "${LAB}b" up || return 1
  local i
  for i in $(seq 50); do
    ina ip -o link show dev "${LAB}a" | grep -q "state UP" &&
      inb ip -o link show dev "${LAB}b" | grep -q "state UP" && return 0
    sleep 0.1
  done
  echo "lab: the veth is not up" >&2
  return 1
}

# now prints seconds since the epoch with nanoseconds.
now() { date +%s.%N; }

# until_listening NS PORT: wait (≤ 10 s) until something listens on TCP PORT in NS.
until_listening() {
  local i
  for i in $(seq 100); do
    ip netns exec "$1" ss -Htln "sport = :$2" | grep -q . && return 0
    sleep 0.1
  done
  echo "lab: nothing listens on $2 in $1" >&2
  return 1
}

# median FILE WORD FIELD: the median of FIELD over FILE's lines that start
# with WORD.
median() {
  grep "^$2 " "$1" | awk -v f="$3" '{print $f}' | sort -g |
    awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'
}
