#!/usr/bin/env bash
# Installs the Debian packages that `make test`'s stages need (run by `make test` and `make deps`).
# As root it installs what is missing (apt-get, one `apt-get update` first); otherwise it names,
# one line each, what to install and which stages will skip without it. The interop guest's own
# packages (qemu, debootstrap) are installed by interop/build-image.sh when it builds the image.
#
#   scripts/deps.sh          check and, as root, install
#   scripts/deps.sh --check  only say what is missing (exit 1 if anything is)
set -uo pipefail

# package  command-it-provides  stages-that-need-it
table=(
  "iproute2   ip        privileged tests (namespaces, veth)"
  "ethtool    ethtool   privileged tests (offloads, channels)"
  "tshark     tshark    capture's dissector cross-checks"
  "clang-19   clang-19  generate-check (bpf2go)"
  "llvm-19    llvm-strip-19 generate-check (bpf2go)"
  "gcc        gcc       race (the race detector needs cgo)"
  "libc6-dev  -         race (the race detector needs cgo)"
  "libcap2-bin setcap   the file-capabilities test"
  "git        git       generate-check, duplicate checks"
  "openssl    openssl   cm/tlsproxy's openssl s_client tests, the tls-proxy CLI test"
  "iperf3     iperf3    scripts/compare-iperf3.sh (bench write against kernel TCP)"
)

missing=() why=()
for row in "${table[@]}"; do
  read -r pkg cmd stages <<<"$row"
  if [ "$cmd" = - ]; then
    dpkg -s "$pkg" >/dev/null 2>&1 && continue
  else
    command -v "$cmd" >/dev/null 2>&1 && continue
  fi
  missing+=("$pkg") why+=("$stages")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "${1:-}" != --check ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null && exit 0
  echo "deps: apt-get install ${missing[*]} failed" >&2
  exit 1
fi
for i in "${!missing[@]}"; do
  echo "deps: missing ${missing[$i]} (apt-get install ${missing[$i]}): ${why[$i]} will skip"
done
[ "${1:-}" = --check ] && exit 1
# Under CI every stage must run: a missing package is a failure there.
[ "${XDPROCE_REQUIRE_PRIV:-}" = 1 ] && { echo "deps: XDPROCE_REQUIRE_PRIV=1 and packages are missing" >&2; exit 1; }
exit 0
