#!/usr/bin/env bash
# Fails when a non-generated, non-test Go file is over 650 lines: a file that long holds
# several jobs (split it along its seams; see docs/contracts.md for the packages' layout).
set -euo pipefail
cd "$(dirname "$0")/.."
max=650
bad=0
while IFS= read -r f; do
  case "$f" in *_test.go) continue ;; esac
  head -n 5 "$f" | grep -q '^// Code generated .* DO NOT EDIT\.$' && continue
  n=$(wc -l <"$f")
  if [ "$n" -gt "$max" ]; then
    echo "filesize: $f has $n lines (at most $max in a non-test Go file)"
    bad=1
  fi
done < <(git ls-files '*.go' 2>/dev/null || find . -name '*.go')
exit $bad
