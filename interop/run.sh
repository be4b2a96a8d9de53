#!/bin/bash
# run.sh — `make interop`: xdproce against Linux Soft-RoCE (rxe) and the rdma-core/perftest tools.
#
# Builds the guest image once (build-image.sh, cached in $XDPROCE_INTEROP_CACHE or
# /var/cache/xdproce-interop), builds xdproce, boots one guest for the whole suite in its own
# network namespace (198.51.100.1 host side on tap xi0, 198.51.100.2 the guest), runs the Go
# interop tests (TestPrivilegedInterop* in ./interop) against it and prints the matrix
# tool × operation × role → pass/fail. The guest and the namespace are removed on every exit
# path (trap, and guest.sh's --watch on this shell). Needs root. Extra arguments go to go test
# (e.g. -run 'TestPrivilegedInterop/rc_pingpong').
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
GO=${GO:-go}
CACHE=${XDPROCE_INTEROP_CACHE:-/var/cache/xdproce-interop}
export XDPROCE_INTEROP_CACHE=$CACHE
[ "$(id -u)" = 0 ] || { echo "run.sh: the interop suite needs root (network namespace, tap, AF_XDP)" >&2; exit 1; }

"$HERE/build-image.sh" "$CACHE" || exit 1
WORK=$(mktemp -d /tmp/xdproce-interop-run.XXXXXX)
STATE=
cleanup() {
  [ -n "$STATE" ] && "$HERE/guest.sh" down "$STATE"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

(cd "$ROOT" && CGO_ENABLED=0 "$GO" build -o "$WORK/xdproce" ./cmd/xdproce) || { echo "run.sh: building xdproce failed" >&2; exit 1; }
STATE=$("$HERE/guest.sh" up --cache "$CACHE" --state "$WORK/guest" --netns "xdp-iop-$$" --watch $$) || exit 1
echo "run.sh: guest up: $(grep -E '^(kernel|gid1)=' "$STATE/share/info" | tr '\n' ' ')"

export XDPROCE_INTEROP_STATE=$STATE XDPROCE_INTEROP_BIN=$WORK/xdproce XDPROCE_INTEROP_MATRIX=$WORK/matrix.txt
(cd "$ROOT" && "$GO" test -count=1 -timeout 14m -run 'TestPrivilegedInterop' -v ./interop "$@")
rc=$?
[ -f "$WORK/matrix.txt" ] && { echo; cat "$WORK/matrix.txt"; }
exit $rc
