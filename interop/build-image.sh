#!/bin/bash
# build-image.sh [CACHE] — build the xdproce interop guest (Linux Soft-RoCE
# peer) from Debian packages into CACHE (default $XDPROCE_INTEROP_CACHE or
# /var/cache/xdproce-interop), outside the clone, once:
#
#   CACHE/rootfs/       debootstrap of Debian (minbase + rdma packages)
#   CACHE/vmlinuz       the Debian guest kernel (in-tree rdma_rxe)
#   CACHE/initrd.img    the whole guest userland as a zstd initramfs, PID 1 =
#                       interop/guest-init (the harness's agent)
#   CACHE/versions.txt  package versions in the image
#
# Running it again rebuilds only what changed (the debootstrap never, unless
# CACHE/rootfs is removed). Needs root and the Debian mirror of this host's apt
# sources (or XDPROCE_INTEROP_MIRROR). Host packages it needs are installed with
# apt-get unless XDPROCE_INTEROP_NO_APT=1.
set -euo pipefail
CACHE=${1:-${XDPROCE_INTEROP_CACHE:-/var/cache/xdproce-interop}}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SUITE=${XDPROCE_INTEROP_SUITE:-bookworm}
GUEST_PKGS=linux-image-amd64,kmod,iproute2,procps,rdma-core,ibverbs-utils,ibverbs-providers,perftest,rdmacm-utils,tcpdump,iputils-ping,netbase
HOST_PKGS="qemu-system-x86 debootstrap cpio zstd kmod iproute2"
MODULES="virtio_pci virtio_net 9pnet_virtio 9p crc32_generic rdma_rxe ib_uverbs rdma_ucm ib_umad"
say() { echo "build-image: $*" >&2; }
die() { say "$*"; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot)"
mkdir -p "$CACHE"
CACHE=$(readlink -f "$CACHE")
case "$CACHE/" in "$(readlink -f "$HERE/..")/"*) die "cache $CACHE is inside the clone; choose a directory outside it" ;; esac

if [ "${XDPROCE_INTEROP_NO_APT:-0}" != 1 ]; then
  miss=
  for p in $HOST_PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || miss="$miss $p"
  done
  if [ -n "$miss" ]; then
    say "apt-get install$miss"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends $miss || { apt-get update && apt-get install -y --no-install-recommends $miss; }
  fi
fi

mirror() {
  { grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
    grep -h '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}'; } |
    grep -v security | head -n 1 || true
}
MIRROR=${XDPROCE_INTEROP_MIRROR:-$(mirror)}
ROOT=$CACHE/rootfs
if [ ! -f "$ROOT/.xdproce-debootstrap-done" ]; then
  [ -n "$MIRROR" ] || die "no Debian mirror in the apt sources; set XDPROCE_INTEROP_MIRROR"
  say "debootstrap $SUITE from $MIRROR into $ROOT (several minutes)"
  rm -rf "$ROOT.partial"
  debootstrap --variant=minbase --include="$GUEST_PKGS" "$SUITE" "$ROOT.partial" "$MIRROR"
  rm -f "$ROOT.partial"/var/cache/apt/archives/*.deb
  rm -rf "$ROOT"
  mv "$ROOT.partial" "$ROOT"
  date -u +%FT%TZ > "$ROOT/.xdproce-debootstrap-done"
fi
KV=$(ls "$ROOT/lib/modules" | sort -V | tail -n 1)
[ -n "$KV" ] && [ -f "$ROOT/boot/vmlinuz-$KV" ] || die "no kernel in $ROOT (remove it and rerun)"

# The initramfs depends on the rootfs stamp, the kernel, the module list and guest-init.
FP=$({ echo "$KV $MODULES"; cat "$ROOT/.xdproce-debootstrap-done" "$HERE/guest-init"; } | sha256sum | cut -c1-16)
if [ -f "$CACHE/initrd.img" ] && [ "$(cat "$CACHE/initrd.fp" 2>/dev/null)" = "$FP" ]; then
  say "initrd.img is up to date"
else
  say "building the initramfs"
  IR=$CACHE/initroot
  rm -rf "$IR"; mkdir -p "$IR"
  tar -C "$ROOT" -cf - --exclude=./lib/modules --exclude=./usr/lib/modules --exclude=./boot \
      --exclude=./usr/share/doc --exclude=./usr/share/man --exclude=./usr/share/locale \
      --exclude=./usr/share/info --exclude=./usr/share/i18n --exclude=./usr/share/zoneinfo \
      --exclude=./usr/lib/x86_64-linux-gnu/gconv --exclude=./var/cache/apt --exclude=./var/lib/apt/lists \
      --exclude=./usr/lib/udev/hwdb.bin --exclude=./.xdproce-debootstrap-done . | tar -C "$IR" -xf -
  for m in $MODULES; do chroot "$ROOT" /sbin/modprobe -S "$KV" --show-depends "$m"; done |
    awk '$1 == "insmod" { print $2 }' | sort -u | while read -r f; do
      mkdir -p "$IR$(dirname "$f")"; cp -a "$ROOT$f" "$IR$f"
    done
  cp -a "$ROOT/lib/modules/$KV"/modules.order "$ROOT/lib/modules/$KV"/modules.builtin* "$IR/lib/modules/$KV/"
  depmod -b "$IR" "$KV"
  install -m 755 "$HERE/guest-init" "$IR/sbin/xi-init"
  echo xiguest > "$IR/etc/hostname"
  printf '127.0.0.1\tlocalhost\n' > "$IR/etc/hosts"
  : > "$IR/etc/fstab"
  (cd "$IR" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) | zstd -q -3 -T0 > "$CACHE/initrd.img.tmp"
  mv "$CACHE/initrd.img.tmp" "$CACHE/initrd.img"
  echo "$FP" > "$CACHE/initrd.fp"
  rm -rf "$IR"
fi
cp -p "$ROOT/boot/vmlinuz-$KV" "$CACHE/vmlinuz"
{
  echo "suite=$SUITE mirror=$MIRROR built=$(cat "$ROOT/.xdproce-debootstrap-done")"
  echo "kernel=$KV"
  chroot "$ROOT" dpkg-query -W -f='${Package}=${Version}\n' rdma-core ibverbs-utils perftest rdmacm-utils 2>/dev/null
  qemu-system-x86_64 --version | head -n 1
} > "$CACHE/versions.txt"
say "done: $CACHE/vmlinuz $CACHE/initrd.img ($(du -h "$CACHE/initrd.img" | cut -f1))"
