#!/usr/bin/env bash
# Shows that the README's two commands need nothing but Go and the base system: builds a fresh
# Debian chroot (debootstrap minbase of this host's release, plus git, make and ca-certificates),
# copies this machine's Go into it, clones the repository there and runs `make test` as root,
# which must install every other package itself (scripts/deps.sh) and pass. Not part of `make
# test` (it takes as long as a whole test run plus the debootstrap); run it by hand as root:
#
#   scripts/fresh-chroot.sh [DIR]     # DIR default /var/tmp/xdproce-fresh (kept for reruns)
#
# XDPROCE_REQUIRE_PRIV=1 makes every privileged skip a failure, as in CI; the interop stage is
# off (XDPROCE_INTEROP=0: its guest image is not in the chroot's cache).
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "fresh-chroot: needs root (debootstrap, chroot, mounts)" >&2; exit 1; }
HERE=$(cd "$(dirname "$0")/.." && pwd)
R=${1:-/var/tmp/xdproce-fresh}
GOROOT_HOST=$(go env GOROOT)
. /etc/os-release
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
mirror=$( { grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
            grep -h '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}'; } |
          grep -v security | head -n 1 || true)
if [ ! -x "$R/usr/bin/make" ]; then
  debootstrap --variant=minbase --include=git,make,ca-certificates "$VERSION_CODENAME" "$R" "$mirror"
fi
rm -rf "$R/usr/local/go" && cp -a "$GOROOT_HOST" "$R/usr/local/go"
cp /etc/resolv.conf "$R/etc/resolv.conf"
# The host's own trusted CAs (on a workplace behind a TLS-intercepting egress proxy, its CA), as
# any machine of that network has them; the chroot's ca-certificates adds them to its bundle.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$R/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$R/usr/local/share/ca-certificates/"
  chroot "$R" update-ca-certificates >/dev/null
fi
rm -rf "$R/root/xdproce"
git clone -q "$HERE" "$R/root/xdproce"
# A mount namespace of its own: the mounts go when it ends. The chroot's root is bound onto
# itself so that it is a mount point (ip netns exec remounts / as a slave).
unshare --mount --propagation private bash -euc '
  R=$1
  mount --bind "$R" "$R"
  for m in proc sys dev; do mount --rbind "/$m" "$R/$m"; done
  mount -t tmpfs tmpfs "$R/run"
  mount -t tmpfs -o size=8g tmpfs "$R/tmp"
  chroot "$R" /usr/bin/env -i HOME=/root PATH=/usr/local/go/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    XDPROCE_REQUIRE_PRIV=1 XDPROCE_INTEROP=0 bash -c "cd /root/xdproce && make test"
' fresh-chroot "$R"
