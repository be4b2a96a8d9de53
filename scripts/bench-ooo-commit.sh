#!/bin/bash
# send --mode ooo: two xdproce binaries (OLD NEW, default /tmp/cc-old /tmp/cc-new) alternated, 3 rounds,
# two namespaces on a veth pair (AF_XDP), 198.51.100.1 -> .2, 256 MiB. Root. Prints per run:
# round, binary, Gb/s, seconds, whether the conditional commit ended it, retries, load average.
set -u
OLD=${1:-/tmp/cc-old} NEW=${2:-/tmp/cc-new}
A=ccA$$ B=ccB$$ D=$(mktemp -d)
cleanup() { [ -n "${SP:-}" ] && kill $SP 2>/dev/null; wait 2>/dev/null; ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
ip netns add $A && ip netns add $B
ip link add vA netns $A type veth peer name vB netns $B
ip -n $A link set vA mtu 1500 up; ip -n $B link set vB mtu 1500 up
ip -n $A link set lo up; ip -n $B link set lo up
ip -n $A addr add 198.51.100.1/24 dev vA; ip -n $B addr add 198.51.100.2/24 dev vB
head -c $((256<<20)) /dev/urandom > $D/file
for round in 1 2 3; do
  for v in old new; do
    bin=$OLD; [ $v = new ] && bin=$NEW
    rm -rf $D/srv; mkdir -p $D/srv
    ip netns exec $B timeout 120 $bin serve --dev vB --insecure --dir $D/srv >$D/serve.log 2>&1 &
    SP=$!
    sleep 1
    out=$(ip netns exec $A timeout 100 $bin send --dev vA --mode ooo --json 198.51.100.2 $D/file 2>$D/send.err)
    echo "round $round $v $(echo "$out" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["gbps"], j["seconds"], j["ooo"].get("commit"), j["ooo"]["retries"])' 2>&1) load $(cut -d' ' -f1 /proc/loadavg)"
    kill $SP; wait $SP 2>/dev/null; SP=
  done
done
