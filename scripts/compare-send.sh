#!/usr/bin/env bash
# `xdproce send` of a file against `xdproce bench write --size 64KiB` moving
# the same bytes on the same link (issue 21 item 5, must-show 3): two
# namespaces on a veth (lab-veth.sh), the default link (--link auto), the
# file from tmpfs to tmpfs, send timed as the whole command's wall time (the
# server is up before it starts), alternated ROUNDS times with the order
# swapping each round. Prints one line per run and the medians and ratio.
# It takes /tmp/xdproce-bench.lock itself (waiting for other benchmarks);
# what it starts in the background does not inherit the lock, and every
# process it starts ends within a timeout even if the script is killed.
#
#   sudo scripts/compare-send.sh            1 GiB, MTU 9000, 3 rounds
#   env: XDPROCE (binary; default: built into the temp dir), SIZE_MIB (1024),
#        MTU (9000), ROUNDS (3), LAB (namespace prefix, default xdc<pid>),
#        LINK (auto), PROFILE=DIR (CPU profiles of both ends of each send
#        and bench run: DIR/{send,serve,bwc,bws}-N.pprof), GET=1 (time
#        `xdproce get` of the file back too)
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MIB=${SIZE_MIB:-1024} MTU=${MTU:-9000} ROUNDS=${ROUNDS:-3} LINK=${LINK:-auto}
LAB=${LAB:-xdc$$}
. scripts/lab-veth.sh
tmp=$(mktemp -d /dev/shm/"$LAB".XXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  lab_down
  rm -rf "$tmp"
}
trap cleanup EXIT
lab_binary "$tmp"
mkdir -p "$tmp/src" "$tmp/dst" "$tmp/back"
head -c $((SIZE_MIB << 20)) /dev/urandom >"$tmp/src/file"
iters=$((SIZE_MIB * 16)) # 64 KiB writes of the same bytes
lab_up "$MTU"
bench_lock
echo "# $(uptime)"
echo "# $SIZE_MIB MiB, MTU $MTU, --link $LINK, $ROUNDS rounds, $XDPROCE"

prof() { # prof NAME N: the environment that profiles into $PROFILE
  if [ -n "${PROFILE:-}" ]; then echo "XDPROCE_CPUPROFILE=$PROFILE/$1-$2.pprof"; else echo "XDPROCE_NOPROFILE=1"; fi
}
[ -n "${PROFILE:-}" ] && mkdir -p "$PROFILE"

# Background servers run by ip netns exec directly (not through inb, a
# function: $! would be a subshell that passes no signal on).
run_send() { # one send (and get); prints its Gb/s over the wall time
  local n=$1
  ip netns exec "${LAB}-b" timeout 600 env "$(prof serve "$n")" "$XDPROCE" serve --dev "${LAB}b" --link "$LINK" --insecure --dir "$tmp/dst" \
    --listen 198.51.100.2:18515 >"$tmp/serve.out" 2>&1 9>&- &
  local spid=$!
  pids+=("$spid")
  until_listening "${LAB}-b" 18515 || { cat "$tmp/serve.out" >&2; return 1; }
  local t0 t1
  t0=$(now)
  ina timeout 600 env "$(prof send "$n")" "$XDPROCE" send --dev "${LAB}a" --link "$LINK" 198.51.100.2 "$tmp/src/file" --name f >"$tmp/send.out" 2>&1 ||
    { cat "$tmp/send.out" "$tmp/serve.out" >&2; return 1; }
  t1=$(now)
  local send_gbps get_gbps=
  send_gbps=$(echo "$SIZE_MIB $t0 $t1" | awk '{printf "%.2f", $1*8*1048576/($3-$2)/1e9}')
  cmp "$tmp/src/file" "$tmp/dst/f"
  if [ -n "${GET:-}" ]; then
    rm -f "$tmp/back/f"
    t0=$(now)
    ina timeout 600 "$XDPROCE" get --dev "${LAB}a" --link "$LINK" 198.51.100.2 f "$tmp/back/f" >"$tmp/get.out" 2>&1 ||
      { cat "$tmp/get.out" "$tmp/serve.out" >&2; return 1; }
    t1=$(now)
    get_gbps=$(echo "$SIZE_MIB $t0 $t1" | awk '{printf " get %.2f", $1*8*1048576/($3-$2)/1e9}')
    cmp "$tmp/src/file" "$tmp/back/f"
  fi
  kill -TERM "$spid"
  wait "$spid" 2>/dev/null || true
  rm -f "$tmp/dst/f"
  echo "send $send_gbps$get_gbps"
}

run_bench() { # one bench write of the same bytes; prints its Gb/s
  local n=$1
  ip netns exec "${LAB}-b" timeout 600 env "$(prof bws "$n")" "$XDPROCE" bench write --dev "${LAB}b" --link "$LINK" --port 18516 >"$tmp/bws.out" 2>&1 9>&- &
  local spid=$!
  pids+=("$spid")
  until_listening "${LAB}-b" 18516 || { cat "$tmp/bws.out" >&2; return 1; }
  ina timeout 600 env "$(prof bwc "$n")" "$XDPROCE" bench write --dev "${LAB}a" --link "$LINK" --port 18516 --size 64KiB --iters "$iters" \
    --json 198.51.100.2 >"$tmp/bwc.out" 2>"$tmp/bwc.err" || { cat "$tmp/bwc.out" "$tmp/bwc.err" "$tmp/bws.out" >&2; return 1; }
  wait "$spid" 2>/dev/null || true
  grep -o '"bw_avg_gbps":[0-9.]*' "$tmp/bwc.out" | head -1 | awk -F: '{printf "bench %.2f\n", $2}'
}

out=$tmp/results
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="run_send run_bench"; else order="run_bench run_send"; fi
  for f in $order; do
    $f "$r" >>"$out"
    tail -1 "$out"
  done
done
echo "# $(uptime)"
s=$(median "$out" send 2) b=$(median "$out" bench 2)
echo "median: send $s Gb/s, bench write $b Gb/s, send/bench $(awk -v s="$s" -v b="$b" 'BEGIN{printf "%.2f", s/b}')"
if [ -n "${GET:-}" ]; then
  g=$(median "$out" send 4)
  echo "median: get $g Gb/s, get/bench $(awk -v s="$g" -v b="$b" 'BEGIN{printf "%.2f", s/b}')"
fi
