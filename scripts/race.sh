#!/usr/bin/env bash
# Runs the unit tests of every package under the race detector, skipping the
# privileged tests (TestPrivileged*: namespaces, veth, XDP), which stay in
# `make unit`. The race detector needs cgo, so this run alone uses
# CGO_ENABLED=1 (gcc must be installed); the product stays cgo-free.
#
#   scripts/race.sh               every package (go list ./...)
#   scripts/race.sh ./roce/...    the packages given
#
# Set RACE_SHORT=0 to run the long variants too (by default -short).
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
  mapfile -t pkgs < <(go list ./...)
fi
if ! command -v gcc >/dev/null 2>&1; then
  echo "race: skipped, no gcc (apt-get install gcc libc6-dev): the race detector needs cgo"
  [ "${XDPROCE_REQUIRE_PRIV:-}" = 1 ] && exit 1
  exit 0
fi
short=-short
[ "${RACE_SHORT:-1}" = 0 ] && short=
start=$(date +%s)
failed=()
for p in "${pkgs[@]}"; do
  if ! CGO_ENABLED=1 go test -race -count=1 $short -timeout 10m -skip 'Privileged' "$p"; then
    failed+=("$p")
  fi
done
echo "race: ${#pkgs[@]} package(s) in $(( $(date +%s) - start ))s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "race: FAILED: ${failed[*]}"
  exit 1
fi
