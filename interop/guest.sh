#!/bin/bash
# guest.sh — one Linux Soft-RoCE (rxe) guest for xdproce's interop suite.
#
#   guest.sh up [options]          boot the guest in its own network namespace; prints STATE
#   guest.sh exec STATE [-t S] -- CMD...   run CMD in the guest (bash, cwd /xi), print its
#                                  output, exit with its status (124 on timeout: job killed)
#   guest.sh start STATE -- CMD... start CMD in the guest, print its job id at once
#   guest.sh wait STATE JOB [-t S] wait for a started job; output and status as exec
#   guest.sh kill STATE JOB        kill a started job (its whole session)
#   guest.sh listen STATE PORT [-t S]  wait until a TCP socket listens on PORT in the guest
#   guest.sh down STATE            power the guest off, kill QEMU, delete the namespace
#
# up options (defaults in brackets):
#   --cache DIR     image from build-image.sh [$XDPROCE_INTEROP_CACHE or /var/cache/xdproce-interop]
#   --state DIR     where the guest's share, console log and env file go [mktemp -d]
#   --netns NAME    namespace holding the tap [xdp-iop-PID]; created, and deleted by down
#   --tap NAME      [xi0]     --host-ip A/N [198.51.100.1/24]     --guest-ip A/N [198.51.100.2/24]
#   --host-ip6 A/N  [2001:db8::1/64]  --guest-ip6 A/N [2001:db8::2/64]: IPv6 on the tap's two ends,
#                   added after rxe0 has its IPv4 GID (so that stays at index 1); "" for none
#   --mtu N         guest MTU [1500: rxe active MTU 1024]     --mem MB [768]
#   --lifetime S    QEMU is killed after S seconds whatever happens [1800]
#   --watch PID     tear the guest and namespace down (as `down` does) within a second of
#                   process PID exiting, however it exits (the test binary, run.sh)
#
# STATE/env holds shell assignments for the host side: NETNS TAP HOST_IP GUEST_IP GUEST_MAC
# GID_INDEX QEMU_PID SHARE, and HOST_IP6 GUEST_IP6 GID6_INDEX (rxe0's GID of GUEST_IP6) when the
# ends have IPv6. Run host programs with `ip netns exec $NETNS ...`.
# The guest runs under TCG (-cpu qemu64): /dev/kvm here is PVM and boots no stock kernel.
# Every address is from 198.51.100.0/24 or 2001:db8::/64 and lives only inside the namespace.
set -u
die() { echo "guest.sh: $*" >&2; exit 125; }
cmd=${1:-}; [ $# -gt 0 ] && shift

load() { # STATE
  [ -f "$1/env" ] || die "$1/env missing: not a guest.sh state directory"
  # shellcheck disable=SC1091
  . "$1/env"
}
alive() { [ -n "${QEMU_PID:-}" ] && kill -0 "$QEMU_PID" 2>/dev/null; }

job_submit() { # STATE CMD -> prints id
  local id
  id=$(date +%s%N)-$RANDOM
  printf '%s\n' "$2" > "$SHARE/jobs/.$id.tmp" && mv "$SHARE/jobs/.$id.tmp" "$SHARE/jobs/$id.sh" || die "cannot queue job"
  echo "$id"
}
job_wait() { # ID TIMEOUT
  local id=$1 to=$2 t0=$SECONDS
  while [ ! -e "$SHARE/jobs/$id.rc" ]; do
    alive || { cat "$SHARE/jobs/$id.out" 2>/dev/null; die "guest is gone (console: $SHARE/console.log)"; }
    if [ "$to" != 0 ] && [ $((SECONDS - t0)) -ge "$to" ]; then
      : > "$SHARE/jobs/$id.kill"
      for _ in $(seq 50); do [ -e "$SHARE/jobs/$id.rc" ] && break; sleep 0.2; done
      cat "$SHARE/jobs/$id.out" 2>/dev/null
      echo "guest.sh: job timed out after ${to}s and was killed" >&2
      return 124
    fi
    sleep 0.1
  done
  cat "$SHARE/jobs/$id.out"
  return "$(cat "$SHARE/jobs/$id.rc")"
}
timeout_opt() { TO=60; if [ "${1:-}" = -t ]; then TO=$2; return 2; fi; return 0; }

case "$cmd" in
up)
  CACHE=${XDPROCE_INTEROP_CACHE:-/var/cache/xdproce-interop} STATE= NETNS=xdp-iop-$$ TAP=xi0
  HOST_IP=198.51.100.1/24 GUEST_IP=198.51.100.2/24 MTU=1500 MEM=768 LIFETIME=1800 WATCH=
  HOST_IP6=2001:db8::1/64 GUEST_IP6=2001:db8::2/64
  while [ $# -gt 0 ]; do
    case "$1" in
      --cache) CACHE=$2 ;; --state) STATE=$2 ;; --netns) NETNS=$2 ;; --tap) TAP=$2 ;;
      --host-ip) HOST_IP=$2 ;; --guest-ip) GUEST_IP=$2 ;; --mtu) MTU=$2 ;; --mem) MEM=$2 ;;
      --host-ip6) HOST_IP6=$2 ;; --guest-ip6) GUEST_IP6=$2 ;;
      --lifetime) LIFETIME=$2 ;; --watch) WATCH=$2 ;;
      *) die "up: unknown option $1" ;;
    esac
    shift 2
  done
  [ "$(id -u)" = 0 ] || die "up: needs root (network namespace, tap device)"
  for f in vmlinuz initrd.img; do [ -r "$CACHE/$f" ] || die "up: $CACHE/$f missing: run interop/build-image.sh first"; done
  command -v qemu-system-x86_64 >/dev/null || die "up: qemu-system-x86_64 missing (apt-get install qemu-system-x86)"
  case "$HOST_IP$GUEST_IP" in *192.0.2.*) die "up: 192.0.2.0/24 is this machine's own network; use 198.51.100.0/24" ;; esac
  for a in $HOST_IP6 $GUEST_IP6; do
    case "$a" in 2001:db8:*|2001:DB8:*) ;; *) die "up: IPv6 address $a is not in 2001:db8::/32" ;; esac
  done
  { [ -n "$HOST_IP6" ] && [ -n "$GUEST_IP6" ]; } || { [ -z "$HOST_IP6" ] && [ -z "$GUEST_IP6" ]; } || die "up: give both --host-ip6 and --guest-ip6, or neither"
  [ -n "$STATE" ] || STATE=$(mktemp -d /tmp/xdproce-interop.XXXXXX)
  mkdir -p "$STATE/share/jobs"; STATE=$(readlink -f "$STATE"); SHARE=$STATE/share
  rm -f "$SHARE/ready" "$SHARE/info" "$SHARE"/jobs/*
  ip netns add "$NETNS" || die "up: cannot create netns $NETNS"
  NX=(ip netns exec "$NETNS")
  "${NX[@]}" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n "$NETNS" link set lo up
  ip -n "$NETNS" tuntap add dev "$TAP" mode tap || { ip netns del "$NETNS"; die "up: cannot create tap $TAP"; }
  ip -n "$NETNS" addr add "$HOST_IP" dev "$TAP"
  ip -n "$NETNS" link set "$TAP" mtu "$MTU" up
  if [ -n "$HOST_IP6" ]; then
    "${NX[@]}" sysctl -qw "net.ipv6.conf.$TAP.disable_ipv6=0" "net.ipv6.conf.$TAP.accept_ra=0"
    ip -n "$NETNS" addr add "$HOST_IP6" dev "$TAP" nodad
  fi
  IFS=./ read -r a b c d _ <<<"$GUEST_IP"
  GUEST_MAC=$(printf '52:54:%02x:%02x:%02x:%02x' "$a" "$b" "$c" "$d")
  # Offloads off, so every frame on the tap is complete (checksums computed by the guest).
  # event_idx=off: with VIRTIO_RING_F_EVENT_IDX the virtio-net TX queue stalled for good about
  # once in 1,600 short AF_XDP runs (a TX notification QEMU never acted on, after which the
  # guest never notified again: the "tap wedge", see interop/qmp_linux_test.go); with the
  # ring's notification flags none did in 6,000.
  NIC="event_idx=off,csum=off,gso=off,guest_csum=off,guest_tso4=off,guest_tso6=off,guest_ecn=off,guest_ufo=off,host_tso4=off,host_tso6=off,host_ecn=off,host_ufo=off"
  APPEND="console=ttyS0 rdinit=/sbin/xi-init quiet loglevel=1 panic=-1 mitigations=off tsc=reliable xi.ip=$GUEST_IP xi.mtu=$MTU"
  cat > "$STATE/env" <<ENV
NETNS=$NETNS
TAP=$TAP
HOST_IP=${HOST_IP%/*}
GUEST_IP=${GUEST_IP%/*}
GUEST_MAC=$GUEST_MAC
SHARE=$SHARE
STATE=$STATE
ENV
  ( exec "${NX[@]}" timeout -s KILL "$LIFETIME" qemu-system-x86_64 -accel tcg,thread=multi -cpu qemu64 -smp 1 -m "$MEM" \
      -nographic -nodefaults -no-reboot -serial stdio -monitor none -qmp "unix:$STATE/qmp.sock,server=on,wait=off" \
      -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initrd.img" -append "$APPEND" \
      -virtfs "local,path=$SHARE,mount_tag=xishare,security_model=none,id=xishare" \
      -netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no" \
      -device "virtio-net-pci,netdev=n0,mac=$GUEST_MAC,romfile=,$NIC" ) < /dev/null > "$STATE/console.log" 2>&1 &
  QEMU_PID=$!
  echo "QEMU_PID=$QEMU_PID" >> "$STATE/env"
  if [ -n "$WATCH" ]; then
    SELF=$(readlink -f "$0")
    # Gone watcher: tear down; gone QEMU: tear down only if this QEMU is still the state's
    # (a reboot with the same state has its own watcher).
    setsid bash -c 'while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
      kill -0 "$1" 2>/dev/null && ! grep -qx "QEMU_PID=$2" "$4/env" && exit 0
      "$3" down "$4"' watch "$WATCH" "$QEMU_PID" "$SELF" "$STATE" < /dev/null > /dev/null 2>&1 &
  fi
  t0=$SECONDS
  while [ ! -e "$SHARE/ready" ]; do
    if ! kill -0 "$QEMU_PID" 2>/dev/null || [ $((SECONDS - t0)) -gt 240 ]; then
      kill "$QEMU_PID" 2>/dev/null; ip netns del "$NETNS" 2>/dev/null
      tail -n 30 "$STATE/console.log" >&2
      die "up: guest not ready (console: $STATE/console.log)"
    fi
    sleep 0.2
  done
  GID_INDEX=$(sed -n 's/^gid_index=//p' "$SHARE/info")
  echo "GID_INDEX=$GID_INDEX" >> "$STATE/env"
  [ -n "$GID_INDEX" ] || echo "guest.sh: warning: rxe0 has no IPv4 GID (see $SHARE/info)" >&2
  if [ -n "$GUEST_IP6" ]; then
    # guest-init leaves IPv6 off; the address goes on after rxe0 exists, so its GID comes after
    # the IPv4 one. Its index: the first GID neither IPv4-mapped, zero nor link-local.
    id=$(job_submit "$STATE" "sysctl -qw net.ipv6.conf.\$XI_NIC.disable_ipv6=0 net.ipv6.conf.\$XI_NIC.accept_ra=0 &&
ip addr add $GUEST_IP6 dev \$XI_NIC nodad || exit 1
for i in \$(seq 100); do
  for x in 0 1 2 3 4 5 6 7; do
    read -r v 2>/dev/null < /sys/class/infiniband/rxe0/ports/1/gids/\$x || continue
    case \$v in 0000:*|fe80:*) ;; *) echo \$x; exit 0 ;; esac
  done
  read -r -t 0.1 < /run/nap
done
exit 1")
    if GID6_INDEX=$(job_wait "$id" 60); then
      printf 'HOST_IP6=%s\nGUEST_IP6=%s\nGID6_INDEX=%s\n' "${HOST_IP6%/*}" "${GUEST_IP6%/*}" "$GID6_INDEX" >> "$STATE/env"
    else
      echo "guest.sh: warning: rxe0 has no GID for $GUEST_IP6 ($GID6_INDEX)" >&2
    fi
  fi
  echo "$STATE"
  ;;
exec)
  STATE=${1:?exec STATE}; shift; load "$STATE"; TO=60
  [ "${1:-}" = -t ] && { TO=$2; shift 2; }
  [ "${1:-}" = -- ] && shift
  [ $# -gt 0 ] || die "exec: no command"
  alive || die "exec: guest is not running"
  id=$(job_submit "$STATE" "$*")
  job_wait "$id" "$TO"
  ;;
start)
  STATE=${1:?start STATE}; shift; load "$STATE"
  [ "${1:-}" = -- ] && shift
  [ $# -gt 0 ] || die "start: no command"
  alive || die "start: guest is not running"
  job_submit "$STATE" "$*"
  ;;
wait)
  STATE=${1:?wait STATE JOB}; JOB=${2:?wait STATE JOB}; shift 2; load "$STATE"; TO=60
  [ "${1:-}" = -t ] && TO=$2
  job_wait "$JOB" "$TO"
  ;;
kill)
  STATE=${1:?kill STATE JOB}; JOB=${2:?kill STATE JOB}; load "$STATE"
  [ -e "$SHARE/jobs/$JOB.rc" ] || : > "$SHARE/jobs/$JOB.kill"
  ;;
listen)
  STATE=${1:?listen STATE PORT}; PORT=${2:?listen STATE PORT}; shift 2; load "$STATE"; TO=30
  [ "${1:-}" = -t ] && TO=$2
  id=$(job_submit "$STATE" "for i in \$(seq $((TO * 10))); do ss -Hltn 'sport = :$PORT' | grep -q . && exit 0; read -r -t 0.1 < /run/nap; done; exit 1")
  job_wait "$id" $((TO + 10)) > /dev/null || die "listen: nothing listens on TCP port $PORT in the guest after ${TO}s"
  ;;
down)
  STATE=${1:?down STATE}
  [ -f "$STATE/env" ] || exit 0
  load "$STATE"
  if alive; then
    : > "$SHARE/jobs/POWEROFF"
    for _ in $(seq 25); do alive || break; sleep 0.2; done
    alive && kill "$QEMU_PID" 2>/dev/null
    for _ in $(seq 25); do alive || break; sleep 0.2; done
    alive && kill -KILL "$QEMU_PID" 2>/dev/null
  fi
  ip netns del "$NETNS" 2>/dev/null
  true
  ;;
*)
  sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  [ "$cmd" = -h ] || [ "$cmd" = --help ] || exit 2
  ;;
esac
